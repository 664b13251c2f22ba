//! The residual add and RMS norm before integer linears, fused with the
//! rotation and quantization of their input (`linear_add_norm_quant.wgsl`):
//! at M = 1 the norm and the rotate/quantize step are two single-workgroup
//! launches in a row, each mostly latency; one launch does both, and the
//! linears after it take the codes it left (`RecordOptions::reuse_codes`).

use dynvram_quant::{KernelChoice, reference::is_power_of_four};
use dynvram_shaders::linear as shaders;

use super::gemv::{FUSED_FIXED_BYTES, fast_fht_constants, fast_quant_wgs, fht_constants};
use super::gemv_shape::GEMV_MAX_M;
use super::recorder::{MAX_GROUPS_PER_DIM, QuantParams, buf, rows_grid};
use super::spec::{CodesKey, IntPath};
use crate::device::Gpu;
use crate::ops::cache::{PipelineCache, Program};
use crate::ops::encoder::Encoder;
use crate::ops::launch::{Constants, Cost, Launch, launch};
use crate::ops::linear::{LinearError, LinearScratch, LinearWeights};
use crate::ops::norm::{Extra, check_norm, norm_wg};
use crate::tensor::GpuTensor;

/// `xs += delta`, then `out = weight · (xs · 1/√(mean(xs²) + eps))` per row
/// (`ops::norm::record_add_rms_norm`'s operands).
#[derive(Debug, Clone, Copy)]
pub struct AddNorm<'a> {
    /// The residual stream `[M, K]`, updated in place.
    pub xs: &'a GpuTensor,
    /// What is added to it, `[M, K]`.
    pub delta: &'a GpuTensor,
    /// The norm's f32 weight `[K]`.
    pub weight: &'a GpuTensor,
    pub eps: f32,
    /// The normalised rows `[M, K]`: the linears' input.
    pub out: &'a GpuTensor,
}

/// Records `norm` together with the rotation and quantization that the
/// integer linear `first` (kernel `choice`) would make of its output, and
/// returns `true`: the linears recorded next on `norm.out` with
/// `reuse_codes` take those codes. Returns `false` and records nothing
/// where they cannot be fused (a float kernel, M above the GEMVs', a row
/// larger than the adapter's workgroup memory, a workgroup size other than
/// the norm's); the caller records the norm alone. A `fast` choice takes
/// `linear_add_norm_quant_subgroup.wgsl` where the adapter has subgroups of
/// one size and the row fits (the same outputs bit for bit; its workgroup
/// size from `GpuOptions::quant_wgs` or `fast_quant_wgs`'s default).
#[allow(clippy::too_many_arguments)]
pub fn record_add_norm_quant(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    norm: &AddNorm<'_>,
    first: &LinearWeights,
    choice: KernelChoice,
    scratch: &mut LinearScratch,
) -> Result<bool, LinearError> {
    const OP: &str = "add_rms_norm";
    let (m, k) = check_norm(
        OP,
        norm.xs,
        norm.weight,
        Extra::Add(norm.delta),
        norm.out,
        norm.eps,
    )?;
    let KernelChoice::Integer { act, fast } = choice else {
        return Ok(false);
    };
    let Ok(int) = IntPath::of(first.format, act) else {
        return Ok(false);
    };
    let g = int.group.unwrap_or(1);
    let limits = gpu.device.limits();
    let wgs = norm_wg(gpu, m);
    let grouped = g == 1 || (is_power_of_four(g) && k.is_multiple_of(u64::from(g)));
    if first.k != k
        || m > GEMV_MAX_M
        || m > MAX_GROUPS_PER_DIM
        || !k.is_multiple_of(4)
        || wgs < 64
        || !grouped
    {
        return Ok(false);
    }
    // The fast variant: the norm's sums of squares in the order of its
    // `wgs` invocations, by `fast_wgs` ones.
    let sg = gpu.caps.subgroup_min_size;
    let fast_wgs = (fast
        && gpu.caps.subgroups
        && sg == gpu.caps.subgroup_max_size
        && sg.is_power_of_two())
    .then(|| fast_quant_wgs(gpu, k, g, None, 1))
    .flatten()
    .filter(|&f| {
        // Logical invocations per invocation, their values in registers,
        // and the tree's last stages per lane.
        let per = wgs / f;
        f <= wgs && per <= 16 && u64::from(per) * k.div_ceil(u64::from(wgs)) <= 64 && f / sg <= 32
    });
    let chunk = k.next_power_of_two().max(u64::from(wgs));
    let fits = chunk * 4 + u64::from(FUSED_FIXED_BYTES)
        <= u64::from(limits.max_compute_workgroup_storage_size);
    if fast_wgs.is_none() && !fits {
        return Ok(false);
    }
    let kw = k / 4;
    let rot_bytes = m * k * 4;
    let rotated = scratch.x_rot(gpu, rot_bytes)?;
    let codes = scratch.codes(gpu, m * kw * 4)?;
    let scales = scratch.scales(gpu, m * 4)?;
    // The multi-row GEMVs at M <= 8 pair int4 weights' even/odd columns.
    let mut constants = Constants::from_slice(&int.quant_constants(int.w4));
    let source = match fast_wgs {
        Some(f) => {
            constants.extend(fast_fht_constants(g, f, k));
            constants.extend([("NW", f64::from(wgs)), ("SG", f64::from(sg))]);
            shaders::ADD_NORM_QUANT_SUBGROUP
        }
        None => {
            constants.extend(fht_constants(g, wgs, chunk));
            shaders::ADD_NORM_QUANT
        }
    };
    let params = QuantParams {
        rows: m as u32,
        k: k as u32,
        kw: kw as u32,
        eps_bits: norm.eps.to_bits(),
        _pad: [0; 4],
    };
    launch(
        gpu,
        cache,
        enc,
        Launch {
            program: Program {
                source,
                entry: "main",
                constants: &constants,
                act: norm.xs.dtype,
            },
            label: &format_args!("add_rms_norm+rotate_quant {k} m={m}"),
            bindings: &[
                (1, buf(&codes, 0, m * kw * 4)),
                (2, buf(&scales, 0, m * 4)),
                (4, buf(&rotated, 0, rot_bytes)),
                (5, norm.xs.binding()),
                (6, norm.delta.binding()),
                (7, norm.weight.binding()),
                (8, norm.out.binding()),
            ],
            immediates: bytemuck::bytes_of(&params),
            groups: rows_grid(m),
            cost: Cost::new(
                2 * norm.xs.bytes() + norm.weight.bytes(),
                norm.xs.bytes() + norm.out.bytes() + rot_bytes + m * k + m * 4,
                m * k * (6 + 2 * u64::from(g.max(2).ilog2())),
            ),
        },
    )?;
    scratch.set_codes_key(Some(CodesKey {
        x: (norm.out.buffer.as_ref().clone(), norm.out.offset),
        codes: int.codes,
        group: int.group,
        perm8: int.w4,
        m,
        k,
        norm: None,
        spread: false,
    }));
    scratch.set_dispatches(1);
    Ok(true)
}
