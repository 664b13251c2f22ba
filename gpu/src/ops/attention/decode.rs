//! Decode attention (`attention_decode.wgsl`): a step's few query rows
//! over a KV cache, keys split over workgroups (flash-decoding) and the
//! partial softmaxes combined by `attend_combine` where there is more than
//! one split. A workgroup of 256 invocations takes one chunk of keys of one
//! kv head for one query head, or for every query head that reads it; its
//! lanes span the head dimensions in vec4s (coalesced), the lanes of a key
//! summed by subgroup shuffles where the adapter has them, else through
//! workgroup memory. Optionally rotates the queries and the new key rows
//! (RoPE) on the way, where one workgroup takes all heads of a kv head.
//!
//! The workgroup size, the merge of its key groups and the split policy are
//! a [`DecodeTuning`] (its default: 256 invocations, splits for 132
//! workgroups, key groups merged four at a time, one query head a
//! workgroup), so that a tool can time others on a real GPU.

use std::fmt;

use dynvram_quant::AdapterCaps;
use dynvram_shaders::transformer::{ATTENTION, DecodeShape, attention_decode, with_decode_shape};

use super::scalar::Operands;
use super::shape::{Heads, Span};
pub use crate::decode_tuning::DecodeTuning;
use crate::device::{Gpu, GpuError};
use crate::ops::cache::{Generated, PipelineCache, Program};
use crate::ops::encoder::Encoder;
use crate::ops::kernel::{self, Dispatch, bad, to_u32};
use crate::ops::launch::{Launch, launch};
use crate::ops::linear::LinearScratch;
use crate::ops::rope::RopeTable;

/// Queries (heads per kv head × rows) one workgroup takes (`MAX_QG`).
const MAX_QUERIES: u64 = 8;

/// Keys a key group takes per step (`U`): 8 where a lane holds at most
/// two query vec4s (the keys' and values' vec4s stay in registers), else 4.
fn step_keys(vec4s: u64) -> u64 {
    if vec4s <= 2 { 8 } else { 4 }
}

impl DecodeTuning {
    /// Workgroups of a split for `heads`: one per kv head and each
    /// workgroup's share of its query heads.
    pub fn workgroups_per_split(&self, heads: Heads) -> u64 {
        heads.n_heads / self.heads_per_workgroup(heads.group())
    }

    /// Queries a workgroup holds for `sq` rows of `heads`: its heads
    /// times the rows (what [`Self::unusable`] is asked about).
    pub fn queries(&self, heads: Heads, sq: u64) -> u64 {
        self.heads_per_workgroup(heads.group()) * sq
    }

    /// Why this tuning cannot run on an adapter of `caps` and `limits` for
    /// `queries` queries per kv head of `head_dim` (`None`: it can).
    pub fn unusable(
        &self,
        caps: &AdapterCaps,
        limits: &wgpu::Limits,
        head_dim: u64,
        queries: u64,
    ) -> Option<String> {
        self.misfit(caps, limits, head_dim, queries)
            .map(|m| m.describe(self, head_dim, queries, caps))
    }

    /// Which limit this tuning breaks ([`Self::unusable`] without
    /// formatting: a launch path asks per layer and must not allocate).
    fn misfit(
        &self,
        caps: &AdapterCaps,
        limits: &wgpu::Limits,
        head_dim: u64,
        queries: u64,
    ) -> Option<Misfit> {
        let wg = self.workgroup;
        if !wg.is_power_of_two() || !(32..=1024).contains(&wg) {
            return Some(Misfit::Size);
        }
        let max = caps
            .max_invocations_per_workgroup
            .min(limits.max_compute_workgroup_size_x);
        if wg > max {
            return Some(Misfit::Wide(max));
        }
        if self.merge == 0 {
            return Some(Misfit::NoMerge);
        }
        let bytes = self.workgroup_bytes(head_dim, queries, uses_subgroups(caps, head_dim));
        if bytes > u64::from(caps.max_workgroup_storage) {
            return Some(Misfit::Memory(bytes));
        }
        None
    }

    /// The module's sizes for `queries` queries per workgroup of `head_dim`.
    fn shape(&self, head_dim: u64, queries: u64) -> DecodeShape {
        let key_groups = (u64::from(self.workgroup) / lanes_per_key(head_dim)).max(1) as u32;
        DecodeShape {
            wg: self.workgroup,
            key_groups,
            merge: self.merge.clamp(1, key_groups),
            queries: queries as u32,
            head_dim: head_dim as u32,
        }
    }

    /// Workgroup memory of the module (`attention_decode*.wgsl`'s arrays)
    /// for `queries` queries per workgroup of `head_dim`: the key groups'
    /// maxima and sums, the outputs of the key groups merged per round,
    /// and where the lanes' sums run through workgroup memory (not
    /// `subgroups`), their staging.
    pub fn workgroup_bytes(&self, head_dim: u64, queries: u64, subgroups: bool) -> u64 {
        let s = self.shape(head_dim, queries);
        let kp = u64::from(s.key_groups);
        let mut bytes =
            2 * 4 * kp * MAX_QUERIES + 16 * u64::from(s.merge) * queries * head_dim.div_ceil(4);
        if !subgroups {
            bytes += 4 * (u64::from(s.wg) * queries + kp * MAX_QUERIES);
        }
        bytes
    }
}

/// The limit a [`DecodeTuning`] breaks on an adapter.
enum Misfit {
    Size,
    Wide(u32),
    NoMerge,
    Memory(u64),
}

impl Misfit {
    fn describe(
        &self,
        t: &DecodeTuning,
        head_dim: u64,
        queries: u64,
        caps: &AdapterCaps,
    ) -> String {
        let wg = t.workgroup;
        match *self {
            Self::Size => {
                format!("a workgroup of {wg} invocations (want a power of two, 32 to 1024)")
            }
            Self::Wide(max) => {
                format!("a workgroup of {wg} invocations exceeds the adapter's {max}")
            }
            Self::NoMerge => "a merge of 0 key groups per round (want at least 1)".into(),
            Self::Memory(bytes) => format!(
                "{bytes} bytes of workgroup memory ({wg} invocations merging {} key groups a round) exceed the adapter's {}",
                t.shape(head_dim, queries).merge,
                caps.max_workgroup_storage
            ),
        }
    }
}

/// Why the decode kernel cannot take an attention, formatted only when
/// asked (a prefill asks on every layer, only to take another kernel).
enum NotDecode {
    Queries { batch: u64, queries: u64 },
    Align { head_dim: u64, align: u64 },
}

impl fmt::Display for NotDecode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Queries { batch, queries } => write!(
                f,
                "{batch} batch elements x {queries} queries per kv head (decoding takes 1 x {MAX_QUERIES})"
            ),
            Self::Align { head_dim, align } => {
                write!(f, "head_dim {head_dim} is not a multiple of {align}")
            }
        }
    }
}

fn why_not(heads: Heads, span: Span, rope: bool) -> Option<NotDecode> {
    let queries = heads.group() * span.sq;
    if span.batch != 1 || queries > MAX_QUERIES {
        return Some(NotDecode::Queries {
            batch: span.batch,
            queries,
        });
    }
    let align = if rope { 8 } else { 4 };
    if !heads.head_dim.is_multiple_of(align) {
        return Some(NotDecode::Align {
            head_dim: heads.head_dim,
            align,
        });
    }
    None
}

/// Why the decode kernel cannot take this attention (`None`: it can).
/// `rope`: with RoPE fused.
pub(super) fn unusable(heads: Heads, span: Span, rope: bool) -> Option<String> {
    why_not(heads, span, rope).map(|w| w.to_string())
}

/// Whether the decode kernel takes this attention ([`unusable`] is `None`),
/// without formatting why not.
pub(super) fn takes(heads: Heads, span: Span, rope: bool) -> bool {
    why_not(heads, span, rope).is_none()
}

/// Whether the decode kernel with `tuning` rotates q and the new keys
/// itself (else RoPE is a launch of its own): it takes this attention
/// with RoPE, and one workgroup holds all heads of a kv head.
pub(super) fn fuses_rope(heads: Heads, span: Span, tuning: &DecodeTuning) -> bool {
    takes(heads, span, true) && tuning.fuses_rope(heads.group())
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

/// `(chunk, splits)` for `per_split` workgroups a split (kv heads, or
/// query heads where they are spread, [`DecodeTuning::workgroups_per_split`])
/// over `keys` keys with the default [`DecodeTuning`]: enough splits for
/// 132 workgroups, each at least 32 keys (where there are that many) and at
/// most 512; chunks are multiples of 16 keys.
pub fn decode_split(per_split: u64, keys: u64) -> (u64, u64) {
    DecodeTuning::default().split(per_split, keys)
}

/// The tuning a device runs for `heads` over `sq` rows: `asked`
/// (`GpuOptions::decode`) where it fits the adapter, else the default,
/// else the default at 128 invocations (adapters that allow fewer than
/// 256), else the default at the adapter's largest power of two.
pub fn device_tuning(
    caps: &AdapterCaps,
    limits: &wgpu::Limits,
    asked: Option<DecodeTuning>,
    heads: Heads,
    sq: u64,
) -> DecodeTuning {
    let fits = |t: &DecodeTuning| {
        t.misfit(caps, limits, heads.head_dim, t.queries(heads, sq))
            .is_none()
    };
    let d = DecodeTuning::default();
    let max = caps
        .max_invocations_per_workgroup
        .min(limits.max_compute_workgroup_size_x)
        .max(32);
    let small = [
        DecodeTuning {
            workgroup: 128,
            target_groups: 264,
            ..d
        },
        DecodeTuning {
            workgroup: 1 << max.ilog2(),
            ..d
        },
    ];
    asked
        .into_iter()
        .chain([d])
        .chain(small)
        .find(fits)
        .unwrap_or(d)
}

/// The decode module for `subgroups`/`rope` with `shape` written in, made
/// once per process and shape (a record per layer and token must not
/// rewrite the text).
fn decode_source(subgroups: bool, rope: bool, shape: DecodeShape) -> &'static str {
    static SOURCES: Generated<(bool, bool, DecodeShape)> = Generated::new();
    SOURCES.get((subgroups, rope, shape), || {
        with_decode_shape(attention_decode(subgroups, rope), subgroups, shape)
    })
}

/// Records the decode kernel for `span` (checked: [`unusable`] is `None`)
/// shaped and split by `tuning`, then the combine where the keys split;
/// with `rope`, q is read rotated and cache rows `pos0..pos0+sq` of k are
/// rotated in place.
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
    tuning: &DecodeTuning,
) -> Result<(), GpuError> {
    const OP: &str = "attention";
    let (n_heads, n_kv_heads, head_dim) = (heads.n_heads, heads.n_kv_heads, heads.head_dim);
    let group = heads.group();
    let hpw = tuning.heads_per_workgroup(group);
    let queries = tuning.queries(heads, span.sq);
    let limits = gpu.device.limits();
    if let Some(why) = tuning.unusable(&gpu.caps, &limits, head_dim, queries) {
        return Err(bad(OP, format!("decode tuning {tuning}: {why}")));
    }
    if rope.is_some() && !tuning.fuses_rope(group) {
        return Err(bad(
            OP,
            format!(
                "decode tuning {tuning}: RoPE fused needs all {group} heads of a kv head in one workgroup"
            ),
        ));
    }
    let per_split = tuning.workgroups_per_split(heads);
    let (chunk, splits) = tuning.split(per_split, span.keys());
    let max_groups = limits.max_compute_workgroups_per_dimension;
    if per_split * splits > u64::from(max_groups) || n_heads > u64::from(max_groups) {
        return Err(bad(
            OP,
            format!("{per_split} workgroups x {splits} splits exceed {max_groups} workgroups"),
        ));
    }
    let params = super::scalar::params(heads, span, chunk, splits)?;
    let subgroups = uses_subgroups(&gpu.caps, head_dim);
    let lanes = lanes_per_key(head_dim);
    let slots = head_dim.div_ceil(4).div_ceil(lanes);
    let constants = [
        ("HD", head_dim as f64),
        ("LPK", lanes as f64),
        ("QG", queries as f64),
        ("U", step_keys(queries * slots) as f64),
        ("HPW", hpw as f64),
    ];
    let Operands { q, k, v, out } = *ops;
    let cost = super::cost(q, heads, span);
    let part_bytes = span.sq * n_heads * splits * (head_dim + 2) * 4;
    // The kernel binds both; with one split it writes `out` and not `part`.
    let part = scratch.attention_partials(gpu, part_bytes)?;
    let mut bindings: kernel::Bindings<'_> = smallvec::smallvec![
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
    let shape = tuning.shape(head_dim, queries);
    launch(
        gpu,
        cache,
        enc,
        Launch {
            program: Program {
                source: decode_source(subgroups, rope.is_some(), shape),
                entry: "attend_decode",
                constants: &constants,
                act: q.dtype,
            },
            label: &"attend_decode",
            bindings: &bindings,
            immediates: &params,
            groups: (to_u32(OP, "workgroups * splits", per_split * splits)?, 1),
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
            source: ATTENTION,
            entry: "attend_combine",
            constants: &combine_constants,
            params: &params,
            bindings: smallvec::smallvec![(4, out.binding()), (5, part_binding(&part, part_bytes))],
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
    use super::{AdapterCaps, DecodeTuning, Heads, decode_split, lanes_per_key};

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
                if keys >= 32 * 132 {
                    assert!(n_kv * splits >= 120, "{n_kv} {keys}: {splits}");
                }
            }
        }
        // Llama-7B (32 kv heads), and Llama-3-8B's 32 query heads spread
        // over workgroups, at 512 keys: 5 splits of 112 keys.
        assert_eq!(decode_split(32, 512), (112, 5));
        // Llama-3-8B with its 8 kv heads' groups whole: 16 splits of 32.
        assert_eq!(decode_split(8, 512), (32, 16));
        // at 4096: 8 splits of 512 keys (256 workgroups).
        assert_eq!(decode_split(32, 4096), (512, 8));
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

    #[test]
    fn heads_per_workgroup_divide_the_group() {
        let h = |t: &str, group| {
            let t = t.parse::<DecodeTuning>().expect("parses");
            (t.heads_per_workgroup(group), t.fuses_rope(group))
        };
        assert_eq!(h("128", 4), (1, false), "the default: one head each");
        assert_eq!(h("128", 1), (1, true), "no grouped heads");
        assert_eq!(h("128h2", 4), (2, false));
        assert_eq!(h("128h4", 4), (4, true));
        assert_eq!(h("128h8", 4), (4, true), "more than the group: all of it");
        assert_eq!(h("128h3", 4), (4, true), "not a divisor: all of it");
        assert_eq!(h("128h7", 7), (7, true));
        let heads = Heads {
            n_heads: 32,
            n_kv_heads: 8,
            head_dim: 128,
        };
        let per_split = |t: &str| {
            t.parse::<DecodeTuning>()
                .expect("parses")
                .workgroups_per_split(heads)
        };
        assert_eq!(
            (per_split("128"), per_split("128h2"), per_split("128h4")),
            (32, 16, 8)
        );
    }

    #[test]
    fn tunings_parse_print_and_reject_bad_text() {
        let t = |s: &str| s.parse::<DecodeTuning>();
        assert_eq!(t("256x132m4"), Ok(DecodeTuning::default()));
        let plain = DecodeTuning {
            merge: 1,
            ..DecodeTuning::default()
        };
        assert_eq!(t(" 256 "), Ok(plain));
        assert_eq!(DecodeTuning::default().to_string(), "256x132m4");
        let one = t("512s1").expect("parses");
        assert_eq!((one.workgroup, one.splits, one.merge), (512, Some(1), 1));
        let all = t("1024S1M32").expect("parses");
        assert_eq!((all.workgroup, all.splits, all.merge), (1024, Some(1), 32));
        let target = t("256x132m4").expect("parses");
        assert_eq!(
            (
                target.workgroup,
                target.target_groups,
                target.splits,
                target.merge
            ),
            (256, 132, None, 4)
        );
        assert_eq!(t("64m2").expect("parses").target_groups, 132);
        let spread = t("128x264m4h2").expect("parses");
        assert_eq!((spread.merge, spread.heads), (4, Some(2)));
        assert_eq!(t("128h8").expect("parses").heads, Some(8));
        for s in [
            "128x264",
            "512s1",
            "1024s1m32",
            "256x132m4",
            "32s7m2",
            "128x264m4h1",
            "64s2h4",
        ] {
            assert_eq!(t(s).expect(s).to_string(), s);
        }
        for (bad, why) in [
            ("", "missing"),
            ("x264", "missing"),
            ("128x", "missing"),
            ("100x264", "power of two"),
            ("2048", "power of two"),
            ("16", "power of two"),
            ("128x0", "at least 1"),
            ("128s0", "at least 1"),
            ("128m0", "at least 1"),
            ("128x264s1", "out of order"),
            ("128s1x264", "out of order"),
            ("128m2x264", "out of order"),
            ("128h2m4", "out of order"),
            ("128h0", "at least 1"),
            ("128h99999999999", "out of range"),
            ("128x2x3", "out of order"),
            ("128y3", "unknown tag"),
            ("128x-3", "missing"),
            ("128x99999999999999999999", "out of range"),
            ("128m99999999999", "out of range"),
        ] {
            let err = t(bad).expect_err(bad);
            assert!(
                err.contains(why) && err.contains("WG[xTARGET"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn tuned_splits_cover_every_key() {
        let one = DecodeTuning {
            splits: Some(1),
            ..DecodeTuning::default()
        };
        assert_eq!(one.split(32, 8192), (8192, 1));
        assert_eq!(one.split(32, 1), (16, 1));
        assert_eq!(one.split(8, 500), (512, 1));
        // more splits than 16-key steps: fewer, none empty
        let many = DecodeTuning {
            splits: Some(64),
            ..DecodeTuning::default()
        };
        assert_eq!(many.split(4, 100), (16, 7));
        assert_eq!(many.split(4, 4096), (64, 64));
        // another target: 32 workgroups of 32 kv heads is one split where
        // the chunk bound allows
        let target = DecodeTuning {
            target_groups: 32,
            ..DecodeTuning::default()
        };
        assert_eq!(target.split(32, 512), (512, 1));
        assert_eq!(target.split(32, 2048), (512, 4));
        for t in [one, many, target, DecodeTuning::default()] {
            for keys in [1u64, 17, 300, 1100, 9000] {
                let (chunk, splits) = t.split(8, keys);
                assert!(chunk % 16 == 0 && chunk * splits >= keys, "{t} {keys}");
                assert!(chunk * (splits - 1) < keys, "{t} {keys}: an empty split");
            }
        }
    }

    /// An adapter of 1024 invocations and 32 KiB of workgroup memory,
    /// without subgroups.
    fn wide_adapter() -> (AdapterCaps, wgpu::Limits) {
        let mut caps = AdapterCaps::baseline("test", "vulkan");
        caps.max_invocations_per_workgroup = 1024;
        caps.max_workgroup_storage = 32 << 10;
        let limits = wgpu::Limits {
            max_compute_workgroup_size_x: 1024,
            ..Default::default()
        };
        (caps, limits)
    }

    #[test]
    fn tunings_fit_the_adapter() {
        let (mut caps, mut limits) = wide_adapter();
        let t = |s: &str| s.parse::<DecodeTuning>().expect(s);
        assert_eq!(
            DecodeTuning::default().unusable(&caps, &limits, 128, 8),
            None
        );
        // workgroup memory (no subgroups): 1024 lanes staging 8 queries,
        // 39 KiB
        assert!(t("1024s1").unusable(&caps, &limits, 128, 8).is_some());
        assert_eq!(t("1024s1").unusable(&caps, &limits, 128, 1), None);
        // all 32 key groups' outputs of 8 queries: 130 KiB; of 1: 18 KiB
        let all = t("1024s1m32");
        assert_eq!(
            all.workgroup_bytes(128, 8, true),
            2 * 4 * 32 * 8 + 16 * 32 * 8 * 32
        );
        assert!(all.unusable(&caps, &limits, 128, 8).is_some());
        caps.subgroups = true;
        caps.subgroup_min_size = 32;
        assert_eq!(all.unusable(&caps, &limits, 128, 1), None);
        // the adapter's invocations
        limits.max_compute_workgroup_size_x = 256;
        let err = t("512s1")
            .unusable(&caps, &limits, 128, 1)
            .expect("too wide");
        assert!(err.contains("256"), "{err}");
        let zero = DecodeTuning {
            merge: 0,
            ..DecodeTuning::default()
        };
        assert!(zero.unusable(&caps, &limits, 128, 1).is_some());
    }

    #[test]
    fn the_device_tuning_is_the_asked_one_where_it_fits_else_a_fitting_default() {
        let (mut caps, mut limits) = wide_adapter();
        let heads = Heads {
            n_heads: 32,
            n_kv_heads: 8,
            head_dim: 128,
        };
        let t = |s: &str| s.parse::<DecodeTuning>().expect(s);
        let pick = |caps: &AdapterCaps, limits: &wgpu::Limits, asked| {
            super::device_tuning(caps, limits, asked, heads, 1).to_string()
        };
        assert_eq!(pick(&caps, &limits, None), "256x132m4");
        assert_eq!(pick(&caps, &limits, Some(t("512x32m8"))), "512x32m8");
        limits.max_compute_workgroup_size_x = 256;
        assert_eq!(
            pick(&caps, &limits, Some(t("512x32m8"))),
            "256x132m4",
            "too wide"
        );
        limits.max_compute_workgroup_size_x = 128;
        assert_eq!(
            pick(&caps, &limits, None),
            "128x264m4",
            "the former default"
        );
        caps.max_invocations_per_workgroup = 64;
        assert_eq!(
            pick(&caps, &limits, None),
            "64x132m4",
            "the adapter's widest"
        );
    }
}
