// Causal softmax attention with grouped-query heads. q, k, v and out hold
// `act` values (f32 or f16, see shaders/src/lib.rs); scores, the softmax and
// the accumulators are f32.
//
// q   [sq, n_heads * head_dim], query row r has position pos0 + r
// k,v [max_seq, n_kv * head_dim] caches, rows 0..kv_len valid
// out [sq, n_heads * head_dim]
//
// One workgroup per (head, query row). Keys are visited in tiles of WG with
// an online softmax (running max and sum, accumulator rescaled when the max
// grows), so workgroup memory stays fixed whatever kv_len is. Query head h
// reads kv head h / (n_heads / n_kv) (contiguous groups, HF repeat_kv).

struct Params {
    sq: u32,
    n_heads: u32,
    n_kv: u32,
    head_dim: u32,
    kv_len: u32,
    pos0: u32,
    scale: f32,
    _pad: u32,
}

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

@compute @workgroup_size(64)
fn attend(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let r = wid.y;
    let hd = params.head_dim;
    let kv_head = h / (params.n_heads / params.n_kv);
    let q_base = (r * params.n_heads + h) * hd;
    let kv_stride = params.n_kv * hd;
    let kv_col = kv_head * hd;

    for (var d = lid; d < hd; d = d + WG) {
        qs[d] = f32(q[q_base + d]);
    }
    workgroupBarrier();

    // Keys 0..limit are visible to this query (causal mask).
    let limit = min(params.kv_len, params.pos0 + r + 1u);
    var m = NEG_BIG;
    var l = 0.0;
    var acc = array<f32, DPT>(0.0, 0.0, 0.0, 0.0);
    for (var t0 = 0u; t0 < limit; t0 = t0 + WG) {
        let j = t0 + lid;
        var score = NEG_BIG;
        if j < limit {
            let k_base = j * kv_stride + kv_col;
            var dot = 0.0;
            for (var d = 0u; d < hd; d = d + 1u) {
                dot = dot + qs[d] * f32(k[k_base + d]);
            }
            score = dot * params.scale;
        }
        let m_new = max(m, workgroup_max(lid, score));
        let correction = exp(m - m_new);
        var p = 0.0;
        if j < limit {
            p = exp(score - m_new);
        }
        probs[lid] = p;
        l = l * correction + workgroup_sum(lid, p);
        let n_tile = min(WG, limit - t0);
        for (var c = 0u; c < DPT; c = c + 1u) {
            let d = lid + c * WG;
            if d < hd {
                var a = acc[c] * correction;
                for (var jj = 0u; jj < n_tile; jj = jj + 1u) {
                    a = a + probs[jj] * f32(v[(t0 + jj) * kv_stride + kv_col + d]);
                }
                acc[c] = a;
            }
        }
        m = m_new;
        workgroupBarrier();
    }
    for (var c = 0u; c < DPT; c = c + 1u) {
        let d = lid + c * WG;
        if d < hd {
            out[q_base + d] = act(acc[c] / l);
        }
    }
}
