//! `dynvram quantize IN OUT --format …`: ComfyUI-layout quantization of a
//! safetensors file's 2-D float linear weights (see `dynvram_quant::quantize`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use dynvram_quant::LinearDtype;
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
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Input safetensors file (F32/F16/BF16 weights).
    pub input: PathBuf,
    /// Output safetensors file (written atomically).
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
    /// Only quantize layers whose name matches this regex.
    #[arg(long)]
    pub only: Option<String>,
    /// Leave layers whose name matches this regex as they are.
    #[arg(long)]
    pub skip: Option<String>,
    /// Quantize weights holding NaN or ±inf (refused by default: their
    /// scale becomes inf or NaN and every code of the tensor garbage).
    #[arg(long)]
    pub allow_nonfinite: bool,
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
    Ok(opts)
}

/// Runs the subcommand.
pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let opts = options(&args)?;
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
