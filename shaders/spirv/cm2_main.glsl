// The main loop of the cooperative-matrix-2 linears (gemm_cm2.glsl,
// gemm_cm2_int.glsl): one BM x BN output tile a workgroup, one
// workgroup-scope accumulator, BK columns of K a step. A is loaded by
// tensor addressing from `ACT`; B from the weights `w` through a
// transposing view (W is [N, K], B its transpose), or, with STAGED, from
// the shared tile `put_w` fills each step (the next step's global reads,
// `fetch_w`, in flight meanwhile). Loads past M, N and K read 0.
//
// needs: A_T, ACC_T, ACT, STAGED, finish, w
// needs with STAGED: B_PITCH (of `b_sh`'s elements), LOADS, W_RAW, b_sh,
// fetch_w, put_w

#define CLAMP gl_CooperativeMatrixClampModeConstantNV

void main() {
    uint n0 = gl_WorkGroupID.x * BN;
    uint m0 = gl_WorkGroupID.y * BM;

    tensorLayoutNV<2, CLAMP> t_x = createTensorLayoutNV(2, CLAMP);
    t_x = setTensorLayoutDimensionNV(t_x, p.m, p.k);
    t_x = setTensorLayoutClampValueNV(t_x, 0u);
#if !STAGED
    tensorLayoutNV<2, CLAMP> t_w = createTensorLayoutNV(2, CLAMP);
    t_w = setTensorLayoutDimensionNV(t_w, p.n, p.k);
    t_w = setTensorLayoutClampValueNV(t_w, 0u);
    // B[k][n] = W[n][k].
    tensorViewNV<2, false, 1, 0> transpose = createTensorViewNV(2, false, 1, 0);
#endif

    coopmat<ACC_T, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
        coopmat<ACC_T, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(ACC_T(0));

#if STAGED
    W_RAW r[LOADS];
    for (uint i = 0u; i < LOADS; i++) {
        r[i] = fetch_w(n0, 0u, i);
    }
#endif
    for (uint k0 = 0u; k0 < p.k; k0 += BK) {
        coopmat<A_T, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> a;
        coopMatLoadTensorNV(a, ACT, 0u, sliceTensorLayoutNV(t_x, m0, BM, k0, BK));
        coopmat<A_T, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> b;
#if STAGED
        // The previous step's products are done with the tile.
        barrier();
        for (uint i = 0u; i < LOADS; i++) {
            put_w(i, r[i]);
        }
        barrier();
        if (k0 + BK < p.k) {
            for (uint i = 0u; i < LOADS; i++) {
                r[i] = fetch_w(n0, k0 + BK, i);
            }
        }
        // Weight rows are B's columns: column-major with the tile's pitch.
        coopMatLoad(b, b_sh, 0u, B_PITCH, gl_CooperativeMatrixLayoutColumnMajor);
#else
        coopMatLoadTensorNV(b, w, 0u, sliceTensorLayoutNV(t_w, n0, BN, k0, BK), transpose);
#endif
        acc = coopMatMulAdd(a, b, acc);
    }
    finish(acc, m0, n0);
}
