// The integer linears' epilogue (linear_int_common.wgsl) in f32, for the
// per-element functions of the integer SPIR-V GEMMs (gemm_cm2_int.glsl,
// gemm_sg.glsl with INT8): after their bindings w_scale, bias, x_scale.
// The epilogue of one output of a tile whose first row and column are
// `m0` and `first` (indices clamped into the chunk: outputs past it are
// not stored).
float epilogue(const in uint row, const in uint col, const in float v, const in uint m0, const in uint first) {
    uint m = min(m0 + row, p.m - 1u);
    uint c = min(first + col, p.n_base + p.n - 1u);
    float sw = w_scale[(p.flags & 4u) != 0u ? c : 0u];
    precise float r;
    if ((p.flags & 2u) != 0u) {
        r = v * (x_scale[m] * sw);
    } else {
        r = (v * x_scale[m]) * sw;
    }
    if ((p.flags & 1u) != 0u) {
        r = r + bias[c];
    }
    return r;
}

