//! Neighbouring ops folded into a multi-row GEMV (decode): the RMS norm of
//! its input as a prologue (integer layers: into the spread rotation before
//! them, `spread.rs`), the residual add of its output as an epilogue.
//!
//! Why: a decode step is a chain of dependent launches, and on the H200 a
//! launch's fixed cost (ramp-up, drain, the barrier before the next) is
//! ~10 µs under timestamps — the norm launches alone were 12 % of a bf16
//! token (run I, 63 launches). Folded, every GEMV workgroup computes its
//! rows' `1/√(mean(x²) + eps)` from the residual stream in a prologue (K
//! values from cache, one workgroup reduction) and reads `act(w · (x · r))`
//! as its activations (`linear_gemv_in_norm.wgsl`); the layer's output is
//! added into the residual stream where it is written. (A variant that
//! factored `r` out of the dot products and reduced the sums of squares
//! with the accumulators ran the fused gate/up launch 50 % slower on the
//! H200, run K: the prologue stays.)

use dynvram_quant::KernelChoice;

use super::gemv_shape::{GEMV_MAX_M, rows_aligned, rows_gemv_max_m};
use super::spec::IntPath;
use crate::device::Gpu;
use crate::ops::linear::LinearWeights;
use crate::tensor::{ActDtype, GpuTensor};

/// The RMS norm folded into a linear's input: the linear reads
/// `weight · (x / √(mean(x²) + eps))` per row, rounded to the activation
/// dtype as the norm kernel stores it, where `x` is the tensor passed as
/// the linear's input.
#[derive(Debug, Clone, Copy)]
pub struct NormFold<'a> {
    /// The norm's weight, f32 `[K]`.
    pub weight: &'a GpuTensor,
    pub eps: f32,
}

impl NormFold<'_> {
    /// What identifies the norm in a `CodesKey`: its weight's
    /// binding and eps's bits.
    pub(super) fn key(&self) -> ((wgpu::Buffer, u64), u32) {
        (
            (self.weight.buffer.as_ref().clone(), self.weight.offset),
            self.eps.to_bits(),
        )
    }
}

/// What a linear launch takes in besides `out = x · Wᵀ + b`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fold<'a> {
    /// Normalise `x`'s rows on the way in.
    pub norm: Option<NormFold<'a>>,
    /// `out += x · Wᵀ + b` (the linear's output rounded to the activation
    /// dtype, then added and rounded again, as a separate add would).
    pub residual: bool,
}

impl Fold<'_> {
    /// Whether anything is folded.
    pub fn any(&self) -> bool {
        self.norm.is_some() || self.residual
    }
}

/// Most activation rows a folded norm takes: decode sizes (a larger batch
/// amortises the norm's own launch).
pub const NORM_FOLD_MAX_M: u64 = 4;

/// Why `fold` cannot go into this linear's launch (`None`: it can): only
/// the multi-row GEMVs (M ≤ 32, 16-byte weight rows, K a multiple of 4, one
/// binding per weight) take folds, a norm up to [`NORM_FOLD_MAX_M`] rows;
/// integer layers only with the spread quantization (either mode of
/// `GpuOptions::spread_quant`), whose rotation launch takes the norm.
pub fn fold_unusable(
    gpu: &Gpu,
    weights: &LinearWeights,
    choice: KernelChoice,
    m: u64,
    fold: &Fold<'_>,
) -> Option<&'static str> {
    if !fold.any() {
        return None;
    }
    let whole = weights.n * weights.row_bytes() <= gpu.caps.max_storage_binding;
    let integer = match choice {
        KernelChoice::Float => false,
        KernelChoice::Integer { act, .. } => {
            if IntPath::of(weights.format, act).is_err() {
                return Some("the format has no integer kernel");
            }
            true
        }
    };
    if integer && !gpu.spread_quant().spread() {
        Some("integer layers fold only with the spread quantization, which is off")
    } else if m == 0 || m > rows_gemv_max_m(gpu) || (integer && m > GEMV_MAX_M) {
        Some("M is above the multi-row GEMV's")
    } else if fold.norm.is_some() && m > NORM_FOLD_MAX_M {
        Some("M is above the folded norm's 4 rows")
    } else if !rows_aligned(weights.row_bytes())
        || !weights.k.is_multiple_of(if integer { 16 } else { 4 })
    {
        Some("weight rows do not start on 16 bytes")
    } else if weights.parts.len() != 1 || !whole {
        Some("the weight is split across bindings")
    } else if fold
        .norm
        .is_some_and(|n| n.weight.dtype != ActDtype::F32 || n.weight.numel() != weights.k)
    {
        Some("the norm weight is not f32 [K]")
    } else {
        None
    }
}
