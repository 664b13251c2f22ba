// The params of attention.wgsl and attention_decode.wgsl (one host
// layout for both, and for attend_combine after either).
//
// provides: Params
struct Params {
    sq: u32,
    n_heads: u32,
    n_kv: u32,
    head_dim: u32,
    kv_len: u32,
    pos0: u32,
    scale: f32,
    // Split-K: keys per split and splits per query row.
    chunk: u32,
    splits: u32,
    kv_rows: u32,
    causal: u32,
    _pad2: u32,
}
