//! Quantized and float linear layers on the GPU: `out = x · Wᵀ + b` for every
//! weight format (docs/behaviour.md, Formats), recorded into the caller's command encoder.
//!
//! Integer formats (convrot_w4a4, int8_tensorwise) run up to three kernels:
//! the group rotation (radix-4 Hadamard, `linear_rotate.wgsl`) for rotated
//! layers, the per-row activation quantization (`linear_act_quant.wgsl`,
//! codes packed four per u32), then an integer GEMV (M ≤ 8) or tiled GEMM
//! with `dot4I8Packed` and the exact epilogue of conformance README §4.
//! Float formats (f32, f16, bf16, fp8) decode the weight in the shader.
//!
//! Activations (`x`, `out`) are f32, or f16 where the adapter has
//! `SHADER_F16` (same kernels, built from the `alias act` source with
//! `dynvram_shaders::with_f16_activations`). With f16 the kernels still
//! accumulate in f32 (float) or exact i32 (integer); the rotation writes f32
//! scratch, so codes and scales equal the CPU reference's on the f16 input,
//! and only the output is rounded to f16. Weights, scales and biases are
//! unchanged.
//!
//! Small M (≤ 8) is a weight stream and gets its own kernels: rotation and
//! quantization fused into one dispatch of one wide workgroup per row
//! (`linear_rotate_quant.wgsl`; unrotated layers use it with G = 1; G must
//! fit the adapter's workgroup memory: up to 1024 at 16 KiB, 4096 at 36 KiB),
//! and the multi-row GEMVs (`linear_*_gemv_rows.wgsl`, [`GemvShape`] rows per
//! workgroup, 16-byte weight loads) wherever weight rows start on 16 bytes;
//! so an M = 1 linear is two dispatches (integer) or one (float). Every
//! dispatch takes its params uniform from the pipeline cache.
//!
//! Placement rules for the caller (wgpu's): weight, scale and bias regions
//! need `STORAGE` usage (plus `COPY_DST` to upload them); every region's byte
//! offset must be a multiple of the adapter's
//! `min_storage_buffer_offset_alignment` (256 on the adapters we know).
//! Weights larger than one storage binding are split by rows (N) here, into
//! chunks whose offsets keep that alignment.

pub mod conformance;
mod record;
mod resident_f16;
mod scratch;
mod weights;

pub use crate::error::LinearError;
pub use record::{
    AddNorm, Cm2Gemm, Cm2Kernel, Cm2Weights, CoopGemmKernel, CoopShape, Fold, Fusion, GEMV_MAX_M,
    GROUPED_MIN_COLUMN_TILES, GemmKernel, GemvShape, INTEGER_CHUNK_ROWS, NORM_FOLD_MAX_M, NormFold,
    ROWS_GEMV_MAX_M, RecordOptions, cm2_gemm, cm2_gemms, cm2_grouped, cm2_int_gemm, cm2_named,
    cm2_small_grid, cm2_split_gemm, cm2_stack_gemm, cm2_weights_of, converted_layer_bytes,
    converted_piece_bytes, coop_gemm_unusable, coop_unusable, double_unusable, float_coop_unusable,
    fold_unusable, integer_scratch_bytes, record_add_norm_quant, record_linear,
    record_linear_folded, record_linear_with, record_linears_fused, rows_gemv_max_m,
};
pub use resident_f16::{record_bf16_to_f16_in_place, resident_bf16_as_f16};
pub use scratch::LinearScratch;
pub use weights::{LinearWeights, Region, WeightPart, row_bytes};
