//! CLIP text-model hyper-parameters (HF `CLIPTextConfig` names): from a
//! `config.json`, inferred from the tensor shapes, or CLIP-L's.

use std::path::Path;

use crate::hf_config::HfConfig;
use crate::tokenize::CLIP_MAX_LEN;

use crate::error::ModelError as ClipError;

/// Head width of CLIP-L and CLIP-G, what inference assumes.
pub const HEAD_DIM: usize = 64;

/// LayerNorm epsilon of every CLIP text model.
pub const LAYER_NORM_EPS: f32 = 1e-5;

/// The hyper-parameters of a CLIP text encoder.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ClipConfig {
    /// Residual width.
    pub hidden_size: usize,
    /// MLP width (`fc1` output).
    pub intermediate_size: usize,
    /// Encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads (`hidden_size / 64` for CLIP-L and CLIP-G).
    pub num_attention_heads: usize,
    /// Token-embedding rows.
    pub vocab_size: usize,
    /// Position-embedding rows (77).
    pub max_position_embeddings: usize,
    /// LayerNorm epsilon (1e-5).
    pub layer_norm_eps: f32,
}

impl ClipConfig {
    /// CLIP-L's text model (openai/clip-vit-large-patch14, ComfyUI's
    /// `clip_l.safetensors`): 12 layers of width 768, 12 heads, MLP 3072.
    pub fn clip_l() -> Self {
        Self {
            hidden_size: 768,
            intermediate_size: 3072,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            vocab_size: 49408,
            max_position_embeddings: CLIP_MAX_LEN,
            layer_norm_eps: LAYER_NORM_EPS,
        }
    }

    /// Per-head width.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads.max(1)
    }

    /// Reads an HF `CLIPTextConfig` `config.json`, or a whole model's
    /// `CLIPConfig` (its `text_config`). The activation must be
    /// `quick_gelu`, the only one implemented.
    pub fn from_hf_json(path: &Path) -> Result<Self, ClipError> {
        let file = HfConfig::read(path)?;
        let j = file.nested("text_config").unwrap_or(file);
        if let Some(act) = j.string("hidden_act")?
            && act != "quick_gelu"
        {
            return Err(j.err(format!(
                "`hidden_act` = {act:?}: only CLIP's quick_gelu is implemented"
            )));
        }
        let c = Self {
            hidden_size: j.count("hidden_size")?,
            intermediate_size: j.count("intermediate_size")?,
            num_hidden_layers: j.count("num_hidden_layers")?,
            num_attention_heads: j.count("num_attention_heads")?,
            vocab_size: j.count("vocab_size")?,
            max_position_embeddings: j.count("max_position_embeddings")?,
            layer_norm_eps: j.number_or("layer_norm_eps", f64::from(LAYER_NORM_EPS))? as f32,
        };
        c.validate().map_err(|why| j.err(why))?;
        Ok(c)
    }

    /// Whether the numbers make a model this forward runs.
    pub fn validate(&self) -> Result<(), String> {
        let max_head = dynvram_runtime::ops::attention::MAX_HEAD_DIM as usize;
        if self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return Err(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if self.head_dim() > max_head {
            return Err(format!(
                "head_dim {} exceeds the attention kernels' {max_head}",
                self.head_dim()
            ));
        }
        if self.max_position_embeddings < CLIP_MAX_LEN {
            return Err(format!(
                "max_position_embeddings {} is below the {CLIP_MAX_LEN} tokens a prompt takes",
                self.max_position_embeddings
            ));
        }
        if !(self.layer_norm_eps.is_finite() && self.layer_norm_eps > 0.0) {
            return Err(format!(
                "layer_norm_eps {} must be > 0",
                self.layer_norm_eps
            ));
        }
        if self.num_hidden_layers == 0 || self.intermediate_size == 0 || self.vocab_size == 0 {
            return Err("layers, intermediate_size and vocab_size must be at least 1".into());
        }
        Ok(())
    }
}
