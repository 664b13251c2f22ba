//! The Flux VAE (Black Forest Labs' `AutoEncoder`, the 16-channel
//! `ae.safetensors` ComfyUI keeps in `models/vae/`): the decoder on the
//! runtime, one runtime block per stage (`conv_in` + mid block, each up
//! level, `norm_out` + `conv_out`) so it streams under a budget with
//! prefetch like any model, and tiled decoding when the budget cannot hold
//! a whole image's activations. The encoder (image-to-image) runs the same
//! way as a second runtime model of the same file
//! ([`VaeCheckpoint::encoder_spec`], [`FluxVae::encode`]; not tiled).
//! diffusers' `AutoencoderKL` folders are read as the same tensors
//! ([`diffusers`]).
//!
//! Kernels: `ops::conv` (3×3 and 1×1 convolutions, the nearest ×2
//! upsampling folded into the following convolution's input indexing, the
//! ResNet skip added in the convolution's output), `ops::group_norm`
//! (32 groups, eps 1e-6, SiLU fused), `ops::spatial_attention` (the mid
//! block's single head over h·w positions, scale 1/√C). The decoder takes
//! `z = latents / SCALING_FACTOR + SHIFT_FACTOR`, as FluxPipeline gives it.

mod activations;
mod checkpoint;
pub mod config;
mod decode;
pub mod diffusers;
pub mod flops;
pub mod synth;
mod tiles;

/// Errors of the VAE: the models' one error type.
pub use crate::error::ModelError as VaeError;
pub use activations::{activation_bytes, encoder_activation_bytes};
pub use checkpoint::VaeCheckpoint;
pub use config::VaeConfig;
pub use decode::{FluxVae, VaeDecoded, VaeEncoded};
pub use tiles::Tiling;
pub(crate) use tiles::{AUTO_SIZES, auto_tiles};

/// Flux's latent scaling factor (`vae.config.scaling_factor`).
pub const SCALING_FACTOR: f32 = 0.3611;
/// Flux's latent shift (`vae.config.shift_factor`).
pub const SHIFT_FACTOR: f32 = 0.1159;
