//! `dynvram synth MODEL_DIR --like llama-7b`: a randomly initialised
//! checkpoint of a real model's shapes in Hugging Face layout, for benchmarks.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use dynvram_loader::atomic::AtomicDir;
use dynvram_models::llama::MAX_LAYERS;
use dynvram_models::llama::synth;
use dynvram_models::synth::{SynthDtype, SynthOptions};

use crate::output::{bytes_bar, print_json, size};

/// Arguments of `dynvram synth`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Folder to write config.json and the safetensors into (created).
    model_dir: PathBuf,
    /// Shapes to copy: tiny, llama-7b, llama-13b, qwen2-7b, qwen2-0.5b;
    /// flux-dev, flux-schnell (BFL layout: MODEL_DIR ending in .safetensors
    /// is written as that one file, as ComfyUI users have it; else a folder
    /// with model.safetensors and config.json); flux-dev-comfyui,
    /// flux-schnell-comfyui (a ComfyUI models/ folder of all four files
    /// `txt2img` takes: diffusion_models/, text_encoders/, vae/).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(
        synth::PRESETS
            .iter()
            .chain(&dynvram_models::flux::synth::PRESETS)
            .chain(&dynvram_models::txt2img::synth::PRESETS)
            .copied()
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
    if dynvram_models::txt2img::synth::preset(&args.like).is_some() {
        let opts = flux_options(args.layers, args.tokenizer, args.dtype.into(), args.seed)?;
        return Ok((serde_json::Value::Null, opts));
    }
    if let Some(flux) = dynvram_models::flux::synth::preset(&args.like) {
        return flux_options(args.layers, args.tokenizer, args.dtype.into(), args.seed)
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
    if flux && is_single_file(&args.model_dir) {
        let folder = args.model_dir.parent().unwrap_or(Path::new(""));
        return write_flux(&args.model_dir, folder, &args.like, opts, json);
    }
    let out = AtomicDir::replacing(&args.model_dir, args.force)?;
    if flux {
        let code = write_flux(&args.model_dir, out.tmp(), &args.like, opts, json)?;
        out.commit()?;
        return Ok(code);
    }
    if let Some(shapes) = dynvram_models::txt2img::synth::preset(&args.like) {
        let code = write_comfyui(&args.model_dir, out.tmp(), &shapes, opts, json)?;
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

/// The writer's options of `--like flux-*`, the flags checked
/// (`--layers` and `--tokenizer` are the Llama presets').
fn flux_options(
    layers: Option<usize>,
    tokenizer: bool,
    dtype: SynthDtype,
    seed: u64,
) -> anyhow::Result<SynthOptions> {
    if layers.is_some() || tokenizer {
        anyhow::bail!("--layers and --tokenizer apply to the Llama presets, not to Flux");
    }
    Ok(SynthOptions {
        dtype,
        seed,
        ..SynthOptions::default()
    })
}

/// Whether `--like flux-*` writes `path` as one file.
fn is_single_file(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "safetensors")
}

/// `--like flux-dev|flux-schnell`: random weights of FLUX.1's shapes in
/// BFL layout, as one `.safetensors` file (when `path` ends so; the config
/// is then inferred from the shapes, as for ComfyUI's files) or a folder
/// with `model.safetensors` and `config.json`. The files go into the folder
/// `write_to` (the folder's temp name while it is built; `path`'s folder
/// for one file) and are reported under `path`.
fn write_flux(
    path: &Path,
    write_to: &Path,
    like: &str,
    opts: SynthOptions,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let config = dynvram_models::flux::synth::preset(like)
        .with_context(|| format!("unknown --like {like}"))?;
    let single = is_single_file(path);
    let file = if single {
        path.to_owned()
    } else {
        path.join("model.safetensors")
    };
    let pb = bytes_bar(0, "synth");
    let bytes = dynvram_models::flux::synth::write_checkpoint(
        &write_to.join(file.file_name().unwrap_or_default()),
        &config,
        "",
        opts,
        !single,
        &mut |done, total| {
            pb.set_length(total);
            pb.set_position(done);
        },
    )
    .with_context(|| format!("writing {}", path.display()))?;
    pb.finish_and_clear();
    let mut files = vec![file.clone()];
    if !single {
        files.push(file.with_file_name("config.json"));
    }
    if json {
        print_json(&serde_json::json!({"files": files, "bytes": bytes, "like": like}))?;
    } else {
        println!("wrote {} like {like} into {}", size(bytes), path.display());
        for f in &files {
            println!("  {}", f.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `--like flux-dev-comfyui|flux-schnell-comfyui`: a ComfyUI `models/`
/// folder of random weights for `txt2img` (transformer, CLIP-L, T5-XXL,
/// autoencoder), written into `write_to` (the folder's temp name while it
/// is built) and reported under `dir`.
fn write_comfyui(
    dir: &Path,
    write_to: &Path,
    shapes: &dynvram_models::txt2img::synth::Shapes,
    opts: SynthOptions,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let pb = bytes_bar(0, "synth");
    let (files, bytes) = dynvram_models::txt2img::synth::write_folder(
        write_to,
        shapes,
        opts.dtype,
        opts.seed,
        &mut |done, total| {
            pb.set_length(total);
            pb.set_position(done);
        },
    )
    .with_context(|| format!("writing {}", dir.display()))?;
    pb.finish_and_clear();
    let files: Vec<PathBuf> = [files.transformer, files.clip, files.t5, files.vae]
        .iter()
        .map(|f| dir.join(f.strip_prefix(write_to).unwrap_or(f)))
        .collect();
    if json {
        print_json(&serde_json::json!({"files": files, "bytes": bytes}))?;
    } else {
        println!(
            "wrote {} into the ComfyUI folder {}",
            size(bytes),
            dir.display()
        );
        for f in &files {
            println!("  {}", f.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
