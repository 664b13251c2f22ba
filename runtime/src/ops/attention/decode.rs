//! Decode attention (`attention_decode.wgsl`): a step's few query rows
//! over a KV cache, keys split over workgroups (flash-decoding) and the
//! partial softmaxes combined by `attend_combine` where there is more than
//! one split. A workgroup of 128 invocations takes one chunk of keys of one
//! kv head for every query head that reads it; its lanes span the head
//! dimensions in vec4s (coalesced), the lanes of a key summed by subgroup
//! shuffles where the adapter has them, else through workgroup memory.
//! Optionally rotates the queries and the new key rows (RoPE) on the way.

use dynvram_quant::AdapterCaps;
use dynvram_shaders::transformer::{ATTENTION, attention_decode};

use super::scalar::Operands;
use super::shape::{Heads, Span};
use crate::gpu::{Gpu, GpuError};
use crate::ops::cache::PipelineCache;
use crate::ops::encoder::Encoder;
use crate::ops::kernel::{self, Dispatch, bad, to_u32};
use crate::ops::linear::LinearScratch;
use crate::ops::rope::RopeTable;

/// Queries (heads per kv head × rows) one workgroup takes (`MAX_QG`).
const MAX_QUERIES: u64 = 8;

/// Keys a key group takes per step (`U`): 8 where a lane holds at most
/// two query vec4s (the keys' and values' vec4s stay in registers), else 4.
fn step_keys(vec4s: u64) -> u64 {
    if vec4s <= 2 { 8 } else { 4 }
}

/// Workgroups the split aims for at least: two per compute unit of the
/// largest GPUs (132 on an H100/H200).
const TARGET_GROUPS: u64 = 264;

/// Fewest keys per split where there are more keys than that: below,
/// each key group would take less than two steps.
const MIN_CHUNK: u64 = 32;

/// Most keys per split: long caches get more workgroups rather than longer
/// serial loops.
const MAX_CHUNK: u64 = 512;

/// Why the decode kernel cannot take this attention (`None`: it can).
/// `rope`: with RoPE fused.
pub(super) fn unusable(heads: Heads, span: Span, rope: bool) -> Option<String> {
    let queries = heads.n_heads / heads.n_kv_heads * span.sq;
    if span.batch != 1 || queries > MAX_QUERIES {
        return Some(format!(
            "{} batch elements x {queries} queries per kv head (decoding takes 1 x {MAX_QUERIES})",
            span.batch
        ));
    }
    let align = if rope { 8 } else { 4 };
    if !heads.head_dim.is_multiple_of(align) {
        return Some(format!(
            "head_dim {} is not a multiple of {align}",
            heads.head_dim
        ));
    }
    None
}

/// Lanes per key for `head_dim`: its vec4s rounded up to a power of two,
/// 8 to 32 (a lane takes one or two vec4s).
pub fn lanes_per_key(head_dim: u64) -> u64 {
    head_dim.div_ceil(4).next_power_of_two().clamp(8, 32)
}

/// Whether the key groups' sums run on subgroup shuffles: the adapter
/// has subgroups, each at least a key group's lanes.
pub fn uses_subgroups(caps: &AdapterCaps, head_dim: u64) -> bool {
    caps.subgroups && u64::from(caps.subgroup_min_size) >= lanes_per_key(head_dim)
}

/// `(chunk, splits)` for `n_kv` kv heads over `keys` keys: enough splits
/// for `TARGET_GROUPS` (264) workgroups, each at least `MIN_CHUNK` (32) keys (where
/// there are that many) and at most `MAX_CHUNK` (512); chunks are multiples of
/// 16 keys (whole steps of four key groups of 4 keys).
pub fn decode_split(n_kv: u64, keys: u64) -> (u64, u64) {
    let keys = keys.max(1);
    let splits = TARGET_GROUPS
        .div_ceil(n_kv)
        .clamp(keys.div_ceil(MAX_CHUNK), keys.div_ceil(MIN_CHUNK));
    let chunk = keys.div_ceil(splits).next_multiple_of(16);
    (chunk, keys.div_ceil(chunk))
}

/// Records the decode kernel for `span` (checked: [`unusable`] is `None`),
/// then the combine where the keys split; with `rope`, q is read rotated
/// and cache rows `pos0..pos0+sq` of k are rotated in place.
#[allow(clippy::too_many_arguments)] // the op's operands
pub(super) fn record(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    ops: &Operands<'_>,
    heads: Heads,
    span: Span,
    rope: Option<&RopeTable>,
    scratch: &mut LinearScratch,
) -> Result<(), GpuError> {
    const OP: &str = "attention";
    let (n_heads, n_kv_heads, head_dim) = (heads.n_heads, heads.n_kv_heads, heads.head_dim);
    let (chunk, splits) = decode_split(n_kv_heads, span.keys());
    let max_groups = gpu.device.limits().max_compute_workgroups_per_dimension;
    if n_kv_heads * splits > u64::from(max_groups) || n_heads > u64::from(max_groups) {
        return Err(bad(
            OP,
            format!("{n_kv_heads} kv heads x {splits} splits exceed {max_groups} workgroups"),
        ));
    }
    let params = super::scalar::params(heads, span, chunk, splits)?;
    let subgroups = uses_subgroups(&gpu.caps, head_dim);
    let queries = n_heads / n_kv_heads * span.sq;
    let lanes = lanes_per_key(head_dim);
    let slots = head_dim.div_ceil(4).div_ceil(lanes);
    let constants = [
        ("HD", head_dim as f64),
        ("LPK", lanes as f64),
        ("QG", queries as f64),
        ("U", step_keys(queries * slots) as f64),
    ];
    let Operands { q, k, v, out } = *ops;
    let cost = super::cost(q, heads, span);
    let part_bytes = span.sq * n_heads * splits * (head_dim + 2) * 4;
    // The kernel binds both; with one split it writes `out` and not `part`.
    let part = scratch.attention_partials(gpu, part_bytes)?;
    let mut bindings = vec![
        (1, q.binding()),
        (2, k.binding()),
        (3, v.binding()),
        (4, out.binding()),
        (5, part_binding(&part, part_bytes)),
    ];
    let mut rope_bytes = 0;
    if let Some(table) = rope {
        bindings.push((6, table.table.binding()));
        rope_bytes = q.bytes() + span.sq * n_kv_heads * head_dim * (q.dtype.size() + 4);
    }
    let decode_cost = if splits > 1 {
        kernel::Cost::new(cost.bytes - q.bytes() + rope_bytes, part_bytes, cost.flops)
    } else {
        kernel::Cost::new(cost.bytes + rope_bytes, 0, cost.flops)
    };
    kernel::record(
        gpu,
        cache,
        enc,
        Dispatch {
            shader: if rope.is_some() {
                "attention_decode.wgsl+rope"
            } else {
                "attention_decode.wgsl"
            },
            source: attention_decode(subgroups, rope.is_some()),
            entry: "attend_decode",
            constants: &constants,
            params: &params,
            bindings,
            groups: (to_u32(OP, "kv heads * splits", n_kv_heads * splits)?, 1),
            act: q.dtype,
            cost: decode_cost,
        },
    )?;
    if splits == 1 {
        return Ok(());
    }
    let combine_constants = [("HD", head_dim as f64)];
    kernel::record(
        gpu,
        cache,
        enc,
        Dispatch {
            shader: "attention.wgsl",
            source: ATTENTION,
            entry: "attend_combine",
            constants: &combine_constants,
            params: &params,
            bindings: vec![(4, out.binding()), (5, part_binding(&part, part_bytes))],
            groups: (
                to_u32(OP, "n_heads", n_heads)?,
                to_u32(OP, "rows", span.sq)?,
            ),
            act: q.dtype,
            cost: kernel::Cost::new(part_bytes, q.bytes(), 3 * part_bytes / 4),
        },
    )
}

/// A binding of the first `bytes` of the partials' buffer.
fn part_binding(part: &wgpu::Buffer, bytes: u64) -> wgpu::BindingResource<'_> {
    wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer: part,
        offset: 0,
        size: std::num::NonZeroU64::new(bytes),
    })
}

#[cfg(test)]
mod tests {
    use super::{decode_split, lanes_per_key};

    #[test]
    fn decode_split_covers_every_key_in_whole_steps() {
        for n_kv in [1u64, 4, 8, 32, 64] {
            for keys in [
                1u64, 15, 31, 32, 33, 300, 500, 512, 1000, 4096, 32768, 131072,
            ] {
                let (chunk, splits) = decode_split(n_kv, keys);
                assert_eq!(chunk % 16, 0, "{n_kv} {keys}");
                assert!(chunk * splits >= keys, "{n_kv} {keys}: keys left over");
                assert!(chunk * (splits - 1) < keys, "{n_kv} {keys}: an empty split");
                assert!(chunk <= 512 + 15, "{n_kv} {keys}: {chunk}");
                if keys >= 32 {
                    assert!(chunk >= 32, "{n_kv} {keys}: {chunk}");
                }
                // enough workgroups where the keys allow 32-key chunks
                // (less a little for chunks rounded up to whole steps)
                if keys >= 32 * 264 {
                    assert!(n_kv * splits >= 240, "{n_kv} {keys}: {splits}");
                }
            }
        }
        // Llama-7B at 512 keys: 32 kv heads x 8 splits of 64 keys.
        assert_eq!(decode_split(32, 512), (64, 8));
        // Llama-3-8B (8 kv heads) at 512: 16 splits of 32 keys.
        assert_eq!(decode_split(8, 512), (32, 16));
        // Llama-7B at 4096: 9 splits of 464 keys (288 workgroups).
        assert_eq!(decode_split(32, 4096), (464, 9));
        // a long cache: chunks of 512 keys.
        assert_eq!(decode_split(8, 32768), (512, 64));
        // one split up to 32 keys.
        assert_eq!(decode_split(32, 1), (16, 1));
        assert_eq!(decode_split(4, 31), (32, 1));
    }

    #[test]
    fn lanes_per_key_spans_the_head() {
        assert_eq!(lanes_per_key(128), 32);
        assert_eq!(lanes_per_key(256), 32);
        assert_eq!(lanes_per_key(80), 32);
        assert_eq!(lanes_per_key(64), 16);
        assert_eq!(lanes_per_key(16), 8);
    }
}
