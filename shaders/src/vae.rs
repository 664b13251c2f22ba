//! Image kernels of the VAE: 2-D convolution (with nearest upsampling,
//! stride, padding and a residual add in its input and output indexing),
//! GroupNorm (optionally with SiLU), and single-head attention over the
//! positions of a feature map.

/// NCHW convolution as an implicit GEMM with weights decoded as stored
/// (f32, f16 or bf16).
pub const CONV2D: &str = wgsl!("f16_words.wgsl", "stored_float.wgsl", "conv2d.wgsl");
/// GroupNorm statistics per chunk, their merge, and the normalisation
/// (+ SiLU).
pub const GROUP_NORM: &str = wgsl!("workgroup_sum.wgsl", "group_norm.wgsl");
/// Single-head softmax attention over the positions of NCHW maps.
pub const SPATIAL_ATTENTION: &str = wgsl!("spatial_attention.wgsl");

/// Every VAE shader file, as (file name, source).
pub const ALL: &[(&str, &str)] = &[
    ("stored_float.wgsl", CONV2D),
    ("conv2d.wgsl", CONV2D),
    ("group_norm.wgsl", GROUP_NORM),
    ("spatial_attention.wgsl", SPATIAL_ATTENTION),
];
