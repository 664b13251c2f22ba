// Shared by the float linear kernels (linear_float_gemv.wgsl,
// linear_float_gemm.wgsl): bindings, weight decoding and the epilogue.
// The weight is read as u32 words and decoded to f32 in the shader, so no
// SHADER_F16 is needed; fp8 weights are multiplied by their scalar scale
// before the f32 product (ComfyUI dequantizes, then runs an f32 GEMM).
// K must be a multiple of 4 (four columns per decoded vec4). x and out are
// `act` (f32 or f16); products and sums are f32.
//
// needs: f16_bits, f16_pair
// provides: HAS_BIAS, WFMT, bf16_pair, bias, fp8_quad, out, p, store, w
// provides: w_scale, weight_quad, weight_scale, x
//

// 0: f32, 1: f16, 2: bf16, 3: float8_e4m3fn, 4: float8_e5m2.
override WFMT: u32 = 0u;
override HAS_BIAS: bool = false;

struct Params {
    m: u32,
    // Weight rows in this dispatch (one binding's chunk of N).
    n: u32,
    k: u32,
    // Output column (and bias index) of the chunk's first row.
    n_base: u32,
    // Row stride of the output: the layer's full N.
    out_stride: u32,
    // Rows of the second and third weight of a fused multi-row GEMV
    // (linear_gemv_three.wgsl); unused elsewhere.
    n1: u32,
    n2: u32,
    // eps of the RMS norm linear_gemv_in_norm.wgsl folds in (f32 bits);
    // unused elsewhere.
    eps_bits: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> w_scale: array<f32>;
@group(0) @binding(2) var<storage, read> bias: array<f32>;
@group(0) @binding(3) var<storage, read> x: array<vec4<act>>;
@group(0) @binding(4) var<storage, read_write> out: array<act>;
var<immediate> p: Params;

fn bf16_pair(v: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(v << 16u), bitcast<f32>(v & 0xFFFF0000u));
}

// float8_e4m3fn: bias 7, no infinities, S.1111.111 is NaN.
fn e4m3fn(b: u32) -> f32 {
    let sign = (b & 0x80u) << 24u;
    let e = (b >> 3u) & 0xFu;
    let man = b & 7u;
    if e == 0u {
        // Subnormal: man · 2^-9 (exact in f32).
        return bitcast<f32>(sign | bitcast<u32>(f32(man) * 0x1p-9f));
    }
    if e == 15u && man == 7u {
        return bitcast<f32>(0x7FC00000u | sign);
    }
    return bitcast<f32>(sign | ((e + 120u) << 23u) | (man << 20u));
}

// float8_e5m2 is the high byte of an IEEE f16.
fn e5m2(b: u32) -> f32 {
    return f16_bits(b << 8u);
}

fn fp8_quad(v: u32) -> vec4<f32> {
    if WFMT == 3u {
        return vec4<f32>(e4m3fn(v & 0xFFu), e4m3fn((v >> 8u) & 0xFFu), e4m3fn((v >> 16u) & 0xFFu), e4m3fn(v >> 24u));
    }
    return vec4<f32>(e5m2(v & 0xFFu), e5m2((v >> 8u) & 0xFFu), e5m2((v >> 16u) & 0xFFu), e5m2(v >> 24u));
}

// The scalar weight scale (fp8), else 1.
fn weight_scale() -> f32 {
    if WFMT >= 3u {
        return w_scale[0];
    }
    return 1.0;
}

// Columns 4q..4q+3 of weight row n, as f32 (fp8: times the scale).
fn weight_quad(n: u32, q: u32) -> vec4<f32> {
    return weight_quad_unscaled(n, q) * weight_scale();
}

// Columns 4q..4q+3 of weight row n, as f32, fp8 without its scale.
fn weight_quad_unscaled(n: u32, q: u32) -> vec4<f32> {
    switch WFMT {
        case 0u: {
            let b = n * p.k + 4u * q;
            return vec4<f32>(bitcast<f32>(w[b]), bitcast<f32>(w[b + 1u]), bitcast<f32>(w[b + 2u]), bitcast<f32>(w[b + 3u]));
        }
        case 1u: {
            let b = n * (p.k / 2u) + 2u * q;
            return vec4<f32>(f16_pair(w[b]), f16_pair(w[b + 1u]));
        }
        case 2u: {
            let b = n * (p.k / 2u) + 2u * q;
            return vec4<f32>(bf16_pair(w[b]), bf16_pair(w[b + 1u]));
        }
        default: {
            return fp8_quad(w[n * (p.k / 4u) + q]);
        }
    }
}

// Writes output [m, n_base + n].
fn store(m: u32, n: u32, acc: f32) {
    let col = p.n_base + n;
    var r = acc;
    if HAS_BIAS {
        r = r + bias[col];
    }
    out[m * p.out_stride + col] = act(r);
}
