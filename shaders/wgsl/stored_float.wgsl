// Floats as checkpoints store them, read from raw 32-bit words so one kernel
// serves f32, f16 and bf16 without the f16 shader feature (f16 words are
// decoded by f16_words.wgsl).
// 16-bit values are little-endian: element e is the low half of word e/2
// when e is even.
//
// needs: f16_bits
// provides: stored_value
//

// Element `e` of a tensor of `dtype` (0 = f32, 1 = f16, 2 = bf16) whose word
// holding it is `word` (word e for f32, e/2 otherwise).
fn stored_value(word: u32, e: u32, dtype: u32) -> f32 {
    if dtype == 0u {
        return bitcast<f32>(word);
    }
    let odd = (e & 1u) == 1u;
    if dtype == 1u {
        return f16_bits(select(word & 0xffffu, word >> 16u, odd));
    }
    return bitcast<f32>(select(word << 16u, word & 0xffff0000u, odd));
}
