//! `dynvram dit MODEL --inputs IN --out OUT`: one forward of a Flux
//! diffusion transformer under a VRAM budget (or, with `--steps N`, a
//! flow-matching Euler sampling loop from `img` as the initial noise with
//! Flux's shifted schedule), the result written as `out`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use dynvram_loader::atomic::write_file;
use dynvram_models::flux::sample::{self, SampleOptions, StepDone};
use dynvram_models::flux::{Flux, FluxCheckpoint, FluxInputs, ForwardOptions};
use dynvram_runtime::ops::profile::Profile;
use dynvram_runtime::trace::Trace;
use dynvram_runtime::{Model, PassStats};
use serde::Serialize;

use crate::cmd::profile;
use crate::cmd::runtime_args::RuntimeArgs;
use crate::output::{bar, dtype_name, print_adapter, print_json, size};

/// Most `--steps`.
const MAX_STEPS: usize = 10_000;

/// Arguments of `dynvram dit`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A Flux checkpoint: a single .safetensors file in BFL key layout
    /// (optionally under ComfyUI's `model.diffusion_model.` prefix; the
    /// architecture is inferred from the shapes, with FLUX.1's heads, RoPE
    /// axes and theta), or a folder with model.safetensors and a config.json
    /// in BFL FluxParams names.
    model: PathBuf,
    /// Inputs (all F32): img [B, L_img, in_channels], img_ids [B, L_img, 3],
    /// txt [B, L_txt, context_in_dim], txt_ids [B, L_txt, 3], timesteps (one
    /// per batch element, 0..1), y [B, vec_in_dim], and guidance (one per
    /// batch element) for models with a
    /// guidance embedder.
    #[arg(long, value_name = "IN.safetensors")]
    inputs: PathBuf,
    /// Where to write `out` [B, L_img, out_channels] (F32).
    #[arg(long, value_name = "OUT.safetensors")]
    out: PathBuf,
    /// Run N Euler steps of flow matching from `img` (the noise) instead of
    /// one forward; `timesteps` of the inputs is then ignored, and `out` is
    /// the final latent.
    #[arg(long, value_parser = steps)]
    steps: Option<usize>,
    /// Timed forwards of the same inputs (without --steps); the report
    /// gives their mean and best time.
    #[arg(long, default_value_t = 1, conflicts_with = "steps", value_parser = steps)]
    passes: usize,
    /// Untimed forwards first, so shader compilation and first uploads are
    /// not counted (0 to 1000).
    #[arg(long, default_value_t = 0, value_parser = crate::cmd::ranges::int::<usize, 0, 1000>)]
    warmup: usize,
    #[command(flatten)]
    traces: crate::cmd::trace_args::TraceArgs,
    /// With --steps: the linear schedule 1 → 0 (FLUX.1-schnell's) instead
    /// of the resolution-shifted one (FLUX.1-dev's).
    #[arg(long)]
    no_shift: bool,
    /// Time every kernel of the last pass (without --steps) and print them
    /// beside their bytes, FLOPs, the device's memory rate and its
    /// cooperative matrices' peak (both measured first).
    #[arg(long, conflicts_with = "steps")]
    profile: bool,
    #[command(flatten)]
    pub(crate) runtime: RuntimeArgs,
}

/// `--steps`: 1 to [`MAX_STEPS`].
pub fn steps(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("`{s}`: {e}"))?;
    if n == 0 || n > MAX_STEPS {
        return Err(format!("{n} is not in 1..={MAX_STEPS}"));
    }
    Ok(n)
}

#[derive(Debug, Serialize)]
struct Report {
    adapter: String,
    backend: String,
    compute_dtype: &'static str,
    model: PathBuf,
    /// Whether the config was inferred from the shapes (no config.json).
    config_inferred: bool,
    config: dynvram_models::flux::FluxConfig,
    shape: dynvram_models::flux::Shape,
    /// Forward passes run (1, or --steps).
    passes: usize,
    /// The schedule of --steps (sigmas, first to last).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    sigmas: Vec<f64>,
    seconds: f64,
    seconds_per_pass: f64,
    best_seconds_per_pass: f64,
    streamed_bytes_per_pass: u64,
    /// Matrix and attention FLOPs of one pass (`flux::flops`).
    flops_per_pass: u64,
    /// FLOPs per second of the best pass: what `plan --matrix-tflops`
    /// takes as this adapter's rate (in TFLOP/s; the whole pass, launches
    /// and streaming included, so below the kernels' own rate).
    achieved_tflops: f64,
    max_abs_out: f32,
    model_report: dynvram_runtime::ModelReport,
    budget: dynvram_runtime::BudgetReport,
    /// With --profile: the last pass, kernel by kernel.
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<Profile>,
}

/// Runs the subcommand.
pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let mut writes = vec![Some(args.out.as_path())];
    writes.extend(args.traces.outputs());
    crate::cmd::outputs::check_outputs(
        &[&args.model, &args.inputs],
        &writes,
        &args.runtime.adapter,
    )?;
    let ckpt = FluxCheckpoint::open(&args.model)
        .with_context(|| format!("opening {}", args.model.display()))?;
    let mut inputs = FluxInputs::from_file(&args.inputs, &ckpt.config)?;
    let c = &ckpt.config;
    if args.steps.is_some() && c.in_channels != c.out_channels {
        bail!(
            "--steps needs out_channels = in_channels (the model predicts a velocity of the latent), this model has {} and {}",
            c.out_channels,
            c.in_channels
        );
    }
    let (rt, dtype) = args.runtime.open()?;
    let model = Model::open(&rt, &ckpt.spec(inputs.shape, dtype))
        .with_context(|| format!("opening {}", args.model.display()))?;
    let mut flux = Flux::new(&rt, &ckpt, inputs.shape, dtype).context("--compute-dtype")?;
    for _ in 0..args.warmup {
        flux.forward(&rt, &model, &inputs)?;
    }
    let mut stats = Vec::<PassStats>::new();
    let mut trace = Trace::new();
    let mut last_profile = None;
    let limits = if args.profile {
        profile::limits(&rt)
    } else {
        profile::Limits::default()
    };
    let mut pass = |flux: &mut Flux, inputs: &FluxInputs| {
        trace = Trace::new();
        let opts = ForwardOptions {
            trace: Some(&mut trace),
            ..ForwardOptions::default()
        };
        let f = flux.forward_with(&rt, &model, inputs, opts)?;
        anyhow::Ok((f.out, f.stats))
    };
    let (out, sigmas) = match args.steps {
        None => {
            let mut out = Vec::new();
            for i in 0..args.passes {
                let s;
                if args.profile && i + 1 == args.passes {
                    let ((o, st), p) = profile::profiled(&rt, limits, || {
                        let (o, st) = pass(&mut flux, &inputs)?;
                        Ok(((o, st.clone()), st))
                    })?;
                    (out, s) = (o, st);
                    last_profile = Some(p);
                } else {
                    (out, s) = pass(&mut flux, &inputs)?;
                }
                stats.push(s);
            }
            (out, Vec::new())
        }
        Some(n) => {
            let sigmas = sample::bfl_schedule(n, inputs.shape.img_len, !args.no_shift);
            let pb = (!json).then(|| bar(n as u64, "steps"));
            let mut on_step = |_: StepDone<'_>| {
                if let Some(pb) = &pb {
                    pb.inc(1);
                }
            };
            let opts = SampleOptions {
                trace: Some(&mut trace),
                on_step: Some(&mut on_step),
            };
            stats = sample::sample(&mut flux, &rt, &model, &mut inputs, &sigmas, opts)?;
            if let Some(pb) = pb {
                pb.finish_and_clear();
            }
            (inputs.img.clone(), sigmas)
        }
    };
    args.traces.write(&trace)?;
    if let Some(i) = out.iter().position(|v| !v.is_finite()) {
        bail!(
            "the output has a non-finite value at element {i}: {}",
            out[i]
        );
    }
    write_out(&args.out, &out, inputs.shape, c.out_channels)?;
    let seconds: f64 = stats.iter().map(|s| s.seconds).sum();
    let streamed: u64 = stats.iter().map(|s| s.streamed_bytes).sum();
    let passes = stats.len();
    let flops: u64 = dynvram_models::flux::flops::block_flops(c, inputs.shape)
        .iter()
        .sum();
    let best = stats
        .iter()
        .map(|s| s.seconds)
        .fold(f64::INFINITY, f64::min);
    let report = Report {
        adapter: rt.gpu().info.name.clone(),
        backend: rt.gpu().caps.backend.clone(),
        compute_dtype: dtype_name(dtype),
        model: args.model.clone(),
        config_inferred: ckpt.inferred,
        config: c.clone(),
        shape: inputs.shape,
        passes,
        sigmas,
        seconds,
        seconds_per_pass: seconds / passes.max(1) as f64,
        best_seconds_per_pass: best,
        streamed_bytes_per_pass: streamed / passes.max(1) as u64,
        flops_per_pass: flops,
        achieved_tflops: if best > 0.0 {
            flops as f64 / best / 1e12
        } else {
            0.0
        },
        max_abs_out: out.iter().fold(0f32, |m, v| m.max(v.abs())),
        model_report: model.report(),
        budget: rt.budget_report(),
        profile: last_profile,
    };
    if json {
        print_json(&report)?;
    } else {
        print_text(&report, &args.out);
        if let Some(p) = &report.profile {
            profile::print("the last pass", p);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn write_out(
    path: &Path,
    out: &[f32],
    s: dynvram_models::flux::Shape,
    channels: usize,
) -> anyhow::Result<()> {
    let bytes: Vec<u8> = out.iter().flat_map(|x| x.to_le_bytes()).collect();
    let view = safetensors::tensor::TensorView::new(
        safetensors::Dtype::F32,
        vec![s.batch, s.img_len, channels],
        &bytes,
    )?;
    let file = safetensors::serialize([("out", view)], None)?;
    write_file(path, &file).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn print_text(r: &Report, out: &Path) {
    let (m, b, c) = (&r.model_report, &r.budget, &r.config);
    print_adapter(&r.adapter, &r.backend, r.compute_dtype);
    println!(
        "model      {} ({} double + {} single blocks, width {}, {} heads{}; {})",
        r.model.display(),
        c.depth,
        c.depth_single_blocks,
        c.hidden_size,
        c.num_heads,
        if r.config_inferred {
            ", inferred from the shapes"
        } else {
            ""
        },
        size(m.model_bytes)
    );
    println!(
        "inputs     batch {}, {} image + {} text tokens",
        r.shape.batch, r.shape.img_len, r.shape.txt_len
    );
    println!(
        "passes     {} in {:.1} ms ({:.1} ms each, best {:.1} ms), {} streamed per pass; {:.3} TFLOP a pass, {:.2} TFLOP/s at best",
        r.passes,
        r.seconds * 1e3,
        r.seconds_per_pass * 1e3,
        r.best_seconds_per_pass * 1e3,
        size(r.streamed_bytes_per_pass),
        r.flops_per_pass as f64 / 1e12,
        r.achieved_tflops
    );
    println!(
        "budget     {} usable of {} ({}); resident {}, streamed {} by {}{}; peak VRAM {}",
        size(b.usable),
        size(b.capacity),
        b.source,
        size(m.resident_bytes),
        size(m.streamed_bytes),
        m.granularity.as_str(),
        match m.granularity {
            dynvram_runtime::planning::Granularity::Part => {
                format!(" ({} parts a pass)", m.streamed_parts)
            }
            dynvram_runtime::planning::Granularity::Block => String::new(),
        },
        size(b.peak)
    );
    println!(
        "out        {} (max |out| {:.4})",
        out.display(),
        r.max_abs_out
    );
}
