//! The staging ring's GPU side: a few host-visible `COPY_SRC` buffers that
//! file bytes are read into (by the reader pool, straight into the mapped
//! memory) and then copied to their GPU destination with
//! `copy_buffer_to_buffer`. Which slot is filled, recorded or in flight is
//! [`dynvram_loader::RingSlots`]' bookkeeping (its docs give the protocol);
//! this owns the slots' memory, maps and unmaps them, records the copies and
//! waits for the GPU.
//!
//! Slots are ordinary `MAP_WRITE` buffers ([`HostMemoryChoice::Mapped`], on a
//! resizable-BAR GPU these are VRAM written over PCIe) or imported host RAM
//! ([`HostMemoryChoice::Host`], `VK_EXT_external_memory_host`, falling back
//! to mapped buffers where the device cannot import). Imported slots are
//! always writable: instead of a re-map, a slot becomes ready again when the
//! queue reports its submission done.
//!
//! # Use
//!
//! 1. [`StagingRing::upload`] reads into the current slot and records the
//!    copy into the caller's encoder.
//! 2. Before submitting that encoder, call [`StagingRing::prepare_submit`]
//!    (retires the current slot: a new submit always starts a new slot);
//!    after `queue.submit`, call [`StagingRing::submitted`] with its index,
//!    which re-maps every recorded slot with `map_async` (imported slots:
//!    waits for `on_submitted_work_done`).
//!    [`StagingRing::submit`] does all three.
//! 3. Taking a slot that is still in flight waits for its copy (a *stall*,
//!    counted with its time). Call [`StagingRing::recycle`] at each sync
//!    point so slots whose copies are done are taken without a stall. Taking
//!    a slot whose copies are still in the caller's unsubmitted encoder (one
//!    recording larger than the whole ring) submits that encoder and
//!    continues in a fresh one (a *flush*, counted).
//!
//! Uploads are padded to 4 bytes (wgpu's copy alignment): the destination
//! offset must be a multiple of 4 and the destination must have room for the
//! padded length; the padding bytes are zeros.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Instant;

use dynvram_loader::{
    ByteSource, DEFAULT_SLOT_SIZE, DEFAULT_SLOTS, ReaderPool, RingCounters, RingSlots, SlotState,
};

use super::error::{GpuError, UploadError};
use super::host_memory::{self, HostMemory, HostMemoryChoice, ImportedBuffer};
use super::staging::{self, write_only};

type Result<T, E = UploadError> = std::result::Result<T, E>;

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

#[derive(Debug)]
enum SlotMemory {
    Mapped {
        buffer: wgpu::Buffer,
        /// The whole slot's mapped range while filling.
        view: Option<wgpu::BufferViewMut>,
    },
    Imported(ImportedBuffer),
}

/// One slot's GPU side; its state is in [`StagingRing::book`].
#[derive(Debug)]
struct Slot {
    memory: SlotMemory,
    map_status: Arc<AtomicU8>,
    submission: Option<wgpu::SubmissionIndex>,
}

/// The staging ring (see the module docs for its use).
#[derive(Debug)]
pub struct StagingRing {
    memory_choice: HostMemoryChoice,
    pool: Arc<ReaderPool>,
    book: RingSlots,
    slots: Vec<Slot>,
    memory: HostMemory,
}

impl StagingRing {
    /// Creates the slots (mapped, ready) on `device`; reads go through `pool`.
    pub fn new(
        device: &wgpu::Device,
        config: RingConfig,
        pool: Arc<ReaderPool>,
    ) -> Result<Self, GpuError> {
        let book = RingSlots::new(config.slots, config.slot_size);
        let (count, slot_size) = (book.len(), book.slot_size());
        let label = |i| format!("dynvram staging slot {i}");
        let imported = match config.memory {
            HostMemoryChoice::Host => (0..count)
                .map(|i| host_memory::import_anonymous(device, &label(i), slot_size))
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
            None => (0..count)
                .map(|i| {
                    Ok(SlotMemory::Mapped {
                        buffer: staging::create_mapped_staging(device, &label(i), slot_size)?,
                        view: None,
                    })
                })
                .collect::<Result<Vec<_>, GpuError>>()?,
        };
        let slots = memories
            .into_iter()
            .map(|memory| Slot {
                memory,
                map_status: Arc::new(AtomicU8::new(MAP_OK)),
                submission: None,
            })
            .collect();
        tracing::debug!(slots = count, slot_size, %memory, "staging ring created");
        Ok(Self {
            memory_choice: config.memory,
            pool,
            book,
            slots,
            memory,
        })
    }

    /// The ring's shape (after rounding).
    pub fn config(&self) -> RingConfig {
        RingConfig {
            slots: self.book.len(),
            slot_size: self.book.slot_size(),
            memory: self.memory_choice,
        }
    }

    /// Which memory the slots are in.
    pub fn memory(&self) -> HostMemory {
        self.memory
    }

    /// Counters since creation.
    pub fn counters(&self) -> RingCounters {
        self.book.counters()
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
        staging::check_copy(dst, dst_offset, len)?;
        let _span = tracing::debug_span!("ring_upload", bytes = len, dst_offset).entered();
        let mut done = 0u64;
        while done < len {
            self.current_slot(device, queue, encoder)?;
            let Some(place) = self.book.place(len - done) else {
                return Err(internal("no slot is filling").into());
            };
            let slot = &mut self.slots[place.slot];
            let Some(mut view) = slot.view() else {
                return Err(internal("filling slot has no writable view").into());
            };
            let start = place.offset as usize;
            let end = start + place.len as usize;
            self.pool.read(source, done, view.slice(start..end))?;
            if place.padded > place.len {
                view.slice(end..start + place.padded as usize).fill(0);
            }
            encoder.copy_buffer_to_buffer(
                slot.buffer(),
                place.offset,
                dst,
                dst_offset + done,
                place.padded,
            );
            done += place.len;
            if self.book.record(place) {
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
        for i in self.book.submit_recorded() {
            let slot = &mut self.slots[i];
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
    pub fn recycle(&mut self, device: &wgpu::Device) -> Result<(), GpuError> {
        device.poll(wgpu::PollType::Poll).map_err(poll_error)?;
        (0..self.slots.len()).try_for_each(|i| self.promote(i))
    }

    /// Marks in-flight slot `i` ready if its re-map has completed.
    fn promote(&mut self, i: usize) -> Result<(), GpuError> {
        if self.book.state(i) == SlotState::InFlight {
            let slot = &mut self.slots[i];
            match slot.map_status.load(Ordering::Acquire) {
                MAP_OK => {
                    self.book.ready(i);
                    slot.submission = None;
                }
                MAP_FAILED => return Err(map_failed()),
                _ => {}
            }
        }
        Ok(())
    }

    /// Makes sure a slot is filling, taking the next one if none is.
    fn current_slot(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        encoder: &mut wgpu::CommandEncoder,
    ) -> Result<(), GpuError> {
        if self.book.current().is_some() {
            return Ok(());
        }
        let i = self.book.next();
        if self.book.state(i) == SlotState::Recorded {
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
            self.book.count_flush();
        }
        if self.book.state(i) == SlotState::InFlight {
            self.wait_mapped(device, i)?;
        }
        if self.book.state(i) != SlotState::Ready {
            return Err(internal("slot to fill is not ready"));
        }
        if let SlotMemory::Mapped { buffer, view } = &mut self.slots[i].memory {
            *view = Some(
                buffer
                    .get_mapped_range_mut(..)
                    .map_err(|e| GpuError::Upload {
                        what: format!("map staging slot {i}"),
                        message: e.to_string(),
                    })?,
            );
        }
        self.book
            .take()
            .map_err(|e| internal(&e.to_string()))
            .map(drop)
    }

    /// Waits until in-flight slot `i` is mapped again. Counted as a stall:
    /// the ring had not seen the slot's copy finish (a [`Self::recycle`] at
    /// the sync point before would have), so it had to ask the GPU here. Only
    /// slot `i` changes state, so the count depends on the call sequence, not
    /// on GPU timing.
    fn wait_mapped(&mut self, device: &wgpu::Device, i: usize) -> Result<(), GpuError> {
        let _span = tracing::debug_span!("ring_stall", slot = i).entered();
        let started = Instant::now();
        // What has finished already, then the slot's own submission, then
        // everything submitted.
        device.poll(wgpu::PollType::Poll).map_err(poll_error)?;
        self.promote(i)?;
        for submission in [self.slots[i].submission.clone(), None] {
            if self.book.state(i) != SlotState::InFlight {
                break;
            }
            super::wait(device, submission, "staging copies")?;
            self.promote(i)?;
        }
        self.book.count_stall(started.elapsed());
        if self.book.state(i) == SlotState::InFlight {
            return Err(internal(
                "staging slot still unmapped after its submission finished",
            ));
        }
        Ok(())
    }

    fn retire_current(&mut self) {
        if let Some(i) = self.book.retire_current()
            && let SlotMemory::Mapped { buffer, view } = &mut self.slots[i].memory
        {
            *view = None;
            buffer.unmap();
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
    fn view(&mut self) -> Option<dynvram_loader::WriteOnlyBytes<'_>> {
        match &mut self.memory {
            SlotMemory::Mapped { view, .. } => view.as_mut().map(|v| write_only(v.slice(..))),
            SlotMemory::Imported(b) => b.write_view(),
        }
    }
}

fn poll_error(e: wgpu::PollError) -> GpuError {
    GpuError::Upload {
        what: "wait for staging copies".into(),
        message: e.to_string(),
    }
}

fn map_failed() -> GpuError {
    GpuError::Upload {
        what: "re-map staging slot".into(),
        message: "map_async failed (device lost?)".into(),
    }
}

fn internal(message: &str) -> GpuError {
    GpuError::Upload {
        what: "staging ring".into(),
        message: message.into(),
    }
}
