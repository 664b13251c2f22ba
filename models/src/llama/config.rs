//! `config.json` of Llama-family checkpoints (Llama, Mistral, Qwen2), in
//! both the transformers 4 spelling (top-level `rope_theta`, `rope_scaling`,
//! `torch_dtype`) and the transformers 5 one (`rope_parameters`, `dtype`).

use std::path::Path;

use serde_json::Value;

use super::LlamaError;

/// The architectures this module runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Family {
    /// `LlamaForCausalLM` (`model_type` "llama").
    Llama,
    /// `MistralForCausalLM` (Llama layout, optional sliding window).
    Mistral,
    /// `Qwen2ForCausalLM` (q/k/v bias always on, o_proj without).
    Qwen2,
}

/// How RoPE frequencies are scaled (`rope_type`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum RopeScaling {
    /// No scaling (`null` or `"default"`).
    Default,
    /// Position interpolation: every inverse frequency divided by `factor`.
    Linear {
        /// The divisor.
        factor: f32,
    },
    /// Llama 3.1: low frequencies divided by `factor`, high ones kept, a
    /// smooth blend between.
    Llama3 {
        /// Divisor of the low frequencies.
        factor: f32,
        /// Wavelengths above `original / low_freq_factor` are scaled.
        low_freq_factor: f32,
        /// Wavelengths below `original / high_freq_factor` are kept.
        high_freq_factor: f32,
        /// `original_max_position_embeddings`.
        original_max_position: f32,
    },
}

/// The hyper-parameters a forward pass needs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LlamaConfig {
    /// Which architecture.
    pub family: Family,
    /// Residual width.
    pub hidden_size: usize,
    /// MLP inner width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (GQA); defaults to the query heads.
    pub num_key_value_heads: usize,
    /// Per-head width; defaults to `hidden_size / num_attention_heads`.
    pub head_dim: usize,
    /// Vocabulary rows of the embedding and of `lm_head`.
    pub vocab_size: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f32,
    /// RoPE base.
    pub rope_theta: f32,
    /// RoPE frequency scaling.
    pub rope_scaling: RopeScaling,
    /// `lm_head` reuses `model.embed_tokens.weight`.
    pub tie_word_embeddings: bool,
    /// q/k/v projections carry a bias.
    pub qkv_bias: bool,
    /// o_proj carries a bias.
    pub o_bias: bool,
    /// gate/up/down carry a bias.
    pub mlp_bias: bool,
    /// Longest context the checkpoint was built for.
    pub max_position_embeddings: usize,
    /// Mistral/Qwen2 sliding-window attention, when in use (not implemented:
    /// sequences longer than the window are refused).
    pub sliding_window: Option<usize>,
    /// Checkpoint dtype as the config states it (`dtype` / `torch_dtype`), for reports.
    pub dtype: Option<String>,
}

impl LlamaConfig {
    /// Reads and checks `config.json`.
    pub fn from_file(path: &Path) -> Result<Self, LlamaError> {
        let text = std::fs::read_to_string(path).map_err(|source| LlamaError::Io {
            path: path.to_owned(),
            source,
        })?;
        let value: Value = serde_json::from_str(&text).map_err(|e| LlamaError::Config {
            path: path.to_owned(),
            why: format!("not JSON: {e}"),
        })?;
        Self::from_json(&value).map_err(|why| LlamaError::Config {
            path: path.to_owned(),
            why,
        })
    }

    /// Parses a config object; the error says which key is wrong.
    pub fn from_json(v: &Value) -> Result<Self, String> {
        let model_type = v.get("model_type").and_then(Value::as_str).unwrap_or("");
        let family = match model_type {
            "llama" => Family::Llama,
            "mistral" => Family::Mistral,
            "qwen2" => Family::Qwen2,
            other => {
                return Err(format!(
                    "model_type {other:?} is not supported (llama, mistral and qwen2 are)"
                ));
            }
        };
        match v.get("hidden_act").and_then(Value::as_str) {
            None | Some("silu") => {}
            Some(act) => {
                return Err(format!(
                    "hidden_act {act:?} is not supported (only \"silu\")"
                ));
            }
        }
        let hidden_size = usize_key(v, "hidden_size")?;
        let num_attention_heads = usize_key(v, "num_attention_heads")?;
        let num_key_value_heads =
            opt_usize(v, "num_key_value_heads")?.unwrap_or(num_attention_heads);
        if num_attention_heads == 0
            || num_key_value_heads == 0
            || num_attention_heads % num_key_value_heads != 0
        {
            return Err(format!(
                "num_attention_heads {num_attention_heads} must be a non-zero multiple of num_key_value_heads {num_key_value_heads}"
            ));
        }
        let head_dim = opt_usize(v, "head_dim")?.unwrap_or(hidden_size / num_attention_heads);
        if head_dim == 0 || head_dim % 2 != 0 {
            return Err(format!("head_dim {head_dim} must be even and non-zero"));
        }
        let (rope_theta, rope_scaling) = rope(v, family)?;
        let attention_bias = v
            .get("attention_bias")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let sliding_window = match family {
            Family::Llama => None,
            Family::Mistral => opt_usize(v, "sliding_window")?,
            Family::Qwen2 => {
                if v.get("use_sliding_window")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
                {
                    opt_usize(v, "sliding_window")?
                } else {
                    None
                }
            }
        };
        let config = Self {
            family,
            hidden_size,
            intermediate_size: usize_key(v, "intermediate_size")?,
            num_hidden_layers: usize_key(v, "num_hidden_layers")?,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            vocab_size: usize_key(v, "vocab_size")?,
            rms_norm_eps: opt_f64(v, "rms_norm_eps")?.unwrap_or(1e-6) as f32,
            rope_theta,
            rope_scaling,
            tie_word_embeddings: v
                .get("tie_word_embeddings")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            qkv_bias: family == Family::Qwen2 || attention_bias,
            o_bias: family != Family::Qwen2 && attention_bias,
            mlp_bias: v.get("mlp_bias").and_then(Value::as_bool).unwrap_or(false),
            max_position_embeddings: opt_usize(v, "max_position_embeddings")?.unwrap_or(4096),
            sliding_window,
            dtype: ["dtype", "torch_dtype"]
                .iter()
                .find_map(|k| v.get(*k).and_then(Value::as_str))
                .map(str::to_owned),
        };
        if config.num_hidden_layers == 0 || config.vocab_size == 0 || config.intermediate_size == 0
        {
            return Err("num_hidden_layers, vocab_size and intermediate_size must be > 0".into());
        }
        Ok(config)
    }

    /// Width of the q projection (`heads · head_dim`).
    pub fn q_width(&self) -> usize {
        self.num_attention_heads * self.head_dim
    }

    /// Width of the k and v projections (`kv_heads · head_dim`).
    pub fn kv_width(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }

    /// RoPE inverse frequencies as transformers computes them in f32, with
    /// the configured scaling applied.
    pub fn inv_freq(&self) -> Vec<f32> {
        let base = dynvram_runtime::ops::rope::inv_freq(self.rope_theta, self.head_dim);
        match self.rope_scaling {
            RopeScaling::Default => base,
            RopeScaling::Linear { factor } => base.into_iter().map(|f| f / factor).collect(),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position,
            } => {
                let low_wavelen = original_max_position / low_freq_factor;
                let high_wavelen = original_max_position / high_freq_factor;
                base.into_iter()
                    .map(|f| {
                        let wavelen = 2.0 * std::f32::consts::PI / f;
                        if wavelen > low_wavelen {
                            f / factor
                        } else if wavelen < high_wavelen {
                            f
                        } else {
                            let smooth = (original_max_position / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
        }
    }
}

fn opt_usize(v: &Value, key: &str) -> Result<Option<usize>, String> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| format!("`{key}` is {x}, expected a non-negative integer")),
    }
}

fn usize_key(v: &Value, key: &str) -> Result<usize, String> {
    opt_usize(v, key)?.ok_or_else(|| format!("missing `{key}`"))
}

fn opt_f64(v: &Value, key: &str) -> Result<Option<f64>, String> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_f64()
            .map(Some)
            .ok_or_else(|| format!("`{key}` is {x}, expected a number")),
    }
}

/// `rope_theta` and the scaling, from `rope_parameters` (transformers 5) or
/// the top-level `rope_theta` / `rope_scaling` (older checkpoints).
fn rope(v: &Value, family: Family) -> Result<(f32, RopeScaling), String> {
    let params = v.get("rope_parameters").filter(|p| !p.is_null());
    let scaling = params.or_else(|| v.get("rope_scaling").filter(|p| !p.is_null()));
    let theta = params
        .map(|p| opt_f64(p, "rope_theta"))
        .transpose()?
        .flatten()
        .or(opt_f64(v, "rope_theta")?)
        .unwrap_or(match family {
            Family::Qwen2 => 1_000_000.0,
            _ => 10_000.0,
        });
    // The inverse frequencies are theta^(-2i/d): 0, negative or non-finite
    // values make NaN tables (NaN logits), never a model.
    if !(theta.is_finite() && theta > 0.0 && theta <= f64::from(f32::MAX)) {
        return Err(format!(
            "`rope_theta` is {theta}, expected a positive finite number"
        ));
    }
    let Some(s) = scaling else {
        return Ok((theta as f32, RopeScaling::Default));
    };
    let kind = ["rope_type", "type"]
        .iter()
        .find_map(|k| s.get(*k).and_then(Value::as_str))
        .unwrap_or("default");
    let num = |key: &str| -> Result<f32, String> {
        opt_f64(s, key)?
            .map(|x| x as f32)
            .ok_or_else(|| format!("rope scaling {kind:?} needs `{key}`"))
    };
    let scaling = match kind {
        "default" => RopeScaling::Default,
        "linear" => RopeScaling::Linear {
            factor: num("factor")?,
        },
        "llama3" => RopeScaling::Llama3 {
            factor: num("factor")?,
            low_freq_factor: num("low_freq_factor")?,
            high_freq_factor: num("high_freq_factor")?,
            original_max_position: num("original_max_position_embeddings")?,
        },
        other => {
            return Err(format!(
                "rope scaling type {other:?} is not implemented (default, linear and llama3 are)"
            ));
        }
    };
    Ok((theta as f32, scaling))
}
