// Stores a BM x BN f32 accumulator tile as f16 at output (m0, n_base + n0)
// of the layer's [M, out_stride] output `y`, bounded at M and at the
// chunk's last column (stores past them are dropped). For the
// cooperative-matrix-2 linears, after their bindings.
void store_tile(coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc, uint m0, uint n0) {
    coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> tile =
        coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> t_y =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    t_y = setTensorLayoutDimensionNV(t_y, p.m, p.n_base + p.n);
    t_y = setTensorLayoutStrideNV(t_y, p.out_stride, 1u);
    coopMatStoreTensorNV(tile, y, 0u, sliceTensorLayoutNV(t_y, m0, BM, p.n_base + n0, BN));
}
