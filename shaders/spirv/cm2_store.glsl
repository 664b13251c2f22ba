// Stores a BM x BN f32 accumulator tile as f16 at output (m0, n_base + n0)
// of the layer's [M, out_stride] output `y`, bounded at M and at the
// chunk's last column (stores past them are dropped). For the
// cooperative-matrix-2 linears, after their bindings.
//
// STACK kernels include it once per weight with STORE_FN, Y_BUF, Y_N_BASE,
// Y_N (the last column + 1) and Y_STRIDE naming that weight's output.
#ifndef STORE_FN
#define STORE_FN store_tile
#define Y_BUF y
#define Y_N_BASE p.n_base
#define Y_N (p.n_base + p.n)
#define Y_STRIDE p.out_stride
#endif
void STORE_FN(coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc, uint m0, uint n0) {
    coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> tile =
        coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> t_y =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    t_y = setTensorLayoutDimensionNV(t_y, p.m, Y_N);
    t_y = setTensorLayoutStrideNV(t_y, Y_STRIDE, 1u);
    coopMatStoreTensorNV(tile, Y_BUF, 0u, sliceTensorLayoutNV(t_y, m0, BM, Y_N_BASE + n0, BN));
}
