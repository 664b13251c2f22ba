//! Integration tests of the Llama, Qwen2, Flux and MLP-stack models against their references.
//!
//! One test binary per crate (one link in CI): each module below was its own
//! binary before; the set-up shared with other crates' tests lives in
//! `dynvram-test-support`, the set-up of this crate's alone in the `*common`
//! modules.

mod clip;
mod diffusers;
mod flux;
mod flux_parts;
mod flux_sample;
mod llama_common;
mod llama_f16;
mod llama_pipelined;
mod llama_quant;
mod llama_qwen2;
mod llama_tiny;
mod mlp_stack_files;
mod t5;
mod text_common;
mod tokenize;
mod txt2img;
mod vae;
