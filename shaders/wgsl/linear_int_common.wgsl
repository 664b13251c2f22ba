// Shared by the integer linear kernels (linear_int_gemv.wgsl,
// linear_int_gemm.wgsl): bindings, the weight word decoding and the epilogue.
//
// Activations arrive as int8 codes packed four per u32 ([M, K/4] words) with
// one f32 scale per row; the output is `act` (f32 or f16, the epilogue in
// f32). Weights:
// * int8 (W4 = false): I8 [N, K] row-major, four columns per u32 word.
// * int4 (W4 = true): I8 [N, K/2], two two's-complement nibbles per byte, low
//   nibble = even column, so raw word j of a row holds columns 8j..8j+7 as
//   nibbles 0..7. `(raw << 4) & 0xF0F0F0F0` puts the even columns in the high
//   nibble of each byte (the i8 value 16·w) and `raw & 0xF0F0F0F0` the odd
//   ones; the activation words of those 8 columns come in the matching
//   even/odd order (act quant PERM8), and the sum is shifted right by 4 at the
//   end (exact: every product is a multiple of 16; |acc| < 2^31 for K <= 131072).
//
// provides: EPI, HAS_BIAS, W4, bias, int_value_sx, out, p, scale_at, store
// provides: unscale_acc, w, w4_even, w4_odd, w_scale, x_scale, xq
//

// int4 nibble weights (true) or int8 weights.
override W4: bool = true;
// 0: ((acc·s_x)·s_w[n]) + b (convrot_w4a4); 1: acc·(s_x·s_w) + b
// (int8_tensorwise); 2: the raw i32 accumulator's bits (tests).
override EPI: u32 = 0u;
// Weight scale per output row (true) or one scalar (false).
override SW_PER_ROW: bool = true;
override HAS_BIAS: bool = false;

struct Params {
    // Rows of the activations.
    m: u32,
    // Weight rows in this dispatch (one binding's chunk of N).
    n: u32,
    k: u32,
    // Output column (and scale/bias index) of the chunk's first row.
    n_base: u32,
    // Row stride of the output: the layer's full N.
    out_stride: u32,
    // Rows of the second and third weight of a fused multi-row GEMV
    // (linear_gemv_three.wgsl); unused elsewhere.
    n1: u32,
    n2: u32,
    // 1.0 as f32 bits: a runtime 1 (the epilogue's bias add, the multi-row
    // GEMV's residual add).
    one_bits: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> w_scale: array<f32>;
@group(0) @binding(2) var<storage, read> bias: array<f32>;
@group(0) @binding(3) var<storage, read> xq: array<u32>;
@group(0) @binding(4) var<storage, read> x_scale: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<act>;
var<immediate> p: Params;

// Even-column word of a raw int4 word (values ·16).
fn w4_even(raw: u32) -> u32 {
    return (raw << 4u) & 0xF0F0F0F0u;
}

// Odd-column word of a raw int4 word (values ·16).
fn w4_odd(raw: u32) -> u32 {
    return raw & 0xF0F0F0F0u;
}

// Undo the ·16 of int4 weights (exact: a sum of multiples of 16).
fn unscale_acc(acc: i32) -> i32 {
    if W4 {
        return acc >> 4u;
    }
    return acc;
}

// The epilogue of activation row m: the exact accumulator to f32 with the
// weight scale `sw` of its column (and `b`, its bias where HAS_BIAS).
fn int_value(m: u32, acc: i32, sw: f32, b: f32) -> f32 {
    return int_value_sx(x_scale[m], acc, sw, b);
}

// int_value with the activation row's code scale `sx`.
fn int_value_sx(sx: f32, acc: i32, sw: f32, b: f32) -> f32 {
    if EPI == 2u {
        return bitcast<f32>(acc);
    }
    var r: f32;
    if EPI == 0u {
        r = (f32(acc) * sx) * sw;
    } else {
        r = f32(acc) * (sx * sw);
    }
    if HAS_BIAS {
        // The product by a runtime 1 (`one_bits`) keeps a compiler from
        // fusing the last product into the add: rounded, then added, as
        // ComfyUI and the SPIR-V kernels' `precise` epilogue do (NVIDIA
        // fused it: the split-K sum differed from the unsplit GEMM in 2 of
        // 39,000 outputs, session 36).
        r = r * bitcast<f32>(p.one_bits) + b;
    }
    return r;
}

// Weight scale of output column `col` from `scales` (one per row or one).
fn scale_at(col: u32) -> u32 {
    if SW_PER_ROW {
        return col;
    }
    return 0u;
}

// Writes output [m, n_base + n] from the exact accumulator.
fn store(m: u32, n: u32, acc: i32) {
    let col = p.n_base + n;
    var b = 0.0;
    if HAS_BIAS && EPI != 2u {
        b = bias[col];
    }
    out[m * p.out_stride + col] = act(int_value(m, acc, w_scale[scale_at(col)], b));
}
