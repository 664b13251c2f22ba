//! 2-D convolution over NCHW activations (f32 or f16, sums in f32) with
//! weights `[cout, cin, k, k]` decoded as stored (f32, f16 or bf16) and an
//! f32 bias: the VAE's 3×3 and 1×1 convolutions, the decoder's nearest ×2
//! upsampling folded into the input indexing, the encoder's stride-2
//! downsampling with its asymmetric padding, and an optional residual added
//! to the output (a ResNet's skip, the attention's `x + proj_out(h)`).

use dynvram_shaders::vae::CONV2D;

use crate::device::{Gpu, GpuError};
use crate::ops::cache::PipelineCache;
use crate::ops::embed::{TableDtype, region};
use crate::ops::encoder::Encoder;
use crate::ops::kernel::{self, Dispatch, bad, expect_distinct, expect_shape, to_u32};
use crate::tensor::{ActDtype, GpuTensor};

/// `conv2d.wgsl`'s `Params`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    /// Input channels, height and width.
    cin: u32,
    h: u32,
    w: u32,
    /// Output channels, height and width.
    cout: u32,
    hout: u32,
    wout: u32,
    ksize: u32,
    stride: u32,
    pad_top: u32,
    pad_left: u32,
    /// Nearest upsampling factor of the input (1 or 2).
    up: u32,
    /// 1 where a residual is added.
    has_res: u32,
    /// Tiles of 64 output channels.
    n_tiles: u32,
    _pad: [u32; 3],
}
const _: () = assert!(size_of::<Params>() == 64);

const OP: &str = "conv2d";
/// Output pixels and channels per workgroup (`conv2d.wgsl`'s `TM`, `TN`).
const TILE: u64 = 64;

/// A convolution's weight `[cout, cin, k, k]` in a GPU buffer, as stored.
#[derive(Debug, Clone, Copy)]
pub struct ConvWeight<'a> {
    /// The buffer holding it.
    pub buffer: &'a wgpu::Buffer,
    /// Byte offset (a multiple of the storage offset alignment).
    pub offset: u64,
    /// Element type as stored.
    pub dtype: TableDtype,
    /// Output channels.
    pub cout: u64,
    /// Input channels.
    pub cin: u64,
    /// Kernel height and width.
    pub ksize: u64,
}

/// Where a convolution reads its input: padding, stride and upsampling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Nearest-neighbour upsampling of the input before the convolution
    /// (1 = none, 2 = the decoder's `Upsample`).
    pub up: u64,
    /// Stride.
    pub stride: u64,
    /// Zero rows above, below, columns left and right of the (upsampled) input.
    pub pad: [u64; 4],
}

impl Geometry {
    /// Stride 1, `pad` on every side, no upsampling (`ksize = 2·pad + 1`
    /// keeps the size).
    pub fn same(pad: u64) -> Self {
        Self {
            up: 1,
            stride: 1,
            pad: [pad; 4],
        }
    }

    /// The output `(height, width)` of a `ksize` convolution over an
    /// `h × w` input, or `None` where the padded input is smaller than the
    /// kernel (or a factor is 0).
    pub fn out_size(&self, h: u64, w: u64, ksize: u64) -> Option<(u64, u64)> {
        if self.up == 0 || self.stride == 0 || ksize == 0 {
            return None;
        }
        let [top, bottom, left, right] = self.pad;
        let ph = (h * self.up + top + bottom).checked_sub(ksize)?;
        let pw = (w * self.up + left + right).checked_sub(ksize)?;
        Some((ph / self.stride + 1, pw / self.stride + 1))
    }
}

/// Records `out = conv(x, weight) + bias (+ res)`: `x` `[B, cin, H, W]`,
/// `out` (and `res`) `[B, cout, H', W']` with `(H', W')` =
/// [`Geometry::out_size`], all of one activation dtype; `bias` f32 `[cout]`.
#[allow(clippy::too_many_arguments)] // the op's operands
pub fn record_conv2d(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    x: &GpuTensor,
    weight: &ConvWeight<'_>,
    bias: &GpuTensor,
    res: Option<&GpuTensor>,
    out: &GpuTensor,
    geom: Geometry,
) -> Result<(), GpuError> {
    let [b, cin, h, w] = nchw(OP, "x", x)?;
    if cin != weight.cin {
        return Err(bad(
            OP,
            format!(
                "`x` {:?} has {cin} channels, the weight [{}, {}, {k}, {k}] takes {}",
                x.shape,
                weight.cout,
                weight.cin,
                weight.cin,
                k = weight.ksize
            ),
        ));
    }
    let (ho, wo) = geom.out_size(h, w, weight.ksize).ok_or_else(|| {
        bad(
            OP,
            format!(
                "a {k}x{k} kernel does not fit `x` {:?} with {geom:?}",
                x.shape,
                k = weight.ksize
            ),
        )
    })?;
    let cout = weight.cout;
    expect_shape(OP, "out", out, &[b, cout, ho, wo], x.dtype)?;
    kernel::rows_cols(OP, "out", out)?;
    expect_shape(OP, "bias", bias, &[cout], ActDtype::F32)?;
    kernel::rows_cols(OP, "bias", bias)?;
    expect_distinct(OP, out, &[("x", x), ("bias", bias)])?;
    if let Some(r) = res {
        expect_shape(OP, "res", r, &out.shape, x.dtype)?;
        kernel::rows_cols(OP, "res", r)?;
        expect_distinct(OP, out, &[("res", r)])?;
    }
    if *out.buffer == *weight.buffer {
        return Err(bad(OP, "`out` shares a buffer with the weight".into()));
    }
    let [top, _, left, _] = geom.pad;
    if top >= weight.ksize || left >= weight.ksize {
        // Output pixel 0 would read only padding: no convolution does that.
        return Err(bad(
            OP,
            format!(
                "padding {:?} reaches past the kernel ({})",
                geom.pad, weight.ksize
            ),
        ));
    }
    let kdim = cin * weight.ksize * weight.ksize;
    let w_bytes = cout * kdim * weight.dtype.size();
    let w_binding = region(OP, "weight", weight.buffer, weight.offset, w_bytes)?;
    let n_tiles = cout.div_ceil(TILE);
    let px_tiles = (ho * wo).div_ceil(TILE);
    let max = u64::from(gpu.device.limits().max_compute_workgroups_per_dimension);
    if px_tiles > max || b * n_tiles > max {
        return Err(bad(
            OP,
            format!(
                "{ho}x{wo} outputs ({px_tiles} tiles) x {b} images x {n_tiles} channel tiles exceed {max} workgroups per dimension; decode in tiles"
            ),
        ));
    }
    let _span = tracing::trace_span!("record", op = OP, b, cin, cout, ho, wo).entered();
    let u = |what: &str, v: u64| to_u32(OP, what, v);
    // Indices inside the kernel are u32.
    u("input elements", x.numel())?;
    u("output elements", out.numel())?;
    u("weight elements", cout * kdim)?;
    let params = Params {
        cin: u("cin", cin)?,
        h: u("h", h)?,
        w: u("w", w)?,
        cout: u("cout", cout)?,
        hout: u("hout", ho)?,
        wout: u("wout", wo)?,
        ksize: u("ksize", weight.ksize)?,
        stride: u("stride", geom.stride)?,
        pad_top: u("pad_top", top)?,
        pad_left: u("pad_left", left)?,
        up: u("up", geom.up)?,
        has_res: u32::from(res.is_some()),
        n_tiles: u("channel tiles", n_tiles)?,
        _pad: [0; 3],
    };
    kernel::record(
        gpu,
        cache,
        enc,
        Dispatch {
            source: CONV2D,
            entry: "conv2d",
            constants: &[("WDT", weight.dtype.code())],
            params: bytemuck::bytes_of(&params),
            bindings: smallvec::smallvec![
                (1, x.binding()),
                (2, w_binding),
                (3, bias.binding()),
                // Unread without a residual; `x` fills the slot.
                (4, res.unwrap_or(x).binding()),
                (5, out.binding()),
            ],
            groups: (u("pixel tiles", px_tiles)?, u("tiles", b * n_tiles)?),
            act: x.dtype,
            cost: kernel::Cost::new(
                x.bytes() + w_bytes + res.map_or(0, GpuTensor::bytes),
                out.bytes(),
                2 * b * ho * wo * cout * kdim,
            ),
        },
    )
}

/// `t`'s `[batch, channels, height, width]`, checked to lie in its buffer.
pub(crate) fn nchw(op: &'static str, name: &str, t: &GpuTensor) -> Result<[u64; 4], GpuError> {
    kernel::rows_cols(op, name, t)?;
    match t.shape[..] {
        [b, c, h, w] if b * c * h * w > 0 => Ok([b, c, h, w]),
        _ => Err(bad(
            op,
            format!(
                "`{name}` has shape {:?}, expected [batch, channels, height, width]",
                t.shape
            ),
        )),
    }
}
