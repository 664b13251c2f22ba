//! A Flux checkpoint on disk: one `.safetensors` file in Black Forest Labs'
//! key layout (optionally under ComfyUI's `model.diffusion_model.` prefix),
//! or a folder with `model.safetensors` and a `config.json` in BFL
//! `FluxParams` names, or diffusers' `transformer/` folder
//! (`diffusion_pytorch_model*.safetensors`, sharded or not, and its
//! `config.json`), read as BFL tensors through [`super::diffusers`]'s views.
//! Without a config the architecture is inferred from the tensor shapes, as
//! ComfyUI does.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dynvram_runtime::loader::{ModelFiles, TensorView};
use dynvram_runtime::quant::{self, TensorList};
use dynvram_runtime::{ActDtype, BlockSpec, FilesList, ModelSpec, RuntimeError};

use super::config::{FLUX1_AXES_DIM, FLUX1_THETA, FluxConfig, MAX_BLOCKS, TIME_DIM};
use super::{FluxError, Shape};
use crate::block_index::block_index;

/// A folder's weights, the first found: BFL's, then diffusers' (sharded,
/// then one file).
const FOLDER_WEIGHTS: [&str; 3] = [
    "model.safetensors",
    "diffusion_pytorch_model.safetensors.index.json",
    "diffusion_pytorch_model.safetensors",
];

/// The key prefix of ComfyUI's full checkpoints.
pub const COMFY_PREFIX: &str = "model.diffusion_model.";

/// Tensor names in BFL layout under a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// `""` or e.g. `model.diffusion_model.`.
    pub prefix: String,
}

impl Names {
    /// `prefix + name`.
    pub fn n(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// `double_blocks.{i}.{rest}`.
    pub fn double(&self, i: usize, rest: &str) -> String {
        self.n(&format!("double_blocks.{i}.{rest}"))
    }

    /// `single_blocks.{i}.{rest}`.
    pub fn single(&self, i: usize, rest: &str) -> String {
        self.n(&format!("single_blocks.{i}.{rest}"))
    }

    /// The embed block's names.
    pub fn embed_block(&self, guidance: bool) -> EmbedNames {
        let mlp = |name: &str| EmbedderNames {
            in_layer: self.n(&format!("{name}.in_layer")),
            out_layer: self.n(&format!("{name}.out_layer")),
        };
        EmbedNames {
            img_in: self.n("img_in"),
            txt_in: self.n("txt_in"),
            time_in: mlp("time_in"),
            guidance_in: guidance.then(|| mlp("guidance_in")),
            vector_in: mlp("vector_in"),
        }
    }

    /// Double block `i`'s names.
    pub fn double_block(&self, i: usize) -> DoubleNames {
        let stream = |s: &str| {
            let p = |rest: &str| self.double(i, &format!("{s}_{rest}"));
            StreamNames {
                mod_lin: p("mod.lin"),
                qkv: p("attn.qkv"),
                query_norm: p("attn.norm.query_norm.scale"),
                key_norm: p("attn.norm.key_norm.scale"),
                proj: p("attn.proj"),
                mlp_in: p("mlp.0"),
                mlp_out: p("mlp.2"),
            }
        };
        DoubleNames {
            img: stream("img"),
            txt: stream("txt"),
        }
    }

    /// Single block `i`'s names.
    pub fn single_block(&self, i: usize) -> SingleNames {
        SingleNames {
            modulation: self.single(i, "modulation.lin"),
            linear1: self.single(i, "linear1"),
            query_norm: self.single(i, "norm.query_norm.scale"),
            key_norm: self.single(i, "norm.key_norm.scale"),
            linear2: self.single(i, "linear2"),
        }
    }

    /// The final layer's names.
    pub fn final_block(&self) -> FinalNames {
        FinalNames {
            modulation: self.n("final_layer.adaLN_modulation.1"),
            linear: self.n("final_layer.linear"),
        }
    }

    /// The embedder linears (block `embed`).
    pub fn embed_linears(&self, guidance: bool) -> Vec<String> {
        let e = self.embed_block(guidance);
        let mut v = vec![e.img_in, e.txt_in];
        v.extend(e.time_in.both());
        v.extend(e.vector_in.both());
        v.extend(e.guidance_in.into_iter().flat_map(EmbedderNames::both));
        v
    }

    /// Linears of double block `i`.
    pub fn double_linears(&self, i: usize) -> Vec<String> {
        let d = self.double_block(i);
        [d.img, d.txt]
            .into_iter()
            .flat_map(|s| [s.mod_lin, s.qkv, s.proj, s.mlp_in, s.mlp_out])
            .collect()
    }

    /// QK-norm scales of double block `i`.
    pub fn double_norms(&self, i: usize) -> Vec<String> {
        let d = self.double_block(i);
        [d.img, d.txt]
            .into_iter()
            .flat_map(|s| [s.query_norm, s.key_norm])
            .collect()
    }

    /// Linears of single block `i`.
    pub fn single_linears(&self, i: usize) -> Vec<String> {
        let s = self.single_block(i);
        vec![s.modulation, s.linear1, s.linear2]
    }

    /// QK-norm scales of single block `i`.
    pub fn single_norms(&self, i: usize) -> Vec<String> {
        let s = self.single_block(i);
        vec![s.query_norm, s.key_norm]
    }

    /// Groups of the embedder block in the order `forward` uses them (one
    /// linear each), so it may stream in parts.
    pub fn embed_groups(&self, guidance: bool) -> Vec<Vec<String>> {
        let e = self.embed_block(guidance);
        let mut order = vec![e.img_in, e.txt_in];
        order.extend(e.time_in.both());
        order.extend(e.guidance_in.into_iter().flat_map(EmbedderNames::both));
        order.extend(e.vector_in.both());
        order.into_iter().map(|s| vec![s]).collect()
    }

    /// Groups of double block `i` in the order `forward` uses them: each
    /// stream's modulation and q/k/v (with its QK norms), then each
    /// stream's projection and MLP, one linear a group.
    pub fn double_groups(&self, i: usize) -> Vec<Vec<String>> {
        let d = self.double_block(i);
        let mut groups = Vec::new();
        for s in [&d.img, &d.txt] {
            groups.push(vec![s.mod_lin.clone()]);
            groups.push(vec![
                s.qkv.clone(),
                s.query_norm.clone(),
                s.key_norm.clone(),
            ]);
        }
        for s in [d.img, d.txt] {
            groups.extend([vec![s.proj], vec![s.mlp_in], vec![s.mlp_out]]);
        }
        groups
    }

    /// Groups of single block `i` in the order `forward` uses them.
    pub fn single_groups(&self, i: usize) -> Vec<Vec<String>> {
        let s = self.single_block(i);
        vec![
            vec![s.modulation],
            vec![s.linear1, s.query_norm, s.key_norm],
            vec![s.linear2],
        ]
    }

    /// The final layer's linears.
    pub fn final_linears(&self) -> Vec<String> {
        let f = self.final_block();
        vec![f.modulation, f.linear]
    }
}

/// An MLP embedder's linears: `out_layer(silu(in_layer(x)))`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedderNames {
    /// `{name}.in_layer`.
    pub in_layer: String,
    /// `{name}.out_layer`.
    pub out_layer: String,
}

impl EmbedderNames {
    fn both(self) -> [String; 2] {
        [self.in_layer, self.out_layer]
    }
}

/// The embed block's tensor names, formatted once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedNames {
    /// `img_in`.
    pub img_in: String,
    /// `txt_in`.
    pub txt_in: String,
    /// `time_in`.
    pub time_in: EmbedderNames,
    /// `guidance_in`, where the model embeds guidance.
    pub guidance_in: Option<EmbedderNames>,
    /// `vector_in`.
    pub vector_in: EmbedderNames,
}

/// One token stream's tensors in a double block (`img_…` or `txt_…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamNames {
    /// `mod.lin`: its six modulation chunks from `silu(vec)`.
    pub mod_lin: String,
    /// `attn.qkv`.
    pub qkv: String,
    /// `attn.norm.query_norm.scale`.
    pub query_norm: String,
    /// `attn.norm.key_norm.scale`.
    pub key_norm: String,
    /// `attn.proj`.
    pub proj: String,
    /// `mlp.0`.
    pub mlp_in: String,
    /// `mlp.2`.
    pub mlp_out: String,
}

/// A double block's tensor names, formatted once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoubleNames {
    /// The image stream's.
    pub img: StreamNames,
    /// The text stream's.
    pub txt: StreamNames,
}

/// A single block's tensor names, formatted once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SingleNames {
    /// `modulation.lin`: its three modulation chunks.
    pub modulation: String,
    /// `linear1`: q, k, v and the MLP's input.
    pub linear1: String,
    /// `norm.query_norm.scale`.
    pub query_norm: String,
    /// `norm.key_norm.scale`.
    pub key_norm: String,
    /// `linear2`: of `cat(attn, gelu(mlp))`.
    pub linear2: String,
}

/// The final layer's tensor names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalNames {
    /// `final_layer.adaLN_modulation.1`: (shift, scale).
    pub modulation: String,
    /// `final_layer.linear`.
    pub linear: String,
}

/// A Flux checkpoint, its config checked against every tensor a pass uses.
#[derive(Debug)]
pub struct FluxCheckpoint {
    /// What was opened (a file or a folder).
    pub path: PathBuf,
    /// The config (from `config.json`, or inferred).
    pub config: FluxConfig,
    /// Whether the config was inferred from the shapes (no `config.json`).
    pub inferred: bool,
    /// The weights file(s).
    pub weights: Vec<PathBuf>,
    /// Tensor names.
    pub names: Names,
    /// The BFL tensors of a diffusers transformer ([`super::diffusers`]);
    /// empty for BFL files.
    pub views: Arc<[TensorView]>,
    files: ModelFiles,
}

/// Flux weights found at a path, before the config is read:
/// [`FluxCheckpoint::detect`]'s answer, opened by [`DetectedFlux::open`]
/// without reading the header again.
#[derive(Debug)]
pub struct DetectedFlux {
    path: PathBuf,
    weights: PathBuf,
    config_file: Option<PathBuf>,
    files: ModelFiles,
    prefix: String,
    views: Arc<[TensorView]>,
}

impl DetectedFlux {
    /// The weights file (a folder's `model.safetensors`, or the file given).
    pub fn weights(&self) -> &Path {
        &self.weights
    }

    /// The prefix the BFL keys sit under (`""` or e.g. [`COMFY_PREFIX`]).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The checkpoint: the config from `config.json` or inferred from the
    /// shapes, checked against every tensor a pass uses.
    pub fn open(self) -> Result<FluxCheckpoint, FluxError> {
        let _span = tracing::info_span!("flux_open", path = %self.path.display()).entered();
        let config = self
            .config_file
            .as_deref()
            .map(FluxConfig::from_file)
            .transpose()?;
        self.open_as(config)
    }

    /// [`Self::open`] with `config` instead of a `config.json` (or the
    /// shapes): for single files whose heads or RoPE axes cannot be
    /// inferred, their config kept elsewhere. `config` is validated and
    /// checked against every tensor a pass uses.
    pub fn open_with(self, config: FluxConfig) -> Result<FluxCheckpoint, FluxError> {
        let _span = tracing::info_span!("flux_open", path = %self.path.display()).entered();
        config.validate().map_err(|why| FluxError::Config {
            path: self.weights.clone(),
            why: format!("the config given: {why}"),
        })?;
        self.open_as(Some(config))
    }

    fn open_as(self, config: Option<FluxConfig>) -> Result<FluxCheckpoint, FluxError> {
        let Self {
            path,
            weights,
            files,
            prefix,
            views,
            ..
        } = self;
        let names = Names { prefix };
        let list = FilesList::new(&files);
        let (config, inferred) = match config {
            Some(c) => (c, false),
            None => {
                let config = infer_config(&list, &names).map_err(|why| FluxError::Weights {
                    path: weights.clone(),
                    why,
                })?;
                config.validate().map_err(|why| FluxError::Weights {
                    path: weights.clone(),
                    why: format!("the shapes match no Flux variant: {why}"),
                })?;
                (config, true)
            }
        };
        drop(list);
        let ckpt = FluxCheckpoint {
            path,
            config,
            inferred,
            weights: vec![weights],
            names,
            views,
            files,
        };
        ckpt.check()?;
        Ok(ckpt)
    }
}

impl FluxCheckpoint {
    /// Opens a `.safetensors` file (config inferred, or from a
    /// `config.json` beside it when `path` is a folder's `model.safetensors`)
    /// or a folder (`config.json` and `model.safetensors`):
    /// [`Self::detect`], then [`DetectedFlux::open`].
    pub fn open(path: &Path) -> Result<Self, FluxError> {
        Self::detect(path)?.open()
    }

    /// Whether `path` holds Flux weights: the weights file (a folder's
    /// `model.safetensors`, or diffusers' `diffusion_pytorch_model`
    /// file or shard index) indexed, with BFL keys under some prefix
    /// ([`detect_prefix`]) or diffusers' keys (read as BFL's), and the
    /// `config.json` that goes with it. Reads the headers only; the error
    /// says why `path` is not Flux.
    pub fn detect(path: &Path) -> Result<DetectedFlux, FluxError> {
        let _span = tracing::debug_span!("flux_detect", path = %path.display()).entered();
        let (weights, config_file) = if path.is_dir() {
            let Some(w) = FOLDER_WEIGHTS
                .iter()
                .map(|n| path.join(n))
                .find(|w| w.is_file())
            else {
                return Err(FluxError::Weights {
                    path: path.to_owned(),
                    why: format!("the folder has none of {}", FOLDER_WEIGHTS.join(", ")),
                });
            };
            let c = path.join("config.json");
            (w, c.is_file().then_some(c))
        } else if path.is_file() {
            // A folder's weights take the folder's config.json, as the
            // folder itself would.
            let beside = path.parent().map(|d| d.join("config.json")).filter(|c| {
                path.file_name()
                    .is_some_and(|n| FOLDER_WEIGHTS.iter().any(|w| n == *w))
                    && c.is_file()
            });
            (path.to_owned(), beside)
        } else {
            return Err(FluxError::Weights {
                path: path.to_owned(),
                why: "no such file or folder".into(),
            });
        };
        let files = ModelFiles::open(&weights).map_err(RuntimeError::from)?;
        let (files, prefix, views) = match detect_prefix(&FilesList::new(&files)) {
            Some(prefix) => (files, prefix, Arc::default()),
            None if super::diffusers::is_diffusers(&files) => {
                let views: Arc<[TensorView]> = super::diffusers::views(&files)?.into();
                let files = files.with_views(&views).map_err(RuntimeError::from)?;
                (files, String::new(), views)
            }
            None => {
                return Err(FluxError::Weights {
                    path: weights,
                    why: format!(
                        "no Flux tensors: found no `img_in.weight` nor \
                         `double_blocks.0.img_attn.qkv.weight` under any prefix, nor \
                         diffusers' `{}`",
                        super::diffusers::MARKER
                    ),
                });
            }
        };
        Ok(DetectedFlux {
            path: path.to_owned(),
            weights,
            config_file,
            files,
            prefix,
            views,
        })
    }

    /// The opened weight files.
    pub fn files(&self) -> &ModelFiles {
        &self.files
    }

    fn weights_err(&self, why: String) -> FluxError {
        FluxError::Weights {
            path: self.weights[0].clone(),
            why,
        }
    }

    /// Checks every tensor a pass uses against the config: present, shaped
    /// as the config says, biases where BFL's layers have them, and no
    /// blocks past the config's depths.
    fn check(&self) -> Result<(), FluxError> {
        let c = &self.config;
        let list = FilesList::new(&self.files);
        let nm = &self.names;
        let (h, hd, m) = (c.hidden_size, c.head_dim(), c.mlp_hidden());
        let layer = |name: &str, n: usize, k: usize, bias: bool| -> Result<(), FluxError> {
            let l =
                quant::validate_layer(&list, name).map_err(|e| self.weights_err(e.to_string()))?;
            if (l.n, l.k) != (n, k) {
                return Err(self.weights_err(format!(
                    "`{name}` is [{}, {}] (out × in), the config implies [{n}, {k}]",
                    l.n, l.k
                )));
            }
            if bias && !l.has_bias {
                return Err(self.weights_err(format!("`{name}` has no bias, which Flux requires")));
            }
            Ok(())
        };
        let vector = |name: &str, len: usize| -> Result<(), FluxError> {
            match list.dtype_shape(name) {
                Some((_, s)) if s == [len] => Ok(()),
                Some((_, s)) => Err(self.weights_err(format!(
                    "`{name}` has shape {s:?}, expected [{len}] (head_dim)"
                ))),
                None => Err(self.weights_err(format!("no tensor `{name}`"))),
            }
        };
        layer(&nm.n("img_in"), h, c.in_channels, true)?;
        layer(&nm.n("txt_in"), h, c.context_in_dim, true)?;
        layer(&nm.n("time_in.in_layer"), h, TIME_DIM, true)?;
        layer(&nm.n("time_in.out_layer"), h, h, true)?;
        layer(&nm.n("vector_in.in_layer"), h, c.vec_in_dim, true)?;
        layer(&nm.n("vector_in.out_layer"), h, h, true)?;
        let has_guidance = list
            .dtype_shape(&nm.n("guidance_in.in_layer.weight"))
            .is_some();
        if c.guidance_embed {
            layer(&nm.n("guidance_in.in_layer"), h, TIME_DIM, true)?;
            layer(&nm.n("guidance_in.out_layer"), h, h, true)?;
        } else if has_guidance {
            return Err(self.weights_err(
                "the file has `guidance_in` but the config says guidance_embed = false".into(),
            ));
        }
        let missing_block = |kind: &str, i: usize, depth: usize, key: &str| {
            self.weights_err(format!(
                "{kind} block {i} of {depth} is missing (no `{key}`); the file holds {} of them",
                count_blocks(&list, &nm.n(&format!("{kind}_blocks.")))
            ))
        };
        for i in 0..c.depth {
            let key = nm.double(i, "img_attn.qkv.weight");
            if list.dtype_shape(&key).is_none() {
                return Err(missing_block("double", i, c.depth, &key));
            }
            for s in ["img", "txt"] {
                let p = |r: &str| nm.double(i, &format!("{s}_{r}"));
                layer(&p("mod.lin"), 6 * h, h, true)?;
                layer(&p("attn.qkv"), 3 * h, h, c.qkv_bias)?;
                layer(&p("attn.proj"), h, h, true)?;
                layer(&p("mlp.0"), m, h, true)?;
                layer(&p("mlp.2"), h, m, true)?;
            }
            for n in nm.double_norms(i) {
                vector(&n, hd)?;
            }
        }
        for i in 0..c.depth_single_blocks {
            let key = nm.single(i, "linear1.weight");
            if list.dtype_shape(&key).is_none() {
                return Err(missing_block("single", i, c.depth_single_blocks, &key));
            }
            layer(&nm.single(i, "modulation.lin"), 3 * h, h, true)?;
            layer(&nm.single(i, "linear1"), 3 * h + m, h, true)?;
            layer(&nm.single(i, "linear2"), h, h + m, true)?;
            for n in nm.single_norms(i) {
                vector(&n, hd)?;
            }
        }
        layer(&nm.n("final_layer.adaLN_modulation.1"), 2 * h, h, true)?;
        layer(&nm.n("final_layer.linear"), c.out_channels, h, true)?;
        for (kind, depth) in [("double", c.depth), ("single", c.depth_single_blocks)] {
            let found = max_block(&list, &nm.n(&format!("{kind}_blocks.")));
            if let Some(last) = found.filter(|&l| l >= depth) {
                return Err(self.weights_err(format!(
                    "the file has {kind}_blocks.{last} but the config has {depth} {kind} blocks"
                )));
            }
        }
        Ok(())
    }

    /// The blocks of one pass, in order: `embed` (the embedders), one per
    /// double block, one per single block, `final`.
    pub fn blocks(&self) -> Vec<BlockSpec> {
        let (c, nm) = (&self.config, &self.names);
        let embed = BlockSpec {
            name: "embed".into(),
            linears: nm.embed_linears(c.guidance_embed),
            groups: nm.embed_groups(c.guidance_embed),
            ..BlockSpec::default()
        };
        let doubles = (0..c.depth).map(|i| BlockSpec {
            name: format!("double_blocks.{i}"),
            linears: nm.double_linears(i),
            tensors: nm.double_norms(i),
            groups: nm.double_groups(i),
            ..BlockSpec::default()
        });
        let singles = (0..c.depth_single_blocks).map(|i| BlockSpec {
            name: format!("single_blocks.{i}"),
            linears: nm.single_linears(i),
            tensors: nm.single_norms(i),
            groups: nm.single_groups(i),
            ..BlockSpec::default()
        });
        let fin = BlockSpec {
            name: "final_layer".into(),
            linears: nm.final_linears(),
            groups: nm.final_linears().into_iter().map(|l| vec![l]).collect(),
            ..BlockSpec::default()
        };
        std::iter::once(embed)
            .chain(doubles)
            .chain(singles)
            .chain(std::iter::once(fin))
            .collect()
    }

    /// The runtime spec of a pass over inputs of `shape` with activations
    /// in `dtype`.
    pub fn spec(&self, shape: Shape, dtype: ActDtype) -> ModelSpec {
        let needs = self.linear_needs();
        ModelSpec {
            views: self.views.clone(),
            files: self.weights.clone(),
            blocks: self.blocks(),
            scratch_bytes: super::scratch::scratch_bytes(&self.config, shape, dtype, needs),
            // Resident weights traded for whole-layer conversions where the
            // budget allows (a converted piece's GEMM fills the GPU badly).
            scratch_wish: needs.scratch_wish(shape.batch * shape.joint_len()),
        }
    }

    /// What its linears need in scratch besides the activations.
    pub fn linear_needs(&self) -> crate::LinearNeeds {
        crate::LinearNeeds::of(&FilesList::new(&self.files), &self.blocks())
    }

    /// Bytes of every tensor a pass uses, as stored.
    pub fn weight_bytes(&self) -> u64 {
        let list = FilesList::new(&self.files);
        let mut total = 0;
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
                        total += self.files.info(t).map_or(0, |i| i.len());
                    }
                }
            }
            for t in &b.tensors {
                total += self.files.info(t).map_or(0, |i| i.len());
            }
        }
        total
    }
}

/// The prefix under which the BFL keys sit: `""`, ComfyUI's
/// `model.diffusion_model.`, or whatever precedes `img_in.weight`
/// (`double_blocks.0.img_attn.qkv.weight` where there is no `img_in`).
pub fn detect_prefix(list: &dyn TensorList) -> Option<String> {
    for p in ["", COMFY_PREFIX] {
        if list.dtype_shape(&format!("{p}img_in.weight")).is_some() {
            return Some(p.to_owned());
        }
    }
    let names = list.names();
    for suffix in ["img_in.weight", "double_blocks.0.img_attn.qkv.weight"] {
        let mut found: Vec<&String> = names
            .iter()
            .filter(|n| {
                n.ends_with(suffix)
                    && (n.len() == suffix.len() || n[..n.len() - suffix.len()].ends_with('.'))
            })
            .collect();
        found.sort();
        if let Some(n) = found.first() {
            return Some(n[..n.len() - suffix.len()].to_owned());
        }
    }
    None
}

/// Highest `N` of `{prefix}N.` keys, if any.
fn max_block(list: &dyn TensorList, prefix: &str) -> Option<usize> {
    list.names()
        .iter()
        .filter_map(|n| block_index(n, prefix))
        .max()
}

/// Blocks `{prefix}0.`, `{prefix}1.`, … present without a gap (ComfyUI's
/// `count_blocks`).
fn count_blocks(list: &dyn TensorList, prefix: &str) -> usize {
    let names = list.names();
    let present: std::collections::HashSet<usize> = names
        .iter()
        .filter_map(|n| block_index(n, prefix))
        .collect();
    (0..).take_while(|i| present.contains(i)).count()
}

/// The config ComfyUI would build from the shapes: widths and depths from
/// the tensors, head_dim from the QK-norm scales, FLUX.1's `axes_dim` and
/// `theta`.
pub fn infer_config(list: &dyn TensorList, nm: &Names) -> Result<FluxConfig, String> {
    let lin = |name: &str| -> Result<(usize, usize), String> {
        let l = quant::validate_layer(list, &nm.n(name)).map_err(|e| e.to_string())?;
        Ok((l.n, l.k))
    };
    let (hidden, in_channels) = lin("img_in")?;
    let (_, context_in_dim) = lin("txt_in")?;
    let (_, vec_in_dim) = lin("vector_in.in_layer")?;
    let (out_channels, _) = lin("final_layer.linear")?;
    let depth = count_blocks(list, &nm.n("double_blocks."));
    let depth_single_blocks = count_blocks(list, &nm.n("single_blocks."));
    if depth + depth_single_blocks == 0 {
        return Err("no double_blocks.0 or single_blocks.0 tensors".into());
    }
    if depth > MAX_BLOCKS || depth_single_blocks > MAX_BLOCKS {
        return Err(format!(
            "{depth} double and {depth_single_blocks} single blocks exceed {MAX_BLOCKS}"
        ));
    }
    let (norm, mlp, qkv) = if depth > 0 {
        (
            nm.double(0, "img_attn.norm.key_norm.scale"),
            Some("double_blocks.0.img_mlp.0"),
            nm.double(0, "img_attn.qkv.bias"),
        )
    } else {
        (nm.single(0, "norm.key_norm.scale"), None, String::new())
    };
    let head_dim = match list.dtype_shape(&norm) {
        Some((_, s)) if s.len() == 1 && s[0] > 0 => s[0],
        Some((_, s)) => return Err(format!("`{norm}` has shape {s:?}, expected [head_dim]")),
        None => {
            return Err(format!(
                "no tensor `{norm}` (the QK-norm scale gives head_dim)"
            ));
        }
    };
    if !hidden.is_multiple_of(head_dim) {
        return Err(format!(
            "hidden size {hidden} (img_in) is not a multiple of head_dim {head_dim} (`{norm}`)"
        ));
    }
    let mlp_hidden = match mlp {
        Some(name) => lin(name)?.0,
        // linear1 is [3H + M, H].
        None => lin("single_blocks.0.linear1")?
            .0
            .checked_sub(3 * hidden)
            .filter(|&m| m > 0)
            .ok_or("single_blocks.0.linear1 is not wider than 3 × hidden")?,
    };
    let axes_dim = FLUX1_AXES_DIM.to_vec();
    if axes_dim.iter().sum::<usize>() != head_dim {
        return Err(format!(
            "head_dim {head_dim} is not FLUX.1's 128, so the RoPE axes cannot be inferred; \
             put a config.json with `axes_dim` beside the weights"
        ));
    }
    Ok(FluxConfig {
        in_channels,
        out_channels,
        vec_in_dim,
        context_in_dim,
        hidden_size: hidden,
        mlp_ratio: mlp_hidden as f64 / hidden as f64,
        num_heads: hidden / head_dim,
        depth,
        depth_single_blocks,
        axes_dim,
        theta: FLUX1_THETA,
        qkv_bias: depth == 0 || list.dtype_shape(&qkv).is_some(),
        guidance_embed: list
            .dtype_shape(&nm.n("guidance_in.in_layer.weight"))
            .is_some(),
    })
}
