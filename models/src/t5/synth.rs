//! Randomly initialised T5 encoders in ComfyUI's key layout (`shared.weight`,
//! `encoder.*`, as `t5xxl_fp16.safetensors`), for benchmarks and tests:
//! T5-XXL's shapes ([`T5Config::t5_xxl`]) or any config. Linears
//! N(0, 1/fan_in), the embedding N(0, 1) (T5 does not scale it), the
//! position bias N(0, 1), norm weights U(0.5, 1.5).

use std::path::Path;

use super::config::T5Config;
use crate::error::ModelError as T5Error;
use crate::llama::synth::{Init, SynthDtype, SynthTensor};

/// Every tensor of a T5 encoder for `c`, in HF order.
pub fn tensors(c: &T5Config) -> Vec<SynthTensor> {
    let (d, inner, f) = (c.d_model, c.inner_dim(), c.d_ff);
    let t = |name: String, shape: Vec<usize>, init: Init| SynthTensor { name, shape, init };
    let lin = |name: String, fan_in: usize, fan_out: usize| {
        t(
            format!("{name}.weight"),
            vec![fan_out, fan_in],
            Init::Normal(1.0 / (fan_in as f32).sqrt()),
        )
    };
    let norm = |name: String| t(name, vec![d], Init::Uniform(0.5, 1.5));
    let mut out = vec![t(
        "shared.weight".into(),
        vec![c.vocab_size, d],
        Init::Normal(1.0),
    )];
    for i in 0..c.num_layers {
        let b = |rest: &str| format!("encoder.block.{i}.layer.{rest}");
        for l in ["q", "k", "v"] {
            out.push(lin(b(&format!("0.SelfAttention.{l}")), d, inner));
        }
        out.push(lin(b("0.SelfAttention.o"), inner, d));
        if i == 0 {
            out.push(t(
                b("0.SelfAttention.relative_attention_bias.weight"),
                vec![c.relative_attention_num_buckets, c.num_heads],
                Init::Normal(1.0),
            ));
        }
        out.push(norm(b("0.layer_norm.weight")));
        out.push(lin(b("1.DenseReluDense.wi_0"), d, f));
        out.push(lin(b("1.DenseReluDense.wi_1"), d, f));
        out.push(lin(b("1.DenseReluDense.wo"), f, d));
        out.push(norm(b("1.layer_norm.weight")));
    }
    out.push(norm("encoder.final_layer_norm.weight".into()));
    out
}

/// Writes random weights for `config` in `dtype` from `seed` to the file
/// `path`, atomically; returns the bytes of tensor data.
pub fn write(path: &Path, config: &T5Config, dtype: SynthDtype, seed: u64) -> Result<u64, T5Error> {
    let _span = tracing::info_span!("t5_synth", path = %path.display()).entered();
    config.validate().map_err(|why| T5Error::Config {
        path: path.to_owned(),
        why,
    })?;
    crate::synth_io::write_tensors(path, &tensors(config), dtype, seed)
}
