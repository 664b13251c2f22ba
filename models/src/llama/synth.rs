//! Randomly initialised checkpoints of real models' shapes in Hugging Face
//! layout, for benchmarks (real weights cannot be downloaded everywhere) and
//! tests, written shard by shard through [`crate::synth`].

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::synth::{Init, SynthOptions, SynthTensor, atomic_write, split_shards, write_shard};

use super::checkpoint::names;
use super::{LlamaConfig, LlamaError};

/// Names accepted by [`preset`].
pub const PRESETS: [&str; 7] = [
    "tiny",
    "llama3-tiny",
    "llama-7b",
    "llama-13b",
    "llama3-8b",
    "qwen2-7b",
    "qwen2-0.5b",
];

/// The `config.json` of a known model (transformers 5 spelling).
pub fn preset(name: &str) -> Option<Value> {
    // (model_type, hidden, intermediate, layers, heads, kv heads, vocab, theta, eps, max_pos, tied)
    let (model_type, h, i, l, nh, nkv, v, theta, eps, max_pos, tied) = match name {
        "tiny" => ("llama", 256, 704, 4, 8, 2, 1024, 10_000.0, 1e-5, 512, false),
        // Llama 3's vocabulary and RoPE (theta 500 000, llama3 scaling) on
        // tiny layers: what a real Llama 3 checkpoint asks of the kernels
        // beyond the shapes.
        "llama3-tiny" => (
            "llama", 256, 704, 2, 8, 2, 128_256, 500_000.0, 1e-5, 131_072, false,
        ),
        "llama3-8b" => (
            "llama", 4096, 14336, 32, 32, 8, 128_256, 500_000.0, 1e-5, 131_072, false,
        ),
        "llama-7b" => (
            "llama", 4096, 11008, 32, 32, 32, 32000, 10_000.0, 1e-5, 4096, false,
        ),
        "llama-13b" => (
            "llama", 5120, 13824, 40, 40, 40, 32000, 10_000.0, 1e-5, 4096, false,
        ),
        "qwen2-7b" => (
            "qwen2",
            3584,
            18944,
            28,
            28,
            4,
            152_064,
            1_000_000.0,
            1e-6,
            32768,
            false,
        ),
        "qwen2-0.5b" => (
            "qwen2",
            896,
            4864,
            24,
            14,
            2,
            151_936,
            1_000_000.0,
            1e-6,
            32768,
            true,
        ),
        _ => return None,
    };
    // Llama 3.1's scaling of the frequencies past its 8192-token training.
    let rope = if name.starts_with("llama3") {
        json!({"rope_theta": theta, "rope_type": "llama3", "factor": 8.0,
               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192})
    } else {
        json!({"rope_theta": theta, "rope_type": "default"})
    };
    let arch = if model_type == "qwen2" {
        "Qwen2ForCausalLM"
    } else {
        "LlamaForCausalLM"
    };
    Some(json!({
        "architectures": [arch],
        "model_type": model_type,
        "hidden_act": "silu",
        "hidden_size": h,
        "intermediate_size": i,
        "num_hidden_layers": l,
        "num_attention_heads": nh,
        "num_key_value_heads": nkv,
        "head_dim": h / nh,
        "vocab_size": v,
        "rms_norm_eps": eps,
        "max_position_embeddings": max_pos,
        "rope_parameters": rope,
        "tie_word_embeddings": tied,
        "attention_bias": false,
        "mlp_bias": false,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }))
}

/// Every tensor of a checkpoint for `c`, in file order: matrices N(0, 0.02)
/// (q/k ×4 so attention is not uniform), biases N(0, 0.1), norm weights
/// U(0.5, 1.5) (so a port that ignores them fails).
pub fn tensors(c: &LlamaConfig) -> Vec<SynthTensor> {
    let t = |name: String, shape: Vec<usize>, init| SynthTensor { name, shape, init };
    let (h, i, q, kv) = (
        c.hidden_size,
        c.intermediate_size,
        c.q_width(),
        c.kv_width(),
    );
    let mut out = vec![t(
        names::EMBED.into(),
        vec![c.vocab_size, h],
        Init::Normal(0.02),
    )];
    for l in 0..c.num_hidden_layers {
        let shapes = [
            ("q_proj", q, h, c.qkv_bias, 0.08),
            ("k_proj", kv, h, c.qkv_bias, 0.08),
            ("v_proj", kv, h, c.qkv_bias, 0.02),
            ("o_proj", h, q, c.o_bias, 0.02),
            ("gate_proj", i, h, c.mlp_bias, 0.02),
            ("up_proj", i, h, c.mlp_bias, 0.02),
            ("down_proj", h, i, c.mlp_bias, 0.02),
        ];
        out.push(t(names::input_norm(l), vec![h], Init::Uniform(0.5, 1.5)));
        for (p, n, k, bias, std) in shapes {
            let layer = names::proj(l, p);
            out.push(t(format!("{layer}.weight"), vec![n, k], Init::Normal(std)));
            if bias {
                out.push(t(format!("{layer}.bias"), vec![n], Init::Normal(0.1)));
            }
        }
        out.push(t(names::post_norm(l), vec![h], Init::Uniform(0.5, 1.5)));
    }
    out.push(t(
        names::FINAL_NORM.into(),
        vec![h],
        Init::Uniform(0.5, 1.5),
    ));
    if !c.tie_word_embeddings {
        out.push(t(
            format!("{}.weight", names::LM_HEAD),
            vec![c.vocab_size, h],
            Init::Normal(0.02),
        ));
    }
    out
}

/// What [`write_checkpoint`] wrote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SynthReport {
    /// Files written (shards, index, config).
    pub files: Vec<PathBuf>,
    /// Tensors written.
    pub tensors: usize,
    /// Bytes of tensor data.
    pub bytes: u64,
}

/// Writes `config.json` and random weights for `config` into `dir`.
/// `progress(done, total)` is called in tensor-data bytes.
pub fn write_checkpoint(
    dir: &Path,
    config: &Value,
    opts: SynthOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SynthReport, LlamaError> {
    let _span = tracing::info_span!("synth", dir = %dir.display()).entered();
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| LlamaError::Io { path, source }
    };
    let mut config = config.clone();
    if let Some(l) = opts.layers {
        config["num_hidden_layers"] = json!(l);
    }
    config["dtype"] = json!(opts.dtype.torch_name());
    let parsed = LlamaConfig::from_json(&config).map_err(|why| LlamaError::Config {
        path: dir.join("config.json"),
        why,
    })?;
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let all = tensors(&parsed);
    let shards = split_shards(&all, opts.dtype.size() as u64, opts.shard_bytes.max(1));
    let total: u64 = all
        .iter()
        .map(|t| (t.numel() * opts.dtype.size()) as u64)
        .sum();
    let mut files = Vec::new();
    let mut done = 0u64;
    let mut weight_map = serde_json::Map::new();
    let n = shards.len();
    for (s, shard) in shards.iter().enumerate() {
        let name = if n == 1 {
            "model.safetensors".to_owned()
        } else {
            format!("model-{:05}-of-{n:05}.safetensors", s + 1)
        };
        let path = dir.join(&name);
        atomic_write(&path, |w| {
            write_shard(w, &all[shard.clone()], opts, &mut done, total, progress)
        })?;
        for t in &all[shard.clone()] {
            weight_map.insert(t.name.clone(), json!(name));
        }
        files.push(path);
    }
    let index = dir.join("model.safetensors.index.json");
    let single = dir.join("model.safetensors");
    if n > 1 {
        let body = json!({"metadata": {"total_size": total}, "weight_map": weight_map});
        atomic_write(&index, |w| w.write_all(pretty(&body).as_bytes()))?;
        files.push(index);
        remove_stale(&single)?;
    } else {
        remove_stale(&index)?;
    }
    let cfg = dir.join("config.json");
    atomic_write(&cfg, |w| w.write_all(pretty(&config).as_bytes()))?;
    files.push(cfg);
    // As transformers saves it: the special ids generation stops at.
    let gen_cfg = dir.join(super::chat::GENERATION_CONFIG);
    let body =
        json!({"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]});
    atomic_write(&gen_cfg, |w| w.write_all(pretty(&body).as_bytes()))?;
    files.push(gen_cfg);
    Ok(SynthReport {
        files,
        tensors: all.len(),
        bytes: total,
    })
}

/// Writes a synthetic `tokenizer.json` ([`super::tokenizer::synthetic`])
/// of `vocab_size` tokens into `dir`, with a `tokenizer_config.json`
/// holding a chat template, so text prompts and `--chat` work on a
/// synthetic checkpoint. Returns the tokenizer file written.
pub fn write_tokenizer(dir: &Path, vocab_size: usize) -> Result<PathBuf, LlamaError> {
    let path = dir.join(super::tokenizer::FILE);
    let _span = tracing::info_span!("synth_tokenizer", path = %path.display()).entered();
    let json =
        super::tokenizer::synthetic_json(vocab_size).map_err(|why| LlamaError::Tokenizer {
            path: path.clone(),
            why,
        })?;
    std::fs::create_dir_all(dir).map_err(|source| LlamaError::Io {
        path: dir.to_owned(),
        source,
    })?;
    atomic_write(&path, |w| w.write_all(json.as_bytes()))?;
    let config = dir.join(super::chat::TOKENIZER_CONFIG);
    let body = super::tokenizer::synthetic_config_json();
    atomic_write(&config, |w| w.write_all(body.as_bytes()))?;
    Ok(path)
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default() + "\n"
}

fn remove_stale(path: &Path) -> Result<(), LlamaError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(LlamaError::Io {
            path: path.to_owned(),
            source: e,
        }),
        _ => Ok(()),
    }
}
