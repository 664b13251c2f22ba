//! Several linear layers of one input as one multi-row GEMV launch: q/k/v
//! (each to its own output) and gate/up with SwiGLU in the epilogue; past
//! the GEMV's M, two or three f16 layers (each to its own output) as one
//! stacked SPIR-V GEMM launch where the device runs it.
//!
//! Why: at M = 1 every launch costs a fixed few microseconds of ramp-up,
//! drain and barrier on top of its weight stream, and a decoder layer is a
//! chain of dependent launches; one launch for q/k/v and one for
//! gate/up/SwiGLU saves four per layer. Activations are quantized once for
//! all the weights (integer formats). The kernels are the multi-row GEMVs
//! with `linear_gemv_three.wgsl` binding the extra weights, so each output
//! row is computed exactly as the single-layer launch computes it.
//!
//! At prefill a 4096-wide layer's grid is 64 tiles of 128 x 256 on the
//! H100's 132 multiprocessors and gate's 172 (1.3 waves); stacked, q/k/v
//! are 192 tiles and gate/up 344, which fill the GPU without split K's
//! partial sums.

use dynvram_quant::{Format, KernelChoice};

use super::cm2::{cm2_stack_gemm, stack_pays};
use super::coop::GemmKernel;
use super::gemv_shape::{GemvShape, rows_aligned, rows_gemv_max_m};
use super::options::RecordOptions;
use crate::device::{Cm2Stack, Gpu};
use crate::ops::linear::LinearWeights;
use crate::tensor::{ActDtype, GpuTensor};

/// Linears of one input to record as one launch.
#[derive(Debug, Clone, Copy)]
pub enum Fusion<'a> {
    /// Two or three layers, each into its own output (q/k/v).
    Stack(&'a [(&'a LinearWeights, &'a GpuTensor)]),
    /// `out = silu(x · gateᵀ) · (x · upᵀ)`, the gate and up outputs rounded
    /// to the activation dtype first, as the separate SwiGLU kernel does.
    Glu {
        gate: &'a LinearWeights,
        up: &'a LinearWeights,
        out: &'a GpuTensor,
    },
}

/// The weights after the first in a fused launch, with their outputs (GLU:
/// the up weight and the one output).
pub(super) struct Fused<'a> {
    pub more: Vec<(&'a LinearWeights, &'a GpuTensor)>,
    pub glu: bool,
}

impl<'a> Fused<'a> {
    /// `first`'s weights, then these.
    fn weights<'s>(
        &'s self,
        first: &'s LinearWeights,
    ) -> impl Iterator<Item = &'s LinearWeights> + Clone {
        std::iter::once(first).chain(self.more.iter().map(|(w, _)| *w))
    }
}

/// Storage buffers the fused integer kernel binds (the float one binds 11).
const FUSED_STORAGE_BUFFERS: u32 = 14;

/// Storage buffers the stacked SPIR-V GEMM binds.
const STACK_STORAGE_BUFFERS: u32 = 11;

/// Why `first` and `fused` cannot share one launch, if they cannot: the
/// multi-row GEMV's up to its M, the stacked SPIR-V GEMM's past it
/// ([`stack_unusable`]).
pub(super) fn unfusable(
    gpu: &Gpu,
    first: &LinearWeights,
    fused: &Fused<'_>,
    choice: KernelChoice,
    x: &GpuTensor,
    opts: &RecordOptions,
) -> Option<&'static str> {
    let k = first.k;
    if k == 0 || x.shape.last() != Some(&k) {
        // The single-layer path reports the shape error.
        return Some("x does not have K columns");
    }
    let m = x.numel() / k;
    let limits = gpu.device.limits();
    let limit = opts.max_binding.map_or(gpu.caps.max_storage_binding, |b| {
        b.min(gpu.caps.max_storage_binding)
    });
    let weights = || fused.weights(first);
    let same = |w: &LinearWeights| {
        w.format == first.format
            && w.k == k
            && w.scale.is_some() == first.scale.is_some()
            && w.bias.is_some() == first.bias.is_some()
    };
    // The stacked GEMM takes rows anywhere (its loads clamp); the GEMV
    // reads them in 16-byte words.
    let gemm = m > rows_gemv_max_m(gpu);
    if gemm {
        if let Some(why) = stack_unusable(gpu, first, fused, choice, x, opts) {
            return Some(why);
        }
    } else if limits.max_storage_buffers_per_shader_stage < FUSED_STORAGE_BUFFERS {
        return Some("the adapter has too few storage bindings per stage");
    }
    if opts.raw_accumulator && fused.glu {
        Some("the raw accumulator has no SwiGLU")
    } else if matches!(choice, KernelChoice::Float)
        && matches!(first.format, Format::Float8E4m3fn | Format::Float8E5m2)
    {
        Some("fp8 weights each have their own scalar scale")
    } else if !weights().all(same) {
        Some("the layers differ in format, K, scale or bias")
    } else if !weights().all(|w| {
        w.parts.len() == 1 && w.n * w.row_bytes() <= limit && (gemm || rows_aligned(w.row_bytes()))
    }) {
        Some("a weight is split across bindings or its rows are not 16-byte aligned")
    } else if fused.glu && fused.more[0].0.n != first.n {
        Some("gate and up differ in N")
    } else {
        None
    }
}

/// Why layers past the multi-row GEMV's M cannot share the stacked SPIR-V
/// GEMM's launch (`dynvram_shaders::spirv::CM2_STACK_GEMMS`) beyond what
/// [`unfusable`] checks of every fused launch: it takes f16 weights on f16
/// activations, each layer into its own output (SwiGLU stays its own
/// launch), where the device runs it, no kernel, path or split count is
/// asked for, and, by default, where the stack pays ([`stack_pays`]).
fn stack_unusable(
    gpu: &Gpu,
    first: &LinearWeights,
    fused: &Fused<'_>,
    choice: KernelChoice,
    x: &GpuTensor,
    opts: &RecordOptions,
) -> Option<&'static str> {
    let stack = opts.cm2_stack.unwrap_or_else(|| gpu.cm2_stack());
    let asked = opts.raw_accumulator
        || opts.spirv_check
        || opts.cm2_kernel.is_some()
        || opts.gemm == GemmKernel::Tiled
        || opts.cm2_split.unwrap_or_else(|| gpu.cm2_split()).counted();
    if fused.glu {
        Some("SwiGLU past the multi-row GEMV is its own launch")
    } else if stack == Cm2Stack::Off {
        Some("stacked SPIR-V GEMMs are off")
    } else if first.format != Format::F16
        || x.dtype != ActDtype::F16
        || choice != KernelChoice::Float
    {
        Some("only f16 weights on f16 activations share a GEMM launch")
    } else if asked
        || !opts
            .spirv_gemm
            .unwrap_or_else(|| gpu.spirv_gemm())
            .allows(false)
    {
        Some("a kernel, path or split count is asked for, or SPIR-V GEMMs are off")
    } else if gpu.device.limits().max_storage_buffers_per_shader_stage < STACK_STORAGE_BUFFERS {
        Some("the adapter has too few storage bindings per stage")
    } else {
        let grouped = stack == Cm2Stack::Grouped;
        let (Some(kernel), Some(caps)) = (cm2_stack_gemm(gpu.cm2(), grouped), gpu.cm2()) else {
            return Some("the device runs no stacked SPIR-V GEMM");
        };
        let m = x.numel() / first.k.max(1);
        let ns = fused.weights(first).map(|w| w.n);
        (stack != Cm2Stack::Always && !stack_pays(caps, kernel.gemm, ns, m))
            .then_some("the stacked grid fills its waves no better than the layers one by one")
    }
}

impl GemvShape {
    /// This shape for a launch reading two weights' rows side by side (GLU):
    /// half the rows, so the accumulators and loads stay within the kernels'
    /// arrays.
    pub(super) fn halved(self, m: u64) -> Self {
        let most = (32 / m.max(1)).clamp(1, 8) as u32;
        Self {
            rows: self.rows.min(most),
            ..self
        }
    }
}
