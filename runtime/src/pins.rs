//! Host RAM copies of streamed weights (docs/behaviour.md, Pins), carried out on the GPU.
//!
//! Which weight keeps a copy, in which tier, and which copies are dropped or
//! (un)registered is [`dynvram_memory::PinPolicy`]'s decision alone; this
//! module performs its actions: a *registered* pin is a
//! [`dynvram_loader::PinnedBuffer`] (imported host RAM where the device can
//! import it) streamed into the arena by `copy_buffer_to_buffer` with no CPU
//! copy; an *unregistered* one is plain RAM copied through the staging ring.
//! A weight without a copy is read from its file into the ring as before.
//! All of it happens while a block is staged, at the submit boundary before
//! the block that needs it (never while a block is being recorded).

use std::collections::HashMap;

use dynvram_loader::{Dtype, HostBytes};
use dynvram_memory::{
    CopySource, ModelId, PinAction, PinConfig, PinDecision, PinPolicy, PinTier, ProcMeminfo,
    RamReading, RamSource, WeightKey,
};
use serde::Serialize;

use crate::config::{PinSettings, RamFigures};
use crate::error::Result;
use crate::pin_builder::PinBuilder;
use crate::upload::{self, ModelView, Upload, Weight};
use dynvram_gpu::StreamSources;
use dynvram_gpu::device::{CopyCmd, Gpu, HostMemory, PinnedBuffer, StagingRing, UploadError};

/// What the runtime's pins hold now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PinReport {
    /// Whether pinning is on.
    pub enabled: bool,
    /// `--fast-disk`.
    pub fast_disk: bool,
    /// Registration ceiling.
    pub max_pinned: u64,
    /// Bytes of registered pins (policy figure, never above the ceiling).
    pub registered_bytes: u64,
    /// Bytes of all RAM copies (policy figure).
    pub pinned_bytes: u64,
    /// Registered pins held in imported host RAM.
    pub imported_pins: usize,
    /// Registered pins held in ordinary mapped buffers (BAR on resizable-BAR GPUs).
    pub mapped_pins: usize,
    /// Plain-RAM copies held.
    pub ram_copies: usize,
    /// Bytes of the imported pins on transparent huge pages (`None` where
    /// the system does not say: not Linux, no procfs).
    pub huge_page_bytes: Option<u64>,
}

#[derive(Debug)]
enum HostCopy {
    Registered(PinnedBuffer),
    Ram(Vec<u8>),
}

/// The runtime's pins: the policy, the RAM reader and the copies.
pub(crate) struct Pins {
    policy: Option<PinPolicy>,
    ram: RamFigures,
    copies: HashMap<WeightKey, HostCopy>,
    /// When `/proc/meminfo` was last read by [`Self::begin_pass`].
    last_system_read: Option<std::time::Instant>,
    /// Builds new registered pins off the pass's thread (started on first
    /// use); `None` with `background` off, or when it could not start.
    builder: Option<PinBuilder>,
    /// Whether new registered pins are built in the background.
    background: bool,
    /// Reader threads of the builder.
    builder_threads: usize,
}

/// Passes closer together than this (decode steps) share one reading of
/// the system's RAM figures: a few tens of µs each, where RAM pressure from
/// other programs changes over seconds.
const SYSTEM_RAM_READ_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

impl std::fmt::Debug for Pins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pins")
            .field("report", &self.report())
            .field("ram", &self.ram)
            .finish()
    }
}

impl Pins {
    /// The policy sized for this machine's RAM (or the simulated one); off
    /// when disabled or when RAM cannot be read.
    /// New registered pins are built by `builder_threads` reader threads
    /// of their own while passes stream those weights from their files
    /// (unless `settings.background` is off).
    pub fn new(settings: &PinSettings, fast_disk: bool, builder_threads: usize) -> Self {
        let mut pins = Self {
            policy: None,
            ram: settings.ram.clone(),
            copies: HashMap::new(),
            last_system_read: None,
            builder: None,
            background: settings.background,
            builder_threads: builder_threads.max(1),
        };
        if !settings.enabled {
            return pins;
        }
        match pins.read_ram(0) {
            Ok(r) => {
                let mut cfg = PinConfig::for_ram(r.total, fast_disk);
                if let Some(max) = settings.max_pinned {
                    cfg.max_pinned = max;
                }
                tracing::info!(
                    total = r.total,
                    max_pinned = cfg.max_pinned,
                    fast_disk,
                    "pins enabled"
                );
                pins.policy = Some(PinPolicy::new(cfg));
            }
            Err(e) => tracing::warn!(%e, "cannot read RAM figures: pins disabled"),
        }
        pins
    }

    fn read_ram(&self, pinned: u64) -> std::result::Result<RamReading, String> {
        match &self.ram {
            RamFigures::System => ProcMeminfo::default().read().map_err(|e| e.to_string()),
            RamFigures::Simulated { total, others } => Ok(RamReading {
                total: *total,
                available: total.saturating_sub(*others).saturating_sub(pinned),
            }),
            RamFigures::Custom(read) => read().map_err(|e| e.to_string()),
        }
    }

    /// At the pass's first sync point: marks `model` as the one running (its
    /// pins are freed last) and, when other programs have pushed free RAM
    /// below the floor, frees copies (inactive models first) until it holds.
    pub fn begin_pass(&mut self, model: ModelId) {
        let Some(pinned) = self.policy.as_ref().map(PinPolicy::pinned_bytes) else {
            return;
        };
        self.take_built(false);
        if matches!(self.ram, RamFigures::System) {
            let now = std::time::Instant::now();
            if self
                .last_system_read
                .is_some_and(|t| now.duration_since(t) < SYSTEM_RAM_READ_EVERY)
            {
                if let Some(p) = &mut self.policy {
                    p.set_active(Some(model));
                }
                return;
            }
            self.last_system_read = Some(now);
        }
        let ram = self.read_ram(pinned);
        let Some(p) = &mut self.policy else {
            return;
        };
        p.set_active(Some(model));
        match ram {
            Ok(ram) => {
                for a in p.relieve(ram) {
                    if let PinAction::Unpin { weight, .. } = a {
                        self.drop_copy(weight);
                    }
                }
            }
            Err(e) => tracing::warn!(%e, "cannot read RAM figures"),
        }
    }

    /// Drops every copy of `model`.
    pub fn unload(&mut self, model: ModelId) {
        if let Some(b) = &mut self.builder {
            b.cancel_model(model);
        }
        if let Some(p) = &mut self.policy {
            for a in p.unload(model) {
                if let PinAction::Unpin { weight, .. } = a {
                    self.copies.remove(&weight);
                }
            }
        }
    }

    /// Queues registered pins of `model`'s weights `streamed` (those its
    /// plan streams, in pass order) for the background builder, as its
    /// passes would take them, so its first pass copies from pins instead
    /// of reading its files through the ring (`Model::pin_ahead`). Stops at
    /// the first weight the policy would not pin registered (RAM or the
    /// ceiling is short). Returns the bytes queued.
    pub fn pin_ahead(
        &mut self,
        model: ModelView<'_>,
        streamed: impl IntoIterator<Item = usize>,
        ring: &StagingRing,
        gpu: &Gpu,
    ) -> Result<u64> {
        if !self.background || !gpu.host_import {
            return Ok(0);
        }
        let mut queued = 0;
        for index in streamed {
            let w = &model.weights[index];
            if w.upload != Upload::Raw {
                continue;
            }
            let key = WeightKey {
                model: model.id,
                tensor: index as u32,
            };
            if self.copies.contains_key(&key) || self.building(key) {
                continue;
            }
            let size = w.upload.gpu_size(&w.info);
            if self.decide(model, ring, gpu, key, size)?.is_none() || !self.building(key) {
                break;
            }
            queued += w.info.len();
        }
        Ok(queued)
    }

    /// Waits for the pins being built in the background and takes them in,
    /// so the next pass streams from every pin the policy holds.
    pub fn finish_building(&mut self) {
        self.take_built(true);
    }

    /// Takes in the pins the builder has finished (`wait`: all of them)
    /// that the policy still holds as registered.
    fn take_built(&mut self, wait: bool) {
        let Some(builder) = &mut self.builder else {
            return;
        };
        if builder.is_idle() {
            return;
        }
        for built in builder.finished(wait) {
            let wanted = self
                .policy
                .as_ref()
                .is_some_and(|p| p.tier(built.key) == Some(PinTier::Registered));
            match built.pin {
                Ok(pin) if wanted => {
                    self.copies.insert(built.key, HostCopy::Registered(pin));
                }
                Ok(_) => {}
                // Streamed from the file meanwhile; retried in the pass.
                Err(e) => {
                    tracing::warn!(%e, "building a pin failed: the weight streams from its file")
                }
            }
        }
    }

    /// Frees `weight`'s copy, or stops its pin being built.
    fn drop_copy(&mut self, weight: WeightKey) {
        self.copies.remove(&weight);
        if let Some(b) = &mut self.builder {
            b.cancel(weight);
        }
    }

    /// Whether `key`'s registered pin is being built in the background.
    fn building(&self, key: WeightKey) -> bool {
        self.builder.as_ref().is_some_and(|b| b.is_pending(key))
    }

    /// Figures for reports.
    pub fn report(&self) -> PinReport {
        let (mut imported, mut mapped, mut ram) = (0, 0, 0);
        let mut ranges = Vec::new();
        for c in self.copies.values() {
            match c {
                HostCopy::Registered(p) if p.memory() == HostMemory::Imported => {
                    imported += 1;
                    ranges.extend(p.host_bytes().map(|b| (b.as_ptr() as u64, b.len() as u64)));
                }
                HostCopy::Registered(_) => mapped += 1,
                HostCopy::Ram(_) => ram += 1,
            }
        }
        let cfg = self.policy.as_ref().map(|p| *p.config());
        PinReport {
            enabled: self.policy.is_some(),
            fast_disk: cfg.is_some_and(|c| c.fast_disk),
            max_pinned: cfg.map_or(0, |c| c.max_pinned),
            registered_bytes: self.policy.as_ref().map_or(0, |p| p.registered_bytes()),
            pinned_bytes: self.policy.as_ref().map_or(0, |p| p.pinned_bytes()),
            imported_pins: imported,
            mapped_pins: mapped,
            ram_copies: ram,
            huge_page_bytes: dynvram_memory::huge_pages::huge_page_bytes(&ranges),
        }
    }

    /// Records the upload of streamed weight `index` of `model` into `dst`
    /// at `offset`, from its pin when it has one, and carries out the pin
    /// policy's actions for it first. A copy from a registered pin goes to
    /// `copies` (for the copy queue) when given, else into `enc`.
    #[allow(clippy::too_many_arguments)]
    pub fn stage(
        &mut self,
        model: ModelView<'_>,
        ring: &mut StagingRing,
        gpu: &Gpu,
        enc: &mut wgpu::CommandEncoder,
        index: usize,
        dst: &wgpu::Buffer,
        offset: u64,
        copies: Option<&mut Vec<CopyCmd>>,
    ) -> Result<StreamSources> {
        let w = &model.weights[index];
        // RAM a copy takes (converted tensors are `f32`); stats count the
        // bytes as stored, like the pass's `streamed_bytes`.
        let size = w.upload.gpu_size(&w.info);
        let counted_len = w.info.len();
        let from_file = StreamSources {
            file_bytes: counted_len,
            ..StreamSources::default()
        };
        let key = WeightKey {
            model: model.id,
            tensor: index as u32,
        };
        self.take_built(false);
        // A copy made during this call may still have its bytes in wgpu's
        // pending writes (mapped pins are filled through them): only wgpu's
        // queue orders a copy after those.
        let existed = self.copies.contains_key(&key);
        let Some(decision) = self.decide(model, ring, gpu, key, size)? else {
            upload::stage(model, ring, gpu, enc, w, dst, offset)?;
            return Ok(from_file);
        };
        let _span =
            tracing::debug_span!("pin_stage", tensor = %w.name, size, source = ?decision.source)
                .entered();
        let copy = match decision.source {
            CopySource::RegisteredPin => Some(PinTier::Registered),
            CopySource::RamPin => Some(PinTier::Unregistered),
            CopySource::Disk => None,
        };
        // A copy the policy counts on but we lost (a failed allocation, a
        // mapped pin unregistered): make it again from the file now.
        if let Some(tier) = copy
            && !self.copies.contains_key(&key)
            && !self.building(key)
        {
            self.make_copy(model, ring, gpu, key, tier)?;
        }
        let Some(host) = self.copies.get(&key) else {
            upload::stage(model, ring, gpu, enc, w, dst, offset)?;
            return Ok(from_file);
        };
        let mut sources = StreamSources::default();
        let counted = match decision.source {
            CopySource::RegisteredPin => &mut sources.registered_pin_bytes,
            CopySource::RamPin => &mut sources.ram_pin_bytes,
            // Pinned on the way: the bytes came from the file this pass.
            CopySource::Disk => &mut sources.file_bytes,
        };
        *counted = counted_len;
        // On another queue family only imported pins (made concurrent over
        // both families) may be read by the copy queue.
        let readable = |pin: &PinnedBuffer| {
            pin.memory() == HostMemory::Imported
                || gpu.transfer_queue().is_some_and(|q| !q.cross_family())
        };
        let copies = copies.filter(|_| existed);
        match (host, copies) {
            (HostCopy::Registered(pin), Some(copies)) if readable(pin) => copies.push(CopyCmd {
                src: pin.buffer().clone(),
                src_offset: 0,
                dst: dst.clone(),
                dst_offset: offset,
                size: pin.check_range(0, pin.len(), dst, offset)?,
            }),
            (HostCopy::Registered(pin), _) => pin.copy_to(enc, dst, offset)?,
            (HostCopy::Ram(bytes), _) => {
                ring.upload(&gpu.device, &gpu.queue, enc, &HostBytes(bytes), dst, offset)?
            }
        }
        Ok(sources)
    }

    /// Asks the policy for weight `key` of `model` (a copy of `size` bytes)
    /// under the RAM figures now, and carries out the actions it gives;
    /// `None` where pins are off or RAM cannot be read (the weight streams
    /// from its file).
    fn decide(
        &mut self,
        model: ModelView<'_>,
        ring: &StagingRing,
        gpu: &Gpu,
        key: WeightKey,
        size: u64,
    ) -> Result<Option<PinDecision>> {
        let Some(pinned) = self.policy.as_ref().map(PinPolicy::pinned_bytes) else {
            return Ok(None);
        };
        let ram = match self.read_ram(pinned) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(%e, "cannot read RAM figures: streaming from the file");
                return Ok(None);
            }
        };
        let Some(policy) = &mut self.policy else {
            return Ok(None);
        };
        let decision = policy.need(key, size, ram);
        for action in &decision.actions {
            self.apply(model, ring, gpu, key, *action)?;
        }
        Ok(Some(decision))
    }

    /// Carries out one policy action. `key` is the weight being staged
    /// (the only one the policy pins); actions on other weights free or
    /// move their copies.
    fn apply(
        &mut self,
        model: ModelView<'_>,
        ring: &StagingRing,
        gpu: &Gpu,
        key: WeightKey,
        action: PinAction,
    ) -> Result<()> {
        match action {
            PinAction::Pin { weight, tier, .. } if weight == key => {
                self.make_copy(model, ring, gpu, key, tier)?
            }
            PinAction::Pin { .. } | PinAction::Stream { .. } => {}
            PinAction::Unpin { weight, .. } => self.drop_copy(weight),
            PinAction::Register { weight } => {
                if let Some(HostCopy::Ram(bytes)) = self.copies.get(&weight) {
                    let label = format!("pin {}:{}", weight.model, weight.tensor);
                    match PinnedBuffer::create(&gpu.device, &label, ring.pool(), &HostBytes(bytes))
                    {
                        Ok(pin) => {
                            self.copies.insert(weight, HostCopy::Registered(pin));
                        }
                        Err(e) => tracing::warn!(%e, "registering a RAM copy failed: kept in RAM"),
                    }
                }
            }
            PinAction::Unregister { weight } => {
                // One being built is made again as a RAM copy when needed.
                if let Some(b) = &mut self.builder {
                    b.cancel(weight);
                }
                if let Some(HostCopy::Registered(pin)) = self.copies.get(&weight) {
                    match pin.host_bytes().map(<[u8]>::to_vec) {
                        Some(bytes) => {
                            self.copies.insert(weight, HostCopy::Ram(bytes));
                        }
                        // A mapped pin cannot be read back: drop it; it is
                        // read from the file again when next needed.
                        None => {
                            self.copies.remove(&weight);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Reads weight `key` of `model` (its GPU bytes: converted where the
    /// upload converts) into a new copy of `tier`. A registered pin that
    /// cannot be allocated leaves the weight streaming from the file. A
    /// registered pin of file bytes is queued for the background builder
    /// where there is one: the weight streams from its file until it is done.
    fn make_copy(
        &mut self,
        model: ModelView<'_>,
        ring: &StagingRing,
        gpu: &Gpu,
        key: WeightKey,
        tier: PinTier,
    ) -> Result<()> {
        let w = &model.weights[key.tensor as usize];
        let _span = tracing::debug_span!("pin", tensor = %w.name, ?tier).entered();
        // Mapped pins (no host-memory import: GL, some drivers) are built
        // here: they cannot be read back when the policy moves their
        // registration, so one built late would often be dropped unused.
        if (tier, w.upload) == (PinTier::Registered, Upload::Raw)
            && self.background
            && gpu.host_import
        {
            if self.builder.is_none() {
                self.builder = PinBuilder::start(gpu.device.clone(), self.builder_threads);
                // Not started: built here from now on.
                self.background = self.builder.is_some();
            }
            if let Some(b) = &mut self.builder
                && b.queue(key, &w.name, model.files)
            {
                return Ok(());
            }
        }
        let copy = match (tier, w.upload) {
            (PinTier::Registered, Upload::Raw) => {
                let raw = upload::RawBytes::of(model, w)?;
                let pin = PinnedBuffer::create(&gpu.device, &w.name, ring.pool(), raw.source());
                if pin.is_ok() {
                    raw.finish(model, w)?;
                }
                pin.map(HostCopy::Registered)
            }
            (PinTier::Registered, Upload::ToF32) => {
                let bytes = upload::gpu_bytes(model, w)?;
                upload::scan_host(model, w, Dtype::F32, &bytes)?;
                PinnedBuffer::create(&gpu.device, &w.name, ring.pool(), &HostBytes(&bytes))
                    .map(HostCopy::Registered)
            }
            (PinTier::Unregistered, _) => Ok(HostCopy::Ram(weight_bytes(model, w, ring)?)),
        };
        match copy {
            Ok(c) => {
                self.copies.insert(key, c);
            }
            // Out of host-visible memory: stream this weight instead.
            Err(e @ UploadError::Gpu(_)) => {
                tracing::warn!(%e, "pin allocation failed: the weight streams from its file");
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }
}

/// A weight's GPU bytes in plain RAM, read by the ring's reader pool.
fn weight_bytes(model: ModelView<'_>, w: &Weight, ring: &StagingRing) -> Result<Vec<u8>> {
    match w.upload {
        Upload::Raw => {
            let source = model.files.source(&w.name)?;
            let mut bytes = vec![0u8; w.info.len() as usize];
            ring.pool().read_into(&source, 0, &mut bytes)?;
            upload::scan_host(model, w, w.info.dtype, &bytes)?;
            Ok(bytes)
        }
        Upload::ToF32 => {
            let bytes = upload::gpu_bytes(model, w)?;
            upload::scan_host(model, w, Dtype::F32, &bytes)?;
            Ok(bytes)
        }
    }
}
