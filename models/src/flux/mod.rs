//! Flux (FLUX.1) diffusion transformers as Black Forest Labs wrote them and
//! ComfyUI loads them: a single `.safetensors` file in BFL key layout
//! (optionally under `model.diffusion_model.`), or a folder with
//! `model.safetensors` and a `config.json` in BFL `FluxParams` names; and
//! diffusers' `FluxTransformer2DModel` folders, read as the same tensors.
//!
//! Blocks, in pass order: `embed` (`img_in`, `txt_in` and the
//! `time_in`/`guidance_in`/`vector_in` MLP embedders), one block per double
//! block, one per single block, and `final_layer`, so the runtime streams
//! and prefetches them under a budget as it does a decoder's layers.
//! Arithmetic follows BFL's f32 forward: the 256-dim sinusoidal embedding of
//! 1000·t (cos first), adaLN modulation `(1 + scale)·LayerNorm(x) + shift`
//! (eps 1e-6, no affine), per-head QK RMSNorm before interleaved-pair
//! 3-axis RoPE, joint attention over txt then img tokens, GELU (tanh) MLPs,
//! gated residuals, and the final layer's (shift, scale) on image tokens.

mod checkpoint;
pub mod config;
pub mod diffusers;
pub mod flops;
mod forward;
mod inputs;
pub mod sample;
mod scratch;
pub mod synth;

pub use checkpoint::{
    COMFY_PREFIX, DetectedFlux, DoubleNames, EmbedNames, EmbedderNames, FinalNames, FluxCheckpoint,
    Names, SingleNames, StreamNames, detect_prefix, infer_config,
};
pub use config::FluxConfig;
pub use forward::{Flux, FluxForward, ForwardOptions};
pub use inputs::{FluxInputs, NAMES as INPUT_NAMES};
pub use scratch::{capture_bytes, scratch_bytes};

/// Batch size and sequence lengths of a pass (they size the activations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Shape {
    /// Batch elements.
    pub batch: usize,
    /// Image tokens per element (packed 2×2 latent patches).
    pub img_len: usize,
    /// Text tokens per element.
    pub txt_len: usize,
}

impl Shape {
    /// Tokens of the joint sequence (`txt_len + img_len`).
    pub fn joint_len(&self) -> usize {
        self.txt_len + self.img_len
    }
}

/// Errors of the Flux family: the models' one error type.
pub use crate::error::ModelError as FluxError;
