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

/// Rows `[row0, row0 + rows)` of the `[_, cols]` tensor `t` as a `[rows,
/// cols]` tensor of the same buffer, where the offset they start at is one
/// a binding may take (`align` bytes); else `None` (copy them instead).
pub(crate) fn row_view(
    t: &GpuTensor,
    row0: usize,
    rows: usize,
    cols: usize,
    align: u64,
) -> Option<GpuTensor> {
    let offset = t.offset + (row0 * cols) as u64 * t.dtype.size();
    ((row0 + rows) as u64 * cols as u64 <= t.numel() && offset.is_multiple_of(align.max(1))).then(
        || GpuTensor {
            offset,
            shape: vec![rows as u64, cols as u64],
            ..t.clone()
        },
    )
}

/// Bytes of an activation of `numel` values of `size` bytes, in whole
/// 4-byte words as its binding covers them.
pub(crate) fn word_bytes(numel: usize, size: u64) -> u64 {
    (numel as u64 * size).div_ceil(4) * 4
}

/// The dtype of an activation of a pass in `dtype`: `f32_only` ones (positions,
/// tables) are f32 whatever the pass's.
fn act_dtype(f32_only: bool, dtype: ActDtype) -> ActDtype {
    if f32_only { ActDtype::F32 } else { dtype }
}

/// Bytes of one activation of a pass in `dtype`, as its binding covers them:
/// what the model's plan reserves for it.
pub(crate) fn act_word_bytes(shape: &[usize], f32_only: bool, dtype: ActDtype) -> u64 {
    word_bytes(shape.iter().product(), act_dtype(f32_only, dtype).size())
}

/// Allocates one activation of `model`'s pass in `dtype` on `rt`, labelled
/// `{model}.{name}`.
pub(crate) fn activation(
    rt: &Runtime,
    model: &str,
    name: &str,
    shape: &[usize],
    f32_only: bool,
    dtype: ActDtype,
) -> Result<Activation, RuntimeError> {
    rt.activation_of(
        &format!("{model}.{name}"),
        shape,
        act_dtype(f32_only, dtype),
    )
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
}

/// Bytes of `shapes` in `dtype`.
pub(crate) fn act_bytes(shapes: &[ActShape], dtype: ActDtype) -> u64 {
    shapes
        .iter()
        .map(|a| act_word_bytes(&a.shape, a.f32_only, dtype))
        .sum()
}

/// Allocates `shapes` in `dtype` on `rt`, in order.
pub(crate) fn allocate(
    rt: &Runtime,
    model: &str,
    shapes: &[ActShape],
    dtype: ActDtype,
) -> Result<Vec<Activation>, RuntimeError> {
    shapes
        .iter()
        .map(|a| activation(rt, model, a.name, &a.shape, a.f32_only, dtype))
        .collect()
}
