//! Weight formats of a linear layer.

use serde::Serialize;

/// How a linear layer's weight is stored (SPEC §5).
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
