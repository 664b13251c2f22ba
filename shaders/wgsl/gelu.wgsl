// GELU, tanh approximation (`F.gelu(approximate="tanh")`), in f32: for
// elementwise.wgsl, dit.wgsl and linear_split_sum.wgsl (the SPIR-V GEMMs'
// epilogue, cm2_header.glsl, computes it the same way).
//
// provides: gelu_tanh

// 0.5·h·(1 + tanh(u)) is h·sigmoid(2u) = h / (1 + e^(-2u)): one exp and
// one division, no select. Past the exp's range the quotient is still
// right: e^(-2u) = inf gives -0 (h very negative), 0 gives h.
fn gelu_tanh(h: f32) -> f32 {
    // 2·sqrt(2 / pi), and that times 0.044715
    let u2 = h * (1.5957691216057308 + 0.07135481627260025 * h * h);
    return h / (1.0 + exp(-u2));
}
