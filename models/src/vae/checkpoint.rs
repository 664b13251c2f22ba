//! A VAE file on disk: BFL's `ae.safetensors` layout (`encoder.*`,
//! `decoder.*`; ComfyUI's full checkpoints put it under
//! `first_stage_model.`), its decoder's blocks and the runtime spec of a
//! decode.

use std::path::{Path, PathBuf};

use dynvram_runtime::loader::ModelFiles;
use dynvram_runtime::quant::TensorList;
use dynvram_runtime::{ActDtype, BlockSpec, FilesList, ModelSpec, RuntimeError};

use super::VaeError;
use super::config::VaeConfig;
use crate::block_index::block_index;

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
    /// Convolutions (weights read as stored) and f32 tensors (norms, biases).
    fn tensors(&self, convs: &mut Vec<String>, f32s: &mut Vec<String>) {
        let p = &self.prefix;
        for n in ["norm1", "norm2"] {
            f32s.extend([format!("{p}{n}.weight"), format!("{p}{n}.bias")]);
        }
        let mut layers = vec!["conv1", "conv2"];
        if self.cin != self.cout {
            layers.push("nin_shortcut");
        }
        for l in layers {
            convs.push(format!("{p}{l}.weight"));
            f32s.push(format!("{p}{l}.bias"));
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

    /// The mid block's two ResNets.
    pub fn mid_blocks(&self, c: &VaeConfig) -> [ResBlock; 2] {
        let m = c.mid_channels();
        ["block_1", "block_2"].map(|b| ResBlock {
            prefix: self.dec(&format!("mid.{b}.")),
            cin: m,
            cout: m,
        })
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
    files: ModelFiles,
}

impl VaeCheckpoint {
    /// Opens `path` (a `.safetensors` file); the config is inferred from the
    /// shapes when `config` is `None`. Refuses files that are no VAE, VAEs
    /// with 4 latent channels (Stable Diffusion's), and tensors whose
    /// shapes disagree with the config, naming the tensor.
    pub fn open(path: &Path, config: Option<VaeConfig>) -> Result<Self, VaeError> {
        let _span = tracing::info_span!("vae_open", path = %path.display()).entered();
        let err = |why: String| VaeError::Weights {
            path: path.to_owned(),
            why,
        };
        if !path.is_file() {
            return Err(err("no such file".into()));
        }
        let files = ModelFiles::open(path).map_err(RuntimeError::from)?;
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
        let (config, inferred) = match config {
            Some(c) => {
                c.validate().map_err(|why| err(format!("config: {why}")))?;
                (c, false)
            }
            None => {
                let c = infer_config(&list, &names).map_err(&err)?;
                c.validate().map_err(&err)?;
                (c, true)
            }
        };
        check(&list, &names, &config).map_err(err)?;
        drop(list);
        Ok(Self {
            path: path.to_owned(),
            config,
            inferred,
            names,
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
        let (c, nm) = (&self.config, &self.names);
        stages(c)
            .into_iter()
            .map(|stage| {
                let (mut convs, mut f32s) = (Vec::new(), Vec::new());
                let conv = |name: String, convs: &mut Vec<String>, f32s: &mut Vec<String>| {
                    convs.push(format!("{name}.weight"));
                    f32s.push(format!("{name}.bias"));
                };
                let name = match stage {
                    Stage::Mid => {
                        conv(nm.dec("conv_in"), &mut convs, &mut f32s);
                        let [b1, b2] = nm.mid_blocks(c);
                        b1.tensors(&mut convs, &mut f32s);
                        let a = nm.dec("mid.attn_1.");
                        f32s.extend([format!("{a}norm.weight"), format!("{a}norm.bias")]);
                        for l in ["q", "k", "v", "proj_out"] {
                            conv(format!("{a}{l}"), &mut convs, &mut f32s);
                        }
                        b2.tensors(&mut convs, &mut f32s);
                        "decoder.mid".to_owned()
                    }
                    Stage::Up(i) => {
                        for b in nm.up_blocks(c, i) {
                            b.tensors(&mut convs, &mut f32s);
                        }
                        if i > 0 {
                            conv(
                                nm.dec(&format!("up.{i}.upsample.conv")),
                                &mut convs,
                                &mut f32s,
                            );
                        }
                        format!("decoder.up.{i}")
                    }
                    Stage::Out => {
                        f32s.extend([nm.dec("norm_out.weight"), nm.dec("norm_out.bias")]);
                        conv(nm.dec("conv_out"), &mut convs, &mut f32s);
                        "decoder.out".to_owned()
                    }
                };
                BlockSpec {
                    name,
                    tensors: f32s,
                    raw_tensors: convs,
                    ..BlockSpec::default()
                }
            })
            .collect()
    }

    /// The runtime spec of decodes of up to `batch` latents of `h × w`
    /// (the largest pass: a whole latent, or the tile tiled decoding uses)
    /// with activations in `dtype`.
    pub fn spec(&self, batch: usize, h: usize, w: usize, dtype: ActDtype) -> ModelSpec {
        ModelSpec {
            files: vec![self.path.clone()],
            blocks: self.blocks(),
            scratch_bytes: super::decode::activation_bytes(&self.config, batch, h, w, dtype),
        }
    }

    /// Bytes of every tensor the decoder uses, as stored.
    pub fn decoder_bytes(&self) -> u64 {
        self.blocks()
            .iter()
            .flat_map(|b| b.tensors.iter().chain(&b.raw_tensors))
            .filter_map(|t| self.files.get(t).map(|(_, i)| i.len()))
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

/// Every tensor the decoder uses is present with the config's shape.
fn check(list: &dyn TensorList, nm: &Names, c: &VaeConfig) -> Result<(), String> {
    let expect = |name: String, want: &[usize]| -> Result<(), String> {
        match list.dtype_shape(&name) {
            Some((_, s)) if s == want => Ok(()),
            Some((_, s)) => Err(format!(
                "`{name}` has shape {s:?}; the config {} implies {want:?}",
                describe(c)
            )),
            None => Err(format!("no tensor `{name}` (config {})", describe(c))),
        }
    };
    let conv = |name: String, cout: usize, cin: usize, k: usize| -> Result<(), String> {
        expect(format!("{name}.weight"), &[cout, cin, k, k])?;
        expect(format!("{name}.bias"), &[cout])
    };
    let norm = |name: String, ch: usize| -> Result<(), String> {
        expect(format!("{name}.weight"), &[ch])?;
        expect(format!("{name}.bias"), &[ch])
    };
    let res = |b: &ResBlock| -> Result<(), String> {
        let p = &b.prefix;
        norm(format!("{p}norm1"), b.cin)?;
        conv(format!("{p}conv1"), b.cout, b.cin, 3)?;
        norm(format!("{p}norm2"), b.cout)?;
        conv(format!("{p}conv2"), b.cout, b.cout, 3)?;
        if b.cin != b.cout {
            conv(format!("{p}nin_shortcut"), b.cout, b.cin, 1)?;
        }
        Ok(())
    };
    let m = c.mid_channels();
    conv(nm.dec("conv_in"), m, c.z_channels, 3)?;
    for b in nm.mid_blocks(c) {
        res(&b)?;
    }
    norm(nm.dec("mid.attn_1.norm"), m)?;
    for l in ["q", "k", "v", "proj_out"] {
        conv(nm.dec(&format!("mid.attn_1.{l}")), m, m, 1)?;
    }
    for i in 0..c.levels() {
        for b in nm.up_blocks(c, i) {
            res(&b)?;
        }
        if i > 0 {
            conv(
                nm.dec(&format!("up.{i}.upsample.conv")),
                c.channels(i),
                c.channels(i),
                3,
            )?;
        }
    }
    norm(nm.dec("norm_out"), c.channels(0))?;
    conv(nm.dec("conv_out"), c.image_channels, c.channels(0), 3)?;
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
