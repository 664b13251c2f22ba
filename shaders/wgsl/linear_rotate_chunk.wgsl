// One chunk of a small-M row rotated, for linear_rotate_max.wgsl and
// linear_rotate_codes.wgsl, after linear_fht.wgsl: values [c0, c0 + CHUNK)
// of the row at `base` (fewer at its end)
//   * (NORM) RMS-normalised as the float GEMVs' folded norm does it
//     (linear_gemv_in_norm.wgsl: every workgroup sums the row's squares
//     itself, within an ulp or so of the norm kernel), rounded to `act` as a
//     stored norm output would be;
//   * rotated in groups of G (the same butterflies as every rotation kernel;
//     G = 1: none), written to y in f32;
// and the chunk's absmax bits returned to every invocation (|v| as u32: max
// over u32 is the fused kernels' atomicMax, NaN included). G a power of 4
// dividing K and CHUNK.
//
// needs: fht, norm_w, x, y
// provides: CHUNK, G, WGS, fht_v, rotate_chunk

override G: u32 = 64u;
// Invocations per workgroup (a power of two).
override WGS: u32 = 256u;
// Values per workgroup (a power of two, a multiple of G).
override CHUNK: u32 = 1024u;
override NORM: bool = false;

var<workgroup> fht_v: array<f32, CHUNK>;
var<workgroup> red_f: array<f32, WGS>;
var<workgroup> red_u: array<u32, WGS>;

// 1/sqrt(mean(x²) + eps) of the row of `k` values starting at `base`.
fn inv_rms(lid: u32, base: u32, k: u32, eps_bits: u32) -> f32 {
    var s = 0.0;
    for (var i = lid; i < k; i += WGS) {
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
    return 1.0 / sqrt(red_f[0] / f32(k) + bitcast<f32>(eps_bits));
}

// Rotates the chunk at c0 of the row of `k` values at `base` into y and
// returns its absmax bits.
fn rotate_chunk(lid: u32, base: u32, c0: u32, k: u32, eps_bits: u32) -> u32 {
    let len = min(CHUNK, k - c0);
    var r = 1.0;
    if NORM {
        r = inv_rms(lid, base, k, eps_bits);
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
    return red_u[0];
}
