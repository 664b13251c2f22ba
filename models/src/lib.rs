//! Real model architectures on the dynvram runtime's public API.
//!
//! - [`mlp_stack`]: a stack of residual MLP blocks `x = x + fc2(gelu_tanh(fc1(x)))`
//!   in any mix of ComfyUI weight formats — the built-in model of `dynvram run`
//!   and the layout of the conformance `stack_mixed` file.
//!
//! Owns: architectures (block structure, op order, CPU references). Knows
//! nothing of wgpu beyond what the runtime exposes.

mod block_index;
pub mod error;
pub mod flux;
pub mod llama;
pub mod mlp_stack;
pub mod vae;
