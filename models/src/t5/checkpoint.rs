//! A T5 encoder on disk: one `.safetensors` file with HF `T5EncoderModel`
//! keys (`shared.weight`, `encoder.*`, as ComfyUI's `t5xxl_fp16.safetensors`
//! and `t5xxl_fp8_e4m3fn_scaled.safetensors`; any prefix before them is
//! found), its config from an HF `config.json` or inferred from the shapes.

use std::path::{Path, PathBuf};

use dynvram_runtime::loader::ModelFiles;
use dynvram_runtime::quant::TensorList;
use dynvram_runtime::{ActDtype, BlockSpec, FilesList, ModelSpec, RuntimeError};

use super::config::{LAYER_NORM_EPS, MAX_DISTANCE, T5Config};
use crate::check::{Checker, count_blocks, prefix_of, settle_config};
use crate::error::ModelError as T5Error;

/// The key every T5 encoder has.
const FINAL_NORM: &str = "encoder.final_layer_norm.weight";

/// Tensor names of a T5 encoder under a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// Everything before `encoder.` (`""` in ComfyUI's files).
    pub prefix: String,
    /// The embedding table: `shared.weight`, or `encoder.embed_tokens.weight`
    /// where a file holds only that (the same tensor: they are tied).
    pub embedding: String,
}

impl Names {
    /// `{prefix}encoder.block.{i}.layer.{sub}.{rest}`.
    pub fn sub(&self, i: usize, sub: u8, rest: &str) -> String {
        format!("{}encoder.block.{i}.layer.{sub}.{rest}", self.prefix)
    }

    /// Block `i`'s attention linears: q, k, v, o.
    pub fn attn_linears(&self, i: usize) -> [String; 4] {
        ["q", "k", "v", "o"].map(|l| self.sub(i, 0, &format!("SelfAttention.{l}")))
    }

    /// Block `i`'s gated MLP linears: wi_0, wi_1, wo.
    pub fn mlp_linears(&self, i: usize) -> [String; 3] {
        ["wi_0", "wi_1", "wo"].map(|l| self.sub(i, 1, &format!("DenseReluDense.{l}")))
    }

    /// The RMS norm weight of block `i`'s sub-layer `sub` (0: attention,
    /// 1: MLP).
    pub fn norm(&self, i: usize, sub: u8) -> String {
        self.sub(i, sub, "layer_norm.weight")
    }

    /// Block 0's relative position bias `[buckets, heads]`, which every
    /// block uses.
    pub fn relative_attention_bias(&self) -> String {
        self.sub(0, 0, "SelfAttention.relative_attention_bias.weight")
    }

    /// `encoder.final_layer_norm.weight`.
    pub fn final_norm(&self) -> String {
        format!("{}{FINAL_NORM}", self.prefix)
    }
}

/// A T5 encoder, its config checked against every tensor a pass uses.
#[derive(Debug)]
pub struct T5Checkpoint {
    /// The weights file.
    pub path: PathBuf,
    /// The config (given, or inferred).
    pub config: T5Config,
    /// Whether the config was inferred from the shapes.
    pub inferred: bool,
    /// Tensor names.
    pub names: Names,
    files: ModelFiles,
}

impl T5Checkpoint {
    /// Opens `path`, a `.safetensors` file; `config` (e.g.
    /// [`T5Config::from_hf_json`]) or, when `None`, the config inferred
    /// from the shapes: blocks from the keys, heads from
    /// `relative_attention_bias` `[buckets, heads]`, `d_kv` from q, the
    /// widths from the embedding and `wi_0`, T5's max distance 128 and
    /// eps 1e-6. A file that is not a T5 encoder is an error naming what is
    /// missing.
    pub fn open(path: &Path, config: Option<T5Config>) -> Result<Self, T5Error> {
        let _span = tracing::info_span!("t5_open", path = %path.display()).entered();
        if !path.is_file() {
            return Err(T5Error::Weights {
                path: path.to_owned(),
                why: "no such file".into(),
            });
        }
        let files = ModelFiles::open(path).map_err(RuntimeError::from)?;
        let list = FilesList::new(&files);
        let chk = Checker { list: &list, path };
        let prefix = prefix_of(&list, FINAL_NORM).ok_or_else(|| {
            let looks = if prefix_of(&list, crate::clip::TOKEN_EMBEDDING).is_some() {
                " (it looks like a CLIP text encoder)"
            } else {
                ""
            };
            chk.err(format!(
                "not a T5 encoder{looks}: no `{FINAL_NORM}` under any prefix"
            ))
        })?;
        let embedding = ["shared.weight", "encoder.embed_tokens.weight"]
            .map(|n| format!("{prefix}{n}"))
            .into_iter()
            .find(|n| list.dtype_shape(n).is_some())
            .ok_or_else(|| {
                chk.err(format!(
                    "no embedding table: neither `{prefix}shared.weight` nor \
                     `{prefix}encoder.embed_tokens.weight`"
                ))
            })?;
        let names = Names { prefix, embedding };
        let (config, inferred) = settle_config(
            config,
            T5Config::validate,
            |why| chk.err(why),
            || infer(&chk, &names),
            |c| check(&chk, &names, c),
        )?;
        drop(list);
        Ok(Self {
            path: path.to_owned(),
            config,
            inferred,
            names,
            files,
        })
    }

    /// The opened weights file.
    pub fn files(&self) -> &ModelFiles {
        &self.files
    }

    /// The blocks of one pass: per encoder block its attention (norm,
    /// q/k/v/o) and its gated MLP (norm, wi_0/wi_1/wo) — half a block each,
    /// so a budget double-buffers half as much — and `final_layer_norm`.
    /// The embedding rows and the relative position table are read on the
    /// host.
    pub fn blocks(&self) -> Vec<BlockSpec> {
        let nm = &self.names;
        let layers = (0..self.config.num_layers).flat_map(|i| {
            [
                BlockSpec {
                    name: format!("encoder.block.{i}.layer.0"),
                    linears: nm.attn_linears(i).to_vec(),
                    tensors: vec![nm.norm(i, 0)],
                    ..BlockSpec::default()
                },
                BlockSpec {
                    name: format!("encoder.block.{i}.layer.1"),
                    linears: nm.mlp_linears(i).to_vec(),
                    tensors: vec![nm.norm(i, 1)],
                    ..BlockSpec::default()
                },
            ]
        });
        let fin = BlockSpec {
            name: "final_layer_norm".into(),
            tensors: vec![nm.final_norm()],
            ..BlockSpec::default()
        };
        layers.chain(std::iter::once(fin)).collect()
    }

    /// The runtime spec of a pass over `batch` prompts of `len` tokens with
    /// activations in `dtype`.
    pub fn spec(&self, batch: usize, len: usize, dtype: ActDtype) -> ModelSpec {
        let list = FilesList::new(&self.files);
        let blocks = self.blocks();
        ModelSpec {
            views: Default::default(),
            files: vec![self.path.clone()],
            scratch_bytes: super::scratch::scratch_bytes(
                &self.config,
                batch,
                len,
                dtype,
                crate::LinearNeeds::of(&list, &blocks),
            ),
            scratch_wish: 0,
            blocks,
        }
    }
}

/// The config of the shapes: see [`T5Checkpoint::open`].
fn infer(chk: &Checker<'_>, nm: &Names) -> Result<T5Config, T5Error> {
    let emb = chk.shape_of(&nm.embedding, "the embedding")?;
    let &[vocab_size, d_model] = emb.as_slice() else {
        return Err(chk.err(format!(
            "`{}` has shape {emb:?}, expected [vocab, d_model]",
            nm.embedding
        )));
    };
    let rab = chk.shape_of(&nm.relative_attention_bias(), "the relative position bias")?;
    let &[buckets, num_heads] = rab.as_slice() else {
        return Err(chk.err(format!(
            "`{}` has shape {rab:?}, expected [buckets, heads]",
            nm.relative_attention_bias()
        )));
    };
    let (num_layers, _) = count_blocks(chk.list, &format!("{}encoder.block.", nm.prefix));
    let q = chk.shape_of(&format!("{}.weight", nm.attn_linears(0)[0]), "block 0's q")?;
    if num_heads == 0 || !q[0].is_multiple_of(num_heads) {
        return Err(chk.err(format!(
            "q is {q:?}: its {} rows do not split into {num_heads} heads \
             (relative_attention_bias's columns)",
            q[0]
        )));
    }
    let wi = chk.shape_of(
        &format!("{}.weight", nm.mlp_linears(0)[0]),
        "block 0's wi_0",
    )?;
    let c = T5Config {
        d_model,
        d_kv: q[0] / num_heads,
        d_ff: wi[0],
        num_layers,
        num_heads,
        vocab_size,
        relative_attention_num_buckets: buckets,
        relative_attention_max_distance: MAX_DISTANCE,
        layer_norm_epsilon: LAYER_NORM_EPS,
    };
    c.validate().map_err(|why| chk.err(why))?;
    Ok(c)
}

/// Every tensor a pass uses, against `c`; no blocks past `c`'s.
fn check(chk: &Checker<'_>, nm: &Names, c: &T5Config) -> Result<(), T5Error> {
    let (d, inner, f) = (c.d_model, c.inner_dim(), c.d_ff);
    chk.shaped(&nm.embedding, &[c.vocab_size, d], "[vocab_size, d_model]")?;
    chk.shaped(
        &nm.relative_attention_bias(),
        &[c.relative_attention_num_buckets, c.num_heads],
        "[relative_attention_num_buckets, num_heads]",
    )?;
    for i in 0..c.num_layers {
        let [q, k, v, o] = nm.attn_linears(i);
        for l in [q, k, v] {
            chk.linear(&l, inner, d, false)?;
        }
        chk.linear(&o, d, inner, false)?;
        let [wi0, wi1, wo] = nm.mlp_linears(i);
        chk.linear(&wi0, f, d, false)?;
        chk.linear(&wi1, f, d, false)?;
        chk.linear(&wo, d, f, false)?;
        for sub in [0, 1] {
            chk.shaped(&nm.norm(i, sub), &[d], "d_model")?;
        }
    }
    chk.shaped(&nm.final_norm(), &[d], "d_model")?;
    let (_, last) = count_blocks(chk.list, &format!("{}encoder.block.", nm.prefix));
    if let Some(last) = last.filter(|&l| l >= c.num_layers) {
        return Err(chk.err(format!(
            "the file has encoder.block.{last} but the config has {} blocks",
            c.num_layers
        )));
    }
    Ok(())
}
