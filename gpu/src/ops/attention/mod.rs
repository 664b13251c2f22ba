//! Softmax attention with grouped-query heads — over a KV cache (causal,
//! [`record_attention`]) or over plain k/v of a batch (causal or not,
//! [`record_flash_attention`]) — and the append of new k/v rows into a
//! cache.
//!
//! Layouts (row-major, every operand f32 or every operand f16; scores,
//! softmax and sums in f32): q and out `[rows, n_heads·head_dim]`, k and v
//! `[rows, n_kv_heads·head_dim]`. Scores are `q·k · head_dim^-0.5`; query
//! head h reads kv head `h / (n_heads / n_kv_heads)` (HF `repeat_kv`).
//!
//! Kernel choice (one rule, in [`record_attention`]): a cache attention
//! with at most 8 queries per kv head (decoding) and head_dim a multiple
//! of 4 runs the decode kernel (`decode.rs`); with f16 activations on an
//! adapter with f16 cooperative matrices, blocks of query rows run as flash
//! attention on the matrices (`flash.rs` chooses a [`FlashKernel`]: the
//! two-walk kernel of `two_walk.rs` by default, or the one-walk kernel
//! shaped by a [`FlashTuning`]);
//! every other case runs the scalar kernels (`scalar.rs`), whose keys split
//! over workgroups when there are too few rows to fill the GPU. An
//! additive per-head bias with a score scale of the caller's (T5) runs on
//! its own portable kernel ([`record_attention_bias`], `biased.rs`).

mod biased;
mod coop_blocks;
mod decode;
mod flash;
mod flash_cm2;
mod scalar;
mod shape;
mod two_walk;

use crate::device::{Gpu, GpuError};
use crate::ops::cache::PipelineCache;
use crate::ops::encoder::Encoder;
use crate::ops::kernel::{bad, expect_distinct, expect_dtype, expect_shape, rows_cols};
use crate::ops::linear::LinearScratch;
use crate::ops::rope::RopeTable;
use crate::tensor::GpuTensor;
pub use biased::record_attention_bias;
pub use decode::{DecodeTuning, decode_split, device_tuning, lanes_per_key, uses_subgroups};
pub use dynvram_shaders::flash::{FlashGeometry, FlashKernel, FlashTuning, KvStaging};
pub use flash::{
    DEFAULT_REGISTERS as FLASH_DEFAULT_REGISTERS, choose as flash_kernel_for,
    default_kernel as default_flash_kernel, default_tuning as default_flash_tuning,
    default_tunings as default_flash_tunings, geometry as flash_geometry,
    kernel_unusable as flash_kernel_unusable, tuning_unusable as flash_tuning_unusable,
};
pub use flash_cm2::preferred as preferred_cm2_flash;
use scalar::Operands;
pub use scalar::split_k;
use shape::Span;
// The kernels' cost, for the files below (`super::cost`).
use shape::cost;
pub use shape::{FlashGrid, Heads, MAX_HEAD_DIM};

/// Query rows from which flash attention runs where it can: below, a block
/// of its rows would be mostly padding.
const FLASH_MIN_ROWS: u64 = 16;

/// Which keys a query row sees in [`record_flash_attention`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mask {
    /// Every key of its batch element (a diffusion transformer's joint
    /// attention).
    None,
    /// Query row r of `sq` sees keys `0..=skv - sq + r`: the queries are
    /// the last `sq` positions of the `skv` keys.
    Causal,
}

/// Records `out = softmax(q kᵀ · head_dim^-0.5 + causal mask) v` for the
/// `sq` query rows at positions `pos0..pos0+sq`, over cache rows
/// `0..kv_len` (which must already hold those positions' keys).
///
/// With `rope`, q and the new key rows (cache rows `pos0..pos0+sq` of
/// `k_cache`) are given unrotated: the op rotates them first, exactly as
/// [`crate::ops::rope::record_rope_qk`] does, leaving the rotated keys in
/// the cache — fused into the decode kernel where it runs with all heads
/// of a kv head in one workgroup, else as a launch of its own that rotates
/// q in place (so q's contents afterwards are either).
///
/// The decode kernel runs with the device's [`DecodeTuning`]
/// (`GpuOptions::decode` where it fits, else the default or, on adapters
/// with small workgroups, a smaller one: [`device_tuning`]);
/// [`record_attention_tuned`] takes another.
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
    rope: Option<&RopeTable>,
    scratch: &mut LinearScratch,
) -> Result<(), GpuError> {
    let sq = q.shape.first().copied().unwrap_or(1);
    let tuning = decode::device_tuning(
        &gpu.caps,
        &gpu.device.limits(),
        gpu.decode_tuning(),
        heads,
        sq,
    );
    record_attention_tuned(
        gpu, cache, enc, q, k_cache, v_cache, out, heads, kv_len, pos0, rope, scratch, &tuning,
        None,
    )
}

/// [`record_attention`] with the decode kernel's workgroup size, merge and
/// split policy from `tuning`, and the flash kernel `flash` where the query
/// rows run as flash attention (`None`: the device's choice,
/// [`default_flash_kernel`] or `GpuOptions::flash`), for tools and tests
/// that time or check others. A tuning or kernel the adapter cannot run is
/// an error where that kernel runs (see [`DecodeTuning::unusable`],
/// [`flash_kernel_unusable`]); the other kernels do not read them.
#[allow(clippy::too_many_arguments)] // the op's operands
pub fn record_attention_tuned(
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
    rope: Option<&RopeTable>,
    scratch: &mut LinearScratch,
    tuning: &DecodeTuning,
    flash: Option<&FlashKernel>,
) -> Result<(), GpuError> {
    const OP: &str = "attention";
    let (sq, max_seq) = check(OP, q, k_cache, v_cache, out, heads)?;
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
    if let Some(table) = rope
        && (table.head_dim != heads.head_dim || pos0 + sq > table.positions)
    {
        return Err(bad(
            OP,
            format!(
                "the RoPE table ({} positions, head_dim {}) does not cover positions {pos0}..{} of head_dim {}",
                table.positions,
                table.head_dim,
                pos0 + sq,
                heads.head_dim
            ),
        ));
    }
    let _span = tracing::trace_span!("record", op = OP, sq, kv_len, pos0).entered();
    let span = Span {
        batch: 1,
        sq,
        kv_rows: max_seq,
        kv_len,
        pos0,
        causal: true,
    };
    let ops = Operands {
        q,
        k: k_cache,
        v: v_cache,
        out,
    };
    let fused = rope.filter(|_| decode::fuses_rope(heads, span, tuning));
    if let Some(table) = rope.filter(|_| fused.is_none()) {
        crate::ops::rope::record_rope_q_cache(
            gpu,
            cache,
            enc,
            table,
            [q, k_cache],
            (heads.n_heads, heads.n_kv_heads),
            pos0,
        )?;
    }
    if decode::takes(heads, span, false) {
        return decode::record(gpu, cache, enc, &ops, heads, span, fused, scratch, tuning);
    }
    if sq >= FLASH_MIN_ROWS {
        if let Some(k) = flash {
            return flash::record_kernel(gpu, cache, enc, &ops, heads, span, k);
        }
        // The cheap test first: `choose` says why not in words.
        if gpu.caps.f16_coop_matrices()
            && let Ok(k) = flash::choose(gpu, q.dtype, heads.head_dim, FlashGrid::of(heads, span))
        {
            return flash::record_kernel(gpu, cache, enc, &ops, heads, span, &k);
        }
    }
    scalar::record(gpu, cache, enc, &ops, heads, span, Some(scratch))
}

/// Records `out = softmax(q kᵀ · head_dim^-0.5 [+ mask]) v` for `batch`
/// elements: q and out `[batch·sq, n_heads·head_dim]`, k and v
/// `[batch·skv, n_kv_heads·head_dim]` (element b's rows contiguous). Flash
/// attention on cooperative matrices where the adapter and dtype allow
/// (the device's choice of kernel: [`default_flash_kernel`] or
/// `GpuOptions::flash`), else the scalar kernel; no memory is allocated
/// either way.
#[allow(clippy::too_many_arguments)] // the op's operands
pub fn record_flash_attention(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    q: &GpuTensor,
    k: &GpuTensor,
    v: &GpuTensor,
    out: &GpuTensor,
    heads: Heads,
    batch: u64,
    mask: Mask,
) -> Result<(), GpuError> {
    record_flash_attention_tuned(gpu, cache, enc, q, k, v, out, heads, batch, mask, None)
}

/// [`record_flash_attention`] with the flash kernel `kernel` (for tools
/// and tests that time or check others): it is an error where the adapter
/// cannot run it ([`flash_kernel_unusable`]); `None` is the device's
/// choice.
#[allow(clippy::too_many_arguments)] // the op's operands
pub fn record_flash_attention_tuned(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    q: &GpuTensor,
    k: &GpuTensor,
    v: &GpuTensor,
    out: &GpuTensor,
    heads: Heads,
    batch: u64,
    mask: Mask,
    kernel: Option<&FlashKernel>,
) -> Result<(), GpuError> {
    const OP: &str = "flash_attention";
    let (q_rows, kv_rows) = check(OP, q, k, v, out, heads)?;
    if batch == 0 || !q_rows.is_multiple_of(batch) || !kv_rows.is_multiple_of(batch) {
        return Err(bad(
            OP,
            format!(
                "{q_rows} query rows and {kv_rows} key rows do not split into {batch} batch elements"
            ),
        ));
    }
    let (sq, skv) = (q_rows / batch, kv_rows / batch);
    let causal = mask == Mask::Causal;
    if causal && sq > skv {
        return Err(bad(
            OP,
            format!(
                "a causal mask needs at least as many keys ({skv}) as queries ({sq}) per element"
            ),
        ));
    }
    let _span = tracing::trace_span!("record", op = OP, batch, sq, skv).entered();
    let span = Span {
        batch,
        sq,
        kv_rows: skv,
        kv_len: skv,
        pos0: if causal { skv - sq } else { 0 },
        causal,
    };
    let ops = Operands { q, k, v, out };
    if let Some(k) = kernel {
        return flash::record_kernel(gpu, cache, enc, &ops, heads, span, k);
    }
    match flash::choose(gpu, q.dtype, heads.head_dim, FlashGrid::of(heads, span)) {
        Ok(k) => flash::record_kernel(gpu, cache, enc, &ops, heads, span, &k),
        Err(why) => {
            tracing::trace!(%why, "flash attention on scalar kernels");
            scalar::record(gpu, cache, enc, &ops, heads, span, None)
        }
    }
}

/// Why blocks of query rows with `act` activations and head dimension
/// `head_dim` cannot run as flash attention on cooperative matrices on
/// this adapter (they run on the scalar kernels then), or `None` when they
/// can.
pub fn flash_unusable(
    caps: &dynvram_quant::AdapterCaps,
    act: crate::ActDtype,
    head_dim: u64,
) -> Option<String> {
    flash::unusable(caps, act, head_dim)
}

/// Why `sq` query rows over a cache with `heads` would not run on the
/// decode kernel (with RoPE fused where `rope`), or `None` when they would
/// (and take its [`DecodeTuning`]).
pub fn decode_unusable(heads: Heads, sq: u64, rope: bool) -> Option<String> {
    decode::unusable(heads, decode_span(sq), rope)
}

/// Whether `sq` query rows over a cache with `heads` run RoPE inside the
/// decode kernel with `tuning` (as [`record_attention_tuned`] decides),
/// rather than as a launch of its own.
pub fn decode_fuses_rope(heads: Heads, sq: u64, tuning: &DecodeTuning) -> bool {
    decode::fuses_rope(heads, decode_span(sq), tuning)
}

/// A span of `sq` rows at the start of a cache of as many: what the decode
/// kernel's choices depend on (batch 1, the rows), without a cache.
fn decode_span(sq: u64) -> Span {
    Span {
        batch: 1,
        sq,
        kv_rows: sq,
        kv_len: sq,
        pos0: 0,
        causal: true,
    }
}

/// Checks the operands of both forms; returns the rows of q and of k.
fn check(
    op: &'static str,
    q: &GpuTensor,
    k: &GpuTensor,
    v: &GpuTensor,
    out: &GpuTensor,
    heads: Heads,
) -> Result<(u64, u64), GpuError> {
    heads.check(op)?;
    let Heads {
        n_heads,
        n_kv_heads,
        head_dim,
    } = heads;
    let (sq, q_cols) = rows_cols(op, "q", q)?;
    if q.shape.len() != 2 || q_cols != n_heads * head_dim {
        return Err(bad(
            op,
            format!(
                "`q` {:?} is not [rows, n_heads * head_dim] = [rows, {n_heads} * {head_dim}]",
                q.shape
            ),
        ));
    }
    let act = q.dtype;
    expect_dtype(op, "k", k, act)?;
    let (kv_rows, kv_cols) = rows_cols(op, "k", k)?;
    if k.shape.len() != 2 || kv_cols != n_kv_heads * head_dim {
        return Err(bad(
            op,
            format!(
                "`k` {:?} is not [rows, n_kv_heads * head_dim] = [rows, {n_kv_heads} * {head_dim}]",
                k.shape
            ),
        ));
    }
    expect_shape(op, "v", v, &k.shape, act)?;
    expect_shape(op, "out", out, &q.shape, act)?;
    rows_cols(op, "v", v)?;
    rows_cols(op, "out", out)?;
    expect_distinct(op, out, &[("q", q), ("k", k), ("v", v)])?;
    Ok((sq, kv_rows))
}

/// An adapter with f16 cooperative matrices of edge `edge`, subgroups of
/// `sg` invocations and `storage` bytes of workgroup memory (the flash
/// kernels' unit tests).
#[cfg(test)]
fn coop_caps(edge: u32, sg: u32, storage: u32) -> dynvram_quant::AdapterCaps {
    dynvram_quant::AdapterCaps {
        shader_f16: true,
        subgroups: true,
        subgroup_min_size: sg,
        subgroup_max_size: sg,
        coop_matrix_edge: edge,
        max_workgroup_storage: storage,
        max_invocations_per_workgroup: 1024,
        ..dynvram_quant::AdapterCaps::baseline("test", "vulkan")
    }
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
    if width != cache_width {
        return Err(bad(
            OP,
            format!(
                "rows {:?} are not as wide as cache {:?} ({width} vs {cache_width})",
                rows.shape, cache_t.shape,
            ),
        ));
    }
    if pos0 + s > max_seq {
        return Err(GpuError::PastEnd {
            op: OP,
            what: "rows",
            start: pos0,
            end: pos0 + s,
            len: max_seq,
            of: format!("`cache` {:?}", cache_t.shape),
        });
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
