// `f16_words.wgsl` through the hardware's conversion (`unpack2x16float`),
// for adapters with wgpu's SHADER_F16_IN_F32: see that file.
//
//

// The low 16 bits of `h` to f32.
fn f16_bits(h: u32) -> f32 {
    return unpack2x16float(h & 0xFFFFu).x;
}

// The two f16 of a word (element 0 in the low half), as f32.
fn f16_pair(v: u32) -> vec2<f32> {
    return unpack2x16float(v);
}
