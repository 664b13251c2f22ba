// GELU (tanh approximation, `F.gelu(approximate="tanh")`) in f32, as
// shaders/wgsl/gelu.wgsl computes it: h · sigmoid(2u) = h / (1 + e^(-2u)).
// For the SPIR-V GEMMs' epilogue (flags bit 3).
float gelu_tanh(const in float v) {
    float u2 = v * (1.5957691216057308 + 0.07135481627260025 * v * v);
    return v / (1.0 + exp(-u2));
}
