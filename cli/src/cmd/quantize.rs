//! `dynvram quantize IN OUT --format …`: ComfyUI-layout quantization of a
//! model folder (or its index json) into a new folder, or of one
//! safetensors file into another (see `dynvram_quant::quantize` and
//! `dynvram_quant::model_dir`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use dynvram_quant::LinearDtype;
use dynvram_quant::model_dir::{is_model, quantize_model};
use dynvram_quant::quantize::{QuantizeOptions, TargetFormat, quantize_file};

use crate::output;

/// Target format names as ComfyUI spells them.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum FormatArg {
    /// int4 weights (rotated, per-row scales), int4 or int8 activations.
    ConvrotW4a4,
    /// int8 weights with one scale.
    Int8Tensorwise,
    /// fp8 e4m3fn weights with one scale.
    Float8E4m3fn,
}

/// `linear_dtype` to record for convrot_w4a4.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LinearDtypeArg {
    /// int4 activations where supported (not written: ComfyUI's default).
    Int4,
    /// int8 activations everywhere (written as `"linear_dtype": "int8"`).
    Int8,
}

/// Arguments of `dynvram quantize`.
///
/// Which layers are quantized: every 2-D float `*.weight` tensor (a linear
/// layer's weight) except, by default, the layers ComfyUI's quantized
/// checkpoints keep in high precision — embeddings (`embed_tokens`, `wte`,
/// `wpe`), `lm_head` and norms (any name with `norm`), and a Flux
/// transformer's embedders, modulations and final layer; biases and other
/// 1-D tensors are never quantized. `--only` narrows the choice further,
/// `--skip` leaves more out, `--quantize-all` lifts the default. Layers
/// whose width does not fit the format are left as they are and listed.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Which layers: every 2-D float `*.weight` tensor (a linear layer's weight)
except, by default, what ComfyUI's quantized checkpoints keep in high
precision: embeddings (embed_tokens, wte, wpe), lm_head and norms (any name
with `norm`), and in a Flux transformer (BFL names) the embedders (img_in,
txt_in, time_in, vector_in, guidance_in), the modulations (img_mod, txt_mod,
modulation) and final_layer; biases and other 1-D tensors are never
quantized. --only
narrows the choice, --skip leaves more out, --quantize-all lifts the
default. Layers whose width does not fit the format are left as they are
and listed.

A model folder is quantized shard by shard on all cores: memory holds one
float tensor and one output shard, not the model.

Examples:
  dynvram quantize MODEL_DIR OUT_DIR --format convrot_w4a4          # a whole model
  dynvram quantize MODEL_DIR OUT_DIR --format int8_tensorwise --skip 'layers\\.0\\.'
  dynvram quantize model.safetensors out.safetensors --format float8_e4m3fn --only '_proj$'")]
pub struct Args {
    /// A Hugging Face model folder (model.safetensors, or shards with
    /// model.safetensors.index.json), an index json, or one safetensors
    /// file (F32/F16/BF16 weights).
    pub input: PathBuf,
    /// For a model: the folder to create (must not exist or be empty) with
    /// one quantized shard per input shard, a new index, and the config,
    /// generation config, tokenizer and template files copied. For a file:
    /// the output safetensors file. Written atomically either way: an
    /// interrupted run leaves nothing behind.
    pub output: PathBuf,
    /// Target format.
    #[arg(long, value_enum)]
    pub format: FormatArg,
    /// convrot_w4a4 rotation group size (a power of 4).
    #[arg(long, default_value_t = 256)]
    pub group_size: u32,
    /// convrot_w4a4 `linear_dtype` to record.
    #[arg(long, value_enum, default_value = "int4")]
    pub linear_dtype: LinearDtypeArg,
    /// Only quantize layers whose name (the tensor name without `.weight`)
    /// matches this regular expression anywhere, e.g. `_proj$`.
    #[arg(long, value_name = "REGEX")]
    pub only: Option<String>,
    /// Leave layers whose name matches this regular expression as they
    /// are, e.g. `layers\.(0|31)\.` for the first and last layer.
    #[arg(long, value_name = "REGEX")]
    pub skip: Option<String>,
    /// Also quantize embeddings, lm_head, norms and Flux's embedders,
    /// modulations and final layer (kept in high precision by default;
    /// `dynvram generate` needs a float embedding table).
    #[arg(long)]
    pub quantize_all: bool,
    /// Quantize weights holding NaN or ±inf (refused by default: their
    /// scale becomes inf or NaN and every code of the tensor garbage).
    #[arg(long)]
    pub allow_nonfinite: bool,
    /// Replace an output folder that exists with files in it (refused
    /// without; the old folder stays until the new one is complete). An
    /// output that is the input, or holds it, is refused even so.
    #[arg(long)]
    pub force: bool,
}

/// The quantizer's options from the flags, checked.
pub fn options(args: &Args) -> anyhow::Result<QuantizeOptions> {
    let int8 = matches!(args.linear_dtype, LinearDtypeArg::Int8);
    let target = match args.format {
        FormatArg::ConvrotW4a4 => TargetFormat::ConvrotW4a4 {
            group: args.group_size,
            linear_dtype: if int8 {
                LinearDtype::Int8
            } else {
                LinearDtype::Int4
            },
        },
        other => {
            anyhow::ensure!(!int8, "--linear-dtype int8 applies to convrot_w4a4 only");
            match other {
                FormatArg::Int8Tensorwise => TargetFormat::Int8Tensorwise,
                _ => TargetFormat::Float8E4m3fn,
            }
        }
    };
    let mut opts = QuantizeOptions::new(target, args.only.as_deref(), args.skip.as_deref())?;
    opts.allow_nonfinite = args.allow_nonfinite;
    opts.force = args.force;
    if args.quantize_all {
        opts.keep = None;
    }
    Ok(opts)
}

/// Runs the subcommand.
pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let opts = options(&args)?;
    if is_model(&args.input) {
        return run_model(&args, &opts, json);
    }
    let pb = output::bar(0, "quantize");
    let report = quantize_file(
        &args.input,
        &args.output,
        &opts,
        &mut |done, total, _layer| {
            pb.set_length(total as u64);
            pb.set_position(done as u64);
        },
    )
    .with_context(|| format!("quantizing {}", args.input.display()))?;
    pb.finish_and_clear();
    if json {
        output::print_json(&report)?;
    } else {
        println!(
            "{} -> {}: {} layers quantized, {} skipped, {} tensors copied ({} -> {})",
            args.input.display(),
            args.output.display(),
            report.quantized.len(),
            report.skipped.len(),
            report.copied,
            output::size(report.bytes_in),
            output::size(report.bytes_out),
        );
        for s in &report.skipped {
            println!("  skipped {}: {}", s.layer, s.reason);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A whole model folder (or index) into a folder.
fn run_model(args: &Args, opts: &QuantizeOptions, json: bool) -> anyhow::Result<ExitCode> {
    let pb = output::bar(0, "quantize");
    let report = quantize_model(
        &args.input,
        &args.output,
        opts,
        &mut |done, total, layer| {
            pb.set_length(total as u64);
            pb.set_position(done as u64);
            pb.set_message(layer.to_owned());
        },
    )
    .with_context(|| format!("quantizing {}", args.input.display()))?;
    pb.finish_and_clear();
    if json {
        output::print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{} -> {}: {} layers quantized, {} kept or skipped, {} tensors copied, {} shard(s) ({} -> {}) in {:.1} s",
        args.input.display(),
        args.output.display(),
        report.quantized,
        report.skipped.len(),
        report.copied,
        report.shards.len(),
        output::size(report.bytes_in),
        output::size(report.bytes_out),
        report.seconds,
    );
    println!("  copied {}", report.files_copied.join(", "));
    for s in &report.skipped {
        println!("  left {}: {}", s.layer, s.reason);
    }
    Ok(ExitCode::SUCCESS)
}
