//! Activation quantization spread over the GPU for the integer multi-row
//! GEMVs at decode sizes: `linear_rotate_max.wgsl` rotates the rows (after
//! the folded RMS norm, if any) over many workgroups and leaves each
//! chunk's absmax; then either ([`SpreadQuant::InGemv`]) the GEMV
//! (`linear_gemv_in_rotated.wgsl`) takes the row's scale from those maxima
//! and codes the values as it reads them, or ([`SpreadQuant::CodeKernel`])
//! `linear_rotated_codes.wgsl` codes each row once, over many workgroups,
//! into the codes and scales a quantization launch writes, and the GEMV
//! reads them as usual (`linear_gemv_in_codes.wgsl`).
//!
//! Why: the per-row scale needs the whole rotated row, so the fused
//! kernels give a row one workgroup; at M = 1 that is one busy SM for
//! 15–34 µs before every quantized linear (run N3 on the H200: 127 such
//! launches, 2.2 ms of a 5.4 ms int4 token under timestamps). Spread, the
//! rotation is a few microseconds of latency, and the codes — the same bits
//! as the quantization kernels write — cost each GEMV workgroup a few
//! arithmetic instructions per value it already streams.
//!
//! Measured (session 13, H200, `bench/gemv_sweep.sh` with
//! `DYNVRAM_SPREAD_QUANT` 1 and 0): the rotation does take 10–12 µs
//! instead of 16–35 under timestamps, but every GEMV workgroup codes the
//! whole row again (1 024 times for a 4096-row int4 layer), which made the
//! GEMVs 2–2.5× slower; a whole linear came out 7–50 % slower at the best
//! shape of each, an int4 Llama-7B token 153 tok/s against 212. So it is
//! off by default (`GpuOptions::spread_quant`); what would pay is fewer
//! launches, not wider ones.
//!
//! `CodeKernel` is the other split: the rotation spread as above, the
//! coding done once (a few microseconds of many small workgroups: 4 values
//! an invocation, the row's scale from a handful of maxima), the GEMVs
//! unchanged. One launch more than `InGemv` per quantized input (three
//! instead of two with the GEMV, against the fused kernel's two), every
//! launch short: the default (the H200, run P1: 289.7 tok/s against 272.7
//! for the fused launches and 178.6 for `InGemv`).
//!
//! `OneLaunch` puts the coding in the rotation's launch: the last
//! workgroup of a row to finish its chunk codes the whole row
//! (`linear_rotate_codes.wgsl`). Two launches, as `InGemv`, but slower than
//! `CodeKernel` on the H100 (session 34: 270 against 278-283 tok/s): one
//! workgroup coding a row is longer than a launch of many.

use super::gemv::{GemvInput, GemvOperands};
use super::gemv_shape::GEMV_MAX_M;
use super::recorder::{
    MAX_GROUP, MAX_GROUPS_PER_DIM, QuantParams, Recorder, RotateMaxParams, buf, region,
};
use super::spec::IntEpilogue;
use super::spec::{CodesKey, IntPath};
use crate::device::SpreadQuant;
use crate::ops::encoder::Encoder;
use crate::ops::launch::{Constants, Cost};
use crate::ops::linear::LinearError;
use crate::ops::linear::LinearScratch;
use crate::tensor::{ActDtype, GpuTensor};
use dynvram_shaders::linear as shaders;

/// Invocations per rotation workgroup (fewer where the adapter allows fewer).
const WGS: u32 = 256;

/// Values per rotation workgroup (a larger group takes a workgroup of its
/// own): 4 per invocation, one load round trip; K = 4096 is 4 workgroups a
/// row, K = 11008 eleven.
const CHUNK_MIN: u32 = 1024;

/// Invocations per workgroup of `linear_rotated_codes.wgsl` (one code word,
/// 4 values, each): 16 workgroups a row at K = 4096.
const CODES_WGS: u32 = 64;

/// The rotation's shape on this adapter.
#[derive(Debug, Clone, Copy)]
pub(super) struct Spread {
    wgs: u32,
    chunk: u32,
}

impl Recorder<'_> {
    /// The spread quantization's shape for rotation group `g` (1: none), or
    /// `None` where the integer GEMV reads codes a quantization launch
    /// wrote: not asked for, above the GEMVs' M, no multi-row GEMV, or a
    /// group or row the rotation kernel cannot take.
    pub(super) fn spread_shape(&self, g: u32) -> Option<Spread> {
        let limits = self.gpu.device.limits();
        let max = limits.max_compute_invocations_per_workgroup;
        let wgs = WGS.min(if max == 0 { 0 } else { 1 << max.ilog2() });
        let chunk = g.max(CHUNK_MIN);
        let k = self.weights.k;
        let grouped = g == 1
            || (dynvram_quant::reference::is_power_of_four(g)
                && g <= MAX_GROUP
                && k.is_multiple_of(u64::from(g)));
        let fits = 4 * (u64::from(chunk) + 2 * u64::from(wgs))
            <= u64::from(limits.max_compute_workgroup_storage_size);
        let code_groups = (k / 4).div_ceil(u64::from(CODES_WGS));
        (self.spread.spread()
            && self.gemv.is_some()
            && (1..=GEMV_MAX_M).contains(&self.m)
            && k.is_multiple_of(16)
            && grouped
            && wgs >= 64
            && fits
            && k.div_ceil(u64::from(chunk)) <= MAX_GROUPS_PER_DIM
            && (self.spread != SpreadQuant::CodeKernel || code_groups <= MAX_GROUPS_PER_DIM))
            .then_some(Spread { wgs, chunk })
    }

    /// An integer layer through the rotation and the GEMVs that code its
    /// output (`InGemv`), or the rotation, the coding kernel and the GEMVs
    /// reading codes (`CodeKernel`); shape `s` from [`Self::spread_shape`].
    /// The rotation (and coding) is skipped where the scratch holds this
    /// input's already ([`super::RecordOptions::reuse_codes`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn integer_spread(
        &self,
        encoder: &mut Encoder,
        int: &IntPath,
        fast: bool,
        s: Spread,
        x: &GpuTensor,
        out: &GpuTensor,
        scratch: &mut LinearScratch,
        epi: IntEpilogue,
    ) -> Result<(), LinearError> {
        let (gpu, m, k) = (self.gpu, self.m, self.weights.k);
        let g = int.group.unwrap_or(1);
        let chunks = k.div_ceil(u64::from(s.chunk));
        let norm = self.fold.norm;
        let key = CodesKey {
            x: (x.buffer.as_ref().clone(), x.offset),
            codes: int.codes,
            group: int.group,
            // Codes in the dot4 GEMVs' layout (`CodeKernel`, `OneLaunch`),
            // or none.
            perm8: self.spread != SpreadQuant::InGemv && int.w4,
            m,
            k,
            norm: norm.map(|n| n.key()),
            spread: self.spread == SpreadQuant::InGemv,
        };
        let reuse = self.reuse_codes && scratch.codes_key() == Some(&key);
        let rows = scratch.x_rot(gpu, m * k * 4)?;
        let chunk_max = scratch.chunk_max(gpu, m * chunks * 4)?;
        let dummy = scratch.dummy(gpu)?;
        let rotation_constants = [
            ("G", f64::from(g)),
            ("WGS", f64::from(s.wgs)),
            ("CHUNK", f64::from(s.chunk)),
            ("NORM", f64::from(u8::from(norm.is_some()))),
        ];
        // Every workgroup of a normed row reads the whole row.
        let rotation_reads = m * k * x.dtype.size() * if norm.is_some() { chunks + 1 } else { 1 };
        let rotation_flops = m * k * 2 * u64::from(g.max(2).ilog2());
        let (kw, eps_bits, grid) = (
            k / 4,
            norm.map_or(0, |n| n.eps.to_bits()),
            (chunks as u32, m as u32),
        );
        // Codes and scales, as a quantization launch writes them, for every
        // mode but `InGemv` (whose GEMV codes the rotated rows itself).
        let codes = if self.spread == SpreadQuant::InGemv {
            None
        } else {
            Some((scratch.codes(gpu, m * kw * 4)?, scratch.scales(gpu, m * 4)?))
        };
        if !reuse {
            let norm_w = norm.map_or(buf(&dummy, 0, 16), |n| n.weight.binding());
            match &codes {
                Some((codes, scales)) if self.spread == SpreadQuant::OneLaunch => {
                    let arrived = scratch.arrived(gpu, m * 4)?;
                    let mut constants = Constants::from_slice(&int.quant_constants(int.w4));
                    constants.extend(rotation_constants);
                    self.dispatch_at(
                        encoder,
                        "linear_rotate_codes",
                        shaders::ROTATE_CODES,
                        &constants,
                        &[
                            (0, x.binding()),
                            (1, buf(codes, 0, m * kw * 4)),
                            (2, buf(scales, 0, m * 4)),
                            (3, norm_w),
                            (4, buf(&rows, 0, m * k * 4)),
                            (5, buf(&chunk_max, 0, m * chunks * 4)),
                            (6, buf(&arrived, 0, m * 4)),
                        ],
                        QuantParams {
                            rows: m as u32,
                            k: k as u32,
                            kw: kw as u32,
                            eps_bits,
                            _pad: [0; 4],
                        },
                        grid,
                        // The last workgroup reads the row back and codes it.
                        Cost::new(
                            rotation_reads + m * k * 4,
                            m * (k + chunks) * 4 + m * kw * 4 + m * 4,
                            rotation_flops + 4 * m * k,
                        ),
                    )?;
                }
                codes => {
                    self.dispatch(
                        encoder,
                        "linear_rotate_max",
                        shaders::ROTATE_MAX,
                        &rotation_constants,
                        [
                            x.binding(),
                            buf(&rows, 0, m * k * 4),
                            buf(&chunk_max, 0, m * chunks * 4),
                            norm_w,
                        ],
                        RotateMaxParams {
                            rows: m as u32,
                            k: k as u32,
                            chunks: chunks as u32,
                            eps_bits,
                            _pad: [0; 4],
                        },
                        grid,
                        Cost::new(rotation_reads, m * (k + chunks) * 4, rotation_flops),
                    )?;
                    if let Some((codes, scales)) = codes {
                        // The rotated rows are f32 whatever the activations are.
                        let mut rec = *self;
                        rec.act = ActDtype::F32;
                        let constants = int.quant_constants(int.w4);
                        let mut all = Constants::from_slice(&constants);
                        all.extend([
                            ("WGS", f64::from(CODES_WGS)),
                            ("QCHUNK", f64::from(s.chunk)),
                        ]);
                        rec.dispatch(
                            encoder,
                            "linear_rotated_codes",
                            shaders::ROTATED_CODES,
                            &all,
                            [
                                buf(&rows, 0, m * k * 4),
                                buf(codes, 0, m * kw * 4),
                                buf(scales, 0, m * 4),
                                buf(&chunk_max, 0, m * chunks * 4),
                            ],
                            QuantParams {
                                rows: m as u32,
                                k: k as u32,
                                kw: kw as u32,
                                eps_bits: 0,
                                _pad: [0; 4],
                            },
                            (kw.div_ceil(u64::from(CODES_WGS)) as u32, m as u32),
                            Cost::new(
                                m * k * 4 + m * chunks * 4 * kw.div_ceil(u64::from(CODES_WGS)),
                                m * kw * 4 + m * 4,
                                4 * m * k,
                            ),
                        )?;
                    }
                }
            }
        }
        scratch.set_codes_key(Some(key));
        let scale = self
            .weights
            .scale
            .as_ref()
            .ok_or_else(|| self.unsupported("integer formats need a weight_scale".into()))?;
        let shape = self
            .gemv
            .ok_or_else(|| self.unsupported("the spread quantization needs the GEMV".into()))?;
        for c in self.chunks()? {
            let bias = self
                .weights
                .bias
                .as_ref()
                .map_or(buf(&dummy, 0, 16), region);
            let ops = GemvOperands {
                scale: region(scale),
                bias,
                out: out.binding(),
                input: match &codes {
                    Some((codes, scales)) => GemvInput::Codes {
                        codes: buf(codes, 0, m * k),
                        scales: buf(scales, 0, m * 4),
                    },
                    None => GemvInput::Rotated {
                        rows: buf(&rows, 0, m * k * 4),
                        chunk_max: buf(&chunk_max, 0, m * chunks * 4),
                        chunk: s.chunk,
                    },
                },
            };
            self.int_gemv_rows(encoder, &c, shape, int, fast, epi, ops)?;
        }
        Ok(())
    }
}
