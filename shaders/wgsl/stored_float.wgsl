// Floats as checkpoints store them, read from raw 32-bit words so one kernel
// serves f32, f16 and bf16 without the f16 shader feature (f16 is decoded by
// hand: unpack2x16float needs a downlevel capability some GL drivers lack).
// 16-bit values are little-endian: element e is the low half of word e/2
// when e is even.
//
// provides: stored_value
//

// IEEE binary16 bits (low 16 bits of `h`) to f32, exact for every value.
fn f16_bits_to_f32(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let exponent = (h >> 10u) & 0x1fu;
    let mantissa = h & 0x3ffu;
    if exponent == 0u {
        // zero or subnormal: mantissa * 2^-24
        let magnitude = f32(mantissa) * 5.9604644775390625e-8;
        return select(magnitude, -magnitude, sign != 0u);
    }
    if exponent == 31u {
        return bitcast<f32>(sign | 0x7f800000u | (mantissa << 13u));
    }
    return bitcast<f32>(sign | ((exponent + 112u) << 23u) | (mantissa << 13u));
}

// Element `e` of a tensor of `dtype` (0 = f32, 1 = f16, 2 = bf16) whose word
// holding it is `word` (word e for f32, e/2 otherwise).
fn stored_value(word: u32, e: u32, dtype: u32) -> f32 {
    if dtype == 0u {
        return bitcast<f32>(word);
    }
    let odd = (e & 1u) == 1u;
    if dtype == 1u {
        return f16_bits_to_f32(select(word & 0xffffu, word >> 16u, odd));
    }
    return bitcast<f32>(select(word << 16u, word & 0xffff0000u, odd));
}
