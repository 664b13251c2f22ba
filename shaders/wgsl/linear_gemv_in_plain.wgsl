// The float multi-row GEMV's activations as stored (linear_float_gemv_rows.wgsl):
// `gv_in(m, i)` is vec4 i of activation row m. linear_gemv_in_norm.wgsl is
// the variant that RMS-normalises the rows on the way in.
//
// needs: p, x
// provides: gv_in, gv_in_begin

// Nothing to prepare.
fn gv_in_begin(lid: u32) {
}

fn gv_in(m: u32, i: u32) -> vec4<f32> {
    return vec4<f32>(x[m * (p.k / 4u) + i]);
}
