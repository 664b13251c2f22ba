//! Randomly initialised CLIP text encoders in ComfyUI's key layout
//! (`text_model.*`, as `clip_l.safetensors`), for benchmarks and tests:
//! CLIP-L's shapes ([`ClipConfig::clip_l`]) or any config. Linears
//! N(0, 1/fan_in) and biases N(0, 0.1); embeddings N(0, 0.02) and
//! N(0, 0.01) as `CLIPTextModel` initialises them; LayerNorm weights
//! U(0.5, 1.5) and biases N(0, 0.1), so a port that ignores them fails.

use std::path::Path;

use super::config::ClipConfig;
use crate::error::ModelError as ClipError;
use crate::llama::synth::{Init, SynthDtype, SynthTensor};

/// Every tensor of a CLIP text model for `c`, in HF order.
pub fn tensors(c: &ClipConfig) -> Vec<SynthTensor> {
    let (h, m) = (c.hidden_size, c.intermediate_size);
    let t = |name: String, shape: Vec<usize>, init: Init| SynthTensor {
        name: format!("text_model.{name}"),
        shape,
        init,
    };
    let mut out = vec![
        t(
            "embeddings.token_embedding.weight".into(),
            vec![c.vocab_size, h],
            Init::Normal(0.02),
        ),
        t(
            "embeddings.position_embedding.weight".into(),
            vec![c.max_position_embeddings, h],
            Init::Normal(0.01),
        ),
    ];
    let norm = |out: &mut Vec<SynthTensor>, name: String| {
        out.push(t(
            format!("{name}.weight"),
            vec![h],
            Init::Uniform(0.5, 1.5),
        ));
        out.push(t(format!("{name}.bias"), vec![h], Init::Normal(0.1)));
    };
    for i in 0..c.num_hidden_layers {
        let l = |rest: &str| format!("encoder.layers.{i}.{rest}");
        for (name, fan_in, fan_out) in [
            ("self_attn.k_proj", h, h),
            ("self_attn.v_proj", h, h),
            ("self_attn.q_proj", h, h),
            ("self_attn.out_proj", h, h),
        ]
        .into_iter()
        .chain([("mlp.fc1", h, m), ("mlp.fc2", m, h)])
        {
            out.push(t(
                l(&format!("{name}.weight")),
                vec![fan_out, fan_in],
                Init::Normal(1.0 / (fan_in as f32).sqrt()),
            ));
            out.push(t(
                l(&format!("{name}.bias")),
                vec![fan_out],
                Init::Normal(0.1),
            ));
        }
        norm(&mut out, l("layer_norm1"));
        norm(&mut out, l("layer_norm2"));
    }
    norm(&mut out, "final_layer_norm".into());
    out
}

/// Writes random weights for `config` in `dtype` from `seed` to the file
/// `path`, atomically; returns the bytes of tensor data.
pub fn write(
    path: &Path,
    config: &ClipConfig,
    dtype: SynthDtype,
    seed: u64,
) -> Result<u64, ClipError> {
    let _span = tracing::info_span!("clip_synth", path = %path.display()).entered();
    config.validate().map_err(|why| ClipError::Config {
        path: path.to_owned(),
        why,
    })?;
    crate::synth_io::write_tensors(path, &tensors(config), dtype, seed)
}
