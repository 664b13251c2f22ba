//! Kernels that measure the device rather than compute a model.

/// Streaming copy and streaming read over `array<vec4<u32>>` (entries
/// `stream_copy`, `stream_read`): the shader-side memory bandwidth a GEMV is held to.
pub const STREAM: &str = wgsl!("stream.wgsl");

/// Every benchmark shader file, as (file name, source).
pub const ALL: &[(&str, &str)] = &[("stream.wgsl", STREAM)];
