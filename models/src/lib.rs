//! Real model architectures on the dynvram runtime's public API.
//!
//! - [`mlp_stack`]: a stack of residual MLP blocks `x = x + fc2(gelu_tanh(fc1(x)))`
//!   in any mix of ComfyUI weight formats — the built-in model of `dynvram run`
//!   and the layout of the conformance `stack_mixed` file.
//! - [`llama`], [`flux`]: Llama-family decoders and FLUX.1 transformers.
//! - [`clip`], [`t5`]: the text encoders of text-to-image pipelines, with
//!   their tokenizers built in ([`tokenize`]).
//!
//! Owns: architectures (block structure, op order, CPU references). Knows
//! nothing of wgpu beyond what the runtime exposes.

mod block_index;
mod check;
pub mod clip;
pub mod error;
pub mod flux;
mod hf_config;
mod host_embed;
mod linear_needs;
pub mod llama;
pub mod mlp_stack;
mod record;
pub mod synth;
mod synth_io;
pub mod t5;
pub mod tokenize;
pub mod txt2img;
pub mod vae;

pub use linear_needs::LinearNeeds;
