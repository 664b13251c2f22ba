// Float linear on subgroup-scope cooperative matrices, staged by the
// workgroup itself: gemm_cm2.glsl's contract, bindings, push constants and
// dispatch (f16 weights [N, K] and activations [M, K], f32 sums, the bias
// added in f32 before the one rounding to f16), the work split as CUTLASS's
// multistage GEMMs split it on tensor cores without wgmma. Each subgroup
// (32 invocations) owns a WM x WN piece of the workgroup's BM x BN tile as
// (WM / 16) x (WN / 16) accumulators in registers; each A fragment it loads
// serves WN / 16 products and each B fragment WM / 16. The workgroup copies
// each step's BM x BK activations and BN x BK weights into shared memory,
// 16-byte words into rows padded by 16 bytes (no bank conflicts for the
// fragments' row loads), two buffers so that one barrier a step suffices,
// and the next step's global reads in flight while the subgroups run the
// current one.
//
// Rows past M and N and columns past K read 0 (rows clamped, so no load
// leaves the bindings); stores past M and the chunk's last column are
// dropped. Where K is a multiple of a word's elements (8 f16, 16 int8)
// the rows are 16-byte words; else each word is gathered from narrower
// reads of the same bindings (8 f16 values, 4 words of int8 codes).
//
// INT8 1: gemm_cm2_int.glsl's contract and bindings instead — int8
// activation codes times int8 weights (int4 ones widened to int8 first,
// as for its kernels), four a word (K a multiple of 4), exact s32 sums on
// 16 x 16 x 32 products, then the integer epilogue in f32.
//
// Built by scripts/spirv.sh with BM, BN (multiples of 16), BK (a multiple
// of 16, of 32 with INT8), WM, WN (multiples of 16 dividing BM and BN) and
// WG = 32 · (BM / WM) · (BN / WN).
// Dispatch: (ceil(n / BN), ceil(m / BM), 1). Needs 32-invocation subgroups.

#extension GL_KHR_shader_subgroup_basic : enable
#include "cm2_header.glsl"

#ifndef INT8
#define INT8 0
#endif
#if INT8
// Four codes a word; 16 a 16-byte word; 32 K columns a product.
layout(set = 0, binding = 0, std430) readonly buffer Weights { uvec4 w4[]; };
layout(set = 0, binding = 0, std430) readonly buffer WeightWords { uint w[]; };
layout(set = 0, binding = 1, std430) readonly buffer WeightScale { float w_scale[]; };
layout(set = 0, binding = 2, std430) readonly buffer Bias { float bias[]; };
layout(set = 0, binding = 3, std430) readonly buffer Codes { uvec4 x4[]; };
layout(set = 0, binding = 3, std430) readonly buffer CodeWords { uint x[]; };
layout(set = 0, binding = 4, std430) readonly buffer CodeScale { float x_scale[]; };
layout(set = 0, binding = 5, std430) writeonly buffer Out { float16_t y[]; };
#include "cm2_int_epilogue.glsl"
#define FRAG_ACC coopmat<int32_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define FRAG_A coopmat<int8_t, gl_ScopeSubgroup, 16, 32, gl_MatrixUseA>
#define FRAG_B coopmat<int8_t, gl_ScopeSubgroup, 32, 16, gl_MatrixUseB>
const uint PER_WORD = 16u;
const uint FK = 32u;
#else
layout(set = 0, binding = 0, std430) readonly buffer Weights { uvec4 w4[]; };
layout(set = 0, binding = 0, std430) readonly buffer WeightsF16 { float16_t w[]; };
layout(set = 0, binding = 2, std430) readonly buffer Bias { float bias[]; };
layout(set = 0, binding = 3, std430) readonly buffer Act { uvec4 x4[]; };
layout(set = 0, binding = 3, std430) readonly buffer ActF16 { float16_t x[]; };
layout(set = 0, binding = 4, std430) writeonly buffer Out { float16_t y[]; };
#define FRAG_ACC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define FRAG_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define FRAG_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
const uint PER_WORD = 8u;
const uint FK = 16u;
#endif

const uint FM = WM / 16u;
const uint FN = WN / 16u;
const uint WARPS_N = BN / WN;
// 16-byte words of a tile row a step, and of a shared row (one of padding).
const uint KW = BK / PER_WORD;
const uint PITCH = KW + 1u;
// 16-byte words of a product's K columns (2 for both types).
const uint FKW = FK / PER_WORD;
// Words each invocation copies of the activations and of the weights a step.
const uint A_LOADS = (BM * KW + WG - 1u) / WG;
const uint B_LOADS = (BN * KW + WG - 1u) / WG;
shared uvec4 a_sh[2u * BM * PITCH];
shared uvec4 b_sh[2u * BN * PITCH];

// Word `kw` (PER_WORD K columns) of row `row` of a [rows, K] matrix bound
// twice (`words`, `halves`: f16 values or, INT8, words of four codes), 0
// past the rows and K.
#define FETCH_WORD(words, halves, row, rows, kw)                                         \
    {                                                                                    \
        uint row_ = (row);                                                               \
        uint kw_ = (kw);                                                                 \
        uint rows_ = (rows);                                                             \
        uint r_ = min(row_, rows_ - 1u);                                                 \
        if (p.k % PER_WORD == 0u) {                                                      \
            uint kws_ = p.k / PER_WORD;                                                  \
            uvec4 v_ = words[r_ * kws_ + min(kw_, kws_ - 1u)];                           \
            word = (row_ < rows_ && kw_ < kws_) ? v_ : uvec4(0u);                        \
        } else {                                                                         \
            GATHER_WORD(halves)                                                          \
        }                                                                                \
    }
#if INT8
// Four words of four codes each, K a multiple of 4 (row_, r_, kw_ as in
// FETCH_WORD).
#define GATHER_WORD(codes)                                                               \
    uint kq_ = p.k / 4u;                                                                 \
    [[unroll]] for (uint e_ = 0u; e_ < 4u; e_++) {                                       \
        uint c_ = kw_ * 4u + e_;                                                         \
        uint v_ = codes[r_ * kq_ + min(c_, kq_ - 1u)];                                   \
        word[e_] = (row_ < rows_ && c_ < kq_) ? v_ : 0u;                                 \
    }
#else
// Eight f16 values (row_, r_, kw_ as in FETCH_WORD).
#define GATHER_WORD(halves)                                                              \
    {                                                                                    \
            float16_t h_[8];                                                             \
            [[unroll]] for (uint e_ = 0u; e_ < 8u; e_++) {                               \
                uint c_ = kw_ * 8u + e_;                                                 \
                float16_t v_ = halves[r_ * p.k + min(c_, p.k - 1u)];                      \
                h_[e_] = (row_ < rows_ && c_ < p.k) ? v_ : float16_t(0.0);               \
            }                                                                            \
            word = uvec4(packFloat2x16(f16vec2(h_[0], h_[1])),                           \
                         packFloat2x16(f16vec2(h_[2], h_[3])),                           \
                         packFloat2x16(f16vec2(h_[4], h_[5])),                           \
                         packFloat2x16(f16vec2(h_[6], h_[7])));                          \
    }
#endif

#if !INT8
// The bias of output column `col` of a fragment whose first column is
// `first` (clamped into the chunk: columns past it are not stored).
float add_bias(const in uint row, const in uint col, const in float v, const in uint first) {
    uint c = min(first + col, p.n_base + p.n - 1u);
    return v + bias[c];
}
#endif

void main() {
    uint n0 = gl_WorkGroupID.x * BN;
    uint m0 = gl_WorkGroupID.y * BM;
    uint wm0 = (gl_SubgroupID / WARPS_N) * WM;
    uint wn0 = (gl_SubgroupID % WARPS_N) * WN;
    uint steps = (p.k + BK - 1u) / BK;

    FRAG_ACC acc[FM * FN];
    [[unroll]] for (uint i = 0u; i < FM * FN; i++) {
        acc[i] = FRAG_ACC(0);
    }

    // This invocation's words of a step, read at `fetch` and written to
    // buffer `buf` at `put`.
    uvec4 ra[A_LOADS];
    uvec4 rb[B_LOADS];
#define FETCH(step)                                                                      \
    [[unroll]] for (uint i = 0u; i < A_LOADS; i++) {                                     \
        uint q = i * WG + gl_LocalInvocationIndex;                                       \
        uvec4 word;                                                                      \
        FETCH_WORD(x4, x, m0 + min(q / KW, BM - 1u), p.m, (step) * KW + q % KW)          \
        ra[i] = word;                                                                    \
    }                                                                                    \
    [[unroll]] for (uint i = 0u; i < B_LOADS; i++) {                                     \
        uint q = i * WG + gl_LocalInvocationIndex;                                       \
        uvec4 word;                                                                      \
        FETCH_WORD(w4, w, n0 + min(q / KW, BN - 1u), p.n, (step) * KW + q % KW)          \
        rb[i] = word;                                                                    \
    }
#define PUT(buf)                                                                         \
    [[unroll]] for (uint i = 0u; i < A_LOADS; i++) {                                     \
        uint q = i * WG + gl_LocalInvocationIndex;                                       \
        if (q < BM * KW) {                                                               \
            a_sh[(buf) * BM * PITCH + (q / KW) * PITCH + q % KW] = ra[i];                \
        }                                                                                \
    }                                                                                    \
    [[unroll]] for (uint i = 0u; i < B_LOADS; i++) {                                     \
        uint q = i * WG + gl_LocalInvocationIndex;                                       \
        if (q < BN * KW) {                                                               \
            b_sh[(buf) * BN * PITCH + (q / KW) * PITCH + q % KW] = rb[i];                \
        }                                                                                \
    }

    FETCH(0u)
    PUT(0u)
    barrier();
    for (uint s = 0u; s < steps; s++) {
        uint cur = s & 1u;
        if (s + 1u < steps) {
            FETCH(s + 1u)
        }
        uint a_at = cur * BM * PITCH + wm0 * PITCH;
        uint b_at = cur * BN * PITCH + wn0 * PITCH;
        [[unroll]] for (uint kk = 0u; kk < BK / FK; kk++) {
            // Through locals: glslang 15.1 crashes loading into an array
            // element.
            FRAG_A a[FM];
            [[unroll]] for (uint i = 0u; i < FM; i++) {
                FRAG_A t;
                coopMatLoad(t, a_sh, a_at + i * 16u * PITCH + kk * FKW, PITCH,
                            gl_CooperativeMatrixLayoutRowMajor);
                a[i] = t;
            }
            [[unroll]] for (uint j = 0u; j < FN; j++) {
                // B[k][n] = W[n][k]: column-major in the shared weight rows.
                FRAG_B b;
                coopMatLoad(b, b_sh, b_at + j * 16u * PITCH + kk * FKW, PITCH,
                            gl_CooperativeMatrixLayoutColumnMajor);
                [[unroll]] for (uint i = 0u; i < FM; i++) {
                    acc[i * FN + j] = coopMatMulAdd(a[i], b, acc[i * FN + j]);
                }
            }
        }
        if (s + 1u < steps) {
            PUT(cur ^ 1u)
        }
        barrier();
    }

    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> t_y =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    t_y = setTensorLayoutDimensionNV(t_y, p.m, p.n_base + p.n);
    t_y = setTensorLayoutStrideNV(t_y, p.out_stride, 1u);
    [[unroll]] for (uint i = 0u; i < FM; i++) {
        [[unroll]] for (uint j = 0u; j < FN; j++) {
            uint col = p.n_base + n0 + wn0 + j * 16u;
#if INT8
            // f32(acc) as the WGSL epilogue converts it, then the scales
            // and bias.
            coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> v =
                coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(acc[i * FN + j]);
            coopMatPerElementNV(v, v, epilogue, m0 + wm0 + i * 16u, col);
#else
            FRAG_ACC v = acc[i * FN + j];
            if ((p.flags & 1u) != 0u) {
                coopMatPerElementNV(v, v, add_bias, col);
            }
            if ((p.flags & 8u) != 0u) {
                coopMatPerElementNV(v, v, gelu_tanh_of);
            }
#endif
            coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> o =
                coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(v);
            coopMatStoreTensorNV(o, y, 0u, sliceTensorLayoutNV(t_y, m0 + wm0 + i * 16u, 16u, col, 16u));
        }
    }
}
