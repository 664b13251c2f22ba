//! Flux hyper-parameters in Black Forest Labs' `FluxParams` names: read from
//! a `config.json` beside the weights, or inferred from the tensor shapes as
//! ComfyUI does (with FLUX.1's `axes_dim` and `theta`, which no shape shows).

use std::path::Path;

use serde_json::Value;

use super::FluxError;

/// Width of the sinusoidal timestep / guidance embedding (`time_in` input).
pub const TIME_DIM: usize = 256;

/// Most double or single blocks a config may declare (FLUX.1 has 19 + 38).
pub const MAX_BLOCKS: usize = 1024;

/// Widest hidden size accepted (FLUX.1: 3072).
pub const MAX_WIDTH: usize = 1 << 16;

/// FLUX.1's RoPE axes (ids: (0, row, col)), which ComfyUI hard-codes.
pub const FLUX1_AXES_DIM: [usize; 3] = [16, 56, 56];

/// FLUX.1's RoPE base.
pub const FLUX1_THETA: f64 = 10000.0;

/// The hyper-parameters of a Flux transformer (BFL `FluxParams`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FluxConfig {
    /// Width of a packed image token (`img_in` input: latent channels × 2 × 2).
    pub in_channels: usize,
    /// Width of an output token (`final_layer.linear` output).
    pub out_channels: usize,
    /// Width of the pooled vector `y` (`vector_in` input; CLIP pooled: 768).
    pub vec_in_dim: usize,
    /// Width of a text token (`txt_in` input; T5: 4096).
    pub context_in_dim: usize,
    /// Residual width.
    pub hidden_size: usize,
    /// MLP width over `hidden_size`.
    pub mlp_ratio: f64,
    /// Attention heads.
    pub num_heads: usize,
    /// Double-stream blocks.
    pub depth: usize,
    /// Single-stream blocks.
    pub depth_single_blocks: usize,
    /// RoPE dimensions per id axis (sum = head_dim).
    pub axes_dim: Vec<usize>,
    /// RoPE base.
    pub theta: f64,
    /// `qkv` linears carry a bias.
    pub qkv_bias: bool,
    /// A `guidance_in` embedder exists (FLUX.1-dev) and takes `guidance`.
    pub guidance_embed: bool,
}

impl FluxConfig {
    /// Per-head width.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_heads.max(1)
    }

    /// MLP inner width (`int(hidden_size · mlp_ratio)`, as BFL computes
    /// it; a product within rounding of an integer counts as that integer,
    /// so a ratio inferred as `M / hidden` gives back `M`).
    pub fn mlp_hidden(&self) -> usize {
        let v = self.hidden_size as f64 * self.mlp_ratio;
        let r = v.round();
        if (v - r).abs() <= 1e-9 * v.abs().max(1.0) {
            r as usize
        } else {
            v as usize
        }
    }

    /// Reads `config.json`: BFL `FluxParams` names, or diffusers'
    /// `FluxTransformer2DModel` config (told by its `_class_name`; see
    /// [`Self::from_diffusers_json`]); `patch_size` and unknown keys are
    /// ignored.
    pub fn from_file(path: &Path) -> Result<Self, FluxError> {
        let text = std::fs::read_to_string(path).map_err(|source| FluxError::Io {
            path: path.to_owned(),
            source,
        })?;
        let err = |why: String| FluxError::Config {
            path: path.to_owned(),
            why,
        };
        let v: Value = serde_json::from_str(&text).map_err(|e| err(format!("not JSON: {e}")))?;
        let c = match v.get("_class_name") {
            // diffusers' FluxTransformer2DModel config (num_layers,
            // attention_head_dim, …): the same model in other names.
            Some(class) => Self::from_diffusers_json(&v).map_err(|why| {
                err(format!(
                    "{why}: this is a diffusers config ({class}), read in diffusers' \
                     FluxTransformer2DModel names; a config in BFL FluxParams names works too"
                ))
            })?,
            None => Self::from_json(&v).map_err(err)?,
        };
        c.validate().map_err(|why| FluxError::Config {
            path: path.to_owned(),
            why,
        })?;
        Ok(c)
    }

    /// Parses the BFL names from a JSON object (not yet validated).
    pub fn from_json(v: &Value) -> Result<Self, String> {
        let obj = v
            .as_object()
            .ok_or_else(|| "the config is not a JSON object".to_string())?;
        let int = |key: &str| -> Result<usize, String> {
            let x = obj
                .get(key)
                .ok_or_else(|| format!("missing `{key}`"))?
                .as_u64()
                .ok_or_else(|| format!("`{key}` must be a non-negative integer"))?;
            usize::try_from(x).map_err(|_| format!("`{key}` = {x} is too large"))
        };
        let float = |key: &str| -> Result<f64, String> {
            obj.get(key)
                .ok_or_else(|| format!("missing `{key}`"))?
                .as_f64()
                .ok_or_else(|| format!("`{key}` must be a number"))
        };
        let boolean = |key: &str| -> Result<bool, String> {
            obj.get(key)
                .ok_or_else(|| format!("missing `{key}`"))?
                .as_bool()
                .ok_or_else(|| format!("`{key}` must be true or false"))
        };
        let axes_dim = obj
            .get("axes_dim")
            .ok_or_else(|| "missing `axes_dim`".to_string())?
            .as_array()
            .ok_or_else(|| "`axes_dim` must be a list of integers".to_string())?
            .iter()
            .map(|d| {
                d.as_u64()
                    .and_then(|d| usize::try_from(d).ok())
                    .ok_or_else(|| "`axes_dim` must be a list of integers".to_string())
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            in_channels: int("in_channels")?,
            out_channels: int("out_channels")?,
            vec_in_dim: int("vec_in_dim")?,
            context_in_dim: int("context_in_dim")?,
            hidden_size: int("hidden_size")?,
            mlp_ratio: float("mlp_ratio")?,
            num_heads: int("num_heads")?,
            depth: int("depth")?,
            depth_single_blocks: int("depth_single_blocks")?,
            axes_dim,
            theta: float("theta")?,
            qkv_bias: boolean("qkv_bias")?,
            guidance_embed: boolean("guidance_embed")?,
        })
    }

    /// Parses diffusers' `FluxTransformer2DModel` config (not yet
    /// validated): `num_layers`, `num_single_layers`, `attention_head_dim` ×
    /// `num_attention_heads` (the width), `joint_attention_dim`,
    /// `pooled_projection_dim`, `guidance_embeds`, `axes_dims_rope`,
    /// `in_channels` and `out_channels` (null or absent: `in_channels`).
    /// The values diffusers hard-codes are FLUX.1's: MLP ratio 4, RoPE theta
    /// 10 000, qkv biases.
    pub fn from_diffusers_json(v: &Value) -> Result<Self, String> {
        let obj = v
            .as_object()
            .ok_or_else(|| "the config is not a JSON object".to_string())?;
        let get = |key: &str| obj.get(key).filter(|x| !x.is_null());
        let int = |key: &str| -> Result<usize, String> {
            let x = get(key)
                .ok_or_else(|| format!("missing `{key}`"))?
                .as_u64()
                .ok_or_else(|| format!("`{key}` must be a non-negative integer"))?;
            usize::try_from(x).map_err(|_| format!("`{key}` = {x} is too large"))
        };
        let heads = int("num_attention_heads")?;
        let head_dim = int("attention_head_dim")?;
        let in_channels = int("in_channels")?;
        let axes_dim = get("axes_dims_rope")
            .ok_or_else(|| "missing `axes_dims_rope`".to_string())?
            .as_array()
            .ok_or_else(|| "`axes_dims_rope` must be a list of integers".to_string())?
            .iter()
            .map(|d| {
                d.as_u64()
                    .and_then(|d| usize::try_from(d).ok())
                    .ok_or_else(|| "`axes_dims_rope` must be a list of integers".to_string())
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            in_channels,
            out_channels: if get("out_channels").is_some() {
                int("out_channels")?
            } else {
                in_channels
            },
            vec_in_dim: int("pooled_projection_dim")?,
            context_in_dim: int("joint_attention_dim")?,
            hidden_size: heads
                .checked_mul(head_dim)
                .ok_or("num_attention_heads × attention_head_dim overflows")?,
            mlp_ratio: 4.0,
            num_heads: heads,
            depth: int("num_layers")?,
            depth_single_blocks: int("num_single_layers")?,
            axes_dim,
            theta: FLUX1_THETA,
            qkv_bias: true,
            guidance_embed: match get("guidance_embeds") {
                None => false,
                Some(b) => b
                    .as_bool()
                    .ok_or("`guidance_embeds` must be true or false")?,
            },
        })
    }

    /// The config as BFL `FluxParams` JSON (what [`Self::from_json`] reads).
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "in_channels": self.in_channels,
            "out_channels": self.out_channels,
            "vec_in_dim": self.vec_in_dim,
            "context_in_dim": self.context_in_dim,
            "hidden_size": self.hidden_size,
            "mlp_ratio": self.mlp_ratio,
            "num_heads": self.num_heads,
            "depth": self.depth,
            "depth_single_blocks": self.depth_single_blocks,
            "axes_dim": self.axes_dim,
            "theta": self.theta,
            "qkv_bias": self.qkv_bias,
            "guidance_embed": self.guidance_embed,
        })
    }

    /// Checks the values describe a Flux transformer this runtime runs.
    pub fn validate(&self) -> Result<(), String> {
        let c = self;
        for (key, v) in [
            ("in_channels", c.in_channels),
            ("out_channels", c.out_channels),
            ("vec_in_dim", c.vec_in_dim),
            ("context_in_dim", c.context_in_dim),
            ("hidden_size", c.hidden_size),
            ("num_heads", c.num_heads),
        ] {
            if v == 0 || v > MAX_WIDTH {
                return Err(format!("`{key}` = {v} must be in 1..={MAX_WIDTH}"));
            }
        }
        if c.depth > MAX_BLOCKS || c.depth_single_blocks > MAX_BLOCKS {
            return Err(format!(
                "depth {} / depth_single_blocks {} exceed {MAX_BLOCKS}",
                c.depth, c.depth_single_blocks
            ));
        }
        if !c.hidden_size.is_multiple_of(c.num_heads) {
            return Err(format!(
                "hidden_size {} is not a multiple of num_heads {}",
                c.hidden_size, c.num_heads
            ));
        }
        let hd = c.head_dim();
        if !hd.is_multiple_of(2) || hd > 256 {
            return Err(format!(
                "head_dim = hidden_size / num_heads = {hd} must be even and at most 256"
            ));
        }
        if c.axes_dim.is_empty() || c.axes_dim.iter().any(|d| !d.is_multiple_of(2)) {
            return Err(format!(
                "`axes_dim` {:?} must be a non-empty list of even numbers",
                c.axes_dim
            ));
        }
        let sum: usize = c.axes_dim.iter().sum();
        if sum != hd {
            return Err(format!(
                "sum(axes_dim) = {sum} ({:?}) must equal head_dim = hidden_size / num_heads = {hd}",
                c.axes_dim
            ));
        }
        if !(c.theta.is_finite() && c.theta >= 1.0) {
            return Err(format!(
                "`theta` = {} must be finite and at least 1",
                c.theta
            ));
        }
        if !(c.mlp_ratio.is_finite() && c.mlp_ratio > 0.0) || c.mlp_hidden() == 0 {
            return Err(format!(
                "`mlp_ratio` = {} must give a positive MLP width",
                c.mlp_ratio
            ));
        }
        if c.mlp_hidden() > 16 * MAX_WIDTH {
            return Err(format!("MLP width {} is too large", c.mlp_hidden()));
        }
        Ok(())
    }
}
