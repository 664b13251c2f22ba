//! CPU reference linears, step by step exactly as `conformance/README.md` §4 states
//! (comfy-kitchen 0.2.40). Every intermediate (rotated input, activation codes and
//! scales, the exact `i32` accumulator) is exposed so GPU kernels can be compared
//! piece by piece: codes and accumulators exactly, outputs to float rounding.

use crate::format::Format;
pub use crate::format::is_power_of_four;
use crate::kernel_path::ActArith;
use crate::layer::QuantLayer;
use crate::rotation::{MatmulRotation, hadamard_scale};
use crate::tensors::{Dtype, f32s, floats_to_f32, i8s};

/// Errors of the reference linears: sizes that do not agree with the layer.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    /// A buffer has the wrong length for the layer's shape.
    #[error("layer {layer}: {what} has {found} elements, expected {expected}")]
    Length {
        /// Layer name.
        layer: String,
        /// Which buffer.
        what: &'static str,
        /// Expected element count.
        expected: usize,
        /// Found element count.
        found: usize,
    },
    /// The layer needs a tensor that was not given.
    #[error("layer {layer}: {what} is required for format {format}")]
    Missing {
        /// Layer name.
        layer: String,
        /// Which tensor.
        what: &'static str,
        /// The layer's format.
        format: Format,
    },
    /// An activation arithmetic was asked for a format that has none.
    #[error("layer {layer}: {act} activations asked for format {format}, which has no such path")]
    ActArith {
        /// Layer name.
        layer: String,
        /// Asked arithmetic.
        act: ActArith,
        /// The layer's format.
        format: Format,
    },
    /// A rotation group size that is not a power of 4 or does not divide K.
    #[error("rotation group {group} does not fit K = {k} (must be a power of 4 >= 4 dividing K)")]
    Group {
        /// Group size.
        group: u32,
        /// Row length.
        k: usize,
    },
}

/// The order in which a rotation's f32 sums are taken (both are valid; they can
/// differ in the last bit, README §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rotation {
    /// `x.reshape(M, K/G, G) @ H` in torch's CPU summation order (kitchen eager).
    Matmul,
    /// The CUDA radix-4 fast Hadamard transform (`convrot_fht_stage64`), bit for bit.
    Fht,
}

impl Rotation {
    /// The rotation kitchen's CUDA int8-activation path uses for a convrot_w4a4 layer
    /// (README §4.4): the fused FHT kernel when `G = 256` and `256 <= K <= 16384`,
    /// otherwise the matmul rotation.
    pub fn cuda_int8(group: u32, k: usize) -> Self {
        if group == 256 && k.is_multiple_of(256) && (256..=16384).contains(&k) {
            Rotation::Fht
        } else {
            Rotation::Matmul
        }
    }
}

/// The `G x G` Hadamard matrix (row-major): the Kronecker power of
/// `H4 = [[1,1,1,-1],[1,1,-1,1],[1,-1,1,1],[-1,1,1,1]]` divided by `√G`.
/// Every entry is exactly `±2^-k`. Symmetric, and `H·H = I`.
pub fn hadamard(g: u32) -> Vec<f32> {
    const H4: [[i8; 4]; 4] = [[1, 1, 1, -1], [1, 1, -1, 1], [1, -1, 1, 1], [-1, 1, 1, 1]];
    let scale = hadamard_scale(g);
    let g = g as usize;
    let mut h = vec![0.0f32; g * g];
    for i in 0..g {
        for j in 0..g {
            // The sign is the product of H4 entries over the base-4 digits of i and j.
            let (mut a, mut b, mut sign) = (i, j, 1i8);
            let mut span = 1;
            while span < g {
                sign *= H4[a % 4][b % 4];
                a /= 4;
                b /= 4;
                span *= 4;
            }
            h[i * g + j] = f32::from(sign) * scale;
        }
    }
    h
}

fn check_group(group: u32, k: usize) -> Result<(), ReferenceError> {
    if !is_power_of_four(group) || !k.is_multiple_of(group as usize) {
        return Err(ReferenceError::Group { group, k });
    }
    Ok(())
}

/// Rotates every row of `x` (`rows x k`, row-major) in groups of `group`.
pub fn rotate(x: &[f32], k: usize, group: u32, how: Rotation) -> Result<Vec<f32>, ReferenceError> {
    check_group(group, k)?;
    Ok(match how {
        Rotation::Matmul => rotate_matmul(x, group),
        Rotation::Fht => rotate_fht(x, group),
    })
}

/// Block length of torch's CPU matmul along the summed dimension (see [`rotate_matmul`]).
const TORCH_CPU_KC: usize = 128;

/// `x.reshape(-1, G) @ H` in f32, summed in the order torch's CPU matmul uses
/// (found against `debug.x_rot` of the conformance files, bit for bit): a single row
/// (GEMV) sums left to right; several rows (GEMM) sum blocks of 128 left to right and
/// add the block sums in order. Products are exact (`±2^-k` factors), so only the
/// order matters. (`x` length must be a multiple of `group`; [`rotate`] checks it.)
pub fn rotate_matmul(x: &[f32], group: u32) -> Vec<f32> {
    let g = group as usize;
    let block = if x.len() == g { g } else { TORCH_CPU_KC };
    rotate_matmul_blocked(x, group, block)
}

/// [`rotate_matmul`] with the summation block given: `TORCH_CPU_KC` for a
/// GEMM, `group` for a GEMV (callers that split a GEMM's rows into pieces
/// keep the GEMM's order this way, even for a piece of one row).
pub(crate) fn rotate_matmul_blocked(x: &[f32], group: u32, block: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; x.len()];
    match MatmulRotation::new(group, block) {
        Some(rot) => rot.rotate_into(x, &mut out),
        None => out = rotate_matmul_naive(x, group, block),
    }
    out
}

/// [`rotate_matmul_blocked`] straight from the definition, with the `G x G`
/// matrix: the fallback for groups under 16 and the oracle of
/// [`MatmulRotation`]'s tests.
pub(crate) fn rotate_matmul_naive(x: &[f32], group: u32, block: usize) -> Vec<f32> {
    let g = group as usize;
    let h = hadamard(group);
    let mut out = vec![0.0f32; x.len()];
    // Each output column c sums, per block, v[j]·h[j][c] for j left to right,
    // then adds the block sums in order: the same order as a column-at-a-time
    // loop, computed for all columns at once (vectorizable, no dependency
    // chain across columns).
    let mut part = vec![0.0f32; g];
    for (src, dst) in x.chunks_exact(g).zip(out.chunks_exact_mut(g)) {
        for (bi, vals) in src.chunks(block).enumerate() {
            part.iter_mut().for_each(|p| *p = 0.0);
            for (j, &v) in vals.iter().enumerate() {
                let row = &h[(bi * block + j) * g..][..g];
                for (p, &hv) in part.iter_mut().zip(row) {
                    *p += v * hv;
                }
            }
            // `dst` starts at +0.0 as the column loop's accumulator did
            // (0.0 + -0.0 is +0.0: the sign of a zero sum stays the same).
            for (d, &p) in dst.iter_mut().zip(&part) {
                *d += p;
            }
        }
    }
    out
}

/// The CUDA kernels' radix-4 fast Hadamard transform: strides 1, 4, 16, … G/4; each
/// butterfly writes `0.5*(((a+b)+c)-d), 0.5*(((a+b)-c)+d), 0.5*(((a-b)+c)+d),
/// 0.5*(((-a+b)+c)+d)` (README §4.1, `generate.py::fht_cuda_order`).
pub fn rotate_fht(x: &[f32], group: u32) -> Vec<f32> {
    let g = group as usize;
    let mut out = x.to_vec();
    for v in out.chunks_exact_mut(g) {
        let mut s = 1;
        while s < g {
            for base in (0..g).step_by(4 * s) {
                for off in 0..s {
                    let i = base + off;
                    let (a, b, c, d) = (v[i], v[i + s], v[i + 2 * s], v[i + 3 * s]);
                    v[i] = 0.5 * (((a + b) + c) - d);
                    v[i + s] = 0.5 * (((a + b) - c) + d);
                    v[i + 2 * s] = 0.5 * (((a - b) + c) + d);
                    v[i + 3 * s] = 0.5 * (((-a + b) + c) + d);
                }
            }
            s *= 4;
        }
    }
    out
}

/// Per-row activation codes and scales.
#[derive(Debug, Clone, PartialEq)]
pub struct ActQuant {
    /// `[M, K]` codes, one per element.
    pub codes: Vec<i8>,
    /// `[M]` scales.
    pub scales: Vec<f32>,
}

fn row_absmax(row: &[f32]) -> f32 {
    row.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

fn quantize_rows(x: &[f32], k: usize, scale_of: impl Fn(f32) -> f32, lo: f32, hi: f32) -> ActQuant {
    let mut codes = Vec::with_capacity(x.len());
    let mut scales = Vec::with_capacity(x.len() / k.max(1));
    for row in x.chunks_exact(k) {
        let s = scale_of(row_absmax(row));
        scales.push(s);
        codes.extend(
            row.iter()
                .map(|&v| (v / s).round_ties_even().clamp(lo, hi) as i8),
        );
    }
    ActQuant { codes, scales }
}

/// int4 activations (kitchen eager, README §4.3): `s = max(absmax, 1e-10) / 7`,
/// `q = clamp(rhe(x / s), -7, 7)` with an f32 division.
pub fn quantize_act_int4(x_rot: &[f32], k: usize) -> ActQuant {
    quantize_rows(x_rot, k, |a| a.max(1e-10) / 7.0, -7.0, 7.0)
}

/// int8 activations of the convrot path (CUDA, README §4.4):
/// `s = max(min(absmax, FLT_MAX) * (1.0f32/127.0), 1e-30)`, `q = clamp(rhe(x / s), -128, 127)`.
pub fn quantize_act_int8_convrot(x_rot: &[f32], k: usize) -> ActQuant {
    quantize_rows(
        x_rot,
        k,
        |a| (a.min(f32::MAX) * (1.0f32 / 127.0)).max(1e-30),
        -128.0,
        127.0,
    )
}

/// int8 activations of `int8_tensorwise` (kitchen eager `quantize_int8_rowwise`, README §4.6):
/// `s = max(absmax / 127, 1e-30)` (a true division), `q = clamp(rhe(x / s), -128, 127)`.
pub fn quantize_act_int8_tensorwise(x: &[f32], k: usize) -> ActQuant {
    quantize_rows(x, k, |a| (a / 127.0).max(1e-30), -128.0, 127.0)
}

/// The activation quantizer of a format's integer path: int4 (convrot_w4a4),
/// CUDA-style int8 (convrot_w4a4 with int8 activations) or eager int8 with a true
/// division (int8_tensorwise). `None` for float formats.
pub fn quantize_act_for(
    format: Format,
    act: ActArith,
    x_rot: &[f32],
    k: usize,
) -> Option<ActQuant> {
    match (format, act) {
        (Format::ConvrotW4a4 { .. }, ActArith::Int4) => Some(quantize_act_int4(x_rot, k)),
        (Format::ConvrotW4a4 { .. }, ActArith::Int8) => Some(quantize_act_int8_convrot(x_rot, k)),
        (Format::Int8Tensorwise { .. }, ActArith::Int8) => {
            Some(quantize_act_int8_tensorwise(x_rot, k))
        }
        _ => None,
    }
}

/// Unpacks `[N, K/2]` int4 bytes to `[N, K]` codes: two's-complement nibbles,
/// low nibble = even column; `0x8` decodes to -8.
pub fn unpack_int4(packed: &[u8]) -> Vec<i8> {
    let mut out = Vec::with_capacity(packed.len() * 2);
    for &b in packed {
        out.push(((b << 4) as i8) >> 4);
        out.push((b as i8) >> 4);
    }
    out
}

/// Packs codes in [-8, 7] two per byte (low nibble = even column). An odd trailing
/// code gets a zero high nibble.
pub fn pack_int4(codes: &[i8]) -> Vec<u8> {
    codes
        .chunks(2)
        .map(|p| {
            let lo = (p[0] as u8) & 0xF;
            let hi = p.get(1).map_or(0, |&h| (h as u8) & 0xF);
            lo | (hi << 4)
        })
        .collect()
}

/// Exact `acc[m, n] = Σ_k a[m, k] · w[n, k]` in `i32`.
pub fn int_gemm(a: &[i8], w: &[i8], k: usize) -> Vec<i32> {
    let mut acc = Vec::with_capacity((a.len() / k.max(1)) * (w.len() / k.max(1)));
    for arow in a.chunks_exact(k) {
        for wrow in w.chunks_exact(k) {
            acc.push(
                arow.iter()
                    .zip(wrow)
                    .map(|(&x, &y)| i32::from(x) * i32::from(y))
                    .sum(),
            );
        }
    }
    acc
}

/// convrot_w4a4 epilogue (and CUDA dequant kernels): `((acc · s_x[m]) · s_w[n]) + b[n]` in f32.
pub fn epilogue_convrot(acc: &[i32], s_x: &[f32], s_w: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
    let n = s_w.len();
    acc.chunks_exact(n)
        .zip(s_x)
        .flat_map(|(row, &sx)| {
            row.iter().enumerate().map(move |(j, &a)| {
                let v = (a as f32 * sx) * s_w[j];
                bias.map_or(v, |b| v + b[j])
            })
        })
        .collect()
}

/// int8_tensorwise epilogue (kitchen eager `int8_linear`): `(acc · (s_x[m] · s_w[n])) + b[n]`;
/// `s_w` has one element (scalar scale) or `N` (`[N, 1]` with convrot).
pub fn epilogue_tensorwise(
    acc: &[i32],
    s_x: &[f32],
    s_w: &[f32],
    n: usize,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    acc.chunks_exact(n)
        .zip(s_x)
        .flat_map(|(row, &sx)| {
            row.iter().enumerate().map(move |(j, &a)| {
                let sw = if s_w.len() == 1 { s_w[0] } else { s_w[j] };
                let v = a as f32 * (sx * sw);
                bias.map_or(v, |b| v + b[j])
            })
        })
        .collect()
}

/// Exact value of a `float8_e4m3fn` byte (no infinities; `0x7F`/`0xFF` are NaN).
pub fn e4m3fn_to_f32(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0f32 } else { 1.0 };
    let exp = i32::from((b >> 3) & 0xF);
    let man = f32::from(b & 0x7);
    if exp == 0xF && man == 7.0 {
        return f32::NAN;
    }
    if exp == 0 {
        sign * man * 2f32.powi(-9)
    } else {
        sign * (1.0 + man / 8.0) * 2f32.powi(exp - 7)
    }
}

/// Exact value of a `float8_e5m2` byte (IEEE-like: exponent 31 is inf/NaN).
pub fn e5m2_to_f32(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0f32 } else { 1.0 };
    let exp = i32::from((b >> 2) & 0x1F);
    let man = f32::from(b & 0x3);
    if exp == 0x1F {
        return if man == 0.0 {
            sign * f32::INFINITY
        } else {
            f32::NAN
        };
    }
    if exp == 0 {
        sign * man * 2f32.powi(-16)
    } else {
        sign * (1.0 + man / 4.0) * 2f32.powi(exp - 15)
    }
}

/// Rounds an f32 to the nearest `float8_e4m3fn` (ties to even), saturating at ±448;
/// NaN gives `0x7F`. This is torch's `.to(float8_e4m3fn)` for inputs already clamped
/// to ±448, as kitchen's fp8 quantizer does.
pub fn f32_to_e4m3fn(x: f32) -> u8 {
    if x.is_nan() {
        return 0x7F;
    }
    let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
    let a = x.abs().min(448.0);
    let min_normal = 2f32.powi(-6);
    let code = if a < min_normal {
        // Subnormals: steps of 2^-9; a result of 8 is exactly the smallest normal (0x08).
        (a * 512.0).round_ties_even() as u8
    } else {
        let e = ((a.to_bits() >> 23) & 0xFF) as i32 - 127;
        let q = (a * 2f32.powi(3 - e)).round_ties_even() as i32; // in [8, 16]
        (((e + 7) << 3) + (q - 8)) as u8
    };
    sign | code
}

/// `y = x · Wᵀ + b` in f32, each output summed left to right over K.
pub fn gemm_f32(x: &[f32], w: &[f32], k: usize, bias: Option<&[f32]>) -> Vec<f32> {
    let n = w.len() / k.max(1);
    let mut out = Vec::with_capacity((x.len() / k.max(1)) * n);
    for xrow in x.chunks_exact(k) {
        for (j, wrow) in w.chunks_exact(k).enumerate() {
            let mut acc = 0.0f32;
            for (a, b) in xrow.iter().zip(wrow) {
                acc += a * b;
            }
            out.push(bias.map_or(acc, |b| acc + b[j]));
        }
    }
    out
}

/// The raw bytes of one layer's tensors (as stored; any alignment).
#[derive(Debug, Clone, Copy)]
pub struct LayerBytes<'a> {
    /// `L.weight`.
    pub weight: &'a [u8],
    /// `L.weight_scale` (or `L.scale_weight`), `F32`.
    pub scale: Option<&'a [u8]>,
    /// `L.bias`, in the dtype recorded in [`QuantLayer::bias_dtype`].
    pub bias: Option<&'a [u8]>,
}

/// A reference result with its intermediates.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearTrace {
    /// `[M, N]` output.
    pub out: Vec<f32>,
    /// The activation arithmetic used (integer formats only).
    pub act: Option<ActArith>,
    /// The rotated input `[M, K]` (rotated formats only).
    pub x_rot: Option<Vec<f32>>,
    /// Activation codes and scales (integer formats only).
    pub act_quant: Option<ActQuant>,
    /// The exact accumulator `[M, N]` (integer formats only).
    pub acc: Option<Vec<i32>>,
}

fn expect_len(
    layer: &QuantLayer,
    what: &'static str,
    expected: usize,
    found: usize,
) -> Result<(), ReferenceError> {
    if expected != found {
        return Err(ReferenceError::Length {
            layer: layer.name.clone(),
            what,
            expected,
            found,
        });
    }
    Ok(())
}

/// The integer GEMM + epilogue from given activation codes: lets a test feed
/// `debug.act_q`/`debug.act_scale` and check `debug.acc` exactly.
pub fn integer_linear_from_codes(
    layer: &QuantLayer,
    bytes: LayerBytes<'_>,
    act: &ActQuant,
) -> Result<(Vec<i32>, Vec<f32>), ReferenceError> {
    let (n, k) = (layer.n, layer.k);
    let m = act.scales.len();
    expect_len(layer, "activation codes", m * k, act.codes.len())?;
    let w = integer_weight(layer, bytes)?;
    let s_w = scales(layer, bytes)?;
    let bias = bias_f32(layer, bytes)?;
    let acc = int_gemm(&act.codes, &w, k);
    let out = match layer.format {
        Format::Int8Tensorwise { .. } => {
            epilogue_tensorwise(&acc, &act.scales, &s_w, n, bias.as_deref())
        }
        _ => epilogue_convrot(&acc, &act.scales, &s_w, bias.as_deref()),
    };
    Ok((acc, out))
}

fn integer_weight(layer: &QuantLayer, bytes: LayerBytes<'_>) -> Result<Vec<i8>, ReferenceError> {
    let (n, k) = (layer.n, layer.k);
    match layer.format {
        Format::ConvrotW4a4 { .. } => {
            expect_len(layer, "weight bytes", n * k / 2, bytes.weight.len())?;
            Ok(unpack_int4(bytes.weight))
        }
        Format::Int8Tensorwise { .. } => {
            expect_len(layer, "weight bytes", n * k, bytes.weight.len())?;
            Ok(i8s(bytes.weight))
        }
        format => Err(ReferenceError::Missing {
            layer: layer.name.clone(),
            what: "integer weight",
            format,
        }),
    }
}

fn scales(layer: &QuantLayer, bytes: LayerBytes<'_>) -> Result<Vec<f32>, ReferenceError> {
    let raw = bytes.scale.ok_or_else(|| ReferenceError::Missing {
        layer: layer.name.clone(),
        what: "weight scale",
        format: layer.format,
    })?;
    let s = f32s(raw);
    let expected = match layer.format {
        Format::ConvrotW4a4 { .. }
        | Format::Int8Tensorwise {
            convrot_group: Some(_),
        } => layer.n,
        _ => 1,
    };
    expect_len(layer, "weight scale", expected, s.len())?;
    Ok(s)
}

fn bias_f32(layer: &QuantLayer, bytes: LayerBytes<'_>) -> Result<Option<Vec<f32>>, ReferenceError> {
    let (Some(raw), Some(dtype)) = (bytes.bias, layer.bias_dtype) else {
        return Ok(None);
    };
    let b = floats_to_f32(dtype, raw).ok_or_else(|| ReferenceError::Missing {
        layer: layer.name.clone(),
        what: "float bias",
        format: layer.format,
    })?;
    expect_len(layer, "bias", layer.n, b.len())?;
    Ok(Some(b))
}

/// The default activation arithmetic of a layer: what its metadata asks for.
pub fn declared_act(format: Format) -> Option<ActArith> {
    match format {
        Format::ConvrotW4a4 { linear_dtype, .. } => Some(match linear_dtype {
            crate::LinearDtype::Int4 => ActArith::Int4,
            crate::LinearDtype::Int8 => ActArith::Int8,
        }),
        Format::Int8Tensorwise { .. } => Some(ActArith::Int8),
        _ => None,
    }
}

/// The reference output of one linear for `x` (`[M, K]`, f32), with intermediates.
///
/// `act`: the activation arithmetic for convrot_w4a4 (`None` = what the metadata asks);
/// int8_tensorwise accepts only `Int8`; float formats accept only `None`.
/// Rotations follow the README: matmul order for int4 activations and int8_tensorwise
/// (kitchen eager), [`Rotation::cuda_int8`] for convrot_w4a4 with int8 activations.
pub fn reference_linear(
    layer: &QuantLayer,
    bytes: LayerBytes<'_>,
    x: &[f32],
    act: Option<ActArith>,
) -> Result<LinearTrace, ReferenceError> {
    let k = layer.k;
    if k == 0 || !x.len().is_multiple_of(k) {
        return Err(ReferenceError::Length {
            layer: layer.name.clone(),
            what: "input",
            expected: k,
            found: x.len(),
        });
    }
    let wrong_act = |a: ActArith| ReferenceError::ActArith {
        layer: layer.name.clone(),
        act: a,
        format: layer.format,
    };
    match layer.format {
        Format::ConvrotW4a4 {
            group,
            linear_dtype,
        } => {
            let act = act.unwrap_or(match linear_dtype {
                crate::LinearDtype::Int4 => ActArith::Int4,
                crate::LinearDtype::Int8 => ActArith::Int8,
            });
            let (x_rot, q) = match act {
                ActArith::Int4 => {
                    let r = rotate(x, k, group, Rotation::Matmul)?;
                    let q = quantize_act_int4(&r, k);
                    (r, q)
                }
                ActArith::Int8 => {
                    let r = rotate(x, k, group, Rotation::cuda_int8(group, k))?;
                    let q = quantize_act_int8_convrot(&r, k);
                    (r, q)
                }
            };
            let (acc, out) = integer_linear_from_codes(layer, bytes, &q)?;
            Ok(LinearTrace {
                out,
                act: Some(act),
                x_rot: Some(x_rot),
                act_quant: Some(q),
                acc: Some(acc),
            })
        }
        Format::Int8Tensorwise { convrot_group } => {
            if let Some(a @ ActArith::Int4) = act {
                return Err(wrong_act(a));
            }
            let x_rot = convrot_group
                .map(|g| rotate(x, k, g, Rotation::Matmul))
                .transpose()?;
            let q = quantize_act_int8_tensorwise(x_rot.as_deref().unwrap_or(x), k);
            let (acc, out) = integer_linear_from_codes(layer, bytes, &q)?;
            Ok(LinearTrace {
                out,
                act: Some(ActArith::Int8),
                x_rot,
                act_quant: Some(q),
                acc: Some(acc),
            })
        }
        _ => {
            if let Some(a) = act {
                return Err(wrong_act(a));
            }
            let w = dequantize_float_weight(layer, bytes)?;
            expect_len(layer, "weight", layer.n * k, w.len())?;
            let bias = bias_f32(layer, bytes)?;
            Ok(LinearTrace {
                out: gemm_f32(x, &w, k, bias.as_deref()),
                act: None,
                x_rot: None,
                act_quant: None,
                acc: None,
            })
        }
    }
}

/// The f32 weight `[N, K]` of a float-path layer: fp8 decoded and multiplied by the
/// scalar scale (`q.to(f32) * s`), or f16/bf16/f32 converted.
pub fn dequantize_float_weight(
    layer: &QuantLayer,
    bytes: LayerBytes<'_>,
) -> Result<Vec<f32>, ReferenceError> {
    let decode: fn(u8) -> f32 = match layer.format {
        Format::Float8E4m3fn => e4m3fn_to_f32,
        Format::Float8E5m2 => e5m2_to_f32,
        Format::F32 | Format::F16 | Format::Bf16 => {
            let dtype = match layer.format {
                Format::F32 => Dtype::F32,
                Format::F16 => Dtype::F16,
                _ => Dtype::BF16,
            };
            return floats_to_f32(dtype, bytes.weight).ok_or_else(|| ReferenceError::Missing {
                layer: layer.name.clone(),
                what: "float weight",
                format: layer.format,
            });
        }
        format => {
            return Err(ReferenceError::Missing {
                layer: layer.name.clone(),
                what: "float weight",
                format,
            });
        }
    };
    // A bare fp8 weight without a scale tensor is cast as is (scale 1).
    let s = if layer.scale.is_some() {
        scales(layer, bytes)?[0]
    } else {
        1.0
    };
    Ok(bytes.weight.iter().map(|&b| decode(b) * s).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn nibble_pack_unpack_round_trips(codes in proptest::collection::vec(-8i8..=7, 0..64usize)
            .prop_filter("even length", |v| v.len() % 2 == 0)) {
            prop_assert_eq!(unpack_int4(&pack_int4(&codes)), codes);
        }

        #[test]
        fn nibble_unpack_pack_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..64usize)) {
            prop_assert_eq!(pack_int4(&unpack_int4(&bytes)), bytes);
        }

        #[test]
        fn e4m3fn_encode_decode_round_trips(b in any::<u8>()) {
            let v = e4m3fn_to_f32(b);
            if v.is_nan() {
                prop_assert!(b & 0x7F == 0x7F);
            } else if v == 0.0 {
                prop_assert_eq!(f32_to_e4m3fn(v) & 0x7F, 0);
            } else {
                prop_assert_eq!(f32_to_e4m3fn(v), b);
            }
        }
    }

    #[test]
    fn nibble_order_and_minus_eight() {
        assert_eq!(unpack_int4(&[0x8F]), vec![-1, -8]);
        assert_eq!(unpack_int4(&[0x71]), vec![1, 7]);
        assert_eq!(pack_int4(&[-7, 3]), vec![0x39]);
    }

    #[test]
    fn fp8_tables_hit_known_values() {
        assert_eq!(e4m3fn_to_f32(0x7E), 448.0);
        assert_eq!(e4m3fn_to_f32(0x01), 2f32.powi(-9));
        assert_eq!(e4m3fn_to_f32(0x38), 1.0);
        assert_eq!(e4m3fn_to_f32(0xB8), -1.0);
        assert!(e4m3fn_to_f32(0xFF).is_nan());
        assert_eq!(e5m2_to_f32(0x7B), 57344.0);
        assert_eq!(e5m2_to_f32(0x3C), 1.0);
        assert_eq!(e5m2_to_f32(0x7C), f32::INFINITY);
        assert_eq!(e5m2_to_f32(0x01), 2f32.powi(-16));
        // Ties go to even: 1 + 1/16 lies between 1 (0x38) and 1.125 (0x39).
        assert_eq!(f32_to_e4m3fn(1.0625), 0x38);
        assert_eq!(f32_to_e4m3fn(1.1875), 0x3A);
        assert_eq!(f32_to_e4m3fn(1000.0), 0x7E);
    }

    #[test]
    fn hadamard_is_orthonormal_and_fht_agrees() {
        for g in [4u32, 16, 64, 256] {
            let h = hadamard(g);
            let gu = g as usize;
            for i in 0..gu {
                for j in 0..gu {
                    assert_eq!(h[i * gu + j], h[j * gu + i]);
                    let dot: f32 = (0..gu).map(|t| h[i * gu + t] * h[t * gu + j]).sum();
                    let want = if i == j { 1.0 } else { 0.0 };
                    assert!((dot - want).abs() < 1e-5, "g {g} ({i},{j}) {dot}");
                }
            }
            let x: Vec<f32> = (0..2 * gu)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0)
                .collect();
            let a = rotate(&x, gu, g, Rotation::Matmul).expect("fits");
            let b = rotate(&x, gu, g, Rotation::Fht).expect("fits");
            let worst = a
                .iter()
                .zip(&b)
                .fold(0.0f32, |m, (p, q)| m.max((p - q).abs()));
            assert!(worst < 1e-5, "g {g}: {worst}");
        }
        assert!(rotate(&[0.0; 48], 48, 32, Rotation::Fht).is_err());
        assert!(rotate(&[0.0; 48], 48, 64, Rotation::Fht).is_err());
    }

    #[test]
    fn int4_scale_clamps_before_dividing() {
        let q = quantize_act_int4(&[0.0; 4], 4);
        assert_eq!(q.scales, vec![1e-10f32 / 7.0]);
        assert_eq!(q.codes, vec![0; 4]);
        let q = quantize_act_int8_convrot(&[0.0; 4], 4);
        assert_eq!(q.scales, vec![1e-30]);
        // Half-to-even at a tie: 0.5 * s rounds to 0, 1.5 * s to 2.
        let q = quantize_act_int4(&[7.0, 0.5, 1.5, -2.5], 4);
        assert_eq!(q.codes, vec![7, 0, 2, -2]);
    }
}
