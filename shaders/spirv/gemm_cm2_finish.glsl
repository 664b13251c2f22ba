// The float linears' epilogue (gemm_cm2.glsl, unsplit): the bias where
// flagged (bit 0), GELU (tanh) where flagged (bit 3), then the store, for
// the output cm2_store.glsl's macros name.
// STACK kernels include it (with cm2_store.glsl) once per weight with
// BIAS_FN, BIAS_BUF and FINISH naming that weight's.
#include "cm2_store.glsl"
#ifndef BIAS_FN
#define BIAS_FN add_bias
#define BIAS_BUF bias
#define FINISH finish
#endif

// The bias of output column `col` of a tile whose first column is `first`
// (clamped into the chunk: columns past it are not stored).
float BIAS_FN(const in uint row, const in uint col, const in float v, const in uint first) {
    uint c = min(first + col, Y_N - 1u);
    return v + BIAS_BUF[c];
}

// Adds the bias and takes GELU (where asked) and stores the tile.
void FINISH(coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc, uint m0, uint n0) {
    if ((p.flags & 1u) != 0u) {
        coopMatPerElementNV(acc, acc, BIAS_FN, Y_N_BASE + n0);
    }
    if ((p.flags & 8u) != 0u) {
        coopMatPerElementNV(acc, acc, gelu_tanh_of);
    }
    STORE_FN(acc, m0, n0);
}
