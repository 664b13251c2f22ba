//! Adapter selection: an explicit backend list, else wgpu's `WGPU_BACKEND`
//! (read by wgpu), name filter and power preference. The CLI maps
//! `WGPU_ADAPTER_NAME` and `WGPU_POWER_PREF` onto the fields.

use serde::Serialize;

use super::GpuError;
use super::caps::adapter_caps;
use dynvram_quant::AdapterCaps;

/// Which adapter to use and how to open it. Empty fields fall back to
/// wgpu's defaults (`WGPU_BACKEND` or any backend, any name, high
/// performance).
#[derive(Debug, Clone, Default)]
pub struct AdapterChoice {
    /// Backend list such as `vulkan`, `gl`, `vulkan,gl` (wgpu's syntax).
    pub backend: Option<String>,
    /// Case-insensitive substring of the adapter name.
    pub adapter: Option<String>,
    /// `high`/`low`/`none` power preference.
    pub power: Option<String>,
    /// How the device is opened (copy queue, cooperative matrices, shader
    /// checks).
    pub options: super::GpuOptions,
}

/// One adapter as `dynvram probe` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct AdapterSummary {
    /// Name.
    pub name: String,
    /// Backend.
    pub backend: String,
    /// Integrated, discrete, CPU…
    pub device_type: String,
    /// Driver name and version.
    pub driver: String,
    /// Features and limits.
    pub caps: AdapterCaps,
    /// The driver's VRAM figures and their source, when the backend offers them.
    pub vram: Option<super::VramReading>,
    /// Where ordinary mapped staging buffers land (Vulkan): host RAM, or BAR
    /// (device-local memory that counts against VRAM).
    pub staging_memory: Option<super::host_memory::StagingPlacement>,
    /// `VK_EXT_external_memory_host` is offered: pins and staging slots can
    /// be imported host RAM.
    pub host_import: bool,
    /// The queue family streamed copies run on beside wgpu's queue (a
    /// transfer-only family: the copy engines), if any.
    pub copy_queue_family: Option<u32>,
    /// What the adapter offers of `VK_NV_cooperative_matrix2` (the SPIR-V
    /// GEMM's extension), if it lists it.
    pub cm2: Option<super::Cm2Caps>,
    /// Kernels would decode f16 words with `unpack2x16float` here
    /// (`GpuOptions::f16_unpack` and the adapter's `SHADER_F16_IN_F32`),
    /// else in integer arithmetic.
    pub f16_unpack: bool,
}

impl AdapterChoice {
    fn backends(&self) -> Result<wgpu::Backends, GpuError> {
        match self.backend.as_deref() {
            Some(name) => {
                let b = wgpu::Backends::from_comma_list(name);
                if b.is_empty() {
                    Err(GpuError::UnknownBackend(name.to_owned()))
                } else {
                    Ok(b)
                }
            }
            None => Ok(wgpu::Backends::from_env().unwrap_or(wgpu::Backends::all())),
        }
    }

    fn name_filter(&self) -> Option<String> {
        self.adapter.clone().map(|s| s.to_lowercase())
    }

    fn power(&self) -> wgpu::PowerPreference {
        match self.power.as_deref().map(str::to_lowercase).as_deref() {
            Some("low") => wgpu::PowerPreference::LowPower,
            Some("none") => wgpu::PowerPreference::None,
            _ => wgpu::PowerPreference::HighPerformance,
        }
    }

    /// Picks the adapter: the first whose name contains the filter, else the
    /// best by power preference (discrete > integrated > virtual > CPU for
    /// high performance).
    pub fn select(&self) -> Result<wgpu::Adapter, GpuError> {
        let backends = self.backends()?;
        let adapters = enumerate(backends);
        let filter = self.name_filter();
        let listing = || {
            adapters
                .iter()
                .map(|a| {
                    let i = a.get_info();
                    format!("{} ({})", i.name, i.backend.to_str())
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut candidates: Vec<&wgpu::Adapter> = adapters
            .iter()
            .filter(|a| {
                filter
                    .as_ref()
                    .is_none_or(|f| a.get_info().name.to_lowercase().contains(f))
            })
            .collect();
        let rank = |t: wgpu::DeviceType| match t {
            wgpu::DeviceType::DiscreteGpu => 0,
            wgpu::DeviceType::IntegratedGpu => 1,
            wgpu::DeviceType::VirtualGpu => 2,
            wgpu::DeviceType::Other => 3,
            wgpu::DeviceType::Cpu => 4,
        };
        match self.power() {
            wgpu::PowerPreference::LowPower => candidates.sort_by_key(|a| {
                let r = rank(a.get_info().device_type);
                if r == 1 { 0 } else { r + 1 }
            }),
            wgpu::PowerPreference::HighPerformance => {
                candidates.sort_by_key(|a| rank(a.get_info().device_type))
            }
            wgpu::PowerPreference::None => {}
        }
        candidates
            .first()
            .map(|a| (*a).clone())
            .ok_or_else(|| GpuError::NoAdapter {
                wanted: format!(
                    "backends {backends:?}{}",
                    filter
                        .map(|f| format!(" and name containing `{f}`"))
                        .unwrap_or_default()
                ),
                available: if adapters.is_empty() {
                    "none (is a Vulkan driver such as mesa-vulkan-drivers installed?)".into()
                } else {
                    listing()
                },
            })
    }
}

fn enumerate(backends: wgpu::Backends) -> Vec<wgpu::Adapter> {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backends;
    let instance = wgpu::Instance::new(desc);
    pollster::block_on(instance.enumerate_adapters(backends))
}

/// Lists every adapter on `choice`'s backends (`None`: `WGPU_BACKEND` or
/// all), with the copy queue its options would give each.
pub fn enumerate_adapters(choice: &AdapterChoice) -> Result<Vec<AdapterSummary>, GpuError> {
    Ok(enumerate(choice.backends()?)
        .iter()
        .map(|a| {
            let info = a.get_info();
            AdapterSummary {
                name: info.name.clone(),
                backend: info.backend.to_str().to_owned(),
                device_type: format!("{:?}", info.device_type),
                driver: format!("{} {}", info.driver, info.driver_info)
                    .trim()
                    .to_owned(),
                caps: adapter_caps(a),
                vram: super::read_vram(a),
                staging_memory: super::host_memory::mapped_staging_memory(a),
                host_import: super::device_open::adapter_supports_import(a),
                copy_queue_family: super::device_open::adapter_copy_queue(
                    a,
                    choice.options.copy_queue,
                )
                .map(|q| q.0),
                cm2: super::adapter_cm2(a),
                f16_unpack: choice.options.f16_unpack && super::grants_f16_unpack(a),
            }
        })
        .collect())
}
