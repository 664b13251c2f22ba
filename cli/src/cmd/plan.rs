//! `dynvram plan MODEL --vram-budget GIB`: which weights stay resident,
//! which stream (by block, or by part where a block is too large to
//! double-buffer), the bytes moved per token (or per pass) and a predicted
//! speed from a PCIe rate, a memory rate and a matrix rate
//! (`runtime::roofline`) — the same placement a run computes, from the
//! files' headers alone: no GPU, no driver. `dynvram plan MODELS` of a
//! ComfyUI or diffusers folder plans a whole text-to-image run
//! (`cmd::pipeline_plan`, what `txt2img --plan` prints).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use dynvram_memory::Placement;
use dynvram_models::flux::{self, DetectedFlux, FluxCheckpoint};
use dynvram_models::llama::{Checkpoint, Limits};
use dynvram_models::mlp_stack;
use dynvram_models::txt2img::{Noise, Pipeline, Request, diffusers};
use dynvram_runtime::ModelSpec;
use dynvram_runtime::roofline::{self, BlockTime, BlockWork, Prediction, Rates};
use serde::Serialize;

use crate::cmd::budget_args::BudgetArgs;
use crate::cmd::pipeline_plan::{self, RateArgs};
use crate::cmd::txt2img::{self, PickArgs};
use crate::output::{print_json, size};

/// Arguments of `dynvram plan`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
The budget: --vram-budget is required (plan asks no driver) and is the whole
budget: the 0.25 GiB default reserve applies only to budgets a driver reports
(give --reserve-vram to keep some of it free); --vram-headroom always applies.

The prediction: a pass reads every weight from VRAM once, computes its matrix
products and attention, and moves the streamed weights over PCIe while the
previous block computes, so each block takes the longest of (its FLOPs /
--matrix-tflops), (its weight bytes / --mem-gbps) and (its streamed bytes /
--pcie-gbps), and a pass the sum over blocks. FLOPs are counted for Flux (one
step at --image-tokens and --text-tokens) and Llama checkpoints (a decode
token at --context, and a prefill of --rows tokens); not for MLP stacks.
KV-cache reads and kernel launch costs are not counted: it is an upper bound
on speed. plan opens no GPU: the matrix rate is --matrix-tflops, by default
a mid-range card's rate as dynvram's kernels reach it.

A text-to-image run (MODELS a ComfyUI models/ folder or a diffusers FLUX.1
folder): each stage (CLIP, T5, the transformer's steps, the VAE decode) is
planned as txt2img opens it, alone on the budget; its FLOPs (all four models
counted) and bytes give its time, the stages' sum the image's; and the least
budget that runs every stage is named. `txt2img --plan` prints the same.

Examples:
  dynvram plan MODEL_DIR --vram-budget 8
  dynvram plan COMFYUI/models --vram-budget 2 --width 1024 --height 768
  dynvram plan MODEL_DIR/model.safetensors.index.json --vram-budget 6 --pcie-gbps 12 --json
  dynvram plan stack.safetensors --vram-budget 1 --tensors")]
pub struct Args {
    /// A Hugging Face checkpoint folder (config.json with
    /// model.safetensors or a sharded index), its index json, a Flux
    /// transformer (a single file in Black Forest Labs' or ComfyUI's key
    /// layout, or a folder with its config.json and model.safetensors), or
    /// a safetensors file of MLP blocks (`blocks.{i}.mlp.fc1/fc2`); or a
    /// text-to-image run's models: a ComfyUI `models/` folder or a
    /// diffusers FLUX.1 folder (then --width, --height, --steps and
    /// --text-tokens describe the run).
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
    /// Flux: image tokens of a step (packed 2×2 latent patches; default
    /// 4096, 1024×1024 pixels; 1 to 1 048 576). A text-to-image run takes
    /// --width and --height instead.
    #[arg(long, value_name = "TOKENS",
          value_parser = crate::cmd::ranges::int::<usize, 1, { 1 << 20 }>)]
    image_tokens: Option<usize>,
    /// Flux: text tokens of a step (default 512; 1 to 1 048 576). A
    /// text-to-image run: the T5 tokens prompts are padded to (default 512
    /// with a guidance embedder (dev), else 256; at most 512).
    #[arg(long, value_name = "TOKENS",
          value_parser = crate::cmd::ranges::int::<usize, 1, { 1 << 20 }>)]
    text_tokens: Option<usize>,
    #[command(flatten)]
    rates: RateArgs,
    /// A text-to-image run (MODELS a ComfyUI or diffusers folder): image
    /// width in pixels, a multiple of 16.
    #[arg(long, default_value_t = 1024)]
    width: usize,
    /// A text-to-image run: image height in pixels, a multiple of 16.
    #[arg(long, default_value_t = 1024)]
    height: usize,
    /// A text-to-image run: Euler steps (default: 28 with a guidance
    /// embedder (dev), else 4).
    #[arg(long, value_parser = crate::cmd::dit::steps)]
    steps: Option<usize>,
    #[command(flatten)]
    pick: PickArgs,
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

/// Where a block's weights live, its FLOPs and what limits it.
#[derive(Debug, Serialize)]
struct BlockRow {
    name: String,
    resident_bytes: u64,
    streamed_bytes: u64,
    /// Matrix and attention FLOPs of one pass (0 where not counted).
    flops: u64,
    /// `compute`, `memory` or `pcie`: the longest of the block's times.
    bound: &'static str,
}

/// A Llama prefill's prediction.
#[derive(Debug, Serialize)]
struct PrefillReport {
    /// Prompt tokens.
    tokens: usize,
    flops: u64,
    seconds: f64,
    tokens_per_second: f64,
    /// What limits most of it.
    bound: &'static str,
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
    /// `block` (each arena holds a block's streamed weights) or `part`
    /// (blocks too large for two arenas stream a few linears at a time).
    granularity: &'static str,
    /// Arena loads a pass makes (streamed blocks or parts).
    streamed_parts: usize,
    /// VRAM the plan takes at most: resident pages, arenas, activations.
    peak_bytes: u64,
    weight_bytes: u64,
    resident_tensors: usize,
    streamed_tensors: usize,
    resident_bytes: u64,
    streamed_bytes_per_pass: u64,
    pcie_gbps: f64,
    mem_gbps: f64,
    matrix_tflops: f64,
    /// Matrix and attention FLOPs of a pass (0 where not counted).
    flops_per_pass: u64,
    /// Whether FLOPs are counted for this kind of model.
    flops_counted: bool,
    /// Seconds per pass moving the streamed weights.
    transfer_seconds: f64,
    /// Seconds per pass reading every weight from VRAM.
    memory_seconds: f64,
    /// Seconds per pass computing at the matrix rate.
    compute_seconds: f64,
    /// Seconds per pass: the sum of each block's longest time.
    predicted_seconds: f64,
    /// Passes (tokens, steps) per second: 1 / predicted_seconds.
    predicted_per_second: f64,
    /// `compute`, `memory` or `pcie`: what limits most of the pass.
    bound: &'static str,
    /// Llama: a prefill of `--rows` tokens.
    prefill: Option<PrefillReport>,
    blocks: Vec<BlockRow>,
    tensors: Vec<TensorRow>,
}

/// A model to plan: its runtime spec, the FLOPs of its blocks, and words
/// for the report.
struct Target {
    spec: ModelSpec,
    kind: &'static str,
    unit: &'static str,
    describe: String,
    /// FLOPs of each block in one pass (the unit), where counted.
    flops: Option<Vec<u64>>,
    /// A prefill's tokens and FLOPs of each block, for checkpoints.
    prefill: Option<(usize, Vec<u64>)>,
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
        flops: Some(dynvram_models::llama::flops::block_flops(c, 1, context - 1)),
        prefill: Some((rows, dynvram_models::llama::flops::block_flops(c, rows, 0))),
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
    let (img_len, txt_len) = (
        args.image_tokens.unwrap_or(4096),
        args.text_tokens.unwrap_or(512),
    );
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
        flops: Some(flux::flops::block_flops(c, shape)),
        prefill: None,
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
        flops: None,
        prefill: None,
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

/// Whether MODELS is a text-to-image pipeline's folder: ComfyUI's
/// `models/` (a `diffusion_models/` or `unet/` folder in it) or a
/// diffusers folder (`model_index.json`).
fn is_pipeline(path: &Path) -> bool {
    path.is_dir()
        && (diffusers::is_folder(path)
            || ["diffusion_models", "unet"]
                .iter()
                .any(|d| path.join(d).is_dir()))
}

/// `dynvram plan MODELS` of a pipeline: its stages' plan
/// (`cmd::pipeline_plan`, as `txt2img --plan` prints it).
fn pipeline(args: &Args, json: bool) -> anyhow::Result<ExitCode> {
    if args.image_tokens.is_some() {
        anyhow::bail!("--image-tokens: a text-to-image run's image is --width × --height");
    }
    let found = txt2img::find(&args.model, &args.pick)?;
    let pipeline = Pipeline::open(&found.files, found.configs)
        .with_context(|| format!("opening {}", args.model.display()))?;
    let dev = pipeline.flux.config.guidance_embed;
    let req = Request {
        prompts: vec![String::new()],
        width: args.width,
        height: args.height,
        steps: args.steps.unwrap_or(if dev { 28 } else { 4 }),
        guidance: 3.5,
        max_sequence_length: args.text_tokens.unwrap_or(if dev { 512 } else { 256 }),
        noise: Noise::Seed(0),
        schedule: found.schedule,
        // f16 activations, as a GPU with SHADER_F16 runs them.
        dtype: dynvram_runtime::ActDtype::F16,
    };
    let usable = pipeline_plan::usable(&args.budget, "`dynvram plan`")?;
    pipeline_plan::print(&pipeline, &req, &found.files, usable, &args.rates, json)
}

/// Runs the subcommand.
pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let rates = args.rates.rates()?;
    if is_pipeline(&args.model) {
        return pipeline(&args, json);
    }
    let config = args.budget.config()?;
    let usable = pipeline_plan::usable(&args.budget, "`dynvram plan`")?;
    let capacity = config.vram_budget.unwrap_or_default();
    let target = if let Some(found) = detect_flux(&args.model) {
        flux_target(&args, found)?
    } else if is_checkpoint(&args.model) {
        checkpoint_target(&args)?
    } else {
        stack_target(&args)?
    };
    let (plan, weights) = dynvram_runtime::plan_spec(&target.spec, usable).with_context(|| {
        format!(
            "planning {} in {} usable",
            args.model.display(),
            size(usable)
        )
    })?;
    let p = &plan.plan;
    let weight_bytes: u64 = weights.iter().map(|w| w.size).sum();
    let streamed = |i: usize| p.tensors[i].placement == Placement::Stream;
    let work = |flops: Option<&[u64]>| {
        roofline::block_work(target.spec.blocks.len(), &weights, streamed, flops)
    };
    let pass = work(target.flops.as_deref());
    let predicted = roofline::predict(&pass, &rates);
    let prefill = target.prefill.as_ref().map(|(tokens, flops)| {
        let p = roofline::predict(&work(Some(flops)), &rates);
        PrefillReport {
            tokens: *tokens,
            flops: p.flops,
            seconds: p.seconds,
            tokens_per_second: *tokens as f64 * p.per_second(),
            bound: p.bound.as_str(),
        }
    });
    let Prediction {
        seconds,
        flops,
        compute_seconds,
        memory_seconds,
        transfer_seconds,
        bound,
        ..
    } = predicted;
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
        granularity: plan.granularity.as_str(),
        streamed_parts: plan.streamed_parts,
        peak_bytes: p.page_bytes + 2 * plan.arena_bytes + plan.scratch,
        weight_bytes,
        resident_tensors: p.resident,
        streamed_tensors: p.streamed,
        resident_bytes: p.resident_bytes,
        streamed_bytes_per_pass: p.streamed_bytes,
        pcie_gbps: args.rates.pcie_gbps,
        mem_gbps: args.rates.mem_gbps,
        matrix_tflops: args.rates.matrix_tflops,
        flops_per_pass: flops,
        flops_counted: target.flops.is_some(),
        transfer_seconds,
        memory_seconds,
        compute_seconds,
        predicted_seconds: seconds,
        predicted_per_second: predicted.per_second(),
        bound: bound.as_str(),
        prefill,
        blocks: blocks(&target.spec, &pass, &rates),
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

fn blocks(spec: &ModelSpec, work: &[BlockWork], rates: &Rates) -> Vec<BlockRow> {
    spec.blocks
        .iter()
        .zip(work)
        .map(|(b, w)| BlockRow {
            name: b.name.clone(),
            resident_bytes: w.weight_bytes - w.streamed_bytes,
            streamed_bytes: w.streamed_bytes,
            flops: w.flops,
            bound: BlockTime::of(w, rates).bound().as_str(),
        })
        .collect()
}

/// Blocks (index, name) as ranges of consecutive ones: `embed`,
/// `layers.0 … layers.3 (4 blocks)`, `embed, layers.0, layers.4 (3
/// blocks)`; past four ranges the first three and a count (residency spreads
/// over runs of equal blocks, so resident blocks are rarely one range).
fn runs(blocks: &[(usize, &str)]) -> String {
    let mut ranges: Vec<(&str, &str)> = Vec::new();
    let mut prev: Option<usize> = None;
    for &(i, name) in blocks {
        match ranges.last_mut() {
            Some(last) if prev.is_some_and(|p| p + 1 == i) => last.1 = name,
            _ => ranges.push((name, name)),
        }
        prev = Some(i);
    }
    let range = |&(first, last): &(&str, &str)| match first == last {
        true => first.to_owned(),
        false => format!("{first} … {last}"),
    };
    let shown: Vec<String> = ranges.iter().take(4).map(range).collect();
    match (blocks.len(), ranges.len()) {
        (0, _) => "none".into(),
        (1, _) => shown.join(""),
        (n, r) if r <= 4 => format!("{} ({n} blocks)", shown.join(", ")),
        (n, r) => format!("{}, … ({n} blocks in {r} ranges)", shown[..3].join(", ")),
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
        match (r.arena_bytes, r.granularity) {
            (0, _) => "no arenas (nothing streams)".to_owned(),
            (a, "part") => format!(
                "2 arenas of {}: blocks too large for two stream by part ({} parts a {})",
                size(a),
                r.streamed_parts,
                r.unit
            ),
            (a, _) => format!("2 arenas of {} for streamed blocks", size(a)),
        }
    );
    println!(
        "peak       {} at most (resident pages, arenas, activations)",
        size(r.peak_bytes)
    );
    // The blocks (index, name) whose (resident, streamed) bytes pass `keep`.
    let blocks_where = |keep: fn(u64, u64) -> bool| -> Vec<(usize, &str)> {
        (r.blocks.iter().enumerate())
            .filter(|(_, b)| keep(b.resident_bytes, b.streamed_bytes))
            .map(|(i, b)| (i, b.name.as_str()))
            .collect()
    };
    let only_resident = blocks_where(|_, streamed| streamed == 0);
    let all_streamed = blocks_where(|resident, streamed| resident == 0 && streamed > 0);
    let partly = blocks_where(|resident, streamed| resident > 0 && streamed > 0);
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
    let bound = |b: &'static str| -> &'static str {
        match b {
            "pcie" => "PCIe",
            other => other,
        }
    };
    let compute = match r.flops_counted {
        true => format!(
            "{:.2} TFLOP at {} TFLOP/s takes {}",
            r.flops_per_pass as f64 / 1e12,
            r.matrix_tflops,
            duration(r.compute_seconds)
        ),
        false => "FLOPs not counted for this kind of model".to_owned(),
    };
    println!(
        "predicted  {:.2} {}s/s at most ({} a {}): {} over PCIe at {} GB/s takes {}, reading {} at {} GB/s takes {}, {compute}; each block takes its longest (bound by {})",
        r.predicted_per_second,
        r.unit,
        duration(r.predicted_seconds),
        r.unit,
        size(r.streamed_bytes_per_pass),
        r.pcie_gbps,
        duration(r.transfer_seconds),
        size(r.weight_bytes),
        r.mem_gbps,
        duration(r.memory_seconds),
        bound(r.bound)
    );
    if let Some(p) = &r.prefill {
        println!(
            "prefill    {} tokens: {:.2} TFLOP, {} ({:.0} tokens/s at most, bound by {})",
            p.tokens,
            p.flops as f64 / 1e12,
            duration(p.seconds),
            p.tokens_per_second,
            bound(p.bound)
        );
    }
    if tensors {
        for t in &r.tensors {
            let place = if t.streamed { "streamed" } else { "resident" };
            println!("  {place}\t{:>10}  {}", size(t.bytes), t.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::runs;

    #[test]
    fn blocks_print_as_ranges_of_consecutive_ones() {
        assert_eq!(runs(&[]), "none");
        assert_eq!(runs(&[(3, "layers.2")]), "layers.2");
        assert_eq!(
            runs(&[(0, "embed"), (1, "layers.0"), (5, "layers.4")]),
            "embed … layers.0, layers.4 (3 blocks)"
        );
        let spread: Vec<(usize, String)> =
            (0..12).step_by(2).map(|i| (i, format!("b{i}"))).collect();
        let spread: Vec<(usize, &str)> = spread.iter().map(|(i, n)| (*i, n.as_str())).collect();
        assert_eq!(runs(&spread), "b0, b2, b4, … (6 blocks in 6 ranges)");
    }
}
