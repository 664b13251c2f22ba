// The push constants of the cooperative-matrix-2 linears (gemm_cm2.glsl,
// gemm_cm2_int.glsl, linear_check.comp): `Cm2Params` of
// gpu/src/ops/linear/record/cm2.rs, the WGSL linears' `GemmParams` layout
// with flags in the fused GEMV's `n1` word.
#ifndef STACK
#define STACK 0
#endif
layout(push_constant) uniform Params {
    uint m;
    // Weight rows in this dispatch (one binding's chunk of N).
    uint n;
    uint k;
    // Output column (and bias index) of the chunk's first row.
    uint n_base;
    // Row stride of the output: the layer's full N.
    uint out_stride;
    // Bit 0: add the bias. Integer layers: bit 1, acc · (s_x · s_w) (else
    // (acc · s_x) · s_w); bit 2, a weight scale per output row (else one).
    // Float layers: bit 3, GELU (tanh) after the bias.
    uint flags;
#if STACK
    // STACK kernels: rows of the second and third weights (0: none).
    uint n1;
    uint n2;
#else
    // SPLIT kernels: K columns of one split (a multiple of BK · FAST_UNROLL),
    // and the row tiles before the split ones that take all of K.
    uint k_span;
    uint whole;
#endif
} p;
