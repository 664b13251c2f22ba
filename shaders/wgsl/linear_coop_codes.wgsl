// Integer codes and weights as f16 for the cooperative GEMMs' staging
// (linear_coop_int.wgsl, linear_coop_int_v4.wgsl): small integers, exact
// in f16.
//
// provides: i4_at, i8_at

// Signed byte `i` of `word`.
fn i8_at(word: u32, i: u32) -> f16 {
    return f16(bitcast<i32>(word << (24u - 8u * i)) >> 24u);
}

// Signed nibble `i` of `word` (nibble 0 in the low bits).
fn i4_at(word: u32, i: u32) -> f16 {
    return f16(bitcast<i32>(word << (28u - 4u * i)) >> 28u);
}
