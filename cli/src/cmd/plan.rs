//! `dynvram plan MODEL`: which weights stay resident, which stream, and the
//! bytes moved per pass — the same computation a run makes, with no GPU.

use std::path::PathBuf;
use std::process::ExitCode;

use dynvram_memory::{Budget, CapacitySource, Placement};
use dynvram_models::mlp_stack;
use serde::Serialize;

use crate::cmd::budget_args::BudgetArgs;
use crate::output::{print_json, size};

/// Arguments of `dynvram plan`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model file (an MLP stack: `blocks.{i}.mlp.fc1/fc2`).
    model: PathBuf,
    #[command(flatten)]
    pub(crate) budget: BudgetArgs,
    /// Activation rows the run would use (sizes the scratch reserve).
    #[arg(long, default_value_t = 4)]
    rows: usize,
    /// List every tensor, not only the totals.
    #[arg(long)]
    tensors: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    model: PathBuf,
    capacity: u64,
    usable: u64,
    scratch: u64,
    arena_bytes: u64,
    resident_tensors: usize,
    streamed_tensors: usize,
    resident_bytes: u64,
    streamed_bytes_per_pass: u64,
    tensors: Vec<(String, u64, Placement)>,
}

/// Runs the subcommand.
pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let probe = mlp_stack::Probe::open(&args.model)?;
    let config = args.budget.config()?;
    let Some(capacity) = config.vram_budget else {
        anyhow::bail!(
            "`dynvram plan` needs --vram-budget GIB (it runs without a GPU, so it cannot ask the driver)"
        );
    };
    let usable = Budget::new(capacity, CapacitySource::Explicit, config)?.usable();
    let rows = probe.rows(args.rows);
    let spec = probe.spec(rows);
    let (plan, weights) = dynvram_runtime::plan_spec(&spec, usable)?;
    let p = &plan.plan;
    let report = Report {
        model: args.model.clone(),
        capacity,
        usable,
        scratch: plan.scratch,
        arena_bytes: plan.arena_bytes,
        resident_tensors: p.resident,
        streamed_tensors: p.streamed,
        resident_bytes: p.resident_bytes,
        streamed_bytes_per_pass: p.streamed_bytes,
        tensors: weights
            .iter()
            .zip(&p.tensors)
            .map(|(w, t)| (w.name.clone(), w.size, t.placement))
            .collect(),
    };
    if json {
        print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("model      {}", report.model.display());
    println!(
        "budget     {} usable of {} (scratch {}, 2 arenas of {})",
        size(usable),
        size(capacity),
        size(plan.scratch),
        size(plan.arena_bytes)
    );
    println!(
        "resident   {} in {} tensors",
        size(p.resident_bytes),
        p.resident
    );
    println!(
        "streamed   {} in {} tensors, moved every pass",
        size(p.streamed_bytes),
        p.streamed
    );
    if args.tensors {
        for (name, bytes, placement) in &report.tensors {
            println!("  {placement:?}\t{:>10}  {name}", size(*bytes));
        }
    }
    Ok(ExitCode::SUCCESS)
}
