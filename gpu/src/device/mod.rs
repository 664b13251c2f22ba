//! The wgpu side of the runtime: adapter choice, device, error capture, and
//! the GPU side of uploads (host-memory import, pinned buffers, the staging
//! ring's slots, the upload benchmark) and of small read-backs a pass behind
//! ([`ReadbackRing`]).
//!
//! Every buffer and pipeline the workspace creates goes through [`Gpu`], so
//! out-of-memory and validation errors come back as [`GpuError`] values instead
//! of panics, and a lost device is remembered and reported on the next call.

mod adapter;
mod caps;
pub mod cm2;
pub mod device_open;
mod dynamic_layout;
pub(crate) use dynamic_layout::MAX_DYNAMIC;
mod error;
pub mod host_memory;
mod pinned_buffer;
mod pipeline_cache;
mod readback_ring;
mod spirv_pipeline;
#[cfg(test)]
pub(crate) use spirv_pipeline::check_bindings;
#[cfg(any(target_os = "linux", target_os = "windows", target_os = "android"))]
mod copy_probe;
mod staging;
mod staging_ring;
#[cfg(any(target_os = "linux", target_os = "windows", target_os = "android"))]
mod transfer;
#[cfg(not(any(target_os = "linux", target_os = "windows", target_os = "android")))]
#[path = "transfer_none.rs"]
mod transfer;
mod transfer_cmd;
pub mod upload_bench;
mod vram;
mod wait;

pub use adapter::{AdapterChoice, AdapterSummary, enumerate_adapters};
pub use caps::{AdapterReport, caps_of, caps_of_report};
pub use cm2::{
    CONVERTED_LONG_ROWS, CONVERTED_PIECE_BYTES, Cm2Bf16, Cm2Caps, Cm2Int4, Cm2Split, Cm2Stack,
    SPLIT_MIN_K, SpirvGemm, adapter_cm2, converted_piece_limit,
};
pub use device_open::CopyQueueMode;
pub use error::{GpuError, UploadError};
pub use host_memory::{HostMemory, HostMemoryChoice, ImportError, ImportedBuffer};
pub use pinned_buffer::PinnedBuffer;
pub use pipeline_cache::PipelineCacheInfo;
pub use readback_ring::{ReadbackRing, ReadbackSlot};
pub use staging_ring::{RingConfig, StagingRing};
pub use transfer::{CopyCmd, TransferQueue};
pub use vram::{DriverPoll, VramReading, VramSource, read_vram};
pub(crate) use wait::wait;
pub use wait::{DEFAULT_WAIT_LIMIT, set_wait_limit, wait_limit};

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use dynvram_quant::AdapterCaps;
use dynvram_shaders::flash::FlashKernel;
use dynvram_shaders::linear::CoopGemmKernel;

/// An open device and queue on the chosen adapter.
#[derive(Debug)]
pub struct Gpu {
    /// The copy queue beside wgpu's (declared first: dropped before the
    /// device it was made on).
    transfer: Option<TransferQueue>,
    /// The pipeline cache on disk, where [`GpuOptions::pipeline_cache`]
    /// names a folder (before the device: saved on drop while it lives).
    pipeline_cache: Option<pipeline_cache::DiskCache>,
    /// The wgpu device.
    pub device: wgpu::Device,
    /// Its single queue.
    pub queue: wgpu::Queue,
    /// The adapter it was opened on.
    pub adapter: wgpu::Adapter,
    /// Adapter info (name, backend, driver).
    pub info: wgpu::AdapterInfo,
    /// Features and limits that matter for kernel choice.
    pub caps: AdapterCaps,
    /// `VK_EXT_external_memory_host` is enabled: host-memory buffers are
    /// imported host RAM, not mapped wgpu buffers.
    pub host_import: bool,
    lost: Arc<Mutex<Option<String>>>,
    uncaptured: Arc<Mutex<Option<String>>>,
    /// naga's runtime checks for every module this device compiles.
    shader_checks: ShaderChecks,
    /// [`GpuOptions::quant_wgs`].
    quant_wgs: Option<u32>,
    /// [`GpuOptions::spread_quant`].
    spread_quant: SpreadQuant,
    /// The `MAP_READ` buffer of small read-backs (a decode step's logits),
    /// kept so each does not create (and validate) one.
    readback: Mutex<Option<wgpu::Buffer>>,
    /// [`GpuOptions::flash`].
    flash: Option<FlashKernel>,
    /// [`GpuOptions::decode`].
    decode: Option<crate::decode_tuning::DecodeTuning>,
    /// [`GpuOptions::coop_gemm`].
    coop_gemm: CoopGemmKernel,
    /// [`GpuOptions::spirv_gemm`].
    spirv_gemm: SpirvGemm,
    /// [`GpuOptions::cm2_bf16`].
    cm2_bf16: Cm2Bf16,
    /// [`GpuOptions::cm2_int4`].
    cm2_int4: Cm2Int4,
    /// [`GpuOptions::cm2_split`].
    cm2_split: Cm2Split,
    /// [`GpuOptions::cm2_stack`].
    cm2_stack: Cm2Stack,
    /// [`GpuOptions::cm2_large`].
    cm2_large: Option<&'static str>,
    /// [`GpuOptions::f16_unpack`] where the adapter grants it.
    f16_unpack: bool,
    /// `VK_NV_cooperative_matrix2` as enabled on this device, else `None`.
    cm2: Option<Cm2Caps>,
    /// Pipelines created and the nanoseconds that took ([`Gpu::pipeline_time`]).
    pipelines_created: AtomicU64,
    pipeline_nanos: AtomicU64,
}

/// Read-backs up to this size reuse [`Gpu`]'s kept staging buffer.
const KEPT_READBACK_BYTES: u64 = 1 << 20;

impl Gpu {
    /// Opens a device on the adapter `choice` selects, with every optional
    /// feature our kernels can use that the adapter offers, and the adapter's
    /// full buffer limits.
    pub fn open(choice: &AdapterChoice) -> Result<Self, GpuError> {
        let adapter = choice.select()?;
        Self::open_adapter_with(adapter, choice.options.clone())
    }

    /// Opens a device on a given adapter with the default [`GpuOptions`].
    pub fn open_adapter(adapter: wgpu::Adapter) -> Result<Self, GpuError> {
        Self::open_adapter_with(adapter, GpuOptions::default())
    }

    /// Opens a device on a given adapter with `options`.
    pub fn open_adapter_with(
        adapter: wgpu::Adapter,
        options: GpuOptions,
    ) -> Result<Self, GpuError> {
        let info = adapter.get_info();
        let mut wanted = wgpu::Features::SHADER_F16
            | wgpu::Features::SUBGROUP
            | wgpu::Features::TIMESTAMP_QUERY
            | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS
            | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
        let coop = options.coop_matrix && caps::coop_f16_edge(&adapter) != 0;
        if coop {
            wanted |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
            // Raw SPIR-V only where the adapter lists cooperative matrices
            // 2: `device_open` then enables the extension (the kernels run
            // where it has every feature they use).
            if options.spirv_gemm != SpirvGemm::Off && adapter_cm2(&adapter).is_some() {
                wanted |= wgpu::Features::PASSTHROUGH_SHADERS;
            }
        }
        // Only where a cache would be used: a backend with a cache key.
        let cache_dir = options.pipeline_cache.as_deref().filter(|dir| {
            let keyed = wgpu::util::pipeline_cache_key(&info).is_some();
            if !keyed {
                tracing::debug!(dir = %dir.display(), backend = ?info.backend, "no pipeline cache on this backend");
            }
            keyed
        });
        if cache_dir.is_some() {
            wanted |= wgpu::Features::PIPELINE_CACHE;
        }
        let features = adapter.features() & wanted;
        // Every kernel takes its params as immediates (push constants).
        if !adapter.features().contains(wgpu::Features::IMMEDIATES) {
            return Err(GpuError::RequestDevice {
                adapter: info.name.clone(),
                message: "the adapter lacks IMMEDIATES (push constants), which every kernel's \
                          params use"
                    .into(),
            });
        }
        let features = features | wgpu::Features::IMMEDIATES;
        let limits = adapter.limits();
        let experimental_features = if coop {
            // SAFETY: cooperative matrices are used by one kernel
            // (linear_int_gemm_coop.wgsl), only in the configuration the
            // adapter lists, and checked against the dot4 GEMM bit for bit
            // by the tests; `GpuOptions::coop_matrix` false leaves them
            // disabled.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
        let desc = wgpu::DeviceDescriptor {
            label: Some("dynvram"),
            required_features: features,
            required_limits: limits.clone(),
            experimental_features,
            memory_hints: MEMORY_HINTS,
            trace: wgpu::Trace::Off,
        };
        // Through wgpu-hal on Vulkan, to enable VK_EXT_external_memory_host
        // (pins and staging slots in imported host RAM); wgpu's own
        // `request_device` elsewhere.
        let (device, queue, extras) =
            device_open::request_device(&adapter, &desc, options.copy_queue).map_err(|e| {
                GpuError::RequestDevice {
                    adapter: info.name.clone(),
                    message: e.to_string(),
                }
            })?;
        let host_import = extras.host_import;
        let cm2 = extras.cm2.clone();
        set_wait_limit(options.wait_limit);
        let transfer = open_transfer_queue(&device, &queue, extras.copy_queue, options.copy_queue);
        let lost = Arc::new(Mutex::new(None));
        let lost_cb = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            tracing::error!(?reason, %message, "GPU device lost");
            if let Ok(mut slot) = lost_cb.lock() {
                *slot = Some(format!("{reason:?}: {message}"));
            }
        });
        let uncaptured = Arc::new(Mutex::new(None));
        let uncaptured_cb = uncaptured.clone();
        device.on_uncaptured_error(Arc::new(move |err: wgpu::Error| {
            tracing::error!(%err, "uncaptured wgpu error");
            if let Ok(mut slot) = uncaptured_cb.lock() {
                slot.get_or_insert_with(|| err.to_string());
            }
        }));
        let caps = caps_of(&adapter, &device);
        let f16_unpack = options.f16_unpack && grants_f16_unpack(&adapter);
        let pipeline_cache = match cache_dir {
            Some(dir) if device.features().contains(wgpu::Features::PIPELINE_CACHE) => {
                pipeline_cache::DiskCache::open(&device, &info, dir)
            }
            Some(dir) => {
                tracing::debug!(dir = %dir.display(), "the adapter has no PIPELINE_CACHE: no pipeline cache");
                None
            }
            None => None,
        };
        tracing::info!(
            adapter = %info.name,
            backend = ?info.backend,
            host_import,
            copy_queue = ?transfer,
            "device opened"
        );
        Ok(Self {
            transfer,
            pipeline_cache,
            device,
            queue,
            adapter,
            info,
            caps,
            host_import,
            lost,
            uncaptured,
            shader_checks: options.shader_checks,
            quant_wgs: options.quant_wgs,
            spread_quant: options.spread_quant,
            readback: Mutex::new(None),
            flash: options.flash,
            decode: options.decode,
            coop_gemm: options.coop_gemm,
            spirv_gemm: options.spirv_gemm,
            cm2_bf16: options.cm2_bf16,
            cm2_int4: options.cm2_int4,
            cm2_split: options.cm2_split,
            cm2_stack: options.cm2_stack,
            cm2_large: options.cm2_large,
            f16_unpack,
            cm2,
            pipelines_created: AtomicU64::new(0),
            pipeline_nanos: AtomicU64::new(0),
        })
    }

    /// `VK_NV_cooperative_matrix2` as enabled on this device, if it is
    /// (`GpuOptions::spirv_gemm` not off, cooperative matrices on, and the
    /// adapter lists the extension; the SPIR-V GEMM runs only where
    /// [`Cm2Caps::missing_features`] is empty).
    pub fn cm2(&self) -> Option<&Cm2Caps> {
        self.cm2.as_ref()
    }

    /// [`GpuOptions::quant_wgs`] of this device.
    pub fn quant_wgs(&self) -> Option<u32> {
        self.quant_wgs
    }

    /// [`GpuOptions::spread_quant`] of this device.
    pub fn spread_quant(&self) -> SpreadQuant {
        self.spread_quant
    }

    /// [`GpuOptions::flash`] of this device.
    pub fn flash_kernel(&self) -> Option<FlashKernel> {
        self.flash
    }

    /// [`GpuOptions::decode`] of this device.
    pub fn decode_tuning(&self) -> Option<crate::decode_tuning::DecodeTuning> {
        self.decode
    }

    /// [`GpuOptions::coop_gemm`] of this device.
    pub fn coop_gemm(&self) -> CoopGemmKernel {
        self.coop_gemm
    }

    /// [`GpuOptions::spirv_gemm`] of this device.
    pub fn spirv_gemm(&self) -> SpirvGemm {
        self.spirv_gemm
    }

    /// How bf16 layers take the SPIR-V GEMM ([`GpuOptions::cm2_bf16`]).
    pub fn cm2_bf16(&self) -> Cm2Bf16 {
        self.cm2_bf16
    }

    /// How int4 layers take the SPIR-V GEMM ([`GpuOptions::cm2_int4`]).
    pub fn cm2_int4(&self) -> Cm2Int4 {
        self.cm2_int4
    }

    /// Whether small grids split K ([`GpuOptions::cm2_split`]).
    pub fn cm2_split(&self) -> Cm2Split {
        self.cm2_split
    }

    /// Whether linears of one input share a SPIR-V GEMM launch
    /// ([`GpuOptions::cm2_stack`]).
    pub fn cm2_stack(&self) -> Cm2Stack {
        self.cm2_stack
    }

    /// The SPIR-V GEMM layers of its weights take on large grids
    /// ([`GpuOptions::cm2_large`]).
    pub fn cm2_large(&self) -> Option<&'static str> {
        self.cm2_large
    }

    /// Whether kernels decode f16 words with `unpack2x16float`
    /// ([`GpuOptions::f16_unpack`], where the adapter grants
    /// `SHADER_F16_IN_F32`) rather than in integer arithmetic.
    pub fn f16_unpack(&self) -> bool {
        self.f16_unpack
    }

    /// The on-disk pipeline cache, where one is open: its file and what was
    /// loaded from it.
    pub fn pipeline_cache_info(&self) -> Option<&PipelineCacheInfo> {
        self.pipeline_cache.as_ref().map(|c| c.info())
    }

    /// The size in bytes of the pipeline cache's data now (the driver
    /// serializes it: for diagnosis and tests); `None` without a cache.
    pub fn pipeline_cache_len(&self) -> Option<usize> {
        self.pipeline_cache.as_ref().map(|c| c.data_len())
    }

    /// Writes the pipeline cache to its file now if pipelines were compiled
    /// since it was loaded or saved and its data changed; returns the bytes
    /// written (`None`: nothing to write, or no cache). Dropping the device
    /// saves too (a failure there is only logged); this is for embedders
    /// that want the error, or the file before a long run.
    pub fn save_pipeline_cache(&self) -> Result<Option<u64>, dynvram_loader::LoadError> {
        self.pipeline_cache
            .as_ref()
            .map_or(Ok(None), pipeline_cache::DiskCache::save)
    }

    /// The queue that copies streamed weights beside wgpu's queue, where
    /// the device has a second one.
    pub fn transfer_queue(&self) -> Option<&TransferQueue> {
        self.transfer.as_ref()
    }

    /// Fails with [`GpuError::DeviceLost`] or [`GpuError::Uncaptured`] if the
    /// device was lost or an error escaped every scope since the last check.
    pub fn check_health(&self) -> Result<(), GpuError> {
        if let Some(reason) = self.lost.lock().ok().and_then(|s| s.clone()) {
            return Err(GpuError::DeviceLost { reason });
        }
        if let Some(message) = self.uncaptured.lock().ok().and_then(|mut s| s.take()) {
            return Err(GpuError::Uncaptured { message });
        }
        Ok(())
    }

    /// Marks the device as lost (used by fault-injection tests and by callers
    /// that detect loss through other means).
    pub fn mark_lost(&self, reason: &str) {
        if let Ok(mut slot) = self.lost.lock() {
            *slot = Some(reason.to_owned());
        }
    }

    /// A buffer the copy queue writes and kernels read (through the copy
    /// queue where there is one; else [`Self::create_buffer`]).
    pub fn create_copy_target(
        &self,
        label: &str,
        size: u64,
        usage: wgpu::BufferUsages,
    ) -> Result<wgpu::Buffer, GpuError> {
        let Some(q) = &self.transfer else {
            return self.create_buffer(label, size, usage);
        };
        self.check_health()?;
        self.check_size(label, size)?;
        q.create_buffer(&self.device, label, size, usage)
    }

    fn check_size(&self, label: &str, size: u64) -> Result<(), GpuError> {
        if size > self.caps.max_buffer_size {
            return Err(GpuError::BufferTooLarge {
                label: label.to_owned(),
                requested: size,
                maximum: self.caps.max_buffer_size,
            });
        }
        Ok(())
    }

    /// Creates a buffer inside an out-of-memory and a validation error scope.
    pub fn create_buffer(
        &self,
        label: &str,
        size: u64,
        usage: wgpu::BufferUsages,
    ) -> Result<wgpu::Buffer, GpuError> {
        self.check_health()?;
        self.check_size(label, size)?;
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage,
            mapped_at_creation: false,
        });
        let validation_err = pollster::block_on(validation.pop());
        let oom_err = pollster::block_on(oom.pop());
        if let Some(e) = oom_err {
            return Err(GpuError::OutOfMemory {
                label: label.to_owned(),
                size,
                message: e.to_string(),
            });
        }
        if let Some(e) = validation_err {
            return Err(GpuError::Validation {
                what: format!("buffer `{label}` ({size} bytes)"),
                message: e.to_string(),
            });
        }
        Ok(buffer)
    }

    /// Compiles a WGSL compute pipeline inside a validation scope.
    pub fn create_compute_pipeline(
        &self,
        label: &str,
        source: &str,
        entry: &str,
        constants: &[(&str, f64)],
    ) -> Result<wgpu::ComputePipeline, GpuError> {
        self.create_pipeline_in(label, source, entry, constants, None)
    }

    /// [`Self::create_compute_pipeline`] with its writable storage bindings
    /// taking dynamic offsets where it has any (`device::dynamic_layout`), and
    /// the mask of those bindings (bit `b`: binding `b`).
    pub(crate) fn create_launch_pipeline(
        &self,
        label: &str,
        source: &str,
        entry: &str,
        constants: &[(&str, f64)],
    ) -> Result<(wgpu::ComputePipeline, u64), GpuError> {
        match dynamic_layout::dynamic_layout(&self.device, label, source, entry) {
            Some(d) => self
                .create_pipeline_in(label, source, entry, constants, Some(&d.layout))
                .map(|p| (p, d.dynamic)),
            None => self
                .create_pipeline_in(label, source, entry, constants, None)
                .map(|p| (p, 0)),
        }
    }

    /// Pipelines this device has created so far and the seconds that took.
    pub fn pipeline_time(&self) -> crate::PipelineTime {
        crate::PipelineTime {
            count: self.pipelines_created.load(Ordering::Relaxed),
            seconds: self.pipeline_nanos.load(Ordering::Relaxed) as f64 * 1e-9,
        }
    }

    /// Counts one pipeline created since `start` in [`Self::pipeline_time`].
    fn count_pipeline(&self, start: Instant) {
        let nanos = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.pipeline_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.pipelines_created.fetch_add(1, Ordering::Relaxed);
    }

    fn create_pipeline_in(
        &self,
        label: &str,
        source: &str,
        entry: &str,
        constants: &[(&str, f64)],
        layout: Option<&wgpu::PipelineLayout>,
    ) -> Result<wgpu::ComputePipeline, GpuError> {
        self.check_health()?;
        let start = Instant::now();
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(label),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        };
        let module = match self.shader_checks {
            ShaderChecks::All => self.device.create_shader_module(desc),
            // SAFETY: every loop of our kernels is bounded by its uniform
            // params or a constant (tests run each kernel on every path).
            ShaderChecks::NoLoopBound => unsafe {
                self.device.create_shader_module_trusted(
                    desc,
                    wgpu::ShaderRuntimeChecks {
                        force_loop_bounding: false,
                        ..wgpu::ShaderRuntimeChecks::checked()
                    },
                )
            },
            // SAFETY: as above, and indices stay inside their arrays and
            // bindings (tests check every kernel against CPU references on
            // awkward shapes; Vulkan's robust buffer access still bounds
            // buffer reads where the driver has it).
            ShaderChecks::None => unsafe {
                self.device
                    .create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
            },
        };
        let pipeline = self.finish_pipeline(scope, label, layout, &module, entry, constants);
        self.count_pipeline(start);
        pipeline
    }

    /// The compute pipeline of `entry` in `module` (through the disk cache
    /// where there is one), then `scope`'s validation error, if any.
    fn finish_pipeline(
        &self,
        scope: wgpu::ErrorScopeGuard,
        label: &str,
        layout: Option<&wgpu::PipelineLayout>,
        module: &wgpu::ShaderModule,
        entry: &str,
        constants: &[(&str, f64)],
    ) -> Result<wgpu::ComputePipeline, GpuError> {
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(label),
                layout,
                module,
                entry_point: Some(entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants,
                    zero_initialize_workgroup_memory: false,
                },
                cache: self.pipeline_cache.as_ref().map(|c| c.for_pipeline()),
            });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(GpuError::Validation {
                what: format!("compute pipeline `{label}` (entry `{entry}`)"),
                message: e.to_string(),
            });
        }
        Ok(pipeline)
    }

    /// Waits for all submitted work (within [`wait_limit`]).
    pub fn wait_idle(&self) -> Result<(), GpuError> {
        wait(&self.device, None, "waiting for the GPU")?;
        self.check_health()
    }

    /// Copies `size` bytes at `offset` of a GPU buffer back to the host
    /// (through a temporary `MAP_READ` buffer). The source needs `COPY_SRC`.
    pub fn read_back(
        &self,
        src: &wgpu::Buffer,
        offset: u64,
        size: u64,
    ) -> Result<Vec<u8>, GpuError> {
        if size == 0 {
            return Ok(Vec::new());
        }
        let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        // One read-back at a time holds the kept buffer; others make their own.
        let mut kept = (size <= KEPT_READBACK_BYTES)
            .then(|| self.readback.try_lock().ok())
            .flatten();
        let staging = match kept.as_deref_mut() {
            Some(Some(b)) => b.clone(),
            Some(slot) => {
                let b = self.create_buffer("readback", KEPT_READBACK_BYTES, usage)?;
                *slot = Some(b.clone());
                b
            }
            None => self.create_buffer("readback", size, usage)?,
        };
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("readback"),
            });
        enc.copy_buffer_to_buffer(src, offset, &staging, 0, size);
        self.queue.submit([enc.finish()]);
        let slice = staging.slice(..size);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.wait_idle()?;
        rx.recv()
            .map_err(|_| GpuError::Map {
                message: "map callback never ran".into(),
            })?
            .map_err(|e| GpuError::Map {
                message: e.to_string(),
            })?;
        let bytes = slice
            .get_mapped_range()
            .map_err(|e| GpuError::Map {
                message: e.to_string(),
            })?
            .to_vec();
        staging.unmap();
        Ok(bytes)
    }

    /// Reads back an `f32` buffer region (`count` values from element `first`).
    pub fn read_f32(
        &self,
        src: &wgpu::Buffer,
        first: u64,
        count: u64,
    ) -> Result<Vec<f32>, GpuError> {
        let bytes = self.read_back(src, first * 4, count * 4)?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }
}

/// The copy queue on `second` (family, index), or — with
/// [`CopyQueueMode::Shared`], for testing the copy-queue path on adapters
/// with one queue — on wgpu's own queue. [`CopyQueueMode::Off`] disables
/// it. A failure is logged and the passes copy on wgpu's queue.
fn open_transfer_queue(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    second: Option<(u32, u32)>,
    mode: CopyQueueMode,
) -> Option<TransferQueue> {
    #[cfg(any(target_os = "linux", target_os = "windows", target_os = "android"))]
    {
        let made = match (mode, second) {
            (CopyQueueMode::Off, _) => return None,
            (CopyQueueMode::Shared, _) => TransferQueue::new(device, queue, 0, 0, true),
            (_, Some((family, index))) => TransferQueue::new(device, queue, family, index, false),
            (_, None) => return None,
        };
        made.map_err(|e| tracing::warn!(%e, "no copy queue: copies stay on wgpu's queue"))
            .ok()
    }
    #[cfg(not(any(target_os = "linux", target_os = "windows", target_os = "android")))]
    {
        let _ = (device, queue, second, mode);
        None
    }
}

/// Which of naga's runtime checks our kernels are compiled with
/// (`no-loop-bound` (the default), `all` (wgpu's default), `none`; the CLI
/// reads `DYNVRAM_SHADER_CHECKS`). naga bounds every loop with an extra 64-bit counter
/// (against compilers that assume loops terminate); our loops all
/// terminate, and the counter keeps drivers from unrolling the small fixed
/// loops that hold accumulators in registers: on the H200 it made the M = 1
/// GEMVs 4× slower (w4a4 16384²: 0.273 → 0.068 ms; BENCHMARKS.md). Index
/// and binding bounds checks stay on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShaderChecks {
    /// wgpu's default: every check.
    All,
    /// Every check but the loop counters (the default).
    NoLoopBound,
    /// No checks.
    None,
}

/// wgpu's sub-allocation blocks: growing from 8 MiB of device memory (4 MiB
/// host-visible) instead of `Performance`'s fixed 128 MiB (64 MiB). Our
/// large buffers (weights, arenas, ring slots) get blocks of their own
/// either way; the small ones (parameters, scratch, read-back) filled a
/// first host-visible block of 64 MiB that the NVIDIA driver keeps
/// resident: a third of the ring's size in host RAM (R1, run P1).
const MEMORY_HINTS: wgpu::MemoryHints = wgpu::MemoryHints::Manual {
    suballocated_device_memory_block_size: (8 << 20)..(256 << 20),
};

/// How the integer GEMVs at decode sizes (M <= 8) get their activation
/// codes ([`GpuOptions::spread_quant`]). Every mode gives the same codes and
/// scales bit for bit; they differ in launches and in who does the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpreadQuant {
    /// A quantization launch per linear input (`linear_rotate_quant*.wgsl`,
    /// `linear_add_norm_quant*.wgsl`), one workgroup per row, then the
    /// GEMV reading its codes.
    Off,
    /// The rotation spread over many workgroups (`linear_rotate_max.wgsl`:
    /// rotated f32 rows and each chunk's absmax), then a GEMV that codes
    /// the rotated rows itself (`linear_gemv_in_rotated.wgsl`; every GEMV
    /// workgroup codes the whole row again).
    InGemv,
    /// The same spread rotation, then a small kernel of many workgroups
    /// (`linear_rotated_codes.wgsl`) coding the rows once, into the codes
    /// and scales the quantization launches write; then the GEMV reading
    /// codes, as with [`Self::Off`]. One launch more than [`Self::InGemv`],
    /// the GEMVs as fast as with [`Self::Off`]. The default: an int4
    /// Llama-7B token on the H200 at 289.7 tok/s against 272.7 with
    /// [`Self::Off`] and 178.6 with [`Self::InGemv`] (BENCHMARKS.md, run
    /// P1).
    #[default]
    CodeKernel,
    /// The spread rotation and the coding in one launch
    /// (`linear_rotate_codes.wgsl`): the last workgroup of a row to finish
    /// its chunk codes the row, so the rotation's workgroups never wait for
    /// each other. Two launches a quantized linear with the GEMV, against
    /// [`Self::CodeKernel`]'s three, and yet slower on the H100 (session
    /// 34, int4 Llama-7B: 269.6-270.2 tok/s against 278.2-282.8): the
    /// row's coding by one workgroup sits between the rotation and the GEMV.
    OneLaunch,
}

impl SpreadQuant {
    /// Whether the rotation is spread (the integer layers can then fold the
    /// norm before them and the residual add after them).
    pub fn spread(self) -> bool {
        self != Self::Off
    }
}

/// `0` or `off`, `1` or `gemv` ([`SpreadQuant::InGemv`]), `codes`
/// ([`SpreadQuant::CodeKernel`]), `one` ([`SpreadQuant::OneLaunch`]).
impl std::str::FromStr for SpreadQuant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "" | "0" | "off" => Ok(Self::Off),
            "1" | "gemv" => Ok(Self::InGemv),
            "codes" => Ok(Self::CodeKernel),
            "one" => Ok(Self::OneLaunch),
            other => Err(format!(
                "spread quantization `{other}`: want 0|off, 1|gemv, codes or one"
            )),
        }
    }
}

impl std::str::FromStr for ShaderChecks {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "" | "no-loop-bound" => Ok(Self::NoLoopBound),
            "all" => Ok(Self::All),
            "none" => Ok(Self::None),
            other => Err(format!(
                "shader checks `{other}`: want no-loop-bound, all or none"
            )),
        }
    }
}

/// Whether `adapter` grants `unpack2x16float` (`SHADER_F16_IN_F32`: every
/// backend but Mesa's Vulkan without f16).
fn grants_f16_unpack(adapter: &wgpu::Adapter) -> bool {
    adapter
        .get_downlevel_capabilities()
        .flags
        .contains(wgpu::DownlevelFlags::SHADER_F16_IN_F32)
}

/// How a device is opened, beyond the adapter: the library's knobs for
/// diagnosis, set by the embedder (the CLI reads them from `DYNVRAM_*`
/// variables; the library reads no environment for them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuOptions {
    /// Where the copy queue comes from.
    pub copy_queue: CopyQueueMode,
    /// Request cooperative matrices where offered (wgpu marks them
    /// experimental); false leaves them off and the GEMMs tiled.
    pub coop_matrix: bool,
    /// naga's runtime checks for our kernels.
    pub shader_checks: ShaderChecks,
    /// Invocations per workgroup of the fast fused rotate/quantize kernels
    /// instead of their default per K (tuning; where the size does not fit,
    /// the default runs).
    pub quant_wgs: Option<u32>,
    /// How the integer GEMVs at decode sizes get their activation codes
    /// (the same codes bit for bit in every mode): after a
    /// one-workgroup-per-row quantization launch ([`SpreadQuant::Off`]), or
    /// from rows rotated over many workgroups (`linear_rotate_max.wgsl`),
    /// coded inside every GEMV workgroup ([`SpreadQuant::InGemv`]) or once
    /// by a small many-workgroup kernel ([`SpreadQuant::CodeKernel`]) or
    /// by the rotation's last workgroup a row ([`SpreadQuant::OneLaunch`]).
    /// Spread, integer layers also fold the RMS norm before them (into the
    /// rotation launch) and the residual add after them (into the GEMV's
    /// epilogue). `CodeKernel` by default, the fastest on the H200 (run
    /// P1: int4 decode 6 % faster than `Off`); `InGemv` measured slower
    /// there (the GEMVs 2–2.5× slower for the coding every workgroup
    /// repeats, more than the spread rotation saves).
    pub spread_quant: SpreadQuant,
    /// The flash-attention kernel (and the one-walk kernel's shape)
    /// instead of the default per adapter and head dimension (tuning; where
    /// it does not fit a launch, the default runs).
    pub flash: Option<FlashKernel>,
    /// The decode-attention kernel's tuning instead of the default
    /// (tuning; where it does not fit a launch, the default runs).
    pub decode: Option<crate::decode_tuning::DecodeTuning>,
    /// The cooperative-matrix GEMM kernel for the layers that take one:
    /// [`CoopGemmKernel::Single`] by default (the measured one),
    /// [`CoopGemmKernel::Double`] for comparisons (where a layer does not
    /// fit it, the single-stage kernel runs).
    pub coop_gemm: CoopGemmKernel,
    /// Which GEMMs may take the SPIR-V kernels on
    /// `VK_NV_cooperative_matrix2` where the adapter has it: every one by
    /// default ([`SpirvGemm::Auto`]), float ones ([`SpirvGemm::Float`]), or
    /// none ([`SpirvGemm::Off`]: the extension stays disabled, and the
    /// flash-attention kernels cannot run either).
    pub spirv_gemm: SpirvGemm,
    /// How float layers of bf16 weights take the SPIR-V GEMM: the bf16
    /// kernels ([`Cm2Bf16::Staged`]) or converted to f16 for the f16
    /// kernels: a piece at a time every pass ([`Cm2Bf16::ViaF16`]), resident
    /// weights once as they load ([`Cm2Bf16::ViaF16Resident`]), or the two
    /// where the device runs those kernels ([`Cm2Bf16::Auto`], the default).
    pub cm2_bf16: Cm2Bf16,
    /// How integer layers of int4 weights take the SPIR-V GEMM: the int4
    /// kernels ([`Cm2Int4::Staged`]) or widened to int8 a piece at a time
    /// for the int8 kernels ([`Cm2Int4::ViaInt8`], the default).
    pub cm2_int4: Cm2Int4,
    /// Whether SPIR-V GEMMs whose tiles fill at most half the GPU split K
    /// across workgroups, and the tiles of a last wave at most half full
    /// too ([`Cm2Split::Waves`], the default; small grids only:
    /// [`Cm2Split::Auto`]), or take narrower tiles ([`Cm2Split::Off`]).
    pub cm2_split: Cm2Split,
    /// Whether two or three f16 linears of one input (q/k/v, gate/up) past
    /// the GEMVs share one SPIR-V GEMM launch where the device runs it
    /// ([`Cm2Stack::Auto`], the default: where a layer alone is a small
    /// grid or the stack fills the waves better; 0.83× of llama.cpp's
    /// Llama-7B prefill on the H100 against 0.78×), or launch one by one
    /// ([`Cm2Stack::Off`]).
    pub cm2_stack: Cm2Stack,
    /// A SPIR-V GEMM (by name, `dynvram_shaders::spirv::CM2_GEMMS`) that
    /// layers of its weights take wherever the first choice's tiles fill
    /// more than half the multiprocessors, instead of the first listed
    /// (`None`, the default): whole-model comparisons of kernels chosen
    /// only by name, such as the subgroup-scope ones. Small grids keep
    /// their choice (split K, the narrower tiles).
    pub cm2_large: Option<&'static str>,
    /// Whether kernels reading f16 words decode them with the hardware's
    /// conversion (`unpack2x16float`) where the adapter grants
    /// `SHADER_F16_IN_F32` (the default), or always in integer arithmetic
    /// (`false`: for comparisons and the tests of that path).
    pub f16_unpack: bool,
    /// How long a wait for the GPU may take before it is an error (a
    /// faulted kernel can leave a fence unsignalled; see [`wait_limit`]):
    /// [`DEFAULT_WAIT_LIMIT`]. Process-wide: the last device opened sets it.
    pub wait_limit: std::time::Duration,
    /// A folder for the driver's compiled pipelines between runs (one file
    /// per adapter class, `wgpu::util::pipeline_cache_key`; Vulkan only):
    /// loaded when the device opens, written back when it is dropped or at
    /// [`Gpu::save_pipeline_cache`] if pipelines were compiled. A damaged or
    /// foreign file is logged and ignored. `None` (the default): no cache.
    pub pipeline_cache: Option<PathBuf>,
}

impl Default for GpuOptions {
    fn default() -> Self {
        Self {
            copy_queue: CopyQueueMode::Auto,
            coop_matrix: true,
            shader_checks: ShaderChecks::NoLoopBound,
            quant_wgs: None,
            spread_quant: SpreadQuant::CodeKernel,
            flash: None,
            decode: None,
            coop_gemm: CoopGemmKernel::Single,
            spirv_gemm: SpirvGemm::default(),
            cm2_bf16: Cm2Bf16::default(),
            cm2_int4: Cm2Int4::default(),
            cm2_split: Cm2Split::default(),
            cm2_stack: Cm2Stack::default(),
            cm2_large: None,
            f16_unpack: true,
            wait_limit: DEFAULT_WAIT_LIMIT,
            pipeline_cache: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SpreadQuant;

    #[test]
    fn spread_quant_parses_its_names() {
        for (s, want) in [
            ("0", SpreadQuant::Off),
            ("off", SpreadQuant::Off),
            ("", SpreadQuant::Off),
            ("1", SpreadQuant::InGemv),
            ("gemv", SpreadQuant::InGemv),
            ("codes", SpreadQuant::CodeKernel),
            (" codes\n", SpreadQuant::CodeKernel),
            ("one", SpreadQuant::OneLaunch),
        ] {
            assert_eq!(s.parse::<SpreadQuant>(), Ok(want), "{s:?}");
        }
        assert!("2".parse::<SpreadQuant>().is_err());
        assert!(!SpreadQuant::Off.spread());
        assert!(SpreadQuant::InGemv.spread() && SpreadQuant::CodeKernel.spread());
        assert!(SpreadQuant::OneLaunch.spread());
        assert_eq!(SpreadQuant::default(), SpreadQuant::CodeKernel);
    }
}
