//! `dynvram plan MODEL --vram-budget GIB`: which weights stay resident,
//! which stream, the bytes moved per token (or per pass) and a predicted
//! speed from a PCIe rate and a memory rate — the same placement a run
//! computes, from the files' headers alone: no GPU, no driver.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use dynvram_memory::{Budget, CapacitySource, Placement};
use dynvram_models::flux::{self, DetectedFlux, FluxCheckpoint};
use dynvram_models::llama::{Checkpoint, Limits};
use dynvram_models::mlp_stack;
use dynvram_runtime::ModelSpec;
use dynvram_runtime::planning::PlanWeight;
use serde::Serialize;

use crate::cmd::budget_args::BudgetArgs;
use crate::output::{print_json, size};

/// Default `--pcie-gbps`: what a PCIe 4.0 x16 slot moves in practice.
const DEFAULT_PCIE_GBPS: f64 = 25.0;
/// Default `--mem-gbps`: a mid-range 8 GiB card's memory rate.
const DEFAULT_MEM_GBPS: f64 = 400.0;

/// Arguments of `dynvram plan`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
The budget: --vram-budget is required (plan asks no driver) and is the whole
budget: the 0.25 GiB default reserve applies only to budgets a driver reports
(give --reserve-vram to keep some of it free); --vram-headroom always applies.

The prediction: a decode step reads every weight from VRAM once and moves the
streamed ones over PCIe while the previous block computes, so one step takes
the longer of (streamed bytes / --pcie-gbps) and (all weight bytes /
--mem-gbps). KV-cache reads and kernel launch costs are not counted: it is an
upper bound on speed.

Examples:
  dynvram plan MODEL_DIR --vram-budget 8
  dynvram plan MODEL_DIR/model.safetensors.index.json --vram-budget 6 --pcie-gbps 12 --json
  dynvram plan stack.safetensors --vram-budget 1 --tensors")]
pub struct Args {
    /// A Hugging Face checkpoint folder (config.json with
    /// model.safetensors or a sharded index), its index json, a Flux
    /// transformer (a single file in Black Forest Labs' or ComfyUI's key
    /// layout, or a folder with its config.json and model.safetensors), or
    /// a safetensors file of MLP blocks (`blocks.{i}.mlp.fc1/fc2`).
    model: PathBuf,
    #[command(flatten)]
    pub(crate) budget: BudgetArgs,
    /// Rows of one pass: prompt tokens of the prefill (default 128) for a
    /// checkpoint, activation rows (default 4) for an MLP stack; they size
    /// the activations reserved beside the weights (1 to 1 048 576).
    #[arg(long, value_parser = crate::cmd::ranges::int::<usize, 1, { 1 << 20 }>)]
    rows: Option<usize>,
    /// Checkpoints: tokens the KV cache holds (prompt + generated); default
    /// the model's context (max_position_embeddings) or 4096, the smaller.
    #[arg(long, value_name = "TOKENS", value_parser = crate::cmd::ranges::int::<usize, 1, { 1 << 24 }>)]
    context: Option<usize>,
    /// Flux: image tokens of a step (packed 2×2 latent patches; 4096 is
    /// 1024×1024 pixels; 1 to 1 048 576).
    #[arg(long, default_value_t = 4096, value_name = "TOKENS",
          value_parser = crate::cmd::ranges::int::<usize, 1, { 1 << 20 }>)]
    image_tokens: usize,
    /// Flux: text tokens of a step (1 to 1 048 576).
    #[arg(long, default_value_t = 512, value_name = "TOKENS",
          value_parser = crate::cmd::ranges::int::<usize, 1, { 1 << 20 }>)]
    text_tokens: usize,
    /// Host-to-GPU rate for streamed weights, in GB/s (10^9 bytes).
    #[arg(long, default_value_t = DEFAULT_PCIE_GBPS, value_name = "GB/S")]
    pcie_gbps: f64,
    /// The GPU's memory rate, in GB/s (10^9 bytes).
    #[arg(long, default_value_t = DEFAULT_MEM_GBPS, value_name = "GB/S")]
    mem_gbps: f64,
    /// List every tensor, not only the totals.
    #[arg(long)]
    tensors: bool,
}

/// One tensor's placement.
#[derive(Debug, Serialize)]
struct TensorRow {
    name: String,
    block: String,
    bytes: u64,
    streamed: bool,
}

/// Where a block's weights live.
#[derive(Debug, Serialize)]
struct BlockRow {
    name: String,
    resident_bytes: u64,
    streamed_bytes: u64,
}

#[derive(Debug, Serialize)]
struct Report {
    model: PathBuf,
    /// `llama checkpoint`, `flux transformer` or `mlp stack`.
    kind: &'static str,
    /// What one pass is: `token` (decode), `step` (a Flux forward) or `pass`.
    unit: &'static str,
    capacity: u64,
    reserve: u64,
    headroom: u64,
    usable: u64,
    scratch: u64,
    arena_bytes: u64,
    weight_bytes: u64,
    resident_tensors: usize,
    streamed_tensors: usize,
    resident_bytes: u64,
    streamed_bytes_per_pass: u64,
    pcie_gbps: f64,
    mem_gbps: f64,
    /// Seconds per pass moving the streamed weights.
    transfer_seconds: f64,
    /// Seconds per pass reading every weight from VRAM.
    memory_seconds: f64,
    /// Passes (tokens) per second: 1 / max(transfer, memory).
    predicted_per_second: f64,
    /// `pcie` or `memory`: which of the two sets the speed.
    bound: &'static str,
    blocks: Vec<BlockRow>,
    tensors: Vec<TensorRow>,
}

/// A model to plan: its runtime spec and words for the report.
struct Target {
    spec: ModelSpec,
    kind: &'static str,
    unit: &'static str,
    describe: String,
}

fn checkpoint_target(args: &Args) -> anyhow::Result<Target> {
    let (dir, weights) = if args.model.is_dir() {
        (args.model.clone(), None)
    } else {
        let dir = args
            .model
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_owned();
        (dir, Some(args.model.as_path()))
    };
    let ckpt = Checkpoint::open_with(&dir, weights)
        .with_context(|| format!("opening {}", args.model.display()))?;
    let c = &ckpt.config;
    let max = c.max_position_embeddings;
    let context = args.context.unwrap_or(max.min(4096));
    if context == 0 || context > max {
        anyhow::bail!(
            "--context {context} must be from 1 to the model's context of {max} tokens (max_position_embeddings in {})",
            dir.join("config.json").display()
        );
    }
    let rows = args.rows.unwrap_or(128);
    if rows > context {
        anyhow::bail!(
            "--rows {rows} is more than the {context} tokens the KV cache holds (--context): \
             a prefill of at most {context} rows fits"
        );
    }
    let spec = ckpt.spec(Limits {
        max_seq: context,
        max_rows: rows,
    });
    Ok(Target {
        spec,
        kind: "llama checkpoint",
        unit: "token",
        describe: format!(
            "{} family, {} layers, vocabulary {}, {}; KV cache for {context} tokens, prefill of {rows}",
            format!("{:?}", c.family).to_lowercase(),
            c.num_hidden_layers,
            c.vocab_size,
            c.dtype.as_deref().unwrap_or("dtype unstated"),
        ),
    })
}

fn flux_target(args: &Args, found: DetectedFlux) -> anyhow::Result<Target> {
    let ckpt = found
        .open()
        .with_context(|| format!("opening {}", args.model.display()))?;
    let (img_len, txt_len) = (args.image_tokens, args.text_tokens);
    if img_len == 0 || txt_len == 0 {
        anyhow::bail!("--image-tokens {img_len} and --text-tokens {txt_len} must be at least 1");
    }
    let shape = flux::Shape {
        batch: 1,
        img_len,
        txt_len,
    };
    let c = &ckpt.config;
    Ok(Target {
        // f16 activations, as `dit` takes them on GPUs with SHADER_F16.
        spec: ckpt.spec(shape, dynvram_runtime::ActDtype::F16),
        kind: "flux transformer",
        unit: "step",
        describe: format!(
            "Flux, {} double and {} single blocks, hidden {}{}; one step over {img_len} image and {txt_len} text tokens, f16 activations",
            c.depth,
            c.depth_single_blocks,
            c.hidden_size,
            if ckpt.inferred {
                " (inferred from the shapes)"
            } else {
                ""
            },
        ),
    })
}

/// A Flux transformer: a `.safetensors` file (or a folder's
/// model.safetensors) whose keys are Black Forest Labs'
/// (`double_blocks.0.img_attn.qkv.weight`, maybe under ComfyUI's prefix).
fn detect_flux(path: &Path) -> Option<DetectedFlux> {
    // Not a shard index (whose shards would all be opened to find out).
    let safetensors = path.is_dir() || path.extension().is_some_and(|e| e == "safetensors");
    safetensors
        .then(|| FluxCheckpoint::detect(path).ok())
        .flatten()
}

fn stack_target(args: &Args) -> anyhow::Result<Target> {
    let probe = mlp_stack::Probe::open(&args.model)?;
    let rows = probe.rows(args.rows.unwrap_or(4));
    Ok(Target {
        spec: probe.spec(rows),
        kind: "mlp stack",
        unit: "pass",
        describe: format!("MLP blocks, {rows} activation rows"),
    })
}

/// Whether `path` is a checkpoint (a folder, an index json, or a
/// safetensors file with a config.json beside it) rather than an MLP stack.
fn is_checkpoint(path: &Path) -> bool {
    path.is_dir()
        || path.extension().is_some_and(|e| e == "json")
        || path
            .parent()
            .is_some_and(|d| d.join("config.json").is_file() && !is_stack(path))
}

/// An MLP stack file (its first block's fc1 is there).
fn is_stack(path: &Path) -> bool {
    mlp_stack::Probe::open(path).is_ok()
}

fn rate(flag: &str, gbps: f64) -> anyhow::Result<f64> {
    if !(gbps.is_finite() && gbps > 0.0) {
        anyhow::bail!("{flag} {gbps}: expected a positive rate in GB/s");
    }
    Ok(gbps * 1e9)
}

/// Runs the subcommand.
pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let pcie = rate("--pcie-gbps", args.pcie_gbps)?;
    let mem = rate("--mem-gbps", args.mem_gbps)?;
    let config = args.budget.config()?;
    let Some(capacity) = config.vram_budget else {
        anyhow::bail!(
            "`dynvram plan` needs --vram-budget GIB (it runs without a GPU, so it cannot ask the driver)"
        );
    };
    let target = if let Some(found) = detect_flux(&args.model) {
        flux_target(&args, found)?
    } else if is_checkpoint(&args.model) {
        checkpoint_target(&args)?
    } else {
        stack_target(&args)?
    };
    let usable = Budget::new(capacity, CapacitySource::Explicit, config)
        .map_err(|e| anyhow::anyhow!("--vram-budget {}: {e}", size(capacity)))?
        .usable();
    let (plan, weights) = dynvram_runtime::plan_spec(&target.spec, usable).with_context(|| {
        format!(
            "planning {} in {} usable",
            args.model.display(),
            size(usable)
        )
    })?;
    let p = &plan.plan;
    let weight_bytes: u64 = weights.iter().map(|w| w.size).sum();
    let transfer_seconds = p.streamed_bytes as f64 / pcie;
    let memory_seconds = weight_bytes as f64 / mem;
    let step = transfer_seconds.max(memory_seconds);
    let streamed = |i: usize| p.tensors[i].placement == Placement::Stream;
    let report = Report {
        model: args.model.clone(),
        kind: target.kind,
        unit: target.unit,
        capacity,
        reserve: config.reserve,
        headroom: config.headroom,
        usable,
        scratch: plan.scratch,
        arena_bytes: plan.arena_bytes,
        weight_bytes,
        resident_tensors: p.resident,
        streamed_tensors: p.streamed,
        resident_bytes: p.resident_bytes,
        streamed_bytes_per_pass: p.streamed_bytes,
        pcie_gbps: args.pcie_gbps,
        mem_gbps: args.mem_gbps,
        transfer_seconds,
        memory_seconds,
        predicted_per_second: if step > 0.0 { 1.0 / step } else { 0.0 },
        bound: if transfer_seconds >= memory_seconds {
            "pcie"
        } else {
            "memory"
        },
        blocks: blocks(&target.spec, &weights, streamed),
        tensors: weights
            .iter()
            .enumerate()
            .map(|(i, w)| TensorRow {
                name: w.name.clone(),
                block: target.spec.blocks[w.block].name.clone(),
                bytes: w.size,
                streamed: streamed(i),
            })
            .collect(),
    };
    if json {
        print_json(&report)?;
    } else {
        print_text(&report, &target.describe, args.tensors);
    }
    Ok(ExitCode::SUCCESS)
}

fn blocks(
    spec: &ModelSpec,
    weights: &[PlanWeight],
    streamed: impl Fn(usize) -> bool,
) -> Vec<BlockRow> {
    let mut rows: Vec<BlockRow> = spec
        .blocks
        .iter()
        .map(|b| BlockRow {
            name: b.name.clone(),
            resident_bytes: 0,
            streamed_bytes: 0,
        })
        .collect();
    for (i, w) in weights.iter().enumerate() {
        let r = &mut rows[w.block];
        if streamed(i) {
            r.streamed_bytes += w.size;
        } else {
            r.resident_bytes += w.size;
        }
    }
    rows
}

/// Block names as runs: `layers.0 … layers.19` for consecutive blocks.
fn runs(names: &[&str]) -> String {
    match names {
        [] => "none".into(),
        [one] => (*one).to_owned(),
        [first, .., last] => format!("{first} … {last} ({} blocks)", names.len()),
    }
}

/// Seconds as `85 µs`, `12.3 ms` or `1.20 s`.
fn duration(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.0} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

fn print_text(r: &Report, describe: &str, tensors: bool) {
    println!("model      {} ({})", r.model.display(), r.kind);
    println!("           {describe}");
    println!(
        "budget     {} usable of {} (--vram-budget; reserve {}, headroom {})",
        size(r.usable),
        size(r.capacity),
        size(r.reserve),
        size(r.headroom)
    );
    println!(
        "           activations and caches {}, {}",
        size(r.scratch),
        if r.arena_bytes == 0 {
            "no arenas (nothing streams)".to_owned()
        } else {
            format!("2 arenas of {} for streamed blocks", size(r.arena_bytes))
        }
    );
    let only_resident: Vec<&str> = r
        .blocks
        .iter()
        .filter(|b| b.streamed_bytes == 0)
        .map(|b| b.name.as_str())
        .collect();
    let all_streamed: Vec<&str> = r
        .blocks
        .iter()
        .filter(|b| b.resident_bytes == 0 && b.streamed_bytes > 0)
        .map(|b| b.name.as_str())
        .collect();
    let partly: Vec<&str> = r
        .blocks
        .iter()
        .filter(|b| b.resident_bytes > 0 && b.streamed_bytes > 0)
        .map(|b| b.name.as_str())
        .collect();
    println!(
        "resident   {} of {} in {} tensors: {}",
        size(r.resident_bytes),
        size(r.weight_bytes),
        r.resident_tensors,
        runs(&only_resident)
    );
    let mut where_ = Vec::new();
    if !all_streamed.is_empty() {
        where_.push(runs(&all_streamed));
    }
    if !partly.is_empty() {
        where_.push(format!("part of {}", runs(&partly)));
    }
    println!(
        "streamed   {} in {} tensors, moved every {}{}",
        size(r.streamed_bytes_per_pass),
        r.streamed_tensors,
        r.unit,
        if where_.is_empty() {
            String::new()
        } else {
            format!(": {}", where_.join("; "))
        }
    );
    println!(
        "predicted  {:.2} {}s/s at most: {} over PCIe at {} GB/s takes {}, reading {} at {} GB/s takes {} (bound by {})",
        r.predicted_per_second,
        r.unit,
        size(r.streamed_bytes_per_pass),
        r.pcie_gbps,
        duration(r.transfer_seconds),
        size(r.weight_bytes),
        r.mem_gbps,
        duration(r.memory_seconds),
        if r.bound == "pcie" { "PCIe" } else { "memory" }
    );
    if tensors {
        for t in &r.tensors {
            let place = if t.streamed { "streamed" } else { "resident" };
            println!("  {place}\t{:>10}  {}", size(t.bytes), t.name);
        }
    }
}
