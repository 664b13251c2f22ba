//! Llama-family decoders (Llama, Mistral, Qwen2) from Hugging Face
//! checkpoints: `config.json` plus single or sharded safetensors, float or
//! ComfyUI-quantized linears.
//!
//! Blocks, in pass order: `embed` (the token gather), one block per decoder
//! layer (so the runtime prefetches layer i+1 while layer i computes), and
//! `head` (final RMSNorm + `lm_head`). The KV cache is one pair of GPU
//! activations `[max_seq, kv_heads·head_dim]` per layer. Arithmetic follows
//! transformers' f32 eager path: RMSNorm in f32, `rotate_half` RoPE, GQA
//! with `head_dim^-0.5` scaling, softmax in f32.

pub mod chat;
mod checkpoint;
mod config;
pub mod flops;
mod forward;
mod generate;
pub mod sample;
pub mod synth;
pub mod tokenizer;

pub use chat::{ChatTemplate, Message, eos_ids};
pub use checkpoint::{Checkpoint, Limits, names};
pub use config::{Family, LlamaConfig, MAX_LAYERS, MAX_POSITIONS, MAX_WIDTH, RopeScaling};
pub use forward::{Forward, ForwardOptions, Llama, LogitRows};
pub use generate::{DecodeLoop, Generation, PhaseStats, argmax};
pub use sample::{Sampler, Sampling};
pub use tokenizer::TextTokenizer;

/// Errors of the Llama family: the models' one error type.
pub use crate::error::ModelError as LlamaError;
