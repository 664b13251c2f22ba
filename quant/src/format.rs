//! Weight formats of a linear layer.

use serde::Serialize;

/// How a linear layer's weight is stored (docs/behaviour.md, Formats).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Format {
    /// `I8 [N, K/2]` two signed nibbles per byte (low = even column), `F32 [N]` scales,
    /// inputs rotated in groups of `group`.
    ConvrotW4a4 {
        /// `convrot_groupsize` (a power of 4).
        group: u32,
        /// Activation arithmetic the file asks for.
        linear_dtype: LinearDtype,
    },
    /// `I8 [N, K]` with a scalar `F32` scale, or `[N, 1]` and rotated inputs when `convrot`.
    Int8Tensorwise {
        /// `Some(G)` when the layer is stored rotated (`"convrot": true`).
        convrot_group: Option<u32>,
    },
    /// `F8_E4M3 [N, K]`, scalar `F32` scale.
    Float8E4m3fn,
    /// `F8_E5M2 [N, K]`, scalar `F32` scale.
    Float8E5m2,
    /// Plain `F32 [N, K]`.
    F32,
    /// Plain `F16 [N, K]`.
    F16,
    /// Plain `BF16 [N, K]`.
    Bf16,
}

impl Format {
    /// Whether the layer's kernels quantize their input activations (int4
    /// or int8 codes, rotated first where the format says): those need the
    /// linear scratch; float formats read activations as they are.
    pub fn quantizes_activations(&self) -> bool {
        matches!(
            self,
            Format::ConvrotW4a4 { .. } | Format::Int8Tensorwise { .. }
        )
    }
}

/// ComfyUI's name with its parameters, for messages: `convrot_w4a4
/// (group 256, int4 activations)`, `int8_tensorwise`, `bf16`.
impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Format::ConvrotW4a4 {
                group,
                linear_dtype,
            } => write!(
                f,
                "convrot_w4a4 (group {group}, {} activations)",
                match linear_dtype {
                    LinearDtype::Int4 => "int4",
                    LinearDtype::Int8 => "int8",
                }
            ),
            Format::Int8Tensorwise {
                convrot_group: None,
            } => f.write_str("int8_tensorwise"),
            Format::Int8Tensorwise {
                convrot_group: Some(g),
            } => write!(f, "int8_tensorwise (rotated in groups of {g})"),
            Format::Float8E4m3fn => f.write_str("float8_e4m3fn"),
            Format::Float8E5m2 => f.write_str("float8_e5m2"),
            Format::F32 => f.write_str("f32"),
            Format::F16 => f.write_str("f16"),
            Format::Bf16 => f.write_str("bf16"),
        }
    }
}

/// The activation arithmetic a `convrot_w4a4` layer's metadata asks for.
/// ComfyUI writes `linear_dtype` only when it is not `"int4"`, so absent means int4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinearDtype {
    /// int4 activations where the adapter has the fast kernel, else the int8 fallback.
    #[default]
    Int4,
    /// int8 activations on every adapter.
    Int8,
}

/// `true` when `g` is a power of 4 and at least 4: the group sizes the
/// rotation of `convrot_w4a4` (and rotated `int8_tensorwise`) accepts.
pub fn is_power_of_four(g: u32) -> bool {
    g >= 4 && g.is_power_of_two() && g.trailing_zeros().is_multiple_of(2)
}

#[cfg(test)]
mod display_tests {
    use super::*;

    #[test]
    fn formats_read_as_comfyui_names() {
        let f = Format::ConvrotW4a4 {
            group: 256,
            linear_dtype: LinearDtype::Int4,
        };
        assert_eq!(f.to_string(), "convrot_w4a4 (group 256, int4 activations)");
        let f = Format::Int8Tensorwise {
            convrot_group: Some(64),
        };
        assert_eq!(f.to_string(), "int8_tensorwise (rotated in groups of 64)");
        assert_eq!(Format::Bf16.to_string(), "bf16");
    }
}
