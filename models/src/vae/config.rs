//! The VAE's architecture: BFL `AutoEncoderParams` names (`ch`, `ch_mult`,
//! `num_res_blocks`, `z_channels`), 32 GroupNorm groups with eps 1e-6.

use std::path::Path;

use super::VaeError;

/// GroupNorm groups of every norm (BFL and diffusers).
pub const GROUPS: usize = 32;
/// GroupNorm epsilon.
pub const EPS: f32 = 1e-6;

/// A VAE's shape.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct VaeConfig {
    /// Base channels (`ch`; diffusers' `block_out_channels[0]`).
    pub ch: usize,
    /// Channels of each resolution level, in multiples of `ch` (level 0 is
    /// the full resolution).
    pub ch_mult: Vec<usize>,
    /// ResNet blocks per encoder level (the decoder has one more).
    pub num_res_blocks: usize,
    /// Latent channels (16 for Flux).
    pub z_channels: usize,
    /// Image channels (3).
    pub image_channels: usize,
}

impl VaeConfig {
    /// FLUX.1's `ae.safetensors`: ch 128, ch_mult [1, 2, 4, 4], 2 ResNet
    /// blocks, 16 latent channels.
    pub fn flux() -> Self {
        Self {
            ch: 128,
            ch_mult: vec![1, 2, 4, 4],
            num_res_blocks: 2,
            z_channels: 16,
            image_channels: 3,
        }
    }

    /// Resolution levels (4 for Flux: an 8× upscale).
    pub fn levels(&self) -> usize {
        self.ch_mult.len()
    }

    /// Channels of level `i`.
    pub fn channels(&self, i: usize) -> usize {
        self.ch * self.ch_mult[i]
    }

    /// Channels of the lowest resolution (the mid block's).
    pub fn mid_channels(&self) -> usize {
        self.channels(self.levels() - 1)
    }

    /// Image pixels per latent pixel along each axis (`2^(levels − 1)`).
    pub fn scale(&self) -> usize {
        1 << (self.levels() - 1)
    }

    /// Why this config cannot run, if it cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.ch_mult.is_empty() || self.ch_mult.len() > 8 {
            return Err(format!(
                "ch_mult {:?} must have 1 to 8 levels",
                self.ch_mult
            ));
        }
        if self.z_channels == 4 {
            return Err(
                "4 latent channels: a Stable Diffusion 1.x/2.x/SDXL VAE, not Flux's 16-channel one"
                    .into(),
            );
        }
        if self.ch == 0 || self.z_channels == 0 || self.image_channels == 0 {
            return Err(format!(
                "ch {}, z_channels {}, image channels {}: none may be 0",
                self.ch, self.z_channels, self.image_channels
            ));
        }
        for i in 0..self.levels() {
            let c = self.channels(i);
            if c == 0 || !c.is_multiple_of(GROUPS) {
                return Err(format!(
                    "level {i} has {c} channels, not a positive multiple of the {GROUPS} GroupNorm groups"
                ));
            }
        }
        if self.mid_channels() > 512 {
            return Err(format!(
                "the mid block's {} channels exceed the attention kernel's 512",
                self.mid_channels()
            ));
        }
        Ok(())
    }

    /// The config of a diffusers `AutoencoderKL` `config.json`
    /// (`block_out_channels`, `layers_per_block`, `latent_channels`,
    /// `out_channels`, `norm_num_groups`).
    pub fn from_diffusers_json(path: &Path) -> Result<Self, VaeError> {
        let err = |why: String| VaeError::Config {
            path: path.to_owned(),
            why,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
        let uint = |key: &str, default: Option<usize>| -> Result<usize, VaeError> {
            match v.get(key) {
                Some(x) => x
                    .as_u64()
                    .map(|x| x as usize)
                    .ok_or_else(|| err(format!("`{key}` is {x}, expected an unsigned integer"))),
                None => default.ok_or_else(|| err(format!("no `{key}`"))),
            }
        };
        let boc: Vec<usize> = match v.get("block_out_channels").and_then(|b| b.as_array()) {
            Some(a) => a
                .iter()
                .map(|x| x.as_u64().map(|x| x as usize))
                .collect::<Option<_>>()
                .ok_or_else(|| err("`block_out_channels` holds a non-integer".into()))?,
            None => return Err(err("no `block_out_channels` list".into())),
        };
        let groups = uint("norm_num_groups", Some(GROUPS))?;
        if groups != GROUPS {
            return Err(err(format!(
                "norm_num_groups = {groups}; only {GROUPS} is implemented"
            )));
        }
        let ch = *boc
            .first()
            .ok_or_else(|| err("`block_out_channels` is empty".into()))?;
        if ch == 0 || boc.iter().any(|c| !c.is_multiple_of(ch)) {
            return Err(err(format!(
                "block_out_channels {boc:?} are not multiples of the first"
            )));
        }
        let c = Self {
            ch,
            ch_mult: boc.iter().map(|c| c / ch).collect(),
            num_res_blocks: uint("layers_per_block", Some(2))?,
            z_channels: uint("latent_channels", None)?,
            image_channels: uint("out_channels", Some(3))?,
        };
        c.validate().map_err(err)?;
        Ok(c)
    }
}
