//! One pass over a model's blocks with block-level prefetch (docs/behaviour.md, Prefetch).
//!
//! Block *i*'s kernels are recorded, then block *i+1*'s streamed weights are
//! staged into the other transient arena, then block *i*'s encoder is
//! submitted; the host reads block *i+2*'s bytes while the GPU works on that
//! submit. All ring recycling happens at the submit boundary, never while a
//! block is being recorded.
//!
//! Where the device has a copy queue (`gpu::TransferQueue`: a transfer-only
//! Vulkan family, the copy engines) block *i+1*'s copies from registered pins
//! go there as one batch, submitted before block *i*'s kernels, waiting only
//! for the submit that last read that arena and waited for by block *i+1*'s
//! submit (timeline semaphores). On the H200 this made a pass cost
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

use crate::error::{Result, RuntimeError};
use crate::model::Model;
use crate::pins::Pins;
use crate::residency::{Home, Placed};
use crate::runtime::Runtime;
use crate::trace::{Lane, Trace};
use dynvram_gpu::gpu::{CopyCmd, Gpu, StagingRing, TransferQueue};
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
    /// [`dynvram_gpu::gpu::ReadbackRing`]) before reading what it wrote. A pass
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
    /// Dtype as stored in the file.
    pub dtype: dynvram_loader::Dtype,
    /// `buffer` as its owner shares it: views and regions of it clone this
    /// rather than allocate a new `Arc` per launch.
    pub(crate) shared: &'a std::sync::Arc<wgpu::Buffer>,
}

/// What a block's code sees: its weights, the encoder, the GPU.
#[derive(Debug)]
pub struct BlockCtx<'a> {
    rt: &'a Runtime,
    model: &'a Model,
    enc: &'a mut Encoder,
    block: usize,
    keep: &'a mut Vec<crate::Activation>,
    placed: &'a Placed,
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

    /// Keeps a temporary activation (and its ledger entry) until the block's
    /// encoder has been submitted.
    pub fn keep_alive(&mut self, a: crate::Activation) {
        self.keep.push(a);
    }

    /// A weight of this block, resident or in this block's arena.
    pub fn weight(&self, name: &str) -> Result<WeightView<'a>> {
        self.model.weight_view(self.placed, name, self.block)
    }

    /// [`Self::weight`] by index into the model's weights.
    pub(crate) fn weight_at(&self, i: usize) -> Result<WeightView<'a>> {
        self.model.weight_view_at(self.placed, i, self.block)
    }
}

impl Model {
    /// Where a weight of `block` is on the GPU during that block.
    pub(crate) fn weight_view<'a>(
        &'a self,
        placed: &'a Placed,
        name: &str,
        block: usize,
    ) -> Result<WeightView<'a>> {
        let &i = self
            .by_name
            .get(name)
            .ok_or_else(|| RuntimeError::MissingTensor {
                model: self.path.clone(),
                tensor: name.to_owned(),
            })?;
        self.weight_view_at(placed, i, block)
    }

    /// [`Self::weight_view`] of weight `i` (an index into `weights`).
    pub(crate) fn weight_view_at<'a>(
        &'a self,
        placed: &'a Placed,
        i: usize,
        block: usize,
    ) -> Result<WeightView<'a>> {
        let w = &self.weights[i];
        let (shared, offset) = match placed.homes[i] {
            Home::Resident(ref r) => (&r.buffer, 0),
            Home::Arena(off) => {
                if w.block != block {
                    return Err(RuntimeError::NotInBlock {
                        tensor: w.name.clone(),
                        block,
                        block_name: self
                            .blocks
                            .get(block)
                            .map(|b| b.name.clone())
                            .unwrap_or_default(),
                    });
                }
                (&placed.arenas[block % placed.arenas.len()].buffer, off)
            }
        };
        Ok(WeightView {
            buffer: shared,
            shared,
            offset,
            size: w.upload.gpu_size(&w.info),
            shape: &w.info.shape,
            as_f32: w.upload == crate::upload::Upload::ToF32,
            dtype: w.info.dtype,
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
        let mut stats = PassStats::default();
        let new_encoder = || Encoder::new(&gpu.device, "block");
        let mut enc = new_encoder();
        // Residency first: this model goes on top; others yield if it needs room.
        let placed = self.acquire(rt, &mut ring, enc.commands())?;
        stats.loaded_bytes = placed.loaded_bytes;
        let n = self.blocks.len();
        // Nothing streams: no staging between blocks, fewer submits.
        let resident = placed.homes.iter().all(|h| matches!(h, Home::Resident(_)));
        let mut result = Ok(());
        let mut keep = Vec::new();
        let copy_queue = gpu.transfer_queue().filter(|_| rt.config.copy_queue);
        let mut copies = CopyQueueState::default();
        let mut last_submit = None;
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
            stats.submits += 1;
        }
        for i in 0..n {
            // Block 0 has nothing to overlap with; every later block was staged
            // during the previous one.
            if i == 0
                && let Err(e) = self.stage_block(
                    &placed,
                    &mut ring,
                    &mut pins,
                    gpu,
                    enc.commands(),
                    0,
                    None,
                    trace,
                    &mut stats,
                )
            {
                result = Err(e);
                break;
            }
            match (copy_queue, copies.pending.take()) {
                // Before recording: a ring flush may submit this block's kernels.
                (Some(q), Some(value)) => q.kernels_wait_for(&gpu.queue, value),
                (None, _) if i + 1 < n && !resident => {
                    self.open_arena_for_copies(&placed, enc.commands(), i + 1)
                }
                _ => {}
            }
            let t = trace.begin();
            let mut ctx = BlockCtx {
                rt,
                model: self,
                enc: &mut enc,
                block: i,
                keep: &mut keep,
                placed: &placed,
                quantized: false,
            };
            let recording = Instant::now();
            result = body(&mut ctx);
            stats.record_seconds += recording.elapsed().as_secs_f64();
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
            if resident && result.is_ok() && i + 1 < n && !submit_here {
                trace.end(
                    t,
                    Lane::Compute,
                    format_args!("record {}", self.blocks[i].name),
                    0,
                );
                continue;
            }
            let submitting = Instant::now();
            trace.end(
                t,
                Lane::Compute,
                format_args!("record {}", self.blocks[i].name),
                0,
            );
            if result.is_ok() && i + 1 < n && !resident {
                let mut batch = Vec::new();
                result = self
                    .stage_block(
                        &placed,
                        &mut ring,
                        &mut pins,
                        gpu,
                        enc.commands(),
                        i + 1,
                        copy_queue.map(|_| &mut batch),
                        trace,
                        &mut stats,
                    )
                    .and_then(|()| copies.submit(copy_queue, batch, i + 1, trace));
            }
            let t = trace.begin();
            if let Some(q) = copy_queue {
                let value = q.signal_kernels(&gpu.queue);
                copies.read(i, value);
            }
            last_submit = Some(ring.submit(
                &gpu.queue,
                std::mem::replace(&mut enc, new_encoder()).into_inner(),
            ));
            stats.submits += 1;
            keep.clear();
            trace.end(
                t,
                Lane::Submit,
                format_args!("submit {}", self.blocks[i].name),
                0,
            );
            stats.submit_seconds += submitting.elapsed().as_secs_f64();
            if result.is_err() {
                break;
            }
            ring.recycle(&gpu.device)?;
        }
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

    /// Switches block `b`'s arena to copy usage before the current block's
    /// kernels are recorded (see the module docs): a 4-byte clear at its
    /// first streamed weight, which that weight's upload overwrites.
    fn open_arena_for_copies(&self, placed: &Placed, enc: &mut wgpu::CommandEncoder, b: usize) {
        let Some(arena) = placed.arenas.get(b % crate::planning::ARENAS as usize) else {
            return;
        };
        let first = self.blocks[b]
            .weights
            .iter()
            .find_map(|&i| match placed.homes[i] {
                Home::Arena(off) => Some(off),
                Home::Resident(_) => None,
            });
        if let Some(off) = first {
            enc.clear_buffer(&arena.buffer, off, Some(4));
        }
    }

    /// Records the uploads of block `b`'s streamed weights into its arena
    /// (from pins or through the ring), in the trace and the pass figures.
    #[allow(clippy::too_many_arguments)]
    fn stage_block(
        &self,
        placed: &Placed,
        ring: &mut StagingRing,
        pins: &mut Pins,
        gpu: &Gpu,
        enc: &mut wgpu::CommandEncoder,
        b: usize,
        mut copies: Option<&mut Vec<CopyCmd>>,
        trace: &mut Trace,
        stats: &mut PassStats,
    ) -> Result<()> {
        let _span = tracing::debug_span!("stage_block", block = b).entered();
        let t = trace.begin();
        let before = ring.counters();
        let arena = &placed.arenas.get(b % crate::planning::ARENAS as usize);
        let mut sources = StreamSources::default();
        for &i in &self.blocks[b].weights {
            if let (Home::Arena(off), Some(arena)) = (&placed.homes[i], arena) {
                let to_queue = copies.as_deref_mut();
                sources.add(pins.stage(
                    self.view(),
                    ring,
                    gpu,
                    enc,
                    i,
                    &arena.buffer,
                    *off,
                    to_queue,
                )?);
            }
        }
        let bytes = sources.total();
        stats.streamed_bytes += bytes;
        stats.sources.add(sources);
        let name = &self.blocks[b].name;
        trace.end(t, Lane::Upload, format_args!("stage {name}"), bytes);
        let after = ring.counters();
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

/// The copy queue's side of one pass: which `kernels` value last read each
/// arena, and the copy batch the next block's kernels wait for.
#[derive(Debug, Default)]
struct CopyQueueState {
    readers: [u64; crate::planning::ARENAS as usize],
    pending: Option<u64>,
}

impl CopyQueueState {
    /// Submits block `b`'s copies (if any) once the submit that last read
    /// its arena has run; its kernels will wait for them.
    fn submit(
        &mut self,
        queue: Option<&TransferQueue>,
        batch: Vec<CopyCmd>,
        b: usize,
        trace: &mut Trace,
    ) -> Result<()> {
        let Some(q) = queue.filter(|_| !batch.is_empty()) else {
            return Ok(());
        };
        let t = trace.begin();
        let bytes = batch.iter().map(|c| c.size).sum();
        let after = self.readers[b % self.readers.len()];
        self.pending = Some(q.submit(batch, after)?);
        trace.end(
            t,
            Lane::Upload,
            format_args!("copy queue: block {b}"),
            bytes,
        );
        Ok(())
    }

    /// Block `b`'s submit, which reads `b`'s arena, signals `value`.
    fn read(&mut self, b: usize, value: u64) {
        let n = self.readers.len();
        self.readers[b % n] = value;
    }
}
