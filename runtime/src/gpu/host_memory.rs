//! Buffers whose memory is guaranteed to be host RAM.
//!
//! wgpu places a `MAP_WRITE | COPY_SRC` buffer in the first memory type that
//! is host-visible, coherent *and device-local* if there is one: on a GPU
//! with resizable BAR (the H200) that is VRAM, so such a "staging" buffer
//! costs VRAM and CPU writes into it cross PCIe. Here we allocate page-aligned
//! anonymous memory ourselves and import it with `VK_EXT_external_memory_host`
//! as a `COPY_SRC` buffer: the CPU writes ordinary RAM and the GPU reads it by
//! DMA. The same import applied to a file's read-only map gives a zero-copy
//! path from the page cache ([`import_mapping`]).
//!
//! Everywhere else (GL, Metal, DX12, a Vulkan device without the extension)
//! [`import_anonymous`] answers [`ImportError::Unsupported`] and callers fall
//! back to an ordinary mapped buffer, flagged [`HostMemory::Mapped`].

use std::ptr::NonNull;
use std::sync::Arc;

use wgpu::WriteOnly;

/// Which kind of memory a staging buffer or pin lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HostMemory {
    /// Our own host RAM, imported with `VK_EXT_external_memory_host`.
    Imported,
    /// An ordinary `MAP_WRITE | COPY_SRC` wgpu buffer: host RAM or BAR
    /// (device-local) depending on the driver, see [`mapped_staging_memory`].
    Mapped,
}

impl std::fmt::Display for HostMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Imported => "imported host RAM",
            Self::Mapped => "mapped wgpu buffer",
        })
    }
}

/// Which memory to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HostMemoryChoice {
    /// Ordinary mapped wgpu buffers.
    Mapped,
    /// Imported host RAM where the device can import it, else mapped. The
    /// default: on the H200 it streamed files 35–41 GB/s against 28–29 for
    /// mapped (BAR) slots, and it takes no VRAM (BENCHMARKS.md).
    #[default]
    Host,
}

/// Why an import did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The backend or device cannot import host memory at all.
    #[error("host-memory import unsupported: {0}")]
    Unsupported(String),
    /// The device tried and the driver (or the OS) refused.
    #[error("importing {size} bytes of host memory for `{label}`: {step}: {message}")]
    Failed {
        /// The buffer.
        label: String,
        /// Bytes asked for.
        size: u64,
        /// The step that failed (e.g. `vkAllocateMemory`).
        step: &'static str,
        /// The driver's or OS's message.
        message: String,
    },
}

/// A `COPY_SRC` buffer over host memory this process owns (an anonymous map,
/// or a file's map kept alive by the buffer). The memory is released after
/// wgpu has destroyed the buffer (its last GPU use done), in that order:
/// Vulkan buffer, device memory, then the mapping.
#[derive(Debug)]
pub struct ImportedBuffer {
    buffer: wgpu::Buffer,
    ptr: NonNull<u8>,
    len: usize,
    writable: bool,
}

// SAFETY: `ptr` points into memory owned by the buffer's drop callback, which
// only runs once `buffer` (held here) and every GPU use of it are gone; the
// pointer is only written through `&mut self` and read through `&self`.
unsafe impl Send for ImportedBuffer {}
// SAFETY: see `Send`; shared access only reads.
unsafe impl Sync for ImportedBuffer {}

impl ImportedBuffer {
    /// The wgpu buffer (`COPY_SRC`).
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    /// Bytes (a multiple of the import alignment).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes (never, imports are at least one page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The host bytes, for the CPU to fill. `None` for a read-only file map.
    /// The caller must not write while a GPU copy from the range is pending.
    pub fn write_view(&mut self) -> Option<WriteOnly<'_, [u8]>> {
        if !self.writable {
            return None;
        }
        // SAFETY: `ptr..ptr+len` is a live, writable mapping we own (see the
        // `Send` impl), and `&mut self` makes this the only CPU access.
        Some(unsafe { WriteOnly::new(NonNull::slice_from_raw_parts(self.ptr, self.len)) })
    }

    /// The host bytes (ordinary cached RAM, readable).
    pub fn host_bytes(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is a live, readable mapping we own; writes
        // only happen through `&mut self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

/// Memory an import keeps alive until the buffer is destroyed.
type Keepalive = Box<dyn Send + Sync>;

/// The alignment the device needs for imported host pointers and sizes
/// (`minImportedHostPointerAlignment`), or why it cannot import.
pub fn import_alignment(device: &wgpu::Device) -> Result<u64, ImportError> {
    imp::alignment(device)
}

/// Allocates `size` bytes (rounded up to the import alignment) of page-aligned
/// anonymous host memory and imports it as a `COPY_SRC` buffer.
pub fn import_anonymous(
    device: &wgpu::Device,
    label: &str,
    size: u64,
) -> Result<ImportedBuffer, ImportError> {
    let _span = tracing::debug_span!("host_import", label, size).entered();
    let align = import_alignment(device)?;
    let len = round_up(size.max(1), align);
    let failed = |step, message: String| ImportError::Failed {
        label: label.to_owned(),
        size: len,
        step,
        message,
    };
    let total = usize::try_from(len + align).map_err(|_| failed("size", "too large".into()))?;
    let mut map = memmap2::MmapOptions::new()
        .len(total)
        .populate()
        .map_anon()
        .map_err(|e| failed("mmap", e.to_string()))?;
    let base = map.as_mut_ptr();
    let skip = (align - (base as u64 % align)) % align;
    // SAFETY: `skip < align` and the map holds `len + align` bytes.
    let ptr = unsafe { base.add(skip as usize) };
    let ptr = NonNull::new(ptr).ok_or_else(|| failed("mmap", "null mapping".into()))?;
    imp::import(device, label, ptr, len, Box::new(map), true)
}

/// Imports `len` bytes of `map` starting at `offset` (both multiples of the
/// import alignment; the range inside the map) without copying: the GPU reads
/// the file's page-cache pages by DMA. `map` is a file's map (read-only
/// [`memmap2::Mmap`], or a private copy-on-write [`memmap2::MmapMut`]) kept
/// alive by the buffer; the bytes are never written through it. Drivers may
/// refuse file-backed pages; the error carries their answer.
pub fn import_mapping<M>(
    device: &wgpu::Device,
    label: &str,
    map: Arc<M>,
    offset: u64,
    len: u64,
) -> Result<ImportedBuffer, ImportError>
where
    M: AsRef<[u8]> + Send + Sync + 'static,
{
    let _span = tracing::debug_span!("file_import", label, offset, len).entered();
    let align = import_alignment(device)?;
    let failed = |step, message: String| ImportError::Failed {
        label: label.to_owned(),
        size: len,
        step,
        message,
    };
    let bytes: &[u8] = (*map).as_ref();
    let base = bytes.as_ptr() as u64;
    let map_len = bytes.len();
    if len == 0
        || !offset.is_multiple_of(align)
        || !len.is_multiple_of(align)
        || !(base + offset).is_multiple_of(align)
        || offset.checked_add(len).is_none_or(|e| e > map_len as u64)
    {
        return Err(failed(
            "range",
            format!(
                "[{offset}, +{len}) of a {map_len}-byte map is empty, outside it or not aligned to {align}"
            ),
        ));
    }
    // SAFETY: checked above that `offset + len <= map_len`.
    let ptr = unsafe { bytes.as_ptr().add(offset as usize) };
    let ptr = NonNull::new(ptr.cast_mut()).ok_or_else(|| failed("mmap", "null map".into()))?;
    imp::import(device, label, ptr, len, Box::new(map), false)
}

/// Where an ordinary `MAP_WRITE | COPY_SRC` buffer lands, predicted from the
/// adapter's memory types the way wgpu's allocator picks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct StagingPlacement {
    /// The memory type is `DEVICE_LOCAL` (resizable BAR: counts against VRAM).
    pub device_local: bool,
    /// The adapter is a CPU (its "device-local" memory is host RAM anyway).
    pub cpu_adapter: bool,
    /// Vulkan memory type index.
    pub memory_type: u32,
    /// Size of that type's heap in bytes.
    pub heap_size: u64,
}

impl std::fmt::Display for StagingPlacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.device_local && !self.cpu_adapter {
            write!(
                f,
                "BAR (device-local, counts against VRAM; type {}, heap {} MiB)",
                self.memory_type,
                self.heap_size >> 20
            )
        } else {
            write!(
                f,
                "host RAM (type {}, heap {} MiB)",
                self.memory_type,
                self.heap_size >> 20
            )
        }
    }
}

/// Predicts where wgpu puts mapped staging buffers on `adapter` (Vulkan only).
pub fn mapped_staging_memory(adapter: &wgpu::Adapter) -> Option<StagingPlacement> {
    imp::staging_placement(adapter)
}

/// What [`request_device`] enabled beyond what wgpu's own `request_device`
/// would.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceExtras {
    /// `VK_EXT_external_memory_host` is enabled: host memory can be imported.
    pub host_import: bool,
    /// A queue for copies that run beside wgpu's queue (family, index):
    /// queue 0 of a transfer-only family (the copy engines) where the
    /// adapter has one. Timeline semaphores are enabled.
    /// [`CopyQueueMode::Family0`] takes queue 1 of wgpu's family instead.
    pub copy_queue: Option<(u32, u32)>,
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

fn round_up(n: u64, align: u64) -> u64 {
    n.div_ceil(align) * align
}

#[cfg(any(target_os = "linux", target_os = "windows", target_os = "android"))]
mod imp {
    use std::ffi::c_void;
    use std::ptr::NonNull;

    use ash::vk;
    use wgpu::hal::api::Vulkan;

    use super::{
        CopyQueueMode, DeviceExtras, ImportError, ImportedBuffer, Keepalive, StagingPlacement,
    };

    /// Flags wgpu-hal accepts in a memory type (others are never used).
    const KNOWN: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::from_raw(
        vk::MemoryPropertyFlags::DEVICE_LOCAL.as_raw()
            | vk::MemoryPropertyFlags::HOST_VISIBLE.as_raw()
            | vk::MemoryPropertyFlags::HOST_COHERENT.as_raw()
            | vk::MemoryPropertyFlags::HOST_CACHED.as_raw()
            | vk::MemoryPropertyFlags::LAZILY_ALLOCATED.as_raw(),
    );

    pub(super) fn staging_placement(adapter: &wgpu::Adapter) -> Option<StagingPlacement> {
        // SAFETY: read-only physical-device queries while `adapter` is alive.
        let hal = unsafe { adapter.as_hal::<Vulkan>() }?;
        let instance = hal.shared_instance().raw_instance();
        // SAFETY: the physical device belongs to this instance.
        let mem =
            unsafe { instance.get_physical_device_memory_properties(hal.raw_physical_device()) };
        let types = &mem.memory_types[..mem.memory_type_count as usize];
        let hv_hc = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        // gpu-allocator's order for CpuToGpu: HV|HC|DL first, then HV|HC.
        let find = |want: vk::MemoryPropertyFlags| {
            types
                .iter()
                .position(|t| KNOWN.contains(t.property_flags) && t.property_flags.contains(want))
        };
        let i = find(hv_hc | vk::MemoryPropertyFlags::DEVICE_LOCAL).or_else(|| find(hv_hc))?;
        let t = types[i];
        Some(StagingPlacement {
            device_local: t
                .property_flags
                .contains(vk::MemoryPropertyFlags::DEVICE_LOCAL),
            cpu_adapter: adapter.get_info().device_type == wgpu::DeviceType::Cpu,
            memory_type: i as u32,
            heap_size: mem.memory_heaps[t.heap_index as usize].size,
        })
    }

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
        let name = ash::ext::external_memory_host::NAME;
        let (open, extras) = {
            // SAFETY: the hal adapter opens a device for `adapter` (which stays
            // alive); the guard is dropped before wgpu takes the device.
            let hal = unsafe { adapter.as_hal::<Vulkan>() }?;
            let shared = hal.shared_instance();
            let v11 = shared.instance_api_version() >= vk::API_VERSION_1_1;
            let caps = hal.physical_device_capabilities();
            let host_import = v11 && caps.supports_extension(name);
            let copy_queue = copy_queue_of(&hal, mode);
            if !host_import && copy_queue.is_none() {
                return None;
            }
            let add = Box::new(move |args: wgpu::hal::vulkan::CreateDeviceCallbackArgs| {
                if host_import && !args.extensions.contains(&name) {
                    args.extensions.push(name);
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
            // SAFETY: the callback only adds an extension the physical device
            // supports and a queue its family has; features and limits are
            // the caller's, as wgpu's own `request_device` would pass them.
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
                        },
                    )
                }
                Err(e) => {
                    tracing::warn!(%e, host_import, ?copy_queue, "opening the Vulkan device through wgpu-hal failed");
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

    pub(super) fn alignment(device: &wgpu::Device) -> Result<u64, ImportError> {
        // SAFETY: only read-only queries on the hal device while `device` lives.
        let hal = unsafe { device.as_hal::<Vulkan>() }
            .ok_or_else(|| ImportError::Unsupported("not a Vulkan device".into()))?;
        if !hal
            .enabled_device_extensions()
            .contains(&ash::ext::external_memory_host::NAME)
        {
            return Err(ImportError::Unsupported(
                "VK_EXT_external_memory_host not enabled on this device".into(),
            ));
        }
        let shared = hal.shared_instance();
        if shared.instance_api_version() < vk::API_VERSION_1_1 {
            return Err(ImportError::Unsupported("Vulkan instance below 1.1".into()));
        }
        let mut host = vk::PhysicalDeviceExternalMemoryHostPropertiesEXT::default();
        let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut host);
        // SAFETY: the physical device belongs to the instance; the chained
        // struct belongs to an extension the device has enabled.
        unsafe {
            shared
                .raw_instance()
                .get_physical_device_properties2(hal.raw_physical_device(), &mut props)
        };
        Ok(host.min_imported_host_pointer_alignment.max(4096))
    }

    pub(super) fn import(
        device: &wgpu::Device,
        label: &str,
        ptr: NonNull<u8>,
        len: u64,
        keep: Keepalive,
        writable: bool,
    ) -> Result<ImportedBuffer, ImportError> {
        let failed = |step, r: vk::Result| ImportError::Failed {
            label: label.to_owned(),
            size: len,
            step,
            message: format!("{r} ({})", r.as_raw()),
        };
        let hal_buffer = {
            // SAFETY: the hal device is used only for creating and binding our
            // own objects, while `device` is alive; the guard is dropped before
            // wgpu takes the buffer.
            let hal = unsafe { device.as_hal::<Vulkan>() }
                .ok_or_else(|| ImportError::Unsupported("not a Vulkan device".into()))?;
            let raw = hal.raw_device().clone();
            let instance = hal.shared_instance().raw_instance();
            let pdev = hal.raw_physical_device();
            let ext = ash::ext::external_memory_host::Device::new(instance, &raw);
            let handle_type = vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT;
            let mut ptr_props = vk::MemoryHostPointerPropertiesEXT::default();
            // SAFETY: `ptr` is a live host allocation of at least `len` bytes,
            // aligned to minImportedHostPointerAlignment (checked by callers).
            unsafe {
                (ext.fp().get_memory_host_pointer_properties_ext)(
                    raw.handle(),
                    handle_type,
                    ptr.as_ptr().cast::<c_void>().cast_const(),
                    &mut ptr_props,
                )
            }
            .result()
            .map_err(|r| failed("vkGetMemoryHostPointerPropertiesEXT", r))?;
            let mut external =
                vk::ExternalMemoryBufferCreateInfo::default().handle_types(handle_type);
            let families = shared_families(device);
            let info = vk::BufferCreateInfo::default()
                .size(len)
                .usage(vk::BufferUsageFlags::TRANSFER_SRC)
                .push_next(&mut external);
            // Readable by the copy queue's family too.
            let info = match &families {
                Some(f) => info
                    .sharing_mode(vk::SharingMode::CONCURRENT)
                    .queue_family_indices(f),
                None => info.sharing_mode(vk::SharingMode::EXCLUSIVE),
            };
            // SAFETY: a valid create info on a live device.
            let buffer = unsafe { raw.create_buffer(&info, None) }
                .map_err(|r| failed("vkCreateBuffer", r))?;
            let destroy_buffer = |r| {
                // SAFETY: `buffer` was created above and is not bound or used.
                unsafe { raw.destroy_buffer(buffer, None) };
                r
            };
            // SAFETY: `buffer` is a live buffer of this device.
            let req = unsafe { raw.get_buffer_memory_requirements(buffer) };
            // SAFETY: the physical device belongs to this instance.
            let mem = unsafe { instance.get_physical_device_memory_properties(pdev) };
            let bits = req.memory_type_bits & ptr_props.memory_type_bits;
            let coherent = vk::MemoryPropertyFlags::HOST_COHERENT;
            let pick = |want: vk::MemoryPropertyFlags| {
                (0..mem.memory_type_count).find(|&i| {
                    bits & (1 << i) != 0
                        && mem.memory_types[i as usize].property_flags.contains(want)
                })
            };
            let Some(type_index) = pick(coherent) else {
                return Err(destroy_buffer(ImportError::Failed {
                    label: label.to_owned(),
                    size: len,
                    step: "memory type",
                    message: format!(
                        "no host-coherent type in buffer types {:#x} ∩ host-pointer types {:#x}",
                        req.memory_type_bits, ptr_props.memory_type_bits
                    ),
                }));
            };
            if req.size > len {
                return Err(destroy_buffer(ImportError::Failed {
                    label: label.to_owned(),
                    size: len,
                    step: "vkGetBufferMemoryRequirements",
                    message: format!("buffer needs {} bytes, import has {len}", req.size),
                }));
            }
            let mut import = vk::ImportMemoryHostPointerInfoEXT::default()
                .handle_type(handle_type)
                .host_pointer(ptr.as_ptr().cast::<c_void>());
            let alloc = vk::MemoryAllocateInfo::default()
                .allocation_size(len)
                .memory_type_index(type_index)
                .push_next(&mut import);
            // SAFETY: the imported range is live, aligned and stays alive
            // until the drop callback below frees this memory.
            let memory = unsafe { raw.allocate_memory(&alloc, None) }
                .map_err(|r| destroy_buffer(failed("vkAllocateMemory", r)))?;
            // SAFETY: both objects are live, unbound, of this device; offset 0.
            if let Err(r) = unsafe { raw.bind_buffer_memory(buffer, memory, 0) } {
                // SAFETY: `memory` is unused (the bind failed).
                unsafe { raw.free_memory(memory, None) };
                return Err(destroy_buffer(failed("vkBindBufferMemory", r)));
            }
            let cleanup = move || {
                // SAFETY: wgpu calls this once it has destroyed its buffer and
                // no GPU work uses it: destroy the Vulkan buffer, then free its
                // memory, then release the host mapping, in that order.
                unsafe {
                    raw.destroy_buffer(buffer, None);
                    raw.free_memory(memory, None);
                }
                drop(keep);
            };
            // SAFETY: `buffer` is bound to memory we own; wgpu-hal will not
            // destroy it and never maps it (imported buffers are not mappable).
            unsafe {
                wgpu::hal::vulkan::Buffer::from_raw_externally_owned(buffer, Box::new(cleanup))
            }
        };
        // SAFETY: `hal_buffer` was created on this device with TRANSFER_SRC
        // usage, size `len`, bound to memory that outlives it.
        let buffer = unsafe {
            device.create_buffer_from_hal::<Vulkan>(
                hal_buffer,
                &wgpu::BufferDescriptor {
                    label: Some(label),
                    size: len,
                    usage: wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: false,
                },
            )
        };
        tracing::debug!(label, len, writable, "host memory imported");
        Ok(ImportedBuffer {
            buffer,
            ptr,
            len: len as usize,
            writable,
        })
    }
}

#[cfg(not(any(target_os = "linux", target_os = "windows", target_os = "android")))]
mod imp {
    use std::ptr::NonNull;

    use super::{ImportError, ImportedBuffer, Keepalive, StagingPlacement};

    pub(super) fn staging_placement(_: &wgpu::Adapter) -> Option<StagingPlacement> {
        None
    }

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

    pub(super) fn alignment(_: &wgpu::Device) -> Result<u64, ImportError> {
        Err(ImportError::Unsupported(
            "no Vulkan on this platform".into(),
        ))
    }

    pub(super) fn import(
        _: &wgpu::Device,
        _: &str,
        _: NonNull<u8>,
        _: u64,
        _: Keepalive,
        _: bool,
    ) -> Result<ImportedBuffer, ImportError> {
        Err(ImportError::Unsupported(
            "no Vulkan on this platform".into(),
        ))
    }
}
