//! Kernels that measure the device rather than compute a model.

/// Streaming copy and streaming read over `array<vec4<u32>>` (entries
/// `stream_copy`, `stream_read`): the shader-side memory bandwidth a GEMV is held to.
pub const STREAM: &str = wgsl!("stream.wgsl");

/// Cooperative-matrix throughput on 16×16×16 f16 matrices with f32 sums
/// (entries `mma_registers`, `mma_shared`, `mma_shared_padded`,
/// `mma_shared_double`): the ceiling of the tensor-core kernels on this
/// path, and what bank conflicts and load latency take from it.
pub const COOP_PEAK16: &str = wgsl!(
    enable "f16", "wgpu_cooperative_matrix";
    "linear_coop16.wgsl",
    "coop_peak.wgsl"
);
/// [`COOP_PEAK16`] on 8×8×8 matrices.
pub const COOP_PEAK8: &str = wgsl!(
    enable "f16", "wgpu_cooperative_matrix";
    "linear_coop8.wgsl",
    "coop_peak.wgsl"
);

/// Every benchmark shader file, as (file name, source).
pub const ALL: &[(&str, &str)] = &[
    ("stream.wgsl", STREAM),
    ("coop_peak.wgsl", COOP_PEAK16),
    ("coop_peak.wgsl [8x8]", COOP_PEAK8),
];
