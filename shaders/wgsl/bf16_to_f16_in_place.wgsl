// bf16 weights rewritten as f16 in place: a resident layer's, once as it is
// uploaded, where its GEMMs take the f16 kernels (`Cm2Bf16::ViaF16Resident`),
// so no pass converts it again. Two values a word, the low half first, each
// rounded to nearest-even in integer arithmetic (exact in f16's normal
// range; the few below it rounded as an f32 → f16 conversion rounds them);
// values past f16's range become infinity (the upload's scan keeps such
// weights bf16). A grid-stride loop over 256-invocation workgroups.

struct Params {
    words: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> w: array<u32>;
var<immediate> p: Params;

// The f16 bits of bf16 bits `b` (16 bits).
fn to_f16(b: u32) -> u32 {
    let sign = b & 0x8000u;
    let e = (b >> 7u) & 0xffu;
    let m = b & 0x7fu;
    if (e == 0u) {
        // Zero, or a bf16 subnormal (below 1.2e-38): zero.
        return sign;
    }
    if (e >= 143u) {
        return sign | 0x7c00u;
    }
    if (e >= 113u) {
        return sign | ((e - 112u) << 10u) | (m << 3u);
    }
    // An f16 subnormal: (1.m · 2^7) · 2^(e - 134), in units of 2^-24.
    let full = 0x80u | m;
    if (e >= 110u) {
        return sign | (full << (e - 110u));
    }
    let s = 110u - e;
    if (s > 9u) {
        return sign;
    }
    let q = full >> s;
    let r = full & ((1u << s) - 1u);
    let half = 1u << (s - 1u);
    let up = select(0u, 1u, r > half || (r == half && (q & 1u) == 1u));
    return sign | (q + up);
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let stride = groups.x * 256u;
    for (var i = gid.x; i < p.words; i += stride) {
        let x = w[i];
        w[i] = to_f16(x & 0xffffu) | (to_f16(x >> 16u) << 16u);
    }
}
