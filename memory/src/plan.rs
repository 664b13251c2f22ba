//! The single-model plan behind `dynvram plan` and a single-model run: which
//! weights stay resident and which stream, with no GPU (docs/behaviour.md, Residency; issue 4).

use crate::layout::{Layout, LayoutConfig, LayoutError};
use crate::residency::Placement;

/// What the plan must leave room for besides resident pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct PlanRoom {
    /// Bytes the budget allows in total (`capacity − reserve − headroom`).
    pub usable: u64,
    /// Activations and other scratch bytes of a pass.
    pub scratch: u64,
    /// Transient arenas, each at least the largest streamed tensor (2 in the runtime).
    pub arenas: u32,
}

use crate::budget::Bytes;

/// Plan errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// Even streaming everything does not fit: the largest tensor (times the
    /// arena count) plus scratch exceeds the budget.
    #[error(
        "budget too small: {arenas} arena(s) holding the largest tensor {tensor} ({}) or its block's streamed weights, plus {} of activations and caches, need {}; usable VRAM is {}",
        Bytes(*size), Bytes(*scratch), Bytes(*needed), Bytes(*usable)
    )]
    BudgetTooSmall {
        /// Name of the largest tensor.
        tensor: String,
        /// Its size.
        size: u64,
        /// Arena count.
        arenas: u32,
        /// Scratch bytes.
        scratch: u64,
        /// Bytes the minimal setup needs.
        needed: u64,
        /// Usable VRAM.
        usable: u64,
    },
    /// Bad layout parameters.
    #[error(transparent)]
    Layout(#[from] LayoutError),
}

/// One tensor in the plan.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PlannedTensor {
    /// Tensor name.
    pub name: String,
    /// Bytes.
    pub size: u64,
    /// Resident or streamed (never `Load`: a plan has no history).
    pub placement: Placement,
    /// First page.
    pub first_page: u32,
    /// Last page.
    pub last_page: u32,
}

/// The plan for one model.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Plan {
    /// Per tensor, in load order.
    pub tensors: Vec<PlannedTensor>,
    /// Number of resident tensors.
    pub resident: usize,
    /// Number of streamed tensors.
    pub streamed: usize,
    /// Tensor bytes resident.
    pub resident_bytes: u64,
    /// Tensor bytes streamed, i.e. moved host → GPU per pass.
    pub streamed_bytes: u64,
    /// VRAM taken by resident pages (tensor bytes plus alignment padding).
    pub page_bytes: u64,
    /// Pages resident (the watermark).
    pub pages_resident: u32,
    /// Pages in all.
    pub pages_total: u32,
    /// Largest streamed tensor.
    pub largest_streamed: u64,
    /// Transient arena bytes reserved (`arenas × largest_streamed`).
    pub transient_bytes: u64,
}

/// Plans one model: the highest watermark such that resident pages, the
/// arenas for what is left to stream, and scratch fit in `room.usable`.
pub fn plan<S: AsRef<str>>(
    weights: &[(S, u64)],
    room: PlanRoom,
    layout: &LayoutConfig,
) -> Result<Plan, PlanError> {
    plan_ranked(weights, &[], room, layout)
}

/// [`plan`] over a layout of `ranks` ([`Layout::ranked`]).
pub fn plan_ranked<S: AsRef<str>>(
    weights: &[(S, u64)],
    ranks: &[u64],
    room: PlanRoom,
    layout: &LayoutConfig,
) -> Result<Plan, PlanError> {
    let sizes: Vec<u64> = weights.iter().map(|w| w.1).collect();
    let l = Layout::ranked(&sizes, ranks, layout)?;
    let arenas = u64::from(room.arenas);
    // largest tensor streamed when the watermark is w: the max over tensors whose last page >= w.
    let largest_above = |w: u32| {
        l.tensors
            .iter()
            .filter(|t| t.last_page >= w)
            .map(|t| t.size)
            .max()
            .unwrap_or(0)
    };
    let fits = |w: u32| {
        // Checked, not saturating: a sum past u64::MAX never fits, even
        // an unlimited (u64::MAX) budget.
        arenas
            .checked_mul(largest_above(w))
            .and_then(|t| l.prefix[w as usize].checked_add(t))
            .and_then(|n| n.checked_add(room.scratch))
            .is_some_and(|n| n <= room.usable)
    };
    let watermark = (0..=l.page_count())
        .rev()
        .find(|&w| l.cut[w as usize] && fits(w));
    let Some(watermark) = watermark else {
        let (i, size) = sizes
            .iter()
            .copied()
            .enumerate()
            .max_by_key(|&(_, s)| s)
            .unwrap_or((0, 0));
        return Err(PlanError::BudgetTooSmall {
            tensor: weights
                .get(i)
                .map_or_else(String::new, |w| w.0.as_ref().to_owned()),
            size,
            arenas: room.arenas,
            scratch: room.scratch,
            needed: arenas.saturating_mul(size).saturating_add(room.scratch),
            usable: room.usable,
        });
    };
    let tensors: Vec<PlannedTensor> = weights
        .iter()
        .zip(&l.tensors)
        .enumerate()
        .map(|(i, ((name, size), slot))| PlannedTensor {
            name: name.as_ref().to_owned(),
            size: *size,
            placement: if l.is_resident(i, watermark) {
                Placement::Resident
            } else {
                Placement::Stream
            },
            first_page: slot.first_page,
            last_page: slot.last_page,
        })
        .collect();
    let sum = |p: Placement| {
        tensors
            .iter()
            .filter(|t| t.placement == p)
            .map(|t| t.size)
            .sum()
    };
    let count = |p: Placement| tensors.iter().filter(|t| t.placement == p).count();
    let largest_streamed = largest_above(watermark);
    Ok(Plan {
        resident: count(Placement::Resident),
        streamed: count(Placement::Stream),
        resident_bytes: sum(Placement::Resident),
        streamed_bytes: sum(Placement::Stream),
        page_bytes: l.prefix[watermark as usize],
        pages_resident: watermark,
        pages_total: l.page_count(),
        largest_streamed,
        transient_bytes: arenas.saturating_mul(largest_streamed),
        tensors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> LayoutConfig {
        LayoutConfig {
            page_size: 100,
            align: 1,
            tiny_threshold: 0,
        }
    }

    #[test]
    fn half_budget_streams_the_top() {
        let w: Vec<(String, u64)> = (0..10).map(|i| (format!("t{i}"), 100)).collect();
        let p = plan(
            &w,
            PlanRoom {
                usable: 500,
                scratch: 0,
                arenas: 0,
            },
            &cfg(),
        )
        .unwrap();
        assert_eq!(
            (p.resident, p.streamed, p.streamed_bytes, p.pages_resident),
            (5, 5, 500, 5)
        );
        assert_eq!(p.tensors[4].placement, Placement::Resident);
        assert_eq!(p.tensors[5].placement, Placement::Stream);
        // Two arenas of 100 and 50 scratch leave 250 → 2 pages.
        let p = plan(
            &w,
            PlanRoom {
                usable: 500,
                scratch: 50,
                arenas: 2,
            },
            &cfg(),
        )
        .unwrap();
        assert_eq!((p.pages_resident, p.transient_bytes), (2, 200));
        // Everything fits: no arena needed.
        let p = plan(
            &w,
            PlanRoom {
                usable: 1000,
                scratch: 0,
                arenas: 2,
            },
            &cfg(),
        )
        .unwrap();
        assert_eq!((p.streamed, p.transient_bytes), (0, 0));
    }

    #[test]
    fn too_small_is_a_clear_error() {
        let w = [("a", 10u64), ("big", 300)];
        // Everything resident (310 B of pages) fits 500 with no arena at all.
        let p = plan(
            &w,
            PlanRoom {
                usable: 500,
                scratch: 0,
                arenas: 2,
            },
            &cfg(),
        )
        .unwrap();
        assert_eq!(p.streamed, 0);
        let e = plan(
            &w,
            PlanRoom {
                usable: 250,
                scratch: 0,
                arenas: 2,
            },
            &cfg(),
        )
        .unwrap_err();
        assert_eq!(
            e,
            PlanError::BudgetTooSmall {
                tensor: "big".into(),
                size: 300,
                arenas: 2,
                scratch: 0,
                needed: 600,
                usable: 250
            }
        );
        assert!(e.to_string().contains("big"));
    }
}
