//! `dynvram bench coop`: the cooperative matrices' own multiply-add rate
//! through WGSL (`coop_peak.wgsl`), with the operands in registers and
//! loaded from workgroup memory every round as the GEMM's inner loop does:
//! from 128-byte rows (every row of a tile on the same banks), from rows
//! padded by 16 bytes (conflict-free, as the GEMM's staged tiles), and
//! padded with the next round's tiles loaded before this round's products.
//! The ceiling any tensor-core kernel on this path can reach, so a GEMM or
//! attention target it cannot reach is shown by measurement, not guessed.

use std::process::ExitCode;

use dynvram_runtime::Gpu;
use dynvram_runtime::ops::linear::{CoopShape, coop_unusable};
use serde::Serialize;

use crate::cmd::adapter_args::AdapterArgs;
use crate::cmd::gpu_timing::dispatch_seconds;
use crate::output::print_json;

/// Subgroups per workgroup in `coop_peak.wgsl` (`NSG`).
const NSG: u64 = 4;
/// Independent accumulators per subgroup (`c0..c3`).
const CHAINS: u64 = 4;

/// Arguments of `dynvram bench coop`.
#[derive(Debug, clap::Args)]
pub struct CoopArgs {
    /// Workgroups per launch (enough to fill the largest GPUs many times).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=65_535))]
    groups: u32,
    /// Multiply-add rounds per subgroup.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    iters: u32,
    /// Launches per measurement (the median of 5 is reported).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1000))]
    reps: u32,
    #[command(flatten)]
    adapter: AdapterArgs,
}

#[derive(Debug, Serialize)]
struct Figure {
    /// Where the operands come from: `registers`, `shared` (rows of
    /// 4 matrix edges), `shared-padded` (rows padded by 8 f16) or
    /// `shared-double` (padded, the next round's tiles loaded first).
    operands: &'static str,
    seconds: f64,
    tflops: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    adapter: String,
    matrix_edge: u32,
    subgroup_size: u32,
    figures: Vec<Figure>,
}

/// Runs the subcommand.
pub fn run(a: CoopArgs, json: bool) -> anyhow::Result<ExitCode> {
    let gpu = Gpu::open(&a.adapter.choice())?;
    if let Some(why) = coop_unusable(&gpu.caps, CoopShape::default()) {
        anyhow::bail!(
            "no cooperative matrices to measure on {}: {why}",
            gpu.caps.name
        );
    }
    let mut figures = Vec::new();
    for (entry, operands) in [
        ("mma_registers", "registers"),
        ("mma_shared", "shared"),
        ("mma_shared_padded", "shared-padded"),
        ("mma_shared_double", "shared-double"),
    ] {
        let (seconds, tflops) = mma_rate(&gpu, entry, a.groups, a.iters, a.reps)?;
        figures.push(Figure {
            operands,
            seconds,
            tflops,
        });
    }
    let (edge, sg) = (gpu.caps.coop_matrix_edge, gpu.caps.subgroup_min_size);
    let report = Report {
        adapter: gpu.caps.name.clone(),
        matrix_edge: edge,
        subgroup_size: sg,
        figures,
    };
    if json {
        print_json(&report)?;
    } else {
        println!(
            "{}: f16 cooperative matrices {edge}x{edge}x{edge}, f32 sums, subgroups of {sg}",
            report.adapter
        );
        for f in &report.figures {
            println!(
                "  operands in {:<13} {:>8.1} TFLOP/s ({:.3} ms a launch)",
                f.operands,
                f.tflops,
                f.seconds * 1e3
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The multiply-add rate of `coop_peak.wgsl`'s `entry` on `gpu` (which has
/// cooperative matrices): `groups` workgroups of `iters` rounds, the median
/// of 5 measurements of `reps` launches; (seconds a launch, TFLOP/s).
pub fn mma_rate(
    gpu: &Gpu,
    entry: &str,
    groups: u32,
    iters: u32,
    reps: u32,
) -> anyhow::Result<(f64, f64)> {
    let edge = gpu.caps.coop_matrix_edge;
    let sg = gpu.caps.subgroup_min_size;
    let source = match edge {
        16 => dynvram_shaders::bench::COOP_PEAK16,
        _ => dynvram_shaders::bench::COOP_PEAK8,
    };
    let e = u64::from(edge);
    let bytes = u64::from(groups) * NSG * CHAINS * e * e * 4;
    let sums = gpu.create_buffer("bench.coop_sums", bytes, wgpu::BufferUsages::STORAGE)?;
    let flops = u64::from(groups) * NSG * CHAINS * u64::from(iters) * 2 * e * e * e;
    let pipeline = gpu.create_compute_pipeline(
        &format!("bench.coop.{entry}"),
        source,
        entry,
        &[("SG", f64::from(sg)), ("ITERS", f64::from(iters))],
    )?;
    let bind = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("bench.coop"),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[wgpu::BindGroupEntry {
            binding: 0,
            resource: sums.as_entire_binding(),
        }],
    });
    let seconds = dispatch_seconds(gpu, &pipeline, &bind, groups, 1, reps as usize)?;
    Ok((seconds, flops as f64 / seconds / 1e12))
}
