//! Which weight pages stay in VRAM, across several models (docs/behaviour.md, Residency).
//!
//! Each model has a watermark: pages `0..watermark` are resident, the rest
//! stream every pass. Models sit on a priority list (registering or running
//! one puts it on top). Room is made by taking the top page of the
//! lowest-priority model first; the active model is evicted from last.
//! Before raising a watermark, exhaustion prediction checks that the whole
//! absent prefix fits (after evicting every other model); if it does not, the
//! watermark stays lower instead of loading pages that would be thrown out
//! again later in the same pass.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use crate::layout::{Layout, LayoutConfig, LayoutError};

/// A registered model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct ModelId(pub u32);

impl fmt::Display for ModelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "model {}", self.0)
    }
}

/// One page of one model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct PageId {
    /// Owner.
    pub model: ModelId,
    /// Page index in the model's layout.
    pub page: u32,
}

/// Where a tensor's bytes are during a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Placement {
    /// Resident from an earlier pass: nothing to move.
    Resident,
    /// Becomes resident this pass: upload once into its page, keep it.
    Load,
    /// Above the watermark: upload into a transient arena every pass.
    Stream,
}

/// Residency errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResidencyError {
    /// The model id is not registered (never, or unloaded).
    #[error("{model} is not registered")]
    UnknownModel {
        /// The id given.
        model: ModelId,
    },
    /// Bad layout parameters.
    #[error(transparent)]
    Layout(#[from] LayoutError),
}

/// What the runtime must do for one pass of a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassPlan {
    /// The model run.
    pub model: ModelId,
    /// Pages of other models to free before this pass, in eviction order.
    pub evict: Vec<PageId>,
    /// Pages resident for this pass (the new watermark).
    pub resident_pages: Range<u32>,
    /// Of those, the pages to load this pass (absent until now).
    pub load_pages: Range<u32>,
    /// Placement per tensor, by load index.
    pub tensors: Vec<Placement>,
    /// Bytes uploaded once this pass into resident pages.
    pub bytes_loaded: u64,
    /// Bytes streamed every pass (tensor bytes above the watermark).
    pub bytes_streamed: u64,
    /// Largest streamed tensor (sizes the transient arena).
    pub largest_streamed: u64,
}

/// Counters since creation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ResidencyStats {
    /// Pages made resident.
    pub pages_loaded: u64,
    /// Bytes made resident.
    pub bytes_loaded: u64,
    /// Pages evicted (including unloads).
    pub pages_evicted: u64,
    /// Bytes evicted (including unloads).
    pub bytes_evicted: u64,
}

#[derive(Debug, Clone)]
struct ModelState {
    layout: Layout,
    watermark: u32,
}

impl ModelState {
    fn resident_bytes(&self) -> u64 {
        self.layout.prefix[self.watermark as usize]
    }
}

/// Residency of all models under one byte limit for weight pages.
#[derive(Debug, Clone)]
pub struct Residency {
    layout: LayoutConfig,
    limit: u64,
    used: u64,
    models: BTreeMap<ModelId, ModelState>,
    /// Lowest priority first.
    priority: Vec<ModelId>,
    active: Option<ModelId>,
    next_id: u32,
    stats: ResidencyStats,
}

impl Residency {
    /// Residency with at most `limit` bytes of resident pages.
    pub fn new(layout: LayoutConfig, limit: u64) -> Result<Self, ResidencyError> {
        layout.validate()?;
        Ok(Self {
            layout,
            limit,
            used: 0,
            models: BTreeMap::new(),
            priority: Vec::new(),
            active: None,
            next_id: 0,
            stats: ResidencyStats::default(),
        })
    }

    /// Registers a model by its tensor sizes (load order); it goes on top of
    /// the priority list with nothing resident.
    pub fn register(&mut self, tensor_sizes: &[u64]) -> Result<ModelId, ResidencyError> {
        let layout = self.layout;
        self.register_with(tensor_sizes, &layout)
    }

    /// [`register`](Self::register) with this model's own layout parameters
    /// (the runtime picks a page size per model, so a small model is not
    /// stuck at watermark 0 behind one page larger than its budget).
    pub fn register_with(
        &mut self,
        tensor_sizes: &[u64],
        layout: &LayoutConfig,
    ) -> Result<ModelId, ResidencyError> {
        self.register_ranked(tensor_sizes, &[], layout)
    }

    /// [`register_with`](Self::register_with) over a layout of `ranks`
    /// ([`Layout::ranked`]).
    pub fn register_ranked(
        &mut self,
        tensor_sizes: &[u64],
        ranks: &[u64],
        layout: &LayoutConfig,
    ) -> Result<ModelId, ResidencyError> {
        let layout = Layout::ranked(tensor_sizes, ranks, layout)?;
        let id = ModelId(self.next_id);
        self.next_id += 1;
        tracing::debug!(%id, pages = layout.page_count(), bytes = layout.total_bytes(), "register model");
        self.models.insert(
            id,
            ModelState {
                layout,
                watermark: 0,
            },
        );
        self.priority.push(id);
        Ok(id)
    }

    /// Drops a model; returns its resident pages (top first) for the runtime to free.
    pub fn unload(&mut self, model: ModelId) -> Result<Vec<PageId>, ResidencyError> {
        let _span = tracing::debug_span!("unload", %model).entered();
        let pages = self.release(model)?;
        self.models.remove(&model);
        self.priority.retain(|&m| m != model);
        if self.active == Some(model) {
            self.active = None;
        }
        Ok(pages)
    }

    /// Evicts every resident page of `model` (top first) but keeps it
    /// registered where it was in the priority list: the runtime could not
    /// load its pages, or wants them gone. Its next pass loads them again.
    pub fn release(&mut self, model: ModelId) -> Result<Vec<PageId>, ResidencyError> {
        let mut pages = Vec::new();
        while self.state(model)?.watermark > 0 {
            self.evict_top(model, &mut pages);
        }
        Ok(pages)
    }

    /// Changes the byte limit; returns the pages evicted to fit under it.
    pub fn set_limit(&mut self, limit: u64) -> Vec<PageId> {
        self.limit = limit;
        let mut out = Vec::new();
        if self.used > limit {
            let _span = tracing::debug_span!("evict", limit, used = self.used).entered();
            self.evict_until(self.used - limit, None, &mut out);
        }
        out
    }

    /// Plans and commits one pass of `model`: it becomes active and top
    /// priority; its watermark rises as far as the limit allows after evicting
    /// every other model if needed (exhaustion prediction), never partially
    /// into a multi-page tensor.
    pub fn begin_pass(&mut self, model: ModelId) -> Result<PassPlan, ResidencyError> {
        let _span = tracing::debug_span!("begin_pass", %model).entered();
        let st = self.state(model)?;
        let old = st.watermark;
        let target = st.layout.max_watermark_within(self.limit).max(old);
        let need = st.layout.prefix[target as usize] - st.layout.prefix[old as usize];
        self.priority.retain(|&m| m != model);
        self.priority.push(model);
        self.active = Some(model);
        let mut evict = Vec::new();
        let free = self.limit.saturating_sub(self.used);
        if need > free {
            self.evict_until(need - free, Some(model), &mut evict);
        }
        let plan = self.raise(model, target, evict)?;
        tracing::debug!(
            watermark = target,
            loaded = plan.bytes_loaded,
            streamed = plan.bytes_streamed,
            evicted = plan.evict.len(),
            "pass planned"
        );
        Ok(plan)
    }

    /// Raises `model`'s watermark from where it is to `target` (its pages
    /// already counted free of `evict`) and describes the pass that loads
    /// them.
    fn raise(
        &mut self,
        model: ModelId,
        target: u32,
        evict: Vec<PageId>,
    ) -> Result<PassPlan, ResidencyError> {
        let st = self.state(model)?;
        let old = st.watermark;
        let need = st.layout.prefix[target as usize] - st.layout.prefix[old as usize];
        self.used += need;
        self.stats.pages_loaded += u64::from(target - old);
        self.stats.bytes_loaded += need;
        let st = self.state_mut(model)?;
        st.watermark = target;
        let st = &self.models[&model];
        let tensors: Vec<Placement> = (0..st.layout.tensors.len())
            .map(|i| {
                let slot = &st.layout.tensors[i];
                if slot.last_page < old {
                    Placement::Resident
                } else if slot.last_page < target {
                    Placement::Load
                } else {
                    Placement::Stream
                }
            })
            .collect();
        let sizes_where = |want: Placement| -> Vec<u64> {
            st.layout
                .tensors
                .iter()
                .zip(&tensors)
                .filter(|(_, p)| **p == want)
                .map(|(s, _)| s.size)
                .collect()
        };
        let streamed = sizes_where(Placement::Stream);
        let bytes_loaded = sizes_where(Placement::Load).iter().sum();
        Ok(PassPlan {
            model,
            evict,
            resident_pages: 0..target,
            load_pages: old..target,
            tensors,
            bytes_loaded,
            bytes_streamed: streamed.iter().sum(),
            largest_streamed: streamed.iter().copied().max().unwrap_or(0),
        })
    }

    /// Loads `model`'s next pages into free room while another model runs:
    /// its watermark rises as far as `room` bytes and the room under the
    /// limit allow, **never evicting anything** and leaving the priority
    /// list and the active model as they are (the prefetch of the next
    /// model's first weights). The plan's `evict` is empty; its `Load`
    /// tensors are the ones to upload.
    pub fn prefetch(&mut self, model: ModelId, room: u64) -> Result<PassPlan, ResidencyError> {
        let _span = tracing::debug_span!("prefetch", %model, room).entered();
        let st = self.state(model)?;
        let old = st.watermark;
        let free = self.limit.saturating_sub(self.used).min(room);
        let reach = st.layout.prefix[old as usize].saturating_add(free);
        let target = st.layout.max_watermark_within(reach).max(old);
        self.raise(model, target, Vec::new())
    }

    /// Puts `model` at the bottom of the priority list (the first to
    /// yield): a model opened ahead of its turn must not outrank the one
    /// running.
    pub fn lower(&mut self, model: ModelId) -> Result<(), ResidencyError> {
        self.state(model)?;
        self.priority.retain(|&m| m != model);
        self.priority.insert(0, model);
        Ok(())
    }

    /// One pass of `model` under a limit that holds for this pass: the
    /// runtime's room for weight pages depends on what the active model needs
    /// besides them (its arenas and activations). The model goes on top and
    /// becomes active first; then the limit is applied, evicting other models
    /// lowest priority first and this one last; then [`begin_pass`](Self::begin_pass)
    /// raises its watermark as far as the limit allows. `evict` lists every
    /// page freed, in order, the model's own (if any) last.
    pub fn begin_pass_within(
        &mut self,
        model: ModelId,
        limit: u64,
    ) -> Result<PassPlan, ResidencyError> {
        self.state(model)?;
        self.priority.retain(|&m| m != model);
        self.priority.push(model);
        self.active = Some(model);
        let mut evict = self.set_limit(limit);
        let mut plan = self.begin_pass(model)?;
        evict.append(&mut plan.evict);
        plan.evict = evict;
        Ok(plan)
    }

    /// Current placement of each tensor of `model` (Resident or Stream), without changing anything.
    pub fn placement(&self, model: ModelId) -> Result<Vec<Placement>, ResidencyError> {
        let st = self.state(model)?;
        Ok((0..st.layout.tensors.len())
            .map(|i| {
                if st.layout.is_resident(i, st.watermark) {
                    Placement::Resident
                } else {
                    Placement::Stream
                }
            })
            .collect())
    }

    /// The model's layout (pages, slots).
    pub fn layout(&self, model: ModelId) -> Result<&Layout, ResidencyError> {
        Ok(&self.state(model)?.layout)
    }

    /// Pages resident for `model`.
    pub fn watermark(&self, model: ModelId) -> Result<u32, ResidencyError> {
        Ok(self.state(model)?.watermark)
    }

    /// Bytes of `model`'s resident pages (its `loaded_vram`).
    pub fn resident_bytes(&self, model: ModelId) -> Result<u64, ResidencyError> {
        Ok(self.state(model)?.resident_bytes())
    }

    /// Bytes of all resident pages.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// The byte limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The model whose pass ran last (evicted from last).
    pub fn active(&self) -> Option<ModelId> {
        self.active
    }

    /// Models from lowest to highest priority.
    pub fn priority(&self) -> &[ModelId] {
        &self.priority
    }

    /// Order in which models are evicted: lowest priority first, the active model last.
    pub fn eviction_order(&self) -> Vec<ModelId> {
        let mut order: Vec<ModelId> = self
            .priority
            .iter()
            .copied()
            .filter(|&m| Some(m) != self.active)
            .collect();
        order.extend(self.active.filter(|a| self.models.contains_key(a)));
        order
    }

    /// Counters.
    pub fn stats(&self) -> ResidencyStats {
        self.stats
    }

    fn state(&self, model: ModelId) -> Result<&ModelState, ResidencyError> {
        self.models
            .get(&model)
            .ok_or(ResidencyError::UnknownModel { model })
    }

    fn state_mut(&mut self, model: ModelId) -> Result<&mut ModelState, ResidencyError> {
        self.models
            .get_mut(&model)
            .ok_or(ResidencyError::UnknownModel { model })
    }

    /// Evicts one top page of `model`, then the rest of a multi-page tensor it split.
    fn evict_top(&mut self, model: ModelId, out: &mut Vec<PageId>) {
        let Some(st) = self.models.get_mut(&model) else {
            return;
        };
        if st.watermark == 0 {
            return;
        }
        let target = st.layout.snap_down(st.watermark - 1);
        for page in (target..st.watermark).rev() {
            let bytes = st.layout.pages[page as usize];
            self.used -= bytes;
            self.stats.pages_evicted += 1;
            self.stats.bytes_evicted += bytes;
            out.push(PageId { model, page });
        }
        tracing::trace!(%model, from = st.watermark, to = target, "evict pages");
        st.watermark = target;
    }

    /// Frees at least `bytes` (or everything evictable), in eviction order;
    /// `keep` is never touched.
    fn evict_until(&mut self, bytes: u64, keep: Option<ModelId>, out: &mut Vec<PageId>) {
        let mut freed = 0u64;
        for m in self.eviction_order() {
            if Some(m) == keep {
                continue;
            }
            while freed < bytes {
                let before = self.used;
                self.evict_top(m, out);
                if self.used == before {
                    break;
                }
                freed += before - self.used;
            }
            if freed >= bytes {
                break;
            }
        }
    }
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

    fn pages_of(evict: &[PageId], model: ModelId) -> Vec<u32> {
        evict
            .iter()
            .filter(|p| p.model == model)
            .map(|p| p.page)
            .collect()
    }

    #[test]
    fn a_pass_within_a_lower_limit_evicts_others_first_top_pages_first() {
        let mut r = Residency::new(cfg(), 1000).unwrap();
        let a = r.register(&[100; 5]).unwrap();
        let b = r.register(&[100; 4]).unwrap();
        r.begin_pass_within(a, 1000).unwrap();
        r.begin_pass_within(b, 1000).unwrap();
        assert_eq!((r.watermark(a).unwrap(), r.watermark(b).unwrap()), (5, 4));
        // `a` runs with room for 7 pages: `b` (lowest now) yields its top 2.
        let plan = r.begin_pass_within(a, 700).unwrap();
        assert_eq!(pages_of(&plan.evict, b), vec![3, 2]);
        assert!(pages_of(&plan.evict, a).is_empty());
        assert_eq!((r.watermark(a).unwrap(), r.watermark(b).unwrap()), (5, 2));
        assert_eq!(plan.load_pages, 5..5, "the active model keeps its pages");
        assert_eq!(r.eviction_order(), vec![b, a]);
        // Room for 3 pages only: `b` empties first, then `a` loses its top.
        let plan = r.begin_pass_within(a, 300).unwrap();
        assert_eq!(pages_of(&plan.evict, b), vec![1, 0]);
        assert_eq!(pages_of(&plan.evict, a), vec![4, 3]);
        assert_eq!(plan.resident_pages, 0..3);
        assert_eq!(
            plan.tensors
                .iter()
                .filter(|p| **p == Placement::Stream)
                .count(),
            2
        );
        assert!(r.used() <= r.limit());
    }

    #[test]
    fn prefetch_loads_into_free_room_only_and_the_running_model_outranks_it() {
        let mut r = Residency::new(cfg(), 1000).unwrap();
        let a = r.register(&[100; 6]).unwrap();
        r.begin_pass_within(a, 800).unwrap();
        // The next model, opened ahead of its turn, below the running one.
        let b = r.register(&[100; 5]).unwrap();
        r.lower(b).unwrap();
        assert_eq!(r.priority(), &[b, a]);
        let plan = r.prefetch(b, 1000).unwrap();
        assert!(plan.evict.is_empty());
        assert_eq!((plan.load_pages, plan.bytes_loaded), (0..2, 200));
        assert_eq!(r.watermark(a).unwrap(), 6, "the running model is untouched");
        assert_eq!((r.active(), r.priority()), (Some(a), &[b, a][..]));
        assert!(r.used() <= r.limit());
        // No room left: nothing more, still no eviction; and `room` bounds it.
        assert_eq!(r.prefetch(b, 1000).unwrap().load_pages, 2..2);
        r.begin_pass_within(a, 1000).unwrap();
        assert_eq!(r.prefetch(b, 150).unwrap().load_pages, 2..3);
        // The running model's next pass needing room takes the prefetched
        // pages first (top first); then `b`'s own pass keeps what is left.
        let plan = r.begin_pass_within(a, 700).unwrap();
        assert_eq!(pages_of(&plan.evict, b), vec![2, 1]);
        assert_eq!(r.watermark(a).unwrap(), 6);
        let plan = r.begin_pass_within(b, 1000).unwrap();
        assert_eq!(plan.load_pages, 1..5, "the prefetched page stays");
    }

    #[test]
    fn a_model_that_fits_beside_others_is_never_touched() {
        let mut r = Residency::new(cfg(), 1000).unwrap();
        let a = r.register(&[100; 3]).unwrap();
        let b = r.register(&[100; 3]).unwrap();
        for _ in 0..3 {
            for m in [a, b] {
                let plan = r.begin_pass_within(m, 900).unwrap();
                assert!(plan.evict.is_empty(), "{plan:?}");
            }
        }
        assert_eq!(r.stats().pages_loaded, 6, "each page loaded once");
    }

    #[test]
    fn release_keeps_the_model_registered_and_its_next_pass_reloads() {
        let mut r = Residency::new(cfg(), 1000).unwrap();
        let a = r.register(&[100; 3]).unwrap();
        r.begin_pass(a).unwrap();
        assert_eq!(r.release(a).unwrap().len(), 3);
        assert_eq!((r.watermark(a).unwrap(), r.used()), (0, 0));
        let plan = r.begin_pass(a).unwrap();
        assert_eq!((plan.load_pages, plan.bytes_loaded), (0..3, 300));
    }

    #[test]
    fn register_with_uses_the_models_own_page_size() {
        let mut r = Residency::new(cfg(), 1000).unwrap();
        let small = LayoutConfig {
            page_size: 50,
            ..cfg()
        };
        let a = r.register_with(&[40, 40, 40], &small).unwrap();
        assert_eq!(r.layout(a).unwrap().page_count(), 3);
        let b = r.register(&[40, 40, 40]).unwrap();
        assert_eq!(r.layout(b).unwrap().page_count(), 2);
    }
}
