//! The multi-row GEMV kernels for small M (`linear_int_gemv_rows.wgsl`,
//! `linear_float_gemv_rows.wgsl`): [`GemvShape`] rows per workgroup, 16-byte
//! weight loads, activations loaded once per workgroup and reused across its
//! rows, one reduction per workgroup at the end.
//!
//! Why these shapes: an M = 1 linear is a pure weight stream, so what counts
//! is bytes in flight and how often each activation byte is re-read. With
//! `rows` rows per workgroup every invocation keeps `rows` independent 16-byte
//! loads in flight per step and the activation vector is read `N / rows`
//! times instead of `N` times (at rows = 8 and int4 weights, 1/4 of the
//! weight bytes, from L2, instead of 2×).

use dynvram_shaders::linear as shaders;

use super::gemv_shape::{GEMV_MAX_M, GemvShape};
use super::recorder::{Chunk, GemmParams, QuantParams, Recorder, buf, region, rows_grid};
use super::spec::IntPath;
use super::spec::{FloatWeights, IntEpilogue};
use crate::ops::encoder::Encoder;
use crate::ops::launch::{Bindings, Constants, Cost};
use crate::ops::linear::LinearError;
use smallvec::{SmallVec, smallvec};

/// Workgroup memory of `linear_rotate_quant.wgsl` besides its chunk: the
/// 1024-word reduction staging and 64 result words.
pub(super) const FUSED_FIXED_BYTES: u32 = 4 * (1024 + 64);

/// Largest chunk of `linear_rotate_quant.wgsl` (32 KiB; 2 passes at K = 16384).
const FUSED_MAX_CHUNK: u32 = 8192;

/// Shape of `linear_rotate_quant.wgsl` on an adapter, `(invocations,
/// chunk)`: the largest power-of-two workgroup up to 1024 invocations and
/// the largest power-of-two chunk its workgroup memory holds. It runs only
/// M <= 8 workgroups, so it is latency-bound: everything in flight at once.
fn fused_shape(limits: &wgpu::Limits) -> (u32, u32) {
    let floor_pow2 = |v: u32| if v == 0 { 0 } else { 1 << v.ilog2() };
    let wgs = floor_pow2(limits.max_compute_invocations_per_workgroup.min(1024));
    let words = limits
        .max_compute_workgroup_storage_size
        .saturating_sub(FUSED_FIXED_BYTES)
        / 4;
    (wgs, floor_pow2(words).min(FUSED_MAX_CHUNK))
}

/// Rows longer than this take the fast fused kernels unasked (see
/// [`fast_quant_wgs`]).
const FAST_DEFAULT_MIN_K: u64 = 4096;

/// Largest group the fast fused kernels rotate (stages 1..=64 in registers).
const FAST_MAX_GROUP: u32 = 256;

/// Workgroup size of the fast (subgroup) fused rotate/quantize kernels
/// (`linear_rotate_quant_subgroup.wgsl`, `linear_add_norm_quant_subgroup.wgsl`)
/// for rows of `k` values rotated in groups of `g`, or `None` where they
/// cannot run: no subgroups, a group above 256, a row (padded by 1/16)
/// beyond the workgroup memory, or a size outside the adapter's limits or
/// the kernels' (at most 4 blocks of 16 values per invocation).
/// `asked` (else the device's [`crate::device::GpuOptions::quant_wgs`]) asks
/// for them at that size; unasked they run only past K = 4096, at the
/// smallest power of two in 256..=1024 giving every invocation at most one
/// block of 16 values (1024 at K = 11008): on the H200 (run K, decode
/// profile) the fast rotate/quantize took 19 µs against the portable
/// kernel's 16 at K = 4096 but 19 against 22 at K = 11008, and the fast
/// add + norm + rotate/quantize 34 µs against 18 at K = 4096.
/// `words_per_invocation` more workgroup words per invocation are needed.
pub(super) fn fast_quant_wgs(
    gpu: &crate::device::Gpu,
    k: u64,
    g: u32,
    asked: Option<u32>,
    words_per_invocation: u64,
) -> Option<u32> {
    let limits = gpu.device.limits();
    if !gpu.caps.subgroups || g > FAST_MAX_GROUP || k == 0 || k > u64::from(u32::MAX / 2) {
        return None;
    }
    let wgs = match asked.or(gpu.quant_wgs()) {
        Some(wgs) => wgs,
        None if k > FAST_DEFAULT_MIN_K => {
            k.div_ceil(16).next_power_of_two().clamp(256, 1024) as u32
        }
        None => return None,
    };
    let max = limits.max_compute_invocations_per_workgroup.min(1024);
    let bytes = 4 * (k + k / 16 + 2 + words_per_invocation * u64::from(wgs));
    (wgs.is_power_of_two()
        && (64..=max).contains(&wgs)
        && k.div_ceil(16 * u64::from(wgs)) <= 4
        && bytes <= u64::from(limits.max_compute_workgroup_storage_size))
    .then_some(wgs)
}

/// The override constants of the fast (subgroup) rotation in a
/// quantization kernel: group `g`, `wgs` invocations, a row of `k` values
/// in workgroup memory.
pub(super) fn fast_fht_constants(g: u32, wgs: u32, k: u64) -> [(&'static str, f64); 4] {
    [
        ("G", f64::from(g)),
        ("WGS", f64::from(wgs)),
        ("ROW_MAX", k as f64),
        ("FHT_WORDS", (k + k / 16 + 1) as f64),
    ]
}

/// The override constants of the portable rotation in a quantization
/// kernel: group `g`, `wgs` invocations, rows taken `chunk` values at a
/// time.
pub(super) fn fht_constants(g: u32, wgs: u32, chunk: u64) -> [(&'static str, f64); 3] {
    [
        ("G", f64::from(g)),
        ("WGS", f64::from(wgs)),
        ("FHT_CHUNK", chunk as f64),
    ]
}

/// The scale, bias and output bindings shared by both kernels, and the
/// activations.
pub(super) struct GemvOperands<'a> {
    pub scale: wgpu::BindingResource<'a>,
    pub bias: wgpu::BindingResource<'a>,
    pub out: wgpu::BindingResource<'a>,
    pub input: GemvInput<'a>,
}

/// What a multi-row GEMV reads as its activations.
pub(super) enum GemvInput<'a> {
    /// `x` itself (the float kernel).
    Float(wgpu::BindingResource<'a>),
    /// Packed codes and per-row code scales a quantization launch wrote.
    Codes {
        codes: wgpu::BindingResource<'a>,
        scales: wgpu::BindingResource<'a>,
    },
    /// Rows rotated over many workgroups and the maxima of their `chunk`s
    /// (`linear_rotate_max.wgsl`): the GEMV makes the codes itself.
    Rotated {
        rows: wgpu::BindingResource<'a>,
        chunk_max: wgpu::BindingResource<'a>,
        chunk: u32,
    },
}

impl Recorder<'_> {
    /// Whether rotation (group `g`) and quantization run as one dispatch:
    /// M small enough that one workgroup per row keeps the GPU busy enough
    /// (the dispatch saved is worth more), the group fits the kernel's chunk
    /// and the adapter gives it its workgroup memory.
    pub(super) fn fuses_rotate_quant(&self, g: u32) -> bool {
        let (wgs, chunk) = fused_shape(&self.gpu.device.limits());
        self.m <= GEMV_MAX_M && wgs >= 64 && chunk >= g.max(1024)
    }

    /// The fused rotation + quantization (`linear_rotate_quant.wgsl`), one
    /// workgroup per row: bindings 0 x, 1 codes, 2 code scales, 3 params,
    /// 4 the rotated input (f32, written for the codes and for inspection).
    ///
    /// `fast` (the adapter has subgroups): `linear_rotate_quant_subgroup.wgsl`
    /// where [`fast_quant_wgs`] allows it, the same outputs bit for bit.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rotate_quant(
        &self,
        encoder: &mut Encoder,
        g: u32,
        fast: bool,
        quant_constants: &[(&'static str, f64)],
        params: QuantParams,
        [x, codes, scales, rotated]: [wgpu::BindingResource<'_>; 4],
    ) -> Result<(), LinearError> {
        let (m, k) = (self.m, self.weights.k);
        let cost = Cost::new(
            m * k * self.act.size(),
            m * k * 4 + m * k + m * 4,
            m * k * 2 * u64::from(g.max(2).ilog2()),
        );
        let fast_wgs = if fast {
            let wgs = fast_quant_wgs(self.gpu, k, g, self.quant_wgs, 0);
            if wgs.is_none() && self.quant_wgs.is_some() {
                return Err(self.unsupported(format!(
                    "fast rotate/quantize workgroup size {:?} unusable at K = {k}, G = {g}",
                    self.quant_wgs
                )));
            }
            wgs
        } else {
            None
        };
        if let Some(wgs) = fast_wgs {
            let mut constants = Constants::from_slice(quant_constants);
            constants.extend(fast_fht_constants(g, wgs, k));
            return self.dispatch_at(
                encoder,
                "linear_rotate_quant",
                shaders::ROTATE_QUANT_SUBGROUP,
                &constants,
                &[(0, x), (1, codes), (2, scales), (4, rotated)],
                params,
                rows_grid(m),
                cost,
            );
        }
        let (wgs, chunk) = fused_shape(&self.gpu.device.limits());
        let mut constants = Constants::from_slice(quant_constants);
        constants.extend(fht_constants(g, wgs, u64::from(chunk)));
        self.dispatch_at(
            encoder,
            "linear_rotate_quant",
            shaders::ROTATE_QUANT,
            &constants,
            &[(0, x), (1, codes), (2, scales), (4, rotated)],
            params,
            rows_grid(m),
            cost,
        )
    }

    /// Params of a multi-row GEMV launch over chunk `c` (and, fused, the
    /// other weights' rows in `n1`, `n2`; outputs of their own); the last
    /// word is the folded norm's eps (float) or 1.0 (integer: its residual
    /// add's runtime 1), as f32 bits.
    fn gemv_params(&self, c: &Chunk<'_>, integer: bool) -> GemmParams {
        let mut rows = [0u32; 2];
        let more = self.fused.map_or(&[][..], |f| &f.more[..]);
        for (r, (w, _)) in rows.iter_mut().zip(more) {
            *r = w.n as u32;
        }
        let fused = self.fused.is_some();
        GemmParams {
            m: self.m as u32,
            n: c.rows as u32,
            k: self.weights.k as u32,
            n_base: if fused { 0 } else { c.first_row as u32 },
            out_stride: if fused { c.rows } else { self.weights.n } as u32,
            n1: rows[0],
            n2: rows[1],
            last_bits: if integer {
                1f32.to_bits()
            } else {
                self.fold.norm.map_or(0, |n| n.eps.to_bits())
            },
        }
    }

    fn gemv_constants(&self, shape: GemvShape) -> [(&'static str, f64); 4] {
        [
            ("ROWS", f64::from(shape.rows)),
            ("MR", self.m as f64),
            ("WGS", f64::from(shape.wgs)),
            (
                "GLU",
                f64::from(u8::from(self.fused.is_some_and(|f| f.glu))),
            ),
        ]
    }

    /// The multi-row GEMV launch of chunk `c`: `source` (the one-weight
    /// module) or `fused_source` when other weights share the launch, with
    /// their bindings 10..17 (unused ones bound to weight 0's), workgroups
    /// and cost.
    #[allow(clippy::too_many_arguments)]
    fn gemv_rows_launch<'b>(
        &'b self,
        encoder: &mut Encoder,
        c: &Chunk<'_>,
        shape: GemvShape,
        (source, fused_source): (&'static str, &'static str),
        name: &'static str,
        mut constants: Constants,
        mut bindings: Bindings<'b>,
        weight0: ((u32, wgpu::BindingResource<'b>), &GemvOperands<'b>),
        x_bytes: u64,
        integer: bool,
    ) -> Result<(), LinearError> {
        constants.extend(self.gemv_constants(shape));
        let groups = |rows: u64| rows.div_ceil(u64::from(shape.rows));
        let mut workgroups = groups(c.rows);
        let mut cost = self.chunk_cost(c, x_bytes);
        let (w0, ops) = weight0;
        let Some(fused) = self.fused else {
            bindings.push(w0);
            return self.dispatch_at(
                encoder,
                name,
                source,
                &constants,
                &bindings,
                self.gemv_params(c, integer),
                rows_grid(workgroups),
                cost,
            );
        };
        let mut extra: [SmallVec<[wgpu::BindingResource<'_>; 2]>; 4] = Default::default();
        for i in 0..2 {
            let seg = fused.more.get(i);
            extra[0].push(seg.map_or(w0.1.clone(), |(w, _)| region(&w.parts[0].region)));
            extra[1].push(
                seg.and_then(|(w, _)| w.scale.as_ref())
                    .map_or(ops.scale.clone(), region),
            );
            extra[2].push(
                seg.and_then(|(w, _)| w.bias.as_ref())
                    .map_or(ops.bias.clone(), region),
            );
            extra[3].push(seg.map_or(ops.out.clone(), |(_, o)| o.binding()));
            if let Some((w, _)) = seg {
                cost.bytes += w.n * w.row_bytes() + self.m * w.n * self.act.size();
                cost.flops += 2 * self.m * w.n * w.k;
                if !fused.glu {
                    workgroups += groups(w.n);
                }
            }
        }
        bindings.push(w0);
        bindings.extend(
            (10..)
                .zip(extra.into_iter().flatten())
                // The float kernel reads no per-weight scales (no fp8).
                .filter(|(i, _)| integer || !(12..14).contains(i)),
        );
        self.dispatch_at(
            encoder,
            name,
            fused_source,
            &constants,
            &bindings,
            self.gemv_params(c, integer),
            rows_grid(workgroups),
            cost,
        )
    }

    /// One chunk of an integer layer through the multi-row GEMV: bindings
    /// 1 scale, 2 bias, 5 out, 7 weight quads; 4 code scales and 8 code
    /// quads, or 8 rotated rows and 9 their chunk maxima (the common
    /// fragment's u32 views 0 and 3 are unused).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn int_gemv_rows(
        &self,
        encoder: &mut Encoder,
        c: &Chunk<'_>,
        shape: GemvShape,
        int: &IntPath,
        fast: bool,
        epi: IntEpilogue,
        ops: GemvOperands<'_>,
    ) -> Result<(), LinearError> {
        let has_bias = self.weights.bias.is_some();
        let mut bindings: Bindings<'_> = smallvec![
            (1, ops.scale.clone()),
            (2, ops.bias.clone()),
            (5, ops.out.clone()),
        ];
        let mut constants: Constants = smallvec![
            ("W4", f64::from(u8::from(int.w4))),
            ("EPI", f64::from(epi as u32)),
            ("SW_PER_ROW", f64::from(u8::from(int.per_row_scale))),
            ("HAS_BIAS", f64::from(u8::from(has_bias))),
            ("RESID", f64::from(u8::from(self.fold.residual))),
        ];
        let (sources, x_bytes) = match &ops.input {
            GemvInput::Codes { codes, scales } => {
                bindings.extend([(4, scales.clone()), (8, codes.clone())]);
                let sources = if fast {
                    (
                        shaders::INT_GEMV_ROWS_SUBGROUP,
                        shaders::INT_GEMV_ROWS3_SUBGROUP,
                    )
                } else {
                    (shaders::INT_GEMV_ROWS, shaders::INT_GEMV_ROWS3)
                };
                (sources, self.m * (self.weights.k + 4))
            }
            GemvInput::Rotated {
                rows,
                chunk_max,
                chunk,
            } => {
                bindings.extend([(8, rows.clone()), (9, chunk_max.clone())]);
                constants.extend(int.quant_constants(int.w4).into_iter().take(2));
                constants.push(("QCHUNK", f64::from(*chunk)));
                let sources = if fast {
                    (
                        shaders::INT_GEMV_ROWS_ROT_SUBGROUP,
                        shaders::INT_GEMV_ROWS3_ROT_SUBGROUP,
                    )
                } else {
                    (shaders::INT_GEMV_ROWS_ROT, shaders::INT_GEMV_ROWS3_ROT)
                };
                let maxima = self.weights.k.div_ceil(u64::from(*chunk));
                (sources, self.m * 4 * (self.weights.k + maxima))
            }
            GemvInput::Float(_) => {
                return Err(self.unsupported("the integer GEMV needs activation codes".into()));
            }
        };
        self.gemv_rows_launch(
            encoder,
            c,
            shape,
            sources,
            "linear_int_gemv_rows",
            constants,
            bindings,
            ((7, buf(c.buffer, c.offset, c.size)), &ops),
            x_bytes,
            true,
        )
    }

    /// One chunk of a float layer through the multi-row GEMV: bindings
    /// 1 scale, 2 bias, 3 x, 4 out, 5 params, 6 weight quads (the common
    /// fragment's u32 view 0 is unused).
    pub(super) fn float_gemv_rows(
        &self,
        encoder: &mut Encoder,
        c: &Chunk<'_>,
        shape: GemvShape,
        wfmt: FloatWeights,
        ops: GemvOperands<'_>,
    ) -> Result<(), LinearError> {
        let has_bias = self.weights.bias.is_some();
        let (norm, resid) = (self.fold.norm, self.fold.residual);
        let constants: Constants = smallvec![
            ("WFMT", f64::from(wfmt as u32)),
            ("HAS_BIAS", f64::from(u8::from(has_bias))),
            ("RESID", f64::from(u8::from(resid))),
        ];
        let GemvInput::Float(x) = &ops.input else {
            return Err(self.unsupported("the float GEMV reads its activations as stored".into()));
        };
        let mut bindings: Bindings<'_> = smallvec![
            (1, ops.scale.clone()),
            (2, ops.bias.clone()),
            (3, x.clone()),
            (4, ops.out.clone()),
        ];
        let sources = match norm {
            Some(n) => {
                bindings.push((7, n.weight.binding()));
                (
                    shaders::FLOAT_GEMV_ROWS_NORM,
                    shaders::FLOAT_GEMV_ROWS3_NORM,
                )
            }
            None => (shaders::FLOAT_GEMV_ROWS, shaders::FLOAT_GEMV_ROWS3),
        };
        // The residual is read as well as written; the norm reads its weight.
        let extra = u64::from(resid) * self.m * self.weights.n * self.act.size()
            + norm.map_or(0, |n| n.weight.bytes());
        self.gemv_rows_launch(
            encoder,
            c,
            shape,
            sources,
            "linear_float_gemv_rows",
            constants,
            bindings,
            ((6, buf(c.buffer, c.offset, c.size)), &ops),
            self.m * self.weights.k * self.act.size() + extra,
            false,
        )
    }
}
