// The float multi-row GEMV's activations RMS-normalised
// (linear_float_gemv_rows.wgsl): `x` is the residual stream, the GEMV
// computes act(r_m · Σ_k W[n,k] · (norm_w[k] · x[m,k])) with
// r_m = 1/sqrt(mean(x_m²) + eps), the norm's scalar factored out of the
// dot product. Each invocation sums the squares of the x values it loads
// anyway (together the workgroup loads every row once), and those MR sums
// ride in the body's final reduction: no extra loads, barriers or launch —
// the norm's own launch and the barrier before the GEMV go away. Unlike
// the separate norm, the normalised row is not rounded to `act` before the
// products (closer to the exact value; within that rounding of the
// separate launches, tested). eps is the Params' last word (f32 bits). The
// host keeps MR <= 4 so the sums fit the reduction.
//
// needs: MR, gv_out, p, x
// provides: gv_in, gv_in_put, gv_in_scale, gv_in_sums
//

@group(0) @binding(7) var<storage, read> norm_w: array<vec4<f32>>;

// This invocation's sums of squares of each row (MR <= 4).
var<private> gv_ss: array<f32, 4>;

fn gv_in(m: u32, i: u32) -> vec4<f32> {
    let v = vec4<f32>(x[m * (p.k / 4u) + i]);
    gv_ss[min(m, 3u)] += dot(v, v);
    return norm_w[i] * v;
}

fn gv_in_sums() -> u32 {
    return MR;
}

fn gv_in_put(bits: ptr<function, array<u32, 64>>, at: u32) {
    for (var m = 0u; m < MR; m++) {
        (*bits)[at + m] = bitcast<u32>(gv_ss[min(m, 3u)]);
    }
}

fn gv_in_scale(at: u32, m: u32) -> f32 {
    return 1.0 / sqrt(bitcast<f32>(gv_out[at + m]) / f32(p.k) + bitcast<f32>(p.eps_bits));
}
