//! Single-head softmax attention over the positions of NCHW feature maps
//! (the VAE mid-block's `attn_1`): q, k, v and out `[B, C, H, W]` of one
//! activation dtype, scores `q·k / √C`, softmax and sums in f32. Portable
//! (no subgroups, no matrix units): a flash-attention walk over the keys
//! with the queries in workgroup memory, for C up to [`MAX_CHANNELS`]
//! (the existing attention kernels take head widths up to 256; the VAE's is
//! 512).

use dynvram_shaders::vae::SPATIAL_ATTENTION;

use crate::device::{Gpu, GpuError};
use crate::ops::cache::PipelineCache;
use crate::ops::conv::nchw;
use crate::ops::encoder::Encoder;
use crate::ops::kernel::{self, Dispatch, bad, expect_distinct, expect_shape, to_u32};
use crate::tensor::GpuTensor;

/// `spatial_attention.wgsl`'s `Params`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    /// Channels (the head width).
    c: u32,
    /// Positions (height · width).
    n: u32,
    /// The scores' factor, `1/√c`.
    scale: f32,
    _pad0: u32,
}
const _: () = assert!(size_of::<Params>() == 16);

const OP: &str = "spatial_attention";
/// Widest channel count (`spatial_attention.wgsl`'s `MAX_C`).
pub const MAX_CHANNELS: u64 = 512;
/// Queries per workgroup (`TQ`).
const QUERIES: u64 = 4;

/// Records `out[b, :, i] = Σ_j softmax_j(q[b, :, i]·k[b, :, j] / √C) v[b, :, j]`
/// over the `H·W` positions of each image.
#[allow(clippy::too_many_arguments)] // the op's operands
pub fn record_spatial_attention(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    q: &GpuTensor,
    k: &GpuTensor,
    v: &GpuTensor,
    out: &GpuTensor,
) -> Result<(), GpuError> {
    let [b, c, h, w] = nchw(OP, "q", q)?;
    if c > MAX_CHANNELS {
        return Err(bad(
            OP,
            format!("{c} channels exceed the kernel's {MAX_CHANNELS}"),
        ));
    }
    for (name, t) in [("k", k), ("v", v), ("out", out)] {
        expect_shape(OP, name, t, &q.shape, q.dtype)?;
        kernel::rows_cols(OP, name, t)?;
    }
    expect_distinct(OP, out, &[("q", q), ("k", k), ("v", v)])?;
    let n = h * w;
    to_u32(OP, "elements", q.numel())?;
    let scale = (1.0 / (c as f64).sqrt()) as f32;
    let params = Params {
        c: to_u32(OP, "channels", c)?,
        n: to_u32(OP, "positions", n)?,
        scale,
        _pad0: 0,
    };
    let tiles = n.div_ceil(QUERIES);
    let max = u64::from(gpu.device.limits().max_compute_workgroups_per_dimension);
    if tiles > max || b > max {
        return Err(bad(
            OP,
            format!("{n} positions x {b} images exceed {max} workgroups per dimension"),
        ));
    }
    let _span = tracing::trace_span!("record", op = OP, b, c, n).entered();
    kernel::record(
        gpu,
        cache,
        enc,
        Dispatch {
            source: SPATIAL_ATTENTION,
            entry: "spatial_attention",
            constants: &[],
            params: bytemuck::bytes_of(&params),
            bindings: smallvec::smallvec![
                (1, q.binding()),
                (2, k.binding()),
                (3, v.binding()),
                (4, out.binding()),
            ],
            groups: (to_u32(OP, "query tiles", tiles)?, to_u32(OP, "batch", b)?),
            act: q.dtype,
            cost: kernel::Cost::new(
                q.bytes() + tiles * (k.bytes() + v.bytes()) / b.max(1),
                out.bytes(),
                4 * b * n * n * c,
            ),
        },
    )
}
