//! Opening a GPU in tests, wgpu-style: the adapter comes from `WGPU_BACKEND` /
//! `WGPU_ADAPTER_NAME`; a test that needs a missing feature is reported as
//! *skipped* with the reason. With `DYNVRAM_REQUIRE_GPU=1` (CI) a missing
//! adapter is a failure, not a skip ([`crate::skip`]). With feature
//! `runtime`, runtimes at a budget too.

use dynvram_gpu::{AdapterChoice, Gpu};
use dynvram_quant::AdapterCaps;

use crate::skip::no_gpu;

/// Opens the test adapter. Returns `None` (after printing `skipped: …` with the
/// test name) when there is no adapter or `needs` rejects its caps.
///
/// `needs` returns `Err(reason)` for an adapter the test cannot use.
pub fn test_gpu(test: &str, needs: impl Fn(&AdapterCaps) -> Result<(), String>) -> Option<Gpu> {
    test_gpu_with(test, &AdapterChoice::default(), needs)
}

/// [`test_gpu`] on the adapter and with the device options of `choice`.
pub fn test_gpu_with(
    test: &str,
    choice: &AdapterChoice,
    needs: impl Fn(&AdapterCaps) -> Result<(), String>,
) -> Option<Gpu> {
    let gpu = match Gpu::open(choice) {
        Ok(gpu) => gpu,
        Err(e) => return no_gpu(test, e),
    };
    let tag = format!("{} [{}]", gpu.caps.name, gpu.caps.backend);
    match needs(&gpu.caps) {
        Ok(()) => {
            eprintln!("{test}: running on {tag}");
            Some(gpu)
        }
        Err(reason) => {
            eprintln!("{test}: skipped on {tag}: {reason}");
            None
        }
    }
}

/// One launch of `groups` workgroups of `pipeline` on its group-0
/// bindings 0, 1, … as `buffers` whole, with `immediates` (none where
/// empty), submitted; read the results back after.
pub fn dispatch_once(
    gpu: &Gpu,
    pipeline: &wgpu::ComputePipeline,
    buffers: &[&wgpu::Buffer],
    immediates: &[u8],
    groups: u32,
) {
    let entries: Vec<wgpu::BindGroupEntry<'_>> = (0..)
        .zip(buffers)
        .map(|(binding, b)| wgpu::BindGroupEntry {
            binding,
            resource: b.as_entire_binding(),
        })
        .collect();
    let bind = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &entries,
    });
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &bind, &[]);
        if !immediates.is_empty() {
            pass.set_immediates(0, immediates);
        }
        pass.dispatch_workgroups(groups, 1, 1);
    }
    gpu.queue.submit([enc.finish()]);
}

/// A `needs` for tests that run on any adapter.
pub fn any_adapter(_: &AdapterCaps) -> Result<(), String> {
    Ok(())
}

/// A `needs` for f16 tests: the adapter has `SHADER_F16`.
pub fn needs_f16(c: &AdapterCaps) -> Result<(), String> {
    if c.shader_f16 {
        Ok(())
    } else {
        Err("adapter lacks SHADER_F16".into())
    }
}

/// A `needs` for the tests of the typed error on adapters without
/// `SHADER_F16`.
pub fn lacks_f16(c: &AdapterCaps) -> Result<(), String> {
    if c.shader_f16 {
        Err("adapter has SHADER_F16".into())
    } else {
        Ok(())
    }
}

/// Whether the test adapter opens (for tests that open their own runtime;
/// `skipped: …` said otherwise).
pub fn have_gpu(test: &str) -> bool {
    test_gpu(test, any_adapter).is_some()
}

/// A runtime with a VRAM capacity of `vram_budget` bytes (the adapter's
/// when `None`), other settings default.
#[cfg(feature = "runtime")]
pub fn runtime(vram_budget: Option<u64>) -> dynvram_runtime::Runtime {
    use dynvram_runtime::memory::BudgetConfig;
    dynvram_runtime::Runtime::new(dynvram_runtime::RuntimeConfig {
        budget: BudgetConfig {
            vram_budget,
            ..BudgetConfig::default()
        },
        ..dynvram_runtime::RuntimeConfig::default()
    })
    .expect("runtime opens")
}

/// A capacity that keeps about a quarter of `spec`'s weights resident: the
/// reserve, the scratch, two arenas for the largest block, and a quarter of
/// the weights (the arenas alone exceed a quarter of a small model, so they
/// come on top).
#[cfg(feature = "runtime")]
pub fn quarter_budget(spec: &dynvram_runtime::ModelSpec) -> u64 {
    use dynvram_runtime::memory::BudgetConfig;
    let (_, weights) = dynvram_runtime::plan_spec(spec, u64::MAX).expect("plan");
    let model: u64 = weights.iter().map(|w| w.size).sum();
    let mut per_block = std::collections::HashMap::new();
    for w in &weights {
        *per_block.entry(w.block).or_insert(0u64) += w.size.next_multiple_of(256);
    }
    let arena = per_block.values().copied().max().unwrap_or(0);
    BudgetConfig::default().reserve + spec.scratch_bytes + 2 * arena + model / 4
}

/// A capacity holding the reserve, the scratch and two arenas of `spec`'s
/// largest group (`BlockSpec::groups`) and nothing more: no block larger
/// than one group can be double-buffered, so such blocks stream by part.
#[cfg(feature = "runtime")]
pub fn part_budget(spec: &dynvram_runtime::ModelSpec) -> u64 {
    use dynvram_runtime::memory::BudgetConfig;
    use dynvram_runtime::planning::{ARENA_ALIGN, arena_size};
    let (_, weights) = dynvram_runtime::plan_spec(spec, u64::MAX).expect("plan");
    let mut per_group = std::collections::HashMap::new();
    for w in &weights {
        *per_group.entry((w.block, w.group)).or_insert(0u64) +=
            w.size.next_multiple_of(ARENA_ALIGN);
    }
    let group = per_group.values().copied().max().unwrap_or(0);
    BudgetConfig::default().reserve + spec.scratch_bytes + 2 * arena_size(group)
}

/// A bare wgpu device on `backends` opened as the runtime opens its own
/// (host-memory import and a copy queue enabled where offered), and whether
/// `VK_EXT_external_memory_host` was enabled; or `None` under the skip rule.
pub fn bare_device(
    test: &str,
    backends: wgpu::Backends,
) -> Option<(wgpu::Device, wgpu::Queue, bool)> {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backends;
    let instance = wgpu::Instance::new(desc);
    let adapter =
        pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()));
    let adapter = match adapter {
        Ok(a) => a,
        Err(e) => return no_gpu(test, e),
    };
    let desc = wgpu::DeviceDescriptor {
        label: Some(test),
        required_limits: adapter.limits(),
        ..Default::default()
    };
    match dynvram_gpu::device::device_open::request_device(&adapter, &desc, Default::default()) {
        Ok((device, queue, extras)) => {
            eprintln!(
                "{test}: running on {} (host import {})",
                adapter.get_info().name,
                extras.host_import
            );
            Some((device, queue, extras.host_import))
        }
        Err(e) => no_gpu(test, format!("request_device failed: {e}")),
    }
}

/// [`bare_device`] on the backends `WGPU_BACKEND` selects (all without it).
pub fn test_device(test: &str) -> Option<(wgpu::Device, wgpu::Queue)> {
    let backends = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::all());
    bare_device(test, backends).map(|(d, q, _)| (d, q))
}

/// A `COPY_DST | COPY_SRC` device buffer of `size` bytes (rounded up to 4).
pub fn device_buffer(device: &wgpu::Device, size: u64) -> wgpu::Buffer {
    device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("test destination"),
        size: size.div_ceil(4).max(1) * 4,
        usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    })
}

/// Reads `len` bytes of `buffer` (a `COPY_SRC` buffer) back to the host.
pub fn read_back(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    buffer: &wgpu::Buffer,
    len: u64,
) -> Vec<u8> {
    let padded = len.div_ceil(4) * 4;
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("read back"),
        size: padded.max(4),
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, padded);
    queue.submit([encoder.finish()]);
    staging.map_async(wgpu::MapMode::Read, .., |r| r.expect("map for read back"));
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("poll");
    let view = staging.get_mapped_range(..).expect("mapped range");
    view[..len as usize].to_vec()
}
