//! Launch profiling: while a recording is open on a
//! [`PipelineCache`](crate::ops::cache::PipelineCache), every
//! launch's compute pass writes GPU timestamps at its start and end, and
//! its label and [`Cost`] are kept;
//! [`PipelineCache::finish_profile`](crate::ops::cache::PipelineCache::finish_profile) reads
//! them back as [`KernelSample`]s. Adapters without `TIMESTAMP_QUERY` still
//! get the launches and costs, without times.

use std::sync::Mutex;

use serde::Serialize;

use crate::device::{Gpu, GpuError};

/// What a launch moves and computes, for the profile's roofline columns.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Cost {
    /// Bytes read and written from device memory (a lower bound: each
    /// operand once).
    pub bytes: u64,
    /// Arithmetic operations (a multiply-add counts 2).
    pub flops: u64,
}

impl Cost {
    /// A launch that reads `read` and writes `written` bytes, `flops` ops.
    pub fn new(read: u64, written: u64, flops: u64) -> Self {
        Self {
            bytes: read + written,
            flops,
        }
    }
}

/// Queries per query set (wgpu's maximum): two per launch.
const QUERIES_PER_SET: u32 = 4096;

/// Query sets a recording may grow to (launches beyond are counted, untimed).
const MAX_SETS: usize = 16;

/// An open recording.
#[derive(Debug, Default)]
pub(crate) struct Recording {
    /// Whether the device writes timestamps.
    timestamps: bool,
    sets: Vec<wgpu::QuerySet>,
    launches: Vec<(String, Cost)>,
}

/// One launch as profiled.
#[derive(Debug, Clone, Serialize)]
pub struct KernelSample {
    /// The op and its variant.
    pub label: String,
    /// Bytes and FLOPs.
    pub bytes: u64,
    /// Arithmetic operations.
    pub flops: u64,
    /// GPU start and end in nanoseconds on the device clock, when timed.
    pub gpu_ns: Option<(f64, f64)>,
}

/// The open recording of a [`crate::ops::cache::PipelineCache`], if any.
#[derive(Debug, Default)]
pub(crate) struct Profiler(Mutex<Option<Recording>>);

impl Profiler {
    /// Opens a recording (dropping any earlier one): later launches write
    /// timestamps where the device has `TIMESTAMP_QUERY`.
    pub(crate) fn start(&self, gpu: &Gpu) {
        let timestamps = gpu
            .device
            .features()
            .contains(wgpu::Features::TIMESTAMP_QUERY);
        if let Ok(mut p) = self.0.lock() {
            *p = Some(Recording {
                timestamps,
                ..Recording::default()
            });
        }
    }

    /// Where the next launch writes its timestamps (and records it), while
    /// a recording is open.
    pub(crate) fn slot(
        &self,
        gpu: &Gpu,
        label: &dyn std::fmt::Display,
        cost: Cost,
    ) -> Option<(wgpu::QuerySet, u32)> {
        let mut guard = self.0.lock().ok()?;
        let rec = guard.as_mut()?;
        let i = rec.launches.len() as u32 * 2;
        rec.launches.push((label.to_string(), cost));
        if !rec.timestamps {
            return None;
        }
        let set = (i / QUERIES_PER_SET) as usize;
        if set >= MAX_SETS {
            return None;
        }
        if set == rec.sets.len() {
            let set = gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("profile"),
                ty: wgpu::QueryType::Timestamp,
                count: QUERIES_PER_SET,
            });
            rec.sets.push(set);
        }
        Some((rec.sets[set].clone(), i % QUERIES_PER_SET))
    }

    /// Closes the recording and reads its timestamps back. Call after the
    /// profiled work was submitted; waits for the GPU.
    pub(crate) fn finish(&self, gpu: &Gpu) -> Result<Vec<KernelSample>, GpuError> {
        let rec = self
            .0
            .lock()
            .ok()
            .and_then(|mut p| p.take())
            .unwrap_or_default();
        let mut ticks: Vec<u64> = Vec::new();
        for (s, set) in rec.sets.iter().enumerate() {
            let used = (rec.launches.len() as u32 * 2)
                .saturating_sub(s as u32 * QUERIES_PER_SET)
                .min(QUERIES_PER_SET);
            ticks.extend(read_queries(gpu, set, used)?);
        }
        let period = f64::from(gpu.queue.get_timestamp_period());
        Ok(rec
            .launches
            .into_iter()
            .enumerate()
            .map(|(i, (label, cost))| KernelSample {
                label,
                bytes: cost.bytes,
                flops: cost.flops,
                gpu_ns: match (ticks.get(2 * i), ticks.get(2 * i + 1)) {
                    (Some(&a), Some(&b)) if b >= a && a > 0 => {
                        Some((a as f64 * period, b as f64 * period))
                    }
                    _ => None,
                },
            })
            .collect())
    }
}

/// The first `used` timestamps of `set`, in ticks.
fn read_queries(gpu: &Gpu, set: &wgpu::QuerySet, used: u32) -> Result<Vec<u64>, GpuError> {
    if used == 0 {
        return Ok(Vec::new());
    }
    let bytes = u64::from(used) * 8;
    let resolve = gpu.create_buffer(
        "profile.resolve",
        bytes,
        wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
    )?;
    let mut enc = gpu
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("profile.resolve"),
        });
    enc.resolve_query_set(set, 0..used, &resolve, 0);
    gpu.queue.submit([enc.finish()]);
    let bytes = gpu.read_back(&resolve, 0, bytes)?;
    Ok(bytemuck::pod_collect_to_vec(&bytes))
}

/// One kernel (label) of a profile: its launches together.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileRow {
    /// The op and its variant.
    pub label: String,
    /// Launches.
    pub launches: u64,
    /// GPU microseconds, all launches (0 when untimed).
    pub gpu_us: f64,
    /// Bytes moved, all launches.
    pub bytes: u64,
    /// FLOPs, all launches.
    pub flops: u64,
    /// Bytes per second achieved, in GB/s (when timed).
    pub gb_per_s: Option<f64>,
    /// `gb_per_s` over the memory limit given to [`Profile::new`].
    pub of_limit: Option<f64>,
    /// Achieved TFLOP/s (when timed).
    pub tflops: Option<f64>,
    /// `tflops` over the matrix peak given to [`Profile::with_matrix_peak`].
    pub of_peak: Option<f64>,
}

/// Where one pass's time went: every kernel with its GPU time beside its
/// bytes and FLOPs, the CPU's recording and submitting, and the GPU's
/// idle gaps.
#[derive(Debug, Clone, Serialize)]
pub struct Profile {
    /// Kernels, the most GPU time first.
    pub rows: Vec<ProfileRow>,
    /// Launches in the pass.
    pub launches: u64,
    /// Whether GPU times were measured (the adapter has timestamps).
    pub timed: bool,
    /// Sum of the kernels' GPU time, µs.
    pub gpu_busy_us: f64,
    /// First kernel start to last kernel end, µs.
    pub gpu_span_us: f64,
    /// `gpu_span_us - gpu_busy_us`: the GPU between kernels (barriers,
    /// launch gaps, waiting for the CPU).
    pub gpu_idle_us: f64,
    /// CPU µs recording kernels.
    pub cpu_record_us: f64,
    /// CPU µs staging and submitting.
    pub cpu_submit_us: f64,
    /// CPU µs waiting for the GPU at the pass's end.
    pub cpu_wait_us: f64,
    /// Wall µs of the pass.
    pub wall_us: f64,
    /// Memory limit the rows are compared with, GB/s.
    pub limit_gb_per_s: Option<f64>,
    /// Matrix peak the rows' FLOP rates are compared with, TFLOP/s.
    pub matrix_peak_tflops: Option<f64>,
}

impl Profile {
    /// Aggregates `samples` of one pass with its CPU figures; `limit` is the
    /// device's measured memory rate in GB/s, if known.
    pub fn new(
        samples: &[KernelSample],
        stats: &crate::stats::PassStats,
        limit: Option<f64>,
    ) -> Self {
        let mut rows: Vec<ProfileRow> = Vec::new();
        let mut index = std::collections::HashMap::new();
        for s in samples {
            let i = *index.entry(s.label.clone()).or_insert_with(|| {
                rows.push(ProfileRow {
                    label: s.label.clone(),
                    launches: 0,
                    gpu_us: 0.0,
                    bytes: 0,
                    flops: 0,
                    gb_per_s: None,
                    of_limit: None,
                    tflops: None,
                    of_peak: None,
                });
                rows.len() - 1
            });
            let r = &mut rows[i];
            r.launches += 1;
            r.bytes += s.bytes;
            r.flops += s.flops;
            if let Some((a, b)) = s.gpu_ns {
                r.gpu_us += (b - a) / 1e3;
            }
        }
        let timed = !samples.is_empty() && samples.iter().all(|s| s.gpu_ns.is_some());
        for r in &mut rows {
            if timed && r.gpu_us > 0.0 {
                let gbs = r.bytes as f64 / r.gpu_us / 1e3;
                r.gb_per_s = Some(gbs);
                r.of_limit = limit.map(|l| gbs / l);
                r.tflops = Some(r.flops as f64 / r.gpu_us / 1e6);
            }
        }
        rows.sort_by(|a, b| b.gpu_us.total_cmp(&a.gpu_us));
        let busy: f64 = rows.iter().map(|r| r.gpu_us).sum();
        let starts = samples.iter().filter_map(|s| s.gpu_ns.map(|t| t.0));
        let ends = samples.iter().filter_map(|s| s.gpu_ns.map(|t| t.1));
        let span = match (starts.reduce(f64::min), ends.reduce(f64::max)) {
            (Some(a), Some(b)) if timed => (b - a) / 1e3,
            _ => 0.0,
        };
        Self {
            rows,
            launches: samples.len() as u64,
            timed,
            gpu_busy_us: busy,
            gpu_span_us: span,
            gpu_idle_us: (span - busy).max(0.0),
            cpu_record_us: stats.record_seconds * 1e6,
            cpu_submit_us: stats.submit_seconds * 1e6,
            cpu_wait_us: stats.wait_seconds * 1e6,
            wall_us: stats.seconds * 1e6,
            limit_gb_per_s: limit,
            matrix_peak_tflops: None,
        }
    }

    /// The rows' FLOP rates as shares of `peak` (the device's measured
    /// matrix rate, TFLOP/s), on the rows that do FLOPs.
    pub fn with_matrix_peak(mut self, peak: Option<f64>) -> Self {
        self.matrix_peak_tflops = peak;
        for r in &mut self.rows {
            r.of_peak = peak
                .zip(r.tflops.filter(|_| r.flops > 0))
                .map(|(p, t)| t / p);
        }
        self
    }
}
