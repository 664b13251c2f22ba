// Flash attention on subgroup-scope cooperative matrices (NVIDIA's
// cooperative matrices 2 for the row reductions and per-element functions):
// flash_cm2.glsl's contract, bindings and push constants, the work split
// as FlashAttention-2 splits it. Each subgroup (32 invocations) owns 16 ·
// RW query rows: its Q fragments, output accumulators and row statistics
// stay in registers, 16 x 16 each, so the rescale α and 1 / l are already
// the output fragments' shape (no reduction to O's shape, which the
// workgroup-scope kernel needs), and each K and V fragment it loads serves
// its RW row fragments. The workgroup (NW subgroups, BR = 16 · RW · NW
// rows) copies each block of BC keys of K and V into shared memory itself,
// 16-byte words into rows padded by 16 bytes (no bank conflicts), the next
// block's global reads in flight while the subgroups run the current one:
//   S_j = Σ_d Q_d K_jdᵀ (f32, 16 keys a fragment), masked where a block
//   passes kv_len or the subgroup's causal edge;
//   m' = max(m, rowmax S); P_j = exp2((S_j - m') · scale2);
//   l = l · α + Σ_j rowsum P_j, α = exp2((m - m') · scale2);
//   O_d = O_d · α + Σ_j f16(P_j) V_jd.
// LAZY 1 (FlashAttention-4's trick, exact): the rescale by α skipped in a
// block where no row maximum of the subgroup's rose (α = 1 in every
// element), and l kept element by element, reduced once at the end (one
// row reduction a block instead of two).
// QSH 1: Q in shared memory (below), for RW = 2 within the registers.
// Built by scripts/spirv.sh with NW (subgroups), RW (row fragments a
// subgroup, 1 if unset), BC (keys a block, a multiple of 16), HD (a
// multiple of 16), LAZY and QSH (0 if unset) and WG = 32 · NW,
// BR = 16 · RW · NW.
// Dispatch: (n_heads, batch * ceil(sq / BR), 1). Needs 32-invocation
// subgroups.

#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_vote : enable
#include "flash_cm2_common.glsl"

// K and V as 16-byte words: a row of HD f16 values is HD / 8 words and
// starts on 16 bytes (HD and n_kv · HD multiples of 8).
layout(set = 0, binding = 0, std430) readonly buffer Q { float16_t q[]; };
layout(set = 0, binding = 1, std430) readonly buffer K { uvec4 k4[]; };
layout(set = 0, binding = 2, std430) readonly buffer V { uvec4 v4[]; };
layout(set = 0, binding = 3, std430) writeonly buffer Out { float16_t o[]; };

#define FRAG_ACC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define FRAG_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define FRAG_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>

#ifndef RW
#define RW 1u
#endif
#ifndef LAZY
#define LAZY 0
#endif
const uint DS = HD / 16u;
const uint JS = BC / 16u;
// Words of a shared row: HD / 8 and one of padding.
const uint PITCH = HD / 8u + 1u;
// Words each invocation copies of K and of V a block.
const uint LOADS = (BC * HD / 8u + WG - 1u) / WG;
// DB 1: two buffers of each, so that one barrier a block suffices (the
// next block written to the other while the subgroups read this one).
#ifndef DB
#define DB 0
#endif
shared uvec4 k_sh[(1u + DB) * BC * PITCH];
shared uvec4 v_sh[(1u + DB) * BC * PITCH];
// QSH 1: the workgroup's Q rows in shared memory (rows padded as K's),
// each fragment loaded for the block's products, not held: the registers
// that RW = 2 needs for its accumulators (Q held as well spilled them).
#ifndef QSH
#define QSH 0
#endif
#if QSH
layout(set = 0, binding = 0, std430) readonly buffer Q4 { uvec4 q4[]; };
shared uvec4 q_sh[BR * PITCH];
#endif

void main() {
    FLASH_START
    // This subgroup's first query row.
    uint rw0 = r0 + gl_SubgroupID * 16u * RW;
    uint q_at = b * p.sq * q_stride;
    // Word of key row 0, head kvh, of element b.
    uint kv_word = (b * p.skv * kv_stride + kvh * HD) / 8u;
    uint row_words = kv_stride / 8u;

    // Row fragment r of this subgroup's: index r · DS + d of qf and acc,
    // r · JS + j of s, r of the statistics.
#if QSH
    // Rows past sq are zeros (their scores are never stored).
    for (uint w = gl_LocalInvocationIndex; w < BR * HD / 8u; w += WG) {
        uint row = w / (HD / 8u);
        uint c = w % (HD / 8u);
        uint qr = min(r0 + row, p.sq - 1u);
        uvec4 qw = q4[(q_at + qr * q_stride + h * HD) / 8u + c];
        q_sh[row * PITCH + c] = r0 + row < p.sq ? qw : uvec4(0u);
    }
    // This subgroup's first row in q_sh (the loop's first barrier makes
    // the copy visible).
    uint q_sh0 = (rw0 - r0) * PITCH;
#else
    FRAG_A qf[RW * DS];
#endif
    FRAG_ACC acc[RW * DS];
    FRAG_ACC m[RW];
    FRAG_ACC l[RW];
    [[unroll]] for (uint r = 0u; r < RW; r++) {
        [[unroll]] for (uint d = 0u; d < DS; d++) {
#if !QSH
            // Through a local: glslang 15.1 crashes loading into an array
            // element.
            FRAG_A qd;
            coopMatLoadTensorNV(qd, q, q_at,
                                sliceTensorLayoutNV(t_q, rw0 + r * 16u, 16u, h * HD + d * 16u, 16u));
            qf[r * DS + d] = qd;
#endif
            acc[r * DS + d] = FRAG_ACC(0.0);
        }
        m[r] = FRAG_ACC(NEG_BIG);
        l[r] = FRAG_ACC(0.0);
    }

    // The block at key0's words this invocation copies (0 past kv_len).
    // Every load reads inside the keys (the row clamped), so none can
    // fault whatever the compiler hoists.
    uvec4 rk[LOADS];
    uvec4 rv[LOADS];
#define FETCH(key0)                                                                           \
    [[unroll]] for (uint i = 0u; i < LOADS; i++) {                                            \
        uint w = i * WG + gl_LocalInvocationIndex;                                            \
        uint row = min(w / (HD / 8u), BC - 1u);                                               \
        bool in_kv = w < BC * HD / 8u && (key0) + row < p.kv_len;                             \
        uint at = kv_word + min((key0) + row, p.kv_len - 1u) * row_words + w % (HD / 8u);     \
        uvec4 kw = k4[at];                                                                    \
        uvec4 vw = v4[at];                                                                    \
        rk[i] = in_kv ? kw : uvec4(0u);                                                       \
        rv[i] = in_kv ? vw : uvec4(0u);                                                       \
    }
    // Writes the fetched block to buffer `buf`.
#define PUT(buf)                                                                              \
    [[unroll]] for (uint i = 0u; i < LOADS; i++) {                                            \
        uint w = i * WG + gl_LocalInvocationIndex;                                            \
        if (w < BC * HD / 8u) {                                                               \
            uint at = (buf) * BC * PITCH + (w / (HD / 8u)) * PITCH + w % (HD / 8u);           \
            k_sh[at] = rk[i];                                                                 \
            v_sh[at] = rv[i];                                                                 \
        }                                                                                     \
    }
    if (keys > 0u) {
        FETCH(0u)
    }
#if DB
    PUT(0u)
    barrier();
#endif

    for (uint key0 = 0u; key0 < keys; key0 += BC) {
#if DB
        uint sh0 = ((key0 / BC) & 1u) * BC * PITCH;
        if (key0 + BC < keys) {
            FETCH(key0 + BC)
        }
#else
        const uint sh0 = 0u;
        barrier();
        PUT(0u)
        barrier();
        if (key0 + BC < keys) {
            FETCH(key0 + BC)
        }
#endif

        // Each K and V fragment loaded once for the subgroup's RW row
        // fragments.
        FRAG_ACC s[RW * JS];
#if QSH
        // Each Q fragment loaded once a block for the JS key fragments, each
        // K fragment once for the RW row fragments (d outermost: every
        // score still sums its d in order).
        [[unroll]] for (uint i = 0u; i < RW * JS; i++) {
            s[i] = FRAG_ACC(0.0);
        }
        [[unroll]] for (uint d = 0u; d < DS; d++) {
            FRAG_A qd[RW];
            [[unroll]] for (uint r = 0u; r < RW; r++) {
                FRAG_A t;
                coopMatLoad(t, q_sh, q_sh0 + r * 16u * PITCH + d * 2u, PITCH, gl_CooperativeMatrixLayoutRowMajor);
                qd[r] = t;
            }
            [[unroll]] for (uint j = 0u; j < JS; j++) {
                FRAG_B kt;
                coopMatLoad(kt, k_sh, sh0 + j * 16u * PITCH + d * 2u, PITCH, gl_CooperativeMatrixLayoutColumnMajor);
                [[unroll]] for (uint r = 0u; r < RW; r++) {
                    s[r * JS + j] = coopMatMulAdd(qd[r], kt, s[r * JS + j]);
                }
            }
        }
#else
        [[unroll]] for (uint j = 0u; j < JS; j++) {
            [[unroll]] for (uint r = 0u; r < RW; r++) {
                s[r * JS + j] = FRAG_ACC(0.0);
            }
            [[unroll]] for (uint d = 0u; d < DS; d++) {
                // Kᵀ: B[d][j] = K[j][d], column-major in the shared rows.
                FRAG_B kt;
                coopMatLoad(kt, k_sh, sh0 + j * 16u * PITCH + d * 2u, PITCH, gl_CooperativeMatrixLayoutColumnMajor);
                [[unroll]] for (uint r = 0u; r < RW; r++) {
                    s[r * JS + j] = coopMatMulAdd(qf[r * DS + d], kt, s[r * JS + j]);
                }
            }
        }
#endif
        FRAG_A pa[RW * JS];
        [[unroll]] for (uint r = 0u; r < RW; r++) {
            uint edge0 = p.pos0 + rw0 + r * 16u;
            if (key0 + BC > p.kv_len || (p.causal != 0u && key0 + BC > edge0 + 1u)) {
                [[unroll]] for (uint j = 0u; j < JS; j++) {
                    coopMatPerElementNV(s[r * JS + j], s[r * JS + j], masked, key0 + j * 16u,
                                        p.kv_len, p.causal, edge0);
                }
            }
            // One row reduction a statistic: the block's fragments
            // combined element by element first.
            FRAG_ACC s_max = s[r * JS];
            [[unroll]] for (uint j = 1u; j < JS; j++) {
                coopMatPerElementNV(s_max, s_max, larger, s[r * JS + j]);
            }
            FRAG_ACC row_max;
            coopMatReduceNV(row_max, s_max, gl_CooperativeMatrixReduceRowNV, max_of);
            FRAG_ACC m_old = m[r];
            FRAG_ACC m_new;
            coopMatPerElementNV(m_new, m_old, larger, row_max);
#if LAZY
            bool rose = false;
            for (int i = 0; i < m_new.length(); i++) {
                rose = rose || m_new[i] > m_old[i];
            }
            // Subgroup-uniform, as the matrix operations in it need.
            if (subgroupAny(rose)) {
#endif
            FRAG_ACC alpha;
            coopMatPerElementNV(alpha, m_old, exp_from, m_new, p.scale2);
            [[unroll]] for (uint d = 0u; d < DS; d++) {
                acc[r * DS + d] = acc[r * DS + d] * alpha;
            }
#if LAZY
            l[r] = l[r] * alpha;
            }
#endif
            FRAG_ACC p_sum = FRAG_ACC(0.0);
            [[unroll]] for (uint j = 0u; j < JS; j++) {
                FRAG_ACC pr;
                coopMatPerElementNV(pr, s[r * JS + j], exp_from, m_new, p.scale2);
                p_sum = p_sum + pr;
                coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> p16 =
                    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(pr);
                pa[r * JS + j] = FRAG_A(p16);
            }
#if LAZY
            l[r] = l[r] + p_sum;
#else
            FRAG_ACC row_sum;
            coopMatReduceNV(row_sum, p_sum, gl_CooperativeMatrixReduceRowNV, sum_of);
            l[r] = l[r] * alpha + row_sum;
#endif
            m[r] = m_new;
        }
        [[unroll]] for (uint j = 0u; j < JS; j++) {
            [[unroll]] for (uint d = 0u; d < DS; d++) {
                FRAG_B vm;
                coopMatLoad(vm, v_sh, sh0 + j * 16u * PITCH + d * 2u, PITCH, gl_CooperativeMatrixLayoutRowMajor);
                [[unroll]] for (uint r = 0u; r < RW; r++) {
                    acc[r * DS + d] = coopMatMulAdd(pa[r * JS + j], vm, acc[r * DS + d]);
                }
            }
        }
#if DB
        if (key0 + BC < keys) {
            PUT(((key0 / BC) & 1u) ^ 1u)
        }
        barrier();
#endif
    }

    [[unroll]] for (uint r = 0u; r < RW; r++) {
#if LAZY
        FRAG_ACC l_row;
        coopMatReduceNV(l_row, l[r], gl_CooperativeMatrixReduceRowNV, sum_of);
#else
        FRAG_ACC l_row = l[r];
#endif
        [[unroll]] for (uint d = 0u; d < DS; d++) {
            FRAG_ACC o_rd = acc[r * DS + d] / l_row;
            coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> o16 =
                coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(o_rd);
            coopMatStoreTensorNV(o16, o, q_at,
                                 sliceTensorLayoutNV(t_q, rw0 + r * 16u, 16u, h * HD + d * 16u, 16u));
        }
    }
}
