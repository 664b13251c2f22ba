//! Transformer-block kernels: elementwise, norms, RoPE, attention, embedding,
//! the greedy token choice.

/// Residual add, GELU (tanh), SiLU, SwiGLU, scale; out-of-place and in-place entries.
pub const ELEMENTWISE: &str = wgsl!("gelu.wgsl", "elementwise.wgsl");
/// RMSNorm and LayerNorm, one workgroup per row.
pub const NORM: &str = wgsl!("workgroup_sum.wgsl", "norm.wgsl");
/// Hugging Face `rotate_half` RoPE from a host cos/sin table, in place.
pub const ROPE: &str = wgsl!("rope.wgsl");
/// Causal grouped-query softmax attention with an online softmax.
pub const ATTENTION: &str = wgsl!("attention_params.wgsl", "attention.wgsl");
/// [`ATTENTION`] with an additive per-head bias and any score scale, no
/// mask (T5's relative position bias).
pub const ATTENTION_BIAS: &str = wgsl!(
    "attention_params.wgsl",
    "attention.wgsl",
    "attention_bias.wgsl"
);
/// Decode attention over a KV cache, coalesced (flash-decoding: keys split
/// over workgroups, the partials combined by [`ATTENTION`]'s
/// `attend_combine`), the key groups' sums through workgroup memory.
pub const ATTENTION_DECODE: &str = wgsl!(
    "attention_params.wgsl",
    "attention_decode_workgroup.wgsl",
    "attention_decode_plain.wgsl",
    "attention_decode.wgsl"
);
/// [`ATTENTION_DECODE`] with subgroup shuffles (needs `SUBGROUP`).
pub const ATTENTION_DECODE_SUBGROUP: &str = wgsl!(
    "attention_params.wgsl",
    "attention_decode_subgroup.wgsl",
    "attention_decode_plain.wgsl",
    "attention_decode.wgsl"
);
/// [`ATTENTION_DECODE`] with RoPE fused: queries rotated as loaded, the new
/// key rows rotated in the cache.
pub const ATTENTION_DECODE_ROPE: &str = wgsl!(
    "attention_params.wgsl",
    "attention_decode_workgroup.wgsl",
    "attention_decode_rope.wgsl",
    "attention_decode.wgsl"
);
/// [`ATTENTION_DECODE_ROPE`] with subgroup shuffles (needs `SUBGROUP`).
pub const ATTENTION_DECODE_ROPE_SUBGROUP: &str = wgsl!(
    "attention_params.wgsl",
    "attention_decode_subgroup.wgsl",
    "attention_decode_rope.wgsl",
    "attention_decode.wgsl"
);

/// The decode attention module: subgroup shuffles or workgroup memory,
/// RoPE fused or not.
pub fn attention_decode(subgroups: bool, rope: bool) -> &'static str {
    match (subgroups, rope) {
        (false, false) => ATTENTION_DECODE,
        (true, false) => ATTENTION_DECODE_SUBGROUP,
        (false, true) => ATTENTION_DECODE_ROPE,
        (true, true) => ATTENTION_DECODE_ROPE_SUBGROUP,
    }
}

/// The sizes of a decode attention module's workgroup ([`with_decode_shape`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DecodeShape {
    /// Invocations per workgroup (`WG`): a power of two, at least `LPK`.
    pub wg: u32,
    /// Key groups, `WG / LPK` (`MAX_KP`).
    pub key_groups: u32,
    /// Key groups merged per round (`MERGE`), 1 to `key_groups`.
    pub merge: u32,
    /// Queries per workgroup (`QG`, sizes the workgroup-memory sums).
    pub queries: u32,
    /// Head dimension (`HD`).
    pub head_dim: u32,
}

/// A decode attention module ([`attention_decode`]) with its workgroup
/// sizes written in (they size workgroup arrays and `@workgroup_size`, so
/// they are text): `subgroups` must be the one the module was chosen with.
pub fn with_decode_shape(source: &str, subgroups: bool, s: DecodeShape) -> String {
    let acc4 = s.merge * s.queries * s.head_dim.div_ceil(4);
    let mut consts = vec![
        ("WG", 128, s.wg),
        ("MAX_KP", 4, s.key_groups),
        ("MERGE", 1, s.merge),
        ("ACC4", 32, acc4),
    ];
    if !subgroups {
        consts.push(("GS_QG", 8, s.queries));
    }
    crate::with_consts(source, &consts)
}

/// Flash attention (causal or not, batched) on 16×16×16 f16 cooperative
/// matrices with f32 sums (needs `SHADER_F16`, `SUBGROUP` and that
/// `EXPERIMENTAL_COOPERATIVE_MATRIX` configuration), as written for
/// [`crate::flash::FlashTuning::FILE`]; other shapes by
/// [`crate::flash::flash_attention`].
pub const FLASH_ATTENTION16: &str = wgsl!(
    enable "f16", "wgpu_cooperative_matrix";
    "linear_coop16.wgsl",
    "flash_attention.wgsl"
);
/// [`FLASH_ATTENTION16`] on 8×8×8 matrices.
pub const FLASH_ATTENTION8: &str = wgsl!(
    enable "f16", "wgpu_cooperative_matrix";
    "linear_coop8.wgsl",
    "flash_attention.wgsl"
);

/// The two-walk flash attention (`flash_attention_two_walk.wgsl`: the
/// softmax statistics in a first walk over the keys, the outputs in a
/// second, no output rescaling) on 16×16×16 f16 cooperative matrices with
/// f32 sums; shape by [`with_two_walk_shape`]. The runtime's default until
/// the one-walk kernel ([`FLASH_ATTENTION16`]) has passed on a GPU.
pub const FLASH_TWO_WALK16: &str = wgsl!(
    enable "f16", "wgpu_cooperative_matrix";
    "linear_coop16.wgsl",
    "flash_attention_two_walk.wgsl"
);
/// [`FLASH_TWO_WALK16`] on 8×8×8 matrices.
pub const FLASH_TWO_WALK8: &str = wgsl!(
    enable "f16", "wgpu_cooperative_matrix";
    "linear_coop8.wgsl",
    "flash_attention_two_walk.wgsl"
);

/// A two-walk flash-attention module (`FLASH_TWO_WALK*`) with its
/// workgroup shape written in: `nsg` subgroups of query rows, `bc` keys per
/// block, head dimension `hd` (they size workgroup arrays, so they are
/// text).
pub fn with_two_walk_shape(source: &str, nsg: u32, bc: u32, hd: u32) -> String {
    crate::with_consts(source, &[("NSG", 2, nsg), ("BC", 32, bc), ("HD", 128, hd)])
}

/// Embedding row gather from an f32, f16 or bf16 table.
pub const EMBED: &str = wgsl!("f16_words.wgsl", "stored_float.wgsl", "embed.wgsl");

/// Greedy token choice: the argmax of one row of logits as a `u32`.
pub const ARGMAX: &str = wgsl!("argmax.wgsl");

/// Diffusion-transformer (Flux) kernels: modulated LayerNorm, gated
/// residual add, per-head QK RMSNorm with interleaved RoPE into a joint
/// sequence, and a batched row/column gather (optionally through GELU).
pub const DIT: &str = wgsl!("workgroup_sum.wgsl", "gelu.wgsl", "dit.wgsl");

/// Every transformer shader file, as (file name, source).
pub const ALL: &[(&str, &str)] = &[
    ("elementwise.wgsl", ELEMENTWISE),
    ("gelu.wgsl", ELEMENTWISE),
    ("norm.wgsl", NORM),
    ("workgroup_sum.wgsl", NORM),
    ("rope.wgsl", ROPE),
    ("attention.wgsl", ATTENTION),
    ("attention_params.wgsl", ATTENTION),
    ("attention_bias.wgsl", ATTENTION_BIAS),
    // The decode fragments need the body: listed as its compositions.
    ("attention_decode.wgsl", ATTENTION_DECODE),
    ("attention_decode_workgroup.wgsl", ATTENTION_DECODE),
    ("attention_decode_plain.wgsl", ATTENTION_DECODE),
    ("attention_decode_subgroup.wgsl", ATTENTION_DECODE_SUBGROUP),
    ("attention_decode_rope.wgsl", ATTENTION_DECODE_ROPE),
    (
        "attention_decode.wgsl [rope, subgroup]",
        ATTENTION_DECODE_ROPE_SUBGROUP,
    ),
    ("flash_attention.wgsl", FLASH_ATTENTION16),
    ("flash_attention.wgsl [8x8]", FLASH_ATTENTION8),
    ("flash_attention_two_walk.wgsl", FLASH_TWO_WALK16),
    ("flash_attention_two_walk.wgsl [8x8]", FLASH_TWO_WALK8),
    ("embed.wgsl", EMBED),
    ("argmax.wgsl", ARGMAX),
    ("dit.wgsl", DIT),
];
