// GELU (tanh approximation, `F.gelu(approximate="tanh")`) in f32, as
// shaders/wgsl/gelu.wgsl computes it: tanh from one exp of a non-positive
// argument (never overflows). For the SPIR-V GEMMs' epilogue (flags bit 3).
float gelu_tanh(const in float v) {
    float u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
    float t = exp(-2.0 * abs(u));
    float r = (1.0 - t) / (1.0 + t);
    return 0.5 * v * (1.0 + (u < 0.0 ? -r : r));
}
