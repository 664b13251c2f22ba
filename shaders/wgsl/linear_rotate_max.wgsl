// Rotation of small-M rows spread over many workgroups, with each chunk's
// absmax: the input of the integer GEMVs that make their activation codes
// themselves (linear_gemv_in_rotated.wgsl), after linear_fht.wgsl. The
// fused kernels (linear_rotate_quant*.wgsl) give a row one workgroup, so a
// decode step paid ~15 µs of one busy SM per quantized linear; here
// workgroup (c, row) takes values [c · CHUNK, (c + 1) · CHUNK) of the row:
//   * (NORM) RMS-normalised as the float GEMVs' folded norm does it
//     (linear_gemv_in_norm.wgsl: every workgroup sums the row's squares
//     itself, within an ulp or so of the norm kernel), rounded to `act` as a
//     stored norm output would be;
//   * rotated in groups of G (the same butterflies as every rotation kernel;
//     G = 1: none), written to y in f32;
//   * its absmax's bits (|v| as u32: max over u32 is the fused kernels'
//     atomicMax, NaN included) to pmax[row · chunks + c].
// Dispatch (chunks, rows). G a power of 4 dividing K and CHUNK.
//
// needs: fht
// provides: G, fht_v

override G: u32 = 64u;
// Invocations per workgroup (a power of two).
override WGS: u32 = 256u;
// Values per workgroup (a power of two, a multiple of G).
override CHUNK: u32 = 1024u;
override NORM: bool = false;

struct Params {
    rows: u32,
    k: u32,
    // Workgroups per row: ceil(k / CHUNK).
    chunks: u32,
    // The RMS norm's epsilon as f32 bits.
    eps_bits: u32,
    // The linear kernels' 32-byte immediates are shared by every module.
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    _pad3: u32,
}

@group(0) @binding(0) var<storage, read> x: array<act>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read_write> pmax: array<u32>;
@group(0) @binding(3) var<storage, read> norm_w: array<f32>;
var<immediate> p: Params;

var<workgroup> fht_v: array<f32, CHUNK>;
var<workgroup> red_f: array<f32, WGS>;
var<workgroup> red_u: array<u32, WGS>;

// 1/sqrt(mean(x²) + eps) of the row starting at `base`.
fn inv_rms(lid: u32, base: u32) -> f32 {
    var s = 0.0;
    for (var i = lid; i < p.k; i += WGS) {
        let v = f32(x[base + i]);
        s += v * v;
    }
    red_f[lid] = s;
    workgroupBarrier();
    for (var h = WGS / 2u; h > 0u; h = h / 2u) {
        if lid < h {
            red_f[lid] += red_f[lid + h];
        }
        workgroupBarrier();
    }
    return 1.0 / sqrt(red_f[0] / f32(p.k) + bitcast<f32>(p.eps_bits));
}

@compute @workgroup_size(WGS)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.y;
    let c0 = wid.x * CHUNK;
    if row >= p.rows || c0 >= p.k {
        return;
    }
    let base = row * p.k;
    let len = min(CHUNK, p.k - c0);
    var r = 1.0;
    if NORM {
        r = inv_rms(lid, base);
    }
    for (var i = lid; i < len; i += WGS) {
        var v = f32(x[base + c0 + i]);
        if NORM {
            v = f32(act(norm_w[c0 + i] * (v * r)));
        }
        fht_v[i] = v;
    }
    workgroupBarrier();
    fht(lid, WGS, len);
    var m = 0u;
    for (var i = lid; i < len; i += WGS) {
        let v = fht_v[i];
        y[base + c0 + i] = v;
        m = max(m, bitcast<u32>(abs(v)));
    }
    red_u[lid] = m;
    workgroupBarrier();
    for (var h = WGS / 2u; h > 0u; h = h / 2u) {
        if lid < h {
            red_u[lid] = max(red_u[lid], red_u[lid + h]);
        }
        workgroupBarrier();
    }
    if lid == 0u {
        pmax[row * p.chunks + wid.x] = red_u[0];
    }
}
