// Integer linear on NVIDIA's cooperative matrices 2: int8 activation codes
// x int8 or int4 weights on s8 x s8 -> s32 workgroup-scope matrices, exact
// (the dot4 GEMM's accumulator), then the integer linears' epilogue
// (linear_int_common.wgsl) in f32: (acc · s_x[m]) · s_w[n] (+ b), or
// acc · (s_x[m] · s_w) (+ b), rounded once to the f16 output.
//
// Codes come in natural column order (the quantization's PERM8 off, as for
// the WGSL cooperative GEMM), four a word, and load by tensor addressing
// straight from global memory; int8 weights too, through a transposing
// view. int4 weights have no cooperative type: each K step widens them to
// int8 in a shared tile (the next step's global reads in flight), and B is
// loaded from there. The loop is cm2_main.glsl's; partial tiles as in
// gemm_cm2.glsl. Built by scripts/spirv.sh with: WEIGHT_INT4 (0 or 1), BM,
// BN, BK, WG.
// Dispatch: (ceil(n / BN), ceil(m / BM), 1).
//
// SPLIT 1 (split K): as gemm_cm2.glsl's, the tail's exact s32 partial sums
// in `part` (binding 6), which linear_int_split_sum.wgsl adds up before
// this epilogue, so a split output is the unsplit one bit for bit.

#include "cm2_header.glsl"

// The FAST loop's stride hint: 16 int8 codes or weights in 16 bytes.
#define FAST_ALIGN 16u

// int8 weights [N, K], four a word; int4 [N, K / 2], eight two's-complement
// nibbles a word, nibble e of word j being column 8j + e.
layout(set = 0, binding = 0, std430) readonly buffer Weights { uint w[]; };
layout(set = 0, binding = 1, std430) readonly buffer WeightScale { float w_scale[]; };
layout(set = 0, binding = 2, std430) readonly buffer Bias { float bias[]; };
// Activation codes [M, K], four a word.
layout(set = 0, binding = 3, std430) readonly buffer Codes { uint xq[]; };
layout(set = 0, binding = 4, std430) readonly buffer CodeScale { float x_scale[]; };
layout(set = 0, binding = 5, std430) writeonly buffer Out { float16_t y[]; };
#if SPLIT
layout(set = 0, binding = 6, std430) writeonly buffer Part { int part[]; };
#include "cm2_split.glsl"
#endif

#include "cm2_store.glsl"

#include "cm2_int_epilogue.glsl"
#if WEIGHT_INT4
// Row pitch of the shared int8 weight tile in words: 16 bytes of skew.
const uint B_PITCH = BK / 4u + 4u;
shared uint b_sh[BN * B_PITCH];
#define W_RAW uint
#define W_PER 8u
#include "cm2_stage.glsl"

// Four sign-extended nibbles (from nibble `first`) as four int8 bytes.
uint widen(uint v, uint first) {
    uint r = 0u;
    for (uint e = 0u; e < 4u; e++) {
        uint t = (v >> (4u * (first + e))) & 0xFu;
        r |= (((t ^ 8u) - 8u) & 0xFFu) << (8u * e);
    }
    return r;
}

void put_w(uint i, uint v) {
    uint row;
    uint col;
    if (staged_at(i, row, col)) {
        // Eight int8 columns are two words.
        uint at = row * B_PITCH + col / 4u;
        b_sh[at] = widen(v, 0u);
        b_sh[at + 1u] = widen(v, 4u);
    }
}
#endif

// f32(acc) as the WGSL epilogue converts it, then the scales and bias, and
// the store.
void finish(coopmat<int32_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc, uint m0, uint n0) {
#if SPLIT
    if (!whole_tile()) {
        STORE_PART(acc, m0, n0);
        return;
    }
#endif
    coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> v =
        coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
    coopMatPerElementNV(v, v, epilogue, m0, p.n_base + n0);
    store_tile(v, m0, n0);
}

#define A_T int8_t
#define ACC_T int32_t
#define ACT xq
#define STAGED WEIGHT_INT4
#include "cm2_main.glsl"
