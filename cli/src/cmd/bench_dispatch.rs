//! `dynvram bench dispatch`: what one kernel launch costs the CPU (recording,
//! wgpu's encoding at finish, submitting) and the GPU, for a kernel of
//! almost no work, laid out three ways: a compute pass per launch (as the
//! ops record today), one pass with the pipeline and bind group set per
//! launch, and one pass with them set once. The floor every decode step's
//! few hundred launches stand on.

use std::process::ExitCode;
use std::time::Instant;

use dynvram_runtime::Gpu;
use serde::Serialize;

use crate::cmd::adapter_args::AdapterArgs;
use crate::output::print_json;

/// Arguments of `dynvram bench dispatch`.
#[derive(Debug, clap::Args)]
pub struct DispatchArgs {
    /// Launches per measurement (a decode step of a 32-layer model has ~500).
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    launches: u32,
    /// Repetitions (the median is reported).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    reps: u32,
    #[command(flatten)]
    adapter: AdapterArgs,
}

/// One layout's figures, in µs per launch.
#[derive(Debug, Serialize)]
struct Layout {
    layout: &'static str,
    record_us: f64,
    finish_us: f64,
    submit_us: f64,
    gpu_wait_us: f64,
    total_us: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    adapter: String,
    launches: u32,
    layouts: Vec<Layout>,
}

/// How the launches are laid out in passes.
#[derive(Debug, Clone, Copy)]
enum Mode {
    PassPerLaunch,
    OnePassRebind,
    OnePass,
}

/// Runs the subcommand.
pub fn run(a: DispatchArgs, json: bool) -> anyhow::Result<ExitCode> {
    let gpu = Gpu::open(&a.adapter.choice())?;
    let usage = wgpu::BufferUsages::STORAGE;
    let src = gpu.create_buffer("bench.dispatch_src", 4096, usage)?;
    let dst = gpu.create_buffer("bench.dispatch_dst", 4096, usage)?;
    let (pipeline, bind) = crate::cmd::gpu_timing::stream_kernel(&gpu, "stream_read", &src, &dst)?;
    let once = |mode: Mode| -> anyhow::Result<[f64; 4]> {
        let t0 = Instant::now();
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        match mode {
            Mode::PassPerLaunch => {
                for _ in 0..a.launches {
                    let mut pass = enc.begin_compute_pass(&Default::default());
                    pass.set_pipeline(&pipeline);
                    pass.set_bind_group(0, &bind, &[]);
                    pass.dispatch_workgroups(1, 1, 1);
                }
            }
            Mode::OnePassRebind | Mode::OnePass => {
                let mut pass = enc.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, &bind, &[]);
                for _ in 0..a.launches {
                    if matches!(mode, Mode::OnePassRebind) {
                        pass.set_pipeline(&pipeline);
                        pass.set_bind_group(0, &bind, &[]);
                    }
                    pass.dispatch_workgroups(1, 1, 1);
                }
            }
        }
        let t1 = Instant::now();
        let cb = enc.finish();
        let t2 = Instant::now();
        gpu.queue.submit([cb]);
        let t3 = Instant::now();
        gpu.wait_idle()?;
        let t4 = Instant::now();
        Ok([t1 - t0, t2 - t1, t3 - t2, t4 - t3].map(|d| d.as_secs_f64()))
    };
    let per = f64::from(a.launches) / 1e6;
    let mut layouts = Vec::new();
    for (mode, layout) in [
        (Mode::PassPerLaunch, "a compute pass per launch"),
        (
            Mode::OnePassRebind,
            "one pass, pipeline and bind group set per launch",
        ),
        (Mode::OnePass, "one pass, set once"),
    ] {
        once(mode)?;
        let mut runs = (0..a.reps)
            .map(|_| once(mode))
            .collect::<Result<Vec<_>, _>>()?;
        runs.sort_by(|x, y| x.iter().sum::<f64>().total_cmp(&y.iter().sum::<f64>()));
        let [record, finish, submit, wait] = runs[runs.len() / 2].map(|s| s / per);
        layouts.push(Layout {
            layout,
            record_us: record,
            finish_us: finish,
            submit_us: submit,
            gpu_wait_us: wait,
            total_us: record + finish + submit + wait,
        });
    }
    let report = Report {
        adapter: gpu.info.name.clone(),
        launches: a.launches,
        layouts,
    };
    if json {
        print_json(&report)?;
    } else {
        println!(
            "adapter    {} ({} launches of a one-workgroup kernel, median of {})",
            report.adapter, report.launches, a.reps
        );
        println!(
            "  {:<52} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "µs per launch", "record", "finish", "submit", "GPU wait", "total"
        );
        for l in &report.layouts {
            println!(
                "  {:<52} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                l.layout, l.record_us, l.finish_us, l.submit_us, l.gpu_wait_us, l.total_us
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
