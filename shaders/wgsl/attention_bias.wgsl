// Attention with an additive bias per (query row, key, head) and the
// params' score scale, no mask (T5's encoder: scale 1, the relative
// position bias): out = softmax(q kᵀ · scale + bias) v, on attention.wgsl's
// online softmax. Layouts as attention.wgsl's (batch elements of sq query
// rows over kv_rows = kv_len keys each); bias is f32
// [sq, kv_len, n_heads], heads innermost (what gathering a [buckets, heads]
// table by a [sq, kv_len] bucket id gives), shared by the batch elements.
// One workgroup per (head, query row).
//
// needs: DPT, NEG_BIG, WG, empty_partial, key_dot, kv_column, kv_row0
// needs: load_query, online_step, out, params

@group(0) @binding(6) var<storage, read> bias: array<f32>;

@compute @workgroup_size(64)
fn attend_bias(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let h = wid.x;
    let r = wid.y;
    let q_base = load_query(lid, h, r);
    let row0 = kv_row0(r);
    let col = kv_column(h);
    let hi = params.kv_len;
    let bias_row = (r % params.sq) * params.kv_len;
    var run = empty_partial();
    for (var t0 = 0u; t0 < hi; t0 = t0 + WG) {
        let j = t0 + lid;
        var score = NEG_BIG;
        if j < hi {
            score = key_dot(row0 + j, col) * params.scale + bias[(bias_row + j) * params.n_heads + h];
        }
        run = online_step(lid, run, score, row0, col, t0, hi);
    }
    for (var c = 0u; c < DPT; c = c + 1u) {
        let d = lid + c * WG;
        if d < params.head_dim {
            out[q_base + d] = act(run.acc[c] / run.l);
        }
    }
}
