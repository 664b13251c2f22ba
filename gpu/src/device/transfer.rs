//! A second Vulkan queue for weight copies, beside wgpu's queue.
//!
//! wgpu has one queue per device, and on it (measured on the H200) copies
//! and kernels never overlap: a pass took upload time + compute time. Here
//! the next block's copies go to a queue of their own, as raw
//! `vkCmdCopyBuffer` batches, ordered against wgpu's submits by two timeline
//! semaphores:
//!
//! - `kernels`: wgpu's submit of each block signals the next value
//!   ([`TransferQueue::signal_kernels`]); a copy batch into an arena waits for
//!   the value of the submit that last read that arena (no write-after-read).
//! - `copies`: each batch signals the next value; the submit holding the
//!   kernels that read those weights waits for it
//!   ([`TransferQueue::kernels_wait_for`]; no read-before-write).
//!
//! The queue is of wgpu's own family (exclusive buffers need no ownership
//! transfer). Buffers named by a batch are kept alive until it has run.
//! The semaphore waits and signals attach to wgpu's *next* submit, so a pass
//! using this queue must be the only thread submitting to the device.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use ash::vk;
use wgpu::hal::api::Vulkan;

use super::GpuError;

pub use super::transfer_cmd::CopyCmd;

/// How long a wait for the copy queue may take before it is an error (a
/// hung or lost device).
const WAIT: Duration = Duration::from_secs(60);

/// The second queue, its command pool and the two timeline semaphores.
pub struct TransferQueue {
    device: ash::Device,
    /// `vkQueueSubmit` needs the queue externally synchronized.
    queue: Mutex<vk::Queue>,
    pool: vk::CommandPool,
    copies: vk::Semaphore,
    kernels: vk::Semaphore,
    /// Whether this is wgpu's own queue (testing on one-queue adapters).
    shared_with_wgpu: bool,
    /// wgpu's family and ours when they differ: buffers both queues touch
    /// are created concurrent over them.
    families: Option<[u32; 2]>,
    memory: vk::PhysicalDeviceMemoryProperties,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    last_copy: u64,
    last_kernels: u64,
    free: Vec<vk::CommandBuffer>,
    /// Batches submitted: their `copies` value, command buffer, buffers.
    in_flight: VecDeque<(u64, vk::CommandBuffer, Vec<CopyCmd>)>,
}

impl std::fmt::Debug for TransferQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransferQueue")
            .field("shared_with_wgpu", &self.shared_with_wgpu)
            .finish_non_exhaustive()
    }
}

fn vk_err(what: &str) -> impl Fn(vk::Result) -> GpuError + '_ {
    move |r| match r {
        vk::Result::ERROR_DEVICE_LOST => GpuError::DeviceLost {
            reason: format!("{what}: {r}"),
        },
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
            GpuError::OutOfMemory {
                label: format!("copy queue ({what})"),
                size: 0,
                message: r.to_string(),
            }
        }
        _ => GpuError::Validation {
            what: format!("copy queue: {what}"),
            message: format!("{r} ({})", r.as_raw()),
        },
    }
}

impl TransferQueue {
    /// Sets up queue `index` of `family` on `device` (created with it), or
    /// with `shared_with_wgpu` wgpu's own queue — only for tests on adapters
    /// with one queue, where no other thread may submit meanwhile.
    pub fn new(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        family: u32,
        index: u32,
        shared_with_wgpu: bool,
    ) -> Result<Self, GpuError> {
        // SAFETY: only handles are read; wgpu keeps the device alive longer
        // than `Gpu` keeps this queue (see the field order in `Gpu`).
        let hal = unsafe { device.as_hal::<Vulkan>() }.ok_or_else(|| GpuError::Validation {
            what: "copy queue".into(),
            message: "not a Vulkan device".into(),
        })?;
        let raw = hal.raw_device().clone();
        // SAFETY: a read-only query on the device's physical device.
        let memory = unsafe {
            hal.shared_instance()
                .raw_instance()
                .get_physical_device_memory_properties(hal.raw_physical_device())
        };
        let vk_queue = if shared_with_wgpu {
            // SAFETY: as above, a handle read.
            let q = unsafe { queue.as_hal::<Vulkan>() }.ok_or_else(|| GpuError::Validation {
                what: "copy queue".into(),
                message: "not a Vulkan queue".into(),
            })?;
            q.as_raw()
        } else {
            // SAFETY: the device was created with `index + 1` queues in `family`.
            unsafe { raw.get_device_queue(family, index) }
        };
        let pool_info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(family)
            .flags(
                vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER
                    | vk::CommandPoolCreateFlags::TRANSIENT,
            );
        // SAFETY: valid create infos on a live device; every object made here
        // is destroyed in `Drop` (or below, on failure).
        unsafe {
            let pool = raw
                .create_command_pool(&pool_info, None)
                .map_err(vk_err("vkCreateCommandPool"))?;
            let mut timeline = vk::SemaphoreTypeCreateInfo::default()
                .semaphore_type(vk::SemaphoreType::TIMELINE)
                .initial_value(0);
            let info = vk::SemaphoreCreateInfo::default().push_next(&mut timeline);
            let copies = raw.create_semaphore(&info, None);
            let kernels = raw.create_semaphore(&info, None);
            match (copies, kernels) {
                (Ok(copies), Ok(kernels)) => Ok(Self {
                    families: super::device_open::shared_families(device),
                    memory,
                    device: raw,
                    queue: Mutex::new(vk_queue),
                    pool,
                    copies,
                    kernels,
                    shared_with_wgpu,
                    state: Mutex::new(State::default()),
                }),
                (a, b) => {
                    for s in [a, b].into_iter().flatten() {
                        raw.destroy_semaphore(s, None);
                    }
                    raw.destroy_command_pool(pool, None);
                    Err(vk_err("vkCreateSemaphore")(
                        vk::Result::ERROR_INITIALIZATION_FAILED,
                    ))
                }
            }
        }
    }

    /// Whether the copies share wgpu's queue (a test set-up).
    pub fn shared_with_wgpu(&self) -> bool {
        self.shared_with_wgpu
    }

    /// Whether the copy queue is of another family than wgpu's (then only
    /// buffers made concurrent over both can be copied on it).
    pub fn cross_family(&self) -> bool {
        self.families.is_some()
    }

    /// A device-local buffer the copy queue may write and wgpu's kernels
    /// read: made here with Vulkan, concurrent over both queue families
    /// when they differ, and handed to wgpu.
    pub fn create_buffer(
        &self,
        device: &wgpu::Device,
        label: &str,
        size: u64,
        usage: wgpu::BufferUsages,
    ) -> Result<wgpu::Buffer, GpuError> {
        let oom = |r: vk::Result| match r {
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
                GpuError::OutOfMemory {
                    label: label.to_owned(),
                    size,
                    message: r.to_string(),
                }
            }
            r => vk_err("creating a copy-queue buffer")(r),
        };
        let mut vk_usage = vk::BufferUsageFlags::empty();
        for (w, v) in [
            (
                wgpu::BufferUsages::STORAGE,
                vk::BufferUsageFlags::STORAGE_BUFFER,
            ),
            (
                wgpu::BufferUsages::COPY_DST,
                vk::BufferUsageFlags::TRANSFER_DST,
            ),
            (
                wgpu::BufferUsages::COPY_SRC,
                vk::BufferUsageFlags::TRANSFER_SRC,
            ),
            (
                wgpu::BufferUsages::UNIFORM,
                vk::BufferUsageFlags::UNIFORM_BUFFER,
            ),
        ] {
            if usage.contains(w) {
                vk_usage |= v;
            }
        }
        let info = vk::BufferCreateInfo::default().size(size).usage(vk_usage);
        let info = match &self.families {
            Some(f) => info
                .sharing_mode(vk::SharingMode::CONCURRENT)
                .queue_family_indices(f),
            None => info.sharing_mode(vk::SharingMode::EXCLUSIVE),
        };
        let d = self.device.clone();
        // SAFETY: valid create infos on a live device; the buffer and its
        // memory are destroyed by the drop callback once wgpu is done with
        // them, or here on failure.
        let hal_buffer = unsafe {
            let buffer = d.create_buffer(&info, None).map_err(oom)?;
            let req = d.get_buffer_memory_requirements(buffer);
            let Some(type_index) = self.device_local_type(req.memory_type_bits) else {
                d.destroy_buffer(buffer, None);
                return Err(GpuError::Validation {
                    what: format!("buffer `{label}` ({size} bytes)"),
                    message: "no device-local memory type for it".into(),
                });
            };
            let alloc = vk::MemoryAllocateInfo::default()
                .allocation_size(req.size)
                .memory_type_index(type_index);
            let memory = match d.allocate_memory(&alloc, None) {
                Ok(m) => m,
                Err(r) => {
                    d.destroy_buffer(buffer, None);
                    return Err(oom(r));
                }
            };
            if let Err(r) = d.bind_buffer_memory(buffer, memory, 0) {
                d.free_memory(memory, None);
                d.destroy_buffer(buffer, None);
                return Err(oom(r));
            }
            let cleanup = move || {
                d.destroy_buffer(buffer, None);
                d.free_memory(memory, None);
            };
            wgpu::hal::vulkan::Buffer::from_raw_externally_owned(buffer, Box::new(cleanup))
        };
        // SAFETY: made above on this device with the usages `usage` names,
        // `size` bytes, bound to memory that lives until wgpu drops it.
        Ok(unsafe {
            device.create_buffer_from_hal::<Vulkan>(
                hal_buffer,
                &wgpu::BufferDescriptor {
                    label: Some(label),
                    size,
                    usage,
                    mapped_at_creation: false,
                },
            )
        })
    }

    /// A device-local memory type in `bits`, preferring one the host cannot
    /// see (not the BAR window).
    fn device_local_type(&self, bits: u32) -> Option<u32> {
        let props = self.memory;
        let types = &props.memory_types[..props.memory_type_count as usize];
        let dl = vk::MemoryPropertyFlags::DEVICE_LOCAL;
        let ok = |i: usize| bits & (1 << i) != 0 && types[i].property_flags.contains(dl);
        (0..types.len())
            .find(|&i| {
                ok(i)
                    && !types[i]
                        .property_flags
                        .contains(vk::MemoryPropertyFlags::HOST_VISIBLE)
            })
            .or_else(|| (0..types.len()).find(|&i| ok(i)))
            .map(|i| i as u32)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Submits `cmds` as one batch that starts once wgpu's submit that
    /// signalled `after_kernels` has run (0: at once). Returns the batch's
    /// `copies` value for [`Self::kernels_wait_for`].
    pub fn submit(&self, cmds: Vec<CopyCmd>, after_kernels: u64) -> Result<u64, GpuError> {
        let _span = tracing::debug_span!("copy_queue_submit", copies = cmds.len()).entered();
        let mut st = self.state();
        self.recycle(&mut st)?;
        let cb = match st.free.pop() {
            Some(cb) => cb,
            None => {
                let info = vk::CommandBufferAllocateInfo::default()
                    .command_pool(self.pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1);
                // SAFETY: a live pool of this device, used under the state lock.
                unsafe { self.device.allocate_command_buffers(&info) }
                    .map_err(vk_err("vkAllocateCommandBuffers"))?[0]
            }
        };
        let value = st.last_copy + 1;
        // SAFETY: `cb` is not in flight (fresh or recycled after its value
        // was reached); every buffer handle stays alive in `in_flight` until
        // the batch has run.
        let submitted = unsafe {
            self.record(cb, &cmds)
                .and_then(|()| self.submit_raw(cb, after_kernels, value))
        };
        if let Err(e) = submitted {
            st.free.push(cb);
            return Err(e);
        }
        st.last_copy = value;
        st.in_flight.push_back((value, cb, cmds));
        Ok(value)
    }

    unsafe fn record(&self, cb: vk::CommandBuffer, cmds: &[CopyCmd]) -> Result<(), GpuError> {
        let d = &self.device;
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: (caller) `cb` is ours and idle; the handles are live.
        unsafe {
            d.reset_command_buffer(cb, vk::CommandBufferResetFlags::empty())
                .map_err(vk_err("vkResetCommandBuffer"))?;
            d.begin_command_buffer(cb, &begin)
                .map_err(vk_err("vkBeginCommandBuffer"))?;
            for c in cmds {
                let (src, dst) = (raw_buffer(&c.src)?, raw_buffer(&c.dst)?);
                let region = vk::BufferCopy {
                    src_offset: c.src_offset,
                    dst_offset: c.dst_offset,
                    size: c.size,
                };
                d.cmd_copy_buffer(cb, src, dst, &[region]);
            }
            d.end_command_buffer(cb)
                .map_err(vk_err("vkEndCommandBuffer"))
        }
    }

    unsafe fn submit_raw(
        &self,
        cb: vk::CommandBuffer,
        after_kernels: u64,
        value: u64,
    ) -> Result<(), GpuError> {
        let cbs = [cb];
        let signal = [self.copies];
        let signal_values = [value];
        let (wait, wait_values, stages) = if after_kernels > 0 {
            (
                vec![self.kernels],
                vec![after_kernels],
                vec![vk::PipelineStageFlags::TRANSFER],
            )
        } else {
            (Vec::new(), Vec::new(), Vec::new())
        };
        let mut timeline = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&wait_values)
            .signal_semaphore_values(&signal_values);
        let info = vk::SubmitInfo::default()
            .wait_semaphores(&wait)
            .wait_dst_stage_mask(&stages)
            .command_buffers(&cbs)
            .signal_semaphores(&signal)
            .push_next(&mut timeline);
        let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the queue is externally synchronized by the lock (and, when
        // shared with wgpu, by the single-submitter rule in the module docs).
        unsafe { self.device.queue_submit(*queue, &[info], vk::Fence::null()) }
            .map_err(vk_err("vkQueueSubmit"))
    }

    /// Makes wgpu's next submit wait for batch `copies` before its compute
    /// work (call before the submit that holds the kernels reading it).
    pub fn kernels_wait_for(&self, queue: &wgpu::Queue, copies: u64) {
        // SAFETY: the semaphore outlives the submit it is attached to (it is
        // destroyed only after waiting for the device in `Drop`).
        if let Some(q) = unsafe { queue.as_hal::<Vulkan>() } {
            q.add_wait_semaphore(
                self.copies,
                Some(copies),
                vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
            );
        }
    }

    /// Makes wgpu's next submit signal the next `kernels` value, returned
    /// for [`Self::submit`]'s `after_kernels`.
    pub fn signal_kernels(&self, queue: &wgpu::Queue) -> u64 {
        let mut st = self.state();
        st.last_kernels += 1;
        // SAFETY: as in `kernels_wait_for`.
        if let Some(q) = unsafe { queue.as_hal::<Vulkan>() } {
            q.add_signal_semaphore(self.kernels, Some(st.last_kernels));
        }
        st.last_kernels
    }

    /// How far both timelines have run: (`copies`, `kernels`), the last
    /// copy batch and the last signalling wgpu submit the device finished.
    /// Cheap enough to poll: traces sample it for the device's lanes.
    pub fn progress(&self) -> Result<(u64, u64), GpuError> {
        // SAFETY: live timeline semaphores of this device.
        let read = |s| unsafe { self.device.get_semaphore_counter_value(s) };
        let copies = read(self.copies).map_err(vk_err("vkGetSemaphoreCounterValue"))?;
        let kernels = read(self.kernels).map_err(vk_err("vkGetSemaphoreCounterValue"))?;
        Ok((copies, kernels))
    }

    /// Waits until every batch submitted has run, and frees their buffers.
    pub fn wait_all(&self) -> Result<(), GpuError> {
        let mut st = self.state();
        if st.last_copy > 0 {
            let sems = [self.copies];
            let values = [st.last_copy];
            let info = vk::SemaphoreWaitInfo::default()
                .semaphores(&sems)
                .values(&values);
            // SAFETY: a live timeline semaphore of this device.
            unsafe { self.device.wait_semaphores(&info, WAIT.as_nanos() as u64) }.map_err(|r| {
                match r {
                    vk::Result::TIMEOUT => GpuError::DeviceLost {
                        reason: format!("copy queue did not finish within {WAIT:?}"),
                    },
                    r => vk_err("vkWaitSemaphores")(r),
                }
            })?;
        }
        self.recycle(&mut st)
    }

    /// Moves batches that have run back to the free list.
    fn recycle(&self, st: &mut State) -> Result<(), GpuError> {
        // SAFETY: a live timeline semaphore of this device.
        let done = unsafe { self.device.get_semaphore_counter_value(self.copies) }
            .map_err(vk_err("vkGetSemaphoreCounterValue"))?;
        while st.in_flight.front().is_some_and(|(v, _, _)| *v <= done) {
            if let Some((_, cb, _buffers)) = st.in_flight.pop_front() {
                st.free.push(cb);
            }
        }
        Ok(())
    }
}

/// The `VkBuffer` behind a wgpu buffer.
fn raw_buffer(b: &wgpu::Buffer) -> Result<vk::Buffer, GpuError> {
    // SAFETY: the handle is only recorded into a command buffer while `b`
    // (a clone kept in the batch) is alive.
    unsafe { b.as_hal::<Vulkan>() }
        .map(|h| unsafe { h.raw_handle() })
        .ok_or_else(|| GpuError::Validation {
            what: "copy queue".into(),
            message: "a buffer is not a Vulkan buffer".into(),
        })
}

impl Drop for TransferQueue {
    fn drop(&mut self) {
        // SAFETY: `Gpu` is being dropped, so no thread submits; once the
        // device is idle neither queue uses our command buffers or
        // semaphores (wgpu's submits signal and wait on them too).
        unsafe {
            let _ = self.device.device_wait_idle();
            self.device.destroy_command_pool(self.pool, None);
            self.device.destroy_semaphore(self.copies, None);
            self.device.destroy_semaphore(self.kernels, None);
        }
    }
}
