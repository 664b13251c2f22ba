//! The staging ring: a few host-visible `COPY_SRC` buffers that file bytes
//! are read into (by the reader pool, straight into the mapped
//! memory) and then copied to their GPU destination with
//! `copy_buffer_to_buffer`. Default 3 × 64 MiB *(aimdo)*; docs/behaviour.md, Staging ring.
//!
//! Slots are ordinary `MAP_WRITE` buffers ([`HostMemoryChoice::Mapped`], on a
//! resizable-BAR GPU these are VRAM written over PCIe) or imported host RAM
//! ([`HostMemoryChoice::Host`], `VK_EXT_external_memory_host`, falling back
//! to mapped buffers where the device cannot import). Imported slots are
//! always writable: instead of a re-map, a slot becomes ready again when the
//! queue reports its submission done.
//!
//! # Protocol
//!
//! A slot is *ready* (mapped, empty), *filling* (mapped, the current slot),
//! *recorded* (unmapped, its copies sit in an encoder that is not yet
//! submitted) or *in flight* (submitted, `map_async` requested).
//!
//! 1. [`StagingRing::upload`] reads into the current slot and records the
//!    copy into the caller's encoder. The current slot is retired (unmapped)
//!    once it passes ¾ full; larger uploads continue in the next slot.
//! 2. Before submitting that encoder, call [`StagingRing::prepare_submit`]
//!    (retires the current slot: a new submit always starts a new slot);
//!    after `queue.submit`, call [`StagingRing::submitted`] with its index,
//!    which re-maps every recorded slot with `map_async` (imported slots:
//!    waits for `on_submitted_work_done`).
//!    [`StagingRing::submit`] does all three.
//! 3. Taking a slot that is still in flight waits for its copy (a *stall*,
//!    counted with its time). Call [`StagingRing::recycle`] at each sync
//!    point so slots whose copies are done are taken without a stall. Taking a slot whose copies are still in the
//!    caller's unsubmitted encoder (one recording larger than the whole ring)
//!    submits that encoder and continues in a fresh one (a *flush*, counted).
//!
//! Uploads are padded to 4 bytes (wgpu's copy alignment): the destination
//! offset must be a multiple of 4 and the destination must have room for the
//! padded length; the padding bytes are zeros.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use crate::error::{LoadError, Result};
use crate::gpu::{self, align4};
use crate::hostmem::{self, HostMemory, HostMemoryChoice, ImportedBuffer};
use crate::reader::ReaderPool;
use crate::source::ByteSource;

/// Default slot count *(aimdo)*.
pub const DEFAULT_SLOTS: usize = 3;
/// Default slot size: 64 MiB *(aimdo)*.
pub const DEFAULT_SLOT_SIZE: u64 = 64 << 20;

const MAP_PENDING: u8 = 0;
const MAP_OK: u8 = 1;
const MAP_FAILED: u8 = 2;

/// Shape of the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingConfig {
    /// Number of slots (at least 1).
    pub slots: usize,
    /// Bytes per slot (rounded up to 4, at least 4 KiB).
    pub slot_size: u64,
    /// Mapped wgpu buffers or imported host RAM.
    pub memory: HostMemoryChoice,
}

impl Default for RingConfig {
    fn default() -> Self {
        Self {
            slots: DEFAULT_SLOTS,
            slot_size: DEFAULT_SLOT_SIZE,
            memory: HostMemoryChoice::default(),
        }
    }
}

/// What the ring has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingCounters {
    /// Source bytes staged (without padding).
    pub bytes_staged: u64,
    /// `copy_buffer_to_buffer` commands recorded.
    pub copies: u64,
    /// Times a slot was taken for filling.
    pub slots_used: u64,
    /// Times taking a slot had to wait for its previous copy.
    pub stalls: u64,
    /// Total time spent in those waits.
    pub stall_time: Duration,
    /// Times the caller's encoder had to be submitted early because every
    /// slot was recorded in it.
    pub flushes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Ready,
    Filling,
    Recorded,
    InFlight,
}

#[derive(Debug)]
enum SlotMemory {
    Mapped {
        buffer: wgpu::Buffer,
        /// The whole slot's mapped range while `Filling`.
        view: Option<wgpu::BufferViewMut>,
    },
    Imported(ImportedBuffer),
}

#[derive(Debug)]
struct Slot {
    memory: SlotMemory,
    fill: u64,
    state: SlotState,
    map_status: Arc<AtomicU8>,
    submission: Option<wgpu::SubmissionIndex>,
}

/// The staging ring (see the module docs for the protocol).
#[derive(Debug)]
pub struct StagingRing {
    config: RingConfig,
    pool: Arc<ReaderPool>,
    slots: Vec<Slot>,
    memory: HostMemory,
    current: Option<usize>,
    next: usize,
    counters: RingCounters,
}

impl StagingRing {
    /// Creates the slots (mapped, ready) on `device`; reads go through `pool`.
    pub fn new(device: &wgpu::Device, config: RingConfig, pool: Arc<ReaderPool>) -> Result<Self> {
        let config = RingConfig {
            slots: config.slots.max(1),
            slot_size: align4(config.slot_size.max(4096)),
            ..config
        };
        let label = |i| format!("dynvram staging slot {i}");
        let imported = match config.memory {
            HostMemoryChoice::Host => (0..config.slots)
                .map(|i| hostmem::import_anonymous(device, &label(i), config.slot_size))
                .collect::<std::result::Result<Vec<_>, _>>()
                .inspect_err(|e| tracing::info!(%e, "staging ring uses mapped buffers"))
                .ok(),
            HostMemoryChoice::Mapped => None,
        };
        let memory = if imported.is_some() {
            HostMemory::Imported
        } else {
            HostMemory::Mapped
        };
        let memories = match imported {
            Some(bufs) => bufs.into_iter().map(SlotMemory::Imported).collect(),
            None => (0..config.slots)
                .map(|i| {
                    Ok(SlotMemory::Mapped {
                        buffer: gpu::create_mapped_staging(device, &label(i), config.slot_size)?,
                        view: None,
                    })
                })
                .collect::<Result<Vec<_>>>()?,
        };
        let slots = memories
            .into_iter()
            .map(|memory| Slot {
                memory,
                fill: 0,
                state: SlotState::Ready,
                map_status: Arc::new(AtomicU8::new(MAP_OK)),
                submission: None,
            })
            .collect();
        tracing::debug!(
            slots = config.slots,
            slot_size = config.slot_size,
            %memory,
            "staging ring created"
        );
        Ok(Self {
            config,
            pool,
            slots,
            memory,
            current: None,
            next: 0,
            counters: RingCounters::default(),
        })
    }

    /// The ring's shape (after rounding).
    pub fn config(&self) -> RingConfig {
        self.config
    }

    /// Which memory the slots are in.
    pub fn memory(&self) -> HostMemory {
        self.memory
    }

    /// Counters since creation.
    pub fn counters(&self) -> RingCounters {
        self.counters
    }

    /// The reader pool the ring reads with.
    pub fn pool(&self) -> &Arc<ReaderPool> {
        &self.pool
    }

    /// Stages all of `source` and records copies of it into `dst` at
    /// `dst_offset` in `encoder`. The bytes are in `dst` once the encoder
    /// (possibly replaced by a fresh one after a flush, see the module docs)
    /// has been submitted and has executed. On error, `dst` holds partial
    /// data but the ring stays usable.
    #[allow(clippy::too_many_arguments)]
    pub fn upload(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        encoder: &mut wgpu::CommandEncoder,
        source: &dyn ByteSource,
        dst: &wgpu::Buffer,
        dst_offset: u64,
    ) -> Result<()> {
        let len = source.len();
        gpu::check_copy(dst, dst_offset, len)?;
        let _span = tracing::debug_span!("ring_upload", bytes = len, dst_offset).entered();
        let mut done = 0u64;
        while done < len {
            let i = self.current_slot(device, queue, encoder)?;
            let slot = &mut self.slots[i];
            let fill = slot.fill;
            let chunk = (len - done).min(self.config.slot_size - fill);
            let padded = align4(chunk);
            let Some(mut view) = slot.view() else {
                return Err(internal("filling slot has no writable view"));
            };
            let (start, end) = (fill as usize, (fill + chunk) as usize);
            self.pool.read(source, done, view.slice(start..end))?;
            if padded > chunk {
                view.slice(end..(fill + padded) as usize).fill(0);
            }
            encoder.copy_buffer_to_buffer(slot.buffer(), fill, dst, dst_offset + done, padded);
            slot.fill += padded;
            done += chunk;
            self.counters.bytes_staged += chunk;
            self.counters.copies += 1;
            if slot.fill * 4 > self.config.slot_size * 3 {
                self.retire_current();
            }
        }
        Ok(())
    }

    /// Retires the current slot so the encoder can be submitted (a mapped
    /// buffer cannot be used by a submit). Call before `queue.submit`.
    pub fn prepare_submit(&mut self) {
        self.retire_current();
    }

    /// Re-maps every slot recorded before the submit `index` (imported
    /// slots: asks the queue to report the submission done); they become
    /// reusable once the GPU has executed their copies.
    pub fn submitted(&mut self, queue: &wgpu::Queue, index: &wgpu::SubmissionIndex) {
        for slot in self
            .slots
            .iter_mut()
            .filter(|s| s.state == SlotState::Recorded)
        {
            slot.map_status.store(MAP_PENDING, Ordering::Release);
            let status = slot.map_status.clone();
            match &slot.memory {
                SlotMemory::Mapped { buffer, .. } => {
                    buffer.map_async(wgpu::MapMode::Write, .., move |r| {
                        status.store(
                            if r.is_ok() { MAP_OK } else { MAP_FAILED },
                            Ordering::Release,
                        );
                    });
                }
                SlotMemory::Imported(_) => {
                    queue.on_submitted_work_done(move || status.store(MAP_OK, Ordering::Release));
                }
            }
            slot.state = SlotState::InFlight;
            slot.submission = Some(index.clone());
        }
    }

    /// `prepare_submit`, `queue.submit(encoder)`, `submitted`.
    pub fn submit(
        &mut self,
        queue: &wgpu::Queue,
        encoder: wgpu::CommandEncoder,
    ) -> wgpu::SubmissionIndex {
        let _span = tracing::debug_span!("ring_submit").entered();
        self.prepare_submit();
        let index = queue.submit([encoder.finish()]);
        self.submitted(queue, &index);
        index
    }

    /// Marks in-flight slots whose copies have finished as ready, without
    /// blocking. Call at a sync point; taking a slot does it too.
    pub fn recycle(&mut self, device: &wgpu::Device) -> Result<()> {
        device.poll(wgpu::PollType::Poll).map_err(poll_error)?;
        (0..self.slots.len()).try_for_each(|i| self.promote(i))
    }

    /// Marks in-flight slot `i` ready if its re-map has completed.
    fn promote(&mut self, i: usize) -> Result<()> {
        let slot = &mut self.slots[i];
        if slot.state == SlotState::InFlight {
            match slot.map_status.load(Ordering::Acquire) {
                MAP_OK => {
                    slot.state = SlotState::Ready;
                    slot.submission = None;
                }
                MAP_FAILED => return Err(map_failed()),
                _ => {}
            }
        }
        Ok(())
    }

    /// The filling slot, taking the next one if there is none.
    fn current_slot(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        encoder: &mut wgpu::CommandEncoder,
    ) -> Result<usize> {
        if let Some(i) = self.current {
            return Ok(i);
        }
        let i = self.next;
        if self.slots[i].state == SlotState::Recorded {
            // Every slot's copies are in this encoder: submit it and go on in
            // a fresh one.
            tracing::debug!("staging ring exhausted within one recording: flushing");
            let full = std::mem::replace(
                encoder,
                device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("dynvram upload (after ring flush)"),
                }),
            );
            self.submit(queue, full);
            self.counters.flushes += 1;
        }
        if self.slots[i].state == SlotState::InFlight {
            self.wait_mapped(device, i)?;
        }
        let slot = &mut self.slots[i];
        if slot.state != SlotState::Ready {
            return Err(internal("slot to fill is not ready"));
        }
        if let SlotMemory::Mapped { buffer, view } = &mut slot.memory {
            *view = Some(
                buffer
                    .get_mapped_range_mut(..)
                    .map_err(|e| LoadError::Gpu {
                        what: format!("map staging slot {i}"),
                        message: e.to_string(),
                    })?,
            );
        }
        slot.state = SlotState::Filling;
        slot.fill = 0;
        self.current = Some(i);
        self.next = (i + 1) % self.slots.len();
        self.counters.slots_used += 1;
        Ok(i)
    }

    /// Waits until in-flight slot `i` is mapped again. Counted as a stall:
    /// the ring had not seen the slot's copy finish (a [`Self::recycle`] at
    /// the sync point before would have), so it had to ask the GPU here. Only
    /// slot `i` changes state, so the count depends on the call sequence, not
    /// on GPU timing.
    fn wait_mapped(&mut self, device: &wgpu::Device, i: usize) -> Result<()> {
        let _span = tracing::debug_span!("ring_stall", slot = i).entered();
        let started = Instant::now();
        let waits = [
            wgpu::PollType::Poll,
            wgpu::PollType::Wait {
                submission_index: self.slots[i].submission.clone(),
                timeout: None,
            },
            wgpu::PollType::wait_indefinitely(),
        ];
        for wait in waits {
            device.poll(wait).map_err(poll_error)?;
            self.promote(i)?;
            if self.slots[i].state != SlotState::InFlight {
                break;
            }
        }
        self.counters.stalls += 1;
        self.counters.stall_time += started.elapsed();
        if self.slots[i].state == SlotState::InFlight {
            return Err(internal(
                "staging slot still unmapped after its submission finished",
            ));
        }
        Ok(())
    }

    fn retire_current(&mut self) {
        if let Some(i) = self.current.take() {
            let slot = &mut self.slots[i];
            if let SlotMemory::Mapped { buffer, view } = &mut slot.memory {
                *view = None;
                buffer.unmap();
            }
            slot.state = SlotState::Recorded;
        }
    }
}

impl Slot {
    fn buffer(&self) -> &wgpu::Buffer {
        match &self.memory {
            SlotMemory::Mapped { buffer, .. } => buffer,
            SlotMemory::Imported(b) => b.buffer(),
        }
    }

    /// The whole slot, writable, while it is being filled.
    fn view(&mut self) -> Option<wgpu::WriteOnly<'_, [u8]>> {
        match &mut self.memory {
            SlotMemory::Mapped { view, .. } => view.as_mut().map(|v| v.slice(..)),
            SlotMemory::Imported(b) => b.write_view(),
        }
    }
}

fn poll_error(e: wgpu::PollError) -> LoadError {
    LoadError::Gpu {
        what: "wait for staging copies".into(),
        message: e.to_string(),
    }
}

fn map_failed() -> LoadError {
    LoadError::Gpu {
        what: "re-map staging slot".into(),
        message: "map_async failed (device lost?)".into(),
    }
}

fn internal(message: &str) -> LoadError {
    LoadError::Gpu {
        what: "staging ring".into(),
        message: message.into(),
    }
}
