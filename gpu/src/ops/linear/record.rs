//! Recording a linear layer: checks, the kernel sequence of its format and
//! kernel choice, and the split of large weights into per-binding chunks.

use std::cell::Cell;
use std::num::NonZeroU64;

use dynvram_quant::{ActArith, Format, KernelChoice};
use dynvram_shaders::linear as shaders;

use super::weights::{LinearWeights, Region};
use super::{LinearError, LinearScratch};
use crate::device::{Gpu, SpreadQuant};
use crate::ops::cache::{PipelineCache, Program};
use crate::ops::encoder::Encoder;
use crate::ops::launch::{Bindings, Constants, Cost, Launch, launch};
use crate::tensor::{ActDtype, GpuTensor};

mod coop;
mod fold;
mod fused;
mod gemv;
mod norm_quant;
mod spec;
mod spread;
pub use coop::{
    CoopGemmKernel, CoopShape, GemmKernel, coop_gemm_unusable, coop_unusable, double_unusable,
    float_coop_unusable,
};
pub use fold::{Fold, NORM_FOLD_MAX_M, NormFold, fold_unusable, record_linear_folded};
pub use fused::{Fusion, record_linears_fused};
pub use gemv::{GemvShape, ROWS_GEMV_MAX_M, rows_gemv_max_m};
pub use norm_quant::{AddNorm, record_add_norm_quant};
use spec::{ActCodes, FloatWeights, IntEpilogue};

/// Rows of activations up to which every GEMV kernel runs (and activation
/// rotation and quantization fuse); above, the multi-row GEMV up to
/// [`ROWS_GEMV_MAX_M`] where rows are 16-byte aligned, else the tiled GEMMs.
pub const GEMV_MAX_M: u64 = 8;

/// Output tile edge of the GEMM kernels.
const GEMM_TILE: u64 = 32;

/// Largest group the rotation kernel holds in workgroup memory.
const MAX_GROUP: u32 = 4096;

/// Most workgroups per dispatch dimension (WebGPU's default limit); kernels
/// index rows as `wid.x + 65535 · wid.y`.
const MAX_GROUPS_PER_DIM: u64 = 65535;

/// Knobs for tests and tools; [`record_linear`] uses the defaults.
#[derive(Debug, Clone, Copy, Default)]
pub struct RecordOptions {
    /// Integer kernels write the raw `i32` accumulator's bits into `out`
    /// instead of the epilogue (to check the integer GEMM exactly).
    pub raw_accumulator: bool,
    /// Split weights at this many bytes per binding instead of the adapter's
    /// `max_storage_buffer_binding_size` (smaller only).
    pub max_binding: Option<u64>,
    /// The multi-row GEMV's shape instead of [`GemvShape::default_for`] (for
    /// tuning on a real GPU; checked against the kernels' limits).
    pub gemv: Option<GemvShape>,
    /// The integer GEMM kernel.
    pub gemm: GemmKernel,
    /// The cooperative-matrix GEMM's shape instead of [`CoopShape::for_adapter`] (for
    /// tuning on a real GPU; checked against the adapter's limits).
    pub coop: Option<CoopShape>,
    /// The cooperative-matrix GEMM kernel instead of the device's
    /// `GpuOptions::coop_gemm` (tests and tools comparing them; a layer
    /// [`CoopGemmKernel::Double`] does not fit takes the single-stage one).
    pub coop_gemm: Option<CoopGemmKernel>,
    /// The scratch may already hold `x`'s activation codes from the linear
    /// recorded just before with the same input (q/k/v, gate/up): they are
    /// used where they were quantized the same way, instead of quantizing
    /// again. Only for linears recorded back to back on one input.
    pub reuse_codes: bool,
    /// Invocations per workgroup of the fast fused rotate/quantize kernel
    /// (M <= 8, `fast` integer kernels) instead of its default or
    /// `GpuOptions::quant_wgs` (for tuning; a power of two in 64..=1024).
    pub quant_wgs: Option<u32>,
    /// Integer GEMVs at decode sizes read codes a quantization launch wrote
    /// ([`LinearScratch::act_codes`] then holds them) even where they would
    /// make them from spread-rotated rows (`GpuOptions::spread_quant`);
    /// wins over [`Self::spread_quant`].
    pub quantize_apart: bool,
    /// The spread quantization's mode instead of the device's
    /// `GpuOptions::spread_quant` (tests and tools comparing the modes on
    /// one device). Whether a fold is usable still follows the device's
    /// ([`fold_unusable`]): a folded norm with this `Off` is an error.
    pub spread_quant: Option<SpreadQuant>,
}

/// What activation codes in the scratch were made from and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodesKey {
    x: (wgpu::Buffer, u64),
    codes: ActCodes,
    group: Option<u32>,
    perm8: bool,
    m: u64,
    k: u64,
    /// The norm folded in before the rotation: its weight and eps bits.
    norm: Option<((wgpu::Buffer, u64), u32)>,
    /// Rotated rows and chunk maxima (the GEMV makes the codes), not codes
    /// ([`SpreadQuant::InGemv`]).
    spread: bool,
}

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
    record(
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

/// [`record_linear_with`], with more weights of the same input in the
/// multi-row GEMV's launch where `fused` (checked by [`fused`]) and the
/// neighbouring ops of `fold` (checked here by [`fold_unusable`]).
#[allow(clippy::too_many_arguments)]
fn record(
    gpu: &Gpu,
    cache: &PipelineCache,
    encoder: &mut Encoder,
    weights: &LinearWeights,
    choice: KernelChoice,
    x: &GpuTensor,
    out: &GpuTensor,
    scratch: &mut LinearScratch,
    opts: &RecordOptions,
    fused: Option<&fused::Fused<'_>>,
    fold: &Fold<'_>,
) -> Result<(), LinearError> {
    let (n, k) = (weights.n, weights.k);
    let _span =
        tracing::debug_span!("record_linear", n, k, format = ?weights.format, ?choice).entered();
    let limit = gpu.caps.max_storage_binding;
    let align = u64::from(gpu.device.limits().min_storage_buffer_offset_alignment);
    let m = check_operands(weights, x, out, limit, align)?;
    if let Some(why) = fold_unusable(gpu, weights, choice, m, fold) {
        return Err(LinearError::Unsupported {
            what: format!("a folded norm or residual add: {why}"),
            n,
            k,
        });
    }
    if fold.residual && fused.is_some() {
        return Err(LinearError::Unsupported {
            what: "a residual add folded into fused linears".into(),
            n,
            k,
        });
    }
    for (w, o) in fused.iter().flat_map(|f| &f.more) {
        check_operands(w, x, o, limit, align)?;
    }
    if opts.raw_accumulator && out.dtype != ActDtype::F32 {
        return Err(LinearError::ActDtype {
            tensor: "out",
            dtype: format!("{:?} (the raw i32 accumulator needs F32)", out.dtype),
        });
    }
    crate::ops::cache::check_act_dtype(gpu, "linear", x.dtype)?;
    let weight_limit = opts.max_binding.map_or(limit, |b| b.min(limit));
    let max_invocations = gpu.device.limits().max_compute_invocations_per_workgroup;
    let mut gemv = opts
        .gemv
        .unwrap_or_else(|| GemvShape::default_for(m, max_invocations));
    if fused.is_some_and(|f| f.glu) {
        gemv = gemv.halved(m);
    }
    let rows_max = if opts.gemv.is_some() {
        ROWS_GEMV_MAX_M
    } else {
        rows_gemv_max_m(gpu)
    };
    let rows_gemv = m <= rows_max && gemv::rows_aligned(weights.row_bytes());
    if rows_gemv {
        gemv.check(m, max_invocations)
            .map_err(|what| LinearError::Unsupported { what, n, k })?;
    }
    let dispatches = Cell::new(0);
    let rec = Recorder {
        gpu,
        cache,
        weights,
        limit: weight_limit,
        align,
        m,
        act: x.dtype,
        gemv: rows_gemv.then_some(gemv),
        gemm: opts.gemm,
        coop: opts
            .coop
            .unwrap_or_else(|| CoopShape::for_adapter(&gpu.caps)),
        coop_asked: opts.coop,
        coop_gemm: opts.coop_gemm.unwrap_or_else(|| gpu.coop_gemm()),
        reuse_codes: opts.reuse_codes,
        quant_wgs: opts.quant_wgs,
        spread: if opts.quantize_apart {
            SpreadQuant::Off
        } else {
            opts.spread_quant.unwrap_or_else(|| gpu.spread_quant())
        },
        fused,
        fold: *fold,
        dispatches: &dispatches,
    };
    let unsupported = |what: String| LinearError::Unsupported { what, n, k };
    let choice_err = |why| LinearError::Choice {
        choice,
        format: weights.format,
        why,
    };
    match choice {
        KernelChoice::Integer { act, fast } => {
            if fast && !gpu.caps.subgroups {
                return Err(choice_err(
                    "the fast kernel needs subgroups, which this adapter lacks",
                ));
            }
            let int = IntPath::of(weights.format, act).map_err(choice_err)?;
            if int.w4 && k % 8 != 0 {
                return Err(unsupported(format!(
                    "int4 weights need K % 8 == 0, K = {k}"
                )));
            }
            let r = rec.integer(encoder, &int, fast, x, out, scratch, opts.raw_accumulator);
            scratch.set_dispatches(dispatches.get());
            r
        }
        KernelChoice::Float => {
            let wfmt = FloatWeights::of(weights.format)
                .ok_or_else(|| choice_err("an integer format needs an integer kernel"))?;
            let r = rec.float(encoder, wfmt, x, out, scratch);
            scratch.set_dispatches(dispatches.get());
            r
        }
    }
}

/// Checks shapes, dtypes, regions and binding sizes; returns M.
fn check_operands(
    w: &LinearWeights,
    x: &GpuTensor,
    out: &GpuTensor,
    limit: u64,
    align: u64,
) -> Result<u64, LinearError> {
    let (n, k) = (w.n, w.k);
    let shape_err = |tensor, t: &GpuTensor, expected: String| LinearError::Shape {
        tensor,
        shape: t.shape.clone(),
        expected,
        n,
        k,
    };
    if out.dtype != x.dtype {
        return Err(LinearError::ActDtype {
            tensor: "out",
            dtype: format!("{} while `x` is {}", out.dtype, x.dtype),
        });
    }
    let m = match x.shape.split_last() {
        Some((&kk, outer)) if kk == k => outer.iter().product::<u64>(),
        _ => return Err(shape_err("x", x, format!("[.., {k}]"))),
    };
    if out.shape.last() != Some(&n) || out.numel() != m * n {
        return Err(shape_err("out", out, format!("[{m}, {n}]")));
    }
    if m == 0 || n == 0 {
        return Err(shape_err("x", x, "non-empty operands".into()));
    }
    if k % 4 != 0 || k == 0 {
        return Err(LinearError::Unsupported {
            what: format!("K must be a non-zero multiple of 4, K = {k}"),
            n,
            k,
        });
    }
    if let Some(what) = beyond_u32_indices(m, n, k) {
        return Err(LinearError::Unsupported { what, n, k });
    }
    for (tensor, t) in [("x", x), ("out", out)] {
        if t.offset + t.binding_bytes() > t.buffer.size() {
            return Err(shape_err(
                tensor,
                t,
                format!(
                    "{} bytes at offset {} inside a buffer of {}",
                    t.binding_bytes(),
                    t.offset,
                    t.buffer.size()
                ),
            ));
        }
        if t.bytes() > limit {
            return Err(LinearError::BindingTooLarge {
                tensor,
                bytes: t.bytes(),
                limit,
            });
        }
    }
    let rows: u64 = w.parts.iter().map(|p| p.rows).sum();
    if rows != n {
        return Err(LinearError::Unsupported {
            what: format!("weight parts hold {rows} rows, expected N"),
            n,
            k,
        });
    }
    let rb = w.row_bytes();
    let parts = w.parts.iter().map(|p| ("weight", &p.region, p.rows * rb));
    let scale = w.scale.iter().map(|s| ("weight_scale", s, 4));
    let bias = w.bias.iter().map(|b| ("bias", b, 4 * n));
    for (region, r, need) in parts.chain(scale).chain(bias) {
        let err = |why: String| LinearError::Region {
            region,
            offset: r.offset,
            size: r.size,
            why,
        };
        if r.offset % align != 0 {
            return Err(err(format!(
                "offset is not a multiple of min_storage_buffer_offset_alignment {align}"
            )));
        }
        if r.size < need || r.offset + r.size > r.buffer.size() {
            return Err(err(format!(
                "needs {need} bytes inside a buffer of {}",
                r.buffer.size()
            )));
        }
        if region != "weight" && r.size > limit {
            return Err(LinearError::BindingTooLarge {
                tensor: region,
                bytes: r.size,
                limit,
            });
        }
    }
    Ok(m)
}

/// Why the kernels' u32 element indices cannot address these operands: the
/// products they index are M·K (activations), N·K (weights) and M·N
/// (outputs), each on its own.
fn beyond_u32_indices(m: u64, n: u64, k: u64) -> Option<String> {
    [("M·K", m, k), ("N·K", n, k), ("M·N", m, n)]
        .into_iter()
        .find(|&(_, a, b)| a.saturating_mul(b) > u64::from(u32::MAX))
        .map(|(what, a, b)| {
            format!("{what} = {a}·{b} is beyond the u32 element indices of the kernels")
        })
}

/// The integer kernels' specialisation for a format and arithmetic.
struct IntPath {
    /// How activations become codes.
    codes: ActCodes,
    /// Rotation group, for rotated layers.
    group: Option<u32>,
    /// int4 nibble weights.
    w4: bool,
    /// The epilogue.
    epilogue: IntEpilogue,
    /// `SW_PER_ROW`.
    per_row_scale: bool,
}

impl IntPath {
    /// The integer kernels' specialisation for `format` with `act`
    /// activations, or why there is none.
    fn of(format: Format, act: ActArith) -> Result<Self, &'static str> {
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
    fn quant_constants(&self, perm8: bool) -> [(&'static str, f64); 3] {
        [
            ("MODE", f64::from(self.codes as u32)),
            ("INV127", f64::from(1.0f32 / 127.0)),
            ("PERM8", f64::from(u8::from(perm8))),
        ]
    }
}

/// A GEMV or GEMM as recorded: module, kernel name (the profile's label),
/// output tile `(M, N)` (GEMMs), override constants.
type KernelSpec = (&'static str, &'static str, (u64, u64), Constants);

/// One weight chunk: a binding of whole rows.
struct Chunk<'a> {
    buffer: &'a wgpu::Buffer,
    offset: u64,
    size: u64,
    rows: u64,
    first_row: u64,
}

#[derive(Clone, Copy)]
struct Recorder<'a> {
    gpu: &'a Gpu,
    cache: &'a PipelineCache,
    weights: &'a LinearWeights,
    limit: u64,
    align: u64,
    m: u64,
    /// The `act` variant of the kernels: the dtype of `x` and `out`.
    act: ActDtype,
    /// The multi-row GEMV's shape, when M is small and weight rows start on
    /// 16 bytes (else the one-row GEMV or the GEMM).
    gemv: Option<GemvShape>,
    /// The integer GEMM kernel asked for.
    gemm: GemmKernel,
    /// The cooperative-matrix GEMM's shape.
    coop: CoopShape,
    /// [`RecordOptions::coop`]: the double-buffered kernel's shape too.
    coop_asked: Option<CoopShape>,
    /// The cooperative-matrix GEMM kernel asked for.
    coop_gemm: CoopGemmKernel,
    /// [`RecordOptions::reuse_codes`].
    reuse_codes: bool,
    /// [`RecordOptions::quant_wgs`].
    quant_wgs: Option<u32>,
    /// How integer GEMVs at decode sizes get their codes
    /// ([`RecordOptions::spread_quant`], else the device's).
    spread: SpreadQuant,
    /// More weights in the multi-row GEMV's launch.
    fused: Option<&'a fused::Fused<'a>>,
    /// Ops folded into the multi-row GEMV's launch.
    fold: Fold<'a>,
    /// Dispatches recorded so far.
    dispatches: &'a Cell<u32>,
}

/// The `Params` uniform of the GEMV/GEMM kernels (and the 4-word uniforms of
/// the others, as a prefix).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    a: u32,
    b: u32,
    c: u32,
    d: u32,
    e: u32,
    pad: [u32; 3],
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// `(x, y)` workgroups covering `count` rows (or row groups) with at most
/// 65535 per dimension: the linear kernels index them as
/// `wid.x + 65535 · wid.y`, a fixed stride (unlike `ops::kernel::grid`,
/// whose kernels read the grid's width).
fn rows_grid(count: u64) -> (u32, u32) {
    let x = count.min(MAX_GROUPS_PER_DIM);
    let y = count.div_ceil(MAX_GROUPS_PER_DIM);
    (x as u32, y as u32)
}

fn buf(buffer: &wgpu::Buffer, offset: u64, size: u64) -> wgpu::BindingResource<'_> {
    wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer,
        offset,
        size: NonZeroU64::new(size),
    })
}

fn region(r: &Region) -> wgpu::BindingResource<'_> {
    buf(&r.buffer, r.offset, r.size.div_ceil(4) * 4)
}

impl Recorder<'_> {
    fn unsupported(&self, what: String) -> LinearError {
        LinearError::Unsupported {
            what,
            n: self.weights.n,
            k: self.weights.k,
        }
    }

    /// The weight split into bindings of whole rows, each at most `limit`
    /// bytes and starting at an aligned offset.
    fn chunks(&self) -> Result<smallvec::SmallVec<[Chunk<'_>; 2]>, LinearError> {
        let rb = self.weights.row_bytes();
        let step = self.align / gcd(rb, self.align);
        let max_rows = (self.limit / rb) / step * step;
        if max_rows == 0 {
            return Err(self.unsupported(format!(
                "one weight row ({rb} bytes, in aligned groups of {step}) exceeds the binding limit {}",
                self.limit
            )));
        }
        let mut chunks = smallvec::SmallVec::new();
        let mut first_row = 0;
        for part in &self.weights.parts {
            let mut done = 0;
            while done < part.rows {
                let rows = max_rows.min(part.rows - done);
                chunks.push(Chunk {
                    buffer: &part.region.buffer,
                    offset: part.region.offset + done * rb,
                    size: (rows * rb).div_ceil(4) * 4,
                    rows,
                    first_row: first_row + done,
                });
                done += rows;
            }
            first_row += part.rows;
        }
        Ok(chunks)
    }

    /// Records one launch of `source` with explicitly numbered bindings
    /// and `params` as its immediates; `name` is the kernel's in the
    /// profile.
    #[allow(clippy::too_many_arguments)]
    fn dispatch_at(
        &self,
        encoder: &mut Encoder,
        name: &'static str,
        source: &'static str,
        constants: &[(&'static str, f64)],
        bindings: &[(u32, wgpu::BindingResource<'_>)],
        params: Params,
        groups: (u32, u32),
        cost: Cost,
    ) -> Result<(), LinearError> {
        launch(
            self.gpu,
            self.cache,
            encoder,
            Launch {
                program: Program {
                    source,
                    entry: "main",
                    constants,
                    act: self.act,
                },
                label: &LaunchLabel {
                    kernel: name,
                    rec: self,
                },
                bindings,
                immediates: bytemuck::bytes_of(&params),
                groups,
                cost,
            },
        )?;
        self.dispatches.set(self.dispatches.get() + 1);
        Ok(())
    }

    /// [`Self::dispatch_at`] with the bindings numbered from 0.
    #[allow(clippy::too_many_arguments)]
    fn dispatch<'b>(
        &self,
        encoder: &mut Encoder,
        name: &'static str,
        source: &'static str,
        constants: &[(&'static str, f64)],
        bindings: impl IntoIterator<Item = wgpu::BindingResource<'b>>,
        params: Params,
        groups: (u32, u32),
        cost: Cost,
    ) -> Result<(), LinearError> {
        let numbered: Bindings<'_> = (0..).zip(bindings).collect();
        self.dispatch_at(
            encoder, name, source, constants, &numbered, params, groups, cost,
        )
    }

    /// The cost of one weight chunk's GEMV or GEMM: the chunk, the
    /// activations (`x_bytes`, read once) and its outputs.
    fn chunk_cost(&self, c: &Chunk<'_>, x_bytes: u64) -> Cost {
        let (m, k) = (self.m, self.weights.k);
        Cost::new(
            c.size + x_bytes,
            m * c.rows * self.act.size(),
            2 * m * c.rows * k,
        )
    }

    /// Whether this layer's GEMM runs on cooperative matrices: never at GEMV
    /// sizes or when the tiled GEMM is asked for; else where `why_not` finds
    /// nothing against them (an error when they were asked for).
    fn coop_chosen(
        &self,
        why_not: impl FnOnce(&dynvram_quant::AdapterCaps) -> Option<String>,
    ) -> Result<bool, LinearError> {
        if self.m <= GEMV_MAX_M || self.gemv.is_some() || self.gemm == GemmKernel::Tiled {
            return Ok(false);
        }
        // Left to the tiled GEMM without formatting why (every prefill
        // linear asks).
        if self.gemm == GemmKernel::Auto && !self.gpu.caps.f16_coop_matrices() {
            return Ok(false);
        }
        match why_not(&self.gpu.caps) {
            None => Ok(true),
            Some(_) if self.gemm == GemmKernel::Auto => Ok(false),
            Some(why) => Err(self.unsupported(format!("cooperative-matrix GEMM: {why}"))),
        }
    }

    /// The double-buffered GEMM's shape where it is asked for and fits this
    /// layer (integer with `int4_weights`, or of `float` weights), else
    /// `None`: the single-stage kernel runs.
    fn double_shape(&self, float: Option<Format>, int4_weights: bool) -> Option<CoopShape> {
        if self.coop_gemm != CoopGemmKernel::Double {
            return None;
        }
        let caps = &self.gpu.caps;
        let shape = self
            .coop_asked
            .unwrap_or_else(|| CoopShape::for_double(caps));
        match double_unusable(caps, shape, self.weights.k, float, int4_weights) {
            None => Some(shape),
            Some(why) => {
                tracing::debug!(%shape, why, "double-buffered GEMM left for the single-stage one");
                None
            }
        }
    }

    /// The cooperative-matrix GEMM on this adapter, integer or `float`,
    /// single-stage or, with its shape, `double`-buffered; its constants
    /// after the kernel's own `constants`.
    fn coop_kernel(
        &self,
        float: bool,
        constants: &[(&'static str, f64)],
        double: Option<CoopShape>,
    ) -> KernelSpec {
        let caps = &self.gpu.caps;
        let (shape, kernel) = match double {
            Some(s) => (s, CoopGemmKernel::Double),
            None => (self.coop, CoopGemmKernel::Single),
        };
        let k = coop::specialise(
            caps.coop_matrix_edge,
            caps.subgroup_min_size,
            shape,
            float,
            kernel,
        );
        let mut all = Constants::from_slice(constants);
        all.extend_from_slice(&k.constants);
        // The profile's name, as before kernels were found by `Program`;
        // `_db` for the double-buffered kernel.
        let name = match (caps.coop_matrix_edge, kernel) {
            (16, CoopGemmKernel::Single) => "gemm_coop16",
            (_, CoopGemmKernel::Single) => "gemm_coop8",
            (16, CoopGemmKernel::Double) => "gemm_coop16_db",
            (_, CoopGemmKernel::Double) => "gemm_coop8_db",
        };
        (k.source, name, k.tile, all)
    }

    #[allow(clippy::too_many_arguments)]
    fn integer(
        &self,
        encoder: &mut Encoder,
        int: &IntPath,
        fast: bool,
        x: &GpuTensor,
        out: &GpuTensor,
        scratch: &mut LinearScratch,
        raw: bool,
    ) -> Result<(), LinearError> {
        let (gpu, m, n, k) = (self.gpu, self.m, self.weights.n, self.weights.k);
        let coop = self.coop_chosen(|caps| {
            coop_gemm_unusable(
                caps,
                self.weights.k,
                int.codes == ActCodes::Int4,
                int.w4,
                self.coop,
            )
        })?;
        let double = coop.then(|| self.double_shape(None, int.w4)).flatten();
        scratch.set_coop(coop.then(|| coop_ran(self.coop, double)));
        let epi = if raw {
            IntEpilogue::RawAccumulator
        } else {
            int.epilogue
        };
        // The codes a previous linear left in the scratch, when they are
        // this input's, quantized the same way (asked for by the caller);
        // with a folded norm, codes of the normed input
        // (`SpreadQuant::CodeKernel` makes them).
        let codes_key = CodesKey {
            x: (x.buffer.as_ref().clone(), x.offset),
            codes: int.codes,
            group: int.group,
            perm8: int.w4 && !coop,
            m,
            k,
            norm: self.fold.norm.map(|n| n.key()),
            spread: false,
        };
        let reuse = self.reuse_codes && scratch.codes_key() == Some(&codes_key);
        // Codes a quantization launch left (`record_add_norm_quant`) are
        // taken as they are; else small M spreads the quantization.
        if let Some(s) = self
            .spread_shape(int.group.unwrap_or(1))
            .filter(|_| !coop && !reuse)
        {
            return self.integer_spread(encoder, int, fast, s, x, out, scratch, epi);
        }
        if self.fold.norm.is_some() && !reuse {
            return Err(self.unsupported(
                "a folded norm before an integer linear needs the spread quantization".into(),
            ));
        }
        let rot_bytes = m * k * 4;
        // The rotation writes f32, so the quantization after it reads f32.
        let mut quant_rec = *self;
        // Small M: rotation and quantization as one dispatch; without a
        // rotation the same kernel with G = 1 (the identity) quantizes each
        // row with a whole, wide workgroup.
        let fused = Some(int.group.unwrap_or(1)).filter(|&g| self.fuses_rotate_quant(g));
        let rotated;
        let (q_src, q_off) = match int.group {
            Some(g) => {
                if !dynvram_quant::reference::is_power_of_four(g)
                    || g > MAX_GROUP
                    || k % u64::from(g) != 0
                {
                    return Err(self.unsupported(format!(
                        "rotation group {g} must be a power of 4 in 4..={MAX_GROUP} dividing K"
                    )));
                }
                if m > MAX_GROUPS_PER_DIM {
                    return Err(self.unsupported(format!(
                        "rotation handles at most {MAX_GROUPS_PER_DIM} rows, M = {m}"
                    )));
                }
                rotated = scratch.x_rot(gpu, rot_bytes)?;
                quant_rec.act = ActDtype::F32;
                if fused.is_none() && !reuse {
                    self.dispatch(
                        encoder,
                        "linear_rotate",
                        shaders::ROTATE,
                        &[("G", f64::from(g))],
                        [x.binding(), buf(&rotated, 0, rot_bytes)],
                        Params {
                            a: m as u32,
                            b: k as u32,
                            c: 0,
                            d: 0,
                            e: 0,
                            pad: [0; 3],
                        },
                        ((k / u64::from(g)) as u32, m as u32),
                        Cost::new(
                            m * k * x.dtype.size(),
                            rot_bytes,
                            m * k * 2 * u64::from(g.ilog2()),
                        ),
                    )?;
                }
                (&*rotated, 0)
            }
            None if fused.is_some() => {
                rotated = scratch.x_rot(gpu, rot_bytes)?;
                (&*rotated, 0)
            }
            None => (&*x.buffer, x.offset),
        };
        let kw = k / 4;
        let codes = scratch.codes(gpu, m * kw * 4)?;
        let scales = scratch.scales(gpu, m * 4)?;
        let quant_src = if fast {
            shaders::ACT_QUANT_SUBGROUP
        } else {
            shaders::ACT_QUANT
        };
        // The dot4 kernels pair int4 weights' even/odd columns; the
        // cooperative one decodes them in order.
        let quant_constants = int.quant_constants(int.w4 && !coop);
        let quant_params = Params {
            a: m as u32,
            b: k as u32,
            c: kw as u32,
            d: 0,
            e: 0,
            pad: [0; 3],
        };
        if reuse {
            // Quantized already.
        } else if let Some(g) = fused {
            self.rotate_quant(
                encoder,
                g,
                fast,
                &quant_constants,
                quant_params,
                [
                    x.binding(),
                    buf(&codes, 0, m * kw * 4),
                    buf(&scales, 0, m * 4),
                    buf(q_src, 0, rot_bytes),
                ],
            )?;
        } else {
            quant_rec.dispatch(
                encoder,
                "linear_act_quant",
                quant_src,
                &quant_constants,
                [
                    buf(q_src, q_off, quant_rec.act.size() * m * k),
                    buf(&codes, 0, m * kw * 4),
                    buf(&scales, 0, m * 4),
                ],
                quant_params,
                rows_grid(m),
                Cost::new(quant_rec.act.size() * m * k, m * kw * 4 + m * 4, 4 * m * k),
            )?;
        }
        scratch.set_codes_key(Some(codes_key));
        let dummy = scratch.dummy(gpu)?;
        let has_bias = self.weights.bias.is_some();
        let constants = [
            ("W4", f64::from(u8::from(int.w4))),
            ("EPI", f64::from(epi as u32)),
            ("SW_PER_ROW", f64::from(u8::from(int.per_row_scale))),
            ("HAS_BIAS", f64::from(u8::from(has_bias))),
        ];
        let gemv = m <= GEMV_MAX_M;
        let (source, name, tile, constants) = match (gemv, fast, coop) {
            (true, true, _) => (
                shaders::INT_GEMV_SUBGROUP,
                "linear_int_gemv",
                (0, 0),
                Constants::from_slice(&constants),
            ),
            (true, false, _) => (
                shaders::INT_GEMV,
                "linear_int_gemv",
                (0, 0),
                Constants::from_slice(&constants),
            ),
            (false, _, false) => (
                shaders::INT_GEMM,
                "linear_int_gemm",
                (GEMM_TILE, GEMM_TILE),
                Constants::from_slice(&constants),
            ),
            (false, _, true) => self.coop_kernel(false, &constants, double),
        };
        let scale = self
            .weights
            .scale
            .as_ref()
            .ok_or_else(|| self.unsupported("integer formats need a weight_scale".into()))?;
        for c in self.chunks()? {
            let bias = self
                .weights
                .bias
                .as_ref()
                .map_or(buf(&dummy, 0, 16), region);
            if let Some(shape) = self.gemv {
                let ops = gemv::GemvOperands {
                    scale: region(scale),
                    bias,
                    out: out.binding(),
                    input: gemv::GemvInput::Codes {
                        codes: buf(&codes, 0, m * kw * 4),
                        scales: buf(&scales, 0, m * 4),
                    },
                };
                self.int_gemv_rows(encoder, &c, shape, int, fast, epi, ops)?;
                continue;
            }
            let groups = if gemv {
                rows_grid(c.rows)
            } else {
                (c.rows.div_ceil(tile.1) as u32, m.div_ceil(tile.0) as u32)
            };
            let params = Params {
                a: m as u32,
                b: c.rows as u32,
                c: k as u32,
                d: c.first_row as u32,
                e: n as u32,
                pad: [0; 3],
            };
            let cost = self.chunk_cost(&c, m * kw * 4 + m * 4);
            if double.is_some() {
                // The weights and codes as 16-byte words (bindings 6 and
                // 7), not as the u32 words of bindings 0 and 3.
                let bindings = [
                    (1, region(scale)),
                    (2, bias),
                    (4, buf(&scales, 0, m * 4)),
                    (5, out.binding()),
                    (6, buf(c.buffer, c.offset, c.size)),
                    (7, buf(&codes, 0, m * kw * 4)),
                ];
                self.dispatch_at(
                    encoder, name, source, &constants, &bindings, params, groups, cost,
                )?;
                continue;
            }
            self.dispatch(
                encoder,
                name,
                source,
                &constants,
                [
                    buf(c.buffer, c.offset, c.size),
                    region(scale),
                    bias,
                    buf(&codes, 0, m * kw * 4),
                    buf(&scales, 0, m * 4),
                    out.binding(),
                ],
                params,
                groups,
                cost,
            )?;
        }
        Ok(())
    }

    fn float(
        &self,
        encoder: &mut Encoder,
        wfmt: FloatWeights,
        x: &GpuTensor,
        out: &GpuTensor,
        scratch: &mut LinearScratch,
    ) -> Result<(), LinearError> {
        let (m, n, k) = (self.m, self.weights.n, self.weights.k);
        let dummy = scratch.dummy(self.gpu)?;
        let has_bias = self.weights.bias.is_some();
        if wfmt.is_fp8() && self.weights.scale.is_none() {
            return Err(self.unsupported("fp8 weights need a weight_scale".into()));
        }
        let gemv = m <= GEMV_MAX_M;
        let coop = self.coop_chosen(|caps| {
            float_coop_unusable(caps, self.weights.format, self.act, self.coop)
        })?;
        let double = coop
            .then(|| self.double_shape(Some(self.weights.format), false))
            .flatten();
        scratch.set_coop(coop.then(|| coop_ran(self.coop, double)));
        let constants = [
            ("WFMT", f64::from(wfmt as u32)),
            ("HAS_BIAS", f64::from(u8::from(has_bias))),
        ];
        let (source, name, tile, constants) = match (gemv, coop) {
            (true, _) => (
                shaders::FLOAT_GEMV,
                "linear_float_gemv",
                (0, 0),
                Constants::from_slice(&constants),
            ),
            (false, false) => (
                shaders::FLOAT_GEMM,
                "linear_float_gemm",
                (GEMM_TILE, GEMM_TILE),
                Constants::from_slice(&constants),
            ),
            (false, true) => self.coop_kernel(true, &constants, double),
        };
        for c in self.chunks()? {
            let scale = self
                .weights
                .scale
                .as_ref()
                .map_or(buf(&dummy, 0, 16), region);
            let bias = self
                .weights
                .bias
                .as_ref()
                .map_or(buf(&dummy, 0, 16), region);
            if let Some(shape) = self.gemv {
                let ops = gemv::GemvOperands {
                    scale,
                    bias,
                    out: out.binding(),
                    input: gemv::GemvInput::Float(x.binding()),
                };
                self.float_gemv_rows(encoder, &c, shape, wfmt, ops)?;
                continue;
            }
            let groups = if gemv {
                rows_grid(c.rows)
            } else {
                (c.rows.div_ceil(tile.1) as u32, m.div_ceil(tile.0) as u32)
            };
            let params = Params {
                a: m as u32,
                b: c.rows as u32,
                c: k as u32,
                d: c.first_row as u32,
                e: n as u32,
                pad: [0; 3],
            };
            let cost = self.chunk_cost(&c, x.bytes());
            if double.is_some() {
                // The weights and activations as 16-byte words (bindings 5
                // and 6), not as bindings 0 and 3.
                let bindings = [
                    (1, scale),
                    (2, bias),
                    (4, out.binding()),
                    (5, buf(c.buffer, c.offset, c.size)),
                    (6, x.binding()),
                ];
                self.dispatch_at(
                    encoder, name, source, &constants, &bindings, params, groups, cost,
                )?;
                continue;
            }
            self.dispatch(
                encoder,
                name,
                source,
                &constants,
                [
                    buf(c.buffer, c.offset, c.size),
                    scale,
                    bias,
                    x.binding(),
                    out.binding(),
                ],
                params,
                groups,
                cost,
            )?;
        }
        Ok(())
    }
}

/// The cooperative GEMM a layer runs: the double-buffered kernel with its
/// shape where chosen, else the single-stage one with `single`.
fn coop_ran(single: CoopShape, double: Option<CoopShape>) -> (CoopShape, CoopGemmKernel) {
    double.map_or((single, CoopGemmKernel::Single), |s| {
        (s, CoopGemmKernel::Double)
    })
}

/// A linear launch's profile label (`kernel NxK m=M`, with `+N` for each
/// fused layer and the folds), formatted only while profiling.
struct LaunchLabel<'r, 'a> {
    kernel: &'r str,
    rec: &'r Recorder<'a>,
}

impl std::fmt::Display for LaunchLabel<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self.rec;
        write!(f, "{} {}", self.kernel, r.weights.n)?;
        for (w, _) in r.fused.iter().flat_map(|x| &x.more) {
            write!(f, "+{}", w.n)?;
        }
        write!(f, "x{} m={}", r.weights.k, r.m)?;
        if r.fold.norm.is_some() {
            f.write_str(" +norm")?;
        }
        if r.fold.residual {
            f.write_str(" +residual")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::beyond_u32_indices;

    #[test]
    fn large_vocabularies_fit_the_kernels_indices() {
        // Llama 3's lm_head (vocab 128 256, hidden 4096), decode and a
        // 512-token prefill; Qwen2.5-7B's (152 064 × 3584).
        for (m, n, k) in [(1, 128_256, 4096), (512, 128_256, 4096), (1, 152_064, 3584)] {
            assert_eq!(beyond_u32_indices(m, n, k), None, "{m}x{n}x{k}");
        }
        // Each product on its own is what overflows.
        assert!(beyond_u32_indices(1, 1 << 20, 1 << 12).is_some());
        assert!(beyond_u32_indices(1 << 20, 4, 1 << 12).is_some());
        assert!(beyond_u32_indices(1 << 16, 1 << 16, 4).is_some());
    }
}
