// Softmax attention (causal or not) with grouped-query heads. q, k, v and out hold
// `act` values (f32 or f16, see shaders/src/lib.rs); scores, the softmax and
// the accumulators are f32.
//
// q   [batch * sq, n_heads * head_dim], query row r of batch element b is
//     row b * sq + r, at position pos0 + r
// k,v [batch * kv_rows, n_kv * head_dim], rows b * kv_rows + (0..kv_len)
//     valid (a cache: batch 1, kv_rows its capacity)
// out [batch * sq, n_heads * head_dim]
// Causal: query row r sees keys 0..=pos0 + r; otherwise all kv_len.
//
// `attend`: one workgroup per (head, query row). Keys are visited in tiles
// of WG with an online softmax (running max and sum, accumulator rescaled
// when the max grows), so workgroup memory stays fixed whatever kv_len is.
// Past one tile of keys the wide `attend_split` runs instead (reading keys
// four invocations to a key): decoding has too few (head, row) pairs to
// fill a GPU, so there the keys are also split over workgroups, and the
// partial softmaxes combined (`attend_combine`, which also combines the
// splits of attention_decode.wgsl, the decode kernel). Query head h
// reads kv head h / (n_heads / n_kv) (contiguous groups, HF repeat_kv).
//
// needs: Params
// provides: DPT, NEG_BIG, WG, empty_partial, key_dot, kv_column, kv_row0
// provides: load_query, online_step, out, params
//

// Params: attention_params.wgsl, before this file.

const WG: u32 = 64u;
const MAX_HEAD_DIM: u32 = 256u;
// Output dimensions per invocation: MAX_HEAD_DIM / WG.
const DPT: u32 = 4u;
const NEG_BIG: f32 = -3.0e38;

var<immediate> params: Params;
@group(0) @binding(1) var<storage, read> q: array<act>;
@group(0) @binding(2) var<storage, read> k: array<act>;
@group(0) @binding(3) var<storage, read> v: array<act>;
@group(0) @binding(4) var<storage, read_write> out: array<act>;
// Split-K partials (f32).
@group(0) @binding(5) var<storage, read_write> part: array<f32>;

var<workgroup> qs: array<f32, MAX_HEAD_DIM>;
var<workgroup> probs: array<f32, WG>;
var<workgroup> red: array<f32, WG>;

fn workgroup_max(lid: u32, x: f32) -> f32 {
    red[lid] = x;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if lid < s {
            red[lid] = max(red[lid], red[lid + s]);
        }
        workgroupBarrier();
    }
    let m = red[0];
    workgroupBarrier();
    return m;
}

fn workgroup_sum(lid: u32, x: f32) -> f32 {
    red[lid] = x;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if lid < s {
            red[lid] = red[lid] + red[lid + s];
        }
        workgroupBarrier();
    }
    let total = red[0];
    workgroupBarrier();
    return total;
}

// What one workgroup's keys lo..hi give a query row: the running max m,
// the sum l of exp(score - m), and the unnormalised output acc.
struct Partial {
    m: f32,
    l: f32,
    acc: array<f32, DPT>,
}

// q·k of the query row in `qs` and key row `kv_row`, columns kv_col..
// (unscaled).
fn key_dot(kv_row: u32, kv_col: u32) -> f32 {
    let hd = params.head_dim;
    let k_base = kv_row * params.n_kv * hd + kv_col;
    var dot = 0.0;
    for (var d = 0u; d < hd; d = d + 1u) {
        dot = dot + qs[d] * f32(k[k_base + d]);
    }
    return dot;
}

// Folds the tile of keys t0..min(t0 + WG, hi) into the running softmax
// `run`: `score` is this invocation's key's (t0 + lid; NEG_BIG past hi).
// Called in uniform control flow (it synchronises the workgroup).
fn online_step(lid: u32, run: Partial, score: f32, kv_row0: u32, kv_col: u32, t0: u32, hi: u32) -> Partial {
    let hd = params.head_dim;
    let kv_stride = params.n_kv * hd;
    let m_new = max(run.m, workgroup_max(lid, score));
    let correction = exp(run.m - m_new);
    var p = 0.0;
    if t0 + lid < hi {
        p = exp(score - m_new);
    }
    probs[lid] = p;
    let l = run.l * correction + workgroup_sum(lid, p);
    let n_tile = min(WG, hi - t0);
    var acc = run.acc;
    for (var c = 0u; c < DPT; c = c + 1u) {
        let d = lid + c * WG;
        if d < hd {
            var a = acc[c] * correction;
            for (var jj = 0u; jj < n_tile; jj = jj + 1u) {
                a = a + probs[jj] * f32(v[(kv_row0 + t0 + jj) * kv_stride + kv_col + d]);
            }
            acc[c] = a;
        }
    }
    workgroupBarrier();
    return Partial(m_new, l, acc);
}

// A softmax over no keys yet.
fn empty_partial() -> Partial {
    return Partial(NEG_BIG, 0.0, array<f32, DPT>(0.0, 0.0, 0.0, 0.0));
}

// Online softmax over keys lo..hi (bounds uniform over the workgroup) for
// the query row already in `qs`, reading kv columns kv_col.. of rows
// kv_row0 + (lo..hi).
fn attend_range(lid: u32, kv_row0: u32, kv_col: u32, lo: u32, hi: u32) -> Partial {
    var run = empty_partial();
    for (var t0 = lo; t0 < hi; t0 = t0 + WG) {
        let j = t0 + lid;
        var score = NEG_BIG;
        if j < hi {
            score = key_dot(kv_row0 + j, kv_col) * params.scale;
        }
        run = online_step(lid, run, score, kv_row0, kv_col, t0, hi);
    }
    return run;
}

// Loads query row r of head h into `qs`; returns its offset in q and out.
fn load_query(lid: u32, h: u32, r: u32) -> u32 {
    let hd = params.head_dim;
    let q_base = (r * params.n_heads + h) * hd;
    for (var d = lid; d < hd; d = d + WG) {
        qs[d] = f32(q[q_base + d]);
    }
    workgroupBarrier();
    return q_base;
}

// Keys 0..limit are visible to query row g (of all batch elements).
fn visible(g: u32) -> u32 {
    if params.causal == 0u {
        return params.kv_len;
    }
    return min(params.kv_len, params.pos0 + g % params.sq + 1u);
}

// First k/v row of query row g's batch element.
fn kv_row0(g: u32) -> u32 {
    return (g / params.sq) * params.kv_rows;
}

// Column of head h's kv head in the caches.
fn kv_column(h: u32) -> u32 {
    return (h / (params.n_heads / params.n_kv)) * params.head_dim;
}

// One workgroup per (head, query row) over all its keys.
@compute @workgroup_size(64)
fn attend(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let r = wid.y;
    let q_base = load_query(lid, h, r);
    let p = attend_range(lid, kv_row0(r), kv_column(h), 0u, visible(r));
    for (var c = 0u; c < DPT; c = c + 1u) {
        let d = lid + c * WG;
        if d < params.head_dim {
            out[q_base + d] = act(p.acc[c] / p.l);
        }
    }
}

// Split-K (flash-decoding): workgroup (s·n_heads + h, r) takes keys
// s·chunk.. of query row r, head h, and writes its Partial to `part` at
// ((r·n_heads + h)·splits + s)·(head_dim + 2): m, l, then acc. A decode
// step has few (head, row) pairs, so each workgroup is wide: SPLIT_LANES
// invocations dot each key of a WG-key tile (every SPLIT_LANES-th
// dimension each), and the tile's values are summed by
// SPLIT_WG / hdp groups of invocations, one dimension each (hdp: head_dim
// rounded up to a power of two), whose sums are added at the end.
const SPLIT_WG: u32 = 256u;
// head_dim, a constant so that the loops over dimensions and keys have
// constant trip counts: the compiler unrolls them and issues their loads
// together instead of one memory latency per iteration.
override HD: u32 = 128u;
const SPLIT_LANES: u32 = 4u; // SPLIT_WG / WG

var<workgroup> lane_sums: array<f32, SPLIT_WG>;
var<workgroup> tile_p: array<f32, WG>;

@compute @workgroup_size(256)
fn attend_split(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x % params.n_heads;
    let s = wid.x / params.n_heads;
    let r = wid.y;
    let hd = HD;
    let q_base = (r * params.n_heads + h) * hd;
    for (var d = lid; d < hd; d = d + SPLIT_WG) {
        qs[d] = f32(q[q_base + d]);
    }
    workgroupBarrier();
    let lo = min(s * params.chunk, visible(r));
    let hi = min(lo + params.chunk, visible(r));
    let kv_stride = params.n_kv * hd;
    let kv_col = kv_column(h);
    // This invocation's key lane, and its dimension and key group for values.
    let key = lid / SPLIT_LANES;
    let lane = lid % SPLIT_LANES;
    let hdp = 1u << firstLeadingBit(2u * hd - 1u);
    let groups = max(SPLIT_WG / hdp, 1u);
    let dim = lid % hdp;
    let group = lid / hdp;
    var m = NEG_BIG;
    var l = 0.0;
    var acc = 0.0;
    for (var t0 = lo; t0 < hi; t0 = t0 + WG) {
        let j = t0 + key;
        var partial = 0.0;
        if j < hi {
            let k_base = (kv_row0(r) + j) * kv_stride + kv_col;
            for (var i = 0u; i < (HD + SPLIT_LANES - 1u) / SPLIT_LANES; i = i + 1u) {
                let d = lane + i * SPLIT_LANES;
                if d < hd {
                    partial = partial + qs[d] * f32(k[k_base + d]);
                }
            }
        }
        lane_sums[lid] = partial;
        workgroupBarrier();
        if lid < WG {
            var score = NEG_BIG;
            if t0 + lid < hi {
                let b = lid * SPLIT_LANES;
                let dot = (lane_sums[b] + lane_sums[b + 1u]) + (lane_sums[b + 2u] + lane_sums[b + 3u]);
                score = dot * params.scale;
            }
            probs[lid] = score;
        }
        workgroupBarrier();
        var tile_max = NEG_BIG;
        for (var t = 0u; t < WG; t = t + 1u) {
            tile_max = max(tile_max, probs[t]);
        }
        let m_new = max(m, tile_max);
        let correction = exp(m - m_new);
        if lid < WG {
            var p = 0.0;
            if t0 + lid < hi {
                p = exp(probs[lid] - m_new);
            }
            tile_p[lid] = p;
        }
        workgroupBarrier();
        var tile_sum = 0.0;
        for (var t = 0u; t < WG; t = t + 1u) {
            tile_sum = tile_sum + tile_p[t];
        }
        l = l * correction + tile_sum;
        var a = acc * correction;
        if dim < hd && group < groups {
            let n_keys = min(WG, hi - t0);
            // A constant trip count (groups is one with HD), keys past the
            // tile skipped: the same sums in the same order.
            for (var i = 0u; i < (WG + groups - 1u) / groups; i = i + 1u) {
                let jj = group + i * groups;
                if jj < n_keys {
                    a = a + tile_p[jj] * f32(v[(kv_row0(r) + t0 + jj) * kv_stride + kv_col + dim]);
                }
            }
        }
        acc = a;
        m = m_new;
        workgroupBarrier();
    }
    // The groups' sums of each dimension, added in group order.
    lane_sums[lid] = acc;
    workgroupBarrier();
    let base = ((r * params.n_heads + h) * params.splits + s) * (hd + 2u);
    if lid == 0u {
        part[base] = m;
        part[base + 1u] = l;
    }
    for (var d = lid; d < hd; d = d + SPLIT_WG) {
        var total = 0.0;
        for (var g = 0u; g < groups; g = g + 1u) {
            total = total + lane_sums[g * hdp + d];
        }
        part[base + 2u + d] = total;
    }
}

// Combines the splits of query row wid.y, head wid.x: rescale each by
// exp(m_s - max m) and normalise by the rescaled sum of l_s.
@compute @workgroup_size(64)
fn attend_combine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let r = wid.y;
    let hd = params.head_dim;
    let row = (r * params.n_heads + h) * params.splits;
    var mx = NEG_BIG;
    for (var s = 0u; s < params.splits; s = s + 1u) {
        mx = max(mx, part[(row + s) * (hd + 2u)]);
    }
    var l = 0.0;
    for (var s = 0u; s < params.splits; s = s + 1u) {
        let base = (row + s) * (hd + 2u);
        l = l + part[base + 1u] * exp(part[base] - mx);
    }
    let q_base = (r * params.n_heads + h) * hd;
    for (var c = 0u; c < DPT; c = c + 1u) {
        let d = lid + c * WG;
        if d < hd {
            var a = 0.0;
            for (var s = 0u; s < params.splits; s = s + 1u) {
                let base = (row + s) * (hd + 2u);
                a = a + part[base + 2u + d] * exp(part[base] - mx);
            }
            out[q_base + d] = act(a / l);
        }
    }
}
