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
// Query head h reads kv head h / (n_heads / n_kv) (HF repeat_kv).
//
// One walk over the keys with an online softmax. Workgroup (h, b *
// q_blocks + qb) takes BR query rows of head h (causal: the last blocks,
// which see the most keys, first) and walks their visible keys in blocks
// of BC. Per block:
// - S = Q Kᵀ: each subgroup holds the queries of its row blocks in
//   registers (A matrices, loaded once) and multiplies them with its share
//   of the block's keys (B matrices from workgroup memory, or straight from
//   k in the `g` staging); the scores go to s_sh (f32, row- or
//   column-major).
// - softmax: every invocation takes a share of one query row's columns (T
//   invocations a row, lanes of one subgroup); the row's running maximum m
//   and sum l live in registers. m moves lazily: only where a row's
//   maximum passes it by more than TAU (log2 units) — then every output
//   row of the workgroup is scaled by alpha_sh through workgroup memory
//   (rare after the first blocks: cooperative matrices cannot scale their
//   rows, so the scaling is a store, a multiply and a load); otherwise the
//   probabilities exp2(s - m) stay below 2^TAU and need no rescale. The
//   probabilities go to the P region of hs (f16, as the scores).
// - O += P V: each subgroup holds a block of output rows x head columns
//   in accumulators (the O grid need not be the S grid: a subgroup with
//   fewer rows and more columns loads fewer matrices per product).
// At the end every output row is divided by its sum, through workgroup
// memory, one accumulator at a time.
//
// The shape (subgroups, BR, BC, the grids, how keys and values are
// staged) is generated text: constants size the workgroup arrays and each
// accumulator is a variable of its own (NVIDIA's compiler runs arrays of
// cooperative matrices at half speed); see dynvram_shaders::flash. The
// region between the markers is the generator's output for
// `FlashTuning::FILE`.
//
// needs: CM, cm_a, cm_b, cm_c

struct Params {
    sq: u32,
    n_heads: u32,
    n_kv: u32,
    skv: u32,
    kv_len: u32,
    pos0: u32,
    // The scores' scale times log2(e): the softmax runs on exp2.
    scale2: f32,
    // 1: query row r sees keys 0..=pos0 + r; 0: every key 0..kv_len.
    causal: u32,
    // 1.0, which no compiler can fold: a matrix multiplied by it is in
    // registers from there on.
    one: f32,
    // The host's params are whole 16-byte rows.
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

var<immediate> params: Params;

const NEG_BIG: f32 = -3.0e38;
// How far (log2 units) a row's maximum may pass its running maximum m
// before m moves (and the outputs are rescaled): probabilities stay below
// 2^TAU = 256, well inside f16.
const TAU: f32 = 8.0;

// Where one attention's k and v rows of this workgroup start (elements)
// and their row stride.
struct KvAt {
    base: u32,
    stride: u32,
}

// Keys of the row that query row `r` (of the whole sequence) sees.
fn visible(r: u32) -> u32 {
    if params.causal != 0u {
        return min(params.kv_len, params.pos0 + r + 1u);
    }
    return params.kv_len;
}

// Four values into the f16 staging at `at`.
fn put4(at: u32, x: vec4<f16>) {
    hs[at] = x.x;
    hs[at + 1u] = x.y;
    hs[at + 2u] = x.z;
    hs[at + 3u] = x.w;
}

// The softmax of the block's scores for query row `row` of the workgroup
// (this invocation's share t of its T invocations, keys j0 + c for c = t,
// t + T, ..), `vis` keys visible: updates the row's running maximum and
// this invocation's share of its sum, writes the probabilities to p_sh
// and the row's rescale factor to alpha_sh, and raises flag_sh where the
// outputs must be rescaled.
fn softmax_row(row: u32, t: u32, j0: u32, vis: u32, m: ptr<function, f32>, l: ptr<function, f32>) {
    var mx = NEG_BIG;
    for (var c = t; c < BC; c += T) {
        if j0 + c < vis {
            mx = max(mx, s_sh[row * S_ROW + c * S_KEY]);
        }
    }
    for (var o = SG / T; o < SG; o = o << 1u) {
        mx = max(mx, subgroupShuffleXor(mx, o));
    }
    let m_old = *m;
    var m_new = m_old;
    var alpha = 1.0;
    let top = mx * params.scale2;
    if mx > NEG_BIG && top > m_old + TAU {
        m_new = top;
        alpha = exp2(m_old - m_new);
        if m_old > NEG_BIG {
            flag_sh[0] = j0 + 1u;
        }
    }
    *m = m_new;
    var sum = 0.0;
    for (var c = t; c < BC; c += T) {
        var p = 0.0;
        if j0 + c < vis {
            p = exp2(s_sh[row * S_ROW + c * S_KEY] * params.scale2 - m_new);
        }
        sum += p;
        p_sh(row * P_ROW + c * P_KEY, p);
    }
    *l = *l * alpha + sum;
    if t == 0u {
        alpha_sh[row] = alpha;
    }
}

// The probability at `at` of the P region of hs.
fn p_sh(at: u32, p: f32) {
    hs[P_AT + at] = f16(p);
}

// The row sum of this invocation's row over its T invocations, inverted.
fn inverse_sum(l: f32) -> f32 {
    var s = l;
    for (var o = SG / T; o < SG; o = o << 1u) {
        s += subgroupShuffleXor(s, o);
    }
    return 1.0 / max(s, 1e-30);
}

// `acc` (output rows row0.. of the workgroup) with each row scaled by its
// alpha_sh, through this subgroup's CM x CM of s_sh. Called by the whole
// workgroup (it holds barriers).
fn rescale(acc: cm_c, sg: u32, lane: u32, row0: u32) -> cm_c {
    let base = sg * CM * CM;
    workgroupBarrier();
    coopStoreT(acc, &s_sh[base], CM);
    workgroupBarrier();
    for (var e = lane; e < CM * CM; e += SG) {
        s_sh[base + e] *= alpha_sh[row0 + e / CM];
    }
    workgroupBarrier();
    return params.one * coopLoadT<cm_c>(&s_sh[base], CM);
}

// Writes `acc` (output rows row0.. of the workgroup, head columns col..)
// times each row's alpha_sh (1 / its sum by then) to out from element
// `at` (the workgroup's first row, the head's first column), rows below
// `rows` only; NaN where `ok` is false. Called by the whole workgroup.
fn drain(acc: cm_c, sg: u32, lane: u32, ok: bool, row0: u32, col: u32, at: u32, rows: u32) {
    let base = sg * CM * CM;
    let stride = params.n_heads * HD;
    workgroupBarrier();
    coopStoreT(acc, &s_sh[base], CM);
    workgroupBarrier();
    for (var e = lane; e < CM * CM; e += SG) {
        let row = row0 + e / CM;
        var x = s_sh[base + e] * alpha_sh[row];
        if !ok {
            x = bitcast<f32>(0x7FC00000u);
        }
        if row < rows {
            out[at + row * stride + col + e % CM] = act(x);
        }
    }
}

// BEGIN generated
// 64x64w4c2 on 16x16 matrices, subgroups of 32, head_dim 128.
const SG: u32 = 32u;
const NSG: u32 = 4u;
const BR: u32 = 64u;
const BC: u32 = 64u;
const HD: u32 = 128u;
// Invocations per query row in the softmax.
const T: u32 = 2u;
// Pitches of the scores (f32) and the probabilities (f16), row-major: score
// (row, key) at row * S_ROW + key * S_KEY; and the f16 row pitch of the
// staged keys, values and queries.
const SP: u32 = 68u;
const PP: u32 = 72u;
const S_ROW: u32 = SP;
const S_KEY: u32 = 1u;
const P_ROW: u32 = PP;
const P_KEY: u32 = 1u;
const KP: u32 = 136u;
// The f16 staging: keys and values from 0, the probabilities from P_AT.
const V_AT: u32 = 0u;
const P_AT: u32 = 8704u;

@group(0) @binding(1) var<storage, read> q: array<vec4<act>>;
@group(0) @binding(2) var<storage, read> k: array<vec4<act>>;
@group(0) @binding(3) var<storage, read> v: array<vec4<act>>;
@group(0) @binding(4) var<storage, read_write> out: array<act>;

var<workgroup> hs: array<f16, 13312>;
var<workgroup> s_sh: array<f32, 4352>;
var<workgroup> alpha_sh: array<f32, BR>;
// One u32 in 16 bytes: every workgroup variable is a multiple of 16 bytes,
// so that wherever the driver places them (NVIDIA's compiler need not keep
// this order) hs and s_sh start 16-byte aligned, as cooperative loads and
// stores require.
var<workgroup> flag_sh: array<u32, 4>;


// Chunk e (four values) of the keys of block j, zero past kv_len.
fn fetch_k(e: u32, j: u32, at: KvAt) -> vec4<f16> {
    let row = e / (HD / 4u);
    var x = vec4<f16>();
    if e < BC * HD / 4u && j + row < params.kv_len {
        x = vec4<f16>(k[(at.base + (j + row) * at.stride) / 4u + e % (HD / 4u)]);
    }
    return x;
}

// Chunk e of the values of block j, zero past kv_len.
fn fetch_v(e: u32, j: u32, at: KvAt) -> vec4<f16> {
    let row = e / (HD / 4u);
    var x = vec4<f16>();
    if e < BC * HD / 4u && j + row < params.kv_len {
        x = vec4<f16>(v[(at.base + (j + row) * at.stride) / 4u + e % (HD / 4u)]);
    }
    return x;
}

// Chunk e into the staging from `off`.
fn put(off: u32, e: u32, x: vec4<f16>) {
    if e < BC * HD / 4u {
        put4(off + (e / (HD / 4u)) * KP + 4u * (e % (HD / 4u)), x);
    }
}

// The key loop's index is uniform, which naga's analysis cannot see (a
// loop variable): branches on it hold cooperative operations.
@diagnostic(off, derivative_uniformity)
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
    var qb = wid.y % q_blocks;
    if params.causal != 0u {
        // The blocks that see the most keys first.
        qb = q_blocks - 1u - qb;
    }
    let r0 = qb * BR;
    let q_stride = params.n_heads * HD;
    let q_at = (b * params.sq + r0) * q_stride + h * HD;
    let kv_stride = params.n_kv * HD;
    let kv = KvAt(b * params.skv * kv_stride + (h / (params.n_heads / params.n_kv)) * HD, kv_stride);
    // Subgroups of another size than the host assumed would compute wrong
    // rows: every output becomes NaN instead (control flow stays uniform,
    // as the cooperative operations require).
    let ok = nsg == NSG;
    let sg = min(sg_id, NSG - 1u);
    // The subgroup's rows and keys of the scores, rows and head columns of
    // the outputs.
    let s_row0 = (sg / 1u) * 1u * CM;
    let s_key0 = (sg % 1u) * 4u * CM;
    let o_row0 = (sg / 2u) * 2u * CM;
    let o_col0 = (sg % 2u) * 4u * CM;
    // This invocation's query rows in the softmax (row_i = lr + i * 64)
    // and its share t of their columns.
    let lr = sg * (SG / T) + lane % (SG / T);
    let t = lane / (SG / T);
    if lid == 0u {
        flag_sh[0] = 0u;
    }
    let vis_0 = visible(r0 + lr + 0u * 64u);
    var m_0 = NEG_BIG;
    var l_0 = 0.0;
    // Queries, head columns 0 * CM ..
    workgroupBarrier();
    for (var e = lid; e < BR * 8u * CM / 4u; e += SG * NSG) {
        let row = e / (8u * CM / 4u);
        let c = 4u * (e % (8u * CM / 4u));
        var x = vec4<f16>();
        if r0 + row < params.sq {
            x = vec4<f16>(q[(q_at + row * q_stride + 0u * CM + c) / 4u]);
        }
        put4(row * 136u + c, x);
    }
    workgroupBarrier();
    let q_0_0 = coopLoadT<cm_a>(&hs[(s_row0 + 0u * CM) * 136u + 0u * CM], 136u);
    let q_0_1 = coopLoadT<cm_a>(&hs[(s_row0 + 0u * CM) * 136u + 1u * CM], 136u);
    let q_0_2 = coopLoadT<cm_a>(&hs[(s_row0 + 0u * CM) * 136u + 2u * CM], 136u);
    let q_0_3 = coopLoadT<cm_a>(&hs[(s_row0 + 0u * CM) * 136u + 3u * CM], 136u);
    let q_0_4 = coopLoadT<cm_a>(&hs[(s_row0 + 0u * CM) * 136u + 4u * CM], 136u);
    let q_0_5 = coopLoadT<cm_a>(&hs[(s_row0 + 0u * CM) * 136u + 5u * CM], 136u);
    let q_0_6 = coopLoadT<cm_a>(&hs[(s_row0 + 0u * CM) * 136u + 6u * CM], 136u);
    let q_0_7 = coopLoadT<cm_a>(&hs[(s_row0 + 0u * CM) * 136u + 7u * CM], 136u);
    workgroupBarrier();
    var o_0_0 = cm_c();
    var o_0_1 = cm_c();
    var o_0_2 = cm_c();
    var o_0_3 = cm_c();
    var o_1_0 = cm_c();
    var o_1_1 = cm_c();
    var o_1_2 = cm_c();
    var o_1_3 = cm_c();
    // Keys any row of the block sees.
    var block_keys = params.kv_len;
    if params.causal != 0u {
        block_keys = min(params.kv_len, params.pos0 + min(params.sq, r0 + BR));
    }
    for (var j0 = 0u; j0 < block_keys; j0 += BC) {
        workgroupBarrier();
        for (var e = lid; e < BC * HD / 4u; e += SG * NSG) {
            put(0u, e, fetch_k(e, j0, kv));
        }
        workgroupBarrier();
        var s_0_0 = cm_c();
        var s_0_1 = cm_c();
        var s_0_2 = cm_c();
        var s_0_3 = cm_c();
        let kb_0_0 = coopLoad<cm_b>(&hs[(s_key0 + 0u * CM) * KP + 0u * CM], KP);
        s_0_0 = coopMultiplyAdd(q_0_0, kb_0_0, s_0_0);
        let kb_0_1 = coopLoad<cm_b>(&hs[(s_key0 + 1u * CM) * KP + 0u * CM], KP);
        s_0_1 = coopMultiplyAdd(q_0_0, kb_0_1, s_0_1);
        let kb_0_2 = coopLoad<cm_b>(&hs[(s_key0 + 2u * CM) * KP + 0u * CM], KP);
        s_0_2 = coopMultiplyAdd(q_0_0, kb_0_2, s_0_2);
        let kb_0_3 = coopLoad<cm_b>(&hs[(s_key0 + 3u * CM) * KP + 0u * CM], KP);
        s_0_3 = coopMultiplyAdd(q_0_0, kb_0_3, s_0_3);
        let kb_1_0 = coopLoad<cm_b>(&hs[(s_key0 + 0u * CM) * KP + 1u * CM], KP);
        s_0_0 = coopMultiplyAdd(q_0_1, kb_1_0, s_0_0);
        let kb_1_1 = coopLoad<cm_b>(&hs[(s_key0 + 1u * CM) * KP + 1u * CM], KP);
        s_0_1 = coopMultiplyAdd(q_0_1, kb_1_1, s_0_1);
        let kb_1_2 = coopLoad<cm_b>(&hs[(s_key0 + 2u * CM) * KP + 1u * CM], KP);
        s_0_2 = coopMultiplyAdd(q_0_1, kb_1_2, s_0_2);
        let kb_1_3 = coopLoad<cm_b>(&hs[(s_key0 + 3u * CM) * KP + 1u * CM], KP);
        s_0_3 = coopMultiplyAdd(q_0_1, kb_1_3, s_0_3);
        let kb_2_0 = coopLoad<cm_b>(&hs[(s_key0 + 0u * CM) * KP + 2u * CM], KP);
        s_0_0 = coopMultiplyAdd(q_0_2, kb_2_0, s_0_0);
        let kb_2_1 = coopLoad<cm_b>(&hs[(s_key0 + 1u * CM) * KP + 2u * CM], KP);
        s_0_1 = coopMultiplyAdd(q_0_2, kb_2_1, s_0_1);
        let kb_2_2 = coopLoad<cm_b>(&hs[(s_key0 + 2u * CM) * KP + 2u * CM], KP);
        s_0_2 = coopMultiplyAdd(q_0_2, kb_2_2, s_0_2);
        let kb_2_3 = coopLoad<cm_b>(&hs[(s_key0 + 3u * CM) * KP + 2u * CM], KP);
        s_0_3 = coopMultiplyAdd(q_0_2, kb_2_3, s_0_3);
        let kb_3_0 = coopLoad<cm_b>(&hs[(s_key0 + 0u * CM) * KP + 3u * CM], KP);
        s_0_0 = coopMultiplyAdd(q_0_3, kb_3_0, s_0_0);
        let kb_3_1 = coopLoad<cm_b>(&hs[(s_key0 + 1u * CM) * KP + 3u * CM], KP);
        s_0_1 = coopMultiplyAdd(q_0_3, kb_3_1, s_0_1);
        let kb_3_2 = coopLoad<cm_b>(&hs[(s_key0 + 2u * CM) * KP + 3u * CM], KP);
        s_0_2 = coopMultiplyAdd(q_0_3, kb_3_2, s_0_2);
        let kb_3_3 = coopLoad<cm_b>(&hs[(s_key0 + 3u * CM) * KP + 3u * CM], KP);
        s_0_3 = coopMultiplyAdd(q_0_3, kb_3_3, s_0_3);
        let kb_4_0 = coopLoad<cm_b>(&hs[(s_key0 + 0u * CM) * KP + 4u * CM], KP);
        s_0_0 = coopMultiplyAdd(q_0_4, kb_4_0, s_0_0);
        let kb_4_1 = coopLoad<cm_b>(&hs[(s_key0 + 1u * CM) * KP + 4u * CM], KP);
        s_0_1 = coopMultiplyAdd(q_0_4, kb_4_1, s_0_1);
        let kb_4_2 = coopLoad<cm_b>(&hs[(s_key0 + 2u * CM) * KP + 4u * CM], KP);
        s_0_2 = coopMultiplyAdd(q_0_4, kb_4_2, s_0_2);
        let kb_4_3 = coopLoad<cm_b>(&hs[(s_key0 + 3u * CM) * KP + 4u * CM], KP);
        s_0_3 = coopMultiplyAdd(q_0_4, kb_4_3, s_0_3);
        let kb_5_0 = coopLoad<cm_b>(&hs[(s_key0 + 0u * CM) * KP + 5u * CM], KP);
        s_0_0 = coopMultiplyAdd(q_0_5, kb_5_0, s_0_0);
        let kb_5_1 = coopLoad<cm_b>(&hs[(s_key0 + 1u * CM) * KP + 5u * CM], KP);
        s_0_1 = coopMultiplyAdd(q_0_5, kb_5_1, s_0_1);
        let kb_5_2 = coopLoad<cm_b>(&hs[(s_key0 + 2u * CM) * KP + 5u * CM], KP);
        s_0_2 = coopMultiplyAdd(q_0_5, kb_5_2, s_0_2);
        let kb_5_3 = coopLoad<cm_b>(&hs[(s_key0 + 3u * CM) * KP + 5u * CM], KP);
        s_0_3 = coopMultiplyAdd(q_0_5, kb_5_3, s_0_3);
        let kb_6_0 = coopLoad<cm_b>(&hs[(s_key0 + 0u * CM) * KP + 6u * CM], KP);
        s_0_0 = coopMultiplyAdd(q_0_6, kb_6_0, s_0_0);
        let kb_6_1 = coopLoad<cm_b>(&hs[(s_key0 + 1u * CM) * KP + 6u * CM], KP);
        s_0_1 = coopMultiplyAdd(q_0_6, kb_6_1, s_0_1);
        let kb_6_2 = coopLoad<cm_b>(&hs[(s_key0 + 2u * CM) * KP + 6u * CM], KP);
        s_0_2 = coopMultiplyAdd(q_0_6, kb_6_2, s_0_2);
        let kb_6_3 = coopLoad<cm_b>(&hs[(s_key0 + 3u * CM) * KP + 6u * CM], KP);
        s_0_3 = coopMultiplyAdd(q_0_6, kb_6_3, s_0_3);
        let kb_7_0 = coopLoad<cm_b>(&hs[(s_key0 + 0u * CM) * KP + 7u * CM], KP);
        s_0_0 = coopMultiplyAdd(q_0_7, kb_7_0, s_0_0);
        let kb_7_1 = coopLoad<cm_b>(&hs[(s_key0 + 1u * CM) * KP + 7u * CM], KP);
        s_0_1 = coopMultiplyAdd(q_0_7, kb_7_1, s_0_1);
        let kb_7_2 = coopLoad<cm_b>(&hs[(s_key0 + 2u * CM) * KP + 7u * CM], KP);
        s_0_2 = coopMultiplyAdd(q_0_7, kb_7_2, s_0_2);
        let kb_7_3 = coopLoad<cm_b>(&hs[(s_key0 + 3u * CM) * KP + 7u * CM], KP);
        s_0_3 = coopMultiplyAdd(q_0_7, kb_7_3, s_0_3);
        coopStoreT(s_0_0, &s_sh[(s_row0 + 0u * CM) * S_ROW + (s_key0 + 0u * CM) * S_KEY], SP);
        coopStoreT(s_0_1, &s_sh[(s_row0 + 0u * CM) * S_ROW + (s_key0 + 1u * CM) * S_KEY], SP);
        coopStoreT(s_0_2, &s_sh[(s_row0 + 0u * CM) * S_ROW + (s_key0 + 2u * CM) * S_KEY], SP);
        coopStoreT(s_0_3, &s_sh[(s_row0 + 0u * CM) * S_ROW + (s_key0 + 3u * CM) * S_KEY], SP);
        workgroupBarrier();
        // The values over the keys.
        for (var e = lid; e < BC * HD / 4u; e += SG * NSG) {
            put(V_AT, e, fetch_v(e, j0, kv));
        }
        softmax_row(lr + 0u * 64u, t, j0, vis_0, &m_0, &l_0);
        workgroupBarrier();
        if flag_sh[0] == j0 + 1u {
            o_0_0 = rescale(o_0_0, sg, lane, o_row0 + 0u * CM);
            o_0_1 = rescale(o_0_1, sg, lane, o_row0 + 0u * CM);
            o_0_2 = rescale(o_0_2, sg, lane, o_row0 + 0u * CM);
            o_0_3 = rescale(o_0_3, sg, lane, o_row0 + 0u * CM);
            o_1_0 = rescale(o_1_0, sg, lane, o_row0 + 1u * CM);
            o_1_1 = rescale(o_1_1, sg, lane, o_row0 + 1u * CM);
            o_1_2 = rescale(o_1_2, sg, lane, o_row0 + 1u * CM);
            o_1_3 = rescale(o_1_3, sg, lane, o_row0 + 1u * CM);
        }
        let kt_end = min(BC, (block_keys - j0 + CM - 1u) / CM * CM);
        for (var kt = 0u; kt < kt_end; kt += CM) {
            let pa_0 = coopLoadT<cm_a>(&hs[P_AT + (o_row0 + 0u * CM) * P_ROW + kt * P_KEY], PP);
            let pa_1 = coopLoadT<cm_a>(&hs[P_AT + (o_row0 + 1u * CM) * P_ROW + kt * P_KEY], PP);
            let vb_0 = coopLoadT<cm_b>(&hs[V_AT + kt * KP + o_col0 + 0u * CM], KP);
            o_0_0 = coopMultiplyAdd(pa_0, vb_0, o_0_0);
            o_1_0 = coopMultiplyAdd(pa_1, vb_0, o_1_0);
            let vb_1 = coopLoadT<cm_b>(&hs[V_AT + kt * KP + o_col0 + 1u * CM], KP);
            o_0_1 = coopMultiplyAdd(pa_0, vb_1, o_0_1);
            o_1_1 = coopMultiplyAdd(pa_1, vb_1, o_1_1);
            let vb_2 = coopLoadT<cm_b>(&hs[V_AT + kt * KP + o_col0 + 2u * CM], KP);
            o_0_2 = coopMultiplyAdd(pa_0, vb_2, o_0_2);
            o_1_2 = coopMultiplyAdd(pa_1, vb_2, o_1_2);
            let vb_3 = coopLoadT<cm_b>(&hs[V_AT + kt * KP + o_col0 + 3u * CM], KP);
            o_0_3 = coopMultiplyAdd(pa_0, vb_3, o_0_3);
            o_1_3 = coopMultiplyAdd(pa_1, vb_3, o_1_3);
        }
    }
    // Each row's 1 / sum.
    let inv_0 = inverse_sum(l_0);
    if t == 0u {
        alpha_sh[lr + 0u * 64u] = inv_0;
    }
    let rows = params.sq - min(r0, params.sq);
    drain(o_0_0, sg, lane, ok, o_row0 + 0u * CM, o_col0 + 0u * CM, q_at, rows);
    drain(o_0_1, sg, lane, ok, o_row0 + 0u * CM, o_col0 + 1u * CM, q_at, rows);
    drain(o_0_2, sg, lane, ok, o_row0 + 0u * CM, o_col0 + 2u * CM, q_at, rows);
    drain(o_0_3, sg, lane, ok, o_row0 + 0u * CM, o_col0 + 3u * CM, q_at, rows);
    drain(o_1_0, sg, lane, ok, o_row0 + 1u * CM, o_col0 + 0u * CM, q_at, rows);
    drain(o_1_1, sg, lane, ok, o_row0 + 1u * CM, o_col0 + 1u * CM, q_at, rows);
    drain(o_1_2, sg, lane, ok, o_row0 + 1u * CM, o_col0 + 2u * CM, q_at, rows);
    drain(o_1_3, sg, lane, ok, o_row0 + 1u * CM, o_col0 + 3u * CM, q_at, rows);
}
// END generated
