//! Randomly initialised checkpoints of real models' shapes in Hugging Face
//! layout, for benchmarks (real weights cannot be downloaded everywhere) and
//! tests. Tensors are generated in chunks of 2^20 values, a batch of chunks
//! on all cores at a time, written in order shard by shard, so memory stays
//! bounded for 7B-class models; every file is written to a temporary name
//! and renamed into place.

use std::io::Write;
use std::path::{Path, PathBuf};

use rand::SeedableRng;
use rand_distr::{Distribution, Normal, Uniform};
use serde_json::{Value, json};

use dynvram_runtime::loader::atomic::AtomicFile;

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

/// Values generated per chunk (bounds memory for the largest tensors).
const CHUNK: usize = 1 << 20;

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

/// Stored dtype of the weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynthDtype {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16 (round to nearest even).
    Bf16,
}

impl SynthDtype {
    fn size(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::Bf16 => 2,
        }
    }

    fn safetensors_name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::Bf16 => "BF16",
        }
    }

    fn torch_name(self) -> &'static str {
        match self {
            Self::F32 => "float32",
            Self::F16 => "float16",
            Self::Bf16 => "bfloat16",
        }
    }

    fn encode(self, values: &[f32], out: &mut Vec<u8>) {
        out.clear();
        match self {
            Self::F32 => values
                .iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
            Self::F16 => values
                .iter()
                .for_each(|v| out.extend_from_slice(&half::f16::from_f32(*v).to_le_bytes())),
            Self::Bf16 => values
                .iter()
                .for_each(|v| out.extend_from_slice(&half::bf16::from_f32(*v).to_le_bytes())),
        }
    }
}

/// Settings of [`write_checkpoint`].
#[derive(Debug, Clone, Copy)]
pub struct SynthOptions {
    /// Stored dtype.
    pub dtype: SynthDtype,
    /// Seed of every tensor (each tensor draws from its own stream).
    pub seed: u64,
    /// Override of `num_hidden_layers`.
    pub layers: Option<usize>,
    /// Largest shard; above this the checkpoint is sharded with an index.
    pub shard_bytes: u64,
}

impl Default for SynthOptions {
    fn default() -> Self {
        Self {
            dtype: SynthDtype::Bf16,
            seed: 0,
            layers: None,
            shard_bytes: 4 << 30,
        }
    }
}

/// How a tensor's values are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// N(0, std²).
    Normal(f32),
    /// U(lo, hi).
    Uniform(f32, f32),
}

/// One tensor to write.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthTensor {
    /// Name in HF layout.
    pub name: String,
    /// Shape (`[out, in]` for linears).
    pub shape: Vec<usize>,
    /// Distribution.
    pub init: Init,
}

impl SynthTensor {
    fn numel(&self) -> usize {
        self.shape.iter().product()
    }
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

/// Writes `tensors`, drawn as `opts` says (dtype, seed), as one safetensors
/// file at `path`, atomically; returns the bytes of tensor data. The
/// benchmark files of other architectures (the MLP stack of `bench pass`)
/// are written with it too.
pub fn write_file(
    path: &Path,
    tensors: &[SynthTensor],
    opts: SynthOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<u64, LlamaError> {
    let total: u64 = tensors
        .iter()
        .map(|t| (t.numel() * opts.dtype.size()) as u64)
        .sum();
    let mut done = 0;
    atomic_write(path, |w| {
        write_shard(w, tensors, opts, &mut done, total, progress)
    })?;
    Ok(total)
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

/// Consecutive runs of tensors of at most `limit` bytes each (a tensor
/// larger than `limit` gets a shard of its own).
fn split_shards(all: &[SynthTensor], elem: u64, limit: u64) -> Vec<std::ops::Range<usize>> {
    let mut shards = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (i, t) in all.iter().enumerate() {
        let size = t.numel() as u64 * elem;
        if i > start && bytes + size > limit {
            shards.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    shards.push(start..all.len());
    shards
}

/// Writes `path` through `dynvram_loader::atomic` (temp file beside it,
/// fsync, rename; removed on error or by the CLI's signal handler).
fn atomic_write(
    path: &Path,
    body: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), LlamaError> {
    let load = |e: dynvram_runtime::loader::LoadError| LlamaError::Runtime(e.into());
    let mut file = AtomicFile::create(path).map_err(load)?;
    body(&mut file).map_err(|e| load(file.error(e)))?;
    file.commit().map(drop).map_err(load)
}

/// A safetensors file: 8-byte header length, JSON header padded with spaces
/// to a multiple of 8, then each tensor's bytes in order.
fn write_shard(
    w: &mut dyn Write,
    tensors: &[SynthTensor],
    opts: SynthOptions,
    done: &mut u64,
    total: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> std::io::Result<()> {
    let elem = opts.dtype.size();
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut offset = 0usize;
    for t in tensors {
        let len = t.numel() * elem;
        header.insert(
            t.name.clone(),
            json!({"dtype": opts.dtype.safetensors_name(), "shape": t.shape, "data_offsets": [offset, offset + len]}),
        );
        offset += len;
    }
    let mut text = Value::Object(header).to_string();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    w.write_all(&(text.len() as u64).to_le_bytes())?;
    w.write_all(text.as_bytes())?;
    // (tensor, chunk index, values) in file order; chunks are generated on
    // all cores a batch at a time and written in order.
    let jobs: Vec<(&SynthTensor, u64, usize)> = tensors
        .iter()
        .flat_map(|t| {
            let n = t.numel();
            (0..n.div_ceil(CHUNK)).map(move |c| (t, c as u64, (n - c * CHUNK).min(CHUNK)))
        })
        .collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    for batch in jobs.chunks(threads) {
        let parts = std::thread::scope(|s| {
            let handles: Vec<_> = batch
                .iter()
                .map(|&(t, c, n)| s.spawn(move || chunk_bytes(t, opts, c, n)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(std::io::Error::other("a synth worker panicked")))
                })
                .collect::<std::io::Result<Vec<Vec<u8>>>>()
        })?;
        for bytes in parts {
            w.write_all(&bytes)?;
            *done += bytes.len() as u64;
            progress(*done, total);
        }
    }
    Ok(())
}

/// The encoded values of chunk `c` (`n` values) of `t`: each chunk draws
/// from its own stream, so chunks can be generated in parallel and a
/// tensor's values depend only on the seed and its name.
fn chunk_bytes(t: &SynthTensor, opts: SynthOptions, c: u64, n: usize) -> std::io::Result<Vec<u8>> {
    let seed = tensor_seed(opts.seed, &t.name) ^ c.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let values: Vec<f32> = match t.init {
        Init::Normal(std) => {
            let d = Normal::new(0.0f32, std).map_err(std::io::Error::other)?;
            (0..n).map(|_| d.sample(&mut rng)).collect()
        }
        Init::Uniform(lo, hi) => {
            let d = Uniform::new(lo, hi).map_err(std::io::Error::other)?;
            (0..n).map(|_| d.sample(&mut rng)).collect()
        }
    };
    let mut bytes = Vec::with_capacity(n * opts.dtype.size());
    opts.dtype.encode(&values, &mut bytes);
    Ok(bytes)
}

/// A per-tensor seed (FNV-1a of the name mixed with the seed), so a tensor's
/// values do not depend on which shard or position it lands in.
fn tensor_seed(seed: u64, name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64 ^ seed, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}
