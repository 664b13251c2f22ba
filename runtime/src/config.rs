//! The runtime's settings; each field mirrors a CLI flag of the same name.

use std::fmt;
use std::sync::Arc;

use dynvram_gpu::device::RingConfig;
use dynvram_memory::{BudgetConfig, PinError, RamReading};
use dynvram_quant::LinearDtypeOverride;

use dynvram_gpu::device::AdapterChoice;

/// Settings of a [`crate::Runtime`].
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// `--backend`, `--adapter`, `--power`.
    pub adapter: AdapterChoice,
    /// `--vram-budget`, `--reserve-vram`, `--vram-headroom`.
    pub budget: BudgetConfig,
    /// `--linear-dtype`: activation arithmetic of int4 layers.
    pub linear_dtype: LinearDtypeOverride,
    /// `--staging-slots`, `--staging-slot-mib`: the host staging ring (and
    /// whether its slots are mapped wgpu buffers or imported host RAM).
    pub ring: RingConfig,
    /// `--reader-threads`: threads reading files into the ring.
    pub reader_threads: usize,
    /// `--drop-behind`: `posix_fadvise(DONTNEED)` after cold reads.
    pub drop_behind: bool,
    /// Host RAM copies of streamed weights (docs/behaviour.md, Pins).
    pub pins: PinSettings,
    /// `--fast-disk`: keep no RAM copy beyond the registrable amount; every
    /// other streamed weight is read from disk each pass.
    pub fast_disk: bool,
    /// `--no-copy-queue` clears it: copy streamed weights from registered
    /// pins on a second queue of the device (where it has one) so they
    /// overlap the kernels.
    pub copy_queue: bool,
    /// Blocks per submit when nothing streams ([`RESIDENT_SUBMIT_BLOCKS`]
    /// by default); 0 submits once, at the pass's end. Pipelined passes
    /// (`PassEnd::Submitted`: decode steps) submit once regardless. The CLI
    /// reads `DYNVRAM_SUBMIT_BLOCKS`, for tuning.
    pub resident_submit_blocks: usize,
}

/// Blocks per submit when nothing streams: wgpu encodes a command buffer
/// at submit (~1.6 µs of CPU a launch on the H200, `bench dispatch`), so one
/// submit per pass would leave the GPU idle until the whole pass is
/// encoded; a submit every few blocks overlaps encoding with execution, for
/// ~9 submits per token of a 32-layer model (BENCHMARKS.md, session 7). The
/// first goes after block 1 (the embedding and the first layer), so the GPU
/// starts early in each step.
pub const RESIDENT_SUBMIT_BLOCKS: usize = 4;

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            adapter: AdapterChoice::default(),
            budget: BudgetConfig::default(),
            linear_dtype: LinearDtypeOverride::Auto,
            ring: RingConfig::default(),
            reader_threads: 8,
            drop_behind: false,
            pins: PinSettings::default(),
            fast_disk: false,
            copy_queue: true,
            resident_submit_blocks: RESIDENT_SUBMIT_BLOCKS,
        }
    }
}

impl RuntimeConfig {
    /// The defaults with a VRAM capacity of exactly `bytes`, all usable
    /// ([`BudgetConfig::exactly`]).
    pub fn with_vram(bytes: u64) -> Self {
        Self {
            budget: BudgetConfig::exactly(bytes),
            ..Self::default()
        }
    }
}

/// How streamed weights are pinned in host RAM.
#[derive(Debug, Clone)]
pub struct PinSettings {
    /// Keep RAM copies at all (off: every streamed weight is read from its
    /// file each pass).
    pub enabled: bool,
    /// Registration ceiling in bytes; `None`: `MAX_PINNED` of the RAM total
    /// (90 % on Linux, 40 % on Windows).
    pub max_pinned: Option<u64>,
    /// Where RAM figures come from.
    pub ram: RamFigures,
    /// Build new registered pins on a thread of their own while the passes
    /// stream those weights from their files (off: the pass that first
    /// streams a weight fills its pin, and waits for it).
    pub background: bool,
}

impl Default for PinSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            max_pinned: None,
            ram: RamFigures::System,
            background: true,
        }
    }
}

/// A RAM reader supplied by the application.
pub type RamReader = Arc<dyn Fn() -> Result<RamReading, PinError> + Send + Sync>;

/// Where the pin policy's RAM figures come from (injectable, so tests and
/// embedders can simulate a small machine).
#[derive(Clone, Default)]
pub enum RamFigures {
    /// The OS (`/proc/meminfo` on Linux; elsewhere pins are off).
    #[default]
    System,
    /// A machine of `total` bytes of which `others` are used by other
    /// programs: available = total − others − the bytes our pins hold.
    Simulated {
        /// RAM total.
        total: u64,
        /// RAM other programs use.
        others: u64,
    },
    /// The application's own reader.
    Custom(RamReader),
}

impl fmt::Debug for RamFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::System => f.write_str("System"),
            Self::Simulated { total, others } => f
                .debug_struct("Simulated")
                .field("total", total)
                .field("others", others)
                .finish(),
            Self::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}
