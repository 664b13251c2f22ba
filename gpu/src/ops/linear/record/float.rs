//! The float kernels' sequence for one layer: the GEMV, the multi-row
//! GEMV, the tiled GEMM, the cooperative GEMM or the SPIR-V
//! cooperative-matrix-2 GEMM, weights decoded in-shader.

use dynvram_quant::Format;
use dynvram_shaders::linear as shaders;

use super::cm2::{self, Cm2Kernel};
use super::convert::Widen;
use super::coop::float_coop_unusable;
use super::fused::Fused;
use super::gemv;
use super::gemv_shape::GEMV_MAX_M;
use super::recorder::{Chunk, GEMM_TILE, Recorder, buf, coop_ran, region};
use super::spec::FloatWeights;
use crate::device::Cm2Stack;
use crate::ops::encoder::Encoder;
use crate::ops::launch::{Bindings, Constants, Cost};
use crate::ops::linear::{LinearError, LinearScratch, LinearWeights};
use crate::tensor::GpuTensor;

impl Recorder<'_> {
    /// Records the layer with the float kernels of `wfmt` weights.
    pub(super) fn float(
        &self,
        encoder: &mut Encoder,
        wfmt: FloatWeights,
        x: &GpuTensor,
        out: &GpuTensor,
        scratch: &mut LinearScratch,
    ) -> Result<(), LinearError> {
        let m = self.m;
        let dummy = scratch.dummy(self.gpu)?;
        let has_bias = self.weights.bias.is_some();
        if wfmt.is_fp8() && self.weights.scale.is_none() {
            return Err(self.unsupported("fp8 weights need a weight_scale".into()));
        }
        let gemv = m <= GEMV_MAX_M;
        if let Some(fused) = self.fused.filter(|_| !gemv && self.gemv.is_none()) {
            return self.float_cm2_stack(encoder, fused, x, out, scratch);
        }
        if let Some((kernel, via_f16)) = self.float_cm2_chosen()? {
            scratch.set_spirv(kernel.gemm.name);
            scratch.set_gelu(self.gelu);
            let part = self.split_partials(kernel, 2, scratch)?;
            let ops = Cm2Operands {
                x,
                out,
                dummy: &dummy,
                part: part.as_deref(),
            };
            if !via_f16 {
                return self.float_cm2(encoder, kernel, ops);
            }
            match self.float_cm2_via_f16(encoder, kernel, ops, scratch) {
                // No room for the converted piece (a plan that did not
                // count it, `converted_piece_bytes`): the bf16 kernel, which
                // needs none, where there is one.
                Err(e @ LinearError::Scratch { .. }) if !self.spirv_check => {
                    let staged = self.cm2_chosen(cm2::float_weights(Format::Bf16, self.act), false);
                    let Some(staged) = staged else {
                        return Err(e);
                    };
                    tracing::debug!(%e, "bf16 via f16: no scratch, the bf16 kernel");
                    scratch.set_spirv(staged.gemm.name);
                    return self.float_cm2(encoder, staged, ops);
                }
                other => return other,
            }
        }
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
            let groups = self.chunk_groups(&c, tile);
            let params = self.gemm_params(&c, false);
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

    /// The float layer's SPIR-V GEMM ([`Self::cm2_chosen`]), or with
    /// `RecordOptions::spirv_check` the check kernel past the GEMVs (an
    /// error where it cannot run); `true` with it where bf16 weights go to
    /// an f16 kernel converted a piece at a time (`Cm2Bf16::ViaF16`, and
    /// always on the check kernel).
    fn float_cm2_chosen(&self) -> Result<Option<(Cm2Kernel, bool)>, LinearError> {
        let (format, act) = (self.weights.format, self.act);
        let bf16 = format == Format::Bf16;
        if self.spirv_check && self.m > GEMV_MAX_M && self.gemv.is_none() {
            let passthrough =
                (self.gpu.device.features()).contains(wgpu::Features::PASSTHROUGH_SHADERS);
            let read_as = if bf16 { Format::F16 } else { format };
            return cm2::linear_check(passthrough, read_as, act)
                .map(|k| Some((k, bf16)))
                .map_err(|why| self.unsupported(format!("the SPIR-V check kernel: {why}")));
        }
        if bf16 && self.cm2_bf16.via_f16() {
            let f16 = self.cm2_chosen(cm2::float_weights(Format::F16, act), true);
            if let Some(kernel) = f16 {
                return Ok(Some((kernel, true)));
            }
        }
        Ok(self
            .cm2_chosen(cm2::float_weights(format, act), false)
            .map(|k| (k, false)))
    }

    /// Records the float layer's SPIR-V GEMM `kernel`, one launch per
    /// weight chunk, with the bindings of the WGSL float GEMM (flag bit 0:
    /// add the bias).
    fn float_cm2(
        &self,
        encoder: &mut Encoder,
        kernel: Cm2Kernel,
        ops: Cm2Operands<'_>,
    ) -> Result<(), LinearError> {
        for c in self.chunks()? {
            self.float_cm2_chunk(encoder, kernel, &c, ops)?;
        }
        Ok(())
    }

    /// Records the SPIR-V GEMM `kernel` over the f16 or bf16 weights of
    /// chunk `c` (a chunk of the layer's, or a converted piece): split
    /// where [`Self::cm2_split_of`] splits it and the partial sums fit
    /// `ops.part`, then [`shaders::SPLIT_SUM`] over the partial sums (of the
    /// rows past the tiles taken whole).
    fn float_cm2_chunk(
        &self,
        encoder: &mut Encoder,
        kernel: Cm2Kernel,
        c: &Chunk<'_>,
        ops: Cm2Operands<'_>,
    ) -> Result<(), LinearError> {
        let Cm2Operands {
            x,
            out,
            dummy,
            part,
        } = ops;
        let scale = self
            .weights
            .scale
            .as_ref()
            .map_or(buf(dummy, 0, 16), region);
        let bias = || self.weights.bias.as_ref().map_or(buf(dummy, 0, 16), region);
        // Bit 0 the bias, bit 3 GELU (the epilogue's, or the split sums').
        let flags = u32::from(self.weights.bias.is_some()) | if self.gelu { 8 } else { 0 };
        let cost = self.chunk_cost(c, x.bytes());
        let bindings: Bindings<'_> = (0..)
            .zip([
                buf(c.buffer, c.offset, c.size),
                scale,
                bias(),
                x.binding(),
                out.binding(),
            ])
            .collect();
        // The split tiles' partial sums (binding 5), summed with the bias and
        // GELU after.
        let launch = (kernel, flags, cost);
        let Some((plan, rows, partials)) =
            self.launch_cm2_split(encoder, launch, c, bindings, (5, part))?
        else {
            return Ok(());
        };
        let total = rows * c.rows;
        let bytes = cm2::split_partial_bytes(plan.splits, (rows, c.rows));
        let params = SplitSumParams {
            m: rows as u32,
            n: c.rows as u32,
            n_base: c.first_row as u32,
            out_stride: self.weights.n as u32,
            splits: plan.splits as u32,
            flags,
            row0: (self.m - rows) as u32,
            _pad: 0,
        };
        // Four columns an invocation where they share a row.
        let quads = c.rows.is_multiple_of(4);
        let steps = if quads { total / 4 } else { total };
        self.dispatch(
            encoder,
            "linear_split_sum",
            shaders::SPLIT_SUM,
            &[("QUADS", f64::from(u8::from(quads)))],
            [partials, bias(), out.binding()],
            params,
            (steps.div_ceil(256).min(SPLIT_SUM_GROUPS) as u32, 1),
            Cost::new(bytes, total * self.act.size(), 0),
        )
    }

    /// Records a bf16 layer on the f16 SPIR-V GEMM `kernel`: the weights
    /// converted to f16 a piece at a time (`Recorder::each_converted`),
    /// each piece then multiplied as f16 weights.
    fn float_cm2_via_f16(
        &self,
        encoder: &mut Encoder,
        kernel: Cm2Kernel,
        ops: Cm2Operands<'_>,
        scratch: &mut LinearScratch,
    ) -> Result<(), LinearError> {
        let tile_n = u64::from(kernel.gemm.tile_n);
        self.each_converted(
            encoder,
            Widen::Bf16ToF16,
            tile_n,
            scratch,
            |encoder, piece| self.float_cm2_chunk(encoder, kernel, piece, ops),
        )
    }

    /// Records this layer and `fused`'s (f16 weights of one part each, no
    /// SwiGLU: `fused::unfusable` passed them) as one launch of the stacked
    /// SPIR-V GEMM, each into its own output. A third weight's bindings
    /// where there are two: the small buffer (never read: its rows are 0)
    /// and the first output (never written).
    fn float_cm2_stack(
        &self,
        encoder: &mut Encoder,
        fused: &Fused<'_>,
        x: &GpuTensor,
        out: &GpuTensor,
        scratch: &mut LinearScratch,
    ) -> Result<(), LinearError> {
        let kernel = cm2::cm2_stack_gemm(self.gpu.cm2(), self.cm2_stack == Cm2Stack::Grouped)
            .ok_or_else(|| self.unsupported("no stacked SPIR-V GEMM on this device".into()))?;
        let layers: Vec<(&LinearWeights, &GpuTensor)> = std::iter::once((self.weights, out))
            .chain(fused.more.iter().copied())
            .collect();
        if layers.len() > 3 || fused.glu {
            return Err(self.unsupported(format!(
                "{} layers{} in one stacked GEMM (two or three, each into its own output)",
                layers.len(),
                if fused.glu { " with SwiGLU" } else { "" }
            )));
        }
        let dummy = scratch.dummy(self.gpu)?;
        scratch.set_spirv(kernel.gemm.name);
        let mut bindings: Bindings<'_> =
            smallvec::smallvec![(1, buf(&dummy, 0, 16)), (3, x.binding())];
        let mut rows = [0; 3];
        let mut weight_bytes = 0;
        for (i, slot) in [(0, [0, 2, 4]), (1, [5, 6, 7]), (2, [8, 9, 10])] {
            let [w_at, bias_at, out_at] = slot;
            let Some(&(w, o)) = layers.get(i) else {
                bindings.extend([
                    (w_at, buf(&dummy, 0, 16)),
                    (bias_at, buf(&dummy, 0, 16)),
                    (out_at, out.binding()),
                ]);
                continue;
            };
            let [part] = &w.parts[..] else {
                return Err(self.unsupported("a stacked weight in several parts".into()));
            };
            rows[i] = w.n;
            weight_bytes += part.region.size;
            bindings.extend([
                (w_at, region(&part.region)),
                (bias_at, w.bias.as_ref().map_or(buf(&dummy, 0, 16), region)),
                (out_at, o.binding()),
            ]);
        }
        bindings.sort_by_key(|(at, _)| *at);
        let n: u64 = rows.iter().sum();
        let (m, k) = (self.m, self.weights.k);
        let cost = Cost::new(
            weight_bytes + x.bytes(),
            m * n * self.act.size(),
            2 * m * n * k,
        );
        let flags = u32::from(self.weights.bias.is_some());
        self.launch_cm2_stack(encoder, kernel, rows, &bindings, flags, cost)
    }
}

/// What a float layer's SPIR-V GEMM reads and writes: the input, the
/// output, a small buffer for bindings the layer lacks (scale, bias), and
/// the split GEMMs' partial sums where there is room for them.
#[derive(Clone, Copy)]
struct Cm2Operands<'a> {
    x: &'a GpuTensor,
    out: &'a GpuTensor,
    dummy: &'a wgpu::Buffer,
    part: Option<&'a wgpu::Buffer>,
}

/// `linear_split_sum.wgsl`'s `Params`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct SplitSumParams {
    m: u32,
    n: u32,
    n_base: u32,
    out_stride: u32,
    splits: u32,
    flags: u32,
    /// The output row of the partial sums' first.
    row0: u32,
    _pad: u32,
}

/// Workgroups of one partial-sum launch at most (it loops over the rest).
const SPLIT_SUM_GROUPS: u64 = 4096;
