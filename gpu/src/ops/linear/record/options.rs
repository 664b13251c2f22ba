//! The recorder's knobs for tests and tools.

use super::coop::{CoopGemmKernel, CoopShape, GemmKernel};
use super::gemv_shape::GemvShape;
use crate::device::{Cm2Bf16, Cm2Int4, Cm2Split, Cm2Stack, SpirvGemm, SpreadQuant};

/// Knobs for tests and tools; [`record_linear`] uses the defaults.
///
/// [`record_linear`]: super::record_linear
#[derive(Debug, Clone, Copy, Default)]
pub struct RecordOptions {
    /// Integer kernels write the raw `i32` accumulator's bits into `out`
    /// instead of the epilogue (to check the integer GEMM exactly).
    pub raw_accumulator: bool,
    /// Split weights at this many bytes per binding instead of the adapter's
    /// `max_storage_buffer_binding_size` (smaller only).
    pub max_binding: Option<u64>,
    /// The multi-row GEMV's shape instead of [`GemvShape::default_for`] (for
    /// tuning on a real GPU; checked against the kernels' limits).
    pub gemv: Option<GemvShape>,
    /// The integer GEMM kernel.
    pub gemm: GemmKernel,
    /// The cooperative-matrix GEMM's shape instead of [`CoopShape::for_adapter`] (for
    /// tuning on a real GPU; checked against the adapter's limits).
    pub coop: Option<CoopShape>,
    /// The cooperative-matrix GEMM kernel instead of the device's
    /// `GpuOptions::coop_gemm` (tests and tools comparing them; a layer
    /// [`CoopGemmKernel::Double`] does not fit takes the single-stage one).
    pub coop_gemm: Option<CoopGemmKernel>,
    /// The scratch may already hold `x`'s activation codes from the linear
    /// recorded just before with the same input (q/k/v, gate/up): they are
    /// used where they were quantized the same way, instead of quantizing
    /// again. Only for linears recorded back to back on one input.
    pub reuse_codes: bool,
    /// Invocations per workgroup of the fast fused rotate/quantize kernel
    /// (M <= 8, `fast` integer kernels) instead of its default or
    /// `GpuOptions::quant_wgs` (for tuning; a power of two in 64..=1024).
    pub quant_wgs: Option<u32>,
    /// Integer GEMVs at decode sizes read codes a quantization launch wrote
    /// ([`LinearScratch::act_codes`](crate::ops::linear::LinearScratch::act_codes) then holds them) even where they would
    /// make them from spread-rotated rows (`GpuOptions::spread_quant`);
    /// wins over [`Self::spread_quant`].
    ///
    /// [`LinearScratch::act_codes`]: crate::ops::linear::LinearScratch::act_codes
    pub quantize_apart: bool,
    /// The spread quantization's mode instead of the device's
    /// `GpuOptions::spread_quant` (tests and tools comparing the modes on
    /// one device). Whether a fold is usable still follows the device's
    /// ([`fold_unusable`]): a folded norm with this `Off` is an error.
    ///
    /// [`fold_unusable`]: super::fold_unusable
    pub spread_quant: Option<SpreadQuant>,
    /// Which GEMMs may take the SPIR-V cooperative-matrix-2 kernels, instead
    /// of the device's `GpuOptions::spirv_gemm` (tests and tools comparing
    /// them with the WGSL kernels; any but `Off` still needs the device to
    /// have enabled the extension).
    pub spirv_gemm: Option<SpirvGemm>,
    /// How a bf16 layer takes the SPIR-V GEMM, instead of the device's
    /// `GpuOptions::cm2_bf16` (tests and tools comparing them). With
    /// [`Self::spirv_check`], bf16 weights reach the check kernel converted
    /// to f16 whatever this says.
    pub cm2_bf16: Option<Cm2Bf16>,
    /// How an int4 layer takes the SPIR-V GEMM, instead of the device's
    /// `GpuOptions::cm2_int4` (tests and tools comparing them).
    pub cm2_int4: Option<Cm2Int4>,
    /// Whether SPIR-V GEMMs on small grids split K, instead of the device's
    /// `GpuOptions::cm2_split` (tests and tools comparing them).
    pub cm2_split: Option<Cm2Split>,
    /// Whether linears of one input share a SPIR-V GEMM launch past the
    /// GEMVs ([`record_linears_fused`](super::record_linears_fused)),
    /// instead of the device's `GpuOptions::cm2_stack` (tests of every
    /// shape take [`Cm2Stack::Always`]).
    pub cm2_stack: Option<Cm2Stack>,
    /// Bytes of one converted piece (bf16 → f16, int4 → int8) instead of
    /// [`converted_piece_limit`](crate::device::converted_piece_limit) of the input's
    /// rows or the scratch's `piece_room` (tests of several pieces; at
    /// least one tile of rows a piece).
    pub piece_bytes: Option<u64>,
    /// The SPIR-V GEMM of this name (`dynvram_shaders::spirv::CM2_GEMMS`)
    /// instead of the first that fits (tests of every kernel, tuning; where
    /// it cannot run this layer, the WGSL kernels run).
    pub cm2_kernel: Option<&'static str>,
    /// Float GEMMs past the GEMVs run the SPIR-V launch path's check kernel
    /// (`dynvram_shaders::spirv::LINEAR_CHECK`: a plain linear, f16 weights
    /// and activations) where the device takes raw SPIR-V, an error
    /// elsewhere (tests of that path where the cooperative-matrix-2 GEMMs
    /// cannot run).
    pub spirv_check: bool,
    /// GELU (tanh) on the output, where the layer runs on the float SPIR-V
    /// GEMMs (in their epilogue, or in the split sums'):
    /// [`LinearScratch::last_gelu`](crate::ops::linear::LinearScratch::last_gelu)
    /// then says it was applied; elsewhere the caller applies it.
    pub gelu_tanh: bool,
}
