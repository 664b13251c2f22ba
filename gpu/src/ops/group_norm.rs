//! GroupNorm over NCHW activations (f32 or f16; statistics in f32, weights
//! and biases f32), optionally followed by SiLU: the VAE's normalisation.
//! Three launches (chunk statistics, their merge per group, the
//! normalisation), so a group of millions of values is spread over the GPU
//! instead of one workgroup; the caller gives an f32 scratch of
//! [`scratch_len`] values for the statistics.

use dynvram_shaders::vae::GROUP_NORM;

use crate::device::{Gpu, GpuError};
use crate::ops::cache::PipelineCache;
use crate::ops::conv::nchw;
use crate::ops::encoder::Encoder;
use crate::ops::kernel::{self, Dispatch, bad, expect_distinct, expect_shape, to_u32};
use crate::tensor::{ActDtype, GpuTensor};

/// `group_norm.wgsl`'s `Params`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    channels: u32,
    /// Pixels per channel (height · width).
    hw: u32,
    groups: u32,
    /// Channels per group.
    cpg: u32,
    /// Values per statistics chunk, and chunks per group.
    chunk: u32,
    n_chunks: u32,
    /// Elements of the whole input.
    total: u32,
    eps: f32,
    /// 1 where SiLU follows the norm.
    silu: u32,
    _pad: [u32; 3],
}
const _: () = assert!(size_of::<Params>() == 48);

const OP: &str = "group_norm";
/// Values per statistics workgroup (`group_stats`).
const CHUNK: u64 = 4096;
/// Invocations per workgroup of `group_apply`.
const WG: u64 = 256;
/// Where the merged statistics start in the scratch, in bytes: past the
/// chunk partials, at an offset any adapter can bind.
fn stats_offset(partials: u64) -> u64 {
    (partials * 4).next_multiple_of(256)
}

/// Chunk partials of a norm over `batch` images of `channels × hw` values.
fn partials(batch: u64, channels: u64, hw: u64, groups: u64) -> u64 {
    let len = channels / groups.max(1) * hw;
    batch * groups * len.div_ceil(CHUNK) * 2
}

/// f32 values of scratch [`record_group_norm`] needs for `batch` images of
/// `channels × hw` values in `groups` groups.
pub fn scratch_len(batch: u64, channels: u64, hw: u64, groups: u64) -> u64 {
    stats_offset(partials(batch, channels, hw, groups)) / 4 + batch * groups * 2
}

/// Records `out = GroupNorm(x) · weight + bias` (biased variance over each
/// group of `channels / groups` channels, `eps`), then `silu` where asked:
/// `x`, `out` `[B, C, H, W]` of one dtype, `weight`, `bias` f32 `[C]`,
/// `scratch` f32 of at least [`scratch_len`] values.
#[allow(clippy::too_many_arguments)] // the op's operands
pub fn record_group_norm(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    x: &GpuTensor,
    weight: &GpuTensor,
    bias: &GpuTensor,
    scratch: &GpuTensor,
    out: &GpuTensor,
    groups: u64,
    eps: f32,
    silu: bool,
) -> Result<(), GpuError> {
    let [b, c, h, w] = nchw(OP, "x", x)?;
    if groups == 0 || !c.is_multiple_of(groups) {
        return Err(bad(
            OP,
            format!("{c} channels do not split into {groups} groups"),
        ));
    }
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(bad(OP, format!("eps = {eps} must be finite and >= 0")));
    }
    expect_shape(OP, "out", out, &x.shape, x.dtype)?;
    kernel::rows_cols(OP, "out", out)?;
    for (name, t) in [("weight", weight), ("bias", bias)] {
        expect_shape(OP, name, t, &[c], ActDtype::F32)?;
        kernel::rows_cols(OP, name, t)?;
    }
    let hw = h * w;
    let need = scratch_len(b, c, hw, groups);
    if scratch.dtype != ActDtype::F32 || scratch.numel() < need {
        return Err(bad(
            OP,
            format!(
                "`scratch` {:?} {} holds {} values; [{b}, {c}, {h}, {w}] in {groups} groups needs {need} f32",
                scratch.shape,
                scratch.dtype,
                scratch.numel()
            ),
        ));
    }
    kernel::rows_cols(OP, "scratch", scratch)?;
    expect_distinct(
        OP,
        out,
        &[
            ("x", x),
            ("weight", weight),
            ("bias", bias),
            ("scratch", scratch),
        ],
    )?;
    expect_distinct(OP, scratch, &[("x", x)])?;
    let n_part = partials(b, c, hw, groups);
    let part = sub(scratch, 0, n_part);
    let stats = sub(scratch, stats_offset(n_part), b * groups * 2);
    let cpg = c / groups;
    let n_chunks = (cpg * hw).div_ceil(CHUNK);
    let u = |what: &str, v: u64| to_u32(OP, what, v);
    let params = Params {
        channels: u("channels", c)?,
        hw: u("hw", hw)?,
        groups: u("groups", groups)?,
        cpg: u("channels per group", cpg)?,
        chunk: u("chunk", CHUNK)?,
        n_chunks: u("chunks", n_chunks)?,
        total: u("elements", x.numel())?,
        eps,
        silu: u32::from(silu),
        _pad: [0; 3],
    };
    let max = u64::from(gpu.device.limits().max_compute_workgroups_per_dimension);
    if n_chunks > max || b * groups > max {
        return Err(bad(
            OP,
            format!(
                "{n_chunks} chunks x {} groups exceed {max} workgroups per dimension",
                b * groups
            ),
        ));
    }
    let _span = tracing::trace_span!("record", op = OP, b, c, hw, groups).entered();
    let stage = |entry: &'static str,
                 bindings: kernel::Bindings<'_>,
                 groups: (u32, u32),
                 cost: kernel::Cost,
                 enc: &mut Encoder| {
        kernel::record(
            gpu,
            cache,
            enc,
            Dispatch {
                source: GROUP_NORM,
                entry,
                constants: &[],
                params: bytemuck::bytes_of(&params),
                bindings,
                groups,
                act: x.dtype,
                cost,
            },
        )
    };
    stage(
        "group_stats",
        smallvec::smallvec![(1, x.binding()), (2, part.binding())],
        (u("chunks", n_chunks)?, u("groups", b * groups)?),
        kernel::Cost::new(2 * x.bytes(), part.bytes(), 3 * x.numel()),
        enc,
    )?;
    stage(
        "group_merge",
        smallvec::smallvec![(2, part.binding()), (3, stats.binding())],
        (u("groups", b * groups)?, 1),
        kernel::Cost::new(part.bytes(), stats.bytes(), 0),
        enc,
    )?;
    stage(
        "group_apply",
        smallvec::smallvec![
            (1, x.binding()),
            (4, stats.binding()),
            (5, weight.binding()),
            (6, bias.binding()),
            (7, out.binding()),
        ],
        kernel::grid(gpu, OP, x.numel(), WG)?,
        kernel::Cost::new(x.bytes(), out.bytes(), 6 * x.numel()),
        enc,
    )
}

/// `len` f32 values of `t` from byte `offset` on.
fn sub(t: &GpuTensor, offset: u64, len: u64) -> GpuTensor {
    GpuTensor {
        buffer: t.buffer.clone(),
        offset: t.offset + offset,
        shape: vec![len],
        dtype: ActDtype::F32,
    }
}
