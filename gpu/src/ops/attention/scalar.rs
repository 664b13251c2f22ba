//! The scalar attention kernels (`attention.wgsl`): one workgroup per
//! (head, query row) with an online softmax, and where few (head, row)
//! pairs would leave a GPU idle, the keys split over workgroups and the
//! partial softmaxes combined. They run on every adapter, any head_dim and
//! in f32; decoding's rows run on `decode.rs` where it can.

use dynvram_shaders::transformer::ATTENTION;

use super::shape::{Heads, Span};
use crate::device::{Gpu, GpuError};
use crate::ops::cache::PipelineCache;
use crate::ops::encoder::Encoder;
use crate::ops::kernel::{self, Dispatch, bad, to_u32};
use crate::ops::linear::LinearScratch;
use crate::tensor::GpuTensor;

/// The operands of one attention (checked by the caller).
pub(super) struct Operands<'a> {
    pub q: &'a GpuTensor,
    pub k: &'a GpuTensor,
    pub v: &'a GpuTensor,
    pub out: &'a GpuTensor,
}

/// Records the scalar kernels for `span`; the keys are split over
/// workgroups only where `scratch` is given for the partials.
pub(super) fn record(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    ops: &Operands<'_>,
    heads: Heads,
    span: Span,
    scratch: Option<&mut LinearScratch>,
) -> Result<(), GpuError> {
    const OP: &str = "attention";
    let Heads {
        n_heads, head_dim, ..
    } = heads;
    let Operands { q, k, v, out } = *ops;
    let rows = span.batch * span.sq;
    let max_groups = u64::from(gpu.device.limits().max_compute_workgroups_per_dimension);
    if n_heads > max_groups || rows > max_groups {
        return Err(bad(
            OP,
            format!(
                "{n_heads} heads x {rows} query rows exceed {max_groups} workgroups per dimension"
            ),
        ));
    }
    let keys = span.keys();
    let (chunk, splits) = match scratch {
        Some(_) => split_k(n_heads * rows, keys),
        None => (keys, 1),
    };
    let params = params(heads, span, chunk, splits)?;
    let groups = (to_u32(OP, "n_heads", n_heads)?, to_u32(OP, "rows", rows)?);
    let cost = super::cost(q, heads, span);
    let constants = [("HD", head_dim as f64)];
    let act = q.dtype;
    let dispatch = |entry, bindings, groups, cost| Dispatch {
        source: ATTENTION,
        entry,
        constants: &constants,
        params: &params,
        bindings,
        groups,
        act,
        cost,
    };
    let main_bindings = [(1, q.binding()), (2, k.binding()), (3, v.binding())];
    // Up to a tile of keys one narrow workgroup per (head, row) is enough;
    // past it the wide split kernel reads keys faster even unsplit.
    let Some(scratch) = scratch.filter(|_| keys > KEY_TILE) else {
        let mut bindings: kernel::Bindings<'_> = main_bindings.into_iter().collect();
        bindings.push((4, out.binding()));
        return kernel::record(gpu, cache, enc, dispatch("attend", bindings, groups, cost));
    };
    if n_heads * splits > max_groups {
        return Err(bad(
            OP,
            format!("{n_heads} heads x {splits} splits exceed {max_groups} workgroups"),
        ));
    }
    let part_bytes = rows * n_heads * splits * (head_dim + 2) * 4;
    let part = scratch.attention_partials(gpu, part_bytes)?;
    let part_binding = || {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &part,
            offset: 0,
            size: std::num::NonZeroU64::new(part_bytes),
        })
    };
    let mut bindings: kernel::Bindings<'_> = main_bindings.into_iter().collect();
    bindings.push((5, part_binding()));
    let split_cost = kernel::Cost::new(cost.bytes - q.bytes(), part_bytes, cost.flops);
    let split_groups = (to_u32(OP, "n_heads * splits", n_heads * splits)?, groups.1);
    kernel::record(
        gpu,
        cache,
        enc,
        dispatch("attend_split", bindings, split_groups, split_cost),
    )?;
    let combine: kernel::Bindings<'_> =
        smallvec::smallvec![(4, out.binding()), (5, part_binding())];
    let combine_cost = kernel::Cost::new(part_bytes, q.bytes(), 3 * part_bytes / 4);
    kernel::record(
        gpu,
        cache,
        enc,
        dispatch("attend_combine", combine, groups, combine_cost),
    )
}

/// `attention_params.wgsl`'s `Params` (of `attention.wgsl` and
/// `attention_decode.wgsl`), field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    sq: u32,
    n_heads: u32,
    n_kv: u32,
    head_dim: u32,
    kv_len: u32,
    pos0: u32,
    scale: f32,
    /// Split-K: keys per split and splits per query row.
    chunk: u32,
    splits: u32,
    kv_rows: u32,
    causal: u32,
    _pad: u32,
}
const _: () = assert!(size_of::<Params>() == 48);

/// The attention kernels' params: `chunk` keys per split, `splits` per
/// query row.
pub(super) fn params(
    heads: Heads,
    span: Span,
    chunk: u64,
    splits: u64,
) -> Result<kernel::Immediates, GpuError> {
    let scale = (1.0 / (heads.head_dim as f64).sqrt()) as f32;
    params_scaled(heads, span, chunk, splits, scale)
}

/// [`params`] with the scores scaled by `scale` instead of head_dim^-0.5.
pub(super) fn params_scaled(
    heads: Heads,
    span: Span,
    chunk: u64,
    splits: u64,
    scale: f32,
) -> Result<kernel::Immediates, GpuError> {
    const OP: &str = "attention";
    let p = Params {
        sq: to_u32(OP, "sq", span.sq)?,
        n_heads: to_u32(OP, "n_heads", heads.n_heads)?,
        n_kv: to_u32(OP, "n_kv_heads", heads.n_kv_heads)?,
        head_dim: to_u32(OP, "head_dim", heads.head_dim)?,
        kv_len: to_u32(OP, "kv_len", span.kv_len)?,
        pos0: to_u32(OP, "pos0", span.pos0)?,
        scale,
        chunk: to_u32(OP, "chunk", chunk)?,
        splits: to_u32(OP, "splits", splits)?,
        kv_rows: to_u32(OP, "kv_rows", span.kv_rows)?,
        causal: u32::from(span.causal),
        _pad: 0,
    };
    Ok(kernel::Immediates::from_slice(bytemuck::bytes_of(&p)))
}

/// Query (head, row) pairs below which the keys are split over workgroups:
/// fewer would leave most of a large GPU idle.
const SPLIT_BELOW_PAIRS: u64 = 1024;

/// Workgroups a split attention aims for (a few waves on the largest GPUs).
const SPLIT_TARGET_GROUPS: u64 = 2048;

/// Keys per workgroup tile (`attention.wgsl`'s `WG`).
const KEY_TILE: u64 = 64;

/// `(chunk, splits)`: keys per split and splits per query row for `pairs`
/// (head, row) pairs over at most `keys` visible keys; `(keys, 1)` where
/// one workgroup per pair is enough. Chunks are whole key tiles.
pub fn split_k(pairs: u64, keys: u64) -> (u64, u64) {
    if pairs >= SPLIT_BELOW_PAIRS || keys <= KEY_TILE {
        return (keys, 1);
    }
    let want = (SPLIT_TARGET_GROUPS / pairs).clamp(1, keys.div_ceil(KEY_TILE));
    let chunk = keys.div_ceil(want).next_multiple_of(KEY_TILE);
    (chunk, keys.div_ceil(chunk))
}

#[cfg(test)]
mod tests {
    use super::split_k;

    #[test]
    fn split_k_covers_every_key_once() {
        for pairs in [1u64, 8, 32, 64, 1023, 1024, 5000] {
            for keys in [1u64, 63, 64, 65, 500, 512, 1500, 4096, 32768] {
                let (chunk, splits) = split_k(pairs, keys);
                assert!(chunk * splits >= keys, "{pairs} {keys}");
                assert!(
                    chunk * (splits - 1) < keys,
                    "{pairs} {keys}: an empty split"
                );
                if splits > 1 {
                    assert_eq!(chunk % 64, 0);
                }
            }
        }
        assert_eq!(split_k(32, 512), (64, 8));
        assert_eq!(split_k(2048, 512), (512, 1));
    }
}
