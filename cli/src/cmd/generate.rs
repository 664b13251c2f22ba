//! `dynvram generate MODEL_DIR`: decoding of a Llama-family checkpoint
//! under a VRAM budget (greedy by default, sampling with a seed on the CPU
//! when asked), tokens printed to stdout as they come, then prefill/decode
//! speed, bytes streamed per token and the budget figures.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use dynvram_models::llama::{
    ChatTemplate, Checkpoint, DecodeLoop, ForwardOptions, Generation, Limits, Llama, LogitRows,
    Message, Sampler, Sampling, TextTokenizer, eos_ids,
};
use dynvram_runtime::ops::profile::Profile;
use dynvram_runtime::{Model, Runtime, RuntimeConfig};
use serde::Serialize;

use crate::cmd::adapter_args::AdapterArgs;
use crate::cmd::budget_args::BudgetArgs;
use crate::cmd::profile;
use crate::cmd::run::LinearDtypeArg;
use crate::cmd::runtime_args::ComputeDtype;
use crate::output::{dtype_name, print_adapter, print_json, size};

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
    /// Wrap `--prompt` as one user turn of the checkpoint's chat template
    /// (`chat_template` of tokenizer_config.json, or chat_template.jinja),
    /// with the assistant's header after it; the config's `eos_token` also
    /// ends generation.
    #[arg(long, requires = "prompt", conflicts_with = "prompt_ids")]
    chat: bool,
    /// Sampling temperature; 0 (the default) is greedy decoding, the same
    /// tokens every run. Above 0 tokens are drawn on the CPU from the
    /// softmax of logits / temperature.
    #[arg(long, default_value_t = 0.0, value_name = "T")]
    temperature: f32,
    /// With --temperature: draw only from the K most likely tokens (0: all;
    /// at most 16 777 216, the largest vocabulary).
    #[arg(long, default_value_t = 0, value_name = "K",
          value_parser = crate::cmd::ranges::int::<usize, 0, { 1 << 24 }>)]
    top_k: usize,
    /// With --temperature: draw only from the fewest most likely tokens
    /// whose probabilities reach P (1: all).
    #[arg(long, default_value_t = 1.0, value_name = "P")]
    top_p: f32,
    /// Seed of the sampler (the same seed and settings give the same text).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Tokens to generate (at most 1 048 576; the KV cache holds the prompt
    /// and these).
    #[arg(long, default_value_t = 32, value_parser = max_new_tokens)]
    max_new_tokens: usize,
    /// Stop after any of these token ids (comma separated). Default: the
    /// checkpoint's `eos_token_id` (generation_config.json, else
    /// config.json; an id or a list), plus the chat template's `eos_token`
    /// with --chat.
    #[arg(long, value_delimiter = ',', conflicts_with = "ignore_eos")]
    eos: Vec<u32>,
    /// Generate --max-new-tokens tokens whatever comes (no end-of-sequence stop).
    #[arg(long)]
    ignore_eos: bool,
    /// Untimed runs (the prompt, then one decode step) before the measured
    /// one, so first-use shader compilation is not counted as prefill time
    /// (0 to 1000).
    #[arg(long, default_value_t = 0, value_parser = crate::cmd::ranges::int::<usize, 0, 1000>)]
    warmup: usize,
    /// Greedy decoding waits for each step's logits and picks the token on
    /// the CPU before recording the next step, as sampling does (for
    /// comparisons). By default, with every weight resident, step t+1 is
    /// recorded while the GPU runs step t, which picks its token itself.
    #[arg(long)]
    sync_decode: bool,
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
    /// Token ids that end generation.
    eos: Vec<u32>,
    /// Generation ended on one of `eos` (else at --max-new-tokens).
    stopped_at_eos: bool,
    /// Greedy (temperature 0) or the sampling settings.
    sampling: Sampling,
    /// The decode loop that ran: `pipelined` (greedy, resident: step t+1
    /// recorded while the GPU runs step t; `wait` is then the time blocked
    /// on each token's read-back) or `sync`.
    decode_loop: DecodeLoop,
    /// The prompt went through the chat template.
    chat: bool,
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

/// The sampler's settings from the flags, checked (no GPU or file needed).
pub fn sampling(args: &Args) -> anyhow::Result<Sampling> {
    let s = Sampling {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
    };
    s.check().map_err(anyhow::Error::msg)?;
    Ok(s)
}

/// The prompt's ids: `--prompt-ids`, or `--prompt` through the tokenizer
/// (and the chat template with `--chat`); with the template's EOS id.
fn prompt_ids(
    args: &Args,
    tokenizer: Option<&TextTokenizer>,
) -> anyhow::Result<(Vec<u32>, Option<u32>)> {
    let (Some(text), Some(tok)) = (&args.prompt, tokenizer) else {
        return Ok((args.prompt_ids.clone(), None));
    };
    if !args.chat {
        return Ok((tok.encode(text)?, None));
    }
    let template = ChatTemplate::open(&args.model_dir)?;
    let rendered = template.render(&[Message::user(text)], true)?;
    tracing::info!(text = %rendered, "chat prompt");
    let eos = tok.token_id(&template.eos_token);
    Ok((tok.encode_plain(&rendered)?, eos))
}

/// Refuses a prompt plus `max_new` tokens past the checkpoint's context,
/// naming both numbers.
fn check_context(prompt: usize, max_new: usize, ckpt: &Checkpoint) -> anyhow::Result<()> {
    let context = ckpt.config.max_position_embeddings;
    if prompt + max_new > context {
        bail!(
            "the prompt ({prompt} tokens) plus --max-new-tokens {max_new} is {} tokens, more than \
             the model's context of {context} (max_position_embeddings in {}); shorten the prompt \
             or lower --max-new-tokens to at most {}",
            prompt + max_new,
            ckpt.dir.join("config.json").display(),
            context.saturating_sub(prompt)
        );
    }
    Ok(())
}

/// Runs the subcommand.
pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let reads: Vec<&std::path::Path> = [Some(args.model_dir.as_path()), args.weights.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    crate::cmd::outputs::check_outputs(&reads, &[args.logits_out.as_deref()], &args.adapter)?;
    let sampling = sampling(&args)?;
    let mut sampler = Sampler::new(sampling).map_err(anyhow::Error::msg)?;
    let tokenizer = match &args.prompt {
        Some(_) => {
            Some(TextTokenizer::open(&args.model_dir).context("--prompt needs a tokenizer")?)
        }
        None => None,
    };
    let (prompt, chat_eos) = prompt_ids(&args, tokenizer.as_ref())?;
    if prompt.is_empty() {
        bail!("the prompt is empty");
    }
    let ckpt = Checkpoint::open_with(&args.model_dir, args.weights.as_deref())
        .with_context(|| format!("opening {}", args.model_dir.display()))?;
    check_context(prompt.len(), args.max_new_tokens, &ckpt)?;
    let eos = if args.ignore_eos {
        Vec::new()
    } else if !args.eos.is_empty() {
        args.eos.clone()
    } else {
        let mut ids = eos_ids(&args.model_dir)?;
        ids.extend(chat_eos.filter(|id| !ids.contains(id)));
        ids
    };
    // An id past the vocabulary can never be generated: the stop would
    // never come, silently.
    let vocab = ckpt.config.vocab_size;
    if let Some(bad) = eos.iter().find(|&&id| id as usize >= vocab) {
        bail!(
            "end-of-sequence id {bad} is outside the vocabulary of {vocab} tokens (ids 0 to {}): \
             it can never be generated (from {})",
            vocab - 1,
            if args.eos.is_empty() {
                "the checkpoint's eos_token_id"
            } else {
                "--eos"
            }
        );
    }
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
    tracing::info!(?prompt, text = ?args.prompt, ?eos, "prompt");
    // Greedy without logits to keep: the GPU may pick the tokens.
    let greedy = sampling.is_greedy() && args.logits_out.is_none();
    let decode_loop = if args.sync_decode {
        DecodeLoop::Sync
    } else {
        DecodeLoop::Pipelined
    };
    for _ in 0..args.warmup {
        let steps = args.max_new_tokens.min(2);
        if greedy {
            llama.generate_greedy(&rt, &model, &prompt, steps, &[], decode_loop, &mut |_| {})?;
        } else {
            // Not the sampler: its stream must start with the measured run.
            llama.generate(&rt, &model, &prompt, steps, &[], false, &mut |_| {})?;
        }
    }
    let mut stream = tokenizer.as_ref().map(TextTokenizer::stream);
    let mut stream_error = None;
    let mut on_token = |t| {
        if json {
            return;
        }
        match stream.as_mut().map(|s| s.step(t)) {
            None => crate::output::out(format_args!("{t} ")),
            Some(Ok(Some(text))) => crate::output::out(format_args!("{text}")),
            Some(Ok(None)) => {}
            Some(Err(e)) => _ = stream_error.get_or_insert(e),
        }
        crate::output::flush_stdout();
    };
    let (max_new, keep_logits) = (args.max_new_tokens, args.logits_out.is_some());
    let g = if greedy {
        llama.generate_greedy(
            &rt,
            &model,
            &prompt,
            max_new,
            &eos,
            decode_loop,
            &mut on_token,
        )?
    } else {
        llama.generate_with(
            &rt,
            &model,
            &prompt,
            max_new,
            &eos,
            keep_logits,
            &mut |row| sampler.pick(row),
            &mut on_token,
        )?
    };
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
        compute_dtype: dtype_name(llama.dtype()),
        model_dir: args.model_dir.clone(),
        prompt,
        prompt_text: args.prompt.clone(),
        tokens: g.tokens.clone(),
        eos,
        stopped_at_eos: g.stopped_at_eos,
        sampling,
        decode_loop: if g.pipelined {
            DecodeLoop::Pipelined
        } else {
            DecodeLoop::Sync
        },
        chat: args.chat,
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
    let limit = profile::limits(rt);
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
        "generated  {} tokens ({}): prefill {:.1} tokens/s, decode {:.2} tokens/s",
        r.tokens.len(),
        if r.stopped_at_eos {
            "stopped at end of sequence"
        } else {
            "reached --max-new-tokens"
        },
        r.prefill_tokens_per_second,
        r.decode_tokens_per_second
    );
    print_adapter(&r.adapter, &r.backend, r.compute_dtype);
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
        let waiting = match r.decode_loop {
            DecodeLoop::Pipelined => "waiting for its token (the next step queued)",
            DecodeLoop::Sync => "waiting for the GPU",
        };
        println!(
            "           per token: CPU recording {:.2} ms, submitting {:.2} ms, {waiting} {:.2} ms",
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
