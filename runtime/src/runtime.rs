//! [`Runtime`]: one GPU, one budget and one staging ring shared by every model.

use std::sync::{Arc, Mutex};

use dynvram_loader::{ReaderConfig, ReaderPool};
use dynvram_memory::{Budget, CapacitySource};
use serde::Serialize;

use crate::config::RuntimeConfig;
use crate::error::Result;
use crate::pins::PinReport;
use crate::residency::Device;
use dynvram_gpu::accounting::SharedBudget;
use dynvram_gpu::device::{Gpu, StagingRing, read_vram};
use dynvram_gpu::ops::cache::PipelineCache;

/// The composition root applications embed: open it once, then open models.
#[derive(Debug)]
pub struct Runtime {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) cache: PipelineCache,
    pub(crate) budget: SharedBudget,
    pub(crate) ring: Mutex<StagingRing>,
    pub(crate) config: RuntimeConfig,
    pub(crate) linear_scratch: Mutex<dynvram_gpu::ops::linear::LinearScratch>,
    /// Which weights of which model are resident (docs/behaviour.md,
    /// Residency), shared with the models.
    pub(crate) residency: crate::residency::SharedRegistry,
    /// Host RAM copies of streamed weights (docs/behaviour.md, Pins), see `pins.rs`.
    pub(crate) pins: std::sync::Arc<Mutex<crate::pins::Pins>>,
}

/// Budget figures for reports.
#[derive(Debug, Clone, Serialize)]
pub struct BudgetReport {
    /// Capacity in bytes.
    pub capacity: u64,
    /// Where it came from.
    pub source: String,
    /// `--reserve-vram` in bytes.
    pub reserve: u64,
    /// `--vram-headroom` in bytes.
    pub headroom: u64,
    /// `capacity − reserve − headroom`.
    pub usable: u64,
    /// Bytes the ledger tracks now, all classes.
    pub tracked: u64,
    /// Highest tracked figure so far.
    pub peak: u64,
    /// `loaded_vram`: the model proper only (never patches).
    pub loaded_vram: u64,
    /// Residency of each open model, highest priority (last run) first.
    pub models: Vec<crate::residency::ModelResidency>,
}

impl Runtime {
    /// The parts of the runtime its residency registry works with.
    pub(crate) fn device(&self) -> Device<'_> {
        Device {
            gpu: &self.gpu,
            budget: &self.budget,
            config: &self.config,
            cache: &self.cache,
        }
    }

    /// What the pins hold now.
    pub fn pin_report(&self) -> PinReport {
        self.pins.lock().unwrap_or_else(|e| e.into_inner()).report()
    }

    /// Waits for the registered pins being built in the background
    /// ([`crate::PinSettings::background`]), so the next pass streams from
    /// every pin the policy holds.
    pub fn finish_pins(&self) {
        self.pins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .finish_building();
    }

    /// Opens the adapter, reads the VRAM capacity (driver figure or
    /// `--vram-budget`), and creates the staging ring.
    pub fn new(config: RuntimeConfig) -> Result<Self> {
        let gpu = Arc::new(Gpu::open(&config.adapter)?);
        let reading = read_vram(&gpu.adapter);
        let (capacity, source) = match (config.budget.vram_budget, reading) {
            (Some(b), _) => (b, CapacitySource::Explicit),
            (None, Some(r)) => (r.capacity, r.source.into()),
            // No driver figure (GL, software): the adapter's largest buffer
            // is all we know; the ledger is the only guard.
            (None, None) => (gpu.caps.max_buffer_size, CapacitySource::Unknown),
        };
        let mut budget = Budget::new(capacity, source, config.budget)?;
        // Other programs use VRAM too: where the driver reports usage, the
        // deficit rule's `measured` term polls it (at most every 2 s).
        if let Some(poll) = dynvram_gpu::device::DriverPoll::new(&gpu.adapter) {
            budget = budget.with_driver(Box::new(poll));
        }
        tracing::info!(capacity, %source, usable = budget.usable(), "VRAM budget");
        let pool = Arc::new(ReaderPool::new(ReaderConfig {
            threads: config.reader_threads,
            drop_behind: config.drop_behind,
            ..ReaderConfig::default()
        })?);
        let ring = StagingRing::new(&gpu.device, config.ring, pool)?;
        let residency = Arc::new(Mutex::new(crate::residency::Registry::new(
            budget.usable(),
        )?));
        let pins = std::sync::Arc::new(Mutex::new(crate::pins::Pins::new(
            &config.pins,
            config.fast_disk,
            config.reader_threads,
        )));
        let budget = Arc::new(Mutex::new(budget));
        Ok(Self {
            gpu,
            cache: PipelineCache::default(),
            linear_scratch: Mutex::new(dynvram_gpu::ops::linear::LinearScratch::tracked(
                budget.clone(),
            )),
            budget,
            ring: Mutex::new(ring),
            config,
            residency,
            pins,
        })
    }

    /// The GPU.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// The settings it was opened with.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// The compiled-pipeline cache shared by every op.
    pub fn pipelines(&self) -> &PipelineCache {
        &self.cache
    }

    /// Starts the ledger's peak ([`BudgetReport::peak`]) again from the
    /// bytes tracked now, so a stage of a pipeline reports its own peak.
    pub fn reset_peak(&self) {
        dynvram_gpu::accounting::lock(&self.budget).reset_peak();
    }

    /// Budget figures now.
    pub fn budget_report(&self) -> BudgetReport {
        // Not nested: a pass takes the registry's lock, then the budget's.
        let models = crate::residency::lock(&self.residency).reports();
        let b = dynvram_gpu::accounting::lock(&self.budget);
        BudgetReport {
            capacity: b.capacity(),
            source: b.source().to_string(),
            reserve: b.config().reserve,
            headroom: b.config().headroom,
            usable: b.usable(),
            tracked: b.ledger().total(),
            peak: b.ledger().peak(),
            loaded_vram: b.ledger().loaded_vram(),
            models,
        }
    }

    /// Where passes copy streamed weights from registered pins.
    pub fn copies_on(&self) -> &'static str {
        match self.gpu.transfer_queue() {
            Some(q) if self.config.copy_queue && q.shared_with_wgpu() => {
                "the copy-queue path on wgpu's queue (DYNVRAM_COPY_QUEUE=shared)"
            }
            Some(q) if self.config.copy_queue && q.cross_family() => {
                "a queue of a transfer-only family (the copy engines)"
            }
            Some(_) if self.config.copy_queue => "a second queue of wgpu's family",
            _ => "wgpu's queue",
        }
    }

    /// Counters of the staging ring.
    pub fn ring_counters(&self) -> dynvram_loader::RingCounters {
        self.ring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .counters()
    }
}
