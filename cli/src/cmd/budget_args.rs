//! `--vram-budget`, `--reserve-vram`, `--vram-headroom`: GiB floats, as in
//! ComfyUI; and the host-memory flags beside them (`--fast-disk`, pins,
//! staging memory).

use dynvram_memory::BudgetConfig;
use dynvram_runtime::device::{HostMemoryChoice, RingConfig};
use dynvram_runtime::{PinSettings, RuntimeConfig};

/// The VRAM budget flags (docs/behaviour.md, Budget).
#[derive(Debug, Clone, clap::Args)]
pub struct BudgetArgs {
    /// Explicit VRAM capacity in GiB, overriding the driver's figure. It is
    /// the budget: the default reserve is not taken from it.
    #[arg(long, value_name = "GIB")]
    pub vram_budget: Option<f64>,
    /// VRAM kept free of our own allocations, in GiB. Default: 0.25 of a
    /// budget the driver reports, none of an explicit --vram-budget (given
    /// explicitly, it applies to either).
    #[arg(long, value_name = "GIB")]
    pub reserve_vram: Option<f64>,
    /// Extra headroom on top of both budget methods, in GiB (default 0): for
    /// drivers that spill into shared system memory.
    #[arg(long, value_name = "GIB")]
    pub vram_headroom: Option<f64>,
    /// Fast NVMe: keep no RAM copy of streamed weights beyond the registrable
    /// amount; everything else is read from disk every pass.
    #[arg(long)]
    pub fast_disk: bool,
    /// Keep no RAM copies (pins) of streamed weights at all.
    #[arg(long)]
    pub no_pins: bool,
    /// Registration ceiling for pins in GiB (default 90 % of RAM on Linux,
    /// 40 % on Windows).
    #[arg(long, value_name = "GIB")]
    pub max_pinned: Option<f64>,
    /// Staging ring slots: `host` RAM imported with VK_EXT_external_memory_host
    /// (mapped buffers where the device cannot import), or `mapped` wgpu
    /// buffers (BAR on resizable-BAR GPUs).
    #[arg(long, value_enum, default_value = "host")]
    pub staging_memory: StagingMemoryArg,
    /// Copy streamed weights on wgpu's queue even where the device has a
    /// second queue for them (the copies then wait for the kernels).
    #[arg(long)]
    pub no_copy_queue: bool,
}

/// Where staging ring slots live.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum StagingMemoryArg {
    /// Ordinary mapped wgpu buffers.
    Mapped,
    /// Imported host RAM (mapped where the device cannot import).
    Host,
}

impl From<StagingMemoryArg> for HostMemoryChoice {
    fn from(a: StagingMemoryArg) -> Self {
        match a {
            StagingMemoryArg::Mapped => Self::Mapped,
            StagingMemoryArg::Host => Self::Host,
        }
    }
}

impl BudgetArgs {
    /// As the runtime's budget settings.
    pub fn config(&self) -> anyhow::Result<BudgetConfig> {
        Ok(BudgetConfig::from_gib(
            self.vram_budget,
            self.reserve_vram,
            self.vram_headroom,
        )?)
    }

    /// Default runtime settings with the host-memory flags applied (callers
    /// fill in the adapter, budget and the rest).
    pub fn host_config(&self) -> anyhow::Result<RuntimeConfig> {
        let max_pinned = match self.max_pinned {
            Some(g) if g.is_finite() && g >= 0.0 => Some((g * (1u64 << 30) as f64) as u64),
            Some(g) => anyhow::bail!("--max-pinned {g}: not a size in GiB"),
            None => None,
        };
        let memory = self.staging_memory.into();
        let d = RuntimeConfig::default();
        Ok(RuntimeConfig {
            resident_submit_blocks: submit_blocks(d.resident_submit_blocks),
            fast_disk: self.fast_disk,
            copy_queue: !self.no_copy_queue,
            pins: PinSettings {
                enabled: !self.no_pins,
                max_pinned,
                // For benchmarks beside the old behaviour: new pins filled
                // by the pass that first streams them.
                background: std::env::var("DYNVRAM_PIN_BUILD").as_deref() != Ok("pass"),
                ..PinSettings::default()
            },
            ring: RingConfig {
                memory,
                ..RingConfig::default()
            },
            ..RuntimeConfig::default()
        })
    }
}

/// `DYNVRAM_SUBMIT_BLOCKS` (blocks per submit of a resident pass, 0: one
/// submit a pass; for tuning), else `default`; a value that is not a
/// count is warned about and the default kept.
fn submit_blocks(default: usize) -> usize {
    match std::env::var("DYNVRAM_SUBMIT_BLOCKS") {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            tracing::warn!("DYNVRAM_SUBMIT_BLOCKS={v}: not a count; using {default}");
            default
        }),
        Err(_) => default,
    }
}
