//! Transformer-block kernels: elementwise, norms, RoPE, attention, embedding.

/// Residual add, GELU (tanh), SiLU, SwiGLU, scale; out-of-place and in-place entries.
pub const ELEMENTWISE: &str = wgsl!("elementwise.wgsl");
/// RMSNorm and LayerNorm, one workgroup per row.
pub const NORM: &str = wgsl!("norm.wgsl");
/// Hugging Face `rotate_half` RoPE from a host cos/sin table, in place.
pub const ROPE: &str = wgsl!("rope.wgsl");
/// Causal grouped-query softmax attention with an online softmax.
pub const ATTENTION: &str = wgsl!("attention.wgsl");
/// Embedding row gather from an f32, f16 or bf16 table.
pub const EMBED: &str = wgsl!("embed.wgsl");

/// Diffusion-transformer (Flux) kernels: modulated LayerNorm, gated
/// residual add, per-head QK RMSNorm with interleaved RoPE into a joint
/// sequence, and a batched row/column gather (optionally through GELU).
pub const DIT: &str = wgsl!("dit.wgsl");

/// Every transformer shader file, as (file name, source).
pub const ALL: &[(&str, &str)] = &[
    ("elementwise.wgsl", ELEMENTWISE),
    ("norm.wgsl", NORM),
    ("rope.wgsl", ROPE),
    ("attention.wgsl", ATTENTION),
    ("embed.wgsl", EMBED),
    ("dit.wgsl", DIT),
];
