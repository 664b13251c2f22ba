// int4 weights widened to int8, for the SPIR-V int8 GEMM (gpu's integer
// linear, `Cm2Int4::ViaInt8`): `words` words of `src` from word
// `src_word0` on, eight two's-complement nibbles a word (nibble e of a word
// is its column 8j + e, the low nibble first), to the same values as int8
// in `dst` from word 0, four a word (byte e of a word is column 4j + e):
// the widening the int4 kernels make in their staging, so the exact s32
// sums are the same. A grid-stride loop over 256-invocation workgroups.
//
// needs: p, src

@group(0) @binding(1) var<storage, read_write> dst: array<u32>;

// Nibbles `first`..`first + 3` of `v`, sign-extended, as four bytes.
fn widen(v: u32, first: u32) -> u32 {
    var r = 0u;
    for (var e = 0u; e < 4u; e++) {
        let t = bitcast<u32>(extractBits(bitcast<i32>(v), 4u * (first + e), 4u));
        r |= (t & 0xffu) << (8u * e);
    }
    return r;
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let stride = groups.x * 256u;
    for (var i = gid.x; i < p.words; i += stride) {
        let w = src[p.src_word0 + i];
        dst[2u * i] = widen(w, 0u);
        dst[2u * i + 1u] = widen(w, 4u);
    }
}
