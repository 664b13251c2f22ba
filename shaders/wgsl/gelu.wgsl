// GELU, tanh approximation (`F.gelu(approximate="tanh")`), in f32: for
// elementwise.wgsl, dit.wgsl and linear_split_sum.wgsl (the SPIR-V GEMMs'
// epilogue, cm2_header.glsl, computes it the same way).
//
// provides: gelu_tanh

// tanh from one exp of a non-positive argument: never overflows, unlike
// the (e^2x - 1) / (e^2x + 1) form some drivers use for tanh().
fn tanh_stable(x: f32) -> f32 {
    let t = exp(-2.0 * abs(x));
    let r = (1.0 - t) / (1.0 + t);
    return select(r, -r, x < 0.0);
}

fn gelu_tanh(h: f32) -> f32 {
    // sqrt(2 / pi)
    let k = 0.7978845608028654;
    return 0.5 * h * (1.0 + tanh_stable(k * (h + 0.044715 * h * h * h)));
}
