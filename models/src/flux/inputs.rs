//! The inputs of one Flux forward, as ComfyUI's `Flux.forward_orig`
//! receives them, read from a safetensors file and checked against the
//! config: names, dtypes (all F32), shapes, sequence lengths against their
//! ids, finite values.

use std::collections::BTreeMap;
use std::path::Path;

use super::config::FluxConfig;
use super::{FluxError, Shape};

/// Input names, in the order ComfyUI passes them.
pub const NAMES: [&str; 7] = [
    "img",
    "img_ids",
    "txt",
    "txt_ids",
    "timesteps",
    "y",
    "guidance",
];

/// One forward's inputs (row-major f32).
#[derive(Debug, Clone, PartialEq)]
pub struct FluxInputs {
    /// Batch size, tokens of the image and text sequences.
    pub shape: Shape,
    /// `[B, L_img, in_channels]` packed latent tokens.
    pub img: Vec<f32>,
    /// `[B, L_img, axes]` position ids of the image tokens.
    pub img_ids: Vec<f32>,
    /// `[B, L_txt, context_in_dim]` text tokens.
    pub txt: Vec<f32>,
    /// `[B, L_txt, axes]` position ids of the text tokens.
    pub txt_ids: Vec<f32>,
    /// `[B]` flow-matching sigma in 0..1 (the model scales it by 1000).
    pub timesteps: Vec<f32>,
    /// `[B, vec_in_dim]` pooled vector.
    pub y: Vec<f32>,
    /// `[B]` distilled guidance scale (models with `guidance_in` only).
    pub guidance: Option<Vec<f32>>,
}

/// A tensor as read: shape and f32 values.
#[derive(Debug, Clone)]
struct Raw {
    shape: Vec<usize>,
    values: Vec<f32>,
}

impl FluxInputs {
    /// Reads and checks `path` against `config`.
    pub fn from_file(path: &Path, config: &FluxConfig) -> Result<Self, FluxError> {
        let err = |why: String| input_error(path, why);
        let mut raw = BTreeMap::new();
        for t in read_tensors(path)? {
            if !NAMES.contains(&t.name.as_str()) {
                return Err(err(format!(
                    "unknown input `{}`; the inputs are {}",
                    t.name,
                    NAMES.join(", ")
                )));
            }
            if t.dtype != safetensors::Dtype::F32 {
                return Err(err(format!(
                    "`{}` is {:?}; every input must be F32",
                    t.name, t.dtype
                )));
            }
            raw.insert(
                t.name,
                Raw {
                    shape: t.shape,
                    values: t.values,
                },
            );
        }
        Self::from_raw(raw, config).map_err(err)
    }

    fn from_raw(mut raw: BTreeMap<String, Raw>, c: &FluxConfig) -> Result<Self, String> {
        let mut take = |name: &str| {
            raw.remove(name)
                .ok_or_else(|| format!("missing input `{name}`"))
        };
        let img = take("img")?;
        let img_ids = take("img_ids")?;
        let txt = take("txt")?;
        let txt_ids = take("txt_ids")?;
        let timesteps = take("timesteps")?;
        let y = take("y")?;
        let guidance = if c.guidance_embed {
            Some(
                take("guidance")
                    .map_err(|e| format!("{e}: the model has a guidance embedder (guidance_in)"))?,
            )
        } else if raw.contains_key("guidance") {
            return Err(
                "input `guidance` given, but the model has no guidance embedder (guidance_in)"
                    .into(),
            );
        } else {
            None
        };
        let [b, li, ci] = dims3("img", &img.shape)?;
        let [_, lt, ct] = dims3("txt", &txt.shape)?;
        if ci != c.in_channels {
            return Err(format!(
                "`img` is {:?}: tokens of {ci} features, the model takes in_channels = {} (packed 2×2 latent patches)",
                img.shape, c.in_channels
            ));
        }
        if ct != c.context_in_dim {
            return Err(format!(
                "`txt` is {:?}: tokens of {ct} features, the model takes context_in_dim = {}",
                txt.shape, c.context_in_dim
            ));
        }
        if b == 0 || li == 0 || lt == 0 {
            return Err(format!(
                "`img` {:?} and `txt` {:?} need at least one batch element and one token each",
                img.shape, txt.shape
            ));
        }
        let axes = c.axes_dim.len();
        let expect = |name: &str, t: &Raw, want: &[usize], what: &str| -> Result<(), String> {
            if t.shape != want {
                return Err(format!(
                    "`{name}` has shape {:?}, expected {want:?} ({what})",
                    t.shape
                ));
            }
            Ok(())
        };
        if txt.shape[0] != b {
            return Err(format!(
                "`txt` {:?} has batch {}, `img` {:?} has batch {b}",
                txt.shape, txt.shape[0], img.shape
            ));
        }
        for (name, ids, len, seq) in [
            ("img_ids", &img_ids, li, "img"),
            ("txt_ids", &txt_ids, lt, "txt"),
        ] {
            if ids.shape.len() == 3
                && ids.shape[0] == b
                && ids.shape[2] == axes
                && ids.shape[1] != len
            {
                return Err(format!(
                    "`{name}` holds {} positions but `{seq}` has {len} tokens",
                    ids.shape[1]
                ));
            }
            expect(
                name,
                ids,
                &[b, len, axes],
                &format!("batch, `{seq}` tokens, {axes} id axes"),
            )?;
        }
        expect("timesteps", &timesteps, &[b], "one sigma per batch element")?;
        expect("y", &y, &[b, c.vec_in_dim], "batch, vec_in_dim")?;
        if let Some(g) = &guidance {
            expect("guidance", g, &[b], "one scale per batch element")?;
        }
        for (name, t) in [
            ("img", &img),
            ("img_ids", &img_ids),
            ("txt", &txt),
            ("txt_ids", &txt_ids),
            ("timesteps", &timesteps),
            ("y", &y),
        ]
        .into_iter()
        .chain(guidance.as_ref().map(|g| ("guidance", g)))
        {
            if let Some(i) = t.values.iter().position(|v| !v.is_finite()) {
                return Err(format!("`{name}` element {i} is {}", t.values[i]));
            }
        }
        Ok(Self {
            shape: Shape {
                batch: b,
                img_len: li,
                txt_len: lt,
            },
            img: img.values,
            img_ids: img_ids.values,
            txt: txt.values,
            txt_ids: txt_ids.values,
            timesteps: timesteps.values,
            y: y.values,
            guidance: guidance.map(|g| g.values),
        })
    }

    /// `cat(txt_ids, img_ids)` per batch element: `[B, L_txt + L_img, axes]`.
    pub fn joint_ids(&self) -> Vec<f32> {
        let Shape {
            batch,
            img_len,
            txt_len,
        } = self.shape;
        let axes = self.img_ids.len() / (batch * img_len).max(1);
        let mut out = Vec::with_capacity(batch * (img_len + txt_len) * axes);
        for b in 0..batch {
            out.extend_from_slice(&self.txt_ids[b * txt_len * axes..][..txt_len * axes]);
            out.extend_from_slice(&self.img_ids[b * img_len * axes..][..img_len * axes]);
        }
        out
    }
}

/// One tensor of a small safetensors file of inputs.
#[derive(Debug)]
pub(super) struct FileTensor {
    pub name: String,
    pub dtype: safetensors::Dtype,
    pub shape: Vec<usize>,
    /// The values of an F32 tensor (empty for other dtypes).
    pub values: Vec<f32>,
}

/// Bad input read from `path`: the error names the file.
pub(super) fn input_error(path: &Path, why: String) -> FluxError {
    FluxError::Input(format!("{}: {why}", path.display()))
}

/// Every tensor of the safetensors file `path` (inputs and noise: small
/// files, read whole).
pub(super) fn read_tensors(path: &Path) -> Result<Vec<FileTensor>, FluxError> {
    let bytes = std::fs::read(path).map_err(|source| FluxError::Io {
        path: path.to_owned(),
        source,
    })?;
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| input_error(path, format!("not a safetensors file: {e}")))?;
    Ok(st
        .tensors()
        .into_iter()
        .map(|(name, view)| FileTensor {
            name,
            dtype: view.dtype(),
            shape: view.shape().to_vec(),
            values: if view.dtype() == safetensors::Dtype::F32 {
                view.data()
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect()
            } else {
                Vec::new()
            },
        })
        .collect())
}

fn dims3(name: &str, shape: &[usize]) -> Result<[usize; 3], String> {
    match *shape {
        [a, b, c] => Ok([a, b, c]),
        _ => Err(format!(
            "`{name}` has shape {shape:?}, expected 3 dimensions [batch, tokens, features]"
        )),
    }
}
