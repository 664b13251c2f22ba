// attention_decode.wgsl with RoPE fused (rope.wgsl's rotate_half form and
// arithmetic, from its host cos/sin table [positions, HD/2] of (cos, sin)):
// the queries are rotated as they are loaded, and the new key rows
// pos0..pos0+sq of the workgroup's key range are rotated in the cache
// (written back rounded to act) before any key is read. Needs HD % 8 == 0.
//
// needs: HD, WG, params, q
// provides: k, load_q, rope_new_keys

@group(0) @binding(2) var<storage, read_write> k: array<vec4<act>>;
@group(0) @binding(6) var<storage, read> table: array<vec2<f32>>;

struct CosSin {
    c: vec4<f32>,
    s: vec4<f32>,
}

// (cos, sin) of pairs i0..i0+4 at position pos.
fn rope_cs(pos: u32, i0: u32) -> CosSin {
    let b = pos * (HD / 2u) + i0;
    let t0 = table[b];
    let t1 = table[b + 1u];
    let t2 = table[b + 2u];
    let t3 = table[b + 3u];
    return CosSin(vec4<f32>(t0.x, t1.x, t2.x, t3.x), vec4<f32>(t0.y, t1.y, t2.y, t3.y));
}

// The rotated vec4 d4 of the head row at vec4 `base` (position pos), as
// rope.wgsl stores it: x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin.
fn load_q(base: u32, d4: u32, pos: u32) -> vec4<f32> {
    let half4 = HD / 8u;
    let x = vec4<f32>(q[base + d4]);
    if d4 < half4 {
        let y = vec4<f32>(q[base + d4 + half4]);
        let cs = rope_cs(pos, 4u * d4);
        return vec4<f32>(vec4<act>(x * cs.c - y * cs.s));
    }
    let y = vec4<f32>(q[base + d4 - half4]);
    let cs = rope_cs(pos, 4u * (d4 - half4));
    return vec4<f32>(vec4<act>(x * cs.c + y * cs.s));
}

// Rotates kv head g of the new key rows in lo..hi in place; afterwards
// (storageBarrier) the workgroup reads them rotated.
fn rope_new_keys(g: u32, lo: u32, hi: u32, lid: u32) {
    let r0 = max(lo, params.pos0);
    let r1 = max(min(hi, params.pos0 + params.sq), r0);
    let half4 = HD / 8u;
    let row4 = params.n_kv * (HD / 4u);
    for (var e = lid; e < (r1 - r0) * half4; e += WG) {
        let j = r0 + e / half4;
        let d4 = e % half4;
        let at = j * row4 + g * (HD / 4u) + d4;
        let x1 = vec4<f32>(k[at]);
        let x2 = vec4<f32>(k[at + half4]);
        let cs = rope_cs(j, 4u * d4);
        k[at] = vec4<act>(x1 * cs.c - x2 * cs.s);
        k[at + half4] = vec4<act>(x2 * cs.c + x1 * cs.s);
    }
    storageBarrier();
}
