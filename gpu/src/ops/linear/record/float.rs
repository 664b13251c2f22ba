//! The float kernels' sequence for one layer: the GEMV, the multi-row
//! GEMV, the tiled GEMM, the cooperative GEMM or the SPIR-V
//! cooperative-matrix-2 GEMM, weights decoded in-shader.

use dynvram_shaders::linear as shaders;

use super::cm2::{self, Cm2Kernel};
use super::coop::float_coop_unusable;
use super::gemv;
use super::gemv_shape::GEMV_MAX_M;
use super::recorder::{GEMM_TILE, Recorder, buf, coop_ran, region};
use super::spec::FloatWeights;
use crate::ops::encoder::Encoder;
use crate::ops::launch::{Bindings, Constants};
use crate::ops::linear::{LinearError, LinearScratch};
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
        if let Some(kernel) = self.float_cm2_chosen()? {
            scratch.set_spirv(kernel.gemm.name);
            return self.float_cm2(encoder, kernel, x, out, &dummy);
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
            let params = self.gemm_params(&c);
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
    /// error where it cannot run).
    fn float_cm2_chosen(&self) -> Result<Option<Cm2Kernel>, LinearError> {
        let (format, act) = (self.weights.format, self.act);
        if self.spirv_check && self.m > GEMV_MAX_M && self.gemv.is_none() {
            let passthrough =
                (self.gpu.device.features()).contains(wgpu::Features::PASSTHROUGH_SHADERS);
            return cm2::linear_check(passthrough, format, act)
                .map(Some)
                .map_err(|why| self.unsupported(format!("the SPIR-V check kernel: {why}")));
        }
        Ok(self.cm2_chosen(cm2::float_weights(format, act)))
    }

    /// Records the float layer's SPIR-V GEMM `kernel`, one launch per
    /// weight chunk, with the bindings of the WGSL float GEMM (flag bit 0:
    /// add the bias).
    fn float_cm2(
        &self,
        encoder: &mut Encoder,
        kernel: Cm2Kernel,
        x: &GpuTensor,
        out: &GpuTensor,
        dummy: &wgpu::Buffer,
    ) -> Result<(), LinearError> {
        for c in self.chunks()? {
            let scale = self
                .weights
                .scale
                .as_ref()
                .map_or(buf(dummy, 0, 16), region);
            let bias = self.weights.bias.as_ref().map_or(buf(dummy, 0, 16), region);
            let bindings: Bindings<'_> = (0..)
                .zip([
                    buf(c.buffer, c.offset, c.size),
                    scale,
                    bias,
                    x.binding(),
                    out.binding(),
                ])
                .collect();
            let flags = u32::from(self.weights.bias.is_some());
            let cost = self.chunk_cost(&c, x.bytes());
            self.launch_cm2(encoder, kernel, &c, &bindings, flags, cost)?;
        }
        Ok(())
    }
}
