//! The linear kernels' variants as types. Each discriminant is the value of
//! the `override` constant its WGSL fragment switches on (`as u32` where a
//! constant is made); a test checks that the fragments
//! document the same numbering.

use dynvram_quant::{ActArith, Format};

/// How a row of activations becomes integer codes: `MODE` of
/// `linear_act_codes.wgsl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ActCodes {
    /// int4: scale max(absmax, 1e-10) / 7, codes in [-7, 7].
    Int4 = 0,
    /// int8 as convrot_w4a4's CUDA kernels: scale max(absmax · (1/127), 1e-30).
    Int8Convrot = 1,
    /// int8 as int8_tensorwise's eager path: scale max(absmax / 127, 1e-30).
    Int8Tensorwise = 2,
}

/// The integer kernels' epilogue: `EPI` of `linear_int_common.wgsl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum IntEpilogue {
    /// `((acc·s_x)·s_w[n]) + b` (convrot_w4a4).
    RowScale = 0,
    /// `acc·(s_x·s_w) + b` (int8_tensorwise).
    TensorScale = 1,
    /// The raw i32 accumulator's bits (tests).
    RawAccumulator = 2,
}

/// Float weights as the float kernels decode them: `WFMT` of
/// `linear_float_common.wgsl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum FloatWeights {
    F32 = 0,
    F16 = 1,
    Bf16 = 2,
    Fp8E4m3fn = 3,
    Fp8E5m2 = 4,
}

impl FloatWeights {
    /// The float kernels' decoding of `format`, or `None` for an integer
    /// format.
    pub(crate) fn of(format: Format) -> Option<Self> {
        Some(match format {
            Format::F32 => Self::F32,
            Format::F16 => Self::F16,
            Format::Bf16 => Self::Bf16,
            Format::Float8E4m3fn => Self::Fp8E4m3fn,
            Format::Float8E5m2 => Self::Fp8E5m2,
            _ => return None,
        })
    }

    /// fp8, whose scalar scale multiplies the sum.
    pub(crate) fn is_fp8(self) -> bool {
        matches!(self, Self::Fp8E4m3fn | Self::Fp8E5m2)
    }
}

/// What activation codes in the scratch were made from and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodesKey {
    pub(super) x: (wgpu::Buffer, u64),
    pub(super) codes: ActCodes,
    pub(super) group: Option<u32>,
    pub(super) perm8: bool,
    pub(super) m: u64,
    pub(super) k: u64,
    /// The norm folded in before the rotation: its weight and eps bits.
    pub(super) norm: Option<((wgpu::Buffer, u64), u32)>,
    /// Rotated rows and chunk maxima (the GEMV makes the codes), not codes
    /// ([`SpreadQuant::InGemv`]).
    pub(super) spread: bool,
}

/// The integer kernels' specialisation for a format and arithmetic.
pub(super) struct IntPath {
    /// How activations become codes.
    pub(super) codes: ActCodes,
    /// Rotation group, for rotated layers.
    pub(super) group: Option<u32>,
    /// int4 nibble weights.
    pub(super) w4: bool,
    /// The epilogue.
    pub(super) epilogue: IntEpilogue,
    /// `SW_PER_ROW`.
    pub(super) per_row_scale: bool,
}

impl IntPath {
    /// The integer kernels' specialisation for `format` with `act`
    /// activations, or why there is none.
    pub(super) fn of(format: Format, act: ActArith) -> Result<Self, &'static str> {
        Ok(match (format, act) {
            (Format::ConvrotW4a4 { group, .. }, act) => IntPath {
                codes: if act == ActArith::Int4 {
                    ActCodes::Int4
                } else {
                    ActCodes::Int8Convrot
                },
                group: Some(group),
                w4: true,
                epilogue: IntEpilogue::RowScale,
                per_row_scale: true,
            },
            (Format::Int8Tensorwise { .. }, ActArith::Int4) => {
                return Err("int8_tensorwise has int8 activations only");
            }
            (Format::Int8Tensorwise { convrot_group }, ActArith::Int8) => IntPath {
                codes: ActCodes::Int8Tensorwise,
                group: convrot_group,
                w4: false,
                epilogue: IntEpilogue::TensorScale,
                per_row_scale: convrot_group.is_some(),
            },
            _ => return Err("a float format has no integer kernel"),
        })
    }

    /// The activation quantization's override constants (`perm8`: int4
    /// weights' even/odd column pairing of the dot4 kernels).
    pub(super) fn quant_constants(&self, perm8: bool) -> [(&'static str, f64); 3] {
        [
            ("MODE", f64::from(self.codes as u32)),
            ("INV127", f64::from(1.0f32 / 127.0)),
            ("PERM8", f64::from(u8::from(perm8))),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynvram_shaders::linear as shaders;

    #[test]
    fn the_fragments_number_the_variants_alike() {
        let codes = shaders::ACT_QUANT;
        for (v, doc) in [
            (ActCodes::Int4, "int4, s = max(absmax, 1e-10) / 7"),
            (ActCodes::Int8Convrot, "int8 (convrot_w4a4, CUDA)"),
            (ActCodes::Int8Tensorwise, "int8 (int8_tensorwise, eager)"),
        ] {
            let line = format!("// {}: {doc}", v as u32);
            assert!(
                codes.contains(&line),
                "linear_act_codes.wgsl lacks `{line}`"
            );
        }
        let int = shaders::INT_GEMM;
        for (v, doc) in [
            (
                IntEpilogue::RowScale,
                "((acc·s_x)·s_w[n]) + b (convrot_w4a4)",
            ),
            (IntEpilogue::TensorScale, "acc·(s_x·s_w) + b"),
            (
                IntEpilogue::RawAccumulator,
                "the raw i32 accumulator's bits",
            ),
        ] {
            let text = format!("{}: {doc}", v as u32);
            assert!(int.contains(&text), "linear_int_common.wgsl lacks `{text}`");
        }
        let line = format!(
            "// {}: f32, {}: f16, {}: bf16, {}: float8_e4m3fn, {}: float8_e5m2.",
            FloatWeights::F32 as u32,
            FloatWeights::F16 as u32,
            FloatWeights::Bf16 as u32,
            FloatWeights::Fp8E4m3fn as u32,
            FloatWeights::Fp8E5m2 as u32
        );
        assert!(
            shaders::FLOAT_GEMM.contains(&line),
            "linear_float_common.wgsl lacks `{line}`"
        );
    }

    #[test]
    fn float_weights_of_each_format() {
        assert_eq!(FloatWeights::of(Format::Bf16), Some(FloatWeights::Bf16));
        assert!(FloatWeights::of(Format::Float8E5m2).is_some_and(FloatWeights::is_fp8));
        assert!(!FloatWeights::F16.is_fp8());
        let int8 = Format::Int8Tensorwise {
            convrot_group: None,
        };
        assert_eq!(FloatWeights::of(int8), None);
    }
}
