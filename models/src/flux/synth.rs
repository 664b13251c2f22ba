//! Randomly initialised Flux checkpoints in BFL key layout (bf16 by
//! default), for benchmarks and tests: the real FLUX.1 shapes
//! (`flux-dev`, `flux-schnell`) or any config. Drawn as the tiny-flux
//! fixture's `generate.py` draws them: linears N(0, 1/fan_in), modulation
//! linears N(0, 0.49/fan_in), biases N(0, 0.01), QK-norm scales U(1, 2).
//! Written through [`crate::synth::write_file`] (chunked, parallel, atomic).

use std::path::Path;

use super::FluxError;
use super::config::{FLUX1_AXES_DIM, FLUX1_THETA, FluxConfig, TIME_DIM};
use crate::synth::{Init, SynthOptions, SynthTensor, write_file};

/// Names accepted by [`preset`].
pub const PRESETS: [&str; 2] = ["flux-dev", "flux-schnell"];

/// FLUX.1-dev (`guidance_embed`) or FLUX.1-schnell (none): 19 double and
/// 38 single blocks of width 3072, 24 heads, T5 and CLIP input widths.
pub fn preset(name: &str) -> Option<FluxConfig> {
    let guidance_embed = match name {
        "flux-dev" => true,
        "flux-schnell" => false,
        _ => return None,
    };
    Some(FluxConfig {
        in_channels: 64,
        out_channels: 64,
        vec_in_dim: 768,
        context_in_dim: 4096,
        hidden_size: 3072,
        mlp_ratio: 4.0,
        num_heads: 24,
        depth: 19,
        depth_single_blocks: 38,
        axes_dim: FLUX1_AXES_DIM.to_vec(),
        theta: FLUX1_THETA,
        qkv_bias: true,
        guidance_embed,
    })
}

/// Every tensor of a checkpoint for `c` under `prefix`, in the fixture's
/// key order.
pub fn tensors(c: &FluxConfig, prefix: &str) -> Vec<SynthTensor> {
    let (h, hd, m) = (c.hidden_size, c.head_dim(), c.mlp_hidden());
    let mut out = Vec::new();
    let mut lin = |name: String, fan_in: usize, fan_out: usize, gain: f32, bias: bool| {
        out.push(SynthTensor {
            name: format!("{prefix}{name}.weight"),
            shape: vec![fan_out, fan_in],
            init: Init::Normal(gain / (fan_in as f32).sqrt()),
        });
        if bias {
            out.push(SynthTensor {
                name: format!("{prefix}{name}.bias"),
                shape: vec![fan_out],
                init: Init::Normal(0.1),
            });
        }
    };
    lin("img_in".into(), c.in_channels, h, 1.0, true);
    lin("time_in.in_layer".into(), TIME_DIM, h, 1.0, true);
    lin("time_in.out_layer".into(), h, h, 1.0, true);
    lin("vector_in.in_layer".into(), c.vec_in_dim, h, 1.0, true);
    lin("vector_in.out_layer".into(), h, h, 1.0, true);
    if c.guidance_embed {
        lin("guidance_in.in_layer".into(), TIME_DIM, h, 1.0, true);
        lin("guidance_in.out_layer".into(), h, h, 1.0, true);
    }
    lin("txt_in".into(), c.context_in_dim, h, 1.0, true);
    let mut norms = Vec::new();
    for i in 0..c.depth {
        for s in ["img", "txt"] {
            let b = format!("double_blocks.{i}.{s}");
            lin(format!("{b}_mod.lin"), h, 6 * h, 0.7, true);
            lin(format!("{b}_attn.qkv"), h, 3 * h, 1.0, c.qkv_bias);
            norms.push(format!("{b}_attn.norm.query_norm.scale"));
            norms.push(format!("{b}_attn.norm.key_norm.scale"));
            lin(format!("{b}_attn.proj"), h, h, 1.0, true);
            lin(format!("{b}_mlp.0"), h, m, 1.0, true);
            lin(format!("{b}_mlp.2"), m, h, 1.0, true);
        }
    }
    for i in 0..c.depth_single_blocks {
        let b = format!("single_blocks.{i}");
        lin(format!("{b}.linear1"), h, 3 * h + m, 1.0, true);
        lin(format!("{b}.linear2"), h + m, h, 1.0, true);
        norms.push(format!("{b}.norm.query_norm.scale"));
        norms.push(format!("{b}.norm.key_norm.scale"));
        lin(format!("{b}.modulation.lin"), h, 3 * h, 0.7, true);
    }
    lin("final_layer.linear".into(), h, c.out_channels, 1.0, true);
    lin("final_layer.adaLN_modulation.1".into(), h, 2 * h, 0.7, true);
    out.extend(norms.into_iter().map(|n| SynthTensor {
        name: format!("{prefix}{n}"),
        shape: vec![hd],
        init: Init::Uniform(1.0, 2.0),
    }));
    out
}

/// Writes random weights for `config` to the file `path` (keys under
/// `prefix`, e.g. [`super::COMFY_PREFIX`]); with `with_config` also a
/// `config.json` in BFL names beside it. Returns the bytes of tensor data.
pub fn write_checkpoint(
    path: &Path,
    config: &FluxConfig,
    prefix: &str,
    opts: SynthOptions,
    with_config: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<u64, FluxError> {
    let _span = tracing::info_span!("flux_synth", path = %path.display()).entered();
    config.validate().map_err(|why| FluxError::Config {
        path: path.to_owned(),
        why,
    })?;
    let io = |p: &Path| {
        let p = p.to_owned();
        move |source| FluxError::Io { path: p, source }
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let bytes = write_file(path, &tensors(config, prefix), opts, progress)?;
    if with_config {
        let cfg = path.with_file_name("config.json");
        let text = serde_json::to_string_pretty(&config.to_json()).unwrap_or_default() + "\n";
        dynvram_runtime::loader::atomic::write_file(&cfg, text.as_bytes())
            .map_err(|e| FluxError::Runtime(e.into()))?;
    }
    Ok(bytes)
}
