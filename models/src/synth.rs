//! Randomly initialised weights for synthetic checkpoints of any family
//! (Llama, Flux, the MLP stack): the stored dtype, the seed, how each
//! tensor is drawn, and the one writer. Tensors are generated in chunks of
//! 2^20 values, a batch of chunks on all cores at a time, written in order,
//! so memory stays bounded for 7B-class models; every file is written to a
//! temporary name and renamed into place.

use std::io::Write;
use std::path::Path;

use rand::SeedableRng;
use rand_distr::{Distribution, Normal, Uniform};
use serde_json::{Value, json};

use dynvram_runtime::loader::atomic::AtomicFile;

use crate::error::ModelError;

/// Values generated per chunk (bounds memory for the largest tensors).
const CHUNK: usize = 1 << 20;

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
    pub(crate) fn size(self) -> usize {
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

    pub(crate) fn torch_name(self) -> &'static str {
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

/// Settings of the synth writers (`llama::synth::write_checkpoint`,
/// `flux::synth::write_checkpoint`, [`write_file`]); `layers` and
/// `shard_bytes` apply to the Llama checkpoints, which have them.
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
    pub(crate) fn numel(&self) -> usize {
        self.shape.iter().product()
    }
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
) -> Result<u64, ModelError> {
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

/// Consecutive runs of tensors of at most `limit` bytes each (a tensor
/// larger than `limit` gets a shard of its own).
pub(crate) fn split_shards(
    all: &[SynthTensor],
    elem: u64,
    limit: u64,
) -> Vec<std::ops::Range<usize>> {
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
pub(crate) fn atomic_write(
    path: &Path,
    body: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), ModelError> {
    let load = |e: dynvram_runtime::loader::LoadError| ModelError::Runtime(e.into());
    let mut file = AtomicFile::create(path).map_err(load)?;
    body(&mut file).map_err(|e| load(file.error(e)))?;
    file.commit().map(drop).map_err(load)
}

/// A safetensors file: 8-byte header length, JSON header padded with spaces
/// to a multiple of 8, then each tensor's bytes in order.
pub(crate) fn write_shard(
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
