//! The activations of a Flux pass: their shapes, and the bytes a pass
//! declares for them (the checkpoint's `ModelSpec` and the forward both
//! read this, so neither imports the other).

use std::convert::Infallible;

use dynvram_runtime::ActDtype;

use super::Shape;
use super::config::{FluxConfig, TIME_DIM};
use crate::LinearNeeds;
use crate::record::{act_word_bytes, word_bytes};

/// Every activation of a pass, one field each (`T`: a shape's bytes, or the
/// runtime's [`Activation`](dynvram_runtime::Activation)).
#[derive(Debug)]
pub(super) struct Acts<T> {
    /// The image tokens' input `[B·L_img, in_channels]`.
    pub img_in: T,
    /// The text tokens' input `[B·L_txt, context_in_dim]`.
    pub txt_in: T,
    /// The pooled text vector `[B, vec_in_dim]`.
    pub y: T,
    /// The timestep's sinusoidal embedding `[B, 256]`.
    pub temb: T,
    /// The guidance's sinusoidal embedding `[B, 256]`.
    pub gemb: T,
    /// An MLP embedder's hidden layer `[B, H]`.
    pub e1: T,
    /// An embedder's output before it is added into `vec` `[B, H]`.
    pub e2: T,
    /// `vec`, the sum of the embedders `[B, H]`.
    pub vec: T,
    /// `silu(vec)`, every modulation's input `[B, H]`.
    pub vec_silu: T,
    /// The image stream's modulation (and the single and final blocks')
    /// `[B, 6·H]`.
    pub mod_img: T,
    /// The text stream's modulation `[B, 6·H]`.
    pub mod_txt: T,
    /// The image stream's residual `[B·L_img, H]`.
    pub x_img: T,
    /// The text stream's residual `[B·L_txt, H]`.
    pub x_txt: T,
    /// The joint residual of the single blocks (txt then img) `[B·L, H]`.
    pub x: T,
    /// A modulated LayerNorm's output `[B·L, H]`.
    pub n: T,
    /// The fused q/k/v (double) or q/k/v + MLP input (single) `[B·L, 3·H + M]`.
    pub wide: T,
    /// The joint sequence's queries `[B·L, H]`.
    pub q: T,
    /// Its keys `[B·L, H]`.
    pub k: T,
    /// Its values `[B·L, H]`.
    pub v: T,
    /// The joint attention's output `[B·L, H]`.
    pub attn: T,
    /// One stream's rows of `attn` `[B·L, H]`.
    pub part: T,
    /// A projection's or MLP's output before its gated add `[B·L, H]`.
    pub o: T,
    /// A double block's MLP hidden layer `[B·L, M]`.
    pub mlp: T,
    /// A single block's `cat(attn, gelu(mlp))` `[B·L, H + M]`.
    pub cat: T,
    /// The output `[B·L_img, out_channels]`.
    pub out: T,
    /// The RoPE table (always f32) `[B·L, head_dim / 2, 2]`.
    pub pe: T,
}

impl<T> Acts<T> {
    /// Each activation of a pass over `s` from `make(name, shape, always
    /// f32)`, in declaration order.
    pub(super) fn build<E>(
        c: &FluxConfig,
        s: Shape,
        mut make: impl FnMut(&'static str, &[usize], bool) -> Result<T, E>,
    ) -> Result<Self, E> {
        let (b, li, lt, l) = (s.batch, s.img_len, s.txt_len, s.joint_len());
        let (h, m, hd) = (c.hidden_size, c.mlp_hidden(), c.head_dim());
        let mut a = |name, shape: &[usize]| make(name, shape, false);
        Ok(Self {
            img_in: a("img_in", &[b * li, c.in_channels])?,
            txt_in: a("txt_in", &[b * lt, c.context_in_dim])?,
            y: a("y", &[b, c.vec_in_dim])?,
            temb: a("temb", &[b, TIME_DIM])?,
            gemb: a("gemb", &[b, TIME_DIM])?,
            e1: a("e1", &[b, h])?,
            e2: a("e2", &[b, h])?,
            vec: a("vec", &[b, h])?,
            vec_silu: a("vec_silu", &[b, h])?,
            mod_img: a("mod_img", &[b, 6 * h])?,
            mod_txt: a("mod_txt", &[b, 6 * h])?,
            x_img: a("x_img", &[b * li, h])?,
            x_txt: a("x_txt", &[b * lt, h])?,
            x: a("x", &[b * l, h])?,
            n: a("n", &[b * l, h])?,
            wide: a("wide", &[b * l, 3 * h + m])?,
            q: a("q", &[b * l, h])?,
            k: a("k", &[b * l, h])?,
            v: a("v", &[b * l, h])?,
            attn: a("attn", &[b * l, h])?,
            part: a("part", &[b * l, h])?,
            o: a("o", &[b * l, h])?,
            mlp: a("mlp", &[b * l, m])?,
            cat: a("cat", &[b * l, h + m])?,
            out: a("out", &[b * li, c.out_channels])?,
            pe: make("pe", &[b * l, hd / 2, 2], true)?,
        })
    }
}

/// Activation bytes a pass over `shape` needs in `dtype`, plus the linear
/// kernels' scratch (`linear`: the integer kernels' rotated and quantized
/// inputs, none where every linear is float — 0.53 GiB at FLUX.1's 4,608
/// tokens that a bf16 model would otherwise hold for nothing — and the
/// converted piece of bf16 and int4 layers).
pub fn scratch_bytes(c: &FluxConfig, shape: Shape, dtype: ActDtype, linear: LinearNeeds) -> u64 {
    let mut acts = 0;
    let _: Acts<()> = Acts::build(c, shape, |_, s, f32_only| {
        acts += act_word_bytes(s, f32_only, dtype);
        Ok::<_, Infallible>(())
    })
    .unwrap_or_else(|never| match never {});
    acts + linear.scratch_bytes(shape.batch * shape.joint_len())
}

/// The intermediates `ForwardOptions::capture` keeps: (name, rows of
/// `hidden_size`).
pub(super) fn capture_rows(c: &FluxConfig, s: Shape) -> Vec<(&'static str, usize)> {
    let b = s.batch;
    let mut v = vec![
        ("vec", b),
        ("img_embed", b * s.img_len),
        ("txt_embed", b * s.txt_len),
    ];
    if c.depth > 0 {
        v.extend([
            ("img_after_double0", b * s.img_len),
            ("txt_after_double0", b * s.txt_len),
        ]);
    }
    if c.depth_single_blocks > 0 {
        v.extend([
            ("after_double_blocks", b * s.joint_len()),
            ("after_single0", b * s.joint_len()),
        ]);
    }
    v.push(("before_final_layer", b * s.img_len));
    v
}

/// Bytes a pass with `ForwardOptions::capture` allocates beyond
/// [`scratch_bytes`] (a debugging aid, so `FluxCheckpoint::spec` does not
/// reserve them: add this to its `scratch_bytes` to capture under a tight
/// budget).
pub fn capture_bytes(c: &FluxConfig, shape: Shape, dtype: ActDtype) -> u64 {
    capture_rows(c, shape)
        .iter()
        .map(|&(_, rows)| word_bytes(rows * c.hidden_size, dtype.size()))
        .sum()
}
