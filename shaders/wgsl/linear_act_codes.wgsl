// Activation codes of one row written to a buffer, after linear_codes.wgsl;
// shared by linear_act_quant.wgsl, linear_rotate_quant.wgsl (and the other
// quantization kernels) and linear_rotated_codes.wgsl: the row's
// scale from its absmax, then codes packed four per u32 (byte 0 = first
// column) for dot4I8Packed. The body provides `act_value(row_base, col) ->
// f32`, the (rotated) input at flat index i, computed in f32.
//
// needs: act_value, code_of, code_scale
// provides: qp, scales, write_codes, write_word
//

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

fn code(row_base: u32, col: u32, s: f32, lo: f32, hi: f32) -> i32 {
    if col >= qp.k {
        return 0;
    }
    return code_of(act_value(row_base, col), s, lo, hi);
}

// Writes word `w` of row `row`'s codes at `sc` (code_scale of its absmax).
fn write_word(row: u32, w: u32, sc: vec3<f32>) {
    let row_base = row * qp.k;
    var first = w * 4u;
    var step = 1u;
    if PERM8 {
        first = (w / 2u) * 8u + (w % 2u);
        step = 2u;
    }
    let c = vec4<i32>(
        code(row_base, first, sc.x, sc.y, sc.z),
        code(row_base, first + step, sc.x, sc.y, sc.z),
        code(row_base, first + 2u * step, sc.x, sc.y, sc.z),
        code(row_base, first + 3u * step, sc.x, sc.y, sc.z),
    );
    q[row * qp.kw + w] = pack4xI8(c);
}

// Writes row `row`'s scale and codes; invocation `lid` of `threads` takes
// the words lid, lid + threads, …
fn write_codes(row: u32, lid: u32, threads: u32, absmax: f32) {
    let sc = code_scale(absmax);
    if lid == 0u {
        scales[row] = sc.x;
    }
    for (var w = lid; w < qp.kw; w += threads) {
        write_word(row, w, sc);
    }
}
