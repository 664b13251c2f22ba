//! Where the VRAM capacity and the driver's own usage figure come from
//! (docs/behaviour.md, Budget), through wgpu-hal: Vulkan `VK_EXT_memory_budget` (else the
//! largest device-local heap), DX12 `QueryVideoMemoryInfo` (local segment) and
//! Metal's recommended working-set size. GL reports nothing and falls back to
//! an explicit `--vram-budget` or the adapter's buffer limit.

use serde::Serialize;

/// One reading of the driver's VRAM figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VramReading {
    /// Bytes the driver says we may use (budget) or the heap size.
    pub capacity: u64,
    /// Bytes in use on that heap by every process, when the driver says.
    pub usage: Option<u64>,
    /// Where the figures came from.
    pub source: VramSource,
}

/// The source of a [`VramReading`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VramSource {
    /// `VK_EXT_memory_budget`: heap budget and heap usage of the device-local heaps.
    VulkanMemoryBudget,
    /// The largest `DEVICE_LOCAL` Vulkan heap (no usage figure).
    VulkanLargestHeap,
    /// DX12 `IDXGIAdapter3::QueryVideoMemoryInfo`, local segment group:
    /// the OS's budget for this process and its current usage.
    Dx12VideoMemoryInfo,
    /// Metal `recommendedMaxWorkingSetSize`, with `currentAllocatedSize`
    /// as usage (this process only: Metal reports no other).
    MetalWorkingSet,
}

impl From<VramSource> for dynvram_memory::CapacitySource {
    fn from(s: VramSource) -> Self {
        match s {
            VramSource::VulkanMemoryBudget => Self::VulkanMemoryBudget,
            VramSource::VulkanLargestHeap => Self::LargestDeviceLocalHeap,
            VramSource::Dx12VideoMemoryInfo => Self::Dx12VideoMemoryInfo,
            VramSource::MetalWorkingSet => Self::MetalWorkingSet,
        }
    }
}

impl std::fmt::Display for VramSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::VulkanMemoryBudget => "VK_EXT_memory_budget",
            Self::VulkanLargestHeap => "largest Vulkan device-local heap",
            Self::Dx12VideoMemoryInfo => "DX12 QueryVideoMemoryInfo",
            Self::MetalWorkingSet => "Metal recommendedMaxWorkingSetSize",
        })
    }
}

/// Reads the driver's VRAM figures for an adapter, if its backend offers any.
pub fn read_vram(adapter: &wgpu::Adapter) -> Option<VramReading> {
    #[cfg(any(target_os = "linux", target_os = "windows", target_os = "android"))]
    if adapter.get_info().backend == wgpu::Backend::Vulkan {
        return vulkan::read(adapter);
    }
    #[cfg(windows)]
    if adapter.get_info().backend == wgpu::Backend::Dx12 {
        return dx12::read(adapter);
    }
    #[cfg(target_vendor = "apple")]
    if adapter.get_info().backend == wgpu::Backend::Metal {
        return metal::read(adapter);
    }
    let _ = adapter;
    None
}

#[cfg(windows)]
mod dx12 {
    use super::{VramReading, VramSource};
    use windows::Win32::Graphics::Dxgi::DXGI_MEMORY_SEGMENT_GROUP_LOCAL;

    pub(super) fn read(adapter: &wgpu::Adapter) -> Option<VramReading> {
        // SAFETY: the hal adapter is only used for a read-only DXGI query
        // while `adapter` is alive.
        let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Dx12>() }?;
        // The local segment is VRAM on discrete GPUs and the shared pool on
        // integrated ones; its budget already leaves room for other processes.
        let info = hal
            .raw_adapter()
            .query_video_memory_info(DXGI_MEMORY_SEGMENT_GROUP_LOCAL)
            .ok()?;
        (info.Budget > 0).then_some(VramReading {
            capacity: info.Budget,
            usage: Some(info.CurrentUsage),
            source: VramSource::Dx12VideoMemoryInfo,
        })
    }
}

#[cfg(target_vendor = "apple")]
mod metal {
    use super::{VramReading, VramSource};
    use objc2_metal::MTLDevice;

    pub(super) fn read(adapter: &wgpu::Adapter) -> Option<VramReading> {
        // SAFETY: the hal adapter is only used for read-only device queries
        // while `adapter` is alive.
        let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Metal>() }?;
        let device = hal.raw_device();
        let capacity = device.recommendedMaxWorkingSetSize();
        (capacity > 0).then_some(VramReading {
            capacity,
            usage: Some(device.currentAllocatedSize() as u64),
            source: VramSource::MetalWorkingSet,
        })
    }
}

#[cfg(any(target_os = "linux", target_os = "windows", target_os = "android"))]
mod vulkan {
    use super::{VramReading, VramSource};
    use ash::vk;

    pub(super) fn read(adapter: &wgpu::Adapter) -> Option<VramReading> {
        // SAFETY: the hal adapter is only used for read-only physical-device
        // queries while `adapter` (and so the instance) is alive.
        let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() }?;
        let shared = hal.shared_instance();
        let instance = shared.raw_instance();
        let pdev = hal.raw_physical_device();
        let has_budget = shared.instance_api_version() >= vk::API_VERSION_1_1
            && hal
                .physical_device_capabilities()
                .supports_extension(ash::ext::memory_budget::NAME);
        let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
        let mut props2 = vk::PhysicalDeviceMemoryProperties2::default();
        if has_budget {
            props2 = props2.push_next(&mut budget);
        }
        // SAFETY: `pdev` belongs to `instance`; the output structs are valid and
        // the budget struct is chained only when the extension is supported.
        unsafe { instance.get_physical_device_memory_properties2(pdev, &mut props2) };
        let mem = props2.memory_properties;
        let heaps = &mem.memory_heaps[..mem.memory_heap_count as usize];
        let local: Vec<usize> = (0..heaps.len())
            .filter(|&i| heaps[i].flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
            .collect();
        // The heap we allocate weights from: the largest device-local one.
        let best = *local.iter().max_by_key(|&&i| heaps[i].size)?;
        if has_budget && budget.heap_budget[best] > 0 {
            Some(VramReading {
                capacity: budget.heap_budget[best],
                usage: Some(budget.heap_usage[best]),
                source: VramSource::VulkanMemoryBudget,
            })
        } else {
            Some(VramReading {
                capacity: heaps[best].size,
                usage: None,
                source: VramSource::VulkanLargestHeap,
            })
        }
    }
}

/// The driver's VRAM figures as the budget's `measured` term polls them
/// (only where the driver reports usage: `VK_EXT_memory_budget`).
#[derive(Debug)]
pub struct DriverPoll {
    adapter: wgpu::Adapter,
}

impl DriverPoll {
    /// A poller for `adapter`, if its driver reports usage.
    pub fn new(adapter: &wgpu::Adapter) -> Option<Self> {
        read_vram(adapter)?.usage?;
        Some(Self {
            adapter: adapter.clone(),
        })
    }
}

impl dynvram_memory::DriverMemory for DriverPoll {
    fn poll(&mut self) -> Option<dynvram_memory::DriverReading> {
        let r = read_vram(&self.adapter)?;
        Some(dynvram_memory::DriverReading {
            budget: r.capacity,
            usage: r.usage?,
        })
    }
}
