//! What recording one linear shares across its kernels: the [`Recorder`]
//! (the layer, the adapter and the options in force), weight chunks of one
//! binding each, the immediates of the linear kernels, and the one launch
//! path they all take.

use std::cell::Cell;
use std::num::NonZeroU64;
use std::sync::Arc;

use super::cm2::{self, Cm2Kernel, Cm2Params, SplitPlan};
use super::coop::{self, CoopGemmKernel, CoopShape, GemmKernel, double_unusable};
use super::fold::Fold;
use super::fused::Fused;
use super::gemv_shape::{GEMV_MAX_M, GemvShape};
use crate::device::{Cm2Bf16, Cm2Int4, Cm2Split, Cm2Stack, Gpu, GpuError, SpirvGemm, SpreadQuant};
use crate::ops::cache::{PipelineCache, Program};
use crate::ops::encoder::Encoder;
use crate::ops::launch::{Bindings, Constants, Cost, Launch, launch, launch_spirv};
use crate::ops::linear::{LinearError, LinearScratch, LinearWeights, Region};
use crate::tensor::ActDtype;
use dynvram_quant::Format;

/// Output tile edge of the GEMM kernels.
pub(super) const GEMM_TILE: u64 = 32;

/// Largest group the rotation kernel holds in workgroup memory.
pub(super) const MAX_GROUP: u32 = 4096;

/// Most workgroups per dispatch dimension (WebGPU's default limit); kernels
/// index rows as `wid.x + 65535 · wid.y`.
pub(super) const MAX_GROUPS_PER_DIM: u64 = 65535;

/// A GEMV or GEMM as recorded: module, kernel name (the profile's label),
/// output tile `(M, N)` (GEMMs), override constants.
pub(super) type KernelSpec = (&'static str, &'static str, (u64, u64), Constants);

/// One weight chunk: a binding of whole rows.
pub(super) struct Chunk<'a> {
    pub(super) buffer: &'a wgpu::Buffer,
    pub(super) offset: u64,
    pub(super) size: u64,
    pub(super) rows: u64,
    pub(super) first_row: u64,
}

#[derive(Clone, Copy)]
pub(super) struct Recorder<'a> {
    pub(super) gpu: &'a Gpu,
    pub(super) cache: &'a PipelineCache,
    pub(super) weights: &'a LinearWeights,
    pub(super) limit: u64,
    pub(super) align: u64,
    pub(super) m: u64,
    /// The `act` variant of the kernels: the dtype of `x` and `out`.
    pub(super) act: ActDtype,
    /// The multi-row GEMV's shape, when M is small and weight rows start on
    /// 16 bytes (else the one-row GEMV or the GEMM).
    pub(super) gemv: Option<GemvShape>,
    /// The integer GEMM kernel asked for.
    pub(super) gemm: GemmKernel,
    /// The cooperative-matrix GEMM's shape.
    pub(super) coop: CoopShape,
    /// [`RecordOptions::coop`]: the double-buffered kernel's shape too.
    pub(super) coop_asked: Option<CoopShape>,
    /// The cooperative-matrix GEMM kernel asked for.
    pub(super) coop_gemm: CoopGemmKernel,
    /// [`RecordOptions::spirv_gemm`].
    pub(super) spirv_gemm: SpirvGemm,
    /// How a bf16 layer takes the SPIR-V GEMM.
    pub(super) cm2_bf16: Cm2Bf16,
    /// How an int4 layer takes the SPIR-V GEMM.
    pub(super) cm2_int4: Cm2Int4,
    /// Whether SPIR-V GEMMs on small grids split K.
    pub(super) cm2_split: Cm2Split,
    /// Bytes of one converted piece at most (`Recorder::each_converted`).
    pub(super) piece_bytes: u64,
    /// [`RecordOptions::cm2_kernel`].
    pub(super) cm2_kernel: Option<&'static str>,
    /// [`RecordOptions::spirv_check`].
    pub(super) spirv_check: bool,
    /// [`RecordOptions::gelu_tanh`].
    pub(super) gelu: bool,
    /// How linears of one input share a SPIR-V GEMM launch.
    pub(super) cm2_stack: Cm2Stack,
    /// [`RecordOptions::reuse_codes`].
    pub(super) reuse_codes: bool,
    /// [`RecordOptions::quant_wgs`].
    pub(super) quant_wgs: Option<u32>,
    /// How integer GEMVs at decode sizes get their codes
    /// ([`RecordOptions::spread_quant`], else the device's).
    pub(super) spread: SpreadQuant,
    /// More weights in the multi-row GEMV's launch.
    pub(super) fused: Option<&'a Fused<'a>>,
    /// Ops folded into the multi-row GEMV's launch.
    pub(super) fold: Fold<'a>,
    /// Dispatches recorded so far.
    pub(super) dispatches: &'a Cell<u32>,
}

/// `linear_int_common.wgsl`'s `Params` and `linear_float_common.wgsl`'s
/// `Params` (the GEMVs' and GEMMs' immediates), field for field but the
/// last, which is `one_bits` in the one and `eps_bits` in the other.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct GemmParams {
    /// Rows of the activations.
    pub m: u32,
    /// Weight rows in this dispatch (one binding's chunk of N).
    pub n: u32,
    pub k: u32,
    /// Output column (and scale/bias index) of the chunk's first row.
    pub n_base: u32,
    /// Row stride of the output: the layer's full N.
    pub out_stride: u32,
    /// Rows of the second and third weight of a fused multi-row GEMV.
    pub n1: u32,
    pub n2: u32,
    /// The folded norm's eps (float kernels) or 1.0 (integer kernels: the
    /// runtime 1 of the bias and residual adds), as f32 bits.
    pub last_bits: u32,
}
const _: () = assert!(size_of::<GemmParams>() == 32);

/// `linear_act_codes.wgsl`'s `QuantParams` (the activation quantization,
/// the rotate/quantize and add/norm/quantize kernels, the spread codes),
/// field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct QuantParams {
    pub rows: u32,
    pub k: u32,
    /// u32 words per output row: `ceil(k / 4)`.
    pub kw: u32,
    /// The RMS norm's eps as f32 bits (add/norm/quantize).
    pub eps_bits: u32,
    pub _pad: [u32; 4],
}
const _: () = assert!(size_of::<QuantParams>() == 32);

/// `linear_rotate.wgsl`'s `Params`, field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct RotateParams {
    pub rows: u32,
    pub k: u32,
    pub _pad: [u32; 6],
}
const _: () = assert!(size_of::<RotateParams>() == 32);

/// `linear_rotate_max.wgsl`'s `Params`, field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct RotateMaxParams {
    pub rows: u32,
    pub k: u32,
    /// Workgroups per row: `ceil(k / CHUNK)`.
    pub chunks: u32,
    /// The folded RMS norm's eps as f32 bits.
    pub eps_bits: u32,
    pub _pad: [u32; 4],
}
const _: () = assert!(size_of::<RotateMaxParams>() == 32);

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// `(x, y)` workgroups covering `count` rows (or row groups) with at most
/// 65535 per dimension: the linear kernels index them as
/// `wid.x + 65535 · wid.y`, a fixed stride (unlike `ops::kernel::grid`,
/// whose kernels read the grid's width).
pub(super) fn rows_grid(count: u64) -> (u32, u32) {
    let x = count.min(MAX_GROUPS_PER_DIM);
    let y = count.div_ceil(MAX_GROUPS_PER_DIM);
    (x as u32, y as u32)
}

pub(super) fn buf(buffer: &wgpu::Buffer, offset: u64, size: u64) -> wgpu::BindingResource<'_> {
    wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer,
        offset,
        size: NonZeroU64::new(size),
    })
}

pub(super) fn region(r: &Region) -> wgpu::BindingResource<'_> {
    buf(&r.buffer, r.offset, r.size.div_ceil(4) * 4)
}

impl Recorder<'_> {
    pub(super) fn unsupported(&self, what: String) -> LinearError {
        LinearError::Unsupported {
            what,
            n: self.weights.n,
            k: self.weights.k,
        }
    }

    /// The weight split into bindings of whole rows, each at most `limit`
    /// bytes and starting at an aligned offset.
    pub(super) fn chunks(&self) -> Result<smallvec::SmallVec<[Chunk<'_>; 2]>, LinearError> {
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
    pub(super) fn dispatch_at(
        &self,
        encoder: &mut Encoder,
        name: &'static str,
        source: &'static str,
        constants: &[(&'static str, f64)],
        bindings: &[(u32, wgpu::BindingResource<'_>)],
        params: impl bytemuck::Pod,
        groups: (u32, u32),
        cost: Cost,
    ) -> Result<(), LinearError> {
        let program = Program {
            source,
            entry: "main",
            constants,
            act: self.act,
        };
        self.run(
            encoder, program, name, bindings, params, groups, cost, launch,
        )
    }

    /// Records one launch of `program` through `via` (`launch` or
    /// `launch_spirv`) and counts it.
    #[allow(clippy::too_many_arguments)]
    fn run<P>(
        &self,
        encoder: &mut Encoder,
        program: P,
        name: &'static str,
        bindings: &[(u32, wgpu::BindingResource<'_>)],
        params: impl bytemuck::Pod,
        groups: (u32, u32),
        cost: Cost,
        via: impl FnOnce(&Gpu, &PipelineCache, &mut Encoder, Launch<'_, P>) -> Result<(), GpuError>,
    ) -> Result<(), LinearError> {
        via(
            self.gpu,
            self.cache,
            encoder,
            Launch {
                program,
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
    pub(super) fn dispatch<'b>(
        &self,
        encoder: &mut Encoder,
        name: &'static str,
        source: &'static str,
        constants: &[(&'static str, f64)],
        bindings: impl IntoIterator<Item = wgpu::BindingResource<'b>>,
        params: impl bytemuck::Pod,
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
    pub(super) fn chunk_cost(&self, c: &Chunk<'_>, x_bytes: u64) -> Cost {
        let (m, k) = (self.m, self.weights.k);
        Cost::new(
            c.size + x_bytes,
            m * c.rows * self.act.size(),
            2 * m * c.rows * k,
        )
    }

    /// The immediates of a one-row GEMV or GEMM launch over chunk `c`
    /// (`integer`: the integer kernels' runtime 1.0 in `last_bits`).
    pub(super) fn gemm_params(&self, c: &Chunk<'_>, integer: bool) -> GemmParams {
        GemmParams {
            m: self.m as u32,
            n: c.rows as u32,
            k: self.weights.k as u32,
            n_base: c.first_row as u32,
            out_stride: self.weights.n as u32,
            n1: 0,
            n2: 0,
            last_bits: if integer { 1f32.to_bits() } else { 0 },
        }
    }

    /// The immediates of a SPIR-V GEMM launch over chunk `c` with `flags`
    /// ([`Cm2Params::flags`]) and K split as `plan` says.
    pub(super) fn cm2_params(&self, c: &Chunk<'_>, flags: u32, plan: SplitPlan) -> Cm2Params {
        Cm2Params {
            m: self.m as u32,
            n: c.rows as u32,
            k: self.weights.k as u32,
            n_base: c.first_row as u32,
            out_stride: self.weights.n as u32,
            flags,
            k_span: plan.span as u32,
            n2: plan.whole as u32,
        }
    }

    /// The SPIR-V GEMM this layer takes: never at GEMV sizes, when the tiled
    /// GEMM or no SPIR-V is asked for, or where the device has not enabled
    /// `VK_NV_cooperative_matrix2` with every feature; else the first kernel
    /// of `weights` (none: the layer has no SPIR-V kernel) that fits the
    /// device (the WGSL kernels where none does). Formats nothing: every
    /// prefill linear asks ([`cm2::cm2_gemm`] and [`cm2::cm2_int_gemm`] say
    /// why not). Weights read as stored, and bf16 `converted` to f16, may
    /// take the kernel for small grids.
    pub(super) fn cm2_chosen(
        &self,
        weights: Option<dynvram_shaders::spirv::Cm2Weights>,
        converted: bool,
    ) -> Option<Cm2Kernel> {
        if self.m <= GEMV_MAX_M || self.gemv.is_some() || self.gemm == GemmKernel::Tiled {
            return None;
        }
        let weights = weights.filter(|w| self.spirv_gemm.allows(w.integer()))?;
        let grid = (self.m, self.weights.n);
        let small = cm2::small_grids_for(weights, converted);
        let split = (self.cm2_split, self.weights.k);
        let named = (self.cm2_kernel, self.gpu.cm2_large().map(|g| (g, grid)));
        cm2::fitting(self.gpu.cm2()?, weights, named, (Some(grid), small), split)
    }

    /// The split-K variant of `kernel` and its [`SplitPlan`] for a launch
    /// over `rows` weight rows, where [`Self::cm2_split`]
    /// splits there and the kernel has one (a kernel named by
    /// `RecordOptions::cm2_kernel` splits only where a count is asked for).
    pub(super) fn cm2_split_of(
        &self,
        kernel: Cm2Kernel,
        rows: u64,
    ) -> Option<(Cm2Kernel, SplitPlan)> {
        // A kernel named runs as named unless a split is asked for too.
        if self.cm2_kernel.is_some() && !self.cm2_split.counted() {
            return None;
        }
        let shape = (self.m, rows);
        cm2::split_of(
            self.gpu.cm2()?,
            self.cm2_split,
            kernel.gemm,
            shape,
            self.weights.k,
        )
    }

    /// The scratch for the partial sums of this layer's split GEMMs
    /// ([`Self::cm2_split_of`]) where any chunk splits: the most a chunk
    /// writes, and unless a count is asked for one wave of `kernel`'s tiles
    /// (what a narrower converted piece, split more ways, writes at most).
    /// None where nothing splits, or where the pass's room beyond its plan
    /// does not hold it beside the layer converted whole (no plan counts
    /// it: under a tight budget the launches run unsplit), `weight_bytes`
    /// a weight of the layer as the kernel reads it.
    pub(super) fn split_partials(
        &self,
        kernel: Cm2Kernel,
        weight_bytes: u64,
        scratch: &mut LinearScratch,
    ) -> Result<Option<Arc<wgpu::Buffer>>, LinearError> {
        let mut bytes = 0;
        for c in self.chunks()? {
            if let Some((k, plan)) = self.cm2_split_of(kernel, c.rows) {
                let rows = plan.split_rows(self.m, k.gemm.tile_m);
                bytes = bytes.max(cm2::split_partial_bytes(plan.splits, (rows, c.rows)));
            }
        }
        if bytes == 0 {
            return Ok(None);
        }
        if !self.cm2_split.counted()
            && let Some(caps) = self.gpu.cm2()
        {
            let g = kernel.gemm;
            let wave = cm2::split_partial_bytes(
                u64::from(caps.sm_count),
                (u64::from(g.tile_m), u64::from(g.tile_n)),
            );
            bytes = bytes.max(wave);
        }
        let layer = self.weights.n * self.weights.k * weight_bytes;
        if !scratch.room_for(bytes.saturating_add(layer)) {
            return Ok(None);
        }
        match scratch.split_partials(self.gpu, bytes) {
            Ok(b) => Ok(Some(b)),
            Err(e @ LinearError::Scratch { .. }) => {
                tracing::debug!(%e, "split K: no room for the partial sums, unsplit");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Records a SPIR-V GEMM `kernel` over weight chunk `c` with its
    /// linears' `bindings` (the chunk's weights first) and `flags`, K split
    /// as `plan` says: unsplit, or a split kernel's
    /// ([`Self::cm2_split_of`]) `plan.whole` row tiles of workgroups, then
    /// `plan.splits` for each further row tile.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn launch_cm2(
        &self,
        encoder: &mut Encoder,
        kernel: Cm2Kernel,
        c: &Chunk<'_>,
        bindings: &[(u32, wgpu::BindingResource<'_>)],
        flags: u32,
        cost: Cost,
        plan: SplitPlan,
    ) -> Result<(), LinearError> {
        let g = kernel.gemm;
        let params = self.cm2_params(c, flags, plan);
        let (x, y) = self.chunk_groups(c, (u64::from(g.tile_m), u64::from(g.tile_n)));
        let whole = plan.whole as u32;
        let mut groups = (x, whole + (y - whole) * plan.splits as u32);
        // Persistent workgroups: one a multiprocessor (the kernel counts
        // the tiles itself), or one a tile where the device does not say.
        let sms = self.gpu.cm2().map_or(0, |caps| caps.sm_count);
        if g.persistent && sms > 0 {
            groups = ((x * y).min(sms).max(1), 1);
        }
        self.run_spirv(encoder, kernel, bindings, params, groups, cost)
    }

    /// Records the SPIR-V GEMM `kernel` over chunk `c` with `bindings`,
    /// `flags` and `cost` — its split variant where [`Self::cm2_split_of`]
    /// splits it and the partial sums fit `part` (bound at `part_at`): the
    /// whole tiles with the unsplit epilogue, the split ones' partial sums
    /// in `part`. Then the split's plan, the rows that split and their
    /// partial sums' binding, for the launch that adds them; `None` unsplit.
    pub(super) fn launch_cm2_split<'p>(
        &self,
        encoder: &mut Encoder,
        (kernel, flags, cost): (Cm2Kernel, u32, Cost),
        c: &Chunk<'_>,
        mut bindings: Bindings<'p>,
        (part_at, part): (u32, Option<&'p wgpu::Buffer>),
    ) -> Result<Option<(SplitPlan, u64, wgpu::BindingResource<'p>)>, LinearError> {
        let split = part.and_then(|p| {
            let (split, plan) = self.cm2_split_of(kernel, c.rows)?;
            let rows = plan.split_rows(self.m, split.gemm.tile_m);
            let bytes = cm2::split_partial_bytes(plan.splits, (rows, c.rows));
            (p.size() >= bytes).then(|| (split, plan, rows, buf(p, 0, bytes)))
        });
        let Some((split, plan, rows, partials)) = split else {
            let whole = SplitPlan::unsplit(self.weights.k);
            self.launch_cm2(encoder, kernel, c, &bindings, flags, cost, whole)?;
            return Ok(None);
        };
        bindings.push((part_at, partials.clone()));
        self.launch_cm2(encoder, split, c, &bindings, flags, cost, plan)?;
        Ok(Some((plan, rows, partials)))
    }

    /// Records one launch of the SPIR-V GEMM `kernel` (its name the
    /// profile's label) and counts it.
    fn run_spirv(
        &self,
        encoder: &mut Encoder,
        kernel: Cm2Kernel,
        bindings: &[(u32, wgpu::BindingResource<'_>)],
        params: impl bytemuck::Pod,
        groups: (u32, u32),
        cost: Cost,
    ) -> Result<(), LinearError> {
        let name = kernel.gemm.name;
        self.run(
            encoder,
            kernel.program,
            name,
            bindings,
            params,
            groups,
            cost,
            launch_spirv,
        )
    }

    /// Records the stacked SPIR-V GEMM `kernel` over `layers` (weights of
    /// one part each, rows of each: [`Fused`]'s checks) with `bindings`
    /// (the stack's, [`cm2::cm2_stack_gemm`]), `flags` as
    /// [`Self::launch_cm2`]'s.
    pub(super) fn launch_cm2_stack(
        &self,
        encoder: &mut Encoder,
        kernel: Cm2Kernel,
        rows: [u64; 3],
        bindings: &[(u32, wgpu::BindingResource<'_>)],
        flags: u32,
        cost: Cost,
    ) -> Result<(), LinearError> {
        let g = kernel.gemm;
        let params = Cm2Params {
            m: self.m as u32,
            n: rows[0] as u32,
            k: self.weights.k as u32,
            n_base: 0,
            out_stride: rows[0] as u32,
            flags,
            k_span: rows[1] as u32,
            n2: rows[2] as u32,
        };
        let (x, y) = cm2::stack_grid(g, rows, self.m);
        self.run_spirv(
            encoder,
            kernel,
            bindings,
            params,
            (x as u32, y as u32),
            cost,
        )
    }

    /// The workgroups over chunk `c` of the one-row GEMV (M up to
    /// [`GEMV_MAX_M`]: one per weight row) or of a GEMM of output tile
    /// `tile` (rows of M, weight rows).
    pub(super) fn chunk_groups(&self, c: &Chunk<'_>, tile: (u64, u64)) -> (u32, u32) {
        if self.m <= GEMV_MAX_M {
            rows_grid(c.rows)
        } else {
            (
                c.rows.div_ceil(tile.1) as u32,
                self.m.div_ceil(tile.0) as u32,
            )
        }
    }

    /// Whether this layer's GEMM runs on cooperative matrices: never at GEMV
    /// sizes or when the tiled GEMM is asked for; else where `why_not` finds
    /// nothing against them (an error when they were asked for).
    pub(super) fn coop_chosen(
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
    pub(super) fn double_shape(
        &self,
        float: Option<Format>,
        int4_weights: bool,
    ) -> Option<CoopShape> {
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
    pub(super) fn coop_kernel(
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
}

/// The cooperative GEMM a layer runs: the double-buffered kernel with its
/// shape where chosen, else the single-stage one with `single`.
pub(super) fn coop_ran(
    single: CoopShape,
    double: Option<CoopShape>,
) -> (CoopShape, CoopGemmKernel) {
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
