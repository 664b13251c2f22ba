//! Residency across every model of one runtime (docs/behaviour.md, Residency): which weights of
//! which model stay in VRAM. The decision belongs to
//! [`dynvram_memory::Residency`] alone (priority list, watermarks, eviction
//! order, exhaustion prediction); this module carries it out on the GPU.
//!
//! A model *acquires* residency when it is opened and at the start of each
//! pass: it goes on top of the priority list, the room its pass needs besides
//! weight pages (two transient arenas and its activations) is set aside, and
//! the policy raises its watermark as far as the rest allows, taking pages
//! from other models first (lowest priority first, top page first) and from
//! this model last. Evicted weights' buffers are dropped at once, so the
//! ledger's `loaded_vram` falls with them; a model that yielded streams those
//! weights, and its next pass loads back what it can keep. A model that fits
//! beside the others is never touched.
//!
//! The two arenas are the runtime's, not a model's: passes are serialized by
//! the staging ring's lock, so one pair serves every model, sized for the
//! pass that runs.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use dynvram_memory::{LayoutConfig, ModelId, OwnerClass, Placement, Residency};
use serde::Serialize;

use crate::config::RuntimeConfig;
use crate::error::{Result, RuntimeError};
use crate::planning::{
    ARENAS, PlanWeight, arena_layout, arena_size, layout_for, part_capacity, plan_model_with_wish,
    residency_ranks,
};
use crate::upload::ModelView;
use dynvram_gpu::accounting::{SharedBudget, TrackedBuffer};
use dynvram_gpu::device::{Gpu, StagingRing};

/// The registry, shared by the runtime and its models (a model unregisters
/// itself when dropped).
pub(crate) type SharedRegistry = Arc<Mutex<Registry>>;

/// What the registry uses of its runtime (`Runtime::device`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Device<'a> {
    /// The GPU.
    pub gpu: &'a Gpu,
    /// The runtime's budget.
    pub budget: &'a SharedBudget,
    /// Its settings.
    pub config: &'a RuntimeConfig,
    /// Its pipelines (a resident weight's conversion as it is uploaded).
    pub cache: &'a dynvram_gpu::ops::cache::PipelineCache,
}

/// Locks the registry, recovering from a poisoned lock (each mutation keeps
/// policy and buffers consistent before it can fail).
pub(crate) fn lock(registry: &SharedRegistry) -> MutexGuard<'_, Registry> {
    registry.lock().unwrap_or_else(|e| e.into_inner())
}

/// Usage of weight buffers and arenas: kernels read them, uploads copy into them.
fn buffer_usage() -> wgpu::BufferUsages {
    wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC
}

/// The policy plus the GPU buffers that carry out its decisions.
#[derive(Debug)]
pub(crate) struct Registry {
    policy: Residency,
    models: HashMap<ModelId, Entry>,
    /// The transient arenas of the pass that ran last.
    arenas: Vec<Arc<TrackedBuffer>>,
    /// Whether the arenas were cleared through wgpu (see `Placed`).
    arenas_cleared: Arc<AtomicBool>,
    arena_bytes: u64,
}

#[derive(Debug)]
struct Entry {
    path: PathBuf,
    /// Resident buffer of each weight (load order), `None` while it streams.
    buffers: Vec<Option<Arc<TrackedBuffer>>>,
    /// The last plan.
    planned: Option<Planned>,
}

/// A plan's inputs and what the passes need of it.
#[derive(Debug, Clone, Copy)]
struct Planned {
    usable: u64,
    reserve: u64,
    arena_bytes: u64,
    /// Part capacity (`None`: whole blocks).
    capacity: Option<u64>,
    /// Bytes of the scratch wish held back besides `reserve`.
    wish: u64,
}

impl Entry {
    fn loaded_vram(&self) -> u64 {
        self.buffers.iter().flatten().map(|b| b.size).sum()
    }
}

/// Where a weight's bytes are during one pass.
#[derive(Debug, Clone)]
pub(crate) enum Home {
    /// In its own resident buffer.
    Resident(Arc<TrackedBuffer>),
    /// In the arena of its block's part `part`, at `offset`.
    Arena {
        /// The part of its block (0 where blocks stream whole).
        part: usize,
        /// Byte offset in the arena.
        offset: u64,
    },
}

/// The active model's weights for one pass; holds their buffers until the
/// pass ends (no other pass can evict them meanwhile: passes hold the ring).
#[derive(Debug)]
pub(crate) struct Placed {
    /// Per weight, load order.
    pub homes: Vec<Home>,
    /// The two arenas (empty when nothing streams).
    pub arenas: Vec<Arc<TrackedBuffer>>,
    /// Each block's first unit: the pass stages units (a block, or a part
    /// of one) in turn, each into its arena ([`Self::unit_arena`]); block
    /// `b` has units `first_unit[b]..first_unit[b + 1]` (the last entry is
    /// the count).
    pub first_unit: Vec<usize>,
    /// The arena each unit streams into (`None`: a unit that streams
    /// nothing): streamed units alternate between the arenas in pass order,
    /// whatever resident units stand between them, so a streamed unit's
    /// arena is never the one the streamed unit before it reads.
    pub unit_arena: Vec<Option<usize>>,
    /// File bytes made resident by this acquisition.
    pub loaded_bytes: u64,
    /// Bytes of the budget that neither the weights placed nor the pass's
    /// reserve (activations, scratch, arenas) take: what a pass may use
    /// beyond its plan (larger converted pieces,
    /// `LinearScratch::set_piece_room`).
    pub room: u64,
    /// Set once the arenas have been cleared through wgpu: wgpu zero-fills
    /// ranges it has not seen written before their first use, which would
    /// overwrite copies made on the copy queue. Shared by every pass over
    /// the same arenas.
    pub arenas_cleared: Arc<AtomicBool>,
}

impl Placed {
    /// The arena unit `u` streams into, if it streams.
    pub fn arena_of(&self, u: usize) -> Option<usize> {
        self.unit_arena.get(u).copied().flatten()
    }

    /// Block `b`'s first unit (blocks past the last weight's have one unit
    /// each, staging nothing).
    pub fn first_unit(&self, b: usize) -> usize {
        let last = self.first_unit.len() - 1;
        match self.first_unit.get(b) {
            Some(&u) => u,
            None => self.first_unit[last] + (b - last),
        }
    }
}

/// Residency of one open model, for reports.
#[derive(Debug, Clone, Serialize)]
pub struct ModelResidency {
    /// The model's id under the runtime's policy.
    pub id: ModelId,
    /// Its (first) file.
    pub path: PathBuf,
    /// Bytes of its resident weight buffers in the ledger (its `loaded_vram`).
    pub loaded_vram: u64,
    /// Weights resident now.
    pub resident_tensors: usize,
    /// Weights that stream on its next pass (unless it re-acquires them).
    pub streamed_tensors: usize,
    /// Pages resident (the watermark).
    pub pages_resident: u32,
    /// Pages in all.
    pub pages_total: u32,
    /// Whether its pass (or open) was the last: evicted from last.
    pub active: bool,
}

impl Registry {
    /// An empty registry whose policy starts with `usable` bytes (each
    /// acquisition sets the limit that holds for its pass).
    pub fn new(usable: u64) -> Result<Self> {
        let policy = Residency::new(LayoutConfig::default(), usable).map_err(|source| {
            RuntimeError::Residency {
                model: PathBuf::new(),
                source,
            }
        })?;
        Ok(Self {
            policy,
            models: HashMap::new(),
            arenas: Vec::new(),
            arenas_cleared: Arc::default(),
            arena_bytes: 0,
        })
    }

    /// Registers a model's weights (load order) with nothing resident; it
    /// goes on top of the priority list.
    pub fn register(&mut self, path: &std::path::Path, weights: &[PlanWeight]) -> Result<ModelId> {
        let sizes: Vec<u64> = weights.iter().map(|w| w.size).collect();
        let id = self
            .policy
            .register_ranked(&sizes, &residency_ranks(weights), &layout_for(weights))
            .map_err(|source| RuntimeError::Residency {
                model: path.to_owned(),
                source,
            })?;
        self.models.insert(
            id,
            Entry {
                path: path.to_owned(),
                buffers: vec![None; weights.len()],
                planned: None,
            },
        );
        Ok(id)
    }

    /// Forgets a model and frees its buffers; the arenas go too (the next
    /// pass sizes them for itself), so a runtime with no model tracks nothing.
    pub fn unregister(&mut self, id: ModelId) {
        let _span = tracing::debug_span!("unregister", %id).entered();
        let _ = self.policy.unload(id);
        self.models.remove(&id);
        self.arenas.clear();
        self.arena_bytes = 0;
    }

    /// Acquires residency for one pass (or the open) of `model`: applies the
    /// policy's plan, frees what it evicted, sizes the arenas, and records
    /// the uploads of newly resident weights into `enc`. On error the
    /// model's residency is released (its next pass starts from nothing).
    pub(crate) fn acquire(
        &mut self,
        rt: Device<'_>,
        model: ModelView<'_>,
        ring: &mut StagingRing,
        enc: &mut wgpu::CommandEncoder,
    ) -> Result<Placed> {
        let id = model.id;
        let _span =
            tracing::info_span!("acquire_residency", model = %model.path.display()).entered();
        let (usable, live) = {
            let b = dynvram_gpu::accounting::lock(rt.budget);
            let l = b.ledger();
            let arenas = self.arenas.iter().map(|a| a.size).sum::<u64>();
            // Everything alive that is neither a weight nor our arenas:
            // activations and patches of every model.
            let live = l
                .total()
                .saturating_sub(l.bytes(OwnerClass::Weights))
                .saturating_sub(arenas);
            (b.usable(), live)
        };
        let residency_error = |source| RuntimeError::Residency {
            model: model.path.to_path_buf(),
            source,
        };
        // Room besides weight pages: the pass's activations (declared, or
        // what is alive now if more) and the arenas of what must stream.
        let reserve = model.scratch_bytes.max(live);
        let (arena_bytes, capacity, wish) = self.arena_bytes_for(model, usable, reserve)?;
        // The wish is held back from the weights for the pass's pieces.
        let reserve = reserve + wish;
        let limit = usable
            .saturating_sub(reserve)
            .saturating_sub(ARENAS.saturating_mul(arena_bytes));
        let plan = self
            .policy
            .begin_pass_within(id, limit)
            .map_err(residency_error)?;
        let mut yielded: Vec<ModelId> = plan.evict.iter().map(|p| p.model).collect();
        yielded.dedup();
        for m in yielded.into_iter().filter(|&m| m != id) {
            self.drop_evicted(m);
        }
        let streamed = |i: usize| plan.tensors[i] == Placement::Stream;
        let layout = arena_layout(model.plan_weights, streamed, capacity);
        let placed = self
            .resize_arenas(rt, arena_size(layout.fill))
            .and_then(|()| self.load(rt, model, &layout, ring, enc));
        match placed {
            Ok(mut placed) => {
                let weights = dynvram_gpu::accounting::lock(rt.budget)
                    .ledger()
                    .bytes(OwnerClass::Weights);
                placed.room = limit.saturating_sub(weights) + wish;
                tracing::info!(
                    watermark = plan.resident_pages.end,
                    loaded = placed.loaded_bytes,
                    streamed = plan.bytes_streamed,
                    evicted_pages = plan.evict.len(),
                    limit,
                    room = placed.room,
                    "residency acquired"
                );
                Ok(placed)
            }
            Err(e) => {
                self.release(id);
                Err(e)
            }
        }
    }

    /// Loads `model`'s next weights into free room while another model
    /// runs (`Model::prefetch`): at most `bytes`, and only what the ledger
    /// and the policy have free now — nothing is evicted, the priority list
    /// stays — recording the uploads into `enc`. Returns the bytes loaded.
    /// On error the model's residency is released.
    pub(crate) fn prefetch(
        &mut self,
        rt: Device<'_>,
        model: ModelView<'_>,
        bytes: u64,
        ring: &mut StagingRing,
        enc: &mut wgpu::CommandEncoder,
    ) -> Result<u64> {
        let id = model.id;
        let _span = tracing::info_span!("prefetch", model = %model.path.display()).entered();
        let free = {
            let b = dynvram_gpu::accounting::lock(rt.budget);
            b.usable().saturating_sub(b.ledger().total())
        };
        let plan = self
            .policy
            .prefetch(id, bytes.min(free))
            .map_err(|source| RuntimeError::Residency {
                model: model.path.to_path_buf(),
                source,
            })?;
        let result = (|| {
            let entry = self.models.get_mut(&id).ok_or(RuntimeError::Residency {
                model: model.path.to_path_buf(),
                source: dynvram_memory::ResidencyError::UnknownModel { model: id },
            })?;
            let mut loaded = 0;
            for (i, p) in plan.tensors.iter().enumerate() {
                if *p != Placement::Load || entry.buffers[i].is_some() {
                    continue;
                }
                entry.buffers[i] = Some(upload_resident(rt, model, i, ring, enc)?);
                loaded += model.weights[i].info.len();
            }
            Ok(loaded)
        })();
        match result {
            Ok(loaded) => {
                tracing::info!(loaded, watermark = plan.resident_pages.end, "prefetched");
                Ok(loaded)
            }
            Err(e) => {
                self.release(id);
                Err(e)
            }
        }
    }

    /// Drops every resident weight of `id` and its pages (after a failed
    /// load: its next pass starts from nothing).
    fn release(&mut self, id: ModelId) {
        let _ = self.policy.release(id);
        if let Some(entry) = self.models.get_mut(&id) {
            entry.buffers.fill(None);
        }
    }

    /// Puts model `id` at the bottom of the priority list (the first to
    /// yield).
    pub(crate) fn lower(&mut self, id: ModelId, path: &std::path::Path) -> Result<()> {
        self.policy
            .lower(id)
            .map_err(|source| RuntimeError::Residency {
                model: path.to_owned(),
                source,
            })
    }

    /// The arena size `model`'s plan needs under `usable` bytes with
    /// `reserve` held back, the capacity of its parts where blocks stream
    /// in parts, and the bytes of its scratch wish the plan holds back
    /// besides (`plan_model_with_wish`): planned once per (usable, reserve)
    /// and model, not on every pass (a decode step is a pass).
    fn arena_bytes_for(
        &mut self,
        model: ModelView<'_>,
        usable: u64,
        reserve: u64,
    ) -> Result<(u64, Option<u64>, u64)> {
        let entry = self.models.get_mut(&model.id);
        if let Some(p) = entry.as_ref().and_then(|e| e.planned.as_ref())
            && (p.usable, p.reserve) == (usable, reserve)
        {
            return Ok((p.arena_bytes, p.capacity, p.wish));
        }
        let (room, wish) =
            plan_model_with_wish(model.plan_weights, usable, reserve, model.scratch_wish).map_err(
                |source| RuntimeError::Plan {
                    model: model.path.to_path_buf(),
                    source,
                },
            )?;
        let planned = Planned {
            usable,
            reserve,
            arena_bytes: room.arena_bytes,
            capacity: part_capacity(&room),
            wish,
        };
        if let Some(e) = entry {
            e.planned = Some(planned);
        }
        Ok((planned.arena_bytes, planned.capacity, wish))
    }

    /// Drops the buffers of `m`'s weights that its watermark no longer covers.
    fn drop_evicted(&mut self, m: ModelId) {
        let (Ok(placement), Some(entry)) = (self.policy.placement(m), self.models.get_mut(&m))
        else {
            return;
        };
        let mut freed = 0;
        for (p, buf) in placement.iter().zip(&mut entry.buffers) {
            if *p == Placement::Stream {
                freed += buf.take().map_or(0, |b| b.size);
            }
        }
        tracing::info!(
            model = %entry.path.display(),
            freed,
            resident = entry.loaded_vram(),
            "model yields VRAM"
        );
    }

    /// Makes the two arenas `bytes` each (none when 0); the old ones are
    /// freed before the new ones are allocated.
    fn resize_arenas(&mut self, rt: Device<'_>, bytes: u64) -> Result<()> {
        if self.arena_bytes == bytes {
            return Ok(());
        }
        self.arenas.clear();
        self.arena_bytes = 0;
        self.arenas_cleared = Arc::default();
        if bytes == 0 {
            return Ok(());
        }
        // Where passes copy on the copy queue, it writes the arenas.
        let on_copy_queue = rt.config.copy_queue && rt.gpu.transfer_queue().is_some();
        for a in 0..ARENAS {
            let label = format!("arena {a}");
            self.arenas.push(Arc::new(TrackedBuffer::new_with(
                rt.budget,
                OwnerClass::Transient,
                &label,
                bytes,
                |size| match on_copy_queue {
                    true => rt.gpu.create_copy_target(&label, size, buffer_usage()),
                    false => rt.gpu.create_buffer(&label, size, buffer_usage()),
                },
            )?));
        }
        self.arena_bytes = bytes;
        Ok(())
    }

    /// Homes of `model`'s weights: arena offsets for streamed ones; resident
    /// ones keep their buffer, or get one now with its upload recorded.
    fn load(
        &mut self,
        rt: Device<'_>,
        model: ModelView<'_>,
        layout: &crate::planning::ArenaLayout,
        ring: &mut StagingRing,
        enc: &mut wgpu::CommandEncoder,
    ) -> Result<Placed> {
        let entry = self
            .models
            .get_mut(&model.id)
            .ok_or_else(|| RuntimeError::Residency {
                model: model.path.to_path_buf(),
                source: dynvram_memory::ResidencyError::UnknownModel { model: model.id },
            })?;
        let mut loaded_bytes = 0;
        let mut homes = Vec::with_capacity(model.weights.len());
        for (i, (w, (offset, slot))) in model
            .weights
            .iter()
            .zip(layout.homes.iter().zip(&mut entry.buffers))
            .enumerate()
        {
            let home = match (offset, slot.as_ref()) {
                (&Some((part, offset)), _) => {
                    *slot = None;
                    Home::Arena { part, offset }
                }
                (None, Some(buf)) => Home::Resident(buf.clone()),
                (None, None) => {
                    let buf = upload_resident(rt, model, i, ring, enc)?;
                    loaded_bytes += w.info.len();
                    *slot = Some(buf.clone());
                    Home::Resident(buf)
                }
            };
            homes.push(home);
        }
        let first_unit: Vec<usize> = std::iter::once(0)
            .chain(layout.parts.iter().scan(0, |n, p| {
                *n += p;
                Some(*n)
            }))
            .collect();
        let parts = model.weights.iter().zip(&homes).map(|(w, h)| match h {
            Home::Arena { part, .. } => (w.block, Some(*part)),
            Home::Resident(_) => (w.block, None),
        });
        let unit_arena = unit_arenas(parts, &first_unit);
        Ok(Placed {
            homes,
            unit_arena,
            first_unit,
            arenas: self.arenas.clone(),
            loaded_bytes,
            // Set by `acquire` once everything is placed.
            room: 0,
            arenas_cleared: self.arenas_cleared.clone(),
        })
    }

    /// Placement of each of `id`'s weights now (Resident or Stream).
    pub fn placement(&self, id: ModelId) -> Option<Vec<Placement>> {
        self.policy.placement(id).ok()
    }

    /// Residency of one model.
    pub fn report(&self, id: ModelId) -> Option<ModelResidency> {
        let entry = self.models.get(&id)?;
        let placement = self.policy.placement(id).ok()?;
        let resident = placement
            .iter()
            .filter(|p| **p != Placement::Stream)
            .count();
        Some(ModelResidency {
            id,
            path: entry.path.clone(),
            loaded_vram: entry.loaded_vram(),
            resident_tensors: resident,
            streamed_tensors: placement.len() - resident,
            pages_resident: self.policy.watermark(id).unwrap_or(0),
            pages_total: self.policy.layout(id).map_or(0, |l| l.page_count()),
            active: self.policy.active() == Some(id),
        })
    }

    /// Every model, highest priority first.
    pub fn reports(&self) -> Vec<ModelResidency> {
        self.policy
            .priority()
            .iter()
            .rev()
            .filter_map(|&id| self.report(id))
            .collect()
    }
}

/// A resident buffer for `model`'s weight `i`, in the ledger as a weight,
/// its upload recorded into `enc`.
fn upload_resident(
    rt: Device<'_>,
    model: ModelView<'_>,
    i: usize,
    ring: &mut StagingRing,
    enc: &mut wgpu::CommandEncoder,
) -> Result<Arc<TrackedBuffer>> {
    let (w, pw) = (&model.weights[i], &model.plan_weights[i]);
    let buf = Arc::new(TrackedBuffer::new(
        rt.gpu,
        rt.budget,
        OwnerClass::Weights,
        &w.name,
        pw.size,
        buffer_usage(),
    )?);
    crate::upload::stage(model, ring, rt.gpu, enc, w, &buf.buffer, 0)?;
    // Scanned by now (the first upload scans): in range, it is converted
    // after its copies, in the same encoder.
    let f16 = w.f16_in_place
        && w.checked.load(Ordering::Relaxed)
        && !w.beyond_f16.load(Ordering::Relaxed)
        && w.info.len().is_multiple_of(4);
    if f16 {
        let mut e = dynvram_gpu::ops::encoder::Encoder::from(std::mem::replace(
            enc,
            rt.gpu.device.create_command_encoder(&Default::default()),
        ));
        let converted = dynvram_gpu::ops::linear::record_bf16_to_f16_in_place(
            rt.gpu,
            rt.cache,
            &mut e,
            &buf.buffer,
            w.info.len(),
        );
        *enc = e.into_inner();
        converted?;
        tracing::debug!(weight = %w.name, "resident bf16 weight converted to f16 in place");
    }
    w.resident_f16.store(f16, Ordering::Relaxed);
    Ok(buf)
}

/// [`Placed::unit_arena`] from each weight's block and, where it streams,
/// its part: units that stream a weight take the arenas in turn, in pass
/// order.
fn unit_arenas(
    weights: impl IntoIterator<Item = (usize, Option<usize>)>,
    first_unit: &[usize],
) -> Vec<Option<usize>> {
    let units = first_unit.last().copied().unwrap_or(0);
    let mut streams = vec![false; units];
    for (block, part) in weights {
        if let Some(part) = part
            && let Some(s) = first_unit
                .get(block)
                .and_then(|&u| streams.get_mut(u + part))
        {
            *s = true;
        }
    }
    let mut next = 0;
    streams
        .into_iter()
        .map(|s| {
            s.then(|| {
                next += 1;
                (next - 1) % ARENAS as usize
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_units_take_the_arenas_in_turn_across_resident_ones() {
        // Blocks 0 and 2 resident, block 1 whole, block 3 in two parts,
        // block 4 whole: units 0, 1, 2, 3-4, 5.
        let first_unit = [0, 1, 2, 3, 5, 6];
        let weights = [
            (0, None),
            (1, Some(0)),
            (1, Some(0)),
            (2, None),
            (3, Some(0)),
            (3, Some(1)),
            (4, Some(0)),
        ];
        assert_eq!(
            unit_arenas(weights, &first_unit),
            [None, Some(0), None, Some(1), Some(0), Some(1)]
        );
    }
}
