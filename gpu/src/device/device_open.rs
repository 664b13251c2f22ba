//! Opening the device: on Vulkan through wgpu-hal, with what wgpu does not
//! enable itself: `VK_EXT_external_memory_host` (host memory imported as
//! buffers, [`super::host_memory`]) and a copy queue beside wgpu's
//! ([`super::TransferQueue`]) and, where the caller asks for passthrough
//! shaders and cooperative matrices, `VK_NV_cooperative_matrix2`
//! ([`super::cm2`]); wgpu's own `request_device` elsewhere.

/// What [`request_device`] enabled beyond what wgpu's own `request_device`
/// would.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceExtras {
    /// `VK_EXT_external_memory_host` is enabled: host memory can be imported.
    pub host_import: bool,
    /// A queue for copies that run beside wgpu's queue (family, index):
    /// queue 0 of a transfer-only family (the copy engines) where the
    /// adapter has one. Timeline semaphores are enabled.
    /// [`CopyQueueMode::Family0`] takes queue 1 of wgpu's family instead.
    pub copy_queue: Option<(u32, u32)>,
    /// `VK_NV_cooperative_matrix2` is enabled with every feature of it the
    /// adapter lists that the SPIR-V GEMM uses (the descriptor asked for
    /// `PASSTHROUGH_SHADERS`, `EXPERIMENTAL_COOPERATIVE_MATRIX` and
    /// `SHADER_F16`, and the adapter lists the extension): what it offers.
    /// The kernels run only where nothing is missing
    /// ([`super::Cm2Caps::missing_features`]); enabling a partial set (Mesa
    /// 26's lavapipe) costs nothing and keeps this path tested there.
    pub cm2: Option<super::cm2::Cm2Caps>,
}

/// The copy queue (family, index) a device opened with [`request_device`]
/// on `adapter` gets, if any (see [`DeviceExtras::copy_queue`]).
pub fn adapter_copy_queue(adapter: &wgpu::Adapter, mode: CopyQueueMode) -> Option<(u32, u32)> {
    imp::adapter_copy_queue(adapter, mode)
}

/// Queue families that buffers must be shared between on `device` (wgpu's
/// and the copy queue's, when they differ): buffers the copy queue touches
/// are created `VK_SHARING_MODE_CONCURRENT` over them.
pub fn shared_families(device: &wgpu::Device) -> Option<[u32; 2]> {
    imp::shared_families(device)
}

/// Where the copy queue comes from (the caller's configuration; the CLI
/// reads it from `DYNVRAM_COPY_QUEUE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CopyQueueMode {
    /// Queue 0 of a transfer-only family where the adapter has one.
    #[default]
    Auto,
    /// No copy queue: copies on wgpu's queue.
    Off,
    /// A second queue of wgpu's own family (on the H200 its copies did not
    /// overlap the kernels).
    Family0,
    /// The copy-queue path on wgpu's own queue (tests the path on adapters
    /// with one queue).
    Shared,
}

impl std::str::FromStr for CopyQueueMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "" | "auto" => Ok(Self::Auto),
            "off" => Ok(Self::Off),
            "family0" => Ok(Self::Family0),
            "shared" => Ok(Self::Shared),
            other => Err(format!(
                "copy queue `{other}`: want auto, off, family0 or shared"
            )),
        }
    }
}

/// Opens a device like `adapter.request_device(desc)`; on Vulkan through
/// wgpu-hal, with `VK_EXT_external_memory_host` enabled where the adapter
/// offers it and a second queue in wgpu's queue family where there is one
/// (wgpu enables neither itself).
pub fn request_device(
    adapter: &wgpu::Adapter,
    desc: &wgpu::DeviceDescriptor<'_>,
    copy_queue: CopyQueueMode,
) -> Result<(wgpu::Device, wgpu::Queue, DeviceExtras), wgpu::RequestDeviceError> {
    if let Some(opened) = imp::open_vulkan(adapter, desc, copy_queue) {
        return Ok(opened);
    }
    let (device, queue) = pollster::block_on(adapter.request_device(desc))?;
    Ok((device, queue, DeviceExtras::default()))
}

/// Whether `adapter` offers `VK_EXT_external_memory_host` (a device opened
/// with [`request_device`] then imports host memory).
pub fn adapter_supports_import(adapter: &wgpu::Adapter) -> bool {
    imp::adapter_supports_import(adapter)
}

#[cfg(any(target_os = "linux", target_os = "windows", target_os = "android"))]
mod imp {
    use ash::vk;
    use wgpu::hal::api::Vulkan;

    use super::super::cm2::{Cm2Features, query as query_cm2};
    use super::{CopyQueueMode, DeviceExtras};

    pub(super) fn adapter_supports_import(adapter: &wgpu::Adapter) -> bool {
        // SAFETY: a read-only capability query while `adapter` is alive.
        let Some(hal) = (unsafe { adapter.as_hal::<Vulkan>() }) else {
            return false;
        };
        hal.shared_instance().instance_api_version() >= vk::API_VERSION_1_1
            && hal
                .physical_device_capabilities()
                .supports_extension(ash::ext::external_memory_host::NAME)
    }

    /// Priorities of wgpu's queue and a second one in its family.
    static TWO_QUEUES: [f32; 2] = [1.0, 1.0];
    /// Priority of a copy queue of its own family.
    static ONE_QUEUE: [f32; 1] = [1.0];

    /// Devices whose copy queue is of another family than wgpu's: the
    /// `VkDevice` and the two families.
    static SHARED: std::sync::Mutex<Vec<(vk::Device, [u32; 2])>> =
        std::sync::Mutex::new(Vec::new());

    fn raw_device(device: &wgpu::Device) -> Option<vk::Device> {
        // SAFETY: only the handle is read.
        unsafe { device.as_hal::<Vulkan>() }.map(|h| h.raw_device().handle())
    }

    pub(super) fn shared_families(device: &wgpu::Device) -> Option<[u32; 2]> {
        let raw = raw_device(device)?;
        let shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        shared.iter().find(|(d, _)| *d == raw).map(|(_, f)| *f)
    }

    /// The copy queue a device opened on `hal` gets: `pick_copy_queue` over
    /// its queue families, where Vulkan 1.2 is core on both the instance and
    /// the device (timeline semaphores, and the entry points the copy queue
    /// calls; wgpu-hal enables the feature there).
    fn copy_queue_of(hal: &wgpu::hal::vulkan::Adapter, mode: CopyQueueMode) -> Option<(u32, u32)> {
        let shared = hal.shared_instance();
        let timeline = shared.instance_api_version() >= vk::API_VERSION_1_2
            && hal.physical_device_capabilities().properties().api_version >= vk::API_VERSION_1_2;
        // SAFETY: a read-only query on this instance's physical device.
        let families = unsafe {
            shared
                .raw_instance()
                .get_physical_device_queue_family_properties(hal.raw_physical_device())
        };
        pick_copy_queue(&families, mode).filter(|_| timeline)
    }

    pub(super) fn adapter_copy_queue(
        adapter: &wgpu::Adapter,
        mode: CopyQueueMode,
    ) -> Option<(u32, u32)> {
        // SAFETY: read-only queries while `adapter` is alive.
        let hal = unsafe { adapter.as_hal::<Vulkan>() }?;
        copy_queue_of(&hal, mode)
    }

    /// The copy queue's (family, index) from `families`: queue 0 of a
    /// transfer-only family. A second queue of family 0 (wgpu's) only with
    /// [`CopyQueueMode::Family0`]: on the H200 its copies did not overlap
    /// the kernels and were slower than wgpu's queue (BENCHMARKS.md).
    fn pick_copy_queue(
        families: &[vk::QueueFamilyProperties],
        mode: CopyQueueMode,
    ) -> Option<(u32, u32)> {
        if mode == CopyQueueMode::Off {
            return None;
        }
        if mode == CopyQueueMode::Family0 {
            return families
                .first()
                .filter(|f| f.queue_count >= 2)
                .map(|_| (0, 1));
        }
        let no_work = vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE;
        families
            .iter()
            .position(|f| {
                f.queue_flags.contains(vk::QueueFlags::TRANSFER)
                    && !f.queue_flags.intersects(no_work)
                    && f.queue_count >= 1
            })
            .filter(|&t| t != 0)
            .map(|t| (t as u32, 0))
    }

    /// Opens the device through wgpu-hal with what [`DeviceExtras`] lists
    /// added where the adapter offers it, or `None` (not Vulkan, nothing to
    /// add, or the hal open failed: logged).
    pub(super) fn open_vulkan(
        adapter: &wgpu::Adapter,
        desc: &wgpu::DeviceDescriptor<'_>,
        mode: CopyQueueMode,
    ) -> Option<(wgpu::Device, wgpu::Queue, DeviceExtras)> {
        let cm2 = desc.required_features.contains(
            wgpu::Features::PASSTHROUGH_SHADERS
                | wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
                | wgpu::Features::SHADER_F16,
        );
        // A driver refusing cooperative matrices 2 keeps the rest.
        open_with(adapter, desc, mode, cm2)
            .or_else(|| cm2.then(|| open_with(adapter, desc, mode, false)).flatten())
    }

    /// [`open_vulkan`], with `VK_NV_cooperative_matrix2` where `cm2_wanted`
    /// and the adapter lists it.
    fn open_with(
        adapter: &wgpu::Adapter,
        desc: &wgpu::DeviceDescriptor<'_>,
        mode: CopyQueueMode,
        cm2_wanted: bool,
    ) -> Option<(wgpu::Device, wgpu::Queue, DeviceExtras)> {
        let name = ash::ext::external_memory_host::NAME;
        // Outlives the callback: the device's create info points at it.
        let mut cm2_features;
        let (open, extras) = {
            // SAFETY: the hal adapter opens a device for `adapter` (which stays
            // alive); the guard is dropped before wgpu takes the device.
            let hal = unsafe { adapter.as_hal::<Vulkan>() }?;
            let shared = hal.shared_instance();
            let v11 = shared.instance_api_version() >= vk::API_VERSION_1_1;
            let caps = hal.physical_device_capabilities();
            let host_import = v11 && caps.supports_extension(name);
            let copy_queue = copy_queue_of(&hal, mode);
            let cm2 = cm2_wanted.then(|| query_cm2(&hal)).flatten();
            if !host_import && copy_queue.is_none() && cm2.is_none() {
                return None;
            }
            let cm2_chain = match &cm2 {
                Some(c) => {
                    cm2_features = Cm2Features::enabling(c);
                    Some(&mut cm2_features)
                }
                None => None,
            };
            // Typed, so the closure is generic over the create info's
            // lifetime and may point it at `cm2_features`.
            let add: Box<wgpu::hal::vulkan::CreateDeviceCallback<'_>> = Box::new(move |args| {
                if host_import && !args.extensions.contains(&name) {
                    args.extensions.push(name);
                }
                if let Some(features) = cm2_chain {
                    let cm2_name = Cm2Features::extension();
                    if !args.extensions.contains(&cm2_name) {
                        args.extensions.push(cm2_name);
                    }
                    let info = *args.create_info;
                    *args.create_info = info.push_next(features);
                }
                match copy_queue {
                    Some((0, _)) => {
                        if let Some(q) = args.queue_create_infos.first_mut() {
                            *q = vk::DeviceQueueCreateInfo::default()
                                .queue_family_index(q.queue_family_index)
                                .queue_priorities(&TWO_QUEUES);
                        }
                    }
                    Some((family, _)) => args.queue_create_infos.push(
                        vk::DeviceQueueCreateInfo::default()
                            .queue_family_index(family)
                            .queue_priorities(&ONE_QUEUE),
                    ),
                    None => {}
                }
            });
            // SAFETY: the callback only adds extensions the physical device
            // supports, a queue its family has and the cooperative-matrix-2
            // features it lists (their struct outlives the call); features
            // and limits are the caller's, as wgpu's own `request_device`
            // would pass them.
            let opened = unsafe {
                hal.open_with_callback(
                    desc.required_features,
                    &desc.required_limits,
                    &desc.memory_hints,
                    Some(add),
                )
            };
            match opened {
                Ok(open) => {
                    let wgpu_family = open.device.queue_family_index();
                    let raw = open.device.raw_device().handle();
                    // A handle of a device dropped earlier can come back.
                    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
                    shared.retain(|(d, _)| *d != raw);
                    if let Some((family, _)) = copy_queue.filter(|(f, _)| *f != wgpu_family) {
                        shared.push((raw, [wgpu_family, family]));
                    }
                    drop(shared);
                    (
                        open,
                        DeviceExtras {
                            host_import,
                            copy_queue,
                            cm2,
                        },
                    )
                }
                Err(e) => {
                    tracing::warn!(%e, host_import, ?copy_queue, cm2 = cm2.is_some(), "opening the Vulkan device through wgpu-hal failed");
                    return None;
                }
            }
        };
        // SAFETY: `open` was created from this adapter's hal adapter with the
        // descriptor's features and limits.
        match unsafe { adapter.create_device_from_hal(open, desc) } {
            Ok((device, queue)) => Some((device, queue, extras)),
            Err(e) => {
                tracing::warn!(%e, "wrapping the hal device failed");
                None
            }
        }
    }
}

#[cfg(not(any(target_os = "linux", target_os = "windows", target_os = "android")))]
mod imp {
    pub(super) fn adapter_supports_import(_: &wgpu::Adapter) -> bool {
        false
    }

    pub(super) fn open_vulkan(
        _: &wgpu::Adapter,
        _: &wgpu::DeviceDescriptor<'_>,
        _: super::CopyQueueMode,
    ) -> Option<(wgpu::Device, wgpu::Queue, super::DeviceExtras)> {
        None
    }

    pub(super) fn shared_families(_: &wgpu::Device) -> Option<[u32; 2]> {
        None
    }

    pub(super) fn adapter_copy_queue(
        _: &wgpu::Adapter,
        _: super::CopyQueueMode,
    ) -> Option<(u32, u32)> {
        None
    }
}
