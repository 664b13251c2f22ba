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

/// In words, for messages: `no scaling`, `linear scaling by 4`, `llama3
/// scaling (factor 8, low 1, high 4, original 8192)`.
impl std::fmt::Display for RopeScaling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RopeScaling::Default => f.write_str("no scaling"),
            RopeScaling::Linear { factor } => write!(f, "linear scaling by {factor}"),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position,
            } => write!(
                f,
                "llama3 scaling (factor {factor}, low {low_freq_factor}, high {high_freq_factor}, original {original_max_position})"
            ),
        }
    }
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
        let explicit_head_dim = opt_usize(v, "head_dim")?;
        let head_dim =
            explicit_head_dim.unwrap_or(hidden_size.checked_div(num_attention_heads).unwrap_or(0));
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
        config.check_ranges(explicit_head_dim.is_some())?;
        Ok(config)
    }

    /// Every range and divisibility rule the forward pass relies on, in one
    /// place; the message names the field and its value. `head_dim_given`:
    /// `head_dim` was in the file (else it is `hidden_size / heads`, which
    /// must divide exactly).
    fn check_ranges(&self, head_dim_given: bool) -> Result<(), String> {
        let sizes = [
            ("hidden_size", self.hidden_size, MAX_WIDTH),
            ("intermediate_size", self.intermediate_size, MAX_WIDTH),
            ("num_hidden_layers", self.num_hidden_layers, MAX_LAYERS),
            ("num_attention_heads", self.num_attention_heads, MAX_WIDTH),
            ("num_key_value_heads", self.num_key_value_heads, MAX_WIDTH),
            ("vocab_size", self.vocab_size, MAX_WIDTH),
            (
                "max_position_embeddings",
                self.max_position_embeddings,
                MAX_POSITIONS,
            ),
        ];
        for (key, value, max) in sizes {
            if value == 0 || value > max {
                return Err(format!("`{key}` is {value}, expected 1 to {max}"));
            }
        }
        let (heads, kv) = (self.num_attention_heads, self.num_key_value_heads);
        if !heads.is_multiple_of(kv) {
            return Err(format!(
                "`num_attention_heads` {heads} is not a multiple of `num_key_value_heads` {kv}"
            ));
        }
        if !head_dim_given && !self.hidden_size.is_multiple_of(heads) {
            return Err(format!(
                "`hidden_size` {} is not a multiple of `num_attention_heads` {heads} (and no `head_dim` is given)",
                self.hidden_size
            ));
        }
        let head_dim = self.head_dim;
        if head_dim == 0 || !head_dim.is_multiple_of(2) || head_dim > MAX_WIDTH {
            return Err(format!(
                "`head_dim` is {head_dim}, expected an even number from 2 to {MAX_WIDTH}"
            ));
        }
        if let Some(w) = self.sliding_window
            && w == 0
        {
            return Err("`sliding_window` is 0, expected at least 1".into());
        }
        let eps = self.rms_norm_eps;
        if !(eps.is_finite() && eps > 0.0) {
            return Err(format!(
                "`rms_norm_eps` is {eps}, expected a positive finite number"
            ));
        }
        check_rope_scaling(self.rope_scaling)?;
        // The last word: theta and the scaling must give a usable table
        // (a subnormal theta or factor overflows to inf, NaN logits).
        if let Some((i, f)) = self
            .inv_freq()
            .into_iter()
            .enumerate()
            .find(|(_, f)| !(f.is_finite() && *f > 0.0))
        {
            return Err(format!(
                "`rope_theta` {} with {} gives RoPE frequency {i} = {f}, expected positive finite",
                self.rope_theta, self.rope_scaling
            ));
        }
        Ok(())
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

/// Largest width, head count or vocabulary accepted (real models stay far
/// below; the bound keeps products such as heads × head_dim from overflowing).
pub const MAX_WIDTH: usize = 1 << 24;
/// Most decoder layers accepted.
pub const MAX_LAYERS: usize = 1 << 16;
/// Largest `max_position_embeddings` accepted.
pub const MAX_POSITIONS: usize = 1 << 30;

/// RoPE scaling factors: positive and finite, and a Llama 3 blend whose two
/// wavelength bounds differ (it divides by their difference).
fn check_rope_scaling(scaling: RopeScaling) -> Result<(), String> {
    let positive = |key: &str, x: f32| {
        if x.is_finite() && x > 0.0 {
            Ok(())
        } else {
            Err(format!(
                "rope scaling `{key}` is {x}, expected a positive finite number"
            ))
        }
    };
    match scaling {
        RopeScaling::Default => Ok(()),
        RopeScaling::Linear { factor } => positive("factor", factor),
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position,
        } => {
            positive("factor", factor)?;
            positive("low_freq_factor", low_freq_factor)?;
            positive("high_freq_factor", high_freq_factor)?;
            positive("original_max_position_embeddings", original_max_position)?;
            if high_freq_factor <= low_freq_factor {
                return Err(format!(
                    "rope scaling `high_freq_factor` {high_freq_factor} must exceed `low_freq_factor` {low_freq_factor}"
                ));
            }
            Ok(())
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
    // Present means an object: a string or list was silently ignored.
    let object = |key: &str| match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) if x.is_object() => Ok(Some(x)),
        Some(x) => Err(format!("`{key}` is {x}, expected an object")),
    };
    let params = object("rope_parameters")?;
    let old_scaling = object("rope_scaling")?;
    // The two spellings side by side must say the same thing.
    if let (Some(p), Some(o)) = (params, old_scaling) {
        for key in [
            "rope_type",
            "type",
            "factor",
            "low_freq_factor",
            "high_freq_factor",
        ] {
            if let (Some(a), Some(b)) = (p.get(key), o.get(key))
                && a != b
            {
                return Err(format!(
                    "`rope_parameters.{key}` is {a} but `rope_scaling.{key}` is {b}: the two spellings disagree"
                ));
            }
        }
    }
    let scaling = params.or(old_scaling);
    let nested = params
        .map(|p| opt_f64(p, "rope_theta"))
        .transpose()?
        .flatten();
    let top = opt_f64(v, "rope_theta")?;
    if let (Some(a), Some(b)) = (nested, top)
        && a != b
    {
        return Err(format!(
            "`rope_parameters.rope_theta` is {a} but the top-level `rope_theta` is {b}: the two spellings disagree"
        ));
    }
    let theta = nested.or(top).unwrap_or(match family {
        Family::Qwen2 => 1_000_000.0,
        _ => 10_000.0,
    });
    // The inverse frequencies are theta^(-2i/d): 0, negative or non-finite
    // values make NaN tables (NaN logits), never a model; below 1 the ladder
    // is upside down and its top overflows f32 for a wide head.
    if !(theta.is_finite() && (1.0..=f64::from(f32::MAX)).contains(&theta)) {
        return Err(format!(
            "`rope_theta` is {theta}, expected a positive finite number of at least 1"
        ));
    }
    let Some(s) = scaling else {
        return Ok((theta as f32, RopeScaling::Default));
    };
    let mut kind = "default";
    for key in ["type", "rope_type"] {
        match s.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(t)) => kind = t,
            Some(x) => return Err(format!("rope scaling `{key}` is {x}, expected a string")),
        }
    }
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

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::LlamaConfig;

    fn base() -> Value {
        json!({
            "model_type": "llama",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 100,
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0
        })
    }

    /// Each value out of range is refused with a message naming the field
    /// and the value (several were accepted and gave NaN logits or a panic).
    #[test]
    fn out_of_range_values_name_the_field_and_value() {
        LlamaConfig::from_json(&base()).expect("the base config is valid");
        let cases: &[(&str, Value, &str)] = &[
            ("rms_norm_eps", json!(0.0), "`rms_norm_eps` is 0"),
            ("rms_norm_eps", json!(-1e-5), "`rms_norm_eps` is -0.00001"),
            ("rms_norm_eps", json!(1e300), "`rms_norm_eps` is inf"),
            ("hidden_size", json!(0), "`hidden_size` is 0"),
            (
                "hidden_size",
                json!(66),
                "`hidden_size` 66 is not a multiple of `num_attention_heads` 4",
            ),
            (
                "num_attention_heads",
                json!(0),
                "`num_attention_heads` is 0",
            ),
            (
                "num_key_value_heads",
                json!(0),
                "`num_key_value_heads` is 0",
            ),
            (
                "num_key_value_heads",
                json!(3),
                "not a multiple of `num_key_value_heads` 3",
            ),
            ("intermediate_size", json!(0), "`intermediate_size` is 0"),
            ("num_hidden_layers", json!(0), "`num_hidden_layers` is 0"),
            ("vocab_size", json!(0), "`vocab_size` is 0"),
            (
                "vocab_size",
                json!(u64::MAX),
                "`vocab_size` is 18446744073709551615",
            ),
            ("head_dim", json!(7), "`head_dim` is 7"),
            (
                "max_position_embeddings",
                json!(0),
                "`max_position_embeddings` is 0",
            ),
            (
                "rope_scaling",
                json!("linear"),
                "`rope_scaling` is \"linear\", expected an object",
            ),
            (
                "rope_scaling",
                json!([1, 2]),
                "`rope_scaling` is [1,2], expected an object",
            ),
            (
                "rope_parameters",
                json!("x"),
                "`rope_parameters` is \"x\", expected an object",
            ),
            (
                "rope_scaling",
                json!({"rope_type": 3}),
                "`rope_type` is 3, expected a string",
            ),
            (
                "rope_parameters",
                json!({"rope_type": "default", "rope_theta": 500000.0}),
                "the two spellings disagree",
            ),
            ("rope_theta", json!(0.0), "`rope_theta` is 0"),
            ("rope_theta", json!(0.5), "`rope_theta` is 0.5"),
            (
                "rope_scaling",
                json!({"rope_type": "linear", "factor": 1e-40}),
                "with linear scaling by 0.000",
            ),
            (
                "rope_scaling",
                json!({"rope_type": "linear", "factor": 0.0}),
                "`factor` is 0",
            ),
            (
                "rope_scaling",
                json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
                "`high_freq_factor` 4 must exceed `low_freq_factor` 4",
            ),
        ];
        for (key, value, want) in cases {
            let mut v = base();
            v[*key] = value.clone();
            let e = LlamaConfig::from_json(&v).expect_err(key);
            assert!(e.contains(want), "{key} = {value}: {e}");
        }
    }

    /// `head_dim` given: `hidden_size` need not divide by the heads.
    #[test]
    fn an_explicit_head_dim_lifts_the_divisibility_rule() {
        let mut v = base();
        v["hidden_size"] = json!(66);
        v["head_dim"] = json!(16);
        let c = LlamaConfig::from_json(&v).expect("head_dim given");
        assert_eq!((c.head_dim, c.q_width()), (16, 64));
    }
}
