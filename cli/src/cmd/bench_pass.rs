//! `dynvram bench pass`: target S1. One pass over a model `--ratio` times
//! the VRAM budget, against the same pass with its kernels left out
//! (upload-only) and the same pass with every weight resident
//! (compute-only). Prefetch works when the streamed pass costs little more
//! than the slower of the two.

use std::path::{Path, PathBuf};

use anyhow::Context;
use dynvram_models::mlp_stack::{self, Probe, Shape};
use dynvram_models::synth::SynthDtype;
use dynvram_runtime::ops::profile::Profile;
use dynvram_runtime::planning::{ARENAS, arena_offsets, arena_size};
use dynvram_runtime::{Model, Runtime, RuntimeConfig};
use serde::Serialize;

use crate::cmd::adapter_args::AdapterArgs;
use crate::cmd::budget_args::BudgetArgs;
use crate::cmd::profile;
use crate::cmd::ranges;
use crate::cmd::synth::DtypeArg;
use crate::output::{bytes_bar, print_json, size};

/// S1: the streamed pass may take this much longer than the slower of
/// upload-only and compute-only (target S1, bench/README.md).
pub const S1_LIMIT: f64 = 1.15;

/// Arguments of `dynvram bench pass`.
#[derive(Debug, clap::Args)]
pub struct PassArgs {
    /// MLP-stack file to stream; written with random weights of the shape
    /// below when absent.
    #[arg(long, default_value = "dynvram-bench-pass.safetensors")]
    file: PathBuf,
    /// Blocks of a generated stack (1 to 65 536).
    #[arg(long, default_value_t = 32, value_parser = ranges::int::<usize, 1, 65_536>)]
    blocks: usize,
    /// Residual width of a generated stack (1 to 1 048 576).
    #[arg(long, default_value_t = 4096, value_parser = ranges::int::<usize, 1, { 1 << 20 }>)]
    hidden: usize,
    /// Inner width of a generated stack (1 to 1 048 576).
    #[arg(long, default_value_t = 14336, value_parser = ranges::int::<usize, 1, { 1 << 20 }>)]
    ffn: usize,
    /// Stored dtype of a generated stack.
    #[arg(long, value_enum, default_value = "f16")]
    dtype: DtypeArg,
    /// Input rows, comma separated: one measurement each (few rows: the pass
    /// is upload-bound; many: compute-bound; each 1 to 65 536).
    #[arg(long, default_value = "1,16,64", value_delimiter = ',',
          value_parser = ranges::int::<usize, 1, 65_536>)]
    rows: Vec<usize>,
    /// The model's weights are this many times the usable budget (less the
    /// activations; above 0, at most 1 000 000).
    #[arg(long, default_value_t = 4.0, value_parser = ranges::positive::<1_000_000>)]
    ratio: f64,
    /// Timed passes per figure (the median is reported), after one warm-up
    /// (1 to 10 000).
    #[arg(long, default_value_t = 3, value_parser = ranges::int::<usize, 1, 10_000>)]
    passes: usize,
    /// After the timed passes of each row count, profile one more streamed
    /// pass (as `run --profile`).
    #[arg(long)]
    profile: bool,
    #[command(flatten)]
    adapter: AdapterArgs,
    #[command(flatten)]
    pub(crate) budget: BudgetArgs,
}

/// One row count's figures.
#[derive(Debug, Serialize)]
struct PassFigure {
    rows: usize,
    streamed_bytes: u64,
    streamed_seconds: f64,
    upload_only_seconds: f64,
    compute_only_seconds: f64,
    /// streamed / max(upload-only, compute-only).
    ratio: f64,
    s1_met: bool,
    ring_stalls: u64,
    /// The streamed pass's output equals the resident pass's, bit for bit.
    identical: bool,
    /// With `--profile`: one streamed pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<Profile>,
}

#[derive(Debug, Serialize)]
struct PassReport {
    adapter: String,
    /// Where the streamed copies ran (`Runtime::copies_on`).
    copies_on: String,
    file: PathBuf,
    model_bytes: u64,
    usable_budget: u64,
    s1_limit: f64,
    figures: Vec<PassFigure>,
}

/// Runs `bench pass`.
pub fn run(args: PassArgs, json: bool) -> anyhow::Result<std::process::ExitCode> {
    if args.budget.vram_budget.is_some() {
        anyhow::bail!("bench pass sets the budget itself (model / --ratio); drop --vram-budget");
    }
    if !(args.ratio.is_finite() && args.ratio >= 1.0) {
        anyhow::bail!("--ratio {} must be at least 1", args.ratio);
    }
    crate::cmd::outputs::check_outputs(&[&args.file], &[], &args.adapter)?;
    ensure_file(&args)?;
    let probe = Probe::open(&args.file)?;
    let model_bytes = probe.weight_bytes();
    let mut figures = Vec::new();
    let mut usable = 0;
    let mut adapter = String::new();
    let mut copies_on = "";
    let mut warned = false;
    for &rows in &args.rows {
        let rows = rows.max(1);
        let x = probe.input(rows);
        // Streamed and upload-only: usable budget = model / ratio (at least
        // what streaming needs). Activations are not the model: on top.
        let mut budget = args.budget.config()?;
        let scratch = mlp_stack::scratch_bytes(probe.shape(), rows);
        let floor = streaming_floor(&probe, rows)?;
        if floor >= model_bytes {
            anyhow::bail!(
                "{}: {} block(s): the two arenas a streamed pass needs ({}) hold the whole model ({}), so nothing would stream; use a stack of at least 3 blocks (--blocks)",
                args.file.display(),
                probe.shape().blocks,
                size(floor),
                size(model_bytes)
            );
        }
        let weights_budget = ((model_bytes as f64 / args.ratio) as u64).max(floor);
        if weights_budget == floor && !warned {
            tracing::warn!(
                "--ratio {} leaves less than a streamed pass needs (two arenas of the largest block, {}): the budget is raised to that, 1/{:.1} of the model",
                args.ratio,
                size(floor),
                model_bytes as f64 / floor.max(1) as f64
            );
            warned = true;
        }
        budget.vram_budget = Some(weights_budget + scratch + budget.reserve + budget.headroom);
        let rt = runtime(&args, budget)?;
        usable = rt.budget_report().usable;
        adapter = format!("{} [{}]", rt.gpu().info.name, rt.gpu().caps.backend);
        copies_on = rt.copies_on();
        let model = open(&rt, &probe, &args.file, rows)?;
        let (streamed, streamed_out) = timed_forward(args.passes, &rt, &model, &x, rows)?;
        let upload = timed(args.passes, || Ok(model.run_pass(&rt, None, |_| Ok(()))?))?;
        let streamed_profile = if args.profile {
            let limit = profile::limits(&rt);
            let ((), p) = profile::profiled(&rt, limit, || {
                let f = mlp_stack::forward_gpu(&rt, &model, &x, rows, None)?;
                Ok(((), f.stats))
            })?;
            Some(p)
        } else {
            None
        };
        drop(model);
        drop(rt);
        // Compute-only: the driver's whole budget, every weight resident.
        let rt = runtime(&args, args.budget.config()?)?;
        let model = open(&rt, &probe, &args.file, rows)?;
        if model.report().streamed_bytes > 0 {
            anyhow::bail!(
                "compute-only needs the whole model ({}) resident, but {} usable streams {}",
                size(model_bytes),
                size(rt.budget_report().usable),
                size(model.report().streamed_bytes)
            );
        }
        let (compute, resident_out) = timed_forward(args.passes, &rt, &model, &x, rows)?;
        let identical = streamed_out.out.len() == resident_out.out.len()
            && streamed_out
                .out
                .iter()
                .zip(&resident_out.out)
                .all(|(a, b)| a.to_bits() == b.to_bits());
        let ratio = streamed.seconds / upload.seconds.max(compute.seconds);
        figures.push(PassFigure {
            rows,
            streamed_bytes: streamed.stats.streamed_bytes,
            streamed_seconds: streamed.seconds,
            upload_only_seconds: upload.seconds,
            compute_only_seconds: compute.seconds,
            ratio,
            s1_met: ratio <= S1_LIMIT,
            ring_stalls: streamed.stats.ring_stalls,
            identical,
            profile: streamed_profile,
        });
        drop(model);
        drop(rt);
    }
    let report = PassReport {
        adapter,
        copies_on: copies_on.into(),
        file: args.file.clone(),
        model_bytes,
        usable_budget: usable,
        s1_limit: S1_LIMIT,
        figures,
    };
    let all_identical = report.figures.iter().all(|f| f.identical);
    if json {
        print_json(&report)?;
    } else {
        print_table(&report);
        for f in &report.figures {
            if let Some(p) = &f.profile {
                profile::print(&format!("streamed pass, {} rows", f.rows), p);
            }
        }
    }
    if !all_identical {
        eprintln!("FAIL: a streamed pass differs from the resident pass");
        return Ok(std::process::ExitCode::from(1));
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// Median seconds of `passes` runs (after one warm-up) and that run's stats.
struct Timed {
    seconds: f64,
    stats: dynvram_runtime::PassStats,
}

fn timed(
    passes: usize,
    mut pass: impl FnMut() -> anyhow::Result<dynvram_runtime::PassStats>,
) -> anyhow::Result<Timed> {
    pass()?;
    let mut runs = (0..passes.max(1))
        .map(|_| pass())
        .collect::<anyhow::Result<Vec<_>>>()?;
    runs.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    let stats = runs.swap_remove(runs.len() / 2);
    Ok(Timed {
        seconds: stats.seconds,
        stats,
    })
}

/// [`timed`] over forward passes; also returns the last pass's output.
fn timed_forward(
    passes: usize,
    rt: &Runtime,
    model: &Model,
    x: &[f32],
    rows: usize,
) -> anyhow::Result<(Timed, mlp_stack::GpuForward)> {
    let mut last = None;
    let t = timed(passes, || {
        let f = mlp_stack::forward_gpu(rt, model, x, rows, None)?;
        let s = f.stats.clone();
        last = Some(f);
        Ok(s)
    })?;
    Ok((t, last.context("no pass ran")?))
}

/// The least weight budget a streamed pass of the stack can run in: two
/// arenas, each holding the largest block's weights (scratch aside). A stack
/// of few blocks has blocks larger than `model / ratio`, and `--ratio`'s
/// budget alone failed the planner's own check.
fn streaming_floor(probe: &Probe, rows: usize) -> anyhow::Result<u64> {
    let (_, weights) = dynvram_runtime::plan_spec(&probe.spec(rows), u64::MAX)?;
    let (_, largest_block) = arena_offsets(&weights, |_| true);
    Ok(ARENAS * arena_size(largest_block))
}

fn runtime(args: &PassArgs, budget: dynvram_memory::BudgetConfig) -> anyhow::Result<Runtime> {
    Ok(Runtime::new(RuntimeConfig {
        adapter: args.adapter.choice(),
        budget,
        ..args.budget.host_config()?
    })?)
}

fn open(rt: &Runtime, probe: &Probe, file: &Path, rows: usize) -> anyhow::Result<Model> {
    Model::open(rt, &probe.spec(rows)).with_context(|| format!("opening {}", file.display()))
}

/// Writes the generated stack unless the file exists.
fn ensure_file(args: &PassArgs) -> anyhow::Result<()> {
    if args.file.exists() {
        return Ok(());
    }
    let shape = Shape {
        blocks: args.blocks,
        hidden: args.hidden,
        ffn: args.ffn,
    };
    let dtype = SynthDtype::from(args.dtype);
    let pb = bytes_bar(0, "writing");
    mlp_stack::synth::write(&args.file, shape, dtype, 0, &mut |done, total| {
        pb.set_length(total);
        pb.set_position(done);
    })
    .with_context(|| format!("writing {}", args.file.display()))?;
    pb.finish_and_clear();
    Ok(())
}

fn print_table(r: &PassReport) {
    println!("adapter  {}", r.adapter);
    println!("copies   on {}", r.copies_on);
    println!(
        "model    {} ({}), usable budget {} (1/{:.1} of it)",
        r.file.display(),
        size(r.model_bytes),
        size(r.usable_budget),
        r.model_bytes as f64 / r.usable_budget.max(1) as f64
    );
    println!(
        "{:>5} {:>10} {:>11} {:>12} {:>13} {:>6} {:>7} {:>6} {:>9}",
        "rows",
        "streamed",
        "pass ms",
        "upload-only",
        "compute-only",
        "ratio",
        "S1",
        "stalls",
        "identical"
    );
    for f in &r.figures {
        println!(
            "{:>5} {:>10} {:>11.2} {:>12.2} {:>13.2} {:>6.3} {:>7} {:>6} {:>9}",
            f.rows,
            size(f.streamed_bytes),
            f.streamed_seconds * 1e3,
            f.upload_only_seconds * 1e3,
            f.compute_only_seconds * 1e3,
            f.ratio,
            if f.s1_met { "met" } else { "not met" },
            f.ring_stalls,
            if f.identical { "yes" } else { "NO" }
        );
    }
    println!("S1: streamed pass ≤ {S1_LIMIT} × max(upload-only, compute-only)");
}
