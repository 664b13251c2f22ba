// The split-K cooperative-matrix-2 GEMMs' workgroups (SPLIT 1 in
// gemm_cm2.glsl and gemm_cm2_int.glsl): the first `p.whole` row tiles of
// the grid take all of K, then each further row tile (the tail) is
// `splits` workgroups, one a split of K, whose partial sums go to `part`
// ([tail rows, n] a split, one after another) for a launch that adds them.
// After the push constants and the binding `part`.

// The row tiles of the tail, the split ones.
uint tail_tiles() {
    return (p.m + BM - 1u) / BM - p.whole;
}

// Whether this workgroup's tile takes the whole of K.
bool whole_tile() {
    return gl_WorkGroupID.y < p.whole;
}

// The split of this workgroup's K columns (0 for a whole tile).
uint split_of() {
    return whole_tile() ? 0u : (gl_WorkGroupID.y - p.whole) / tail_tiles();
}

// This workgroup's row tile.
uint split_row_tile() {
    return whole_tile() ? gl_WorkGroupID.y : p.whole + (gl_WorkGroupID.y - p.whole) % tail_tiles();
}

// Stores a tail tile's partial sums as they are (bounded at M and the
// chunk's columns) at its split's [m - whole · BM, n] block of `part`.
#define STORE_PART(acc, m0, n0)                                                                   \
    {                                                                                             \
        uint row0 = p.whole * BM;                                                                 \
        uint rows = p.m - row0;                                                                   \
        tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> t =                            \
            createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);                     \
        t = setTensorLayoutDimensionNV(t, rows, p.n);                                             \
        t = setTensorLayoutStrideNV(t, p.n, 1u);                                                  \
        coopMatStoreTensorNV(acc, part, split_of() * rows * p.n,                                  \
                             sliceTensorLayoutNV(t, (m0) - row0, BM, n0, BN));                    \
    }
