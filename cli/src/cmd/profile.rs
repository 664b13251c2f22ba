//! `--profile`: one pass with every launch timed, printed as a table of
//! kernels beside their bytes, FLOPs and the device's measured memory rate,
//! with the CPU's recording and submitting and the GPU's idle gaps.

use dynvram_runtime::ops::profile::Profile;
use dynvram_runtime::{PassStats, Runtime};

use crate::output::size;

/// Bytes of the memory-rate measurement the rows are compared with.
const LIMIT_BYTES: u64 = 128 << 20;

/// The device's shader read rate (GB/s), the limit of a weight-streaming
/// kernel; `None` (with a warning) when it cannot be measured.
pub fn memory_limit(rt: &Runtime) -> Option<f64> {
    match crate::cmd::gpu_timing::shader_baselines(rt.gpu(), LIMIT_BYTES, 5) {
        Ok((_, read)) => Some(read),
        Err(e) => {
            tracing::warn!(error = %e, "profile: the memory rate could not be measured");
            None
        }
    }
}

/// Runs `pass` with profiling on and returns its profile (profiling is
/// switched off again whatever the pass returns).
pub fn profiled<T>(
    rt: &Runtime,
    limit: Option<f64>,
    pass: impl FnOnce() -> anyhow::Result<(T, PassStats)>,
) -> anyhow::Result<(T, Profile)> {
    let (gpu, cache) = (rt.gpu(), rt.pipelines());
    cache.start_profile(gpu);
    let result = pass();
    let samples = cache.finish_profile(gpu);
    let (value, stats) = result?;
    Ok((value, Profile::new(&samples?, &stats, limit)))
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
    println!(
        "  {:<44} {:>6} {:>10} {:>6} {:>10} {:>8} {:>6} {:>8}",
        "kernel", "n", "GPU µs", "%", "bytes", "GB/s", "limit", "TFLOP/s"
    );
    let opt = |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
    for r in &p.rows {
        println!(
            "  {:<44} {:>6} {:>10.1} {:>6.1} {:>10} {:>8} {:>6} {:>8}",
            r.label,
            r.launches,
            r.gpu_us,
            100.0 * r.gpu_us / p.gpu_busy_us.max(1e-9),
            size(r.bytes),
            opt(r.gb_per_s, 0),
            opt(r.of_limit, 2),
            opt(r.tflops, 2)
        );
    }
}
