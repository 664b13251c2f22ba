//! A VAE file on disk: BFL's `ae.safetensors` layout (`encoder.*`,
//! `decoder.*`; ComfyUI's full checkpoints put it under
//! `first_stage_model.`) or diffusers' `AutoencoderKL` folder or file
//! (read as BFL's tensors through [`super::diffusers`]'s views), its
//! decoder's blocks and the runtime spec of a decode.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dynvram_runtime::loader::{ModelFiles, TensorView};
use dynvram_runtime::quant::TensorList;
use dynvram_runtime::{ActDtype, BlockSpec, FilesList, ModelSpec, RuntimeError};

use super::VaeError;
use super::config::VaeConfig;
use crate::block_index::block_index;
use crate::check::settle_config;

/// A folder's weights, the first found: diffusers' (sharded, then one file).
const FOLDER_WEIGHTS: [&str; 2] = [
    "diffusion_pytorch_model.safetensors.index.json",
    "diffusion_pytorch_model.safetensors",
];

/// Key prefixes a VAE's tensors are found under.
const PREFIXES: [&str; 2] = ["", "first_stage_model."];

/// One ResNet block of the decoder: its key prefix and channels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResBlock {
    pub prefix: String,
    pub cin: usize,
    pub cout: usize,
}

impl ResBlock {
    /// Its layers: norm1, conv1, norm2, conv2, and the 1×1 shortcut where
    /// the channels change.
    fn layers(&self, out: &mut Vec<Layer>) {
        let p = &self.prefix;
        let (cin, cout) = (self.cin, self.cout);
        out.extend([
            Layer::norm(format!("{p}norm1"), cin),
            Layer::conv(format!("{p}conv1"), cout, cin, 3),
            Layer::norm(format!("{p}norm2"), cout),
            Layer::conv(format!("{p}conv2"), cout, cout, 3),
        ]);
        if cin != cout {
            out.push(Layer::conv(format!("{p}nin_shortcut"), cout, cin, 1));
        }
    }
}

/// A layer's tensors as the file must hold them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Layer {
    /// `{name}.weight` `[cout, cin, k, k]` (read as stored) and `{name}.bias` `[cout]`.
    Conv {
        name: String,
        cout: usize,
        cin: usize,
        k: usize,
    },
    /// GroupNorm `{name}.weight` and `{name}.bias`, `[ch]` each.
    Norm { name: String, ch: usize },
}

impl Layer {
    fn conv(name: String, cout: usize, cin: usize, k: usize) -> Self {
        Self::Conv { name, cout, cin, k }
    }

    fn norm(name: String, ch: usize) -> Self {
        Self::Norm { name, ch }
    }

    /// (tensor, shape, read as stored) of each of its tensors.
    fn tensors(&self) -> Vec<(String, Vec<usize>, bool)> {
        match self {
            Self::Conv { name, cout, cin, k } => vec![
                (format!("{name}.weight"), vec![*cout, *cin, *k, *k], true),
                (format!("{name}.bias"), vec![*cout], false),
            ],
            Self::Norm { name, ch } => vec![
                (format!("{name}.weight"), vec![*ch], false),
                (format!("{name}.bias"), vec![*ch], false),
            ],
        }
    }
}

/// Tensor names of a decoder under a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Names {
    pub prefix: String,
}

impl Names {
    /// `prefix + "decoder." + name`.
    pub fn dec(&self, name: &str) -> String {
        format!("{}decoder.{name}", self.prefix)
    }

    /// The ResNet blocks of up level `i`, in order.
    pub fn up_blocks(&self, c: &VaeConfig, i: usize) -> Vec<ResBlock> {
        let cin = if i + 1 == c.levels() {
            c.mid_channels()
        } else {
            c.channels(i + 1)
        };
        (0..=c.num_res_blocks)
            .map(|j| ResBlock {
                prefix: self.dec(&format!("up.{i}.block.{j}.")),
                cin: if j == 0 { cin } else { c.channels(i) },
                cout: c.channels(i),
            })
            .collect()
    }

    /// `prefix + "encoder." + name`.
    pub fn enc(&self, name: &str) -> String {
        format!("{}encoder.{name}", self.prefix)
    }

    /// `prefix + part + "." + name` (`part` is `encoder` or `decoder`).
    fn part(&self, encoder: bool, name: &str) -> String {
        if encoder {
            self.enc(name)
        } else {
            self.dec(name)
        }
    }

    /// The ResNet blocks of the encoder's down level `i`, in order.
    pub fn down_blocks(&self, c: &VaeConfig, i: usize) -> Vec<ResBlock> {
        let cin = if i == 0 {
            c.channels(0)
        } else {
            c.channels(i - 1)
        };
        (0..c.num_res_blocks)
            .map(|j| ResBlock {
                prefix: self.enc(&format!("down.{i}.block.{j}.")),
                cin: if j == 0 { cin } else { c.channels(i) },
                cout: c.channels(i),
            })
            .collect()
    }

    /// The mid block's two ResNets (of the encoder or the decoder).
    pub fn mid_blocks(&self, c: &VaeConfig, encoder: bool) -> [ResBlock; 2] {
        let m = c.mid_channels();
        ["block_1", "block_2"].map(|b| ResBlock {
            prefix: self.part(encoder, &format!("mid.{b}.")),
            cin: m,
            cout: m,
        })
    }

    /// The mid block's layers: ResNet, attention (norm; q, k, v and
    /// proj_out as 1×1 convolutions), ResNet.
    fn mid_layers(&self, c: &VaeConfig, encoder: bool, out: &mut Vec<Layer>) {
        let m = c.mid_channels();
        let [b1, b2] = self.mid_blocks(c, encoder);
        b1.layers(out);
        out.push(Layer::norm(self.part(encoder, "mid.attn_1.norm"), m));
        for l in ["q", "k", "v", "proj_out"] {
            out.push(Layer::conv(
                self.part(encoder, &format!("mid.attn_1.{l}")),
                m,
                m,
                1,
            ));
        }
        b2.layers(out);
    }
}

/// Decoder stages, one runtime block each, in pass order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// `conv_in` and the mid block (ResNet, attention, ResNet).
    Mid,
    /// Up level `i` (run from the lowest resolution, `levels − 1`, to 0):
    /// its ResNets, then its upsampling where `i > 0`.
    Up(usize),
    /// `norm_out`, SiLU, `conv_out`.
    Out,
    /// The encoder's down level `i` (`conv_in` first where `i = 0`): its
    /// ResNets, then its stride-2 downsampling where `i < levels − 1`.
    Down(usize),
    /// The encoder's mid block.
    EncoderMid,
    /// The encoder's `norm_out`, SiLU, `conv_out` (mean and log-variance).
    EncoderOut,
}

impl Stage {
    /// The runtime block's name.
    fn name(self) -> String {
        match self {
            Self::Mid => "decoder.mid".into(),
            Self::Up(i) => format!("decoder.up.{i}"),
            Self::Out => "decoder.out".into(),
            Self::Down(i) => format!("encoder.down.{i}"),
            Self::EncoderMid => "encoder.mid".into(),
            Self::EncoderOut => "encoder.out".into(),
        }
    }

    /// The stage's layers, in the order they run.
    pub(crate) fn layers(self, c: &VaeConfig, nm: &Names) -> Vec<Layer> {
        let mut out = Vec::new();
        match self {
            Self::Mid => {
                out.push(Layer::conv(
                    nm.dec("conv_in"),
                    c.mid_channels(),
                    c.z_channels,
                    3,
                ));
                nm.mid_layers(c, false, &mut out);
            }
            Self::Up(i) => {
                for b in nm.up_blocks(c, i) {
                    b.layers(&mut out);
                }
                if i > 0 {
                    let ci = c.channels(i);
                    out.push(Layer::conv(
                        nm.dec(&format!("up.{i}.upsample.conv")),
                        ci,
                        ci,
                        3,
                    ));
                }
            }
            Self::Out => {
                out.push(Layer::norm(nm.dec("norm_out"), c.channels(0)));
                out.push(Layer::conv(
                    nm.dec("conv_out"),
                    c.image_channels,
                    c.channels(0),
                    3,
                ));
            }
            Self::Down(i) => {
                if i == 0 {
                    out.push(Layer::conv(
                        nm.enc("conv_in"),
                        c.channels(0),
                        c.image_channels,
                        3,
                    ));
                }
                for b in nm.down_blocks(c, i) {
                    b.layers(&mut out);
                }
                if i + 1 < c.levels() {
                    let ci = c.channels(i);
                    out.push(Layer::conv(
                        nm.enc(&format!("down.{i}.downsample.conv")),
                        ci,
                        ci,
                        3,
                    ));
                }
            }
            Self::EncoderMid => nm.mid_layers(c, true, &mut out),
            Self::EncoderOut => {
                let m = c.mid_channels();
                out.push(Layer::norm(nm.enc("norm_out"), m));
                out.push(Layer::conv(nm.enc("conv_out"), 2 * c.z_channels, m, 3));
            }
        }
        out
    }

    /// The runtime block: convolution weights read as stored, the rest f32.
    fn block(self, c: &VaeConfig, nm: &Names) -> BlockSpec {
        let (mut raw, mut f32s) = (Vec::new(), Vec::new());
        for l in self.layers(c, nm) {
            for (t, _, as_stored) in l.tensors() {
                if as_stored { raw.push(t) } else { f32s.push(t) }
            }
        }
        BlockSpec {
            name: self.name(),
            tensors: f32s,
            raw_tensors: raw,
            ..BlockSpec::default()
        }
    }
}

/// The stages of an encode of `c`, in order.
pub(crate) fn encoder_stages(c: &VaeConfig) -> Vec<Stage> {
    (0..c.levels())
        .map(Stage::Down)
        .chain([Stage::EncoderMid, Stage::EncoderOut])
        .collect()
}

/// The stages of a decode of `c`, in order.
pub(crate) fn stages(c: &VaeConfig) -> Vec<Stage> {
    std::iter::once(Stage::Mid)
        .chain((0..c.levels()).rev().map(Stage::Up))
        .chain(std::iter::once(Stage::Out))
        .collect()
}

/// A Flux VAE file, its config checked against every tensor the decoder uses.
#[derive(Debug)]
pub struct VaeCheckpoint {
    /// The weights file.
    pub path: PathBuf,
    /// The architecture (given, or inferred from the shapes).
    pub config: VaeConfig,
    /// Whether the config was inferred from the shapes.
    pub inferred: bool,
    pub(crate) names: Names,
    /// The BFL tensors of a diffusers autoencoder ([`super::diffusers`]);
    /// empty for BFL files.
    pub views: Arc<[TensorView]>,
    files: ModelFiles,
}

impl VaeCheckpoint {
    /// Opens `path` (a `.safetensors` file or shard index, or diffusers'
    /// `vae/` folder); the config is inferred from the shapes when `config`
    /// is `None`. Refuses files that are no VAE, VAEs
    /// with 4 latent channels (Stable Diffusion's), and tensors whose
    /// shapes disagree with the config, naming the tensor.
    pub fn open(path: &Path, config: Option<VaeConfig>) -> Result<Self, VaeError> {
        let _span = tracing::info_span!("vae_open", path = %path.display()).entered();
        let err = |why: String| VaeError::Weights {
            path: path.to_owned(),
            why,
        };
        let path = &if path.is_dir() {
            FOLDER_WEIGHTS
                .iter()
                .map(|n| path.join(n))
                .find(|w| w.is_file())
                .ok_or_else(|| {
                    err(format!(
                        "the folder has none of {}",
                        FOLDER_WEIGHTS.join(", ")
                    ))
                })?
        } else if path.is_file() {
            path.to_owned()
        } else {
            return Err(err("no such file".into()));
        };
        let files = ModelFiles::open(path).map_err(RuntimeError::from)?;
        let (files, views) = if super::diffusers::is_diffusers(&files) {
            let views: Arc<[TensorView]> = super::diffusers::views(&files)?.into();
            (files.with_views(&views).map_err(RuntimeError::from)?, views)
        } else {
            (files, Arc::default())
        };
        let list = FilesList::new(&files);
        let prefix = PREFIXES
            .iter()
            .find(|p| {
                list.dtype_shape(&format!("{p}decoder.conv_in.weight"))
                    .is_some()
            })
            .ok_or_else(|| {
                err(format!(
                    "not a VAE: no `decoder.conv_in.weight`{}",
                    if list.names().iter().any(|n| n.contains("double_blocks.")) {
                        " (this looks like a Flux transformer)"
                    } else {
                        ""
                    }
                ))
            })?
            .to_string();
        let names = Names { prefix };
        let (config, inferred) = settle_config(
            config,
            VaeConfig::validate,
            err,
            || {
                let c = infer_config(&list, &names).map_err(&err)?;
                c.validate().map_err(&err)?;
                Ok(c)
            },
            |c| check(&list, &names, c, &stages(c)).map_err(&err),
        )?;
        drop(list);
        Ok(Self {
            path: path.to_owned(),
            config,
            inferred,
            names,
            views,
            files,
        })
    }

    /// The opened file.
    pub fn files(&self) -> &ModelFiles {
        &self.files
    }

    /// The decoder's runtime blocks in pass order (`conv_in` + mid, the up
    /// levels from the lowest resolution, `norm_out` + `conv_out`): convolution weights
    /// uploaded as stored, norms and biases as f32.
    pub fn blocks(&self) -> Vec<BlockSpec> {
        stages(&self.config)
            .into_iter()
            .map(|st| st.block(&self.config, &self.names))
            .collect()
    }

    /// The encoder's runtime blocks in pass order (each down level, the mid
    /// block, `norm_out` + `conv_out`); an error naming the tensor where the
    /// file has no encoder or a tensor of the wrong shape.
    pub fn encoder_blocks(&self) -> Result<Vec<BlockSpec>, VaeError> {
        let stages = encoder_stages(&self.config);
        let list = FilesList::new(&self.files);
        check(&list, &self.names, &self.config, &stages).map_err(|why| VaeError::Weights {
            path: self.path.clone(),
            why: format!("encoder: {why}"),
        })?;
        Ok(stages
            .into_iter()
            .map(|st| st.block(&self.config, &self.names))
            .collect())
    }

    /// The runtime spec of encodes of `batch` images of `h × w` pixels with
    /// activations in `dtype` ([`Self::encoder_blocks`]' errors).
    pub fn encoder_spec(
        &self,
        batch: usize,
        h: usize,
        w: usize,
        dtype: ActDtype,
    ) -> Result<ModelSpec, VaeError> {
        Ok(ModelSpec {
            views: self.views.clone(),
            files: vec![self.path.clone()],
            blocks: self.encoder_blocks()?,
            scratch_bytes: super::activations::encoder_activation_bytes(
                &self.config,
                batch,
                h,
                w,
                dtype,
            ),
            scratch_wish: 0,
        })
    }

    /// The runtime spec of decodes of up to `batch` latents of `h × w`
    /// (the largest pass: a whole latent, or the tile tiled decoding uses)
    /// with activations in `dtype`.
    pub fn spec(&self, batch: usize, h: usize, w: usize, dtype: ActDtype) -> ModelSpec {
        ModelSpec {
            views: self.views.clone(),
            files: vec![self.path.clone()],
            blocks: self.blocks(),
            scratch_bytes: super::activations::activation_bytes(&self.config, batch, h, w, dtype),
            scratch_wish: 0,
        }
    }

    /// Bytes of every tensor the decoder uses, as stored.
    pub fn decoder_bytes(&self) -> u64 {
        self.blocks()
            .iter()
            .flat_map(|b| b.tensors.iter().chain(&b.raw_tensors))
            .filter_map(|t| self.files.info(t).map(|i| i.len()))
            .sum()
    }
}

/// The config the shapes imply: latent channels from `conv_in`, levels and
/// channels from the up blocks, ResNets per level from up level 0.
pub(crate) fn infer_config(list: &dyn TensorList, nm: &Names) -> Result<VaeConfig, String> {
    let shape = |name: &str| -> Result<Vec<usize>, String> {
        list.dtype_shape(name)
            .map(|(_, s)| s)
            .ok_or_else(|| format!("no tensor `{name}`"))
    };
    let conv_in = shape(&nm.dec("conv_in.weight"))?;
    let &[_, z_channels, _, _] = &conv_in[..] else {
        return Err(format!(
            "`{}` has shape {conv_in:?}, expected [channels, z_channels, 3, 3]",
            nm.dec("conv_in.weight")
        ));
    };
    if z_channels == 4 {
        return Err(format!(
            "`{}` takes 4 latent channels: a Stable Diffusion 1.x/2.x/SDXL VAE, not Flux's 16-channel one",
            nm.dec("conv_in.weight")
        ));
    }
    let up = nm.dec("up.");
    let names = list.names();
    let levels = names
        .iter()
        .filter_map(|n| block_index(n, &up))
        .max()
        .map_or(0, |m| m + 1);
    if levels == 0 {
        return Err(format!("no `{up}N.` tensors"));
    }
    let mut chans = Vec::new();
    for i in 0..levels {
        let s = shape(&nm.dec(&format!("up.{i}.block.0.conv1.weight")))?;
        chans.push(s[0]);
    }
    let blocks = names
        .iter()
        .filter_map(|n| block_index(n, &nm.dec("up.0.block.")))
        .max()
        .ok_or_else(|| format!("no `{}0.` tensors", nm.dec("up.0.block.")))?;
    let out = shape(&nm.dec("conv_out.weight"))?;
    let ch = chans[0];
    if ch == 0 || chans.iter().any(|c| !c.is_multiple_of(ch)) {
        return Err(format!(
            "up level channels {chans:?} are not multiples of level 0's"
        ));
    }
    Ok(VaeConfig {
        ch,
        ch_mult: chans.iter().map(|c| c / ch).collect(),
        num_res_blocks: blocks,
        z_channels,
        image_channels: out[0],
    })
}

/// Every tensor of `stages` is present with the config's shape, and the
/// decoder has no up level past the config's.
fn check(list: &dyn TensorList, nm: &Names, c: &VaeConfig, stages: &[Stage]) -> Result<(), String> {
    for stage in stages {
        for layer in stage.layers(c, nm) {
            for (name, want, _) in layer.tensors() {
                match list.dtype_shape(&name) {
                    Some((_, s)) if s == want => {}
                    Some((_, s)) => {
                        return Err(format!(
                            "`{name}` has shape {s:?}; the config {} implies {want:?}",
                            describe(c)
                        ));
                    }
                    None => return Err(format!("no tensor `{name}` (config {})", describe(c))),
                }
            }
        }
    }
    let names = list.names();
    if let Some(extra) = names
        .iter()
        .filter_map(|n| block_index(n, &nm.dec("up.")))
        .find(|&i| i >= c.levels())
    {
        return Err(format!(
            "the file has `{}` but the config has {} levels",
            nm.dec(&format!("up.{extra}")),
            c.levels()
        ));
    }
    Ok(())
}

fn describe(c: &VaeConfig) -> String {
    format!(
        "(ch {}, ch_mult {:?}, num_res_blocks {}, z_channels {})",
        c.ch, c.ch_mult, c.num_res_blocks, c.z_channels
    )
}
