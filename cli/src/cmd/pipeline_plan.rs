//! A whole text-to-image run's plan, as `dynvram plan MODELS` and
//! `dynvram txt2img --plan` print it (`Pipeline::plan`): per stage what
//! stays resident, what streams and the VRAM it takes, the predicted time
//! from FLOPs and bytes at the rates of [`RateArgs`], and the least budget
//! that runs every stage.

use std::process::ExitCode;

use anyhow::Context;
use dynvram_models::txt2img::{Files, Pipeline, Request};
use dynvram_runtime::roofline::Rates;

use crate::output::{dtype_name, print_json, size};

/// Default `--pcie-gbps`: what a PCIe 4.0 x16 slot moves in practice.
const DEFAULT_PCIE_GBPS: f64 = 25.0;
/// Default `--mem-gbps`: a mid-range 8 GiB card's memory rate.
const DEFAULT_MEM_GBPS: f64 = 400.0;
/// Default `--matrix-tflops`: a mid-range 8 GiB card's dense f16 matrix
/// rate (~80 TFLOP/s) at the share of its peak dynvram's cooperative-matrix
/// GEMM reaches on the H200 (76.6 of 989 TFLOP/s, BENCHMARKS.md): ~10.
const DEFAULT_MATRIX_TFLOPS: f64 = 10.0;

/// The rates a plan's predicted time assumes.
#[derive(Debug, Clone, clap::Args)]
pub struct RateArgs {
    /// Host-to-GPU rate for streamed weights, in GB/s (10^9 bytes).
    #[arg(long, default_value_t = DEFAULT_PCIE_GBPS, value_name = "GB/S")]
    pub(crate) pcie_gbps: f64,
    /// The GPU's memory rate, in GB/s (10^9 bytes).
    #[arg(long, default_value_t = DEFAULT_MEM_GBPS, value_name = "GB/S")]
    pub(crate) mem_gbps: f64,
    /// The GPU's matrix rate (GEMM and attention) as dynvram's kernels
    /// reach it, in TFLOP/s (10^12 FLOPs): e.g. `dynvram dit --json`'s
    /// `achieved_tflops` on that GPU, or a `--profile` run's TFLOP/s column.
    #[arg(long, default_value_t = DEFAULT_MATRIX_TFLOPS, value_name = "TFLOP/S")]
    pub(crate) matrix_tflops: f64,
}

impl RateArgs {
    /// The rates, each checked positive.
    pub fn rates(&self) -> anyhow::Result<Rates> {
        let rate = |flag: &str, v: f64| {
            if !(v.is_finite() && v > 0.0) {
                anyhow::bail!("{flag} {v}: expected a positive rate");
            }
            Ok(v)
        };
        Ok(Rates {
            pcie_bytes_per_second: rate("--pcie-gbps", self.pcie_gbps)? * 1e9,
            memory_bytes_per_second: rate("--mem-gbps", self.mem_gbps)? * 1e9,
            matrix_flops_per_second: rate("--matrix-tflops", self.matrix_tflops)? * 1e12,
        })
    }
}

/// The usable bytes of the budget flags, which must give --vram-budget
/// (`who` plans: it asks no GPU).
pub fn usable(budget: &crate::cmd::budget_args::BudgetArgs, who: &str) -> anyhow::Result<u64> {
    let config = budget.config()?;
    let Some(capacity) = config.vram_budget else {
        anyhow::bail!(
            "{who} needs --vram-budget GIB (it runs without a GPU, so it cannot ask the driver)"
        );
    };
    Ok(
        dynvram_memory::Budget::new(capacity, dynvram_memory::CapacitySource::Explicit, config)
            .map_err(|e| anyhow::anyhow!("--vram-budget {}: {e}", size(capacity)))?
            .usable(),
    )
}

/// Plans `req` on `pipeline` in `usable` bytes at `rates` and prints it.
pub fn print(
    pipeline: &Pipeline,
    req: &Request,
    files: &Files,
    usable: u64,
    rates: &RateArgs,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let plan = pipeline
        .plan(req, usable, &rates.rates()?)
        .with_context(|| format!("planning in {} usable", size(usable)))?;
    if json {
        print_json(&serde_json::json!({
            "files": files,
            "compute_dtype": dtype_name(req.dtype),
            "width": req.width,
            "height": req.height,
            "steps": req.steps,
            "max_sequence_length": req.max_sequence_length,
            "plan": plan,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "plan       {} image(s) of {}×{}, {} steps, {} T5 tokens, {} activations, {} usable",
        req.prompts.len(),
        req.width,
        req.height,
        req.steps,
        req.max_sequence_length,
        dtype_name(req.dtype),
        size(usable)
    );
    for s in &plan.stages {
        println!(
            "{:<10} {} resident, {} streamed a pass × {}, {} of VRAM; {} a pass, {:.1} ms (bound by {})",
            format!("{:?}", s.stage).to_lowercase(),
            size(s.resident_bytes),
            size(s.streamed_bytes),
            s.passes,
            size(s.vram_bytes),
            flops(s.flops),
            s.seconds * 1e3,
            s.bound.as_str()
        );
    }
    println!(
        "predicted  {:.1} ms the image at most: {} TFLOP/s, {} GB/s memory, {} GB/s PCIe",
        plan.seconds * 1e3,
        rates.matrix_tflops,
        rates.mem_gbps,
        rates.pcie_gbps
    );
    println!(
        "least      {} usable runs every stage",
        size(plan.least_usable)
    );
    Ok(ExitCode::SUCCESS)
}

/// FLOPs as `2.35 TFLOP` or `120.4 MFLOP`.
fn flops(f: u64) -> String {
    let f = f as f64;
    match f {
        f if f >= 1e12 => format!("{:.2} TFLOP", f / 1e12),
        f if f >= 1e9 => format!("{:.2} GFLOP", f / 1e9),
        f => format!("{:.2} MFLOP", f / 1e6),
    }
}
