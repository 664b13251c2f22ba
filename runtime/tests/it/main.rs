//! Integration tests of the GPU ops and linear kernels against CPU references and goldens.
//!
//! One test binary per crate (one link in CI): each module below was its own
//! binary before; the shared set-up lives in the `*common` modules.

mod f16_linear;
mod f16_ops;
mod gpu_open;
mod linear_common;
mod linear_conformance;
mod linear_folds;
mod linear_random;
mod ops_attention;
mod ops_common;
mod ops_dit;
mod ops_elementwise;
mod ops_embed;
mod ops_norm;
mod ops_rope;
mod ops_tiny_llama;
