// Single-head softmax attention over the positions of NCHW `act` maps (the
// VAE mid-block's): q, k, v, out [batch, c, n] (n = h*w positions, channel
// rows contiguous), scores and sums in f32:
//
// out[b, :, i] = sum_j softmax_j(scale * q[b, :, i] . k[b, :, j]) v[b, :, j]
//
// One workgroup takes TQ queries of one image (workgroups: x = query tiles,
// y = batch) with the queries in workgroup memory, and walks the keys BK at
// a time with an online softmax (flash attention without matrix units):
// invocation l scores key l % BK against two of the queries, then owns
// channels l, l + WG, ... (c <= MAX_C) of every query's accumulator.

struct Params {
    c: u32,
    n: u32,
    scale: f32,
    _pad0: u32,
}

const WG: u32 = 256u;
const TQ: u32 = 4u;
const BK: u32 = 128u;
const MAX_C: u32 = 512u;
// Channels per invocation: MAX_C / WG.
const CPI: u32 = 2u;

var<immediate> params: Params;
@group(0) @binding(1) var<storage, read> q: array<act>;
@group(0) @binding(2) var<storage, read> k: array<act>;
@group(0) @binding(3) var<storage, read> v: array<act>;
@group(0) @binding(4) var<storage, read_write> out: array<act>;

var<workgroup> qs: array<f32, 2048>; // [MAX_C][TQ]
var<workgroup> ps: array<f32, 512>; // [TQ][BK] probabilities
var<workgroup> red: array<f32, 512>; // [TQ][BK] reductions

// Reduces red[t * BK + 0 .. BK] for every t at once (max or sum); every
// invocation gets query t's result from red[t * BK] after the call.
fn reduce_keys(lid: u32, is_max: bool) {
    let j = lid % BK;
    let t0 = (lid / BK) * 2u;
    for (var s = BK / 2u; s > 0u; s = s >> 1u) {
        if j < s {
            for (var t = t0; t < t0 + 2u; t = t + 1u) {
                let a = red[t * BK + j];
                let b = red[t * BK + j + s];
                red[t * BK + j] = select(a + b, max(a, b), is_max);
            }
        }
        workgroupBarrier();
    }
}

@compute @workgroup_size(WG)
fn spatial_attention(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = params.c;
    let n = params.n;
    let b = wid.y;
    let i0 = wid.x * TQ;
    let base = b * c * n;
    for (var e = lid; e < c * TQ; e = e + WG) {
        let ch = e / TQ;
        let t = e % TQ;
        var val = 0.0;
        if i0 + t < n {
            val = f32(q[base + ch * n + i0 + t]) * params.scale;
        }
        qs[e] = val;
    }
    workgroupBarrier();
    let j = lid % BK;
    let t0 = (lid / BK) * 2u;
    // Running max and sum per query (every invocation keeps all TQ).
    var m: array<f32, TQ>;
    var l: array<f32, TQ>;
    for (var t = 0u; t < TQ; t = t + 1u) {
        m[t] = -3.0e38;
        l[t] = 0.0;
    }
    var acc: array<f32, 8>; // [CPI][TQ]
    for (var j0 = 0u; j0 < n; j0 = j0 + BK) {
        let key = j0 + j;
        var s0 = -3.0e38;
        var s1 = -3.0e38;
        if key < n {
            var a0 = 0.0;
            var a1 = 0.0;
            for (var ch = 0u; ch < c; ch = ch + 1u) {
                let kv = f32(k[base + ch * n + key]);
                a0 = a0 + qs[ch * TQ + t0] * kv;
                a1 = a1 + qs[ch * TQ + t0 + 1u] * kv;
            }
            s0 = a0;
            s1 = a1;
        }
        red[t0 * BK + j] = s0;
        red[(t0 + 1u) * BK + j] = s1;
        workgroupBarrier();
        reduce_keys(lid, true);
        var m_new: array<f32, TQ>;
        var corr: array<f32, TQ>;
        for (var t = 0u; t < TQ; t = t + 1u) {
            m_new[t] = max(m[t], red[t * BK]);
            corr[t] = exp(m[t] - m_new[t]);
        }
        workgroupBarrier();
        let p0 = select(0.0, exp(s0 - m_new[t0]), key < n);
        let p1 = select(0.0, exp(s1 - m_new[t0 + 1u]), key < n);
        ps[t0 * BK + j] = p0;
        ps[(t0 + 1u) * BK + j] = p1;
        red[t0 * BK + j] = p0;
        red[(t0 + 1u) * BK + j] = p1;
        workgroupBarrier();
        reduce_keys(lid, false);
        for (var t = 0u; t < TQ; t = t + 1u) {
            l[t] = l[t] * corr[t] + red[t * BK];
            m[t] = m_new[t];
        }
        let keys = min(BK, n - j0);
        for (var u = 0u; u < CPI; u = u + 1u) {
            let ch = lid + u * WG;
            if ch >= c {
                break;
            }
            var a: array<f32, TQ>;
            for (var t = 0u; t < TQ; t = t + 1u) {
                a[t] = acc[u * TQ + t] * corr[t];
            }
            let row = base + ch * n + j0;
            for (var jj = 0u; jj < keys; jj = jj + 1u) {
                let vv = f32(v[row + jj]);
                for (var t = 0u; t < TQ; t = t + 1u) {
                    a[t] = a[t] + ps[t * BK + jj] * vv;
                }
            }
            for (var t = 0u; t < TQ; t = t + 1u) {
                acc[u * TQ + t] = a[t];
            }
        }
        workgroupBarrier();
    }
    for (var u = 0u; u < CPI; u = u + 1u) {
        let ch = lid + u * WG;
        if ch >= c {
            break;
        }
        for (var t = 0u; t < TQ; t = t + 1u) {
            if i0 + t < n {
                out[base + ch * n + i0 + t] = act(acc[u * TQ + t] / l[t]);
            }
        }
    }
}
