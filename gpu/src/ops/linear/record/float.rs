//! The float kernels' sequence for one layer: the GEMV, the multi-row
//! GEMV, the tiled GEMM, the cooperative GEMM or the SPIR-V
//! cooperative-matrix-2 GEMM, weights decoded in-shader.

use dynvram_quant::Format;
use dynvram_shaders::linear as shaders;

use super::cm2::{self, Cm2Kernel};
use super::coop::float_coop_unusable;
use super::gemv;
use super::gemv_shape::GEMV_MAX_M;
use super::recorder::{Chunk, GEMM_TILE, Recorder, buf, coop_ran, region};
use super::spec::FloatWeights;
use crate::device::Cm2Bf16;
use crate::ops::encoder::Encoder;
use crate::ops::launch::{Bindings, Constants, Cost};
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
        if let Some((kernel, via_f16)) = self.float_cm2_chosen()? {
            scratch.set_spirv(kernel.gemm.name);
            if !via_f16 {
                return self.float_cm2(encoder, kernel, x, out, &dummy);
            }
            match self.float_cm2_via_f16(encoder, kernel, x, out, scratch, &dummy) {
                // No room for the converted piece (a plan that did not
                // count it, `bf16_piece_bytes`): the bf16 kernel, which
                // needs none, where there is one.
                Err(e @ LinearError::Scratch { .. }) if !self.spirv_check => {
                    let staged = self.cm2_chosen(cm2::float_weights(Format::Bf16, self.act));
                    let Some(staged) = staged else {
                        return Err(e);
                    };
                    tracing::debug!(%e, "bf16 via f16: no scratch, the bf16 kernel");
                    scratch.set_spirv(staged.gemm.name);
                    return self.float_cm2(encoder, staged, x, out, &dummy);
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
        if bf16 && self.cm2_bf16 == Cm2Bf16::ViaF16 {
            let f16 = self.cm2_chosen(cm2::float_weights(Format::F16, act));
            if let Some(kernel) = f16 {
                return Ok(Some((kernel, true)));
            }
        }
        Ok(self
            .cm2_chosen(cm2::float_weights(format, act))
            .map(|k| (k, false)))
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
            self.float_cm2_chunk(encoder, kernel, &c, x, out, dummy)?;
        }
        Ok(())
    }

    /// Records the SPIR-V GEMM `kernel` over the f16 or bf16 weights of
    /// chunk `c` (a chunk of the layer's, or a converted piece).
    fn float_cm2_chunk(
        &self,
        encoder: &mut Encoder,
        kernel: Cm2Kernel,
        c: &Chunk<'_>,
        x: &GpuTensor,
        out: &GpuTensor,
        dummy: &wgpu::Buffer,
    ) -> Result<(), LinearError> {
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
        let cost = self.chunk_cost(c, x.bytes());
        self.launch_cm2(encoder, kernel, c, &bindings, flags, cost)
    }

    /// Records a bf16 layer on the f16 SPIR-V GEMM `kernel`: each weight
    /// chunk in pieces of whole rows ([`bf16_pieces`]), each converted into
    /// the scratch (`bf16_to_f16.wgsl`) and then multiplied as f16 weights.
    fn float_cm2_via_f16(
        &self,
        encoder: &mut Encoder,
        kernel: Cm2Kernel,
        x: &GpuTensor,
        out: &GpuTensor,
        scratch: &mut LinearScratch,
        dummy: &wgpu::Buffer,
    ) -> Result<(), LinearError> {
        let k = self.weights.k;
        let rows = bf16_piece_rows(
            self.bf16_piece_bytes,
            k,
            self.weights.n,
            u64::from(kernel.gemm.tile_n),
        );
        // Word counts and offsets within a chunk (the layer's indices fit
        // u32: `record` checked them).
        let to_u32 = |v: u64| {
            u32::try_from(v).map_err(|_| self.unsupported(format!("{v} bf16 words exceed u32")))
        };
        let converted = scratch.f16_weights(self.gpu, rows * k * 2)?;
        for c in self.chunks()? {
            for (first, count) in bf16_pieces(c.rows, rows) {
                // Words of bf16 pairs: rows start on a word (K is even).
                let words = count * k / 2;
                let params = ConvertParams {
                    words: to_u32(words)?,
                    src_word0: to_u32(first * k / 2)?,
                    _pad: [0; 2],
                };
                let groups = words.div_ceil(256).min(CONVERT_GROUPS) as u32;
                self.dispatch(
                    encoder,
                    "bf16_to_f16",
                    shaders::BF16_TO_F16,
                    &[],
                    [
                        buf(c.buffer, c.offset, c.size),
                        buf(&converted, 0, words * 4),
                    ],
                    params,
                    (groups, 1),
                    Cost::new(words * 4, words * 4, 0),
                )?;
                let piece = Chunk {
                    buffer: &converted,
                    offset: 0,
                    size: words * 4,
                    rows: count,
                    first_row: c.first_row + first,
                };
                self.float_cm2_chunk(encoder, kernel, &piece, x, out, dummy)?;
            }
        }
        Ok(())
    }
}

/// `bf16_to_f16.wgsl`'s `Params`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ConvertParams {
    words: u32,
    src_word0: u32,
    _pad: [u32; 2],
}

/// Workgroups of one conversion at most (it loops over the rest).
const CONVERT_GROUPS: u64 = 4096;

/// Bytes of scratch a float layer of `n` × `k` bf16 weights can hold when
/// it takes the SPIR-V f16 GEMM converted a piece at a time
/// (`Cm2Bf16::ViaF16`) for inputs of `m` rows: one piece of the default
/// size for `m` (`bf16_piece_limit`) at either tile width, as the scratch
/// buffer grows to hold it. A planner counts the largest over a model's
/// bf16 layers that see more than [`GEMV_MAX_M`] rows.
pub fn bf16_piece_bytes(n: u64, k: u64, m: u64) -> u64 {
    if n == 0 || k == 0 {
        return 0;
    }
    let limit = crate::device::bf16_piece_limit(m);
    let piece = [128, 256]
        .into_iter()
        .map(|tile| bf16_piece_rows(limit, k, n, tile) * k * 2)
        .max()
        .unwrap_or(0);
    super::super::scratch::scratch_capacity_bound(piece)
}

/// Weight rows of one bf16 → f16 piece of at most `bytes` (as f16) for a
/// layer of `n` rows of `k` values: all of them where they fit, else as
/// many as fit in whole tiles of `tile_n` rows (at least one tile).
fn bf16_piece_rows(bytes: u64, k: u64, n: u64, tile_n: u64) -> u64 {
    let fit = bytes / (2 * k).max(1);
    if fit >= n {
        return n.max(1);
    }
    (fit / tile_n).max(1) * tile_n
}

/// A chunk of `rows` weight rows as pieces of at most `per` rows, as
/// (first row, rows), of equal size but the last.
fn bf16_pieces(rows: u64, per: u64) -> impl Iterator<Item = (u64, u64)> {
    (0..rows.div_ceil(per)).map(move |i| (i * per, per.min(rows - i * per)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::BF16_PIECE_BYTES;

    #[test]
    fn bf16_pieces_cover_every_row_once() {
        // FLUX.1's widest (21504 x 3072, 132 MB as f16): pieces of whole
        // 256-row tiles under 64 MiB.
        let per = bf16_piece_rows(BF16_PIECE_BYTES, 3072, 21504, 256);
        assert_eq!(per % 256, 0);
        assert!(per * 3072 * 2 <= BF16_PIECE_BYTES, "{per}");
        let pieces: Vec<_> = bf16_pieces(21504, per).collect();
        assert_eq!(pieces.iter().map(|p| p.1).sum::<u64>(), 21504);
        for w in pieces.windows(2) {
            assert_eq!(w[0].0 + w[0].1, w[1].0);
        }
        // A layer that fits is one piece; a row wider than a piece is one
        // tile a piece.
        assert_eq!(bf16_piece_rows(BF16_PIECE_BYTES, 64, 300, 256), 300);
        assert_eq!(bf16_pieces(300, 300).collect::<Vec<_>>(), [(0, 300)]);
        assert_eq!(bf16_piece_rows(BF16_PIECE_BYTES, 1 << 26, 1000, 128), 128);
        assert_eq!(bf16_pieces(0, 128).count(), 0);
    }

    #[test]
    fn the_planned_piece_holds_every_piece_the_recorder_converts() {
        // FLUX.1's widest: the larger of the two tiles' pieces, under 64 MiB.
        let flux = bf16_piece_bytes(21504, 3072, 100);
        for tile in [128, 256] {
            let rows = bf16_piece_rows(BF16_PIECE_BYTES, 3072, 21504, tile);
            assert!(rows * 3072 * 2 <= flux, "{tile}");
        }
        assert!(flux <= BF16_PIECE_BYTES, "{flux}");
        // A small layer: its bytes, and half again where the scratch grows
        // geometrically from a smaller piece.
        assert_eq!(bf16_piece_bytes(300, 64, 100), 300 * 64 * 2 / 256 * 384);
        assert_eq!(bf16_piece_bytes(0, 64, 100), 0);
        // Past the geometric growth, exactly the piece.
        let mid = bf16_piece_bytes(3072, 4096, 100);
        assert_eq!(mid, 3072 * 4096 * 2);
        // Long inputs: half the piece.
        let long = bf16_piece_bytes(21504, 3072, 4608);
        assert!(
            long <= BF16_PIECE_BYTES / 2 && long * 2 > flux * 9 / 10,
            "{long} {flux}"
        );
    }
}
