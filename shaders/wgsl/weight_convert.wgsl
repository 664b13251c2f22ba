// The weight conversions' shared part (bf16_to_f16.wgsl, int4_to_int8.wgsl):
// their immediates and the stored weights they read, as u32 words; each
// body adds its `dst` and `main`.
//
// provides: p, src

struct Params {
    words: u32,
    src_word0: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> src: array<u32>;
var<immediate> p: Params;
