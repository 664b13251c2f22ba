//! Which weights of a model stay resident and which stream, computed from
//! sizes alone (no GPU), so `dynvram plan` and a run agree by construction.
//!
//! The memory crate's single-model plan places pages under a watermark; on
//! top of it this module reserves the two transient arenas that prefetch
//! needs: each arena holds one block's streamed weights, grown in
//! [`ARENA_STEP`] steps. The arena size depends on what streams, so the plan
//! takes the highest watermark whose pages, arenas and scratch fit together
//! (a model that fits whole needs no arena at all). That watermark is a
//! fixed point: the highest watermark within `usable − scratch − 2 × arena`
//! is the same one, which is what the runtime's residency policy computes.
//!
//! **Granularity.** Where no watermark leaves room for two arenas of a whole
//! block (FLUX.1-dev's double blocks are 680 MB in bf16), blocks that
//! declare groups ([`PlanWeight::group`], from `BlockSpec::groups`) stream
//! in *parts*: runs of whole groups packed up to the arena's size, each part
//! staged into one arena while the part before it computes. The plan then
//! takes the highest watermark with arenas of the largest streamed group,
//! and grows the arenas into whatever room that watermark leaves, so the
//! parts are as few as the budget allows ([`Granularity`]).

use dynvram_memory::{
    Layout, LayoutConfig, LayoutError, Placement, Plan, PlanError, PlanRoom, bit_reverse,
    plan_ranked,
};
use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

/// Arenas grow in 16 MiB steps *(aimdo)*, but never beyond what is needed
/// rounded to [`ARENA_ALIGN`] when the whole need is below one step (a small
/// model would otherwise spend its budget on empty arena).
pub const ARENA_STEP: u64 = 16 << 20;
/// Alignment of each weight inside an arena (storage-binding offsets).
pub const ARENA_ALIGN: u64 = 256;
/// Number of transient arenas (block *i* computes from one while block
/// *i+1*'s weights land in the other).
pub const ARENAS: u64 = 2;

/// One weight as the planner sees it.
#[derive(Debug, Clone, Serialize)]
pub struct PlanWeight {
    /// Tensor name.
    pub name: String,
    /// Bytes it takes on the GPU.
    pub size: u64,
    /// The block that uses it.
    pub block: usize,
    /// Its group inside the block (`BlockSpec::groups`, in the order the
    /// block's code uses them): a block streaming in parts is cut only
    /// between groups. Every weight of a block without groups is in group 0.
    pub group: usize,
}

/// How a model's streamed weights move through the arenas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Granularity {
    /// Each arena holds one block's streamed weights (or nothing streams).
    #[default]
    Block,
    /// Blocks larger than an arena stream in parts of whole groups, each at
    /// most one arena.
    Part,
}

impl Granularity {
    /// `block` or `part`, as reports print it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Block => "block",
            Self::Part => "part",
        }
    }
}

/// Where each streamed weight goes in the arenas: [`arena_layout`]'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ArenaLayout {
    /// Per weight (load order): its part within its block and its offset in
    /// that part's arena; `None` when it is resident.
    pub homes: Vec<Option<(usize, u64)>>,
    /// Parts of each block (at least 1, also where nothing streams).
    pub parts: Vec<usize>,
    /// The fullest part's bytes: what each arena must hold.
    pub fill: u64,
    /// Parts that stream something, over all blocks (what a pass stages).
    pub streamed_parts: usize,
}

/// The plan of a model under a budget.
#[derive(Debug, Clone, Serialize)]
pub struct ModelPlan {
    /// The page-level plan (resident / streamed per tensor, in the order given).
    pub plan: Plan,
    /// Bytes of each transient arena.
    pub arena_bytes: u64,
    /// Scratch bytes reserved for activations.
    pub scratch: u64,
    /// Usable bytes (`capacity − reserve − headroom`).
    pub usable: u64,
    /// Whether streamed blocks move whole or in parts.
    pub granularity: Granularity,
    /// Arena loads a pass makes: streamed blocks, or parts where blocks
    /// stream in parts (0 when nothing streams).
    pub streamed_parts: usize,
}

impl ModelPlan {
    /// Whether tensor `i` is streamed.
    pub fn streamed(&self, i: usize) -> bool {
        self.plan.tensors[i].placement == Placement::Stream
    }
}

/// Offsets of each block's streamed weights inside an arena, and the largest
/// block's total (whole blocks: [`arena_layout`] with no capacity).
pub fn arena_offsets(
    weights: &[PlanWeight],
    streamed: impl Fn(usize) -> bool,
) -> (Vec<Option<u64>>, u64) {
    let l = arena_layout(weights, streamed, None);
    (
        l.homes.iter().map(|h| h.map(|(_, at)| at)).collect(),
        l.fill,
    )
}

/// Cuts each block's streamed weights into parts of at most `capacity`
/// bytes (whole groups, in load order; a group larger than `capacity` is a
/// part of its own) and places each part's weights from offset 0 of an
/// arena, [`ARENA_ALIGN`]ed. With no capacity every block is one part.
/// Weights are in load order with blocks ascending, as a model lists them.
pub fn arena_layout(
    weights: &[PlanWeight],
    streamed: impl Fn(usize) -> bool,
    capacity: Option<u64>,
) -> ArenaLayout {
    let blocks = weights.iter().map(|w| w.block + 1).max().unwrap_or(0);
    let mut parts = vec![1usize; blocks];
    let mut homes = vec![None; weights.len()];
    let (mut fill, mut streamed_parts) = (0u64, 0usize);
    // The part being filled: (block, part, bytes so far).
    let mut open: Option<(usize, usize, u64)> = None;
    let mut i = 0;
    while i < weights.len() {
        let (block, group) = (weights[i].block, weights[i].group);
        let end = (i..weights.len())
            .find(|&j| (weights[j].block, weights[j].group) != (block, group))
            .unwrap_or(weights.len());
        let members: Vec<usize> = (i..end).filter(|&j| streamed(j)).collect();
        i = end;
        if members.is_empty() {
            continue;
        }
        let bytes: u64 = members
            .iter()
            .map(|&j| aligned(weights[j].size))
            .fold(0, u64::saturating_add);
        let (part, at) = match open {
            Some((b, p, used)) if b == block => {
                match capacity.is_some_and(|c| used.saturating_add(bytes) > c) {
                    true => (p + 1, 0),
                    false => (p, used),
                }
            }
            _ => (0, 0),
        };
        if open.is_none_or(|(b, p, _)| (b, p) != (block, part)) {
            streamed_parts += 1;
        }
        parts[block] = parts[block].max(part + 1);
        let mut used = at;
        for j in members {
            homes[j] = Some((part, used));
            used = used.saturating_add(aligned(weights[j].size));
        }
        fill = fill.max(used);
        open = Some((block, part, used));
    }
    ArenaLayout {
        homes,
        parts,
        fill,
        streamed_parts,
    }
}

/// Bytes a weight takes in an arena, the next one starting aligned.
fn aligned(size: u64) -> u64 {
    size.checked_next_multiple_of(ARENA_ALIGN)
        .unwrap_or(u64::MAX)
}

/// Bytes of one arena that must hold `need` bytes of one block's streamed weights.
pub fn arena_size(need: u64) -> u64 {
    if need >= ARENA_STEP {
        need.next_multiple_of(ARENA_STEP)
    } else {
        need.next_multiple_of(ARENA_ALIGN)
    }
}

/// Page size for a model of `total` bytes: 32 MiB *(aimdo)* once a model has
/// at least 64 such pages; smaller models get proportionally smaller pages
/// (a power of two, at least 256 KiB) so the watermark is not stuck at zero
/// by one page larger than the whole budget.
pub fn page_size_for(total: u64) -> u64 {
    let default = LayoutConfig::default().page_size;
    (total / 64).next_power_of_two().clamp(256 << 10, default)
}

/// The page layout of a model: [`page_size_for`] its total bytes. The plan
/// and the runtime's residency registry use the same one, so a model alone
/// gets exactly the watermark its plan says.
pub fn layout_for(weights: &[PlanWeight]) -> LayoutConfig {
    let total = weights
        .iter()
        .map(|w| w.size)
        .fold(0u64, u64::saturating_add);
    LayoutConfig {
        page_size: page_size_for(total),
        ..LayoutConfig::default()
    }
}

/// The residency rank of each weight (`Layout::ranked`). The blocks fall
/// into *runs*: consecutive blocks of equal bytes (FLUX.1's 19 double
/// blocks, then its 38 single ones; all of a Llama's layers). Runs keep
/// load order, so a watermark fills the first run first; inside a run the
/// blocks rank by their position bit-reversed (a van der Corput order, as
/// the pins' max scatter), so whatever a watermark keeps of a run is spread
/// evenly over it and each streamed block's copy overlaps the work of the
/// resident block beside it. Two arenas let the copies run only two
/// streamed units ahead: a prefix of resident blocks leaves the copy
/// engine idle while they run, then the streamed ones wait for their
/// copies (FLUX.1-dev at 8 GiB on the H100: 0.479 s a step against 0.431 of
/// kernels; spread over the double blocks, 0.442 by the pass model of
/// BENCHMARKS.md, session 28). Spread over all blocks instead, a watermark
/// kept single blocks, whose copies hide behind their own work, in place
/// of double ones, whose copies do not: slower (session 27).
pub fn residency_ranks(weights: &[PlanWeight]) -> Vec<u64> {
    // Bytes per block that has weights (sparse: a spec's block indices
    // are not trusted to be small), in block order.
    let mut bytes: BTreeMap<usize, u64> = BTreeMap::new();
    for w in weights {
        let b = bytes.entry(w.block).or_default();
        *b = b.saturating_add(w.size);
    }
    let blocks: Vec<(usize, u64)> = bytes.into_iter().collect();
    // Each block's rank: its run's place, then its place in the run.
    let mut rank: HashMap<usize, u64> = HashMap::with_capacity(blocks.len());
    let mut start = 0;
    while let Some(&(first, size)) = blocks.get(start) {
        let len = blocks[start..]
            .iter()
            .enumerate()
            .take_while(|&(k, &(b, s))| s == size && b.checked_sub(first) == Some(k))
            .count();
        let bits = len.next_power_of_two().trailing_zeros();
        for (i, &(b, _)) in blocks[start..start + len].iter().enumerate() {
            rank.insert(b, ((start as u64) << 32) | bit_reverse(i as u64, bits));
        }
        start += len;
    }
    weights.iter().map(|w| rank[&w.block]).collect()
}

/// The pages of `weights` as the planner and the residency policy lay them
/// out: [`layout_for`]'s pages, [`residency_ranks`]' order.
pub fn layout_of(weights: &[PlanWeight]) -> Result<Layout, LayoutError> {
    let sizes: Vec<u64> = weights.iter().map(|w| w.size).collect();
    Layout::ranked(&sizes, &residency_ranks(weights), &layout_for(weights))
}

/// Plans a model: resident weights plus two arenas plus scratch fit `usable`.
/// At each pass the runtime asks the same question with the activations and
/// patches alive then in place of `scratch` (see `residency`). Blocks move
/// whole when some watermark leaves room for their arenas; otherwise, where
/// blocks declare groups, in parts (see the module docs).
pub fn plan_model(
    weights: &[PlanWeight],
    usable: u64,
    scratch: u64,
) -> Result<ModelPlan, PlanError> {
    let config = layout_for(weights);
    let sizes: Vec<(&str, u64)> = weights.iter().map(|w| (w.name.as_str(), w.size)).collect();
    let ranks = residency_ranks(weights);
    let only: Vec<u64> = weights.iter().map(|w| w.size).collect();
    let layout = Layout::ranked(&only, &ranks, &config)?;
    let layout_at = |w: u32, capacity: Option<u64>| {
        arena_layout(weights, |i| !layout.is_resident(i, w), capacity)
    };
    let whole = |w: u32| arena_size(layout_at(w, None).fill);
    // Capacity 0 makes every group a part: arenas of the largest group.
    let least = |w: u32| arena_size(layout_at(w, Some(0)).fill);
    // Checked, not saturating: a sum past u64::MAX never fits, even an
    // unlimited (u64::MAX) budget.
    let reserved = |arena: u64| {
        ARENAS
            .checked_mul(arena)
            .and_then(|a| a.checked_add(scratch))
    };
    let fits = |w: u32, arena: u64| {
        reserved(arena)
            .and_then(|r| r.checked_add(layout.prefix[w as usize]))
            .is_some_and(|n| n <= usable)
    };
    let cuts = || {
        (0..=layout.page_count())
            .rev()
            .filter(|&w| layout.cut[w as usize])
    };
    let splittable = weights.iter().any(|w| w.group > 0);
    let by_block = cuts()
        .map(|w| (w, whole(w)))
        .find(|&(w, arena)| fits(w, arena))
        .map(|(w, arena)| (w, arena, None));
    let found = by_block.or_else(|| {
        let (w, least) = cuts()
            .filter(|_| splittable)
            .map(|w| (w, least(w)))
            .find(|&(w, arena)| fits(w, arena))?;
        // The arenas take the room the watermark leaves: fewer parts.
        let room = usable.saturating_sub(scratch + layout.prefix[w as usize]) / ARENAS;
        let step = if room >= ARENA_STEP {
            ARENA_STEP
        } else {
            ARENA_ALIGN
        };
        let capacity = (room / step * step).max(least);
        Some((
            w,
            arena_size(layout_at(w, Some(capacity)).fill),
            Some(capacity),
        ))
    });
    // The page-level plan with the arenas held back; with nothing that
    // fits, the same call names the largest tensor in its error.
    let arena = found.map_or_else(
        || if splittable { least(0) } else { whole(0) },
        |(_, a, _)| a,
    );
    let room = PlanRoom {
        usable: if reserved(arena).is_some() { usable } else { 0 },
        scratch: reserved(arena).unwrap_or(u64::MAX),
        arenas: 0,
    };
    // Its error has the arenas folded into scratch: name them apart.
    let p = plan_ranked(&sizes, &ranks, room, &config).map_err(|e| match e {
        PlanError::BudgetTooSmall { tensor, size, .. } => PlanError::BudgetTooSmall {
            tensor,
            size,
            arenas: ARENAS as u32,
            scratch,
            needed: reserved(arena).unwrap_or(u64::MAX),
            usable,
        },
        e => e,
    })?;
    match found {
        // `p` keeps exactly the pages found (the fixed point above); its
        // arenas are sized for what it streams.
        Some((_, arena, capacity)) => {
            // By part, the runtime packs parts into arenas of `arena` bytes
            // (at most the capacity found, so never more parts than it).
            let capacity = capacity.map(|_| arena);
            let l = layout_at(p.pages_resident, capacity);
            Ok(ModelPlan {
                arena_bytes: capacity.unwrap_or_else(|| arena_size(l.fill)),
                granularity: match capacity {
                    Some(_) => Granularity::Part,
                    None => Granularity::Block,
                },
                streamed_parts: l.streamed_parts,
                plan: p,
                scratch,
                usable,
            })
        }
        None => Err(PlanError::BudgetTooSmall {
            tensor: String::new(),
            size: 0,
            arenas: ARENAS as u32,
            scratch,
            needed: scratch,
            usable,
        }),
    }
}

/// The share of the usable bytes (1/16) a model's scratch wish
/// ([`crate::ModelSpec::scratch_wish`]) may take from its resident weights.
pub const SCRATCH_WISH_SHARE: u64 = 16;

/// [`plan_model`] with up to `wish` more bytes of scratch held back (at most
/// [`SCRATCH_WISH_SHARE`] of `usable`) where the plan still streams the same
/// way with them (the same granularity); returns the plan and the extra
/// bytes held back (0 where the wish did not fit). The extra room comes out
/// of the resident weights: a converted layer multiplied whole instead of in
/// pieces gains more (a piece's GEMM fills the GPU badly) than the bytes
/// cost in streaming.
pub fn plan_model_with_wish(
    weights: &[PlanWeight],
    usable: u64,
    scratch: u64,
    wish: u64,
) -> Result<(ModelPlan, u64), PlanError> {
    let plain = plan_model(weights, usable, scratch)?;
    let extra = wish.min(usable / SCRATCH_WISH_SHARE);
    if extra == 0 {
        return Ok((plain, 0));
    }
    match plan_model(weights, usable, scratch.saturating_add(extra)) {
        Ok(p) if p.granularity == plain.granularity => Ok((p, extra)),
        _ => Ok((plain, 0)),
    }
}

/// The capacity the arenas of `plan` hold per part (`None`: whole blocks),
/// as the runtime passes it to [`arena_layout`].
pub fn part_capacity(plan: &ModelPlan) -> Option<u64> {
    (plan.granularity == Granularity::Part).then_some(plan.arena_bytes)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn resident_blocks_spread_over_the_pass() {
        // Six blocks of one 40 MiB weight each: ranks by bit reversal over
        // 3 bits; half the pages keep blocks 0, 4 and 2 (0, 2 and 1
        // reversed) resident, not 0, 1 and 2.
        let w: Vec<PlanWeight> = (0..6)
            .map(|b| PlanWeight {
                name: format!("b{b}"),
                size: 40 << 20,
                block: b,
                group: 0,
            })
            .collect();
        assert_eq!(residency_ranks(&w), [0, 4, 2, 6, 1, 5]);
        let layout = layout_of(&w).unwrap();
        let half = layout.max_watermark_within(layout.total_bytes() / 2);
        let resident: Vec<usize> = (0..6).filter(|&i| layout.is_resident(i, half)).collect();
        assert_eq!(resident, [0, 2, 4]);
    }

    #[test]
    fn ranks_take_any_block_index_and_size() {
        let w = |block: usize, size: u64| PlanWeight {
            name: format!("w{block}"),
            size,
            block,
            group: 0,
        };
        let ranks = residency_ranks(&[
            w(usize::MAX, u64::MAX),
            w(usize::MAX, u64::MAX),
            w(usize::MAX - 1, u64::MAX),
            w(0, 1),
        ]);
        // Block 0 first; the two huge blocks (sizes saturated: equal) are
        // one run of two, the later one second within it.
        assert_eq!(ranks, [(1 << 32) | 1, (1 << 32) | 1, 1 << 32, 0]);
    }

    #[test]
    fn runs_of_equal_blocks_fill_in_order_each_spread() {
        // FLUX.1's shape in small: an input block, five large blocks, four
        // small ones, each of two weights. The large run fills first, its
        // blocks spread (positions 0, 4, 2, 6, 1 bit-reversed over 3 bits).
        let mut w = Vec::new();
        for (b, size) in [(0, 4u64), (1, 50), (2, 50), (3, 50), (4, 50), (5, 50)]
            .into_iter()
            .chain((6..10).map(|b| (b, 20)))
        {
            for k in 0..2 {
                w.push(PlanWeight {
                    name: format!("b{b}.{k}"),
                    size: size << 20,
                    block: b,
                    group: 0,
                });
            }
        }
        let ranks = residency_ranks(&w);
        let block_rank = |b: usize| ranks[2 * b];
        assert_eq!(
            (1..=5)
                .map(|b| block_rank(b) & 0xffff_ffff)
                .collect::<Vec<_>>(),
            [0, 4, 2, 6, 1]
        );
        assert!((1..=5).all(|b| block_rank(b) < block_rank(6)));
        assert!(block_rank(0) < block_rank(1));
        // Room for the input block and three large ones: blocks 1, 3, 5
        // stay (every other one), 2 and 4 and the small run stream.
        let layout = layout_of(&w).unwrap();
        let room = (8 + 3 * 100) << 20;
        let wm = layout.max_watermark_within(room);
        let resident: Vec<usize> = (0..10)
            .filter(|&b| layout.is_resident(2 * b, wm) && layout.is_resident(2 * b + 1, wm))
            .collect();
        assert_eq!(resident, [0, 1, 3, 5]);
    }

    fn weights(sizes: &[(u64, usize)]) -> Vec<PlanWeight> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &(size, block))| PlanWeight {
                name: format!("w{i}"),
                size,
                block,
                group: 0,
            })
            .collect()
    }

    #[test]
    fn a_petabyte_header_is_refused_by_the_layout_at_once() {
        // Offsets inside a sparse file make such a header look valid.
        let w = weights(&[(1 << 50, 0), (1 << 50, 1)]);
        let err = plan_model(&w, u64::MAX, 0).unwrap_err();
        assert!(
            matches!(
                err,
                PlanError::Layout(dynvram_memory::LayoutError::TooManyPages { .. })
            ),
            "{err}"
        );
    }

    #[test]
    fn a_model_that_fits_whole_needs_no_arena() {
        // 8 MiB in 4 blocks; room for all of it plus scratch, not for two
        // 2 MiB arenas besides: everything stays resident.
        let w = weights(&[(1 << 20, 0), (1 << 20, 0), (1 << 20, 1), (1 << 20, 1)]);
        let w: Vec<PlanWeight> = w
            .iter()
            .chain(&weights(&[
                (1 << 20, 2),
                (1 << 20, 2),
                (1 << 20, 3),
                (1 << 20, 3),
            ]))
            .cloned()
            .collect();
        let p = plan_model(&w, (8 << 20) + 4096, 4096).unwrap();
        assert_eq!((p.plan.streamed, p.arena_bytes), (0, 0));
        // A byte less and a block streams, with its arenas.
        let p = plan_model(&w, (8 << 20) + 4095, 4096).unwrap();
        assert!(p.plan.streamed > 0 && p.arena_bytes > 0, "{p:?}");
    }

    #[test]
    fn a_scratch_wish_is_held_back_from_residency_where_streaming_stays_the_same() {
        const MIB: u64 = 1 << 20;
        // 16 blocks of 8 MiB: at 96 MiB usable with 4 MiB of scratch, nine
        // stay resident (4 MiB to spare), the rest stream whole.
        let sizes: Vec<(u64, usize)> = (0..16).map(|b| (8 * MIB, b)).collect();
        let w = weights(&sizes);
        let usable = 96 * MIB;
        let plain = plan_model(&w, usable, 4 * MIB).unwrap();
        assert!(plain.plan.streamed > 0 && plain.granularity == Granularity::Block);
        // A 5 MiB wish (under a sixteenth, 6 MiB): one resident block fewer.
        let (p, extra) = plan_model_with_wish(&w, usable, 4 * MIB, 5 * MIB).unwrap();
        assert_eq!(extra, 5 * MIB);
        assert_eq!(p.plan.page_bytes + 8 * MIB, plain.plan.page_bytes, "{p:?}");
        assert!(p.plan.page_bytes + ARENAS * p.arena_bytes + p.scratch <= usable);
        // A larger wish takes a sixteenth of the budget at most.
        let (_, extra) = plan_model_with_wish(&w, usable, 4 * MIB, 64 * MIB).unwrap();
        assert_eq!(extra, usable / SCRATCH_WISH_SHARE);
        // Where nothing could be resident but the arenas, the wish gives way
        // instead of failing the plan.
        let tight = ARENAS * 8 * MIB + 4 * MIB;
        let (p, extra) = plan_model_with_wish(&w, tight, 4 * MIB, 64 * MIB).unwrap();
        assert_eq!(extra, 0);
        assert_eq!(
            p.plan.page_bytes,
            plan_model(&w, tight, 4 * MIB).unwrap().plan.page_bytes
        );
        // No wish: the plain plan.
        let (p, extra) = plan_model_with_wish(&w, usable, 4 * MIB, 0).unwrap();
        assert_eq!((p.plan.page_bytes, extra), (plain.plan.page_bytes, 0));
    }

    /// Sizes with a group each: (size, block, group).
    fn grouped(sizes: &[(u64, usize, usize)]) -> Vec<PlanWeight> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &(size, block, group))| PlanWeight {
                name: format!("w{i}"),
                size,
                block,
                group,
            })
            .collect()
    }

    #[test]
    fn blocks_too_large_to_double_buffer_stream_in_parts() {
        const MIB: u64 = 1 << 20;
        // Two blocks of four 40 MiB groups (160 MiB each): 200 MiB usable
        // holds two arenas of one group, not of one block.
        let sizes: Vec<(u64, usize, usize)> = (0..8).map(|i| (40 * MIB, i / 4, i % 4)).collect();
        let w = grouped(&sizes);
        let p = plan_model(&w, 200 * MIB, 8 * MIB).unwrap();
        assert_eq!(p.granularity, Granularity::Part, "{p:?}");
        // The highest watermark first (two groups resident), then arenas
        // as large as the room left allows: one group each.
        assert_eq!(
            (p.plan.page_bytes, p.arena_bytes),
            (80 * MIB, 48 * MIB),
            "{p:?}"
        );
        assert!(p.plan.page_bytes + ARENAS * p.arena_bytes + p.scratch <= p.usable);
        let l = arena_layout(&w, |i| p.streamed(i), part_capacity(&p));
        assert!(l.fill <= p.arena_bytes);
        // Every streamed group is in one part; parts follow the groups' order.
        for (a, b) in w
            .iter()
            .zip(&w[1..])
            .zip(&l.homes)
            .zip(&l.homes[1..])
            .filter_map(|((pair, ha), hb)| Some((pair, ((*ha)?, (*hb)?))))
        {
            let ((wa, wb), ((pa, _), (pb, _))) = (a, b);
            if wa.block == wb.block {
                assert!(pa <= pb, "{wa:?} {wb:?}");
            }
        }
        assert_eq!(p.streamed_parts, l.streamed_parts);
        assert_eq!(p.streamed_parts, 6, "{p:?}");
        // The same weights without groups cannot be planned at all.
        let whole: Vec<PlanWeight> = w
            .iter()
            .map(|x| PlanWeight {
                group: 0,
                ..x.clone()
            })
            .collect();
        let err = plan_model(&whole, 200 * MIB, 8 * MIB).unwrap_err();
        assert!(matches!(err, PlanError::BudgetTooSmall { .. }), "{err}");
        // Room for whole blocks: they move whole.
        let p = plan_model(&w, 400 * MIB, 8 * MIB).unwrap();
        assert_eq!(p.granularity, Granularity::Block, "{p:?}");
        // Below two arenas of one group, it is too small either way, and
        // the error says how much the smallest setup needs.
        let err = plan_model(&w, 80 * MIB, 8 * MIB).unwrap_err();
        match err {
            // Arenas grow in 16 MiB steps: 48 MiB for a 40 MiB group.
            PlanError::BudgetTooSmall { needed, .. } => assert_eq!(needed, 104 * MIB),
            e => panic!("{e}"),
        }
    }

    #[test]
    fn layout_packs_whole_groups_in_order() {
        let w = grouped(&[(100, 0, 0), (50, 0, 0), (300, 0, 1), (10, 0, 2), (10, 1, 0)]);
        let l = arena_layout(&w, |_| true, Some(800));
        // Groups 0 (512 B aligned) and 1 would be 1024 B: a new part, which
        // group 2 joins.
        assert_eq!(
            l.homes,
            vec![
                Some((0, 0)),
                Some((0, 256)),
                Some((1, 0)),
                Some((1, 512)),
                Some((0, 0))
            ]
        );
        assert_eq!(
            (l.parts.clone(), l.fill, l.streamed_parts),
            (vec![2, 1], 768, 3)
        );
        // A resident group leaves no hole; whole blocks ignore the groups.
        let l = arena_layout(&w, |i| i != 2, Some(800));
        assert_eq!(l.homes[3], Some((0, 512)));
        let l = arena_layout(&w, |_| true, None);
        assert_eq!((l.parts, l.fill, l.streamed_parts), (vec![1, 1], 1280, 2));
    }

    proptest! {
        /// With groups, a plan by part fits too: pages, two arenas and
        /// scratch within usable, every part within an arena, and the
        /// residency policy's question gives the same watermark back.
        #[test]
        fn a_plan_by_part_fits_and_is_a_fixed_point(
            sizes in prop::collection::vec((1u64..3_000_000, 0usize..4, 0usize..3), 1..24),
            usable in 0u64..40_000_000,
            scratch in 0u64..2_000_000,
        ) {
            let mut sizes = sizes;
            sizes.sort_by_key(|&(_, b, g)| (b, g));
            let w = grouped(&sizes);
            let Ok(p) = plan_model(&w, usable, scratch) else {
                return Ok(());
            };
            let l = arena_layout(&w, |i| p.streamed(i), part_capacity(&p));
            prop_assert!(arena_size(l.fill) <= p.arena_bytes);
            let used = p.plan.page_bytes + ARENAS * p.arena_bytes + scratch;
            prop_assert!(used <= usable, "{} > {}", used, usable);
            let layout = layout_of(&w).unwrap();
            prop_assert_eq!(
                layout.max_watermark_within(usable - scratch - ARENAS * p.arena_bytes),
                p.plan.pages_resident
            );
        }
    }

    proptest! {
        /// The plan fits, no higher watermark fits, and the residency
        /// policy's question (highest watermark within usable − scratch −
        /// arenas) gives the same watermark back.
        #[test]
        fn the_plan_is_the_highest_fitting_fixed_point(
            sizes in prop::collection::vec((1u64..3_000_000, 0usize..6), 1..24),
            usable in 0u64..40_000_000,
            scratch in 0u64..2_000_000,
        ) {
            let mut w = weights(&sizes);
            w.sort_by_key(|w| w.block);
            let Ok(p) = plan_model(&w, usable, scratch) else {
                return Ok(());
            };
            let layout = layout_of(&w).unwrap();
            let arena = |wm: u32| arena_size(arena_offsets(&w, |i| !layout.is_resident(i, wm)).1);
            let wm = p.plan.pages_resident;
            prop_assert_eq!(p.arena_bytes, arena(wm));
            prop_assert!(layout.prefix[wm as usize] + ARENAS * p.arena_bytes + scratch <= usable);
            for higher in wm + 1..=layout.page_count() {
                prop_assert!(
                    !layout.cut[higher as usize]
                        || layout.prefix[higher as usize] + ARENAS * arena(higher) + scratch > usable
                );
            }
            prop_assert_eq!(
                layout.max_watermark_within(usable - scratch - ARENAS * p.arena_bytes),
                wm
            );
        }
    }
}
