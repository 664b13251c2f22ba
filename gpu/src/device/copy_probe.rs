//! Host → VRAM copies outside wgpu, to find what reaches the link's rate:
//! part of `dynvram bench upload`.
//!
//! The passes copy registered pins (imported host RAM) on one transfer
//! queue; on an H100 that ran at 33.7 GB/s where PyTorch's pinned `copy_`
//! reached 55.2 on the same machine (BENCHMARKS.md, session 28). This probe
//! opens a Vulkan device of its own on the same GPU, with every queue of
//! the transfer-only family, and times one GiB into VRAM from each kind of
//! host memory the device offers (imported anonymous memory in each memory
//! type the import allows, and the driver's own host-visible types), on one
//! transfer queue, split over two and over all of them, and on a universal
//! queue.

use std::time::Instant;

use ash::vk;

use dynvram_loader::bench::Figure;

/// One source of host memory: its name and buffer.
struct Source {
    name: String,
    buffer: vk::Buffer,
}

/// The probe's device and what it made, destroyed on drop.
struct Probe {
    _entry: ash::Entry,
    instance: ash::Instance,
    device: ash::Device,
    mem: vk::PhysicalDeviceMemoryProperties,
    /// `VK_EXT_external_memory_host` is enabled (imported sources).
    host_import: bool,
    /// (family, queues): the universal one, then the transfer-only one
    /// where there is one.
    families: Vec<(u32, Vec<vk::Queue>)>,
    pools: Vec<vk::CommandPool>,
    buffers: Vec<(vk::Buffer, vk::DeviceMemory)>,
    /// Anonymous maps imported (kept until the device is gone).
    maps: Vec<memmap2::MmapMut>,
}

impl Drop for Probe {
    fn drop(&mut self) {
        // SAFETY: everything below was made on this device and instance,
        // which wait idle before anything is destroyed.
        unsafe {
            let _ = self.device.device_wait_idle();
            for &p in &self.pools {
                self.device.destroy_command_pool(p, None);
            }
            for &(b, m) in &self.buffers {
                self.device.destroy_buffer(b, None);
                self.device.free_memory(m, None);
            }
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}

type R<T> = Result<T, String>;

fn vkr(what: &'static str) -> impl Fn(vk::Result) -> String {
    move |r| format!("{what}: {r}")
}

/// Runs the probe on the first physical device named `gpu_name`; `bytes`
/// per copy, best of `reps`. Errors are the probe's (a note, not a failure
/// of the bench).
pub fn host_copies(gpu_name: &str, bytes: u64, reps: usize) -> R<Vec<Figure>> {
    // SAFETY: loading the system's Vulkan loader, as wgpu does.
    let entry = unsafe { ash::Entry::load() }.map_err(|e| format!("loading Vulkan: {e}"))?;
    let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_2);
    // SAFETY: a valid create info.
    let instance = unsafe {
        entry.create_instance(
            &vk::InstanceCreateInfo::default().application_info(&app),
            None,
        )
    }
    .map_err(vkr("vkCreateInstance"))?;
    let mut p = open(entry, instance, gpu_name)?;
    let mut figures = Vec::new();
    // VRAM the host cannot see where there is such (not the BAR window).
    let (dl, hv) = (
        vk::MemoryPropertyFlags::DEVICE_LOCAL,
        vk::MemoryPropertyFlags::HOST_VISIBLE,
    );
    let usage = vk::BufferUsageFlags::TRANSFER_DST;
    let dst = match p.buffer(bytes, usage, |f| f.contains(dl) && !f.contains(hv), None) {
        Ok(b) => b,
        Err(_) => p.buffer(bytes, usage, |f| f.contains(dl), None)?,
    };
    let mut ways: Vec<(String, usize, usize)> = vec![("1 universal queue".into(), 0, 1)];
    if let Some((_, q)) = p.families.get(1) {
        ways.push(("1 transfer queue".into(), 1, 1));
        for n in [2, q.len()] {
            if n >= 2 && n <= q.len() && !ways.iter().any(|w| w.1 == 1 && w.2 == n) {
                ways.push((format!("{n} transfer queues"), 1, n));
            }
        }
    }
    for src in p.sources(bytes)? {
        for (way, family, queues) in &ways {
            match p.time_copy(&src, dst, bytes, *family, *queues, reps) {
                Ok(seconds) => figures.push(Figure {
                    name: format!("{} → VRAM, {way}", src.name),
                    bytes,
                    seconds,
                }),
                Err(e) => tracing::warn!(source = %src.name, %way, %e, "copy probe"),
            }
        }
    }
    Ok(figures)
}

fn open(entry: ash::Entry, instance: ash::Instance, gpu_name: &str) -> R<Probe> {
    let fail = |instance: &ash::Instance, e: String| {
        // SAFETY: nothing else was made on the instance.
        unsafe { instance.destroy_instance(None) };
        e
    };
    // SAFETY: read-only queries on a live instance.
    let pdevs = unsafe { instance.enumerate_physical_devices() }
        .map_err(|r| fail(&instance, vkr("vkEnumeratePhysicalDevices")(r)))?;
    let named = pdevs.iter().copied().find(|&pd| {
        // SAFETY: as above.
        let props = unsafe { instance.get_physical_device_properties(pd) };
        props
            .device_name_as_c_str()
            .is_ok_and(|n| n.to_string_lossy() == gpu_name)
    });
    let Some(pdev) = named else {
        return Err(fail(
            &instance,
            format!("no Vulkan device named {gpu_name}"),
        ));
    };
    // SAFETY: as above.
    let (qf, mem, exts) = unsafe {
        (
            instance.get_physical_device_queue_family_properties(pdev),
            instance.get_physical_device_memory_properties(pdev),
            instance
                .enumerate_device_extension_properties(pdev)
                .unwrap_or_default(),
        )
    };
    let transfer = qf.iter().position(|f| {
        f.queue_flags.contains(vk::QueueFlags::TRANSFER)
            && !f
                .queue_flags
                .intersects(vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE)
    });
    let universal = qf
        .iter()
        .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE));
    let Some(universal) = universal else {
        return Err(fail(&instance, "no compute queue family".into()));
    };
    let mut families = vec![(universal as u32, 1)];
    if let Some(t) = transfer {
        families.push((t as u32, qf[t].queue_count.min(8)));
    }
    let priorities = [1.0f32; 8];
    let infos: Vec<vk::DeviceQueueCreateInfo> = families
        .iter()
        .map(|&(f, n)| {
            vk::DeviceQueueCreateInfo::default()
                .queue_family_index(f)
                .queue_priorities(&priorities[..n as usize])
        })
        .collect();
    let host = ash::ext::external_memory_host::NAME;
    let has_host = exts
        .iter()
        .any(|e| e.extension_name_as_c_str().is_ok_and(|c| c == host));
    let names = [host.as_ptr()];
    let info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&infos)
        .enabled_extension_names(if has_host { &names[..] } else { &[] });
    // SAFETY: a valid create info for this physical device.
    let device = unsafe { instance.create_device(pdev, &info, None) }
        .map_err(|r| fail(&instance, vkr("vkCreateDevice")(r)))?;
    let mut p = Probe {
        _entry: entry,
        instance,
        device,
        mem,
        host_import: has_host,
        families: Vec::new(),
        pools: Vec::new(),
        buffers: Vec::new(),
        maps: Vec::new(),
    };
    for (family, count) in families {
        // SAFETY: queues the device was created with.
        let queues = (0..count)
            .map(|i| unsafe { p.device.get_device_queue(family, i) })
            .collect();
        p.families.push((family, queues));
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(family)
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: a valid create info.
        let pool = unsafe { p.device.create_command_pool(&info, None) }
            .map_err(vkr("vkCreateCommandPool"))?;
        p.pools.push(pool);
    }
    if !has_host {
        tracing::info!("copy probe: no VK_EXT_external_memory_host, driver memory only");
    }
    Ok(p)
}

impl Probe {
    /// A buffer of `bytes` in the first memory type `want` accepts (or
    /// type `only`), concurrent over both families.
    fn buffer(
        &mut self,
        bytes: u64,
        usage: vk::BufferUsageFlags,
        want: impl Fn(vk::MemoryPropertyFlags) -> bool,
        only: Option<u32>,
    ) -> R<vk::Buffer> {
        let families: Vec<u32> = self.families.iter().map(|f| f.0).collect();
        let info = sharing(
            vk::BufferCreateInfo::default().size(bytes).usage(usage),
            &families,
        );
        let d = &self.device;
        // SAFETY: valid infos on a live device; the buffer and memory are
        // kept in `self.buffers` and destroyed on drop.
        unsafe {
            let b = d
                .create_buffer(&info, None)
                .map_err(vkr("vkCreateBuffer"))?;
            let req = d.get_buffer_memory_requirements(b);
            let types = &self.mem.memory_types[..self.mem.memory_type_count as usize];
            let Some(t) = (0..types.len() as u32).find(|&i| {
                req.memory_type_bits & (1 << i) != 0
                    && only.is_none_or(|o| o == i)
                    && want(types[i as usize].property_flags)
            }) else {
                d.destroy_buffer(b, None);
                return Err("no memory type".into());
            };
            let alloc = vk::MemoryAllocateInfo::default()
                .allocation_size(req.size)
                .memory_type_index(t);
            let m = match d.allocate_memory(&alloc, None) {
                Ok(m) => m,
                Err(r) => {
                    d.destroy_buffer(b, None);
                    return Err(vkr("vkAllocateMemory")(r));
                }
            };
            self.buffers.push((b, m));
            d.bind_buffer_memory(b, m, 0)
                .map_err(vkr("vkBindBufferMemory"))?;
            Ok(b)
        }
    }

    /// The host-memory sources: the driver's host-visible types that are not
    /// device-local (filled through a map), then, where the device imports,
    /// anonymous memory on huge pages imported in each type the import
    /// allows.
    fn sources(&mut self, bytes: u64) -> R<Vec<Source>> {
        let mut out = Vec::new();
        let types: Vec<vk::MemoryPropertyFlags> = self.mem.memory_types
            [..self.mem.memory_type_count as usize]
            .iter()
            .map(|t| t.property_flags)
            .collect();
        let hv = vk::MemoryPropertyFlags::HOST_VISIBLE;
        let dl = vk::MemoryPropertyFlags::DEVICE_LOCAL;
        for (i, f) in types.iter().enumerate() {
            if !f.contains(hv) || f.contains(dl) {
                continue;
            }
            let Ok(b) = self.buffer(
                bytes,
                vk::BufferUsageFlags::TRANSFER_SRC,
                |_| true,
                Some(i as u32),
            ) else {
                continue;
            };
            let &(_, memory) = self.buffers.last().expect("just made");
            // SAFETY: host-visible memory of `bytes`, not in use.
            unsafe {
                let ptr = self
                    .device
                    .map_memory(memory, 0, bytes, vk::MemoryMapFlags::empty())
                    .map_err(vkr("vkMapMemory"))?;
                std::ptr::write_bytes(ptr.cast::<u8>(), 0x5a, bytes as usize);
                self.device.unmap_memory(memory);
            }
            out.push(Source {
                name: format!("driver host memory (type {i}: {f:?})"),
                buffer: b,
            });
        }
        if self.host_import {
            out.extend(self.imported(bytes, &types)?);
        }
        Ok(out)
    }

    /// Anonymous memory (huge pages advised, written) imported once per
    /// memory type the host pointer allows.
    fn imported(&mut self, bytes: u64, types: &[vk::MemoryPropertyFlags]) -> R<Vec<Source>> {
        let ext = ash::ext::external_memory_host::Device::new(&self.instance, &self.device);
        let align = 2 << 20;
        let mut out = Vec::new();
        let mut map = memmap2::MmapOptions::new()
            .len((bytes + align) as usize)
            .map_anon()
            .map_err(|e| format!("mmap: {e}"))?;
        #[cfg(target_os = "linux")]
        let _ = map.advise(memmap2::Advice::HugePage);
        let skip = (align - map.as_ptr() as u64 % align) % align;
        map[skip as usize..].fill(0x5a);
        let ptr = map[skip as usize..].as_mut_ptr().cast::<std::ffi::c_void>();
        let handle = vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT;
        let mut props = vk::MemoryHostPointerPropertiesEXT::default();
        // SAFETY: `ptr` is a live, aligned map of `bytes`.
        unsafe {
            (ext.fp().get_memory_host_pointer_properties_ext)(
                self.device.handle(),
                handle,
                ptr,
                &mut props,
            )
        }
        .result()
        .map_err(vkr("vkGetMemoryHostPointerPropertiesEXT"))?;
        let families: Vec<u32> = self.families.iter().map(|f| f.0).collect();
        for (i, f) in types.iter().enumerate() {
            if props.memory_type_bits & (1 << i) == 0 {
                continue;
            }
            let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(handle);
            let info = vk::BufferCreateInfo::default()
                .size(bytes)
                .usage(vk::BufferUsageFlags::TRANSFER_SRC)
                .push_next(&mut external);
            let info = sharing(info, &families);
            let mut import = vk::ImportMemoryHostPointerInfoEXT::default()
                .handle_type(handle)
                .host_pointer(ptr);
            let alloc = vk::MemoryAllocateInfo::default()
                .allocation_size(bytes)
                .memory_type_index(i as u32)
                .push_next(&mut import);
            let d = &self.device;
            // SAFETY: the map outlives the device (kept in `self.maps`).
            let made = unsafe {
                d.create_buffer(&info, None)
                    .and_then(|b| match d.allocate_memory(&alloc, None) {
                        Ok(m) => d.bind_buffer_memory(b, m, 0).map(|()| (b, m)),
                        Err(r) => {
                            d.destroy_buffer(b, None);
                            Err(r)
                        }
                    })
            };
            match made {
                Ok((b, m)) => {
                    self.buffers.push((b, m));
                    out.push(Source {
                        name: format!("imported host RAM (type {i}: {f:?})"),
                        buffer: b,
                    });
                }
                Err(r) => tracing::warn!(%r, "copy probe: import in type {i}"),
            }
        }
        self.maps.push(map);
        Ok(out)
    }

    /// Seconds for `bytes` from `src` into `dst`, split evenly over the
    /// first `queues` queues of family slot `family`, best of `reps`.
    fn time_copy(
        &self,
        src: &Source,
        dst: vk::Buffer,
        bytes: u64,
        family: usize,
        queues: usize,
        reps: usize,
    ) -> R<f64> {
        let d = &self.device;
        let pool = self.pools[family];
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(queues as u32);
        // SAFETY: everything used is live on this device; each command
        // buffer and fence is waited for before reuse and freed at the end.
        unsafe {
            let cbs = d
                .allocate_command_buffers(&info)
                .map_err(vkr("vkAllocateCommandBuffers"))?;
            let piece = (bytes / queues as u64) & !255;
            for (q, &cb) in cbs.iter().enumerate() {
                let off = piece * q as u64;
                let size = if q + 1 == queues { bytes - off } else { piece };
                d.begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default())
                    .map_err(vkr("vkBeginCommandBuffer"))?;
                let region = vk::BufferCopy {
                    src_offset: off,
                    dst_offset: off,
                    size,
                };
                d.cmd_copy_buffer(cb, src.buffer, dst, &[region]);
                d.end_command_buffer(cb)
                    .map_err(vkr("vkEndCommandBuffer"))?;
            }
            let fences: Vec<vk::Fence> = (0..queues)
                .map(|_| d.create_fence(&vk::FenceCreateInfo::default(), None))
                .collect::<Result<_, _>>()
                .map_err(vkr("vkCreateFence"))?;
            let mut best = f64::INFINITY;
            let mut result = Ok(());
            for _ in 0..reps.max(1) + 1 {
                let t = Instant::now();
                for (q, &cb) in cbs.iter().enumerate() {
                    let cbs1 = [cb];
                    let submit = vk::SubmitInfo::default().command_buffers(&cbs1);
                    if let Err(r) = d.queue_submit(self.families[family].1[q], &[submit], fences[q])
                    {
                        result = Err(vkr("vkQueueSubmit")(r));
                        break;
                    }
                }
                if result.is_ok() {
                    result = d
                        .wait_for_fences(&fences, true, 10_000_000_000)
                        .map_err(vkr("vkWaitForFences"));
                }
                if result.is_err() {
                    // Nothing submitted may still be running when the
                    // fences go (below, after the device is idle).
                    break;
                }
                let _ = d.reset_fences(&fences);
                best = best.min(t.elapsed().as_secs_f64());
            }
            let _ = d.device_wait_idle();
            for f in fences {
                d.destroy_fence(f, None);
            }
            d.free_command_buffers(pool, &cbs);
            result.map(|()| best)
        }
    }
}

/// Concurrent over `families` where there are two.
fn sharing<'a>(info: vk::BufferCreateInfo<'a>, families: &'a [u32]) -> vk::BufferCreateInfo<'a> {
    match families.len() {
        1 => info.sharing_mode(vk::SharingMode::EXCLUSIVE),
        _ => info
            .sharing_mode(vk::SharingMode::CONCURRENT)
            .queue_family_indices(families),
    }
}
