//! A CLIP text encoder on disk: a `.safetensors` file (or a sharded
//! model's `model.safetensors.index.json`) with HF `CLIPTextModel` keys
//! (`text_model.*`, as ComfyUI's `clip_l.safetensors`; transformers 5
//! writes them without `text_model.`; any prefix before them is found),
//! its config from an HF `config.json` or inferred from the shapes.

use std::path::{Path, PathBuf};

use dynvram_runtime::loader::ModelFiles;
use dynvram_runtime::{ActDtype, BlockSpec, FilesList, ModelSpec, RuntimeError};

use super::config::{ClipConfig, HEAD_DIM, LAYER_NORM_EPS};
use crate::check::{Checker, count_blocks, prefix_of, settle_config};
use crate::error::ModelError as ClipError;

/// The key every CLIP text model has: the token embedding (under
/// `text_model.` in most files).
pub const TOKEN_EMBEDDING: &str = "embeddings.token_embedding.weight";

/// Tensor names of a CLIP text model under a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// Everything before `embeddings.` (`text_model.` in ComfyUI's files,
    /// `""` in those transformers 5 writes).
    pub prefix: String,
}

impl Names {
    /// `{prefix}{rest}`.
    pub fn n(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    /// `{prefix}text_model.encoder.layers.{i}.{rest}`.
    pub fn layer(&self, i: usize, rest: &str) -> String {
        self.n(&format!("encoder.layers.{i}.{rest}"))
    }

    /// The token embedding `[vocab, hidden]`.
    pub fn token_embedding(&self) -> String {
        self.n("embeddings.token_embedding.weight")
    }

    /// The position embedding `[positions, hidden]`.
    pub fn position_embedding(&self) -> String {
        self.n("embeddings.position_embedding.weight")
    }

    /// Layer `i`'s attention linears: q, k, v, out.
    pub fn attn_linears(&self, i: usize) -> [String; 4] {
        [
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.out_proj",
        ]
        .map(|l| self.layer(i, l))
    }

    /// Layer `i`'s MLP linears: fc1, fc2.
    pub fn mlp_linears(&self, i: usize) -> [String; 2] {
        ["mlp.fc1", "mlp.fc2"].map(|l| self.layer(i, l))
    }

    /// The weight and bias of layer `i`'s norm `which` (1: before the
    /// attention, 2: before the MLP).
    pub fn layer_norm(&self, i: usize, which: u8) -> [String; 2] {
        ["weight", "bias"].map(|t| self.layer(i, &format!("layer_norm{which}.{t}")))
    }

    /// The final norm's weight and bias.
    pub fn final_norm(&self) -> [String; 2] {
        [
            self.n("final_layer_norm.weight"),
            self.n("final_layer_norm.bias"),
        ]
    }
}

/// A CLIP text encoder, its config checked against every tensor a pass
/// uses. Other tensors (`position_ids`, `text_projection`, a vision tower)
/// are ignored.
#[derive(Debug)]
pub struct ClipCheckpoint {
    /// The weights file.
    pub path: PathBuf,
    /// The config (given, or inferred).
    pub config: ClipConfig,
    /// Whether the config was inferred from the shapes.
    pub inferred: bool,
    /// Tensor names.
    pub names: Names,
    files: ModelFiles,
}

impl ClipCheckpoint {
    /// Opens `path`, a `.safetensors` file; `config` (e.g.
    /// [`ClipConfig::from_hf_json`]) or, when `None`, the config inferred
    /// from the shapes: layers from the keys, widths from the embedding and
    /// `fc1`, heads = hidden / 64 (CLIP-L and CLIP-G; a model of other head
    /// width needs its config). A file that is not a CLIP text model is an
    /// error naming what is missing.
    pub fn open(path: &Path, config: Option<ClipConfig>) -> Result<Self, ClipError> {
        let _span = tracing::info_span!("clip_open", path = %path.display()).entered();
        if !path.is_file() {
            return Err(ClipError::Weights {
                path: path.to_owned(),
                why: "no such file".into(),
            });
        }
        let files = ModelFiles::open(path).map_err(RuntimeError::from)?;
        let list = FilesList::new(&files);
        let chk = Checker { list: &list, path };
        let prefix = prefix_of(&list, TOKEN_EMBEDDING).ok_or_else(|| {
            let looks = if prefix_of(&list, "shared.weight").is_some()
                || prefix_of(&list, "encoder.final_layer_norm.weight").is_some()
            {
                " (it looks like a T5 encoder)"
            } else {
                ""
            };
            chk.err(format!(
                "not a CLIP text encoder{looks}: no `{TOKEN_EMBEDDING}` under any prefix"
            ))
        })?;
        let names = Names { prefix };
        let (config, inferred) = settle_config(
            config,
            ClipConfig::validate,
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

    /// The blocks of one pass: `embeddings` (the position table; token
    /// rows are gathered on the host), per layer its attention
    /// (`layer_norm1`, q/k/v/out) and its MLP (`layer_norm2`, fc1/fc2) —
    /// half a layer per block, so a budget double-buffers half as much —
    /// and `final_layer_norm`.
    pub fn blocks(&self) -> Vec<BlockSpec> {
        let nm = &self.names;
        let embed = BlockSpec {
            name: "embeddings".into(),
            raw_tensors: vec![nm.position_embedding()],
            ..BlockSpec::default()
        };
        let layers = (0..self.config.num_hidden_layers).flat_map(|i| {
            [
                BlockSpec {
                    name: format!("encoder.layers.{i}.self_attn"),
                    linears: nm.attn_linears(i).to_vec(),
                    tensors: nm.layer_norm(i, 1).to_vec(),
                    ..BlockSpec::default()
                },
                BlockSpec {
                    name: format!("encoder.layers.{i}.mlp"),
                    linears: nm.mlp_linears(i).to_vec(),
                    tensors: nm.layer_norm(i, 2).to_vec(),
                    ..BlockSpec::default()
                },
            ]
        });
        let fin = BlockSpec {
            name: "final_layer_norm".into(),
            tensors: nm.final_norm().to_vec(),
            ..BlockSpec::default()
        };
        std::iter::once(embed)
            .chain(layers)
            .chain(std::iter::once(fin))
            .collect()
    }

    /// The runtime spec of a pass over `batch` prompts with activations
    /// in `dtype`.
    pub fn spec(&self, batch: usize, dtype: ActDtype) -> ModelSpec {
        let list = FilesList::new(&self.files);
        ModelSpec {
            views: Default::default(),
            files: vec![self.path.clone()],
            blocks: self.blocks(),
            scratch_bytes: super::scratch::scratch_bytes(
                &self.config,
                batch,
                dtype,
                crate::LinearNeeds::of(&list, &self.blocks()),
            ),
            scratch_wish: 0,
        }
    }
}

/// The config of the shapes: see [`ClipCheckpoint::open`].
fn infer(chk: &Checker<'_>, nm: &Names) -> Result<ClipConfig, ClipError> {
    let tok = chk.shape_of(&nm.token_embedding(), "the token embedding")?;
    let &[vocab_size, hidden_size] = tok.as_slice() else {
        return Err(chk.err(format!(
            "`{}` has shape {tok:?}, expected [vocab, hidden]",
            nm.token_embedding()
        )));
    };
    let pos = chk.shape_of(&nm.position_embedding(), "the position embedding")?;
    let (num_hidden_layers, _) = count_blocks(chk.list, &nm.n("encoder.layers."));
    if num_hidden_layers == 0 {
        return Err(chk.err(format!("no `{}` tensors", nm.n("encoder.layers.0."))));
    }
    let fc1 = nm.layer(0, "mlp.fc1.weight");
    let intermediate_size = chk.shape_of(&fc1, "layer 0's MLP")?[0];
    if !hidden_size.is_multiple_of(HEAD_DIM) {
        return Err(chk.err(format!(
            "hidden size {hidden_size} is not a multiple of CLIP's head width {HEAD_DIM}, so the \
             heads cannot be inferred: give the model's config.json"
        )));
    }
    let c = ClipConfig {
        hidden_size,
        intermediate_size,
        num_hidden_layers,
        num_attention_heads: hidden_size / HEAD_DIM,
        vocab_size,
        max_position_embeddings: pos[0],
        layer_norm_eps: LAYER_NORM_EPS,
    };
    c.validate().map_err(|why| chk.err(why))?;
    Ok(c)
}

/// Every tensor a pass uses, against `c`; no layers past `c`'s.
fn check(chk: &Checker<'_>, nm: &Names, c: &ClipConfig) -> Result<(), ClipError> {
    let (h, m) = (c.hidden_size, c.intermediate_size);
    chk.shaped(
        &nm.token_embedding(),
        &[c.vocab_size, h],
        "[vocab_size, hidden_size]",
    )?;
    chk.shaped(
        &nm.position_embedding(),
        &[c.max_position_embeddings, h],
        "[max_position_embeddings, hidden_size]",
    )?;
    for i in 0..c.num_hidden_layers {
        for l in nm.attn_linears(i) {
            chk.linear(&l, h, h, true)?;
        }
        let [fc1, fc2] = nm.mlp_linears(i);
        chk.linear(&fc1, m, h, true)?;
        chk.linear(&fc2, h, m, true)?;
        for t in [nm.layer_norm(i, 1), nm.layer_norm(i, 2)].concat() {
            chk.shaped(&t, &[h], "hidden_size")?;
        }
    }
    for t in nm.final_norm() {
        chk.shaped(&t, &[h], "hidden_size")?;
    }
    let (_, last) = count_blocks(chk.list, &nm.n("encoder.layers."));
    if let Some(last) = last.filter(|&l| l >= c.num_hidden_layers) {
        return Err(chk.err(format!(
            "the file has encoder.layers.{last} but the config has {} layers",
            c.num_hidden_layers
        )));
    }
    Ok(())
}
