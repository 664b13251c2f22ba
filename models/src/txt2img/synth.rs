//! A ComfyUI `models/` folder of random weights for the whole pipeline:
//! the transformer, CLIP-L, T5 and the autoencoder in the layouts and
//! folders ComfyUI users have, for benchmarks of `txt2img` where the real
//! weights cannot be downloaded. Each file goes through its family's
//! writer (chunked, parallel, atomic).

use std::path::Path;

use super::Files;
use crate::clip::ClipConfig;
use crate::error::ModelError;
use crate::flux::FluxConfig;
use crate::synth::{SynthDtype, SynthOptions};
use crate::t5::T5Config;
use crate::vae::VaeConfig;

/// Names accepted by [`preset`].
pub const PRESETS: [&str; 2] = ["flux-dev-comfyui", "flux-schnell-comfyui"];

/// The shapes of a preset name ([`PRESETS`]).
pub fn preset(name: &str) -> Option<Shapes> {
    match name {
        "flux-dev-comfyui" => Some(Shapes::flux1(true)),
        "flux-schnell-comfyui" => Some(Shapes::flux1(false)),
        _ => None,
    }
}

/// The four models' shapes.
#[derive(Debug, Clone, PartialEq)]
pub struct Shapes {
    /// The transformer's.
    pub flux: FluxConfig,
    /// CLIP's.
    pub clip: ClipConfig,
    /// T5's.
    pub t5: T5Config,
    /// The autoencoder's.
    pub vae: VaeConfig,
}

impl Shapes {
    /// FLUX.1-dev's (`dev`) or FLUX.1-schnell's four real shapes: the
    /// transformer of [`crate::flux::synth::preset`], CLIP-L, T5-XXL and
    /// the 16-channel autoencoder.
    pub fn flux1(dev: bool) -> Self {
        let name = if dev { "flux-dev" } else { "flux-schnell" };
        Self {
            flux: crate::flux::synth::preset(name).expect("a Flux preset"),
            clip: ClipConfig::clip_l(),
            t5: T5Config::t5_xxl(),
            vae: VaeConfig::flux(),
        }
    }
}

/// Writes random weights of `shapes` into the ComfyUI folder `dir` under
/// the names and dtypes ComfyUI users have:
/// `diffusion_models/flux1-dev.safetensors` (`flux1-schnell` without a
/// guidance embedder; BFL keys, stored as `dtype`),
/// `text_encoders/clip_l.safetensors` and
/// `text_encoders/t5xxl_fp16.safetensors` (HF keys, f16),
/// `vae/ae.safetensors` (BFL keys, f32), drawn from `seed`.
/// `progress(done, total)` counts the transformer's bytes (nearly all of
/// them). Returns the files and the bytes of tensor data.
pub fn write_folder(
    dir: &Path,
    shapes: &Shapes,
    dtype: SynthDtype,
    seed: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(Files, u64), ModelError> {
    let _span = tracing::info_span!("txt2img_synth", dir = %dir.display()).entered();
    let variant = if shapes.flux.guidance_embed {
        "dev"
    } else {
        "schnell"
    };
    let files = Files {
        transformer: dir.join(format!("diffusion_models/flux1-{variant}.safetensors")),
        clip: dir.join("text_encoders/clip_l.safetensors"),
        t5: dir.join("text_encoders/t5xxl_fp16.safetensors"),
        vae: dir.join("vae/ae.safetensors"),
    };
    let opts = SynthOptions {
        dtype,
        seed,
        ..SynthOptions::default()
    };
    let mut bytes = crate::flux::synth::write_checkpoint(
        &files.transformer,
        &shapes.flux,
        "",
        opts,
        false,
        progress,
    )?;
    bytes += crate::clip::synth::write(&files.clip, &shapes.clip, SynthDtype::F16, seed)?;
    bytes += crate::t5::synth::write(&files.t5, &shapes.t5, SynthDtype::F16, seed)?;
    bytes += crate::vae::synth::write(&files.vae, &shapes.vae, SynthDtype::F32, seed)?;
    Ok((files, bytes))
}
