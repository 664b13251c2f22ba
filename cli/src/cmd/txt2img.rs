//! `dynvram txt2img MODELS --prompt TEXT --out image.png`: FLUX.1 text to
//! image (`dynvram_models::txt2img`) from ComfyUI's four files under one
//! VRAM budget, written as PNG.
//!
//! MODELS is a ComfyUI `models/` folder (the transformer in
//! `diffusion_models/` or `unet/`, CLIP-L and T5 in `text_encoders/` or
//! `clip/`, told apart by their tensors, the autoencoder in `vae/`; a flag
//! picks a file where a folder holds several), or a diffusers-layout FLUX.1
//! folder (`model_index.json`, `transformer/`, `text_encoder/`,
//! `text_encoder_2/`, `vae/`, `scheduler/`: its configs and schedule are
//! used, `dynvram_models::txt2img::diffusers`), or the transformer file
//! itself with `--clip-l`, `--t5` and `--vae`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use dynvram_loader::atomic::write_file;
use dynvram_models::clip::ClipConfig;
use dynvram_models::flux::sample::{self, Schedule};
use dynvram_models::flux::{FluxCheckpoint, FluxConfig};
use dynvram_models::t5::T5Config;
use dynvram_models::txt2img::{
    Configs, Files, Images, Noise, Pipeline, Progress, Request, Stage, StageReport,
    TextEncoderKind, diffusers,
};
use dynvram_models::vae::VaeConfig;
use dynvram_runtime::ActDtype;
use dynvram_runtime::trace::Trace;
use serde::Serialize;

use crate::cmd::dit::steps;
use crate::cmd::pipeline_plan::{self, RateArgs};
use crate::cmd::runtime_args::{ComputeDtype, RuntimeArgs};
use crate::output::{dtype_name, eta_bar, print_adapter, print_json, size};

/// Arguments of `dynvram txt2img`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A ComfyUI `models/` folder (`diffusion_models/`, `text_encoders/`,
    /// `vae/`), a diffusers FLUX.1 folder (`model_index.json`), or the
    /// transformer's .safetensors file (then --clip-l, --t5 and --vae name
    /// the others).
    pub(crate) models: PathBuf,
    /// The prompt; repeat for a batch (one image each).
    #[arg(long, required = true)]
    prompt: Vec<String>,
    #[command(flatten)]
    pub(crate) pick: PickArgs,
    /// Euler steps (default: 28 with a guidance embedder (dev), else 4).
    #[arg(long, value_parser = steps)]
    steps: Option<usize>,
    /// Distilled guidance scale (dev; ignored by models without one).
    #[arg(long, default_value_t = 3.5)]
    guidance: f32,
    /// Image width in pixels, a multiple of 16.
    #[arg(long, default_value_t = 1024)]
    width: usize,
    /// Image height in pixels, a multiple of 16.
    #[arg(long, default_value_t = 1024)]
    height: usize,
    /// T5 tokens each prompt is padded or cut to (default: 512 with a
    /// guidance embedder (dev), else 256); the transformer attends over the
    /// padding, so it changes the image.
    #[arg(long)]
    max_sequence_length: Option<usize>,
    /// Seed of the initial noise (ChaCha8 + standard normal, NCHW order:
    /// not torch's generator).
    #[arg(long, default_value_t = 0, conflicts_with = "noise")]
    seed: u64,
    /// Take the initial noise from a safetensors file holding
    /// `noise_latents` F32 [batch, 16, height/8, width/8].
    #[arg(long, value_name = "FILE.safetensors")]
    noise: Option<PathBuf>,
    /// The PNG to write. With several prompts, `{}` is replaced by the
    /// image's index (`img_{}.png`), else `_INDEX` goes before the extension
    /// (`image_0.png`, `image_1.png`).
    #[arg(long, default_value = "image.png")]
    out: PathBuf,
    /// Print what each stage would keep resident and stream under
    /// --vram-budget (needed: no GPU is asked), and the least budget that
    /// runs the whole image, instead of making it. `--compute-dtype auto`
    /// plans f16 activations.
    #[arg(long)]
    plan: bool,
    /// The rates `--plan` predicts the time at.
    #[command(flatten)]
    rates: RateArgs,
    /// The transformer's last step drawn or written (--timeline, --trace).
    #[command(flatten)]
    traces: crate::cmd::trace_args::TraceArgs,
    #[command(flatten)]
    pub(crate) runtime: RuntimeArgs,
}

/// Which files of MODELS, shared by `txt2img` and `plan`.
#[derive(Debug, Clone, clap::Args)]
pub struct PickArgs {
    /// The transformer: a file, or a name in `diffusion_models/`.
    #[arg(long = "model", value_name = "FILE")]
    pub(crate) transformer: Option<PathBuf>,
    /// CLIP-L's text encoder: a file, or a name in `text_encoders/`.
    #[arg(long, value_name = "FILE")]
    pub(crate) clip_l: Option<PathBuf>,
    /// The T5 encoder: a file, or a name in `text_encoders/`.
    #[arg(long, value_name = "FILE")]
    pub(crate) t5: Option<PathBuf>,
    /// The autoencoder: a file, or a name in `vae/`.
    #[arg(long, value_name = "FILE")]
    pub(crate) vae: Option<PathBuf>,
    /// Configs for files whose shapes do not tell them (small test models),
    /// in a diffusers pipeline's layout: `transformer/config.json` (or
    /// `VARIANT/transformer/config.json`: the one that fits the weights),
    /// `text_encoder/config.json` (CLIP), `text_encoder_2/config.json`
    /// (T5), `vae/config.json`; each one present is used. A diffusers
    /// folder's own are used without it.
    #[arg(long, value_name = "DIR")]
    pub(crate) configs: Option<PathBuf>,
}

/// A pipeline's files as MODELS and the flags name them, with the configs
/// and schedule that go with them.
#[derive(Debug, Clone)]
pub struct Found {
    /// The four models' weights.
    pub files: Files,
    /// Their configs (`--configs`, or a diffusers folder's).
    pub configs: Configs,
    /// A diffusers folder's scheduler.
    pub schedule: Option<Schedule>,
    /// What the run reads (the output-path rule): the files, or the
    /// diffusers folder.
    pub reads: Vec<PathBuf>,
}

/// MODELS and the flags: see the module's documentation.
pub fn find(models: &Path, pick: &PickArgs) -> anyhow::Result<Found> {
    if models.is_dir() && diffusers::is_folder(models) {
        let flags = [
            ("--model", pick.transformer.is_some()),
            ("--clip-l", pick.clip_l.is_some()),
            ("--t5", pick.t5.is_some()),
            ("--vae", pick.vae.is_some()),
            ("--configs", pick.configs.is_some()),
        ];
        if let Some((flag, _)) = flags.iter().find(|(_, given)| *given) {
            bail!(
                "{flag}: {} is a diffusers folder, whose model_index.json names its models and \
                 whose configs are used",
                models.display()
            );
        }
        let folder = diffusers::DiffusersFolder::open(models)?;
        return Ok(Found {
            files: folder.files,
            configs: folder.configs,
            schedule: folder.schedule,
            reads: vec![models.to_owned()],
        });
    }
    let files = find_files(models, pick)?;
    let configs = match &pick.configs {
        Some(dir) => read_configs(dir, &files.transformer)?,
        None => Configs::default(),
    };
    Ok(Found {
        reads: [&files.transformer, &files.clip, &files.t5, &files.vae]
            .map(|p| p.to_owned())
            .to_vec(),
        files,
        configs,
        schedule: None,
    })
}

/// Where the PNG of image `index` of `batch` goes.
pub fn out_path(out: &Path, index: usize, batch: usize) -> PathBuf {
    let text = out.to_string_lossy();
    if text.contains("{}") {
        return PathBuf::from(text.replace("{}", &index.to_string()));
    }
    if batch == 1 {
        return out.to_owned();
    }
    let stem = out.file_stem().map(|s| s.to_string_lossy().into_owned());
    let name = match (stem, out.extension()) {
        (Some(s), Some(e)) => format!("{s}_{index}.{}", e.to_string_lossy()),
        (Some(s), None) => format!("{s}_{index}"),
        _ => format!("image_{index}.png"),
    };
    out.with_file_name(name)
}

/// ComfyUI's folders for each kind of file (the newer name first).
const TRANSFORMER_DIRS: [&str; 2] = ["diffusion_models", "unet"];
const TEXT_ENCODER_DIRS: [&str; 2] = ["text_encoders", "clip"];
const VAE_DIRS: [&str; 1] = ["vae"];

/// The `.safetensors` files in `root/<dirs>`, sorted.
fn candidates(root: &Path, dirs: &[&str]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for d in dirs {
        let dir = root.join(d);
        if !dir.is_dir() {
            continue;
        }
        for e in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
            let p = e
                .with_context(|| format!("reading {}", dir.display()))?
                .path();
            if p.is_file() && p.extension().is_some_and(|x| x == "safetensors") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// `flag`'s file: as given where it exists, else a name among `found`;
/// without the flag, the one candidate, or an error listing them.
fn pick(
    what: &str,
    flag: &str,
    given: Option<&Path>,
    found: &[PathBuf],
    dirs: &[&str],
) -> anyhow::Result<PathBuf> {
    let list = || {
        found
            .iter()
            .map(|p| format!("  {}", p.display()))
            .collect::<Vec<_>>()
            .join("\n")
    };
    if let Some(g) = given {
        if g.is_file() {
            return Ok(g.to_owned());
        }
        if let Some(p) = found.iter().find(|p| p.file_name() == Some(g.as_os_str())) {
            return Ok(p.clone());
        }
        if found.is_empty() {
            bail!("{flag} {}: no such file", g.display());
        }
        bail!(
            "{flag} {}: no such file, nor a {what} of the folder; the candidates are:\n{}",
            g.display(),
            list()
        );
    }
    match found {
        [one] => Ok(one.clone()),
        [] => bail!(
            "no {what} found (looked in {}/); name one with {flag}",
            dirs.join("/, ")
        ),
        _ => bail!(
            "{} {what}s found; pick one with {flag}:\n{}",
            found.len(),
            list()
        ),
    }
}

/// The four files of a ComfyUI folder or a transformer file and the flags.
fn find_files(m: &Path, args: &PickArgs) -> anyhow::Result<Files> {
    if m.is_file() {
        let need = |flag: &str, v: &Option<PathBuf>| -> anyhow::Result<PathBuf> {
            match v {
                Some(p) if p.is_file() => Ok(p.clone()),
                Some(p) => bail!("{flag} {}: no such file", p.display()),
                None => bail!(
                    "{} is a file (the transformer): name the others with --clip-l, --t5 and --vae, \
                     or give a ComfyUI models/ folder",
                    m.display()
                ),
            }
        };
        if args.transformer.is_some() {
            bail!(
                "--model picks a file in a models/ folder; {} is already the transformer",
                m.display()
            );
        }
        return Ok(Files {
            transformer: m.to_owned(),
            clip: need("--clip-l", &args.clip_l)?,
            t5: need("--t5", &args.t5)?,
            vae: need("--vae", &args.vae)?,
        });
    }
    if !m.is_dir() {
        bail!("{}: no such file or folder", m.display());
    }
    let transformers = candidates(m, &TRANSFORMER_DIRS)?;
    let transformer = pick(
        "transformer",
        "--model",
        args.transformer.as_deref(),
        &transformers,
        &TRANSFORMER_DIRS,
    )?;
    let encoders = candidates(m, &TEXT_ENCODER_DIRS)?;
    let mut clips = Vec::new();
    let mut t5s = Vec::new();
    for e in encoders {
        match TextEncoderKind::of_file(&e).with_context(|| format!("reading {}", e.display()))? {
            Some(TextEncoderKind::Clip) => clips.push(e),
            Some(TextEncoderKind::T5) => t5s.push(e),
            None => tracing::debug!(file = %e.display(), "neither CLIP nor T5: skipped"),
        }
    }
    let clip = pick(
        "CLIP-L text encoder",
        "--clip-l",
        args.clip_l.as_deref(),
        &clips,
        &TEXT_ENCODER_DIRS,
    )?;
    let t5 = pick(
        "T5 text encoder",
        "--t5",
        args.t5.as_deref(),
        &t5s,
        &TEXT_ENCODER_DIRS,
    )?;
    let vaes = candidates(m, &VAE_DIRS)?;
    let vae = pick("VAE", "--vae", args.vae.as_deref(), &vaes, &VAE_DIRS)?;
    Ok(Files {
        transformer,
        clip,
        t5,
        vae,
    })
}

/// The configs under `--configs DIR` (see the flag), the transformer's
/// the one that fits `transformer`'s tensors.
pub fn read_configs(dir: &Path, transformer: &Path) -> anyhow::Result<Configs> {
    if !dir.is_dir() {
        bail!("--configs {}: no such folder", dir.display());
    }
    let file = |sub: &str| Some(dir.join(sub).join("config.json")).filter(|p| p.is_file());
    let mut flux_candidates: Vec<PathBuf> = file("transformer").into_iter().collect();
    if flux_candidates.is_empty() {
        let entries =
            std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
        for e in entries {
            let p = e?.path().join("transformer").join("config.json");
            if p.is_file() {
                flux_candidates.push(p);
            }
        }
        flux_candidates.sort();
    }
    let mut fits = Vec::new();
    let mut why = Vec::new();
    for c in &flux_candidates {
        let config = FluxConfig::from_file(c)?;
        match FluxCheckpoint::detect(transformer).and_then(|d| d.open_with(config.clone())) {
            Ok(_) => fits.push((c.clone(), config)),
            Err(e) => why.push(format!("  {}: {e}", c.display())),
        }
    }
    let transformer_config = match fits.len() {
        0 if flux_candidates.is_empty() => None,
        0 => bail!(
            "no transformer config under {} fits {}:\n{}",
            dir.display(),
            transformer.display(),
            why.join("\n")
        ),
        1 => fits.pop().map(|(_, c)| c),
        _ => bail!(
            "several transformer configs under {} fit {}: {}",
            dir.display(),
            transformer.display(),
            fits.iter()
                .map(|(p, _)| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    Ok(Configs {
        transformer: transformer_config,
        clip: file("text_encoder")
            .map(|p| ClipConfig::from_hf_json(&p))
            .transpose()?,
        t5: file("text_encoder_2")
            .map(|p| T5Config::from_hf_json(&p))
            .transpose()?,
        vae: file("vae")
            .map(|p| VaeConfig::from_diffusers_json(&p))
            .transpose()?,
    })
}

/// Encodes `[H, W, 3]` RGB bytes as a PNG.
pub fn png_bytes(rgb: &[u8], width: usize, height: usize) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(
        &mut out,
        u32::try_from(width).context("width")?,
        u32::try_from(height).context("height")?,
    );
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header()?;
    w.write_image_data(rgb)?;
    w.finish()?;
    Ok(out)
}

#[derive(Debug, Serialize)]
struct Report {
    adapter: String,
    backend: String,
    compute_dtype: &'static str,
    files: Files,
    prompts: Vec<String>,
    truncated: Vec<dynvram_models::txt2img::Truncated>,
    width: usize,
    height: usize,
    steps: usize,
    guidance: f32,
    max_sequence_length: usize,
    schedule: Schedule,
    /// The seed, or null with --noise.
    seed: Option<u64>,
    noise: Option<PathBuf>,
    sigmas: Vec<f32>,
    /// Fixed costs, before any stage: the files' headers, configs and the
    /// tokenizers; then the device, the budget and the pipeline cache.
    open_seconds: f64,
    runtime_seconds: f64,
    /// Pipelines created over the whole run and the seconds that took (in
    /// the stages' times where a stage first needed them): the rest of the
    /// fixed costs.
    pipelines: dynvram_runtime::PipelineTime,
    stages: Vec<StageReport>,
    /// Every stage, fixed costs excluded.
    stages_seconds: f64,
    /// From the command's start to the PNGs written.
    total_seconds: f64,
    /// The ledger's highest figure over the stages.
    peak_vram: u64,
    outputs: Vec<PathBuf>,
    budget: dynvram_runtime::BudgetReport,
}

/// Runs the subcommand.
pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let t0 = Instant::now();
    let Found {
        files,
        configs,
        schedule,
        reads,
    } = find(&args.models, &args.pick)?;
    // No PNG may land on an input (the output-path rule of every writer).
    let batch = args.prompt.len();
    let outs: Vec<PathBuf> = (0..batch).map(|b| out_path(&args.out, b, batch)).collect();
    let mut reads: Vec<&Path> = reads.iter().map(PathBuf::as_path).collect();
    reads.extend(args.noise.as_deref());
    let mut writes: Vec<Option<&Path>> = outs.iter().map(|o| Some(o.as_path())).collect();
    writes.extend(args.traces.outputs());
    crate::cmd::outputs::check_outputs(&reads, &writes, &args.runtime.adapter)?;
    let pipeline = Pipeline::open(&files, configs)?;
    let dev = pipeline.flux.config.guidance_embed;
    let steps = args.steps.unwrap_or(if dev { 28 } else { 4 });
    let max_sequence_length = args
        .max_sequence_length
        .unwrap_or(if dev { 512 } else { 256 });
    let noise = match &args.noise {
        Some(path) => {
            let latent =
                sample::LatentShape::for_image(args.prompt.len(), args.width, args.height)?;
            Noise::Latents(sample::read_noise(path, latent)?)
        }
        None => Noise::Seed(args.seed),
    };
    let mut req = Request {
        prompts: args.prompt.clone(),
        width: args.width,
        height: args.height,
        steps,
        guidance: args.guidance,
        max_sequence_length,
        noise,
        schedule,
        dtype: ActDtype::F32,
    };
    // Sizes, steps and lengths are named before the device opens.
    pipeline.check(&req)?;
    if args.plan {
        return print_plan(&args, &pipeline, &mut req, files, json);
    }
    let t_rt = Instant::now();
    let (rt, dtype) = args.runtime.open()?;
    let runtime_seconds = t_rt.elapsed().as_secs_f64();
    req.dtype = dtype;
    let mut pb = None;
    let mut on_progress = |p: Progress<'_>| match p {
        Progress::Stage(Stage::Sample) if !json => pb = Some(eta_bar(steps as u64, "sampling")),
        Progress::Stage(_) => {
            if let Some(pb) = pb.take() {
                pb.finish_and_clear();
            }
        }
        Progress::Step(_) => {
            if let Some(pb) = &pb {
                pb.inc(1);
            }
        }
    };
    let mut trace = Trace::new();
    let traced = args.traces.wanted().then_some(&mut trace);
    let images = pipeline.run_traced(&rt, &req, &mut on_progress, traced)?;
    let outputs = write_pngs(&images, &args.out)?;
    args.traces.write(&trace)?;
    let report = Report {
        adapter: rt.gpu().info.name.clone(),
        backend: rt.gpu().caps.backend.clone(),
        compute_dtype: dtype_name(dtype),
        files,
        prompts: args.prompt.clone(),
        truncated: images.truncated.clone(),
        width: args.width,
        height: args.height,
        steps,
        guidance: args.guidance,
        max_sequence_length,
        schedule: req
            .schedule
            .unwrap_or_else(|| Schedule::for_config(&pipeline.flux.config)),
        seed: args.noise.is_none().then_some(args.seed),
        noise: args.noise.clone(),
        sigmas: images.sigmas.clone(),
        open_seconds: pipeline.open_seconds,
        runtime_seconds,
        pipelines: rt.gpu().pipeline_time(),
        stages_seconds: images.stages.iter().map(|s| s.seconds).sum(),
        peak_vram: images.stages.iter().map(|s| s.peak_vram).max().unwrap_or(0),
        stages: images.stages.clone(),
        total_seconds: t0.elapsed().as_secs_f64(),
        outputs,
        budget: rt.budget_report(),
    };
    if json {
        print_json(&report)?;
    } else {
        print_text(&report);
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes each image atomically (a temp file renamed into place, removed
/// on error or by the signal handler): never a partial PNG.
fn write_pngs(images: &Images, out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    (0..images.batch)
        .map(|b| {
            let path = out_path(out, b, images.batch);
            let bytes = png_bytes(images.image(b), images.width, images.height)?;
            write_file(&path, &bytes).with_context(|| format!("writing {}", path.display()))?;
            Ok(path)
        })
        .collect()
}

fn print_text(r: &Report) {
    print_adapter(&r.adapter, &r.backend, r.compute_dtype);
    println!(
        "models     {}\n           {}\n           {}\n           {}",
        r.files.transformer.display(),
        r.files.clip.display(),
        r.files.t5.display(),
        r.files.vae.display()
    );
    for t in &r.truncated {
        println!(
            "warning    prompt {} was cut to the {} tokens {} takes",
            t.prompt, t.max_tokens, t.encoder
        );
    }
    println!(
        "run        {} image(s) of {}×{}, {} steps, guidance {}, {} T5 tokens",
        r.prompts.len(),
        r.width,
        r.height,
        r.steps,
        r.guidance,
        r.max_sequence_length
    );
    println!(
        "fixed      {:.1} ms opening files and tokenizers, {:.1} ms the device; \
         {:.1} ms creating {} pipelines (within the stages)",
        r.open_seconds * 1e3,
        r.runtime_seconds * 1e3,
        r.pipelines.seconds * 1e3,
        r.pipelines.count
    );
    for s in &r.stages {
        let mut extra = match s.tiles {
            Some(t) if t > 1 => format!(", {t} tiles"),
            _ => String::new(),
        };
        if s.pipelines.count > 0 {
            extra += &format!(
                ", {} pipelines created in {:.1} ms",
                s.pipelines.count,
                s.pipelines.seconds * 1e3
            );
        }
        println!(
            "{:<10} {:>9.1} ms ({} pass{}{extra}), {} prefetched, {} loaded, {} streamed, peak VRAM {}",
            format!("{:?}", s.stage).to_lowercase(),
            s.seconds * 1e3,
            s.passes,
            if s.passes == 1 { "" } else { "es" },
            size(s.prefetched_bytes),
            size(s.loaded_bytes),
            size(s.streamed_bytes),
            size(s.peak_vram)
        );
        if s.streamed_bytes > 0 {
            let from = &s.streamed_from;
            println!(
                "{:<10} streamed from registered pins {}, RAM pins {}, files {}; ring stalls {}; \
                 {:.1} ms recording, {:.1} ms staging and submitting, {:.1} ms waiting for the GPU",
                "",
                size(from.registered_pin_bytes),
                size(from.ram_pin_bytes),
                size(from.file_bytes),
                s.ring_stalls,
                s.record_seconds * 1e3,
                s.submit_seconds * 1e3,
                s.wait_seconds * 1e3
            );
        }
        if s.pins.registered_bytes > 0 {
            println!(
                "{:<10} registered pins {}{}",
                "",
                size(s.pins.registered_bytes),
                s.pins.huge_page_bytes.map_or(String::new(), |h| format!(
                    ", {} of the imported ones on huge pages",
                    size(h)
                ))
            );
        }
    }
    println!(
        "total      {:.1} ms (stages {:.1} ms); budget {} usable, peak VRAM {}",
        r.total_seconds * 1e3,
        r.stages_seconds * 1e3,
        size(r.budget.usable),
        size(r.peak_vram)
    );
    for o in &r.outputs {
        println!("out        {}", o.display());
    }
}

/// `--plan`: the pipeline's plan under the budget flags, no GPU.
fn print_plan(
    args: &Args,
    pipeline: &Pipeline,
    req: &mut Request,
    files: Files,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let usable = pipeline_plan::usable(&args.runtime.budget, "--plan")?;
    req.dtype = match args.runtime.compute_dtype {
        ComputeDtype::F32 => ActDtype::F32,
        ComputeDtype::Auto | ComputeDtype::F16 => ActDtype::F16,
    };
    pipeline_plan::print(pipeline, req, &files, usable, &args.rates, json)
}

#[cfg(test)]
mod tests {
    use super::out_path;
    use std::path::{Path, PathBuf};

    #[test]
    fn out_paths_of_a_batch() {
        let p = Path::new("dir/image.png");
        assert_eq!(out_path(p, 0, 1), PathBuf::from("dir/image.png"));
        assert_eq!(out_path(p, 1, 2), PathBuf::from("dir/image_1.png"));
        let q = Path::new("dir/img_{}.png");
        assert_eq!(out_path(q, 3, 4), PathBuf::from("dir/img_3.png"));
        assert_eq!(out_path(q, 0, 1), PathBuf::from("dir/img_0.png"));
        assert_eq!(out_path(Path::new("cat"), 1, 2), PathBuf::from("cat_1"));
    }
}
