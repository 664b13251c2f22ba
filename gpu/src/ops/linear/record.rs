//! Recording a linear layer: the public entry points (one layer, one
//! layer with folded neighbours, several layers of one input as one
//! launch); the checks, kernel sequences and weight chunks are the child
//! modules'.

use dynvram_quant::KernelChoice;

use crate::device::Gpu;
use crate::ops::cache::PipelineCache;
use crate::ops::encoder::Encoder;
use crate::tensor::GpuTensor;

use super::{LinearError, LinearScratch, LinearWeights};

mod cm2;
mod convert;
mod coop;
mod float;
mod fold;
mod fused;
mod gemv;
mod gemv_shape;
mod integer;
mod layer;
mod norm_quant;
mod options;
mod recorder;
mod spec;
mod spread;
pub use cm2::{
    Cm2Gemm, Cm2Kernel, Cm2Weights, GROUPED_MIN_COLUMN_TILES, cm2_gemm, cm2_gemms, cm2_grouped,
    cm2_int_gemm, cm2_named, cm2_small_grid, cm2_split_gemm, cm2_stack_gemm, cm2_weights_of,
};
pub use convert::{converted_layer_bytes, converted_piece_bytes};
pub use coop::{
    CoopGemmKernel, CoopShape, GemmKernel, coop_gemm_unusable, coop_unusable, double_unusable,
    float_coop_unusable,
};
pub use fold::{Fold, NORM_FOLD_MAX_M, NormFold, fold_unusable};
pub use fused::Fusion;
pub use gemv_shape::{GEMV_MAX_M, GemvShape, ROWS_GEMV_MAX_M, rows_gemv_max_m};
pub use integer::{INTEGER_CHUNK_ROWS, integer_scratch_bytes};
pub use norm_quant::{AddNorm, record_add_norm_quant};
pub use options::RecordOptions;
pub(super) use spec::CodesKey;

/// Records `out = x · Wᵀ + b` into `encoder` with the kernels of `choice`.
///
/// `x` is `[M, K]`, `out` is `[M, N]` in a different buffer (rank > 2
/// folds the outer dimensions into M), both f32 or both f16 (f16 needs
/// `SHADER_F16`; kernels accumulate in f32 or exact i32 either way). The caller submits the encoder; weight
/// uploads written through the queue before that submit are visible.
#[allow(clippy::too_many_arguments)]
pub fn record_linear(
    gpu: &Gpu,
    cache: &PipelineCache,
    encoder: &mut Encoder,
    weights: &LinearWeights,
    choice: KernelChoice,
    x: &GpuTensor,
    out: &GpuTensor,
    scratch: &mut LinearScratch,
) -> Result<(), LinearError> {
    record_linear_with(
        gpu,
        cache,
        encoder,
        weights,
        choice,
        x,
        out,
        scratch,
        &RecordOptions::default(),
    )
}

/// [`record_linear`] with [`RecordOptions`].
#[allow(clippy::too_many_arguments)]
pub fn record_linear_with(
    gpu: &Gpu,
    cache: &PipelineCache,
    encoder: &mut Encoder,
    weights: &LinearWeights,
    choice: KernelChoice,
    x: &GpuTensor,
    out: &GpuTensor,
    scratch: &mut LinearScratch,
    opts: &RecordOptions,
) -> Result<(), LinearError> {
    layer::record(
        gpu,
        cache,
        encoder,
        weights,
        choice,
        x,
        out,
        scratch,
        opts,
        None,
        &Fold::default(),
    )
}

/// Records `out = x · Wᵀ + b` with `fold` in the same launch; an error
/// where [`fold_unusable`] says why not (check it first and record the
/// norm or the add separately there). `opts.reuse_codes` lets an integer
/// linear take the rotated rows the one before it left for the same input
/// and norm.
#[allow(clippy::too_many_arguments)]
pub fn record_linear_folded(
    gpu: &Gpu,
    cache: &PipelineCache,
    encoder: &mut Encoder,
    weights: &LinearWeights,
    choice: KernelChoice,
    x: &GpuTensor,
    out: &GpuTensor,
    scratch: &mut LinearScratch,
    fold: &Fold<'_>,
    opts: &RecordOptions,
) -> Result<(), LinearError> {
    layer::record(
        gpu, cache, encoder, weights, choice, x, out, scratch, opts, None, fold,
    )
}

/// Records `fusion` as one multi-row GEMV launch (plus the activation
/// quantization of integer formats) and returns `true`, or records nothing
/// and returns `false` where the layers cannot share a launch: M above the
/// multi-row GEMV's, formats, K, scales or biases that differ, fp8 or a
/// weight split across bindings, or an adapter with too few storage
/// bindings. The caller then records the layers one by one.
#[allow(clippy::too_many_arguments)]
pub fn record_linears_fused(
    gpu: &Gpu,
    cache: &PipelineCache,
    encoder: &mut Encoder,
    fusion: Fusion<'_>,
    choice: KernelChoice,
    x: &GpuTensor,
    scratch: &mut LinearScratch,
    opts: &RecordOptions,
    fold: &Fold<'_>,
) -> Result<bool, LinearError> {
    let (first, out, fused) = match fusion {
        Fusion::Stack(layers) => match layers {
            [(w, o), more @ ..] if (1..=2).contains(&more.len()) => (
                *w,
                *o,
                fused::Fused {
                    more: more.to_vec(),
                    glu: false,
                },
            ),
            _ => return Ok(false),
        },
        Fusion::Glu { gate, up, out } => (
            gate,
            out,
            fused::Fused {
                more: vec![(up, out)],
                glu: true,
            },
        ),
    };
    let m = x.numel() / first.k.max(1);
    if let Some(why) = fused::unfusable(gpu, first, &fused, choice, x, opts)
        .or_else(|| {
            fold.residual
                .then_some("a residual add is folded into one layer only")
        })
        .or_else(|| fold_unusable(gpu, first, choice, m, fold))
    {
        tracing::trace!(why, "linears recorded one by one");
        return Ok(false);
    }
    layer::record(
        gpu,
        cache,
        encoder,
        first,
        choice,
        x,
        out,
        scratch,
        opts,
        Some(&fused),
        fold,
    )?;
    Ok(true)
}
