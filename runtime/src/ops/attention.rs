//! Causal softmax attention with grouped-query heads over a KV cache, and
//! the append of new k/v rows into that cache.
//!
//! Layouts (row-major, every operand f32 or every operand f16; scores,
//! softmax and sums in f32): q and out `[sq, n_heads·head_dim]`, caches
//! `[max_seq, n_kv_heads·head_dim]` with rows `0..kv_len` valid. Query row r
//! sits at position `pos0 + r` and sees keys `0..=pos0 + r`. Scores are
//! `q·k · head_dim^-0.5`, softmax in f32; query head h reads kv head
//! `h / (n_heads / n_kv_heads)` (HF `repeat_kv`).

use dynvram_shaders::transformer::ATTENTION;

use crate::gpu::{Gpu, GpuError};
use crate::ops::cache::PipelineCache;
use crate::ops::encoder::Encoder;
use crate::ops::kernel::{
    self, Dispatch, bad, expect_distinct, expect_dtype, expect_shape, rows_cols, to_u32,
};
use crate::ops::linear::LinearScratch;
use crate::tensor::GpuTensor;

/// Largest head dimension the kernel holds in workgroup memory.
pub const MAX_HEAD_DIM: u64 = 256;

/// Head layout of one attention layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heads {
    /// Query heads.
    pub n_heads: u64,
    /// Key/value heads (divides `n_heads`).
    pub n_kv_heads: u64,
    /// Dimension of each head (≤ [`MAX_HEAD_DIM`]).
    pub head_dim: u64,
}

impl Heads {
    fn check(self, op: &'static str) -> Result<(), GpuError> {
        let Self {
            n_heads,
            n_kv_heads,
            head_dim,
        } = self;
        if n_heads == 0 || n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
            return Err(bad(
                op,
                format!("n_heads {n_heads} must be a non-zero multiple of n_kv_heads {n_kv_heads}"),
            ));
        }
        if head_dim == 0 || head_dim > MAX_HEAD_DIM {
            return Err(bad(
                op,
                format!("head_dim {head_dim} must be in 1..={MAX_HEAD_DIM}"),
            ));
        }
        Ok(())
    }
}

/// Records `out = softmax(q kᵀ · head_dim^-0.5 + causal mask) v` for the
/// `sq` query rows at positions `pos0..pos0+sq`, over cache rows
/// `0..kv_len` (which must already hold those positions' keys).
#[allow(clippy::too_many_arguments)] // the op's operands
pub fn record_attention(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    q: &GpuTensor,
    k_cache: &GpuTensor,
    v_cache: &GpuTensor,
    out: &GpuTensor,
    heads: Heads,
    kv_len: u64,
    pos0: u64,
    scratch: &mut LinearScratch,
) -> Result<(), GpuError> {
    const OP: &str = "attention";
    heads.check(OP)?;
    let Heads {
        n_heads,
        n_kv_heads,
        head_dim,
    } = heads;
    let (sq, q_cols) = rows_cols(OP, "q", q)?;
    if q.shape.len() != 2 || q_cols != n_heads * head_dim {
        return Err(bad(
            OP,
            format!(
                "`q` {:?} is not [sq, n_heads * head_dim] = [sq, {n_heads} * {head_dim}]",
                q.shape
            ),
        ));
    }
    let act = q.dtype;
    expect_dtype(OP, "k_cache", k_cache, act)?;
    let (max_seq, kv_cols) = rows_cols(OP, "k_cache", k_cache)?;
    if k_cache.shape.len() != 2 || kv_cols != n_kv_heads * head_dim {
        return Err(bad(
            OP,
            format!(
                "`k_cache` {:?} is not [max_seq, n_kv_heads * head_dim] = [max_seq, {n_kv_heads} * {head_dim}]",
                k_cache.shape
            ),
        ));
    }
    expect_shape(OP, "v_cache", v_cache, &k_cache.shape, act)?;
    expect_shape(OP, "out", out, &q.shape, act)?;
    rows_cols(OP, "v_cache", v_cache)?;
    rows_cols(OP, "out", out)?;
    expect_distinct(
        OP,
        out,
        &[("q", q), ("k_cache", k_cache), ("v_cache", v_cache)],
    )?;
    if kv_len > max_seq || pos0 + sq > kv_len {
        return Err(bad(
            OP,
            format!(
                "queries at positions {pos0}..{} need kv_len >= {} and kv_len {kv_len} <= cache rows {max_seq}",
                pos0 + sq,
                pos0 + sq
            ),
        ));
    }
    let max_groups = u64::from(gpu.device.limits().max_compute_workgroups_per_dimension);
    if n_heads > max_groups || sq > max_groups {
        return Err(bad(
            OP,
            format!(
                "{n_heads} heads x {sq} query rows exceed {max_groups} workgroups per dimension"
            ),
        ));
    }
    let _span = tracing::trace_span!("record", op = OP, sq, kv_len, pos0).entered();
    let scale = (1.0 / (head_dim as f64).sqrt()) as f32;
    let (chunk, splits) = split_k(n_heads * sq, pos0 + sq);
    let params = kernel::params(&[
        to_u32(OP, "sq", sq)?,
        to_u32(OP, "n_heads", n_heads)?,
        to_u32(OP, "n_kv_heads", n_kv_heads)?,
        to_u32(OP, "head_dim", head_dim)?,
        to_u32(OP, "kv_len", kv_len)?,
        to_u32(OP, "pos0", pos0)?,
        scale.to_bits(),
        to_u32(OP, "chunk", chunk)?,
        to_u32(OP, "splits", splits)?,
    ]);
    let groups = (to_u32(OP, "n_heads", n_heads)?, to_u32(OP, "sq", sq)?);
    let cost = attention_cost(q, heads, kv_len, pos0, sq);
    let constants = [("HD", head_dim as f64)];
    let dispatch = |entry, bindings, groups, cost| Dispatch {
        shader: "attention.wgsl",
        source: ATTENTION,
        entry,
        constants: &constants,
        params: &params,
        bindings,
        groups,
        act,
        cost,
    };
    let main_bindings = vec![
        (1, q.binding()),
        (2, k_cache.binding()),
        (3, v_cache.binding()),
    ];
    // Up to a tile of keys one narrow workgroup per (head, row) is enough;
    // past it the wide split kernel reads keys faster even unsplit.
    if pos0 + sq <= KEY_TILE {
        let mut bindings = main_bindings;
        bindings.push((4, out.binding()));
        return kernel::record(gpu, cache, enc, dispatch("attend", bindings, groups, cost));
    }
    if n_heads * splits > max_groups {
        return Err(bad(
            OP,
            format!("{n_heads} heads x {splits} splits exceed {max_groups} workgroups"),
        ));
    }
    let part_bytes = sq * n_heads * splits * (head_dim + 2) * 4;
    let part = scratch.attention_partials(gpu, part_bytes)?;
    let part_binding = || {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &part,
            offset: 0,
            size: std::num::NonZeroU64::new(part_bytes),
        })
    };
    let mut bindings = main_bindings;
    bindings.push((5, part_binding()));
    let split_groups = (to_u32(OP, "n_heads * splits", n_heads * splits)?, groups.1);
    let split_cost = kernel::Cost::new(cost.bytes - q.bytes(), part_bytes, cost.flops);
    kernel::record(
        gpu,
        cache,
        enc,
        dispatch("attend_split", bindings, split_groups, split_cost),
    )?;
    let combine = vec![(4, out.binding()), (5, part_binding())];
    let combine_cost = kernel::Cost::new(part_bytes, q.bytes(), 3 * part_bytes / 4);
    kernel::record(
        gpu,
        cache,
        enc,
        dispatch("attend_combine", combine, groups, combine_cost),
    )
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

/// Bytes (q, out, and the visible cache rows once per kv head) and FLOPs
/// (q·k and p·v over the keys each query row sees) of one attention.
fn attention_cost(q: &GpuTensor, heads: Heads, kv_len: u64, pos0: u64, sq: u64) -> kernel::Cost {
    let row = heads.n_kv_heads * heads.head_dim * q.dtype.size();
    let visible = sq * pos0 + sq * (sq + 1) / 2;
    kernel::Cost::new(
        q.bytes() + 2 * kv_len * row,
        q.bytes(),
        4 * heads.n_heads * heads.head_dim * visible,
    )
}

/// Records a copy of `rows` `[s, width]` into cache rows `pos0..pos0+s` of
/// `cache_t` `[max_seq, width]` (both need `COPY_SRC`/`COPY_DST` usage, as
/// every [`GpuTensor`] buffer has).
pub fn record_kv_write(
    enc: &mut Encoder,
    rows: &GpuTensor,
    cache_t: &GpuTensor,
    pos0: u64,
) -> Result<(), GpuError> {
    const OP: &str = "kv_write";
    let (s, width) = rows_cols(OP, "rows", rows)?;
    let (max_seq, cache_width) = rows_cols(OP, "cache", cache_t)?;
    if width != cache_width || pos0 + s > max_seq {
        return Err(bad(
            OP,
            format!(
                "rows {:?} at position {pos0} do not fit cache {:?} (widths {width} vs {cache_width}, rows {}..{} of {max_seq})",
                rows.shape,
                cache_t.shape,
                pos0,
                pos0 + s
            ),
        ));
    }
    expect_distinct(OP, cache_t, &[("rows", rows)])?;
    expect_dtype(OP, "cache", cache_t, rows.dtype)?;
    let row_bytes = width * rows.dtype.size();
    let dst = cache_t.offset + pos0 * row_bytes;
    if !rows.offset.is_multiple_of(4)
        || !dst.is_multiple_of(4)
        || !(s * row_bytes).is_multiple_of(4)
    {
        return Err(bad(
            OP,
            format!(
                "copies must be whole 4-byte words: {s} rows of {row_bytes} bytes from byte {} to byte {dst}",
                rows.offset
            ),
        ));
    }
    enc.commands().copy_buffer_to_buffer(
        &rows.buffer,
        rows.offset,
        &cache_t.buffer,
        dst,
        s * row_bytes,
    );
    Ok(())
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
