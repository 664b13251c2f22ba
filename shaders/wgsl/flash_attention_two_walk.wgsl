// Flash attention on f16 cooperative matrices with f32 sums, after a shape
// fragment (linear_coop16.wgsl or linear_coop8.wgsl: CM and the
// cm_a/cm_b/cm_c types). q, k, v and out hold `act` values (f16 on the
// paths that pick this kernel); scores, the softmax statistics and the
// output accumulators are f32, the probabilities are rounded to f16 for the
// second product (as FlashAttention-2 does).
//
// q   [batch * sq, n_heads * HD], query row r of batch element b is row
//     b * sq + r, at position pos0 + r
// k,v [batch * skv, n_kv * HD], keys 0..kv_len of element b are rows
//     b * skv ..
// out [batch * sq, n_heads * HD]
//
// Workgroup (h, b * q_blocks + qb) takes BR = NSG * CM query rows of head
// h; each subgroup owns CM of them and keeps their queries and outputs in
// registers as cooperative matrices. Cooperative matrices cannot scale
// their rows, so instead of rescaling a running output the keys are
// walked twice: the first walk computes each row's softmax maximum and
// sum exactly (S = Q Kᵀ only), the second turns S into final
// probabilities P and adds P V into the outputs. The extra Q Kᵀ costs a
// third more products but no workgroup-memory traffic for the outputs,
// which on this path is the limit (`dynvram bench coop`: the units run
// 5× faster than one workgroup-memory load per product feeds them).
// Per block: the keys are staged, each subgroup stores its CM x BC scores,
// its invocations (T per row) read them; in the second walk the values
// overwrite the keys while the probabilities are written. The score matrix
// never reaches memory. Query head h reads kv head h / (n_heads / n_kv)
// (HF repeat_kv).
//
// needs: CM, cm_a, cm_b, cm_c

struct Params {
    sq: u32,
    n_heads: u32,
    n_kv: u32,
    skv: u32,
    kv_len: u32,
    pos0: u32,
    scale: f32,
    // 1: query row r sees keys 0..=pos0 + r; 0: every key 0..kv_len.
    causal: u32,
}

var<immediate> params: Params;

override SG: u32 = 32u;
// The workgroup shape: subgroups (CM query rows each), keys per block and
// the head dimension. Constants, not overrides, because they size
// workgroup arrays: the host writes them into these three lines
// (`dynvram_shaders::transformer::with_flash_shape`).
const NSG: u32 = 2u;
const BC: u32 = 32u;
const HD: u32 = 128u;

const BR: u32 = NSG * CM;
// Matrices along the head dimension.
const DM: u32 = HD / CM;
// Invocations per query row in the softmax (a subgroup's CM rows).
override T: u32 = SG / CM;
// f16 row pitches, skewed by 16 bytes to spread rows over memory banks.
const KP: u32 = HD + 8u;
const PP: u32 = BC + 8u;
// kv_sh holds the queries once, then each block's keys or values.
const KV_ROWS: u32 = max(BC, BR);
const NEG_BIG: f32 = -3.0e38;

// Read four values at a time (HD and every row stride are multiples of 4).
@group(0) @binding(1) var<storage, read> q: array<vec4<act>>;
@group(0) @binding(2) var<storage, read> k: array<vec4<act>>;
@group(0) @binding(3) var<storage, read> v: array<vec4<act>>;
@group(0) @binding(4) var<storage, read_write> out: array<act>;

var<workgroup> kv_sh: array<f16, KV_ROWS * KP>;
var<workgroup> s_sh: array<f32, BR * BC>;
var<workgroup> p_sh: array<f16, BR * PP>;

// Stages `rows` rows from row `row0` of `src` (0: q, 1: k, 2: v) at column
// `col` into kv_sh, zero from row `valid` on (so 0 * garbage never makes
// a NaN).
fn stage(lid: u32, src: u32, rows: u32, row0: u32, valid: u32, col: u32, stride: u32) {
    for (var e = lid; e < rows * HD / 4u; e += SG * NSG) {
        let j = e / (HD / 4u);
        let d = 4u * (e % (HD / 4u));
        var x = vec4<f16>();
        if j < valid {
            let at = ((row0 + j) * stride + col + d) / 4u;
            switch src {
                case 0u: {
                    x = vec4<f16>(q[at]);
                }
                case 1u: {
                    x = vec4<f16>(k[at]);
                }
                default: {
                    x = vec4<f16>(v[at]);
                }
            }
        }
        for (var i = 0u; i < 4u; i++) {
            kv_sh[j * KP + d + i] = x[i];
        }
    }
}

// The subgroup's CM x BC scores against the staged keys, into its rows of
// s_sh (unscaled).
fn scores(sg: u32, qa: ptr<function, array<cm_a, DM>>) {
    for (var nt = 0u; nt < BC; nt += CM) {
        var acc = cm_c();
        for (var i = 0u; i < DM; i++) {
            // B[d][j] = key j's dimension d: column-major in kv_sh.
            let b = coopLoad<cm_b>(&kv_sh[nt * KP + i * CM], KP);
            acc = coopMultiplyAdd((*qa)[i], b, acc);
        }
        coopStoreT(acc, &s_sh[sg * CM * BC + nt], BC);
    }
}

@compute @workgroup_size(SG * NSG)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(num_subgroups) nsg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let h = wid.x;
    let q_blocks = (params.sq + BR - 1u) / BR;
    let b = wid.y / q_blocks;
    let r0 = (wid.y % q_blocks) * BR;
    let q_stride = params.n_heads * HD;
    let kv_stride = params.n_kv * HD;
    let kv_col = (h / (params.n_heads / params.n_kv)) * HD;
    let kv_row0 = b * params.skv;
    // Subgroups of another size than the host assumed would compute
    // wrong rows: every output becomes NaN instead (control flow stays
    // uniform, as the cooperative operations require).
    let ok = nsg == NSG;
    let sg = min(sg_id, NSG - 1u);
    // This invocation's query row within the block, and its share of the
    // row's columns in the softmax.
    let row = sg * CM + lane / T;
    let t = lane % T;
    let r = r0 + row;
    var visible = params.kv_len;
    if params.causal != 0u {
        visible = min(params.kv_len, params.pos0 + r + 1u);
    }
    // Keys any row of the block sees.
    var block_keys = params.kv_len;
    if params.causal != 0u {
        block_keys = min(params.kv_len, params.pos0 + min(params.sq, r0 + BR));
    }

    stage(lid, 0u, BR, b * params.sq + r0, params.sq - min(r0, params.sq), h * HD, q_stride);
    workgroupBarrier();
    var qa: array<cm_a, DM>;
    for (var i = 0u; i < DM; i++) {
        qa[i] = coopLoadT<cm_a>(&kv_sh[sg * CM * KP + i * CM], KP);
    }

    // First walk: this invocation's running maximum and sum over its
    // columns, combined over the row's T invocations at the end.
    var m = NEG_BIG;
    var l = 0.0;
    for (var j0 = 0u; j0 < block_keys; j0 += BC) {
        workgroupBarrier();
        stage(lid, 1u, BC, kv_row0 + j0, params.kv_len - j0, kv_col, kv_stride);
        workgroupBarrier();
        scores(sg, &qa);
        workgroupBarrier();
        for (var c = t; c < BC; c += T) {
            if j0 + c < visible {
                let x = s_sh[row * BC + c] * params.scale;
                let m_new = max(m, x);
                l = l * exp(m - m_new) + exp(x - m_new);
                m = m_new;
            }
        }
    }
    for (var o = 1u; o < T; o = o << 1u) {
        let m_o = subgroupShuffleXor(m, o);
        let l_o = subgroupShuffleXor(l, o);
        let m_new = max(m, m_o);
        l = l * exp(m - m_new) + l_o * exp(m_o - m_new);
        m = m_new;
    }
    // Rows past sq see nothing; keep their (unstored) sums finite.
    let inv_l = 1.0 / max(l, 1e-30);

    // Second walk: P = exp(S - m) / l, O += P V.
    var oa: array<cm_c, DM>;
    for (var i = 0u; i < DM; i++) {
        oa[i] = cm_c();
    }
    for (var j0 = 0u; j0 < block_keys; j0 += BC) {
        workgroupBarrier();
        stage(lid, 1u, BC, kv_row0 + j0, params.kv_len - j0, kv_col, kv_stride);
        workgroupBarrier();
        scores(sg, &qa);
        workgroupBarrier();
        // The values overwrite the keys while the probabilities are written.
        stage(lid, 2u, BC, kv_row0 + j0, params.kv_len - j0, kv_col, kv_stride);
        for (var c = t; c < BC; c += T) {
            var p = 0.0;
            if j0 + c < visible {
                p = exp(s_sh[row * BC + c] * params.scale - m) * inv_l;
            }
            p_sh[row * PP + c] = f16(p);
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BC; kk += CM) {
            let a = coopLoadT<cm_a>(&p_sh[sg * CM * PP + kk], PP);
            for (var i = 0u; i < DM; i++) {
                // B[j][d] = value j's dimension d: row-major in kv_sh.
                let bm = coopLoadT<cm_b>(&kv_sh[kk * KP + i * CM], KP);
                oa[i] = coopMultiplyAdd(a, bm, oa[i]);
            }
        }
    }
    // Out through the subgroup's rows of s_sh, one CM x CM matrix at a time.
    let base = (b * params.sq + r) * q_stride + h * HD;
    for (var i = 0u; i < DM; i++) {
        workgroupBarrier();
        coopStoreT(oa[i], &s_sh[sg * CM * BC], CM);
        workgroupBarrier();
        for (var c = t; c < CM; c += T) {
            var x = s_sh[sg * CM * BC + (lane / T) * CM + c];
            if !ok {
                x = bitcast<f32>(0x7FC00000u);
            }
            if r < params.sq {
                out[base + i * CM + c] = act(x);
            }
        }
    }
}
