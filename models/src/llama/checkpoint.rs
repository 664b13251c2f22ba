//! A checkpoint on disk: its config, its weight files, the names of its
//! tensors in Hugging Face layout, and the runtime [`ModelSpec`] of a pass.

use std::path::{Path, PathBuf};

use dynvram_runtime::loader::{Dtype, ModelFiles};
use dynvram_runtime::quant::{self, TensorList};
use dynvram_runtime::{BlockSpec, FilesList, ModelSpec, RuntimeError};

use super::{LlamaConfig, LlamaError};
use crate::block_index::block_index;

/// Tensor and layer names in Hugging Face layout.
pub mod names {
    /// The embedding table.
    pub const EMBED: &str = "model.embed_tokens.weight";
    /// The embedding as a linear layer (tied `lm_head`).
    pub const EMBED_LAYER: &str = "model.embed_tokens";
    /// The untied output projection.
    pub const LM_HEAD: &str = "lm_head";
    /// The final RMSNorm weight.
    pub const FINAL_NORM: &str = "model.norm.weight";
    /// Attention projections under `self_attn`.
    pub const ATTN: [&str; 4] = ["q_proj", "k_proj", "v_proj", "o_proj"];
    /// MLP projections under `mlp`.
    pub const MLP: [&str; 3] = ["gate_proj", "up_proj", "down_proj"];

    /// `model.layers.{i}.self_attn.{p}` / `model.layers.{i}.mlp.{p}`.
    pub fn proj(i: usize, p: &str) -> String {
        let group = if super::names::MLP.contains(&p) {
            "mlp"
        } else {
            "self_attn"
        };
        format!("model.layers.{i}.{group}.{p}")
    }

    /// The seven linear layers of decoder layer `i` (q, k, v, o, gate, up, down).
    pub fn layer_linears(i: usize) -> Vec<String> {
        ATTN.iter().chain(&MLP).map(|p| proj(i, p)).collect()
    }

    /// Layer `i`'s groups in the order the forward uses them (a layer too
    /// large for two arenas streams by part): the first norm with q/k/v
    /// (one fused launch), the second norm with o and gate/up (the norm is
    /// read before o, and held until gate/up's launch), then down.
    pub fn layer_groups(i: usize) -> Vec<Vec<String>> {
        let p = |name: &str| proj(i, name);
        vec![
            vec![input_norm(i), p("q_proj"), p("k_proj"), p("v_proj")],
            vec![post_norm(i), p("o_proj"), p("gate_proj"), p("up_proj")],
            vec![p("down_proj")],
        ]
    }

    /// `model.layers.{i}.input_layernorm.weight`.
    pub fn input_norm(i: usize) -> String {
        format!("model.layers.{i}.input_layernorm.weight")
    }

    /// `model.layers.{i}.post_attention_layernorm.weight`.
    pub fn post_norm(i: usize) -> String {
        format!("model.layers.{i}.post_attention_layernorm.weight")
    }
}

/// Sequence limits a runner is built for; they size the KV cache and the
/// activations reserved in the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Positions the KV cache holds (prompt + generated tokens).
    pub max_seq: usize,
    /// Most tokens one forward pass takes (the prompt length for prefill).
    pub max_rows: usize,
}

/// A checkpoint folder: config and weights, checked against each other.
#[derive(Debug)]
pub struct Checkpoint {
    /// The folder.
    pub dir: PathBuf,
    /// Parsed `config.json`.
    pub config: LlamaConfig,
    /// What [`ModelSpec::files`] gets: the index json or the safetensors files.
    pub weights: Vec<PathBuf>,
    files: ModelFiles,
}

impl Checkpoint {
    /// Opens `dir`: `config.json` and `model.safetensors.index.json`, else
    /// `model.safetensors`.
    pub fn open(dir: &Path) -> Result<Self, LlamaError> {
        Self::open_with(dir, None)
    }

    /// Opens `dir`'s config with the weights in `weights` when given (a
    /// safetensors file or an index json, e.g. a `dynvram quantize` output).
    pub fn open_with(dir: &Path, weights: Option<&Path>) -> Result<Self, LlamaError> {
        let _span = tracing::info_span!("checkpoint_open", dir = %dir.display()).entered();
        let config = LlamaConfig::from_file(&dir.join("config.json"))?;
        let weights = match weights {
            Some(w) => vec![w.to_owned()],
            None => {
                let index = dir.join("model.safetensors.index.json");
                let single = dir.join("model.safetensors");
                if index.is_file() {
                    vec![index]
                } else if single.is_file() {
                    vec![single]
                } else {
                    return Err(LlamaError::Weights {
                        path: dir.to_owned(),
                        why: "neither model.safetensors.index.json nor model.safetensors is here"
                            .into(),
                    });
                }
            }
        };
        let files = match weights.as_slice() {
            [one] => ModelFiles::open(one),
            many => ModelFiles::from_files(many),
        }
        .map_err(RuntimeError::from)?;
        let ckpt = Self {
            dir: dir.to_owned(),
            config,
            weights,
            files,
        };
        ckpt.check()?;
        Ok(ckpt)
    }

    /// The opened weight files.
    pub fn files(&self) -> &ModelFiles {
        &self.files
    }

    /// The linear layer that produces the logits.
    pub fn lm_head(&self) -> &'static str {
        if self.config.tie_word_embeddings {
            names::EMBED_LAYER
        } else {
            names::LM_HEAD
        }
    }

    fn weights_err(&self, why: String) -> LlamaError {
        LlamaError::Weights {
            path: self
                .weights
                .first()
                .cloned()
                .unwrap_or_else(|| self.dir.clone()),
            why,
        }
    }

    /// Checks every tensor a pass uses against the config: present, shaped
    /// as the config says, biases where the config says.
    fn check(&self) -> Result<(), LlamaError> {
        let c = &self.config;
        let list = FilesList::new(&self.files);
        let (h, i_sz, q, kv, v) = (
            c.hidden_size,
            c.intermediate_size,
            c.q_width(),
            c.kv_width(),
            c.vocab_size,
        );
        let expect_vec = |name: &str, len: usize| -> Result<(), LlamaError> {
            match list.dtype_shape(name) {
                Some((_, shape)) if shape == [len] => Ok(()),
                Some((_, shape)) => {
                    Err(self.weights_err(format!("`{name}` has shape {shape:?}, expected [{len}]")))
                }
                None => Err(self.weights_err(format!("no tensor `{name}`"))),
            }
        };
        let expect_layer = |name: &str, n: usize, k: usize, bias: bool| -> Result<(), LlamaError> {
            let layer =
                quant::validate_layer(&list, name).map_err(|e| self.weights_err(e.to_string()))?;
            if (layer.n, layer.k) != (n, k) {
                return Err(self.weights_err(format!(
                    "`{name}` is [{}, {}] (out × in), the config implies [{n}, {k}]",
                    layer.n, layer.k
                )));
            }
            if bias && !layer.has_bias {
                return Err(
                    self.weights_err(format!("`{name}` has no bias, which the config requires"))
                );
            }
            Ok(())
        };
        match list.dtype_shape(names::EMBED) {
            Some((dtype, shape)) if shape == [v, h] => {
                if !matches!(dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) {
                    return Err(self.weights_err(format!(
                        "`{}` is {dtype:?}; the embedding table must stay f32, f16 or bf16 (`dynvram quantize` keeps it so unless --quantize-all)",
                        names::EMBED
                    )));
                }
            }
            Some((_, shape)) => {
                return Err(self.weights_err(format!(
                    "`{}` has shape {shape:?}, expected [{v}, {h}]",
                    names::EMBED
                )));
            }
            None => return Err(self.weights_err(format!("no tensor `{}`", names::EMBED))),
        }
        for l in 0..c.num_hidden_layers {
            let shapes = [
                (q, h, c.qkv_bias),
                (kv, h, c.qkv_bias),
                (kv, h, c.qkv_bias),
                (h, q, c.o_bias),
                (i_sz, h, c.mlp_bias),
                (i_sz, h, c.mlp_bias),
                (h, i_sz, c.mlp_bias),
            ];
            for (name, (n, k, bias)) in names::layer_linears(l).iter().zip(shapes) {
                expect_layer(name, n, k, bias)?;
            }
            expect_vec(&names::input_norm(l), h)?;
            expect_vec(&names::post_norm(l), h)?;
        }
        expect_vec(names::FINAL_NORM, h)?;
        if let Some((name, l)) = first_layer_past(
            self.files.tensors().map(|t| t.name.as_str()),
            c.num_hidden_layers,
        ) {
            return Err(self.weights_err(format!(
                "tensor `{name}` is in layer {l}, but config.json says `num_hidden_layers` = {} (layers 0 to {}); a checkpoint with more layers than its config would run only the first ones",
                c.num_hidden_layers,
                c.num_hidden_layers - 1
            )));
        }
        if !c.tie_word_embeddings
            && list
                .dtype_shape(&format!("{}.weight", names::LM_HEAD))
                .is_none()
        {
            return Err(self.weights_err(
                "no `lm_head.weight` and the config has tie_word_embeddings = false".into(),
            ));
        }
        expect_layer(self.lm_head(), v, h, false)
    }

    /// The blocks of one pass: `embed`, `layers.{i}`, `head`. With tied
    /// embeddings the table is the head's linear and `embed` gathers rows on
    /// the host (a weight belongs to one block; the head needs it on the GPU).
    pub fn blocks(&self) -> Vec<BlockSpec> {
        let c = &self.config;
        let embed = BlockSpec {
            name: "embed".into(),
            raw_tensors: if c.tie_word_embeddings {
                vec![]
            } else {
                vec![names::EMBED.into()]
            },
            ..BlockSpec::default()
        };
        let layers = (0..c.num_hidden_layers).map(|i| BlockSpec {
            name: format!("layers.{i}"),
            linears: names::layer_linears(i),
            tensors: vec![names::input_norm(i), names::post_norm(i)],
            groups: names::layer_groups(i),
            ..BlockSpec::default()
        });
        let head = BlockSpec {
            name: "head".into(),
            linears: vec![self.lm_head().into()],
            tensors: vec![names::FINAL_NORM.into()],
            ..BlockSpec::default()
        };
        std::iter::once(embed)
            .chain(layers)
            .chain(std::iter::once(head))
            .collect()
    }

    /// The runtime spec for `limits`.
    pub fn spec(&self, limits: Limits) -> ModelSpec {
        let blocks = self.blocks();
        // `scratch_bytes` counts the integer kernels' scratch itself.
        let converted = crate::LinearNeeds::of(&FilesList::new(&self.files), &blocks)
            .converted_scratch_bytes(limits.max_rows);
        ModelSpec {
            views: Default::default(),
            files: self.weights.clone(),
            blocks,
            scratch_bytes: scratch_bytes(&self.config, limits) + converted,
            scratch_wish: 0,
        }
    }

    /// Bytes of every tensor a pass uses, as stored (the model size a
    /// budget fraction refers to).
    pub fn weight_bytes(&self) -> u64 {
        let list = FilesList::new(&self.files);
        let mut total = 0;
        let mut add = |name: &str| {
            if let Some(t) = self.files.info(name) {
                total += t.len();
            }
        };
        for b in self.blocks() {
            for l in &b.linears {
                if let Ok(layer) = quant::validate_layer(&list, l) {
                    for t in [
                        Some(&layer.weight),
                        layer.scale.as_ref(),
                        layer.bias.as_ref(),
                        layer.input_scale.as_ref(),
                    ]
                    .into_iter()
                    .flatten()
                    {
                        add(t);
                    }
                }
            }
            b.tensors.iter().chain(&b.raw_tensors).for_each(|t| add(t));
        }
        total
    }
}

/// The first tensor (and its layer index) under `model.layers.{i}.` with
/// `i >= layers`, in file order.
fn first_layer_past<'a>(
    names: impl Iterator<Item = &'a str>,
    layers: usize,
) -> Option<(&'a str, usize)> {
    names
        .filter_map(|name| Some((name, block_index(name, "model.layers.")?)))
        .find(|&(_, i)| i >= layers)
}

/// Activation bytes of one set of `rows` rows (see `forward::Acts`).
pub(crate) fn act_bytes(c: &LlamaConfig, rows: usize, logit_rows: usize) -> u64 {
    let per_row = 3 * c.hidden_size + 2 * c.q_width() + 2 * c.kv_width() + 3 * c.intermediate_size;
    // Linear kernels' scratch: rotated and quantized input of the widest K.
    let linear = 2 * c.intermediate_size.max(c.q_width()).max(c.hidden_size);
    ((rows * (per_row + linear) + logit_rows * c.vocab_size + rows) * 4) as u64
}

/// Scratch a pass reserves: KV cache, the RoPE table, a prefill set of
/// activations (all rows' logits), and a one-row set for decode.
pub(crate) fn scratch_bytes(c: &LlamaConfig, limits: Limits) -> u64 {
    let kv = 2 * c.num_hidden_layers * limits.max_seq * c.kv_width() * 4;
    let rope = limits.max_seq * c.head_dim * 4;
    (kv + rope) as u64 + act_bytes(c, limits.max_rows, limits.max_rows) + act_bytes(c, 1, 1)
}
