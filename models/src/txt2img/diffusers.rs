//! A diffusers-layout FLUX.1 folder (what `FluxPipeline.save_pretrained`
//! writes and the Hub holds): `model_index.json`, `transformer/`
//! (`FluxTransformer2DModel`), `text_encoder/` (CLIP-L), `text_encoder_2/`
//! (T5), `vae/` (`AutoencoderKL`), each with its `config.json` and its
//! weights in one file or shards with a `*.safetensors.index.json`,
//! `scheduler/`, and `tokenizer/`, `tokenizer_2/` (FLUX.1's own, which are
//! the built-in ones). The configs give every shape, so nothing is
//! inferred; the scheduler's config gives the schedule.

use std::path::{Path, PathBuf};

use crate::clip::ClipConfig;
use crate::error::ModelError;
use crate::flux::sample::Schedule;
use crate::hf_config::HfConfig;
use crate::t5::T5Config;
use crate::vae::VaeConfig;

use super::{Configs, Files};

/// The pipeline's index: what marks a diffusers folder.
pub const MODEL_INDEX: &str = "model_index.json";

/// A diffusers FLUX.1 folder, opened: the four models' weights (the
/// transformer and the VAE as their folders), their configs and the
/// scheduler's schedule.
#[derive(Debug, Clone)]
pub struct DiffusersFolder {
    /// The weights.
    pub files: Files,
    /// CLIP's, T5's and the VAE's `config.json` (the transformer's is read
    /// beside its weights).
    pub configs: Configs,
    /// From `scheduler/scheduler_config.json`; `None` without one.
    pub schedule: Option<Schedule>,
}

/// Whether `dir` is a diffusers pipeline folder (has `model_index.json`).
pub fn is_folder(dir: &Path) -> bool {
    dir.join(MODEL_INDEX).is_file()
}

/// A model's weights in `sub`: its shard index, else its one file.
fn weights(dir: &Path, sub: &str, stem: &str) -> Result<PathBuf, ModelError> {
    let d = dir.join(sub);
    let index = d.join(format!("{stem}.safetensors.index.json"));
    let one = d.join(format!("{stem}.safetensors"));
    [index, one]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| ModelError::Weights {
            path: d.clone(),
            why: format!(
                "no {stem}.safetensors nor {stem}.safetensors.index.json (a diffusers FLUX.1 \
                 folder keeps the {sub} model's weights there)"
            ),
        })
}

/// `sub/file` where it exists.
fn present(dir: &Path, sub: &str, file: &str) -> Option<PathBuf> {
    Some(dir.join(sub).join(file)).filter(|p| p.is_file())
}

impl DiffusersFolder {
    /// Opens `dir`: `model_index.json` must name a FLUX.1 pipeline (its
    /// `transformer` a `FluxTransformer2DModel`); the weights of the four
    /// models must be there; the configs present are read.
    pub fn open(dir: &Path) -> Result<Self, ModelError> {
        let index = HfConfig::read(&dir.join(MODEL_INDEX))?;
        let class = index.string("_class_name")?.unwrap_or_default().to_owned();
        let transformer_class = index.class_of("transformer")?;
        if transformer_class.as_deref() != Some("FluxTransformer2DModel") {
            return Err(index.err(format!(
                "a {} whose transformer is {}: dynvram's text-to-image runs FLUX.1 \
                 (FluxPipeline, FluxTransformer2DModel)",
                if class.is_empty() { "pipeline" } else { &class },
                transformer_class.as_deref().unwrap_or("absent")
            )));
        }
        let files = Files {
            transformer: dir.join("transformer"),
            clip: weights(dir, "text_encoder", "model")?,
            t5: weights(dir, "text_encoder_2", "model")?,
            vae: dir.join("vae"),
        };
        // The folders' weights are found by their checkpoints; named here
        // so a missing one is told before anything is read.
        weights(dir, "transformer", "diffusion_pytorch_model")?;
        weights(dir, "vae", "diffusion_pytorch_model")?;
        let configs = Configs {
            transformer: None,
            clip: present(dir, "text_encoder", "config.json")
                .map(|p| ClipConfig::from_hf_json(&p))
                .transpose()?,
            t5: present(dir, "text_encoder_2", "config.json")
                .map(|p| T5Config::from_hf_json(&p))
                .transpose()?,
            vae: present(dir, "vae", "config.json")
                .map(|p| VaeConfig::from_diffusers_json(&p))
                .transpose()?,
        };
        let schedule = present(dir, "scheduler", "scheduler_config.json")
            .map(|p| Schedule::from_scheduler_config(&p))
            .transpose()?;
        Ok(Self {
            files,
            configs,
            schedule,
        })
    }
}
