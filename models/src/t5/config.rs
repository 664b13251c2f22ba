//! T5 v1.1 encoder hyper-parameters (HF `T5Config` names): from a
//! `config.json`, inferred from the tensor shapes, or T5-XXL's.

use std::path::Path;

use crate::hf_config::HfConfig;

use crate::error::ModelError as T5Error;

/// Relative-position buckets of every T5 v1.1 model.
pub const NUM_BUCKETS: usize = 32;
/// Distance past which relative positions share the last bucket.
pub const MAX_DISTANCE: usize = 128;
/// T5LayerNorm's epsilon.
pub const LAYER_NORM_EPS: f32 = 1e-6;

/// The hyper-parameters of a T5 v1.1 encoder (gated GELU).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct T5Config {
    /// Residual width.
    pub d_model: usize,
    /// Width of one head (the attention's inner width is `num_heads · d_kv`,
    /// which need not be `d_model`).
    pub d_kv: usize,
    /// Gated MLP width (`wi_0`, `wi_1` outputs).
    pub d_ff: usize,
    /// Encoder blocks.
    pub num_layers: usize,
    /// Attention heads.
    pub num_heads: usize,
    /// Rows of the shared embedding.
    pub vocab_size: usize,
    /// Relative-position buckets (32).
    pub relative_attention_num_buckets: usize,
    /// Relative-position distance of the last bucket (128).
    pub relative_attention_max_distance: usize,
    /// RMS norm epsilon (1e-6).
    pub layer_norm_epsilon: f32,
}

impl T5Config {
    /// T5 v1.1 XXL's encoder (google/t5-v1_1-xxl, ComfyUI's
    /// `t5xxl_fp16.safetensors`): 24 blocks of width 4096, 64 heads of 64,
    /// gated MLP 10240.
    pub fn t5_xxl() -> Self {
        Self {
            d_model: 4096,
            d_kv: 64,
            d_ff: 10240,
            num_layers: 24,
            num_heads: 64,
            vocab_size: 32128,
            relative_attention_num_buckets: NUM_BUCKETS,
            relative_attention_max_distance: MAX_DISTANCE,
            layer_norm_epsilon: LAYER_NORM_EPS,
        }
    }

    /// The attention's inner width, `num_heads · d_kv`.
    pub fn inner_dim(&self) -> usize {
        self.num_heads * self.d_kv
    }

    /// Reads an HF `T5Config` `config.json`; the feed-forward must be
    /// `gated-gelu` (T5 v1.1), the only one implemented.
    pub fn from_hf_json(path: &Path) -> Result<Self, T5Error> {
        let j = HfConfig::read(path)?;
        if let Some(ff) = j.string("feed_forward_proj")?
            && ff != "gated-gelu"
        {
            return Err(j.err(format!(
                "`feed_forward_proj` = {ff:?}: only T5 v1.1's gated-gelu is implemented"
            )));
        }
        let c = Self {
            d_model: j.count("d_model")?,
            d_kv: j.count("d_kv")?,
            d_ff: j.count("d_ff")?,
            num_layers: j.count("num_layers")?,
            num_heads: j.count("num_heads")?,
            vocab_size: j.count("vocab_size")?,
            relative_attention_num_buckets: j
                .number_or("relative_attention_num_buckets", NUM_BUCKETS as f64)?
                as usize,
            relative_attention_max_distance: j
                .number_or("relative_attention_max_distance", MAX_DISTANCE as f64)?
                as usize,
            layer_norm_epsilon: j.number_or("layer_norm_epsilon", f64::from(LAYER_NORM_EPS))?
                as f32,
        };
        c.validate().map_err(|why| j.err(why))?;
        Ok(c)
    }

    /// Whether the numbers make a model this forward runs.
    pub fn validate(&self) -> Result<(), String> {
        let max_head = dynvram_runtime::ops::attention::MAX_HEAD_DIM as usize;
        if self.d_kv == 0 || self.d_kv > max_head {
            return Err(format!("d_kv {} must be in 1..={max_head}", self.d_kv));
        }
        let b = self.relative_attention_num_buckets;
        // Half the buckets per direction, half of those exact.
        if b < 4 || !b.is_multiple_of(4) {
            return Err(format!(
                "relative_attention_num_buckets {b} must be a multiple of 4 (at least 4)"
            ));
        }
        if self.relative_attention_max_distance <= b / 4 {
            return Err(format!(
                "relative_attention_max_distance {} must exceed the {} exact buckets",
                self.relative_attention_max_distance,
                b / 4
            ));
        }
        if !(self.layer_norm_epsilon.is_finite() && self.layer_norm_epsilon > 0.0) {
            return Err(format!(
                "layer_norm_epsilon {} must be > 0",
                self.layer_norm_epsilon
            ));
        }
        if [
            self.d_model,
            self.d_ff,
            self.num_layers,
            self.num_heads,
            self.vocab_size,
        ]
        .contains(&0)
        {
            return Err(
                "d_model, d_ff, num_layers, num_heads and vocab_size must be at least 1".into(),
            );
        }
        Ok(())
    }

    /// The relative-position bucket of a key `r = key − query` positions
    /// away, as HF's `_relative_position_bucket` (bidirectional) computes
    /// it: half the buckets per sign; distances below a quarter of the
    /// buckets exact, larger ones log-spaced up to `max_distance`, in f32
    /// as torch computes them (so the floors fall where torch's do).
    pub fn bucket(&self, r: i64) -> u32 {
        let half = (self.relative_attention_num_buckets / 2) as u32;
        let exact = half / 2;
        let base = if r > 0 { half } else { 0 };
        let d = r.unsigned_abs();
        if d < u64::from(exact) {
            return base + d as u32;
        }
        let ratio = (d as f32 / exact as f32).ln()
            / (self.relative_attention_max_distance as f64 / f64::from(exact)).ln() as f32;
        let large = exact + (ratio * (half - exact) as f32) as u32;
        base + large.min(half - 1)
    }
}
