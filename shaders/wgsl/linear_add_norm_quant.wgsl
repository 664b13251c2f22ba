// The residual add and RMS norm before integer linears, with their rotation
// and activation quantization, in one dispatch: add_rms_norm (norm.wgsl)
// and linear_rotate_quant.wgsl back to back, after linear_gemv_tree.wgsl,
// linear_fht.wgsl and linear_act_codes.wgsl. One WGS-wide workgroup per row;
// the whole row stays in workgroup memory (K <= FHT_CHUNK):
//   xs += delta (rounded to `act`, stored)
//   h = act(w · (xs · 1/sqrt(mean(xs²) + eps)))   (stored: other readers)
//   y = rotate(h) (f32, stored), then h's scale and codes from y.
// The same arithmetic in the same order as the two launches: the sums of
// squares in norm.wgsl's order when WGS is the norm's workgroup size (the
// host checks), the rotation and codes as linear_rotate_quant.wgsl makes
// them. With f32 activations every value is the same bit for bit; with f16,
// NVIDIA's and Mesa 26's compilers round some norm outputs of the two
// kernels one ulp apart (tested to that bound).
//
// needs: GV_FADD, GV_UMAX, fht, gv_out, gv_tree, qp, write_codes
// provides: G, WGS, act_value, fht_v

// The group size: a power of 4 dividing K; 1 (no stage) for unrotated layers.
override G: u32 = 256u;
// Invocations per workgroup (a power of two, 64..=1024).
override WGS: u32 = 1024u;
// Workgroup memory for the row: a power of two >= K.
override FHT_CHUNK: u32 = 4096u;

@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read_write> xs: array<act>;
@group(0) @binding(6) var<storage, read> delta: array<act>;
@group(0) @binding(7) var<storage, read> norm_w: array<f32>;
@group(0) @binding(8) var<storage, read_write> h: array<act>;

var<workgroup> fht_v: array<f32, FHT_CHUNK>;

fn act_value(row_base: u32, col: u32) -> f32 {
    return fht_v[col];
}

@compute @workgroup_size(WGS)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.x + wid.y * 65535u;
    if row >= qp.rows {
        return;
    }
    let base = row * qp.k;
    // Column lid + u·WGS for u = 0, 1, …: norm.wgsl's order per invocation.
    var ss = 0.0;
    for (var u = 0u; u < FHT_CHUNK / WGS; u++) {
        let i = lid + u * WGS;
        if i < qp.k {
            let v = act(f32(xs[base + i]) + f32(delta[base + i]));
            xs[base + i] = v;
            fht_v[i] = f32(v);
            ss = ss + f32(v) * f32(v);
        }
    }
    var sums: array<u32, 64>;
    sums[0] = bitcast<u32>(ss);
    gv_tree(&sums, 1u, lid, GV_FADD);
    let r = 1.0 / sqrt(bitcast<f32>(gv_out[0]) / f32(qp.k) + bitcast<f32>(qp.eps_bits));
    for (var u = 0u; u < FHT_CHUNK / WGS; u++) {
        let i = lid + u * WGS;
        if i < qp.k {
            let hv = act(norm_w[i] * (fht_v[i] * r));
            h[base + i] = hv;
            fht_v[i] = f32(hv);
        }
    }
    workgroupBarrier();
    fht(lid, WGS, qp.k);
    var m = 0.0;
    for (var u = 0u; u < FHT_CHUNK / WGS; u++) {
        let i = lid + u * WGS;
        if i < qp.k {
            let v = fht_v[i];
            y[base + i] = v;
            m = max(m, abs(v));
        }
    }
    var mv: array<u32, 64>;
    mv[0] = bitcast<u32>(m);
    gv_tree(&mv, 1u, lid, GV_UMAX);
    write_codes(row, lid, WGS, bitcast<f32>(gv_out[0]));
}
