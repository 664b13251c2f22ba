// The integer multi-row GEMV's activation codes as a quantization kernel
// (or linear_rotated_codes.wgsl, from spread-rotated rows) left them
// (linear_int_gemv_rows.wgsl): code quads at binding 8, one scale per row
// in the common fragment's x_scale.
//
// needs: p, x_scale
// provides: gv_code_scale, gv_codes, gv_codes_begin

@group(0) @binding(8) var<storage, read> xv: array<vec4<u32>>;

fn gv_codes_begin(lid: u32) {}

// Code quad j (columns 16j..16j+15) of activation row m.
fn gv_codes(m: u32, j: u32) -> vec4<u32> {
    return xv[m * (p.k / 16u) + j];
}

fn gv_code_scale(m: u32) -> f32 {
    return x_scale[m];
}
