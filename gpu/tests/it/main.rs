//! Integration tests of the GPU ops and linear kernels against CPU references and goldens,
//! and of the GPU side of uploads (host-memory import, pins, the staging ring).
//!
//! One test binary per crate (one link in CI): each module below was its own
//! binary before; the set-up shared with other crates' tests lives in
//! `dynvram-test-support`, the set-up of this crate's alone in the `*common`
//! modules.

mod backend_choices;
mod f16_linear;
mod f16_ops;
mod gpu_open;
mod host_memory;
mod launch_allocations;
mod linear_common;
mod linear_conformance;
mod linear_folds;
mod linear_random;
mod linear_spread;
mod ops_argmax;
mod ops_attention;
mod ops_attention_bias;
mod ops_common;
mod ops_dit;
mod ops_elementwise;
mod ops_embed;
mod ops_norm;
mod ops_rope;
mod ops_tiny_llama;
mod ops_vae;
mod pipeline_cache;
mod spirv_gemm;
mod staging_ring;
mod upload_bench;
mod weight_widening;

// Counts allocations for `launch_allocations` (the system allocator
// otherwise).
#[global_allocator]
static ALLOCATOR: dynvram_test_support::allocations::Counting =
    dynvram_test_support::allocations::Counting;
