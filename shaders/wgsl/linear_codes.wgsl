// The activation codes' arithmetic (conformance README §4.3, 4.4, 4.6),
// shared by linear_act_codes.wgsl (codes written to a buffer) and
// linear_gemv_in_rotated.wgsl (codes made inside the integer GEMV): the
// row's scale from its absmax, and one value's code, bit for bit the CPU
// reference's wherever it runs.
//
// provides: code_of, code_of_inv, code_scale

// 0: int4, s = max(absmax, 1e-10) / 7, codes in [-7, 7]
// 1: int8 (convrot_w4a4, CUDA), s = max(absmax * (1/127), 1e-30), [-128, 127]
// 2: int8 (int8_tensorwise, eager), s = max(absmax / 127, 1e-30), [-128, 127]
override MODE: u32 = 0u;
// The f32 nearest to 1/127 (set by the host: WGSL constant folding goes
// through abstract floats and could round twice).
override INV127: f32 = 0.007874016;
// a / b rounded to nearest even, as the CPU reference divides: WGSL and
// Vulkan let division be 2.5 ulp off (NVIDIA's is), and one ulp moves a
// code across its rounding boundary, or changes a scale. An fma residual
// does not fix it portably (llvmpipe does not fuse), so the significands
// are divided in integers: 24 quotient bits, then the remainder decides the
// rounding (ties to even). Zero, subnormal, infinite or NaN operands and
// quotients outside the normal range keep the hardware quotient (they
// become code 0, a clamped code, or the scale floor either way).
fn div_rn(a: f32, b: f32) -> f32 {
    let q0 = a / b;
    let ua = bitcast<u32>(a);
    let ub = bitcast<u32>(b);
    let ea = i32((ua >> 23u) & 0xffu);
    let eb = i32((ub >> 23u) & 0xffu);
    if ea == 0 || ea == 255 || eb == 0 || eb == 255 {
        return q0;
    }
    let mb = (ub & 0x7fffffu) | 0x800000u;
    var r = (ua & 0x7fffffu) | 0x800000u;
    var e = ea - eb;
    // Scale so that r / mb lies in [1, 2): the quotient's leading bit.
    if r < mb {
        r = r << 1u;
        e = e - 1;
    }
    var quo = 0u;
    for (var i = 0u; i < 24u; i++) {
        quo = quo << 1u;
        if r >= mb {
            r = r - mb;
            quo = quo | 1u;
        }
        r = r << 1u;
    }
    // r is twice the remainder: past half of mb rounds up, half is a tie.
    if r > mb || (r == mb && (quo & 1u) == 1u) {
        quo = quo + 1u;
    }
    if quo == 0x1000000u {
        quo = quo >> 1u;
        e = e + 1;
    }
    let biased = e + 127;
    if biased < 1 || biased > 254 {
        return q0;
    }
    let sign = (ua ^ ub) & 0x80000000u;
    return bitcast<f32>(sign | (u32(biased) << 23u) | (quo & 0x7fffffu));
}

// The code of value `v` at scale `s`, clamped to [lo, hi].
fn code_of(v: f32, s: f32, lo: f32, hi: f32) -> i32 {
    let q = v / s;
    // The hardware quotient is within 2.5 ulp of v / s, so it rounds like
    // the correctly rounded one unless it lies within a few ulp (|q| · 1e-6
    // is over 8) of a half-integer: only there is the exact division paid.
    if abs(q - (floor(q) + 0.5)) > abs(q) * 1e-6 {
        return i32(clamp(round(q), lo, hi));
    }
    return i32(clamp(round(div_rn(v, s)), lo, hi));
}

// code_of with the quotient taken as v · inv, inv = 1 / s rounded: within
// about 3 ulp of v / s, inside the 8 ulp the test above allows, so the same
// code for a multiply instead of a division (code_of's callers that code
// every value many times over: the integer GEMVs).
fn code_of_inv(v: f32, s: f32, inv: f32, lo: f32, hi: f32) -> i32 {
    let q = v * inv;
    if abs(q - (floor(q) + 0.5)) > abs(q) * 1e-6 {
        return i32(clamp(round(q), lo, hi));
    }
    return i32(clamp(round(div_rn(v, s)), lo, hi));
}

// (scale, lowest code, highest code) of a row whose absmax is `absmax`.
fn code_scale(absmax: f32) -> vec3<f32> {
    switch MODE {
        case 0u: {
            return vec3<f32>(div_rn(max(absmax, 1e-10), 7.0), -7.0, 7.0);
        }
        case 1u: {
            return vec3<f32>(max(absmax * INV127, 1e-30), -128.0, 127.0);
        }
        default: {
            return vec3<f32>(max(div_rn(absmax, 127.0), 1e-30), -128.0, 127.0);
        }
    }
}
