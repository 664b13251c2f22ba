//! Row norms of f32 or f16 activations `[rows, hidden]` (statistics in f32,
//! weights and biases f32): RMSNorm (Llama) and LayerNorm (optional bias),
//! one workgroup per row.

use dynvram_shaders::transformer::NORM;

use crate::device::{Gpu, GpuError};
use crate::ops::cache::PipelineCache;
use crate::ops::encoder::Encoder;
use crate::ops::kernel::{
    self, Dispatch, bad, expect_distinct, expect_dtype, expect_shape, rows_cols, to_u32,
};
use crate::tensor::{ActDtype, GpuTensor};

/// `norm.wgsl`'s `Params`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    cols: u32,
    eps: f32,
    /// 1 where `layer_norm` adds its bias.
    has_bias: u32,
}
const _: () = assert!(size_of::<Params>() == 16);

/// The shared body of the norms; `extra` says which one runs.
#[allow(clippy::too_many_arguments)] // the recording handle and the operands
fn record_norm(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    x: &GpuTensor,
    weight: &GpuTensor,
    extra: Extra<'_>,
    out: &GpuTensor,
    eps: f32,
) -> Result<(), GpuError> {
    let op = extra.entry();
    let (bias, delta) = extra.operands();
    let (rows, cols) = check_norm(op, x, weight, extra, out, eps)?;
    let _span = tracing::trace_span!("record", op, rows, cols).entered();
    let mut bindings: kernel::Bindings<'_> =
        smallvec::smallvec![(2, weight.binding()), (4, out.binding())];
    match delta {
        // The residual stream is written: its read-write slot.
        Some(d) => bindings.extend([(5, x.binding()), (6, d.binding())]),
        None => bindings.push((1, x.binding())),
    }
    if let Extra::Bias(_) = extra {
        // `rms_norm` never reads binding 3, so its derived layout has no slot for it.
        // Without a bias the weight fills the bias slot; `has_bias = 0` keeps it unread.
        bindings.push((3, bias.unwrap_or(weight).binding()));
    }
    kernel::record(
        gpu,
        cache,
        enc,
        Dispatch {
            source: NORM,
            entry: op,
            constants: &[("WG", f64::from(norm_wg(gpu, rows)))],
            params: bytemuck::bytes_of(&Params {
                rows: to_u32(op, "rows", rows)?,
                cols: to_u32(op, "hidden", cols)?,
                eps,
                has_bias: u32::from(bias.is_some()),
            }),
            bindings,
            groups: kernel::grid(gpu, op, rows, 1)?,
            act: x.dtype,
            cost: kernel::Cost::new(
                x.bytes() + weight.bytes() + delta.map_or(0, |d| 2 * d.bytes()),
                out.bytes(),
                4 * rows * cols,
            ),
        },
    )
}

/// Checks a norm's operands; returns `(rows, cols)`.
pub(crate) fn check_norm(
    op: &'static str,
    x: &GpuTensor,
    weight: &GpuTensor,
    extra: Extra<'_>,
    out: &GpuTensor,
    eps: f32,
) -> Result<(u64, u64), GpuError> {
    let (bias, delta) = extra.operands();
    let (rows, cols) = rows_cols(op, "x", x)?;
    expect_dtype(op, "x", x, x.dtype)?;
    expect_shape(op, "weight", weight, &[cols], ActDtype::F32)?;
    if let Some(b) = bias {
        expect_shape(op, "bias", b, &[cols], ActDtype::F32)?;
    }
    expect_shape(op, "out", out, &x.shape, x.dtype)?;
    rows_cols(op, "out", out)?;
    expect_distinct(op, out, &[("x", x), ("weight", weight)])?;
    if let Some(b) = bias {
        expect_distinct(op, out, &[("bias", b)])?;
    }
    if let Some(d) = delta {
        expect_shape(op, "delta", d, &x.shape, x.dtype)?;
        rows_cols(op, "delta", d)?;
        expect_distinct(op, out, &[("delta", d)])?;
        expect_distinct(op, x, &[("delta", d)])?;
    }
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(bad(op, format!("eps = {eps} must be finite and >= 0")));
    }
    Ok((rows, cols))
}

/// Records `out = weight · (x · 1/√(mean(x²) + eps))` per row (HF Llama
/// RMSNorm in f32). `x` and `out` are `[.., hidden]` of one dtype (f32 or
/// f16), `weight` is f32 `[hidden]`.
pub fn record_rms_norm(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    x: &GpuTensor,
    weight: &GpuTensor,
    out: &GpuTensor,
    eps: f32,
) -> Result<(), GpuError> {
    record_norm(gpu, cache, enc, x, weight, Extra::None, out, eps)
}

/// Records `x += delta`, then `out = rms_norm(x)` per row in one launch
/// (the residual add before a norm; the same values as the two ops
/// separately). `delta` has `x`'s shape and dtype.
#[allow(clippy::too_many_arguments)] // the op's operands
pub fn record_add_rms_norm(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    x: &GpuTensor,
    delta: &GpuTensor,
    weight: &GpuTensor,
    out: &GpuTensor,
    eps: f32,
) -> Result<(), GpuError> {
    record_norm(gpu, cache, enc, x, weight, Extra::Add(delta), out, eps)
}

/// Rows up to which a norm row gets 1024 invocations (where the adapter
/// allows): fewer rows than SMs leave the GPU idle, and more loads in flight
/// per row shorten the latency-bound single row of a decode step.
const WIDE_ROWS: u64 = 64;

/// Invocations per row (`norm.wgsl`'s `WG`, a power of two).
pub(crate) fn norm_wg(gpu: &Gpu, rows: u64) -> u32 {
    let max = gpu.device.limits().max_compute_invocations_per_workgroup;
    if rows <= WIDE_ROWS && max >= 1024 {
        1024
    } else {
        256
    }
}

/// Which norm runs, by what it reads besides `x` and its weight.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Extra<'a> {
    None,
    /// layer_norm's optional bias.
    Bias(Option<&'a GpuTensor>),
    /// add_rms_norm's addend.
    Add(&'a GpuTensor),
}

impl<'a> Extra<'a> {
    /// The entry point of `norm.wgsl` (also the op's name in errors).
    pub(crate) fn entry(self) -> &'static str {
        match self {
            Extra::None => "rms_norm",
            Extra::Bias(_) => "layer_norm",
            Extra::Add(_) => "add_rms_norm",
        }
    }

    /// `(bias, delta)`.
    fn operands(self) -> (Option<&'a GpuTensor>, Option<&'a GpuTensor>) {
        match self {
            Extra::None => (None, None),
            Extra::Bias(b) => (b, None),
            Extra::Add(d) => (None, Some(d)),
        }
    }
}

/// Records `out = (x − mean) · 1/√(var + eps) · weight (+ bias)` per row
/// (biased variance, as `torch.nn.LayerNorm`).
#[allow(clippy::too_many_arguments)] // the op's operands
pub fn record_layer_norm(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    x: &GpuTensor,
    weight: &GpuTensor,
    bias: Option<&GpuTensor>,
    out: &GpuTensor,
    eps: f32,
) -> Result<(), GpuError> {
    record_norm(gpu, cache, enc, x, weight, Extra::Bias(bias), out, eps)
}
