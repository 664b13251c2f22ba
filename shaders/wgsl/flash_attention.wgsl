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
// h; each subgroup owns CM of them. Keys are visited in blocks of BC: the
// block's keys are staged, S = Q Kᵀ is one row of CM x CM products per
// subgroup, an online softmax turns S into probabilities P (rescaling the
// running output when the row maximum grows), then the block's values are
// staged and O += P V. The score matrix is never written to memory. The
// output accumulators live in workgroup memory (cooperative matrices have
// no per-row scaling), loaded and stored around each block's P V.
// Query head h reads kv head h / (n_heads / n_kv) (HF repeat_kv).

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
@group(0) @binding(1) var<storage, read> q: array<act>;
@group(0) @binding(2) var<storage, read> k: array<act>;
@group(0) @binding(3) var<storage, read> v: array<act>;
@group(0) @binding(4) var<storage, read_write> out: array<act>;

override SG: u32 = 32u;
// The workgroup shape: subgroups (CM query rows each), keys per block and
// the head dimension. Constants, not overrides, because they size
// workgroup arrays: the host writes them into these three lines
// (`dynvram_shaders::transformer::with_flash_shape`).
const NSG: u32 = 2u;
const BC: u32 = 32u;
const HD: u32 = 128u;

const BR: u32 = NSG * CM;
// Invocations per query row in the softmax (a subgroup's CM rows).
override T: u32 = SG / CM;
// f16 row pitches, skewed by 16 bytes to spread rows over memory banks.
const QP: u32 = HD + 8u;
const PP: u32 = BC + 8u;
const NEG_BIG: f32 = -3.0e38;

var<workgroup> q_sh: array<f16, BR * QP>;
// The block's keys, then its values.
var<workgroup> kv_sh: array<f16, BC * QP>;
var<workgroup> s_sh: array<f32, BR * BC>;
var<workgroup> p_sh: array<f16, BR * PP>;
var<workgroup> o_sh: array<f32, BR * HD>;

// Stages rows j0.. of head column `col` of `src` (k or v) into kv_sh,
// zero past the valid keys (so 0 * garbage never makes a NaN).
fn stage_k(lid: u32, row0: u32, j0: u32, col: u32, stride: u32) {
    for (var e = lid; e < BC * HD; e += SG * NSG) {
        let j = e / HD;
        let d = e % HD;
        var x = 0.0h;
        if j0 + j < params.kv_len {
            x = f16(k[(row0 + j0 + j) * stride + col + d]);
        }
        kv_sh[j * QP + d] = x;
    }
}

fn stage_v(lid: u32, row0: u32, j0: u32, col: u32, stride: u32) {
    for (var e = lid; e < BC * HD; e += SG * NSG) {
        let j = e / HD;
        let d = e % HD;
        var x = 0.0h;
        if j0 + j < params.kv_len {
            x = f16(v[(row0 + j0 + j) * stride + col + d]);
        }
        kv_sh[j * QP + d] = x;
    }
}

fn row_max(x: f32) -> f32 {
    var m = x;
    for (var o = 1u; o < T; o = o << 1u) {
        m = max(m, subgroupShuffleXor(m, o));
    }
    return m;
}

fn row_sum(x: f32) -> f32 {
    var s = x;
    for (var o = 1u; o < T; o = o << 1u) {
        s = s + subgroupShuffleXor(s, o);
    }
    return s;
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

    for (var e = lid; e < BR * HD; e += SG * NSG) {
        let rr = e / HD;
        let d = e % HD;
        var x = 0.0h;
        if r0 + rr < params.sq {
            x = f16(q[(b * params.sq + r0 + rr) * q_stride + h * HD + d]);
        }
        q_sh[rr * QP + d] = x;
        o_sh[e] = 0.0;
    }

    var m = NEG_BIG;
    var l = 0.0;
    for (var j0 = 0u; j0 < block_keys; j0 += BC) {
        workgroupBarrier();
        stage_k(lid, kv_row0, j0, kv_col, kv_stride);
        workgroupBarrier();
        for (var nt = 0u; nt < BC; nt += CM) {
            var acc = cm_c();
            for (var kk = 0u; kk < HD; kk += CM) {
                let a = coopLoadT<cm_a>(&q_sh[sg * CM * QP + kk], QP);
                // B[d][j] = key j's dimension d: column-major in kv_sh.
                let bm = coopLoad<cm_b>(&kv_sh[nt * QP + kk], QP);
                acc = coopMultiplyAdd(a, bm, acc);
            }
            coopStoreT(acc, &s_sh[sg * CM * BC + nt], BC);
        }
        workgroupBarrier();
        // The values overwrite the keys while the softmax runs.
        stage_v(lid, kv_row0, j0, kv_col, kv_stride);
        var block_max = NEG_BIG;
        for (var c = t; c < BC; c += T) {
            if j0 + c < visible {
                block_max = max(block_max, s_sh[row * BC + c] * params.scale);
            }
        }
        let m_new = max(m, row_max(block_max));
        let alpha = exp(m - m_new);
        var sum = 0.0;
        for (var c = t; c < BC; c += T) {
            var p = 0.0;
            if j0 + c < visible {
                p = exp(s_sh[row * BC + c] * params.scale - m_new);
            }
            p_sh[row * PP + c] = f16(p);
            sum += p;
        }
        l = l * alpha + row_sum(sum);
        m = m_new;
        for (var d = t; d < HD; d += T) {
            o_sh[row * HD + d] *= alpha;
        }
        workgroupBarrier();
        for (var dt = 0u; dt < HD; dt += CM) {
            var acc = coopLoadT<cm_c>(&o_sh[sg * CM * HD + dt], HD);
            for (var kk = 0u; kk < BC; kk += CM) {
                let a = coopLoadT<cm_a>(&p_sh[sg * CM * PP + kk], PP);
                // B[j][d] = value j's dimension d: row-major in kv_sh.
                let bm = coopLoadT<cm_b>(&kv_sh[kk * QP + dt], QP);
                acc = coopMultiplyAdd(a, bm, acc);
            }
            coopStoreT(acc, &o_sh[sg * CM * HD + dt], HD);
        }
    }
    workgroupBarrier();
    if r < params.sq {
        let base = (b * params.sq + r) * q_stride + h * HD;
        for (var d = t; d < HD; d += T) {
            var x = o_sh[row * HD + d] / l;
            if !ok {
                x = bitcast<f32>(0x7FC00000u);
            }
            out[base + d] = act(x);
        }
    }
}
