// attention_decode.wgsl without RoPE: q and the cache as they are.
//
// needs: q
// provides: k, load_q, rope_new_keys

@group(0) @binding(2) var<storage, read> k: array<vec4<act>>;

fn load_q(base: u32, d4: u32, pos: u32) -> vec4<f32> {
    return vec4<f32>(q[base + d4]);
}

fn rope_new_keys(g: u32, lo: u32, hi: u32, lid: u32) {}
