//! `dynvram generate MODEL_DIR`: greedy decoding of a Llama-family
//! checkpoint under a VRAM budget, tokens printed as they come, then
//! prefill/decode speed, bytes streamed per token and the budget figures.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use dynvram_models::llama::{
    Checkpoint, ForwardOptions, Generation, Limits, Llama, LogitRows, TextTokenizer,
};
use dynvram_runtime::ops::profile::Profile;
use dynvram_runtime::{Model, Runtime, RuntimeConfig};
use serde::Serialize;

use crate::cmd::adapter_args::AdapterArgs;
use crate::cmd::budget_args::BudgetArgs;
use crate::cmd::profile;
use crate::cmd::run::LinearDtypeArg;
use crate::output::{print_json, size};

/// Arguments of `dynvram generate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A Hugging Face checkpoint folder (config.json + model.safetensors or
    /// model.safetensors.index.json).
    model_dir: PathBuf,
    /// Weights to use instead of the folder's (e.g. a `dynvram quantize` output).
    #[arg(long, value_name = "FILE")]
    weights: Option<PathBuf>,
    /// Prompt token ids, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        conflicts_with = "prompt",
        required_unless_present = "prompt"
    )]
    prompt_ids: Vec<u32>,
    /// Prompt text (needs the checkpoint's tokenizer.json).
    #[arg(long)]
    prompt: Option<String>,
    /// Tokens to generate (at most 1 048 576; the KV cache holds the prompt
    /// and these).
    #[arg(long, default_value_t = 32, value_parser = max_new_tokens)]
    max_new_tokens: usize,
    /// Stop after this token id (repeatable); default: none, as the token ids are raw.
    #[arg(long, value_delimiter = ',')]
    eos: Vec<u32>,
    /// Untimed runs (the prompt, then one decode step) before the measured
    /// one, so first-use shader compilation is not counted as prefill time.
    #[arg(long, default_value_t = 0)]
    warmup: usize,
    /// Activation and KV-cache dtype; kernels accumulate in f32 either way.
    /// auto: f16 where the adapter has SHADER_F16 (half the activation
    /// traffic, and the prefill GEMMs run on f16 cooperative matrices), else
    /// f32. An explicit f16 on an adapter without SHADER_F16 is an error,
    /// never a silent fallback; f32 is the reference for checks.
    #[arg(long, value_enum, default_value = "auto")]
    compute_dtype: ComputeDtype,
    /// Write the logits of every prompt position (`prompt_logits` [prompt, vocab])
    /// and every decode step (`step_logits` [steps, vocab]) plus the ids.
    #[arg(long, value_name = "FILE.safetensors")]
    logits_out: Option<PathBuf>,
    #[command(flatten)]
    adapter: AdapterArgs,
    #[command(flatten)]
    pub(crate) budget: BudgetArgs,
    /// Activation arithmetic of int4 layers.
    #[arg(long, value_enum, default_value = "auto")]
    linear_dtype: LinearDtypeArg,
    /// After generating, profile one prefill of the prompt and one decode
    /// step: every kernel's GPU time (timestamps, where the adapter has
    /// them) beside its bytes, FLOPs and the device's memory rate (measured
    /// with a 128 MiB shader read outside the budget), the CPU's recording
    /// and submitting, and the GPU's idle gaps.
    #[arg(long)]
    profile: bool,
}

/// Most `--max-new-tokens`: far past any context, short of overflows.
const MAX_NEW_TOKENS: usize = 1 << 20;

fn max_new_tokens(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("`{s}`: {e}"))?;
    if n > MAX_NEW_TOKENS {
        return Err(format!("{n} is more than {MAX_NEW_TOKENS}"));
    }
    Ok(n)
}

/// `--compute-dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ComputeDtype {
    /// f16 where the adapter has SHADER_F16, else f32.
    Auto,
    /// 32-bit activations.
    F32,
    /// 16-bit activations and KV cache (needs SHADER_F16).
    F16,
}

impl ComputeDtype {
    /// The activation dtype on `rt`'s adapter.
    fn resolve(self, rt: &Runtime) -> dynvram_runtime::ActDtype {
        match self {
            Self::Auto if rt.gpu().caps.shader_f16 => dynvram_runtime::ActDtype::F16,
            Self::Auto | Self::F32 => dynvram_runtime::ActDtype::F32,
            Self::F16 => dynvram_runtime::ActDtype::F16,
        }
    }
}

#[derive(Debug, Serialize)]
struct Report {
    adapter: String,
    backend: String,
    /// Activation and KV-cache dtype (`--compute-dtype` resolved).
    compute_dtype: &'static str,
    model_dir: PathBuf,
    prompt: Vec<u32>,
    /// `--prompt`, when the prompt was text.
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_text: Option<String>,
    tokens: Vec<u32>,
    /// The generated tokens decoded, when the prompt was text.
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    prefill: dynvram_models::llama::PhaseStats,
    decode: dynvram_models::llama::PhaseStats,
    prefill_tokens_per_second: f64,
    decode_tokens_per_second: f64,
    streamed_bytes_per_token: u64,
    model: dynvram_runtime::ModelReport,
    budget: dynvram_runtime::BudgetReport,
    /// With `--profile`.
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<Profiles>,
}

/// `--profile`'s passes.
#[derive(Debug, Serialize)]
struct Profiles {
    prefill: Profile,
    decode: Profile,
}

/// Runs the subcommand.
pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let tokenizer = match &args.prompt {
        Some(_) => {
            Some(TextTokenizer::open(&args.model_dir).context("--prompt needs a tokenizer")?)
        }
        None => None,
    };
    let prompt = match (&args.prompt, &tokenizer) {
        (Some(text), Some(tok)) => tok.encode(text)?,
        _ => args.prompt_ids.clone(),
    };
    if prompt.is_empty() {
        bail!("the prompt is empty");
    }
    let ckpt = Checkpoint::open_with(&args.model_dir, args.weights.as_deref())
        .with_context(|| format!("opening {}", args.model_dir.display()))?;
    let limits = Limits {
        max_seq: prompt.len() + args.max_new_tokens.max(1),
        max_rows: prompt.len(),
    };
    let rt = Runtime::new(RuntimeConfig {
        adapter: args.adapter.choice(),
        budget: args.budget.config()?,
        linear_dtype: args.linear_dtype.into(),
        ..args.budget.host_config()?
    })?;
    let model = Model::open(&rt, &ckpt.spec(limits))
        .with_context(|| format!("opening {}", args.model_dir.display()))?;
    let mut llama = Llama::with_dtype(&rt, &ckpt, limits, args.compute_dtype.resolve(&rt))
        .context("--compute-dtype")?;
    if !json {
        match &args.prompt {
            Some(text) => eprint!("prompt {text:?} = {prompt:?}\ntext   "),
            None => eprint!("prompt {prompt:?}\ntokens "),
        }
    }
    let mut stdout = std::io::stdout();
    for _ in 0..args.warmup {
        let steps = args.max_new_tokens.min(2);
        llama.generate(&rt, &model, &prompt, steps, &[], false, &mut |_| {})?;
    }
    let mut stream = tokenizer.as_ref().map(TextTokenizer::stream);
    let mut stream_error = None;
    let g = llama.generate(
        &rt,
        &model,
        &prompt,
        args.max_new_tokens,
        &args.eos,
        args.logits_out.is_some(),
        &mut |t| {
            if json {
                return;
            }
            match stream.as_mut().map(|s| s.step(t)) {
                None => _ = write!(stdout, "{t} "),
                Some(Ok(Some(text))) => _ = write!(stdout, "{text}"),
                Some(Ok(None)) => {}
                Some(Err(e)) => _ = stream_error.get_or_insert(e),
            }
            let _ = stdout.flush();
        },
    )?;
    drop(stream);
    if let Some(e) = stream_error {
        tracing::warn!(error = %e, "some generated tokens could not be decoded as they came");
    }
    let text = match &tokenizer {
        Some(tok) => Some(tok.decode(&g.tokens)?),
        None => None,
    };
    if !json {
        println!();
    }
    if let Some(path) = &args.logits_out {
        write_logits(path, &prompt, &g, ckpt.config.vocab_size)?;
    }
    let profile = match (args.profile, g.tokens.first()) {
        (true, Some(&next)) => Some(profile_steps(&rt, &model, &mut llama, &prompt, next)?),
        _ => None,
    };
    let report = Report {
        adapter: rt.gpu().info.name.clone(),
        backend: rt.gpu().caps.backend.clone(),
        compute_dtype: match llama.dtype() {
            dynvram_runtime::ActDtype::F16 => "f16",
            dynvram_runtime::ActDtype::F32 => "f32",
        },
        model_dir: args.model_dir.clone(),
        prompt,
        prompt_text: args.prompt.clone(),
        tokens: g.tokens.clone(),
        text,
        prefill_tokens_per_second: g.prefill.tokens_per_second(),
        decode_tokens_per_second: g.decode.tokens_per_second(),
        streamed_bytes_per_token: g.decode.bytes_per_pass(),
        prefill: g.prefill.clone(),
        decode: g.decode.clone(),
        model: model.report(),
        budget: rt.budget_report(),
        profile,
    };
    if json {
        print_json(&report)?;
    } else {
        print_text(&report);
    }
    Ok(ExitCode::SUCCESS)
}

/// One profiled prefill of `prompt` and one decode step of `next` after it.
fn profile_steps(
    rt: &Runtime,
    model: &Model,
    llama: &mut Llama,
    prompt: &[u32],
    next: u32,
) -> anyhow::Result<Profiles> {
    let limit = profile::memory_limit(rt);
    let opts = || ForwardOptions {
        logits: Some(LogitRows::Last),
        ..ForwardOptions::default()
    };
    let mut pass = |ids: &[u32], pos0: usize| {
        profile::profiled(rt, limit, || {
            let f = llama.forward_with(rt, model, ids, pos0, opts())?;
            Ok(((), f.stats))
        })
        .map(|((), p)| p)
    };
    Ok(Profiles {
        prefill: pass(prompt, 0)?,
        decode: pass(&[next], prompt.len())?,
    })
}

fn print_text(r: &Report) {
    let (m, b) = (&r.model, &r.budget);
    println!(
        "adapter    {} [{}], {} activations",
        r.adapter, r.backend, r.compute_dtype
    );
    println!(
        "model      {} ({} blocks, {})",
        r.model_dir.display(),
        m.blocks,
        size(m.model_bytes)
    );
    println!(
        "prefill    {} tokens in {:.1} ms: {:.1} tokens/s, {} streamed",
        r.prefill.tokens,
        r.prefill.seconds * 1e3,
        r.prefill_tokens_per_second,
        size(r.prefill.streamed_bytes)
    );
    println!(
        "decode     {} tokens in {:.1} ms: {:.2} tokens/s, {} streamed per token",
        r.decode.tokens,
        r.decode.seconds * 1e3,
        r.decode_tokens_per_second,
        size(r.streamed_bytes_per_token)
    );
    if r.decode.passes > 0 {
        let per = |s: f64| s * 1e3 / r.decode.passes as f64;
        println!(
            "           per token: CPU recording {:.2} ms, submitting {:.2} ms, waiting for the GPU {:.2} ms",
            per(r.decode.record_seconds),
            per(r.decode.submit_seconds),
            per(r.decode.wait_seconds)
        );
    }
    println!(
        "budget     {} usable of {} ({}), reserve {}, headroom {}",
        size(b.usable),
        size(b.capacity),
        b.source,
        size(b.reserve),
        size(b.headroom)
    );
    println!(
        "resident   {} in {} tensors (loaded_vram {}); streamed {} in {} tensors, 2 arenas of {}; peak VRAM {}",
        size(m.resident_bytes),
        m.resident_tensors,
        size(b.loaded_vram),
        size(m.streamed_bytes),
        m.streamed_tensors,
        size(m.arena_bytes),
        size(b.peak)
    );
    if let Some(p) = &r.profile {
        profile::print(&format!("prefill ({} tokens)", r.prompt.len()), &p.prefill);
        profile::print(
            &format!("decode step (position {})", r.prompt.len()),
            &p.decode,
        );
    }
}

/// Writes `prompt_ids` (I64), `prompt_logits` `[prompt, vocab]`,
/// `generated_ids` (I64) and `step_logits` `[steps, vocab]` (F32) through a
/// temporary file renamed into place.
fn write_logits(path: &Path, prompt: &[u32], g: &Generation, vocab: usize) -> anyhow::Result<()> {
    use safetensors::tensor::TensorView;
    let i64_bytes = |ids: &[u32]| {
        ids.iter()
            .flat_map(|&i| i64::from(i).to_le_bytes())
            .collect::<Vec<u8>>()
    };
    let f32_bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let prompt_ids = i64_bytes(prompt);
    let gen_ids = i64_bytes(&g.tokens);
    let prompt_logits = f32_bytes(g.prompt_logits.as_deref().unwrap_or_default());
    let steps: Vec<f32> = g.step_logits.concat();
    let step_logits = f32_bytes(&steps);
    let views = [
        (
            "prompt_ids",
            safetensors::Dtype::I64,
            vec![prompt.len()],
            &prompt_ids,
        ),
        (
            "generated_ids",
            safetensors::Dtype::I64,
            vec![g.tokens.len()],
            &gen_ids,
        ),
        (
            "prompt_logits",
            safetensors::Dtype::F32,
            vec![prompt_logits.len() / 4 / vocab, vocab],
            &prompt_logits,
        ),
        (
            "step_logits",
            safetensors::Dtype::F32,
            vec![g.step_logits.len(), vocab],
            &step_logits,
        ),
    ]
    .into_iter()
    .map(|(name, dtype, shape, data)| Ok((name, TensorView::new(dtype, shape, data)?)))
    .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()?;
    let bytes = safetensors::serialize(views, None)?;
    dynvram_loader::atomic::write_file(path, &bytes)?;
    Ok(())
}
