// f16 and bf16 weight pairs as f16 for the cooperative GEMMs' float
// staging (linear_coop_float.wgsl, linear_coop_float_v4.wgsl), after
// linear_float_common.wgsl.
//
// needs: WFMT, bf16_pair, f16_pair
// provides: pair_quad
//

// Four weight columns from two words of pairs (f16 or bf16).
fn pair_quad(lo: u32, hi: u32) -> vec4<f16> {
    // (naga 30 cannot bitcast a u32 to vec2<f16>, so f16 goes through f32,
    // exactly.)
    if WFMT == 1u {
        return vec4<f16>(vec4<f32>(f16_pair(lo), f16_pair(hi)));
    }
    return vec4<f16>(vec4<f32>(bf16_pair(lo), bf16_pair(hi)));
}
