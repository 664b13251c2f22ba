//! What the forwards share to record raw GPU ops into a block's encoder
//! and to size their activations.

use dynvram_runtime::ops::cache::PipelineCache;
use dynvram_runtime::ops::encoder::Encoder;
use dynvram_runtime::{
    ActDtype, Activation, BlockCtx, Gpu, GpuError, GpuTensor, Runtime, RuntimeError,
};

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

/// One activation of a pass, declared once for both the bytes its
/// model's plan reserves ([`act_bytes`]) and its allocation
/// ([`allocate`]), so the two cannot disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ActShape {
    pub name: &'static str,
    pub shape: Vec<usize>,
    /// F32 whatever the pass's activation dtype (positions, tables).
    pub f32_only: bool,
}

impl ActShape {
    /// An activation in the pass's dtype.
    pub(crate) fn new(name: &'static str, shape: impl Into<Vec<usize>>) -> Self {
        Self {
            name,
            shape: shape.into(),
            f32_only: false,
        }
    }

    /// An activation that is always f32.
    pub(crate) fn f32(name: &'static str, shape: impl Into<Vec<usize>>) -> Self {
        Self {
            f32_only: true,
            ..Self::new(name, shape)
        }
    }

    fn dtype(&self, dtype: ActDtype) -> ActDtype {
        if self.f32_only { ActDtype::F32 } else { dtype }
    }
}

/// Bytes of `shapes` in `dtype`, as their bindings cover them.
pub(crate) fn act_bytes(shapes: &[ActShape], dtype: ActDtype) -> u64 {
    shapes
        .iter()
        .map(|a| word_bytes(a.shape.iter().product(), a.dtype(dtype).size()))
        .sum()
}

/// Allocates `shapes` in `dtype` on `rt`, in order, labelled
/// `{model}.{name}`.
pub(crate) fn allocate(
    rt: &Runtime,
    model: &str,
    shapes: &[ActShape],
    dtype: ActDtype,
) -> Result<Vec<Activation>, RuntimeError> {
    shapes
        .iter()
        .map(|a| rt.activation_of(&format!("{model}.{}", a.name), &a.shape, a.dtype(dtype)))
        .collect()
}
