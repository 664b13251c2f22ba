//! `dynvram conformance DIR`: runs ComfyUI's golden linear cases on the
//! selected adapter and checks each against the target of the path it took
//! (conformance README §7's two-tier rule; the stack per block, then end to end).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use dynvram_runtime::Gpu;
use dynvram_runtime::ops::linear::conformance::{CaseReport, run_dir};
use serde::Serialize;

use crate::cmd::adapter_args::AdapterArgs;
use crate::cmd::run::LinearDtypeArg;
use crate::output::print_json;

/// Arguments of `dynvram conformance`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A folder laid out like `fixtures/conformance` (`manifest.json` + case files).
    dir: PathBuf,
    /// Activation arithmetic: follow each file (auto) or force int4 / int8 everywhere.
    #[arg(long, value_enum, default_value = "auto")]
    linear_dtype: LinearDtypeArg,
    #[command(flatten)]
    adapter: AdapterArgs,
}

#[derive(Debug, Serialize)]
struct Report {
    adapter: String,
    backend: String,
    linear_dtype: String,
    cases: Vec<CaseReport>,
    passed: usize,
    failed: usize,
    skipped: usize,
}

/// Runs the subcommand; exit code 1 when any case fails.
pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let gpu = Gpu::open(&args.adapter.choice()).context("opening the GPU")?;
    let cases = run_dir(&gpu, &args.dir, args.linear_dtype.into())
        .with_context(|| format!("running the conformance cases in {}", args.dir.display()))?;
    let skipped = cases.iter().filter(|c| c.skipped.is_some()).count();
    let failed = cases.iter().filter(|c| !c.ok()).count();
    let report = Report {
        adapter: gpu.caps.name.clone(),
        backend: gpu.caps.backend.clone(),
        linear_dtype: format!("{:?}", args.linear_dtype).to_lowercase(),
        passed: cases.len() - failed - skipped,
        failed,
        skipped,
        cases,
    };
    if json {
        print_json(&report)?;
    } else {
        print_table(&report);
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_table(r: &Report) {
    println!(
        "adapter: {} [{}], --linear-dtype {}",
        r.adapter, r.backend, r.linear_dtype
    );
    println!(
        "{:<50} {:<34} {:<24} {:>10} {:>10} {:>7}  result",
        "case", "path", "target", "max abs", "rel/max", "flipped"
    );
    for c in &r.cases {
        let (abs, rel, flips, verdict) = match (&c.comparison, &c.skipped) {
            (_, Some(why)) => ("-".into(), "-".into(), "-".into(), format!("SKIP ({why})")),
            (Some(cmp), None) => (
                format!("{:.3e}", cmp.max_abs),
                format!("{:.3e}", cmp.max_rel_to_max),
                format!("{}/{}", cmp.tier2_rows, cmp.tier2_rows_allowed),
                if cmp.pass {
                    "PASS".to_owned()
                } else {
                    format!("FAIL ({} elements out of tolerance)", cmp.failures)
                },
            ),
            (None, None) => ("-".into(), "-".into(), "-".into(), "FAIL".into()),
        };
        println!(
            "{:<50} {:<34} {:<24} {:>10} {:>10} {:>7}  {verdict}",
            c.case, c.path, c.target, abs, rel, flips
        );
    }
    println!(
        "{} passed, {} failed, {} skipped",
        r.passed, r.failed, r.skipped
    );
}
