//! `--backend` / `--adapter` flags shared by every subcommand that opens a GPU.

use dynvram_runtime::AdapterChoice;

/// Adapter selection; unset flags fall back to `WGPU_BACKEND`, `WGPU_ADAPTER_NAME`
/// and `WGPU_POWER_PREF`, as in wgpu.
#[derive(Debug, Clone, clap::Args)]
pub struct AdapterArgs {
    /// Backend(s): vulkan, gl, metal, dx12 (comma list). Default: `WGPU_BACKEND` or all.
    #[arg(long)]
    pub backend: Option<String>,
    /// Pick the adapter whose name contains this (case-insensitive). Default: `WGPU_ADAPTER_NAME`.
    #[arg(long)]
    pub adapter: Option<String>,
    /// Power preference when several match: high, low, none. Default: `WGPU_POWER_PREF` or high.
    #[arg(long)]
    pub power: Option<String>,
}

impl AdapterArgs {
    /// As the runtime's choice struct.
    pub fn choice(&self) -> AdapterChoice {
        AdapterChoice {
            backend: self.backend.clone(),
            adapter: self.adapter.clone(),
            power: self.power.clone(),
        }
    }
}
