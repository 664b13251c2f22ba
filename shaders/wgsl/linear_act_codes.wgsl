// Activation codes of one row (conformance README §4.3, 4.4, 4.6), shared by
// linear_act_quant.wgsl and linear_rotate_quant.wgsl: the row's scale from
// its absmax, then codes packed four per u32 (byte 0 = first column) for
// dot4I8Packed. The body provides `act_value(i) -> f32`, the (rotated) input
// at flat index i, computed in f32.

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
    _pad: u32,
}

@group(0) @binding(1) var<storage, read_write> q: array<u32>;
@group(0) @binding(2) var<storage, read_write> scales: array<f32>;
@group(0) @binding(3) var<uniform> qp: QuantParams;

fn code(row_base: u32, col: u32, s: f32, lo: f32, hi: f32) -> i32 {
    if col >= qp.k {
        return 0;
    }
    return i32(clamp(round(act_value(row_base + col) / s), lo, hi));
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
            s = max(absmax, 1e-10) / 7.0;
            lo = -7.0;
            hi = 7.0;
        }
        case 1u: {
            s = max(absmax * INV127, 1e-30);
        }
        default: {
            s = max(absmax / 127.0, 1e-30);
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
