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

use dynvram_loader::WriteOnlyBytes;

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
    pub fn write_view(&mut self) -> Option<WriteOnlyBytes<'_>> {
        if !self.writable {
            return None;
        }
        // SAFETY: `ptr..ptr+len` is a live, writable mapping we own (see the
        // `Send` impl), and `&mut self` makes this the only CPU access.
        Some(unsafe { WriteOnlyBytes::new(NonNull::slice_from_raw_parts(self.ptr, self.len)) })
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
    let (map, ptr, len) = anonymous(label, size, align, true)?;
    imp::import(device, label, ptr, len, Box::new(map), true)
}

/// [`import_anonymous`] for memory written once before the GPU reads it (a
/// registered pin): `fill` writes all `size` bytes first, then the memory
/// is imported. The pages are not populated up front but faulted in by the
/// writes (in parallel where `fill` writes from several threads, on huge
/// pages where the kernel gives them), so no page is zeroed and then
/// overwritten: populating a fresh map took 0.3–2 s a GiB against 64 ms for
/// the copy on a 2-core machine, and the pins of a pass's first step ran
/// at 1.5 GB/s on the H100. `Err(Ok(_))` is the import's refusal (the
/// caller falls back), `Err(Err(_))` the fill's error.
pub fn import_anonymous_filled<E>(
    device: &wgpu::Device,
    label: &str,
    size: u64,
    fill: impl FnOnce(WriteOnlyBytes<'_>) -> Result<(), E>,
) -> Result<ImportedBuffer, Result<ImportError, E>> {
    let _span = tracing::debug_span!("host_import_filled", label, size).entered();
    let align = import_alignment(device).map_err(Ok)?;
    let (map, ptr, len) = anonymous(label, size, align, false).map_err(Ok)?;
    // SAFETY: `ptr..ptr+len` lies in the map, which nothing else references
    // until the import below takes it.
    let bytes = unsafe { WriteOnlyBytes::new(NonNull::slice_from_raw_parts(ptr, len as usize)) };
    fill(bytes).map_err(Err)?;
    imp::import(device, label, ptr, len, Box::new(map), true).map_err(Ok)
}

/// An anonymous map holding `size` bytes rounded up to `align` at an
/// `align`ed address: the map, that address and the rounded length.
/// `populate` faults every page in now (zero-filled); else they are left
/// to the first writes, on huge pages where the kernel gives them (fewer
/// faults and page-table entries; only advice).
fn anonymous(
    label: &str,
    size: u64,
    align: u64,
    populate: bool,
) -> Result<(memmap2::MmapMut, NonNull<u8>, u64), ImportError> {
    let len = round_up(size.max(1), align);
    let failed = |step, message: String| ImportError::Failed {
        label: label.to_owned(),
        size: len,
        step,
        message,
    };
    let total = usize::try_from(len + align).map_err(|_| failed("size", "too large".into()))?;
    let mut options = memmap2::MmapOptions::new();
    options.len(total);
    if populate {
        options.populate();
    }
    let mut map = options
        .map_anon()
        .map_err(|e| failed("mmap", e.to_string()))?;
    #[cfg(target_os = "linux")]
    if !populate {
        let _ = map.advise(memmap2::Advice::HugePage);
    }
    let base = map.as_mut_ptr();
    let skip = (align - (base as u64 % align)) % align;
    // SAFETY: `skip < align` and the map holds `len + align` bytes.
    let ptr = unsafe { base.add(skip as usize) };
    let ptr = NonNull::new(ptr).ok_or_else(|| failed("mmap", "null mapping".into()))?;
    Ok((map, ptr, len))
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

fn round_up(n: u64, align: u64) -> u64 {
    n.div_ceil(align) * align
}

#[cfg(any(target_os = "linux", target_os = "windows", target_os = "android"))]
mod imp {
    use std::ffi::c_void;
    use std::ptr::NonNull;

    use ash::vk;
    use wgpu::hal::api::Vulkan;

    use super::{ImportError, ImportedBuffer, Keepalive, StagingPlacement};
    use crate::device::device_open::shared_families;

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
