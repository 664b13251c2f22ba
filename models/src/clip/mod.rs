//! CLIP text encoders (CLIP-L for Flux; any `CLIPTextModel`) as
//! `transformers` runs them and ComfyUI loads them: a `.safetensors` file
//! with HF `text_model.*` keys (or without `text_model.`, as transformers 5
//! writes them).
//!
//! Blocks, in pass order: `embeddings` (the token rows gathered on the host
//! from the file, `crate::host_embed`, plus the position embedding
//! gathered on the GPU), two blocks per encoder
//! layer (its attention and its MLP, so a budget double-buffers half a
//! layer), `final_layer_norm`; a budget streams and prefetches them as it
//! does a decoder's layers. Conventions (the tiny-flux-pipeline fixture's
//! README): pre-LN layers with LayerNorm (eps 1e-5, affine), q/k/v/out with
//! biases, scores `q·k / √head_dim` under a **causal mask** and no padding
//! mask, quick-GELU `x·sigmoid(1.702x)` MLPs, `final_layer_norm`; the
//! pooled output is the final hidden state at `argmax(ids)` (the EOS).
//! Prompts come from [`crate::tokenize::ClipTokenizer`] (77 ids each).

mod checkpoint;
pub mod config;
pub mod flops;
mod forward;
mod scratch;
pub mod synth;

pub use checkpoint::{ClipCheckpoint, Names, TOKEN_EMBEDDING};
pub use config::ClipConfig;
pub use forward::{ClipOutput, ClipText};
pub use scratch::scratch_bytes;

/// Errors of the CLIP encoder: the models' one error type.
pub use crate::error::ModelError as ClipError;
