//! `--profile`: one pass with every launch timed, printed as a table of
//! kernels beside their bytes, FLOPs, the device's measured memory rate and
//! its cooperative matrices' measured peak, with the CPU's recording and
//! submitting and the GPU's idle gaps.

use dynvram_runtime::ops::linear::{CoopShape, coop_unusable};
use dynvram_runtime::ops::profile::Profile;
use dynvram_runtime::{PassStats, Runtime};

use crate::cmd::bench_coop::mma_rate;

use crate::output::size;

/// Bytes of the memory-rate measurement the rows are compared with.
const LIMIT_BYTES: u64 = 128 << 20;
/// `bench coop`'s registers-only probe, small: (workgroups, rounds,
/// launches a measurement) — 4.4 TFLOP a launch on 16x16 matrices, a few
/// milliseconds on a data-centre GPU.
const MATRIX_PROBE: (u32, u32, u32) = (2048, 1024, 2);

/// What a profile's rows are compared with, measured on the device before
/// the pass.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    /// The shader read rate, GB/s: the limit of a weight-streaming kernel.
    pub memory_gb_per_s: Option<f64>,
    /// The cooperative matrices' multiply-add rate with the operands in
    /// registers (`bench coop`'s first figure), TFLOP/s: the ceiling of a
    /// GEMM or attention kernel on this path.
    pub matrix_tflops: Option<f64>,
}

/// Measures the device's [`Limits`]; a figure that cannot be measured is
/// `None` (with a warning; the matrix rate also where the adapter has no
/// cooperative matrices).
pub fn limits(rt: &Runtime) -> Limits {
    let memory_gb_per_s = match crate::cmd::gpu_timing::shader_baselines(rt.gpu(), LIMIT_BYTES, 5) {
        Ok((_, read)) => Some(read),
        Err(e) => {
            tracing::warn!(error = %e, "profile: the memory rate could not be measured");
            None
        }
    };
    let gpu = rt.gpu();
    let matrix_tflops = coop_unusable(&gpu.caps, CoopShape::default())
        .is_none()
        .then(|| {
            let (groups, iters, reps) = MATRIX_PROBE;
            mma_rate(gpu, "mma_registers", groups, iters, reps)
                .map_err(|e| tracing::warn!(error = %e, "profile: the matrix rate could not be measured"))
                .ok()
                .map(|(_, tflops)| tflops)
        })
        .flatten();
    Limits {
        memory_gb_per_s,
        matrix_tflops,
    }
}

/// Runs `pass` with profiling on and returns its profile (profiling is
/// switched off again whatever the pass returns).
pub fn profiled<T>(
    rt: &Runtime,
    limits: Limits,
    pass: impl FnOnce() -> anyhow::Result<(T, PassStats)>,
) -> anyhow::Result<(T, Profile)> {
    let (gpu, cache) = (rt.gpu(), rt.pipelines());
    cache.start_profile(gpu);
    let result = pass();
    let samples = cache.finish_profile(gpu);
    let (value, stats) = result?;
    let p = Profile::new(&samples?, &stats, limits.memory_gb_per_s);
    Ok((value, p.with_matrix_peak(limits.matrix_tflops)))
}

/// The profile as text: a summary line, then one row per kernel.
pub fn print(title: &str, p: &Profile) {
    let ms = |us: f64| format!("{:.3} ms", us / 1e3);
    println!(
        "profile    {title}: {} launches{}",
        p.launches,
        if p.timed {
            ", GPU timestamps"
        } else {
            " (this adapter has no GPU timestamps: CPU times only)"
        }
    );
    println!(
        "  CPU      wall {} = recording {} + staging/submitting {} + waiting for the GPU {}",
        ms(p.wall_us),
        ms(p.cpu_record_us),
        ms(p.cpu_submit_us),
        ms(p.cpu_wait_us)
    );
    if p.timed {
        println!(
            "  GPU      busy {} in a span of {} (idle between kernels {}, {:.0} %)",
            ms(p.gpu_busy_us),
            ms(p.gpu_span_us),
            ms(p.gpu_idle_us),
            100.0 * p.gpu_idle_us / p.gpu_span_us.max(1e-9)
        );
    }
    if let Some(l) = p.limit_gb_per_s {
        println!("  limit    {l:.0} GB/s (this device's shader read rate, measured now)");
    }
    if let Some(t) = p.matrix_peak_tflops {
        println!(
            "  peak     {t:.1} TFLOP/s (this device's cooperative matrices, operands in registers, measured now)"
        );
    }
    println!(
        "  {:<44} {:>6} {:>10} {:>6} {:>10} {:>8} {:>6} {:>8} {:>6}",
        "kernel", "n", "GPU µs", "%", "bytes", "GB/s", "limit", "TFLOP/s", "peak"
    );
    let opt = |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
    for r in &p.rows {
        println!(
            "  {:<44} {:>6} {:>10.1} {:>6.1} {:>10} {:>8} {:>6} {:>8} {:>6}",
            r.label,
            r.launches,
            r.gpu_us,
            100.0 * r.gpu_us / p.gpu_busy_us.max(1e-9),
            size(r.bytes),
            opt(r.gb_per_s, 0),
            opt(r.of_limit, 2),
            opt(r.tflops, 2),
            opt(r.of_peak, 2)
        );
    }
}
