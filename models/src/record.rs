//! What the forwards share to record raw GPU ops into a block's encoder
//! and to size their activations.

use dynvram_runtime::ops::cache::PipelineCache;
use dynvram_runtime::ops::encoder::Encoder;
use dynvram_runtime::{BlockCtx, Gpu, GpuError, GpuTensor, RuntimeError};

/// Records one raw op (`dynvram_runtime::ops::*::record_*`) into the
/// block's encoder.
pub(crate) fn op(
    ctx: &mut BlockCtx<'_>,
    f: impl FnOnce(&Gpu, &PipelineCache, &mut Encoder) -> Result<(), GpuError>,
) -> Result<(), RuntimeError> {
    let rt = ctx.runtime();
    Ok(f(rt.gpu(), rt.pipelines(), ctx.encoder())?)
}

/// The first `rows × cols` elements of `t` as a `[rows, cols]` tensor.
pub(crate) fn view(t: &GpuTensor, rows: usize, cols: usize) -> GpuTensor {
    debug_assert!((rows * cols) as u64 <= t.numel());
    GpuTensor {
        shape: vec![rows as u64, cols as u64],
        ..t.clone()
    }
}

/// Bytes of an activation of `numel` values of `size` bytes, in whole
/// 4-byte words as its binding covers them.
pub(crate) fn word_bytes(numel: usize, size: u64) -> u64 {
    (numel as u64 * size).div_ceil(4) * 4
}

/// Scratch the linear kernels hold for `rows` of input to the widest layer
/// that quantizes its activations (`widest_integer_k`, 0 when none does:
/// float layers need none).
pub(crate) fn integer_scratch_bytes(rows: usize, widest_integer_k: usize) -> u64 {
    if widest_integer_k == 0 {
        return 0;
    }
    dynvram_runtime::ops::linear::integer_scratch_bytes(rows as u64, widest_integer_k as u64)
}
