// Float linear on NVIDIA's cooperative matrices 2 (VK_NV_cooperative_matrix2):
// out[m, n_base + n] = f16(sum_k x[m, k] · W[n, k] + bias[n_base + n]), the
// contract of linear_gemm_coop.wgsl's float path (f16 activations and
// output, f32 sums, the bias added in f32 before the one rounding to f16).
//
// One workgroup computes a BM x BN output tile as one workgroup-scope
// accumulator: the driver splits it over the workgroup's subgroups and
// stages operands through shared memory itself. Activations are loaded by
// tensor addressing straight from global memory; f16 weights too, through
// a transposing view (W is [N, K], B is its transpose). bf16 weights have
// no cooperative type in this compiler, so each K step converts them to f16
// in a shared tile (the next step's global reads in flight meanwhile), and
// B is loaded from there.
//
// The loop is cm2_main.glsl's. Partial tiles: the tensor layouts clamp
// with the constant 0 past M, N and K (loads) and drop stores past M and
// the chunk's last column, so no shape needs padding. Built by scripts/spirv.sh with:
//   WEIGHT_BF16 (0 or 1), BM, BN, BK, WG (invocations)
// Dispatch: (ceil(n / BN), ceil(m / BM), 1).
//
// SPLIT 1 (split K: grids too small to fill the GPU, or the tiles of a
// grid's last, partly filled wave): the first `whole` row tiles take all of
// K with the epilogue above, into `y`; the rest, rows [whole · BM, m), are
// split. The dispatch is (ceil(n / BN), whole + tail · splits, 1), tail =
// ceil(m / BM) - whole, and each split writes its f32 partial sums of the
// tail's rows, no bias, to its own [m - whole · BM, n] tile of `part`
// (binding 5) at element split · (m - whole · BM) · n;
// linear_split_sum.wgsl adds them up, adds the bias and rounds once to f16.
// The whole tiles come first in the grid, so the split ones fill the wave
// the whole ones leave partly empty.
//
// STACK 3 (q/k/v, gate/up at prefill: launches of one input whose grids
// each fill too little of the GPU): up to three f16 weights of one K in one
// launch, each into its own [m, n_i] output, bias where flagged (all or
// none). Bindings: weights, scale (unused), bias, x, out as above, then
// (w1, bias1, y1) at 5-7 and (w2, bias2, y2) at 8-10; push constants n1
// and n2 where the others have k_span (0: no such weight). Dispatch:
// (sum_i ceil(n_i / BN), ceil(m / BM), 1), the first weight's tiles first.

#include "cm2_header.glsl"

#if WEIGHT_BF16
// Four bf16 weights a word pair (K is a multiple of 4, so rows start on 8
// bytes).
layout(set = 0, binding = 0, std430) readonly buffer Weights { uvec2 w[]; };
#else
layout(set = 0, binding = 0, std430) readonly buffer Weights { float16_t w[]; };
#endif
layout(set = 0, binding = 2, std430) readonly buffer Bias { float bias[]; };
layout(set = 0, binding = 3, std430) readonly buffer Act { float16_t x[]; };
#if SPLIT
layout(set = 0, binding = 4, std430) writeonly buffer Out { float16_t y[]; };
layout(set = 0, binding = 5, std430) writeonly buffer Part { float part[]; };
#include "cm2_split.glsl"
#elif STACK
layout(set = 0, binding = 4, std430) writeonly buffer Out { float16_t y[]; };
layout(set = 0, binding = 5, std430) readonly buffer Weights1 { float16_t w1[]; };
layout(set = 0, binding = 6, std430) readonly buffer Bias1 { float bias1[]; };
layout(set = 0, binding = 7, std430) writeonly buffer Out1 { float16_t y1[]; };
layout(set = 0, binding = 8, std430) readonly buffer Weights2 { float16_t w2[]; };
layout(set = 0, binding = 9, std430) readonly buffer Bias2 { float bias2[]; };
layout(set = 0, binding = 10, std430) writeonly buffer Out2 { float16_t y2[]; };
#else
layout(set = 0, binding = 4, std430) writeonly buffer Out { float16_t y[]; };
#endif

#if WEIGHT_BF16
// Row pitch of the shared weight tile in f16: 16 bytes of skew per row.
const uint B_PITCH = BK + 8u;
shared float16_t b_sh[BN * B_PITCH];
#define W_RAW uvec2
#define W_PER 4u
#include "cm2_stage.glsl"

float16_t bf16_to_f16(uint bits) {
    return float16_t(uintBitsToFloat(bits << 16u));
}

void put_w(uint i, uvec2 v) {
    uint row;
    uint col;
    if (staged_at(i, row, col)) {
        uint at = row * B_PITCH + col;
        b_sh[at] = bf16_to_f16(v.x & 0xFFFFu);
        b_sh[at + 1u] = bf16_to_f16(v.x >> 16u);
        b_sh[at + 2u] = bf16_to_f16(v.y & 0xFFFFu);
        b_sh[at + 3u] = bf16_to_f16(v.y >> 16u);
    }
}
#endif

#if SPLIT
#define BIAS_FN add_bias
#define BIAS_BUF bias
#define FINISH finish_whole
#include "gemm_cm2_finish.glsl"
#undef FINISH

// A whole tile's epilogue, or the split's partial sums of a tail tile
// (bounded at M and the chunk's columns).
void finish(coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc, uint m0, uint n0) {
    if (whole_tile()) {
        finish_whole(acc, m0, n0);
        return;
    }
    STORE_PART(acc, m0, n0);
}
#endif

#define A_T float16_t
#define ACC_T float
#define ACT x
#define STAGED WEIGHT_BF16
#if STACK
// One tile function per weight: its output's store and epilogue
// (gemm_cm2_finish.glsl), then cm2_main.glsl's loop over it.
#define STORE_FN store_0
#define Y_BUF y
#define Y_N_BASE 0u
#define Y_N p.n
#define Y_STRIDE p.n
#define BIAS_FN bias_0
#define BIAS_BUF bias
#define FINISH finish_0
#define TILE_FN tile_0
#define W_BUF w
#define N_ROWS p.n
#include "gemm_cm2_stack_one.glsl"
#define STORE_FN store_1
#define Y_BUF y1
#define Y_N_BASE 0u
#define Y_N p.n1
#define Y_STRIDE p.n1
#define BIAS_FN bias_1
#define BIAS_BUF bias1
#define FINISH finish_1
#define TILE_FN tile_1
#define W_BUF w1
#define N_ROWS p.n1
#include "gemm_cm2_stack_one.glsl"
#define STORE_FN store_2
#define Y_BUF y2
#define Y_N_BASE 0u
#define Y_N p.n2
#define Y_STRIDE p.n2
#define BIAS_FN bias_2
#define BIAS_BUF bias2
#define FINISH finish_2
#define TILE_FN tile_2
#define W_BUF w2
#define N_ROWS p.n2
#include "gemm_cm2_stack_one.glsl"

// Workgroup column x is a tile of the first weight, then of the second,
// then of the third (uniform over the workgroup).
void main() {
    uint t0 = (p.n + BN - 1u) / BN;
    uint t1 = (p.n1 + BN - 1u) / BN;
    uint x = tile_of().x;
    if (x < t0) {
        tile_0(x * BN);
    } else if (x < t0 + t1) {
        tile_1((x - t0) * BN);
    } else {
        tile_2((x - t0 - t1) * BN);
    }
}
#else
#if !SPLIT
#include "gemm_cm2_finish.glsl"
#endif
#include "cm2_main.glsl"
#endif
