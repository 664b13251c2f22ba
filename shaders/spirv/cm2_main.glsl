// The main loop of the cooperative-matrix-2 linears (gemm_cm2.glsl,
// gemm_cm2_int.glsl): one BM x BN output tile a workgroup, one
// workgroup-scope accumulator, BK columns of K a step. A is loaded by
// tensor addressing from `ACT`; B from the weights `w` through a
// transposing view (W is [N, K], B its transpose), or, with STAGED, from
// the shared tile `put_w` fills each step (the next step's global reads,
// `fetch_w`, in flight meanwhile). Loads past M, N and K read 0.
//
// SPLIT 1: split K. Workgroup row y is row tile `split_row_tile` of split
// `split_of`, which sums K columns [split · k_span, + k_span) — all of K
// where `whole_tile` — and hands `finish` its sums.
//
// needs: A_T, ACC_T, ACT, STAGED, finish, w
// STACK: included once per weight with TILE_FN (the function of one output
// tile, called with its first column), W_BUF, N_ROWS and FINISH naming that
// weight's buffer, rows and epilogue; the includer's main picks the weight.
// needs with SPLIT: split_of, split_row_tile, whole_tile
// needs with STAGED: B_PITCH (of `b_sh`'s elements), LOADS, W_RAW, b_sh,
// fetch_w, put_w

#define CLAMP gl_CooperativeMatrixClampModeConstantNV

// FAST 1: tiles wholly inside M and N, with K a multiple of BK and of
// FAST_ALIGN (the elements in 16 bytes), load through unclamped layouts
// whose row stride is known to be a multiple of 16 bytes, FAST_UNROLL steps unrolled, so the compiler can
// overlap one step's loads with another's products (1.6x on the H100 at
// FLUX.1's shapes, BENCHMARKS.md session 24); other tiles take the clamped
// loop.
#ifndef FAST
#define FAST 0
#endif
#ifndef W_BUF
#define W_BUF w
#define N_ROWS p.n
#define FINISH finish
#endif
#ifndef SPLIT
#define SPLIT 0
#endif
#ifndef FAST_ALIGN
#define FAST_ALIGN 8u
#endif

// A K column the compiler knows is a multiple of BK: a split's steps
// start at a runtime k_lo, and loads it cannot prove aligned ran 5x slower
// (the H100, session 29); unsplit, k0 is 0 + BK · i as it stands.
#if SPLIT
#define K_AT(kk) ((kk) & ~(BK - 1u))
#else
#define K_AT(kk) (kk)
#endif

// A of the K step at `kk` through layout TX.
#define LOAD_A(a, TX, kk) \
    coopMatLoadTensorNV(a, ACT, 0u, sliceTensorLayoutNV(TX, m0, BM, K_AT(kk), BK))

#if STAGED
// B from the shared tile `put_w` fills (TW unused; the step is k0's): the
// previous step's products are done with it; the next step's global reads
// go out before this one's products.
#define LOAD_B(b, TW)                                                          \
    barrier();                                                                 \
    for (uint i = 0u; i < LOADS; i++) {                                        \
        put_w(i, r[i]);                                                        \
    }                                                                          \
    barrier();                                                                 \
    if (k0 + BK < k_hi) {                                                      \
        for (uint i = 0u; i < LOADS; i++) {                                    \
            r[i] = fetch_w(n0, k0 + BK, i);                                    \
        }                                                                      \
    }                                                                          \
    coopMatLoad(b, b_sh, 0u, B_PITCH, gl_CooperativeMatrixLayoutColumnMajor)
#else
// B of the K step at k0 through layout TW: weight rows are B's columns,
// B[k][n] = W[n][k] through `transpose`.
#define LOAD_B(b, TW)                                                          \
    coopMatLoadTensorNV(b, W_BUF, 0u, sliceTensorLayoutNV(TW, n0, BN, K_AT(k0), BK), transpose)
#endif

// The K step at k0 through layouts TX and TW.
#define K_STEP(TX, TW)                                                         \
    {                                                                          \
        coopmat<A_T, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> a;              \
        LOAD_A(a, TX, k0);                                                     \
        coopmat<A_T, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> b;              \
        LOAD_B(b, TW);                                                         \
        acc = coopMatMulAdd(a, b, acc);                                        \
    }

#if STACK
void TILE_FN(uint n0) {
#elif PERSIST
void one_tile(uint n0, uint m0) {
#else
void main() {
    uint n0 = tile_of().x * BN;
#endif
#if SPLIT
    uint m0 = split_row_tile() * BM;
    uint span = whole_tile() ? p.k : (p.k_span & ~255u);
    uint k_lo = split_of() * span;
    // An empty split (past K) stores zeros.
    uint k_hi = max(k_lo, min(p.k, k_lo + span));
#else
#if !PERSIST
    uint m0 = tile_of().y * BM;
#endif
    // The whole of K, as the compiler sees it without a split.
#define k_lo 0u
#define k_hi p.k
#endif

    tensorLayoutNV<2, CLAMP> t_x = createTensorLayoutNV(2, CLAMP);
    t_x = setTensorLayoutDimensionNV(t_x, p.m, p.k);
    t_x = setTensorLayoutClampValueNV(t_x, 0u);
#if STAGED
#define t_w t_x
#else
    tensorLayoutNV<2, CLAMP> t_w = createTensorLayoutNV(2, CLAMP);
    t_w = setTensorLayoutDimensionNV(t_w, N_ROWS, p.k);
    t_w = setTensorLayoutClampValueNV(t_w, 0u);
    tensorViewNV<2, false, 1, 0> transpose = createTensorViewNV(2, false, 1, 0);
#endif

    coopmat<ACC_T, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
        coopmat<ACC_T, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(ACC_T(0));

#if STAGED
    W_RAW r[LOADS];
    for (uint i = 0u; i < LOADS; i++) {
        r[i] = fetch_w(n0, k_lo, i);
    }
#endif
#if FAST
    if (m0 + BM <= p.m && n0 + BN <= N_ROWS && p.k % BK == 0u && p.k % FAST_ALIGN == 0u) {
        // The stride's hint: rows start on 16 bytes.
        uint stride = p.k & ~(FAST_ALIGN - 1u);
        tensorLayoutNV<2> u_x = createTensorLayoutNV(2);
        u_x = setTensorLayoutDimensionNV(u_x, p.m, p.k);
        u_x = setTensorLayoutStrideNV(u_x, stride, 1u);
#if STAGED
#define u_w u_x
#else
        tensorLayoutNV<2> u_w = createTensorLayoutNV(2);
        u_w = setTensorLayoutDimensionNV(u_w, N_ROWS, p.k);
        u_w = setTensorLayoutStrideNV(u_w, stride, 1u);
#endif
        uint k0 = k_lo;
#if SPLIT
        for (uint g = (k_hi - k_lo) / (BK * FAST_UNROLL); g > 0u; g--) {
#else
        for (uint g = p.k / (BK * FAST_UNROLL); g > 0u; g--) {
#endif
            [[unroll]] for (uint j = 0u; j < FAST_UNROLL; j++) {
                K_STEP(u_x, u_w)
                k0 += BK;
            }
        }
        for (; k0 < k_hi; k0 += BK) {
            K_STEP(u_x, u_w)
        }
    } else
#endif
    {
        for (uint k0 = k_lo; k0 < k_hi; k0 += BK) {
            K_STEP(t_x, t_w)
        }
    }
    FINISH(acc, m0, n0);
}

#if PERSIST
void main() {
    uint tx = (N_ROWS + BN - 1u) / BN;
    uint ty = (p.m + BM - 1u) / BM;
    uint workgroups = gl_NumWorkGroups.x * gl_NumWorkGroups.y;
    for (uint t = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; t < tx * ty; t += workgroups) {
        uvec2 at = tile_at(t, tx, ty);
        one_tile(at.x * BN, at.y * BM);
    }
}
#endif
