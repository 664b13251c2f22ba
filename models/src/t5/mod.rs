//! T5 v1.1 encoders (T5-XXL for Flux and SD3; any `T5EncoderModel` with
//! gated GELU) as `transformers` runs them and ComfyUI loads them: a
//! `.safetensors` file with HF keys (`shared.weight`, `encoder.*`), weights
//! f16, bf16 or f32, ComfyUI's scaled fp8 (`scaled_fp8` marker tensor, a
//! `scale_weight` per linear) or `comfy_quant` formats — every linear runs
//! through the runtime's kernel plan.
//!
//! Blocks, in pass order: per encoder block its attention and its gated
//! MLP, then `final_layer_norm`; the embedding rows are gathered on the
//! host from the file (`crate::host_embed`: 263 MB of T5-XXL that never
//! needs VRAM), and so is the relative position table, whose bias
//! `[L, L, heads]` is written once per runner (f32: 64 MiB for T5-XXL at
//! 512 tokens). Conventions (the tiny-flux-pipeline fixture's README): no
//! embedding scaling; RMS-only T5LayerNorm (eps 1e-6, f32); attention
//! without 1/√d_kv, plus the relative position bias of block 0's
//! `relative_attention_bias` `[32 buckets, heads]` reused by every block
//! ([`T5Config::bucket`]); no attention mask (padding is attended to, as
//! FluxPipeline runs it); no biases; `gelu_tanh(wi_0 h) · wi_1 h`; inner
//! width `heads · d_kv` may differ from `d_model`. Prompts come from
//! [`crate::tokenize::T5Tokenizer`].

mod checkpoint;
pub mod config;
pub mod flops;
mod forward;
mod scratch;
pub mod synth;

pub use checkpoint::{Names, T5Checkpoint};
pub use config::T5Config;
pub use forward::{T5Encoder, T5Output};
pub use scratch::scratch_bytes;

/// Errors of the T5 encoder: the models' one error type.
pub use crate::error::ModelError as T5Error;
