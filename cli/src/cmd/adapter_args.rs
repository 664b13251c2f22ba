//! `--backend` / `--adapter` / `--pipeline-cache` flags shared by every
//! subcommand that opens a GPU.

use std::path::PathBuf;

use dynvram_runtime::AdapterChoice;
use dynvram_runtime::device::GpuOptions;

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
    /// Keep the driver's compiled kernels in DIR between runs (Vulkan; a
    /// warm start skips the shader compiler). Default: the cache folder
    /// (`DYNVRAM_CACHE`, else `$XDG_CACHE_HOME/dynvram`, else `~/.cache/dynvram`).
    #[arg(long, value_name = "DIR")]
    pub pipeline_cache: Option<PathBuf>,
    /// Neither read nor write a pipeline cache.
    #[arg(long, conflicts_with = "pipeline_cache")]
    pub no_pipeline_cache: bool,
}

impl AdapterArgs {
    /// The pipeline cache folder this run writes, if any.
    pub fn cache_folder(&self) -> Option<PathBuf> {
        (!self.no_pipeline_cache).then(|| {
            self.pipeline_cache
                .clone()
                .unwrap_or_else(crate::cmd::cache_dir)
        })
    }

    /// As the runtime's choice struct: the flags, else `WGPU_ADAPTER_NAME`
    /// and `WGPU_POWER_PREF` (the backend's `WGPU_BACKEND` is wgpu's own),
    /// and the device options of the `DYNVRAM_*` diagnosis variables
    /// ([`gpu_options`]) with the pipeline cache folder.
    pub fn choice(&self) -> AdapterChoice {
        let pipeline_cache = self.cache_folder();
        AdapterChoice {
            backend: self.backend.clone(),
            adapter: self
                .adapter
                .clone()
                .or_else(|| std::env::var("WGPU_ADAPTER_NAME").ok()),
            power: self
                .power
                .clone()
                .or_else(|| std::env::var("WGPU_POWER_PREF").ok()),
            options: GpuOptions {
                pipeline_cache,
                ..gpu_options()
            },
        }
    }
}

/// A positive number of seconds (`DYNVRAM_GPU_WAIT`).
struct Seconds(std::time::Duration);

impl std::str::FromStr for Seconds {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && v > 0.0 && v <= 1e9 => {
                Ok(Self(std::time::Duration::from_secs_f64(v)))
            }
            _ => Err(format!("`{s}`: want a positive number of seconds")),
        }
    }
}

/// The device options from `DYNVRAM_COPY_QUEUE` (auto, off, family0,
/// shared), `DYNVRAM_COOP_MATRIX` (off disables cooperative matrices) and
/// `DYNVRAM_SHADER_CHECKS` (no-loop-bound, all, none) and
/// `DYNVRAM_QUANT_WGS` (the fast rotate/quantize kernels' workgroup size,
/// for tuning) and `DYNVRAM_SPREAD_QUANT` (how the integer GEMVs at decode
/// sizes get their activation codes: `codes`, the default, a
/// many-workgroup kernel codes the spread-rotated rows once; `0`/`off` a
/// quantization launch, one workgroup a row; `1`/`gemv` they code
/// spread-rotated rows themselves, measured slower; for comparisons) and
/// `DYNVRAM_FLASH` (the flash-attention kernel, a `FlashKernel`:
/// `two-walk` or a one-walk tuning such as `128x32w8c2`, for tuning) and
/// `DYNVRAM_DECODE` (the decode-attention kernel's `DecodeTuning`, such as
/// `512x32m8`, for tuning) and `DYNVRAM_COOP_GEMM` (the cooperative-matrix
/// GEMM kernel: `single`, the default, or `double`, for comparisons) and
/// `DYNVRAM_SPIRV_GEMM` (which GEMMs take the SPIR-V cooperative-matrix-2
/// kernels where the device has the extension: `auto`, the default, every
/// one; `float`, f16 and bf16 weights; `off`) and
/// `DYNVRAM_CM2_BF16` (how bf16 layers take them: `auto`, the default,
/// resident weights converted to f16 once as they are uploaded, streamed
/// ones a piece at a time every pass, for the f16 kernels; `f16`, every
/// weight converted every pass; `f16-resident`, resident weights converted
/// once on any device; `staged`, the bf16 kernels, for comparisons) and
/// `DYNVRAM_CM2_INT4` (how int4 layers take them: `int8`, the default,
/// widened to int8 a piece at a time for the int8 kernels; `staged`, the
/// int4 kernels) and `DYNVRAM_CM2_SPLIT`
/// (whether GEMMs whose tiles fill at most half the GPU split K: `waves`,
/// the default, also the tiles of a last wave at most half full; `auto`,
/// small grids only; `off`, narrower tiles instead; a number, that many
/// splits wherever a kernel can, for tuning) and `DYNVRAM_CM2_STACK` (`auto` or
/// `on`, the default: q/k/v and gate/up share one SPIR-V GEMM launch at
/// prefill where it pays; `always`: wherever the kernel can; `grouped`:
/// as `auto`, tiles in groups of row tiles; `off`: one launch each) and `DYNVRAM_CM2_GEMM` (a SPIR-V GEMM by name, as
/// `probe` lists them, that layers of its weights take on grids of more
/// than half the GPU: whole-model comparisons) and `DYNVRAM_F16_UNPACK` (`off`:
/// kernels decode f16 weights in integer arithmetic even where the
/// adapter converts them in hardware, for comparisons) and
/// `DYNVRAM_GPU_WAIT` (seconds a wait for the GPU may take, 300): the one
/// place the program reads them. A value it does not know is warned about
/// and the default kept. No pipeline
/// cache: [`AdapterArgs::choice`] adds its folder.
pub fn gpu_options() -> GpuOptions {
    fn var<T: std::str::FromStr<Err = String>>(name: &str, default: T) -> T {
        optional(name).unwrap_or(default)
    }
    fn optional<T: std::str::FromStr<Err = String>>(name: &str) -> Option<T> {
        let v = std::env::var(name).ok()?;
        v.parse()
            .map_err(|e: String| tracing::warn!("{name}: {e}; using the default"))
            .ok()
    }
    let d = GpuOptions::default();
    GpuOptions {
        copy_queue: var("DYNVRAM_COPY_QUEUE", d.copy_queue),
        coop_matrix: std::env::var("DYNVRAM_COOP_MATRIX").as_deref() != Ok("off"),
        shader_checks: var("DYNVRAM_SHADER_CHECKS", d.shader_checks),
        quant_wgs: std::env::var("DYNVRAM_QUANT_WGS")
            .ok()
            .and_then(|v| v.trim().parse().ok()),
        spread_quant: var("DYNVRAM_SPREAD_QUANT", d.spread_quant),
        flash: optional("DYNVRAM_FLASH"),
        decode: optional("DYNVRAM_DECODE"),
        coop_gemm: var("DYNVRAM_COOP_GEMM", d.coop_gemm),
        spirv_gemm: var("DYNVRAM_SPIRV_GEMM", d.spirv_gemm),
        cm2_bf16: var("DYNVRAM_CM2_BF16", d.cm2_bf16),
        cm2_int4: var("DYNVRAM_CM2_INT4", d.cm2_int4),
        cm2_split: var("DYNVRAM_CM2_SPLIT", d.cm2_split),
        cm2_stack: var("DYNVRAM_CM2_STACK", d.cm2_stack),
        cm2_large: std::env::var("DYNVRAM_CM2_GEMM").ok().and_then(|name| {
            let g = dynvram_runtime::ops::linear::cm2_named(&name);
            if g.is_none() {
                tracing::warn!(
                    "DYNVRAM_CM2_GEMM: no SPIR-V GEMM named `{name}`; using the default"
                );
            }
            g.map(|g| g.name)
        }),
        f16_unpack: std::env::var("DYNVRAM_F16_UNPACK").as_deref() != Ok("off"),
        wait_limit: optional::<Seconds>("DYNVRAM_GPU_WAIT").map_or(d.wait_limit, |s| s.0),
        pipeline_cache: None,
    }
}
