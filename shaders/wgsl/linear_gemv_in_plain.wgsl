// The float multi-row GEMV's activations as stored (linear_float_gemv_rows.wgsl):
// `gv_in(m, i)` is vec4 i of activation row m. linear_gemv_in_norm.wgsl is
// the variant that RMS-normalises the rows; both give the body sums to add
// to its reduction (`gv_in_sums` of them, put by `gv_in_put`) and a scale
// per row for its epilogue (`gv_in_scale`).
//
// needs: p, x
// provides: gv_in, gv_in_put, gv_in_scale, gv_in_sums
//

fn gv_in(m: u32, i: u32) -> vec4<f32> {
    return vec4<f32>(x[m * (p.k / 4u) + i]);
}

fn gv_in_sums() -> u32 {
    return 0u;
}

fn gv_in_put(bits: ptr<function, array<u32, 64>>, at: u32) {
}

fn gv_in_scale(at: u32, m: u32) -> f32 {
    return 1.0;
}
