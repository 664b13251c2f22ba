//! `dynvram synth MODEL_DIR --like llama-7b`: a randomly initialised
//! checkpoint of a real model's shapes in Hugging Face layout, for benchmarks.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use dynvram_loader::atomic::AtomicDir;
use dynvram_models::llama::MAX_LAYERS;
use dynvram_models::llama::synth::{self, SynthDtype, SynthOptions};

use crate::output::{bytes_bar, print_json, size};

/// Arguments of `dynvram synth`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Folder to write config.json and the safetensors into (created).
    model_dir: PathBuf,
    /// Shapes to copy: tiny, llama-7b, llama-13b, qwen2-7b, qwen2-0.5b;
    /// flux-dev, flux-schnell (BFL layout: MODEL_DIR ending in .safetensors
    /// is written as that one file, as ComfyUI users have it; else a folder
    /// with model.safetensors and config.json).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(
        synth::PRESETS.iter().chain(&dynvram_models::flux::synth::PRESETS).copied()
    ))]
    like: String,
    /// Stored dtype of the weights.
    #[arg(long, value_enum, default_value = "bf16")]
    dtype: DtypeArg,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Override the number of decoder layers.
    #[arg(long)]
    layers: Option<usize>,
    /// Largest shard in GiB (above 0, at most 1 048 576); bigger
    /// checkpoints get an index.
    #[arg(long, default_value_t = 4.0, value_parser = crate::cmd::ranges::positive::<{ 1 << 20 }>)]
    shard_gib: f64,
    /// Also write a synthetic byte-level BPE tokenizer.json filling the
    /// vocabulary, so `dynvram generate --prompt TEXT` works on the checkpoint.
    #[arg(long)]
    tokenizer: bool,
    /// Replace MODEL_DIR when it exists with files in it (refused without;
    /// the old folder stays until the new one is complete).
    #[arg(long)]
    force: bool,
}

/// `--dtype`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum DtypeArg {
    /// bfloat16.
    Bf16,
    /// IEEE half.
    F16,
    /// 32-bit float.
    F32,
}

impl From<DtypeArg> for SynthDtype {
    fn from(a: DtypeArg) -> Self {
        match a {
            DtypeArg::Bf16 => Self::Bf16,
            DtypeArg::F16 => Self::F16,
            DtypeArg::F32 => Self::F32,
        }
    }
}

/// The preset's config and the writer's options, the flags checked.
pub fn options(args: &Args) -> anyhow::Result<(serde_json::Value, SynthOptions)> {
    if let Some(flux) = dynvram_models::flux::synth::preset(&args.like) {
        return crate::cmd::dit::synth_options(
            args.layers,
            args.tokenizer,
            args.dtype.into(),
            args.seed,
        )
        .map(|opts| (flux.to_json(), opts));
    }
    let config =
        synth::preset(&args.like).with_context(|| format!("unknown --like {}", args.like))?;
    if !(args.shard_gib.is_finite() && args.shard_gib > 0.0) {
        anyhow::bail!("--shard-gib {} must be a positive number", args.shard_gib);
    }
    if let Some(n) = args.layers
        && !(1..=MAX_LAYERS).contains(&n)
    {
        anyhow::bail!("--layers {n} must be from 1 to {MAX_LAYERS}");
    }
    let opts = SynthOptions {
        dtype: args.dtype.into(),
        seed: args.seed,
        layers: args.layers,
        shard_bytes: (args.shard_gib * f64::from(1u32 << 30)) as u64,
    };
    Ok((config, opts))
}

/// Runs the subcommand.
/// A folder is built under a temp name beside MODEL_DIR and renamed into
/// place whole (`AtomicDir`): an interrupted or failed run, or one ended
/// by a signal, leaves no folder at the final name.
pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let (config, opts) = options(&args)?;
    let flux = dynvram_models::flux::synth::preset(&args.like).is_some();
    if flux && crate::cmd::dit::is_single_file(&args.model_dir) {
        let folder = args.model_dir.parent().unwrap_or(Path::new(""));
        return crate::cmd::dit::synth(&args.model_dir, folder, &args.like, opts, json);
    }
    let out = AtomicDir::replacing(&args.model_dir, args.force)?;
    if flux {
        let code = crate::cmd::dit::synth(&args.model_dir, out.tmp(), &args.like, opts, json)?;
        out.commit()?;
        return Ok(code);
    }
    let pb = bytes_bar(0, "synth");
    let mut report = synth::write_checkpoint(out.tmp(), &config, opts, &mut |done, total| {
        pb.set_length(total);
        pb.set_position(done);
    })
    .with_context(|| format!("writing {}", args.model_dir.display()))?;
    pb.finish_and_clear();
    if args.tokenizer {
        let vocab = config["vocab_size"]
            .as_u64()
            .with_context(|| format!("preset {} has no vocab_size", args.like))?;
        let path = synth::write_tokenizer(out.tmp(), vocab as usize)?;
        report.files.push(path);
        report.files.push(
            out.tmp()
                .join(dynvram_models::llama::chat::TOKENIZER_CONFIG),
        );
    }
    for f in &mut report.files {
        if let Ok(rel) = f.strip_prefix(out.tmp()) {
            *f = args.model_dir.join(rel);
        }
    }
    out.commit()?;
    if json {
        print_json(&report)?;
    } else {
        println!(
            "wrote {} tensors ({}) like {} into {}",
            report.tensors,
            size(report.bytes),
            args.like,
            args.model_dir.display()
        );
        for f in &report.files {
            println!("  {}", f.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
