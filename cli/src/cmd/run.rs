//! `dynvram run [FILE]`: run an MLP-stack model under a VRAM budget, streaming
//! what does not fit, and verify the output against a CPU reference.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use dynvram_models::mlp_stack::{self, builtin};
use dynvram_runtime::ops::profile::Profile;
use dynvram_runtime::{Model, Runtime, RuntimeConfig, trace::Trace};
use serde::Serialize;

use crate::cmd::adapter_args::AdapterArgs;
use crate::cmd::budget_args::BudgetArgs;
use crate::cmd::profile;
use crate::output::{print_json, size};

/// Arguments of `dynvram run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A safetensors file of MLP blocks (`blocks.{i}.mlp.fc1/fc2`). Default:
    /// the built-in model, generated once into the cache directory.
    file: Option<PathBuf>,
    #[command(flatten)]
    adapter: AdapterArgs,
    #[command(flatten)]
    pub(crate) budget: BudgetArgs,
    /// Activation arithmetic of int4 layers.
    #[arg(long, value_enum, default_value = "auto")]
    linear_dtype: LinearDtypeArg,
    /// Input rows (default 4; 1 to 65 536). A file with an `input` tensor
    /// sets its own: another value given here is an error.
    #[arg(long, value_parser = crate::cmd::ranges::int::<usize, 1, 65_536>)]
    rows: Option<usize>,
    /// Passes to run (the first includes pipeline compilation; 1 to 10 000).
    #[arg(long, default_value_t = 2, value_parser = crate::cmd::ranges::int::<usize, 1, 10_000>)]
    passes: usize,
    #[command(flatten)]
    traces: crate::cmd::trace_args::TraceArgs,
    /// Profile the last pass: every kernel's GPU time beside its bytes,
    /// FLOPs and the device's memory rate, the CPU's recording, staging and
    /// submitting, and the GPU's idle gaps (as `generate --profile`).
    #[arg(long)]
    profile: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    adapter: String,
    backend: String,
    /// Where streamed copies ran (`Runtime::copies_on`).
    copies_on: String,
    file: PathBuf,
    model: dynvram_runtime::ModelReport,
    budget: dynvram_runtime::BudgetReport,
    pass: dynvram_runtime::PassStats,
    check: mlp_stack::Verification,
    block_tolerance: f32,
    end_to_end_tolerance: f32,
    /// With `--profile`: the last pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<Profile>,
}

/// Runs the subcommand.
pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let file = match &args.file {
        Some(f) => f.clone(),
        None => builtin::ensure_cached_in(&crate::cmd::cache_dir())?,
    };
    crate::cmd::outputs::check_outputs(&[&file], &args.traces.outputs(), &args.adapter)?;
    let probe = mlp_stack::Probe::open(&file)?;
    let mut budget = args.budget.config()?;
    if budget.vram_budget.is_none() && args.file.is_none() {
        // The built-in model demonstrates streaming: our own usage is held
        // to half of the model (plus the reserve and headroom) by default.
        budget.vram_budget = Some(probe.weight_bytes() / 2 + budget.reserve + budget.headroom);
    }
    let config = RuntimeConfig {
        adapter: args.adapter.choice(),
        budget,
        linear_dtype: args.linear_dtype.into(),
        ..args.budget.host_config()?
    };
    let rt = Runtime::new(config)?;
    let rows = probe.rows(args.rows.unwrap_or(4));
    if let Some(asked) = args.rows
        && asked != rows
    {
        anyhow::bail!(
            "--rows {asked}: {} has an `input` tensor of {rows} rows, which is used",
            file.display()
        );
    }
    let model = Model::open(&rt, &probe.spec(rows))
        .with_context(|| format!("opening {}", file.display()))?;
    let x = probe.input(rows);
    let mut trace = Trace::new();
    let mut result = None;
    let mut last_profile = None;
    let limit = if args.profile {
        profile::limits(&rt)
    } else {
        profile::Limits::default()
    };
    let passes = args.passes;
    for i in 0..passes {
        trace = Trace::new();
        let mut pass = || mlp_stack::forward_gpu(&rt, &model, &x, rows, Some(&mut trace));
        if args.profile && i + 1 == passes {
            let (out, p) = profile::profiled(&rt, limit, || {
                let out = pass()?;
                let stats = out.stats.clone();
                Ok((out, stats))
            })?;
            result = Some(out);
            last_profile = Some(p);
        } else {
            result = Some(pass()?);
        }
    }
    let gpu = result.context("no pass ran")?;
    args.traces.write(&trace)?;
    let check = probe.verify(&model, &x, &gpu)?;
    let ok = check.pass;
    let report = Report {
        adapter: rt.gpu().info.name.clone(),
        backend: rt.gpu().caps.backend.clone(),
        copies_on: rt.copies_on().into(),
        file,
        model: model.report(),
        budget: rt.budget_report(),
        pass: gpu.stats,
        check,
        block_tolerance: mlp_stack::BLOCK_TOLERANCE,
        end_to_end_tolerance: mlp_stack::TOLERANCE,
        profile: last_profile,
    };
    if json {
        print_json(&report)?;
    } else {
        let m = &report.model;
        let b = &report.budget;
        println!("adapter    {} [{}]", report.adapter, report.backend);
        println!(
            "model      {} ({} blocks, {})",
            report.file.display(),
            m.blocks,
            size(m.model_bytes)
        );
        println!(
            "budget     {} usable of {} ({}), reserve {}, headroom {}",
            size(b.usable),
            size(b.capacity),
            b.source,
            size(b.reserve),
            size(b.headroom)
        );
        println!(
            "resident   {} in {} tensors (loaded_vram {})",
            size(m.resident_bytes),
            m.resident_tensors,
            size(b.loaded_vram)
        );
        println!(
            "streamed   {} in {} tensors per pass, 2 arenas of {}, peak VRAM {}",
            size(m.streamed_bytes),
            m.streamed_tensors,
            size(m.arena_bytes),
            size(b.peak)
        );
        println!(
            "pass       {:.1} ms, {} uploaded, {} submits, {} ring stalls",
            report.pass.seconds * 1e3,
            size(report.pass.streamed_bytes),
            report.pass.submits,
            report.pass.ring_stalls
        );
        println!("copies     on {}", report.copies_on);
        let c = &report.check;
        println!(
            "check      worst block {} at {:.2e} of its max (limit {:.0e}); end to end {:.3e} = {:.2e} of max |reference| {:.3e} (limit {:.0e})",
            c.worst_block,
            c.worst_block_rel,
            report.block_tolerance,
            c.max_error,
            c.end_to_end_rel,
            c.max_reference,
            report.end_to_end_tolerance
        );
        if let Some(g) = &c.golden {
            println!(
                "golden     `{}` of the file: {:.2e} of its max (limit {:.0e})",
                g.tensor, g.rel, report.end_to_end_tolerance
            );
        }
        if let Some(p) = &report.profile {
            profile::print("last pass", p);
        }
        println!("{}", if ok { "PASS" } else { "FAIL" });
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `--linear-dtype`: the activation arithmetic of int4 layers.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LinearDtypeArg {
    /// Follow each file's `linear_dtype` and the adapter.
    Auto,
    /// int4 activations everywhere.
    Int4,
    /// int8 activations everywhere.
    Int8,
}

impl From<LinearDtypeArg> for dynvram_quant::LinearDtypeOverride {
    fn from(a: LinearDtypeArg) -> Self {
        match a {
            LinearDtypeArg::Auto => Self::Auto,
            LinearDtypeArg::Int4 => Self::Int4,
            LinearDtypeArg::Int8 => Self::Int8,
        }
    }
}
