//! The integer kernels' sequence for one layer: rotation and activation
//! quantization (or codes left by the linear before, or the spread
//! quantization), then the GEMV, the tiled GEMM, the cooperative GEMM or
//! the SPIR-V cooperative-matrix-2 GEMM.

use dynvram_shaders::linear as shaders;

use super::cm2::{self, Cm2Kernel};
use super::convert::Widen;
use super::coop::coop_gemm_unusable;
use super::gemv;
use super::gemv_shape::GEMV_MAX_M;
use super::recorder::{
    Chunk, GEMM_TILE, GemmParams, MAX_GROUP, MAX_GROUPS_PER_DIM, QuantParams, Recorder,
    RotateParams, buf, coop_ran, region, rows_grid,
};
use super::spec::{ActCodes, CodesKey, IntEpilogue, IntPath};
use crate::device::Cm2Int4;
use crate::ops::encoder::Encoder;
use crate::ops::launch::{Bindings, Constants, Cost};
use crate::ops::linear::{LinearError, LinearScratch};
use crate::tensor::{ActDtype, GpuTensor};

/// Rows the integer kernels rotate and quantize at once where a plan
/// counts their scratch: a longer input goes through the layer in chunks
/// of this many rows, so the scratch (the rotated f32 input and the codes)
/// stays bounded — 75 MiB at FLUX.1's widest int4 layer (K = 15,360) where
/// its 4,608 rows would need 338 MiB. Where the pass's room beyond its plan
/// holds the whole input's (twice, beside the layer widened to int8), it
/// goes through at once: one grid of the layer's rows, not chunks of fewer
/// waves that each read the weights again.
pub const INTEGER_CHUNK_ROWS: u64 = 1024;

/// Room [`Recorder::integer_rows_at_once`] leaves for the split GEMMs'
/// partial sums: a wave of 132 tiles of 128 × 256 in i32 is 17 MiB.
const SPLIT_SUMS_ALLOWANCE: u64 = 64 << 20;

/// Bytes of [`LinearScratch`] the integer kernels hold for an input of
/// `rows` × `k`: the rotated f32 input, the codes (a byte an element, in
/// words) and the per-row scales of one chunk of rows.
pub fn integer_scratch_bytes(rows: u64, k: u64) -> u64 {
    rows_scratch_bytes(rows.min(INTEGER_CHUNK_ROWS), k)
}

/// [`integer_scratch_bytes`] of `rows` taken at once.
fn rows_scratch_bytes(rows: u64, k: u64) -> u64 {
    let round = |b: u64| b.max(16).div_ceil(256) * 256;
    round(rows * k * 4) + round(rows * k.div_ceil(4) * 4) + round(rows * 4)
}

/// Values one workgroup of `linear_rotate.wgsl` transforms (`CH`) for rows
/// of `k` in groups of `g` (a power of 4 dividing `k`): the most whole
/// groups, doubling, whose run divides `k` and fits the kernel's 4096
/// values of workgroup memory.
fn rotate_run(k: u64, g: u32) -> u64 {
    let mut ch = u64::from(g);
    while ch * 2 <= 4096 && k.is_multiple_of(ch * 2) {
        ch *= 2;
    }
    ch
}

impl Recorder<'_> {
    /// [`Self::integer`] over row chunks of at most [`INTEGER_CHUNK_ROWS`]
    /// where M is longer, each chunk a view of `x` and `out` (codes left
    /// for reuse then match no chunk of the next layer: each quantizes its
    /// own, a small cost beside a GEMM of these rows); whole where a norm is
    /// folded in or a fused launch is asked for (codes of the whole input
    /// made before), or a chunk would not start on the storage offset
    /// alignment.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn integer_chunked(
        &self,
        encoder: &mut Encoder,
        int: &IntPath,
        fast: bool,
        x: &GpuTensor,
        out: &GpuTensor,
        scratch: &mut LinearScratch,
        raw: bool,
    ) -> Result<(), LinearError> {
        let (m, k, n) = (self.m, self.weights.k, self.weights.n);
        let step = self.integer_rows_at_once(scratch);
        let aligned = (step * k * x.dtype.size()).is_multiple_of(self.align)
            && (step * n * out.dtype.size()).is_multiple_of(self.align);
        if m <= step || self.fold.norm.is_some() || self.fused.is_some() || !aligned {
            return self.integer(encoder, int, fast, x, out, scratch, raw);
        }
        let mut first = 0;
        while first < m {
            let rows = step.min(m - first);
            let chunk = Recorder { m: rows, ..*self };
            chunk.integer(
                encoder,
                int,
                fast,
                &x.row_view(first, rows),
                &out.row_view(first, rows),
                scratch,
                raw,
            )?;
            first += rows;
        }
        Ok(())
    }

    /// Rows [`Self::integer_chunked`] takes at once: all of them where the
    /// pass's room beyond its plan holds twice their scratch beside the
    /// layer widened to int8 and a wave of split sums, and a binding holds
    /// their rotated rows; else [`INTEGER_CHUNK_ROWS`]. Whole, the GEMM's
    /// grid is the layer's: a 1024-row chunk of FLUX.1's `linear2` is 96
    /// tiles on the H100's 132 multiprocessors, its 4,608 rows 432 (4
    /// wave-times against the chunks' 5), and every chunk reads the
    /// weights again. An int4 FLUX.1 step at 1024² went from 0.3525 to
    /// 0.3065 s on the H100 (session 37).
    fn integer_rows_at_once(&self, scratch: &LinearScratch) -> u64 {
        let (m, k, n) = (self.m, self.weights.k, self.weights.n);
        // Decode and short prompts: one chunk either way, nothing to ask.
        if m <= INTEGER_CHUNK_ROWS {
            return INTEGER_CHUNK_ROWS;
        }
        let extra = rows_scratch_bytes(m, k).saturating_sub(integer_scratch_bytes(m, k))
            + n * k
            + SPLIT_SUMS_ALLOWANCE;
        let binding = self.gpu.device.limits().max_storage_buffer_binding_size;
        // Twice: the widened pieces and the split sums take the same room
        // unplanned, each sized by it.
        if m * k * 4 <= binding && scratch.planned_room_for(extra.saturating_mul(2)) {
            m
        } else {
            INTEGER_CHUNK_ROWS
        }
    }

    /// Records the layer with integer kernels of `int` (`fast`: the
    /// subgroup variants; `raw`: the accumulator's bits as the output).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn integer(
        &self,
        encoder: &mut Encoder,
        int: &IntPath,
        fast: bool,
        x: &GpuTensor,
        out: &GpuTensor,
        scratch: &mut LinearScratch,
        raw: bool,
    ) -> Result<(), LinearError> {
        let (gpu, m, k) = (self.gpu, self.m, self.weights.k);
        let (cm2, widen) = self.int_cm2_chosen(int.w4, raw);
        let coop = cm2.is_none()
            && self.coop_chosen(|caps| {
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
        if let Some(k) = cm2 {
            scratch.set_spirv(k.gemm.name);
        }
        // The cooperative GEMMs read codes in natural column order; dot4
        // pairs int4 weights' even and odd columns.
        let natural = coop || cm2.is_some();
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
            perm8: int.w4 && !natural,
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
            .filter(|_| !natural && !reuse)
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
                    let ch = rotate_run(k, g);
                    self.dispatch(
                        encoder,
                        "linear_rotate",
                        shaders::ROTATE,
                        &[("G", f64::from(g)), ("CH", ch as f64)],
                        [x.binding(), buf(&rotated, 0, rot_bytes)],
                        RotateParams {
                            rows: m as u32,
                            k: k as u32,
                            _pad: [0; 6],
                        },
                        ((k / ch) as u32, m as u32),
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
        let quant_constants = int.quant_constants(int.w4 && !natural);
        let quant_params = QuantParams {
            rows: m as u32,
            k: k as u32,
            kw: kw as u32,
            eps_bits: 0,
            _pad: [0; 4],
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
        // Bit 1: acc · (s_x · s_w); bit 2: a weight scale per row.
        let cm2_flags = u32::from(has_bias)
            | u32::from(epi == IntEpilogue::TensorScale) << 1
            | u32::from(int.per_row_scale) << 2;
        // Where K splits (int8 kernels: a byte a weight as they read them),
        // the exact partial sums' scratch.
        let part = match cm2 {
            Some(kernel) => self.split_partials(kernel, 1, scratch)?,
            None => None,
        };
        let bias = || {
            self.weights
                .bias
                .as_ref()
                .map_or(buf(&dummy, 0, 16), region)
        };
        let cm2_launch = |encoder: &mut Encoder, kernel: Cm2Kernel, c: &Chunk<'_>| {
            let bindings: Bindings<'_> = (0..)
                .zip([
                    buf(c.buffer, c.offset, c.size),
                    region(scale),
                    bias(),
                    buf(&codes, 0, m * kw * 4),
                    buf(&scales, 0, m * 4),
                    out.binding(),
                ])
                .collect();
            let cost = self.chunk_cost(c, m * kw * 4 + m * 4);
            // The split tiles' exact sums (binding 6), added before the same
            // epilogue.
            let launch = (kernel, cm2_flags, cost);
            let Some((plan, rows, partials)) =
                self.launch_cm2_split(encoder, launch, c, bindings, (6, part.as_deref()))?
            else {
                return Ok(());
            };
            let total = rows * c.rows;
            let params = GemmParams {
                m: rows as u32,
                n: c.rows as u32,
                k: plan.splits as u32,
                n_base: c.first_row as u32,
                out_stride: self.weights.n as u32,
                n1: (m - rows) as u32,
                n2: 0,
                last_bits: 1f32.to_bits(),
            };
            // The GEMM's accumulator: int4 widened to int8 holds the
            // weights' values (no ·16 to undo).
            let sum_constants = [
                ("W4", 0.0),
                ("EPI", f64::from(epi as u32)),
                ("SW_PER_ROW", f64::from(u8::from(int.per_row_scale))),
                ("HAS_BIAS", f64::from(u8::from(has_bias))),
            ];
            // The integer linears' bindings but the weights (unread): the
            // partial sums in the codes' place.
            let sum_bindings = [
                (1, region(scale)),
                (2, bias()),
                (3, partials),
                (4, buf(&scales, 0, m * 4)),
                (5, out.binding()),
            ];
            self.dispatch_at(
                encoder,
                "linear_int_split_sum",
                shaders::INT_SPLIT_SUM,
                &sum_constants,
                &sum_bindings,
                params,
                (total.div_ceil(256).min(INT_SPLIT_SUM_GROUPS) as u32, 1),
                Cost::new(plan.splits * total * 4, total * self.act.size(), 0),
            )
        };
        if let Some(kernel) = cm2.filter(|_| widen) {
            let tile_n = u64::from(kernel.gemm.tile_n);
            let widened =
                self.each_converted(encoder, Widen::Int4ToInt8, tile_n, scratch, |e, piece| {
                    cm2_launch(e, kernel, piece)
                });
            match widened {
                // No room for the widened piece (a plan that did not count
                // it, `converted_piece_bytes`): the int4 kernel, which needs
                // none, where there is one.
                Err(e @ LinearError::Scratch { .. }) => {
                    let staged = self.cm2_chosen(cm2::int_weights(true, self.act, raw), false);
                    let Some(staged) = staged else {
                        return Err(e);
                    };
                    tracing::debug!(%e, "int4 via int8: no scratch, the int4 kernel");
                    scratch.set_spirv(staged.gemm.name);
                    for c in self.chunks()? {
                        cm2_launch(encoder, staged, &c)?;
                    }
                    return Ok(());
                }
                other => return other,
            }
        }
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
            if let Some(kernel) = cm2 {
                cm2_launch(encoder, kernel, &c)?;
                continue;
            }
            let groups = self.chunk_groups(&c, tile);
            let params = self.gemm_params(&c, true);
            let cost = self.chunk_cost(&c, m * kw * 4 + m * 4);
            // The integer linears' bindings, from 0.
            let numbered = [
                buf(c.buffer, c.offset, c.size),
                region(scale),
                bias.clone(),
                buf(&codes, 0, m * kw * 4),
                buf(&scales, 0, m * 4),
                out.binding(),
            ];
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
                encoder, name, source, &constants, numbered, params, groups, cost,
            )?;
        }
        Ok(())
    }

    /// The integer layer's SPIR-V GEMM ([`Self::cm2_chosen`]), and whether
    /// its int4 weights go to an int8 kernel widened a piece at a time
    /// (`Cm2Int4::ViaInt8`; `record` refused int4 rows of part of a word).
    fn int_cm2_chosen(&self, w4: bool, raw: bool) -> (Option<Cm2Kernel>, bool) {
        if w4
            && self.cm2_int4 == Cm2Int4::ViaInt8
            && let Some(k) = self.cm2_chosen(cm2::int_weights(false, self.act, raw), true)
        {
            return (Some(k), true);
        }
        (
            self.cm2_chosen(cm2::int_weights(w4, self.act, raw), false),
            false,
        )
    }
}

/// Workgroups of one exact partial-sum launch at most (it loops over the
/// rest).
const INT_SPLIT_SUM_GROUPS: u64 = 4096;

#[cfg(test)]
mod tests {
    use super::rotate_run;

    #[test]
    fn rotation_runs_are_whole_groups_dividing_k() {
        // FLUX.1's widths in groups of 256: K = 3072, 12288, 15360.
        assert_eq!(rotate_run(3072, 256), 1024);
        assert_eq!(rotate_run(12288, 256), 4096);
        assert_eq!(rotate_run(15360, 256), 1024);
        assert_eq!(rotate_run(192, 64), 64);
        assert_eq!(rotate_run(1536, 64), 512);
        assert_eq!(rotate_run(4096, 4096), 4096);
        for (k, g) in [
            (3072u64, 256u32),
            (15360, 256),
            (1216, 64),
            (48, 16),
            (1 << 20, 4),
        ] {
            let ch = rotate_run(k, g);
            assert!(
                ch.is_multiple_of(u64::from(g))
                    && k.is_multiple_of(ch)
                    && ch <= 4096.max(u64::from(g))
            );
        }
    }
}
