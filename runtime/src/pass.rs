//! One pass over a model's blocks with block-level prefetch (docs/behaviour.md, Prefetch).
//!
//! Block *i*'s kernels are recorded, then block *i+1*'s streamed weights are
//! staged into the other transient arena, then block *i*'s encoder is
//! submitted; the host reads block *i+2*'s bytes while the GPU works on that
//! submit. All ring recycling happens at the submit boundary, never while a
//! block is being recorded.
//!
//! A block streaming by part (`planning::Granularity::Part`) is several
//! *units*, one per part, and everything above holds per unit: the first
//! use of a weight of the block's next part ends the unit being recorded
//! there (its kernels submitted with the next part's uploads), so the
//! block's code is unchanged; the block must use its parts in order.
//!
//! Streamed units take the two arenas in turn, whatever resident units
//! stand between them (`Placed::unit_arena`). Where the device has a copy
//! queue (`device::TransferQueue`: a transfer-only Vulkan family, the copy
//! engines) a streamed unit's copies from registered pins go there as one
//! batch as soon as the unit that last read its arena is submitted, waiting
//! only for that submit and waited for by the unit's own (timeline
//! semaphores): the first two before the pass's first kernels, so they
//! overlap resident units' work too. On the H200 this made a pass cost
//! max(upload, compute) instead of their sum. Copies from files and RAM pins,
//! and every copy where there is no copy queue, are recorded into block
//! *i*'s encoder on wgpu's queue.
//!
//! The order matters on one queue: wgpu orders work by barriers where a
//! buffer's usage changes, and a barrier waits for every earlier command of
//! its kind. Copies recorded before block *i*'s kernels would be waited for
//! by the first kernel reading block *i*'s arena. So on wgpu's queue the
//! next arena is switched to its copy usage before the kernels (a 4-byte
//! clear that its copies then overwrite) and its copies come after them.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::device_lanes::{DeviceLog, Sampler};
use crate::error::{Result, RuntimeError};
use crate::model::Model;
use crate::pins::Pins;
use crate::residency::{Home, Placed};
use crate::runtime::Runtime;
use crate::trace::{Lane, Trace};
use dynvram_gpu::device::{CopyCmd, Gpu, StagingRing, TransferQueue};
use dynvram_gpu::ops::encoder::Encoder;
use dynvram_gpu::{PassStats, StreamSources};

/// How a pass ends ([`Model::run_pass_with`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PassEnd {
    /// Wait for the GPU to finish the pass ([`Model::run_pass`]).
    #[default]
    Wait,
    /// Return after the last submit when nothing streamed, so the CPU can
    /// record the next pass while the GPU runs this one; wait for
    /// [`PassRun::last_submit`] (e.g. through a
    /// [`dynvram_gpu::device::ReadbackRing`]) before reading what it wrote. A pass
    /// that streams weights waits all the same. A resident one submits once,
    /// at its end (the GPU is busy with the pass before it meanwhile), not
    /// every [`RuntimeConfig::resident_submit_blocks`](crate::RuntimeConfig).
    Submitted,
}

/// What [`Model::run_pass_with`] returns.
#[derive(Debug)]
pub struct PassRun {
    /// The pass's figures (`wait_seconds` 0 when it did not wait).
    pub stats: PassStats,
    /// The pass's last submit.
    pub last_submit: Option<wgpu::SubmissionIndex>,
    /// Whether it waited for the GPU before returning.
    pub waited: bool,
}

/// A weight's bytes on the GPU.
#[derive(Debug, Clone)]
pub struct WeightView<'a> {
    /// The buffer holding it.
    pub buffer: &'a wgpu::Buffer,
    /// Byte offset (a multiple of 256).
    pub offset: u64,
    /// Bytes on the GPU (converted tensors are `f32`).
    pub size: u64,
    /// Shape as stored.
    pub shape: &'a [usize],
    /// Whether the bytes were converted to `f32` on upload.
    pub as_f32: bool,
    /// Whether a bf16 linear weight's resident copy was converted to f16
    /// as it was uploaded (`Weight::f16_in_place`): `dtype` says F16.
    pub as_f16: bool,
    /// Dtype of the bytes as uploaded: as stored in the file, or F16 where
    /// [`Self::as_f16`] (the `f32` of [`Self::as_f32`] is not reflected).
    pub dtype: dynvram_loader::Dtype,
    /// `buffer` as its owner shares it: views and regions of it clone this
    /// rather than allocate a new `Arc` per launch.
    pub(crate) shared: &'a std::sync::Arc<wgpu::Buffer>,
}

/// What a block's code sees: its weights, the encoder, the GPU. Where the
/// block streams in parts, using a weight of the next part ends the part
/// being recorded (its kernels are submitted with the next part's uploads).
pub struct BlockCtx<'a> {
    rt: &'a Runtime,
    model: &'a Model,
    enc: &'a mut Encoder,
    block: usize,
    placed: &'a Placed,
    stream: &'a mut dyn Units,
    /// The last op left the activation codes of its output in the linear
    /// scratch for the next linears (`BlockCtx::add_rms_norm_for`).
    pub(crate) quantized: bool,
}

impl<'a> BlockCtx<'a> {
    /// Index of the block being recorded.
    pub fn index(&self) -> usize {
        self.block
    }

    /// The runtime.
    pub fn runtime(&self) -> &'a Runtime {
        self.rt
    }

    /// The model.
    pub fn model(&self) -> &'a Model {
        self.model
    }

    /// The encoder this block records into (submitted at the block's end,
    /// or a few blocks later when nothing streams).
    pub fn encoder(&mut self) -> &mut Encoder {
        self.enc
    }

    /// Keeps a temporary activation (and its ledger entry) until the
    /// encoder recording it has been submitted.
    pub fn keep_alive(&mut self, a: crate::Activation) {
        self.stream.keep(a);
    }

    /// A weight of this block, resident or in this block's arena (where the
    /// block streams in parts, a weight of a later part ends the parts
    /// before it; one of an earlier part is an error).
    pub fn weight(&mut self, name: &str) -> Result<WeightView<'a>> {
        let i = self.model.weight_index(name)?;
        self.weight_at(i)
    }

    /// [`Self::weight`] by index into the model's weights.
    pub(crate) fn weight_at(&mut self, i: usize) -> Result<WeightView<'a>> {
        self.enter(i)?;
        Ok(self.locate(i)?.0)
    }

    /// Makes weight `i`'s part the one being recorded (ending the parts
    /// before it), where its block streams in parts.
    pub(crate) fn enter(&mut self, i: usize) -> Result<()> {
        let (_, unit) = self.locate(i)?;
        let current = self.stream.current();
        match unit {
            Some(u) if u > current => self.stream.advance(self.enc, u),
            Some(u) if u < current => Err(self.part_order(i, u)),
            _ => Ok(()),
        }
    }

    /// The error for weight `i`, in unit `unit`, used after that unit ended.
    pub(crate) fn part_order(&self, i: usize, unit: usize) -> RuntimeError {
        let first = self.first_unit();
        RuntimeError::PartOrder {
            tensor: self.model.weights[i].name.clone(),
            block_name: self.model.blocks[self.block].name.clone(),
            part: unit - first,
            current: self.stream.current() - first,
        }
    }

    /// Where weight `i` is during its part (it may be another part, not
    /// staged now: for its shape and size), and that part's unit when it
    /// streams.
    pub(crate) fn locate(&self, i: usize) -> Result<(WeightView<'a>, Option<usize>)> {
        let (model, placed) = (self.model, self.placed);
        let w = &model.weights[i];
        let (shared, offset, unit) = match &placed.homes[i] {
            Home::Resident(r) => (&r.buffer, 0, None),
            &Home::Arena { part, offset } => {
                if w.block != self.block {
                    return Err(RuntimeError::NotInBlock {
                        tensor: w.name.clone(),
                        block: self.block,
                        block_name: model
                            .blocks
                            .get(self.block)
                            .map(|b| b.name.clone())
                            .unwrap_or_default(),
                    });
                }
                let unit = placed.first_unit(self.block) + part;
                // Every unit holding a streamed weight has an arena
                // (`Placed::unit_arena`).
                let arena = &placed.arenas[placed.arena_of(unit).unwrap_or_default()];
                (&arena.buffer, offset, Some(unit))
            }
        };
        // Only a resident copy was converted as it was uploaded.
        let as_f16 = unit.is_none() && w.resident_f16.load(Ordering::Relaxed);
        let view = WeightView {
            buffer: shared,
            shared,
            offset,
            size: w.upload.gpu_size(&w.info),
            shape: &w.info.shape,
            as_f32: w.upload == crate::upload::Upload::ToF32,
            as_f16,
            dtype: if as_f16 {
                dynvram_loader::Dtype::F16
            } else {
                w.info.dtype
            },
        };
        Ok((view, unit))
    }

    /// The unit (a block, or a part of one) being recorded.
    pub(crate) fn unit(&self) -> usize {
        self.stream.current()
    }

    /// This block's first unit.
    fn first_unit(&self) -> usize {
        self.placed.first_unit(self.block)
    }
}

impl std::fmt::Debug for BlockCtx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCtx")
            .field("block", &self.block)
            .field("unit", &self.stream.current())
            .field("quantized", &self.quantized)
            .finish_non_exhaustive()
    }
}

/// The pass's side of streaming by part, as a block's code drives it.
pub(crate) trait Units {
    /// The unit being recorded.
    fn current(&self) -> usize;
    /// Ends units (staging the next, submitting) until `unit` is current.
    fn advance(&mut self, enc: &mut Encoder, unit: usize) -> Result<()>;
    /// Keeps `a` alive until the encoder recording it is submitted.
    fn keep(&mut self, a: crate::Activation);
}

impl Model {
    /// Index of weight `name` in the model's weights.
    pub(crate) fn weight_index(&self, name: &str) -> Result<usize> {
        self.by_name
            .get(name)
            .copied()
            .ok_or_else(|| RuntimeError::MissingTensor {
                model: self.path.clone(),
                tensor: name.to_owned(),
            })
    }

    /// Runs one pass: `body` is called once per block, in order, to record
    /// that block's kernels. Streamed weights are prefetched one block ahead.
    /// On error the work recorded so far is still submitted, so the ring and
    /// the device stay usable. Returns once the GPU has finished the pass.
    pub fn run_pass(
        &self,
        rt: &Runtime,
        trace: Option<&mut Trace>,
        body: impl FnMut(&mut BlockCtx<'_>) -> Result<()>,
    ) -> Result<PassStats> {
        self.run_pass_with(rt, trace, PassEnd::Wait, body)
            .map(|run| run.stats)
    }

    /// [`Self::run_pass`] ending as `end` says.
    pub fn run_pass_with(
        &self,
        rt: &Runtime,
        trace: Option<&mut Trace>,
        end: PassEnd,
        mut body: impl FnMut(&mut BlockCtx<'_>) -> Result<()>,
    ) -> Result<PassRun> {
        let _span = tracing::info_span!("pass", blocks = self.blocks.len()).entered();
        self.check_runtime(rt)?;
        let gpu = &*rt.gpu;
        gpu.check_health()?;
        let mut local = Trace::disabled();
        let trace = trace.unwrap_or(&mut local);
        let start = Instant::now();
        let mut ring = rt.ring.lock().unwrap_or_else(|e| e.into_inner());
        let mut pins = rt.pins.lock().unwrap_or_else(|e| e.into_inner());
        pins.begin_pass(self.id);
        let before = ring.counters();
        let new_encoder = || Encoder::new(&gpu.device, "block");
        let mut enc = new_encoder();
        // Residency first: this model goes on top; others yield if it needs room.
        let placed = self.acquire(rt, &mut ring, enc.commands())?;
        // Converted pieces may grow into the room the plan left free.
        (rt.linear_scratch.lock().unwrap_or_else(|e| e.into_inner())).set_piece_room(placed.room);
        let n = self.blocks.len();
        // Nothing streams: no staging between blocks, fewer submits.
        let resident = placed.homes.iter().all(|h| matches!(h, Home::Resident(_)));
        let copy_queue = gpu.transfer_queue().filter(|_| rt.config.copy_queue);
        let mut copies = CopyQueueState::default();
        // A traced pass with a copy queue samples the device's side too.
        let sampler = copy_queue.filter(|_| trace.enabled()).map(|_| {
            copies.log = Some(DeviceLog::default());
            Sampler::start(std::sync::Arc::clone(&rt.gpu), trace.origin())
        });
        let mut submits = 0;
        let cleared = &placed.arenas_cleared;
        if let Some(q) = copy_queue.filter(|_| !cleared.swap(true, Ordering::Relaxed)) {
            // wgpu zero-fills a buffer's unwritten ranges before their first
            // use; copies wgpu does not see must not be overwritten by that.
            // So new arenas are cleared first, and copies wait for it.
            for a in &placed.arenas {
                enc.commands().clear_buffer(&a.buffer, 0, None);
            }
            copies.readers = [q.signal_kernels(&gpu.queue); crate::planning::ARENAS as usize];
            ring.submit(
                &gpu.queue,
                std::mem::replace(&mut enc, new_encoder()).into_inner(),
            );
            submits += 1;
        }
        let mut s = Stream {
            model: self,
            placed: &placed,
            gpu,
            ring: &mut ring,
            pins: &mut pins,
            copy_queue,
            copies,
            trace: &mut *trace,
            stats: PassStats {
                loaded_bytes: placed.loaded_bytes,
                submits,
                ..PassStats::default()
            },
            keep: Vec::new(),
            last_submit: None,
            unit: 0,
            units: placed.first_unit(n),
            resident,
            ahead: 0,
            last_in: [None; crate::planning::ARENAS as usize],
        };
        // The first streamed units (both arenas are free) before any
        // kernel; every later one while the units before it are recorded.
        let mut result = match resident {
            true => Ok(()),
            false => s.stage_ahead(&mut enc, None),
        };
        for i in 0..n {
            if result.is_err() {
                break;
            }
            // Later blocks were begun by the advance that ended the one before.
            if i == 0 {
                s.begin(&mut enc);
            }
            let t = s.trace.begin();
            let recording = Instant::now();
            let submitted = s.stats.submit_seconds;
            let mut ctx = BlockCtx {
                rt,
                model: self,
                enc: &mut enc,
                block: i,
                placed: &placed,
                stream: &mut s,
                quantized: false,
            };
            result = body(&mut ctx);
            // Parts ended inside the block count as submitting, not recording.
            s.stats.record_seconds +=
                recording.elapsed().as_secs_f64() - (s.stats.submit_seconds - submitted);
            let name = &self.blocks[i].name;
            s.trace
                .end(t, Lane::Compute, format_args!("record {name}"), 0);
            if result.is_err() {
                break;
            }
            if !resident {
                // Stages the next block's first unit and submits this
                // block's last (and any part its code did not use).
                result = s.advance(&mut enc, placed.first_unit(i + 1));
                continue;
            }
            // Resident: a submit every few blocks, so the GPU starts on the
            // first blocks while the CPU records (and wgpu encodes) the rest.
            // A pipelined pass (`Submitted`) records while the GPU still runs
            // the one before, so early submits only cost: it submits once
            // (run P1, H200: a pipelined token 5 % faster in int4, 3 % in
            // bf16; a prefill 3-4 % slower).
            let k = match end {
                PassEnd::Wait => rt.config.resident_submit_blocks,
                PassEnd::Submitted => 0,
            };
            // After block 1, 1 + k, 1 + 2k, … (every block when k = 1).
            let submit_here = k != 0 && i % k == 1 % k;
            if i + 1 == n || submit_here {
                s.unit = i;
                result = s.end(&mut enc);
            }
        }
        let Stream {
            mut stats,
            mut last_submit,
            copies,
            ..
        } = s;
        if n == 0 || result.is_err() {
            last_submit = Some(ring.submit(&gpu.queue, enc.into_inner()));
        }
        // A streaming pass waits whatever `end` says: the next pass stages
        // into the arenas and ring slots this one's kernels may still read.
        let waited = end == PassEnd::Wait || !resident || result.is_err();
        if waited {
            let t = trace.begin();
            let waiting = Instant::now();
            gpu.wait_idle()?;
            if let Some(q) = copy_queue {
                q.wait_all()?;
            }
            trace.end(t, Lane::Wait, "wait for GPU", 0);
            stats.wait_seconds = waiting.elapsed().as_secs_f64();
        }
        if let (Some(sampler), Some(log)) = (sampler, &copies.log) {
            trace.extend(log.events(sampler));
        }
        ring.recycle(&gpu.device)?;
        result?;
        let after = ring.counters();
        stats.ring_stalls = after.stalls - before.stalls;
        stats.seconds = start.elapsed().as_secs_f64();
        Ok(PassRun {
            stats,
            last_submit,
            waited,
        })
    }
}

/// One pass's streaming state: the units (blocks, or parts of blocks) in
/// turn; the streamed ones take the arenas in turn (`Placed::unit_arena`)
/// and are staged while the units before them are recorded and submitted:
/// with a copy queue as soon as their arena's last reader is submitted
/// (copies run on through resident units' work), on wgpu's queue one unit
/// ahead.
struct Stream<'p> {
    model: &'p Model,
    placed: &'p Placed,
    gpu: &'p Gpu,
    ring: &'p mut StagingRing,
    pins: &'p mut Pins,
    copy_queue: Option<&'p TransferQueue>,
    copies: CopyQueueState,
    trace: &'p mut Trace,
    stats: PassStats,
    /// Activations to keep until the current encoder is submitted.
    keep: Vec<crate::Activation>,
    last_submit: Option<wgpu::SubmissionIndex>,
    /// The unit being recorded.
    unit: usize,
    /// Units in the pass.
    units: usize,
    /// Nothing streams.
    resident: bool,
    /// The first unit not staged yet.
    ahead: usize,
    /// The last unit staged into each arena (which reads it).
    last_in: [Option<usize>; crate::planning::ARENAS as usize],
}

impl Units for Stream<'_> {
    fn current(&self) -> usize {
        self.unit
    }

    fn advance(&mut self, enc: &mut Encoder, unit: usize) -> Result<()> {
        while self.unit < unit {
            self.end(enc)?;
            if self.unit < self.units {
                self.begin(enc);
            }
        }
        Ok(())
    }

    fn keep(&mut self, a: crate::Activation) {
        self.keep.push(a);
    }
}

impl Stream<'_> {
    /// Before the current unit's kernels: on the copy queue, wgpu's next
    /// submit waits for the unit's copies; on wgpu's queue, the next unit's
    /// arena is switched to copy usage (see the module docs).
    fn begin(&mut self, enc: &mut Encoder) {
        let next = self.unit + 1;
        match (self.copy_queue, self.copies.take_pending(self.unit)) {
            // Before recording: a ring flush may submit this unit's kernels.
            (Some(q), Some(value)) => {
                q.kernels_wait_for(&self.gpu.queue, value);
                self.copies.waiting = Some(value);
            }
            (None, _) if next < self.units && !self.resident => {
                self.open_arena_for_copies(enc.commands(), next)
            }
            _ => {}
        }
    }

    /// Stages the streamed units from `self.ahead` on whose arena is free
    /// (the unit that last read it is submitted; `u`, being ended, signals
    /// only after this; `None`: before the pass's first unit): with a copy
    /// queue as many as that allows, on wgpu's queue up to unit `u + 1`.
    fn stage_ahead(&mut self, enc: &mut Encoder, u: Option<usize>) -> Result<()> {
        let limit = match (self.copy_queue, u) {
            (Some(_), _) => self.units,
            (None, u) => u.map_or(1, |u| u + 2).min(self.units),
        };
        while self.ahead < limit {
            let v = self.ahead;
            let Some(arena) = self.placed.arena_of(v) else {
                self.ahead += 1;
                continue;
            };
            if self.last_in[arena].is_some_and(|p| u.is_none_or(|u| p >= u)) {
                break;
            }
            let mut batch = Vec::new();
            let name = self.unit_name(v);
            self.stage(enc.commands(), v, self.copy_queue.map(|_| &mut batch))?;
            let trace = &mut *self.trace;
            self.copies
                .submit(self.copy_queue, batch, arena, v, &name, trace)?;
            self.last_in[arena] = Some(v);
            self.ahead += 1;
        }
        Ok(())
    }

    /// Ends the current unit: stages the units ahead whose arenas are free
    /// ([`Self::stage_ahead`]) after its kernels, submits, and moves on to
    /// the next unit.
    fn end(&mut self, enc: &mut Encoder) -> Result<()> {
        let submitting = Instant::now();
        let (u, next) = (self.unit, self.unit + 1);
        let mut result = Ok(());
        if !self.resident {
            result = self.stage_ahead(enc, Some(u));
        }
        let t = self.trace.begin();
        if let Some(q) = self.copy_queue {
            let value = q.signal_kernels(&self.gpu.queue);
            if let Some(arena) = self.placed.arena_of(u) {
                self.copies.read(arena, value);
            }
            let waits = self.copies.waiting.take();
            let name = self.copies.log.is_some().then(|| self.unit_name(u));
            if let (Some(log), Some(name)) = (&mut self.copies.log, name) {
                log.kernels(value, waits, self.trace.now_us(), name.to_string());
            }
        }
        let encoder = std::mem::replace(enc, Encoder::new(&self.gpu.device, "block"));
        self.last_submit = Some(self.ring.submit(&self.gpu.queue, encoder.into_inner()));
        self.stats.submits += 1;
        self.keep.clear();
        let name = self.unit_name(u);
        let model = self.model;
        self.trace.end(
            t,
            Lane::Submit,
            format_args!("submit {}", name.label(model)),
            0,
        );
        self.stats.submit_seconds += submitting.elapsed().as_secs_f64();
        result?;
        self.ring.recycle(&self.gpu.device)?;
        self.unit = next;
        Ok(())
    }

    /// Unit `u`'s block and part, for traces.
    fn unit_name(&self, u: usize) -> UnitName {
        let (block, part) = self.block_part(u);
        UnitName { block, part }
    }

    /// The block of unit `u` and its part there.
    fn block_part(&self, u: usize) -> (usize, usize) {
        let n = self.model.blocks.len();
        let b = (0..n)
            .rev()
            .find(|&b| self.placed.first_unit(b) <= u)
            .unwrap_or(0);
        (b, u - self.placed.first_unit(b))
    }

    /// Weights unit `u` streams: its block's weights in the unit's part.
    fn unit_weights(&self, u: usize) -> impl Iterator<Item = (usize, u64)> + '_ {
        let (b, part) = self.block_part(u);
        self.model.blocks[b]
            .weights
            .iter()
            .filter_map(move |&i| match self.placed.homes[i] {
                Home::Arena { part: p, offset } if p == part => Some((i, offset)),
                _ => None,
            })
    }

    /// Switches unit `u`'s arena to copy usage before the current unit's
    /// kernels are recorded (see the module docs): a 4-byte clear at its
    /// first streamed weight, which that weight's upload overwrites.
    fn open_arena_for_copies(&self, enc: &mut wgpu::CommandEncoder, u: usize) {
        let Some(arena) = self
            .placed
            .arena_of(u)
            .and_then(|a| self.placed.arenas.get(a))
        else {
            return;
        };
        if let Some((_, off)) = self.unit_weights(u).next() {
            enc.clear_buffer(&arena.buffer, off, Some(4));
        }
    }

    /// Records the uploads of unit `u`'s streamed weights into its arena
    /// (from pins or through the ring), in the trace and the pass figures.
    fn stage(
        &mut self,
        enc: &mut wgpu::CommandEncoder,
        u: usize,
        mut copies: Option<&mut Vec<CopyCmd>>,
    ) -> Result<()> {
        let _span = tracing::debug_span!("stage_unit", unit = u).entered();
        let t = self.trace.begin();
        let before = self.ring.counters();
        let arena = self
            .placed
            .arena_of(u)
            .and_then(|a| self.placed.arenas.get(a));
        let mut sources = StreamSources::default();
        let weights: Vec<(usize, u64)> = self.unit_weights(u).collect();
        if let Some(arena) = arena {
            for (i, off) in weights {
                let to_queue = copies.as_deref_mut();
                sources.add(self.pins.stage(
                    self.model.view(),
                    self.ring,
                    self.gpu,
                    enc,
                    i,
                    &arena.buffer,
                    off,
                    to_queue,
                )?);
            }
        }
        let bytes = sources.total();
        self.stats.streamed_bytes += bytes;
        self.stats.staged_units += u64::from(bytes > 0);
        self.stats.sources.add(sources);
        let name = self.unit_name(u).label(self.model);
        let trace = &mut *self.trace;
        trace.end(t, Lane::Upload, format_args!("stage {name}"), bytes);
        let after = self.ring.counters();
        if after.stalls > before.stalls {
            let waits = after.stalls - before.stalls;
            trace.record_ended(
                Lane::Stall,
                format_args!("{name}: waited {waits} time(s) for a ring slot still in flight"),
                after.stall_time.saturating_sub(before.stall_time),
            );
        }
        // Where the staged bytes came from, as markers (their bytes are
        // already counted by the stage event).
        for (from, n) in [
            ("registered pins", sources.registered_pin_bytes),
            ("RAM pins", sources.ram_pin_bytes),
            ("files", sources.file_bytes),
        ] {
            if n > 0 {
                trace.end(
                    t,
                    Lane::Upload,
                    format_args!("{name}: {n} B from {from}"),
                    0,
                );
            }
        }
        Ok(())
    }
}

/// A unit as traces name it: block index and part.
#[derive(Debug, Clone, Copy)]
struct UnitName {
    block: usize,
    part: usize,
}

impl UnitName {
    /// `blocks.3`, or `blocks.3 part 2` past a block's first part.
    fn label(self, model: &Model) -> String {
        let name = &model.blocks[self.block].name;
        match self.part {
            0 => name.clone(),
            p => format!("{name} part {p}"),
        }
    }
}

/// `block 3` or `block 3 part 2` (copy-queue events name blocks by index).
impl std::fmt::Display for UnitName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.part {
            0 => write!(f, "block {}", self.block),
            p => write!(f, "block {} part {p}", self.block),
        }
    }
}

/// The copy queue's side of one pass: which `kernels` value last read each
/// arena, and the copy batches units' kernels are still to wait for.
#[derive(Debug, Default)]
struct CopyQueueState {
    readers: [u64; crate::planning::ARENAS as usize],
    /// (unit, copy-queue value) of batches staged ahead.
    pending: Vec<(usize, u64)>,
    /// The batch the unit being recorded waits for.
    waiting: Option<u64>,
    /// What was submitted, for the device lanes of a traced pass.
    log: Option<DeviceLog>,
}

impl CopyQueueState {
    /// Submits unit `u`'s copies into `arena` (if any) once the submit that
    /// last read the arena has run; its kernels will wait for them.
    fn submit(
        &mut self,
        queue: Option<&TransferQueue>,
        batch: Vec<CopyCmd>,
        arena: usize,
        u: usize,
        name: &UnitName,
        trace: &mut Trace,
    ) -> Result<()> {
        let Some(q) = queue.filter(|_| !batch.is_empty()) else {
            return Ok(());
        };
        let t = trace.begin();
        let bytes = batch.iter().map(|c| c.size).sum();
        let after = self.readers[arena];
        let value = q.submit(batch, after)?;
        self.pending.push((u, value));
        if let Some(log) = &mut self.log {
            log.copy(value, after, trace.now_us(), name.to_string(), bytes);
        }
        trace.end(t, Lane::Upload, format_args!("copy queue: {name}"), bytes);
        Ok(())
    }

    /// The copies unit `u`'s kernels wait for, if it has any.
    fn take_pending(&mut self, u: usize) -> Option<u64> {
        let i = self.pending.iter().position(|&(p, _)| p == u)?;
        Some(self.pending.swap_remove(i).1)
    }

    /// A submit that reads `arena` signals `value`.
    fn read(&mut self, arena: usize, value: u64) {
        self.readers[arena] = value;
    }
}
