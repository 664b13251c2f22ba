// Activation codes of one row (conformance README §4.3, 4.4, 4.6), shared by
// linear_act_quant.wgsl and linear_rotate_quant.wgsl: the row's scale from
// its absmax, then codes packed four per u32 (byte 0 = first column) for
// dot4I8Packed. The body provides `act_value(row_base, col) -> f32`, the (rotated) input
// at flat index i, computed in f32.
//
// needs: act_value
// provides: qp, write_codes

// 0: int4, s = max(absmax, 1e-10) / 7, codes in [-7, 7]
// 1: int8 (convrot_w4a4, CUDA), s = max(absmax * (1/127), 1e-30), [-128, 127]
// 2: int8 (int8_tensorwise, eager), s = max(absmax / 127, 1e-30), [-128, 127]
override MODE: u32 = 0u;
// The f32 nearest to 1/127 (set by the host: WGSL constant folding goes
// through abstract floats and could round twice).
override INV127: f32 = 0.007874016;
// Layout for int4 weights: in each block of 8 columns, word 0 holds the even
// columns and word 1 the odd ones (see linear_int_common.wgsl).
override PERM8: bool = false;

struct QuantParams {
    rows: u32,
    k: u32,
    // u32 words per output row: ceil(k / 4).
    kw: u32,
    // The RMS norm's epsilon as f32 bits (linear_add_norm_quant.wgsl).
    eps_bits: u32,
    // The linear kernels' 32-byte immediates are shared by every module.
    _pad1: u32,
    _pad2: u32,
    _pad3: u32,
    _pad4: u32,
}

@group(0) @binding(1) var<storage, read_write> q: array<u32>;
@group(0) @binding(2) var<storage, read_write> scales: array<f32>;
var<immediate> qp: QuantParams;

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

fn code(row_base: u32, col: u32, s: f32, lo: f32, hi: f32) -> i32 {
    if col >= qp.k {
        return 0;
    }
    let v = act_value(row_base, col);
    let q = v / s;
    // The hardware quotient is within 2.5 ulp of v / s, so it rounds like
    // the correctly rounded one unless it lies within a few ulp (|q| · 1e-6
    // is over 8) of a half-integer: only there is the exact division paid.
    if abs(q - (floor(q) + 0.5)) > abs(q) * 1e-6 {
        return i32(clamp(round(q), lo, hi));
    }
    return i32(clamp(round(div_rn(v, s)), lo, hi));
}

// Writes row `row`'s scale and codes; invocation `lid` of `threads` takes
// the words lid, lid + threads, …
fn write_codes(row: u32, lid: u32, threads: u32, absmax: f32) {
    let row_base = row * qp.k;
    var s: f32;
    var lo = -128.0;
    var hi = 127.0;
    switch MODE {
        case 0u: {
            s = div_rn(max(absmax, 1e-10), 7.0);
            lo = -7.0;
            hi = 7.0;
        }
        case 1u: {
            s = max(absmax * INV127, 1e-30);
        }
        default: {
            s = max(div_rn(absmax, 127.0), 1e-30);
        }
    }
    if lid == 0u {
        scales[row] = s;
    }
    for (var w = lid; w < qp.kw; w += threads) {
        var first = w * 4u;
        var step = 1u;
        if PERM8 {
            first = (w / 2u) * 8u + (w % 2u);
            step = 2u;
        }
        let c = vec4<i32>(
            code(row_base, first, s, lo, hi),
            code(row_base, first + step, s, lo, hi),
            code(row_base, first + 2u * step, s, lo, hi),
            code(row_base, first + 3u * step, s, lo, hi),
        );
        q[row * qp.kw + w] = pack4xI8(c);
    }
}
