//! Timing GPU work for the benches and the profile: one timed submit
//! ([`submit_timed`]), the median of several ([`median_seconds`]), the
//! bandwidth baselines a kernel is measured against ([`copy_baseline`],
//! [`shader_baselines`]) and the fixed-pattern tensors kernels are timed on
//! ([`activation`]).

use std::time::Instant;

use dynvram_runtime::ops::encoder::Encoder;
use dynvram_runtime::{ActDtype, Gpu, GpuTensor};

/// Device-to-device copy bandwidth (read + write bytes per second, the
/// convention of PyTorch's device-copy figure in BENCHMARKS.md): the limit a weight stream
/// is measured against.
pub(crate) fn copy_baseline(gpu: &Gpu, bytes: u64, reps: usize) -> anyhow::Result<f64> {
    let usage = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let bytes = bytes.min(gpu.caps.max_buffer_size) / 4 * 4;
    let src = gpu.create_buffer("bench.copy_src", bytes, usage)?;
    let dst = gpu.create_buffer("bench.copy_dst", bytes, usage)?;
    let run = |times: usize| {
        submit_timed(gpu, |enc| {
            for _ in 0..times {
                enc.commands()
                    .copy_buffer_to_buffer(&src, 0, &dst, 0, bytes);
            }
            Ok(())
        })
    };
    run(2)?;
    let per = median_seconds(reps, run)?;
    Ok(2.0 * bytes as f64 / per / 1e9)
}

/// Invocations per workgroup of the streaming baselines (`stream.wgsl`'s `WGS`).
const STREAM_WGS: u32 = 256;

/// What a shader reaches streaming `bytes` (GB/s): a vec4 copy (read +
/// write bytes, like [`copy_baseline`]) and a read-only pass (the bound of a
/// GEMV, which reads its weights once). On NVIDIA `copy_buffer_to_buffer`
/// may run on a copy engine slower than the SMs, so the copy engine alone
/// understates the limit.
pub(crate) fn shader_baselines(gpu: &Gpu, bytes: u64, reps: usize) -> anyhow::Result<(f64, f64)> {
    let usage = wgpu::BufferUsages::STORAGE;
    let bytes = bytes.min(gpu.caps.max_storage_binding) / 16 * 16;
    anyhow::ensure!(
        bytes > 0,
        "--copy-size must be 0 (no baselines) or at least 16 bytes (one vec4 element)"
    );
    let src = gpu.create_buffer("bench.stream_src", bytes, usage)?;
    let dst = gpu.create_buffer("bench.stream_dst", bytes, usage)?;
    let time = |entry: &str| -> anyhow::Result<f64> {
        let (pipeline, bind) = stream_kernel(gpu, entry, &src, &dst)?;
        // Enough workgroups to fill any GPU; each strides over the rest.
        let groups = (bytes / 16).div_ceil(STREAM_WGS.into()).clamp(1, 8192) as u32;
        dispatch_seconds(gpu, &pipeline, &bind, groups, 2, reps)
    };
    let copy = 2.0 * bytes as f64 / time("stream_copy")? / 1e9;
    let read = bytes as f64 / time("stream_read")? / 1e9;
    Ok((copy, read))
}

/// Seconds of one launch of `groups` workgroups of `pipeline` with `bind`:
/// `warm` launches untimed, then the median of 5 measurements of `reps`
/// launches in one pass.
pub(crate) fn dispatch_seconds(
    gpu: &Gpu,
    pipeline: &wgpu::ComputePipeline,
    bind: &wgpu::BindGroup,
    groups: u32,
    warm: usize,
    reps: usize,
) -> anyhow::Result<f64> {
    let run = |times: usize| {
        submit_timed(gpu, |enc| {
            let mut pass = enc.commands().begin_compute_pass(&Default::default());
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, bind, &[]);
            for _ in 0..times {
                pass.dispatch_workgroups(groups, 1, 1);
            }
            Ok(())
        })
    };
    run(warm)?;
    median_seconds(reps, run)
}

/// `stream.wgsl`'s `entry` (`stream_copy`, `stream_read`) over `src` → `dst`,
/// with its bind group.
pub(crate) fn stream_kernel(
    gpu: &Gpu,
    entry: &str,
    src: &wgpu::Buffer,
    dst: &wgpu::Buffer,
) -> anyhow::Result<(wgpu::ComputePipeline, wgpu::BindGroup)> {
    let pipeline = gpu.create_compute_pipeline(
        &format!("bench.stream.{entry}"),
        dynvram_shaders::bench::STREAM,
        entry,
        &[("WGS", f64::from(STREAM_WGS))],
    )?;
    let bind = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("bench.stream"),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: src.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: dst.as_entire_binding(),
            },
        ],
    });
    Ok((pipeline, bind))
}

/// Seconds per repetition: the median of 5 submits of `reps` repetitions
/// each (GPU timestamps where the adapter has them, else wall time).
pub(crate) fn median_seconds(
    reps: usize,
    mut run: impl FnMut(usize) -> anyhow::Result<f64>,
) -> anyhow::Result<f64> {
    let reps = reps.max(1);
    let mut samples: Vec<f64> = (0..5).map(|_| run(reps)).collect::<Result<_, _>>()?;
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2] / reps as f64)
}

/// Records `record`'s commands into one submit and waits for it. Returns
/// the GPU time between timestamps written before and after the commands
/// where the device can write timestamps inside encoders, else the wall
/// time from submit to idle (which adds the submission's fixed cost).
pub(crate) fn submit_timed(
    gpu: &Gpu,
    record: impl FnOnce(&mut Encoder) -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    let stamps = wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS;
    let query = if gpu.device.features().contains(stamps) {
        let set = gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("bench.timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: 2,
        });
        let resolve = gpu.create_buffer(
            "bench.timestamps",
            16,
            wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        )?;
        Some((set, resolve))
    } else {
        None
    };
    let mut enc = Encoder::new(&gpu.device, "bench");
    if let Some((set, _)) = &query {
        enc.commands().write_timestamp(set, 0);
    }
    record(&mut enc)?;
    if let Some((set, resolve)) = &query {
        let enc = enc.commands();
        enc.write_timestamp(set, 1);
        enc.resolve_query_set(set, 0..2, resolve, 0);
    }
    let t = Instant::now();
    gpu.queue.submit([enc.finish()]);
    gpu.wait_idle()?;
    let wall = t.elapsed().as_secs_f64();
    let Some((_, resolve)) = query else {
        return Ok(wall);
    };
    let raw = gpu.read_back(&resolve, 0, 16)?;
    let ticks: &[u64] = bytemuck::cast_slice(&raw);
    let period_ns = f64::from(gpu.queue.get_timestamp_period());
    Ok(ticks[1].saturating_sub(ticks[0]) as f64 * period_ns * 1e-9)
}

/// A `[rows, cols]` tensor of `dtype` holding values in [-1, 1): a fixed
/// pattern per `seed` (the benches' activations, caches and outputs).
pub(crate) fn activation(
    gpu: &Gpu,
    label: &str,
    rows: u64,
    cols: u64,
    dtype: ActDtype,
    seed: u64,
) -> anyhow::Result<GpuTensor> {
    let data: Vec<f32> = (0..rows * cols)
        .map(|i| (((i + seed * 101) * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    Ok(dynvram_runtime::ops::host::upload(
        gpu,
        label,
        &data,
        vec![rows, cols],
        dtype,
    )?)
}
