// Flash attention on NVIDIA's cooperative matrices 2
// (VK_NV_cooperative_matrix2): the contract of flash_attention.wgsl (f16 q,
// k, v and output, f32 scores and sums, the probabilities rounded to f16
// for the second product), with its bindings and the two-walk kernel's
// `Params` (FlashParams of gpu/src/ops/attention/coop_blocks.rs).
//
// q   [batch * sq, n_heads * HD]   query row r of element b: row b * sq + r,
//                                  at position pos0 + r
// k,v [batch * skv, n_kv * HD]     keys 0..kv_len of element b: rows b * skv..
// out [batch * sq, n_heads * HD]
// Query head h reads kv head h / (n_heads / n_kv).
//
// Workgroup (h, b * q_blocks + qb) takes BR query rows of head h (causal:
// the last blocks, which see the most keys, first) and walks their visible
// keys once in blocks of BC with an online softmax, every matrix of
// workgroup scope (the driver splits them over the subgroups and stages
// operands through shared memory itself):
//   S = Q Kᵀ (f32), masked where a block passes kv_len or the causal edge;
//   m' = max(m, rowmax S); P = exp2((S - m') · scale2); l = l · α + rowsum P
//   with α = exp2((m - m') · scale2); O = O · α + f16(P) V.
// The row statistics m and l are BR x BC matrices holding each row's value
// in every column (what a row reduction returns); α and 1 / l reach O's BR
// x HD shape by one more row reduction of a row-constant matrix. Loads by
// tensor addressing clamp to 0 past the element's rows; stores past sq are
// dropped. Built by scripts/spirv.sh with BR, BC, HD and WG (invocations)
// and FA_FAST (0; n > 0: the key blocks wholly inside kv_len load K and V
// through an unclamped layout whose row stride is known to be a multiple
// of 16 bytes, n blocks an iteration — what made the GEMMs 1.6x faster).
// Dispatch: (n_heads, batch * ceil(sq / BR), 1).

#include "flash_cm2_common.glsl"

// wgpu's bindings 1 to 4 (q, k, v, out), as Vulkan numbers them: densely
// from 0 (gpu/src/device/spirv_pipeline.rs). Numbered 1 to 4 here, the
// kernel read k as q and stored through a missing descriptor: the MMU
// faults of 2026-12-06.
layout(set = 0, binding = 0, std430) readonly buffer Q { float16_t q[]; };
layout(set = 0, binding = 1, std430) readonly buffer K { float16_t k[]; };
layout(set = 0, binding = 2, std430) readonly buffer V { float16_t v[]; };
layout(set = 0, binding = 3, std430) writeonly buffer Out { float16_t o[]; };

#ifndef FA_FAST
#define FA_FAST 0
#endif
#define ACC(R, C) coopmat<float, gl_ScopeWorkgroup, R, C, gl_MatrixUseAccumulator>

// One key block at key0, K and V loaded through layout KV. Only blocks
// that reach past kv_len or the causal edge of the block's first row need
// the mask (a workgroup-uniform test).
//
// FA_PROBE (0) builds probes that are not attention, to time what limits
// the kernel (`cm2-…-probe1`/`-probe2`, chosen only by name, never
// checked against a reference): 1, the two products alone (P = f16(S));
// 2, the softmax without the output's rescale (no α reduction to O's
// shape, no O · α).
#ifndef FA_PROBE
#define FA_PROBE 0
#endif
#if FA_PROBE == 1
#define FA_BLOCK(KV)                                                                          \
    {                                                                                         \
        coopmat<float16_t, gl_ScopeWorkgroup, HD, BC, gl_MatrixUseB> kt;                     \
        coopMatLoadTensorNV(kt, k, kv_at, sliceTensorLayoutNV(KV, key0, BC, kvh * HD, HD), transpose); \
        ACC(BR, BC) s = coopMatMulAdd(qm, kt, ACC(BR, BC)(0.0));                              \
        coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator> p16 =          \
            coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator>(s);        \
        coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA> pa =                     \
            coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA>(p16);                \
        coopmat<float16_t, gl_ScopeWorkgroup, BC, HD, gl_MatrixUseB> vm;                     \
        coopMatLoadTensorNV(vm, v, kv_at, sliceTensorLayoutNV(KV, key0, BC, kvh * HD, HD));  \
        acc = coopMatMulAdd(pa, vm, acc);                                                     \
    }
#else
#if FA_PROBE == 2
#define FA_ALPHA_O
#define FA_RESCALED(pa, vm) coopMatMulAdd(pa, vm, acc)
#else
#define FA_ALPHA_O                                                                            \
        ACC(BR, HD) alpha_o;                                                                  \
        coopMatReduceNV(alpha_o, alpha, gl_CooperativeMatrixReduceRowNV, max_of);
#define FA_RESCALED(pa, vm) coopMatMulAdd(pa, vm, acc * alpha_o)
#endif
#define FA_BLOCK(KV)                                                                          \
    {                                                                                         \
        coopmat<float16_t, gl_ScopeWorkgroup, HD, BC, gl_MatrixUseB> kt;                     \
        coopMatLoadTensorNV(kt, k, kv_at, sliceTensorLayoutNV(KV, key0, BC, kvh * HD, HD), transpose); \
        ACC(BR, BC) s = coopMatMulAdd(qm, kt, ACC(BR, BC)(0.0));                              \
        if (key0 + BC > p.kv_len || (p.causal != 0u && key0 + BC > p.pos0 + r0 + 1u)) {      \
            coopMatPerElementNV(s, s, masked, key0, p.kv_len, p.causal, p.pos0 + r0);        \
        }                                                                                     \
        ACC(BR, BC) row_max;                                                                  \
        coopMatReduceNV(row_max, s, gl_CooperativeMatrixReduceRowNV, max_of);                 \
        ACC(BR, BC) m_new;                                                                    \
        coopMatPerElementNV(m_new, m, larger, row_max);                                       \
        ACC(BR, BC) alpha;                                                                    \
        coopMatPerElementNV(alpha, m, exp_from, m_new, p.scale2);                             \
        ACC(BR, BC) pr;                                                                       \
        coopMatPerElementNV(pr, s, exp_from, m_new, p.scale2);                                \
        ACC(BR, BC) row_sum;                                                                  \
        coopMatReduceNV(row_sum, pr, gl_CooperativeMatrixReduceRowNV, sum_of);                \
        l = l * alpha + row_sum;                                                              \
        m = m_new;                                                                            \
        coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator> p16 =          \
            coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator>(pr);       \
        coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA> pa =                     \
            coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA>(p16);                \
        FA_ALPHA_O                                                                            \
        coopmat<float16_t, gl_ScopeWorkgroup, BC, HD, gl_MatrixUseB> vm;                     \
        coopMatLoadTensorNV(vm, v, kv_at, sliceTensorLayoutNV(KV, key0, BC, kvh * HD, HD));  \
        acc = FA_RESCALED(pa, vm);                                                            \
    }
#endif

void main() {
    FLASH_START
    tensorLayoutNV<2, CLAMP> t_kv = createTensorLayoutNV(2, CLAMP);
    t_kv = setTensorLayoutDimensionNV(t_kv, p.kv_len, kv_stride);
    t_kv = setTensorLayoutClampValueNV(t_kv, 0u);
    // Kᵀ: B[d][j] = K[j][d].
    tensorViewNV<2, false, 1, 0> transpose = createTensorViewNV(2, false, 1, 0);
    uint q_at = b * p.sq * q_stride;
    uint kv_at = b * p.skv * kv_stride;

    coopmat<float16_t, gl_ScopeWorkgroup, BR, HD, gl_MatrixUseA> qm;
    coopMatLoadTensorNV(qm, q, q_at, sliceTensorLayoutNV(t_q, r0, BR, h * HD, HD));

    ACC(BR, HD) acc = ACC(BR, HD)(0.0);
    ACC(BR, BC) m = ACC(BR, BC)(NEG_BIG);
    ACC(BR, BC) l = ACC(BR, BC)(0.0);

#if FA_FAST
    // Blocks wholly inside kv_len: unclamped, the stride's 16-byte hint.
    uint inside = min(keys, p.kv_len) / BC * BC;
    tensorLayoutNV<2> u_kv = createTensorLayoutNV(2);
    u_kv = setTensorLayoutDimensionNV(u_kv, p.kv_len, kv_stride);
    u_kv = setTensorLayoutStrideNV(u_kv, kv_stride & ~7u, 1u);
    uint key0 = 0u;
    for (; key0 + FA_FAST * BC <= inside;) {
        [[unroll]] for (uint j = 0u; j < FA_FAST; j++) {
            FA_BLOCK(u_kv)
            key0 += BC;
        }
    }
    for (; key0 < inside; key0 += BC) {
        FA_BLOCK(u_kv)
    }
    for (; key0 < keys; key0 += BC) {
        FA_BLOCK(t_kv)
    }
#else
    for (uint key0 = 0u; key0 < keys; key0 += BC) {
        FA_BLOCK(t_kv)
    }
#endif

    ACC(BR, HD) l_o;
    coopMatReduceNV(l_o, l, gl_CooperativeMatrixReduceRowNV, max_of);
    acc = acc / l_o;
    coopmat<float16_t, gl_ScopeWorkgroup, BR, HD, gl_MatrixUseAccumulator> out16 =
        coopmat<float16_t, gl_ScopeWorkgroup, BR, HD, gl_MatrixUseAccumulator>(acc);
    coopMatStoreTensorNV(out16, o, q_at, sliceTensorLayoutNV(t_q, r0, BR, h * HD, HD));
}
