// IEEE binary16 values read from u32 words, decoded to f32 in integer
// arithmetic: exact for every value (subnormals, infinities, NaN payloads)
// and without branches, so that a GEMV reading f16 weights costs little more
// than one reading bf16. Where the adapter grants `unpack2x16float`
// (wgpu's SHADER_F16_IN_F32: every backend but Mesa's Vulkan without f16),
// `dynvram_shaders::with_f16_unpack` puts `f16_words_unpack.wgsl` in this
// file's place; without it, or with DYNVRAM_F16_UNPACK=off, this one runs.
//
// provides: f16_bits, f16_pair
//

// The low 16 bits of `h` to f32: the exponent rebiased by an add; a
// subnormal is its mantissa times 2^-24; an all-ones exponent stays all ones.
fn f16_bits(h: u32) -> f32 {
    let em = h & 0x7FFFu;
    let normal = (em << 13u) + 0x38000000u;
    let subnormal = bitcast<u32>(f32(em) * 0x1p-24f);
    let special = (em << 13u) | 0x7F800000u;
    let magnitude = select(select(normal, subnormal, em < 0x400u), special, em >= 0x7C00u);
    return bitcast<f32>(magnitude | ((h & 0x8000u) << 16u));
}

// The two f16 of a word (element 0 in the low half), as f32.
fn f16_pair(v: u32) -> vec2<f32> {
    return vec2<f32>(f16_bits(v & 0xFFFFu), f16_bits(v >> 16u));
}
