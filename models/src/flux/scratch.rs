//! The activations of a Flux pass: their shapes, and the bytes a pass
//! declares for them (the checkpoint's `ModelSpec` and the forward both
//! read this, so neither imports the other).

use dynvram_runtime::ActDtype;

use super::Shape;
use super::config::{FluxConfig, TIME_DIM};
use crate::record::word_bytes;

/// Every activation of a pass: (name, shape, always f32).
pub(super) fn act_shapes(c: &FluxConfig, s: Shape) -> Vec<(&'static str, Vec<usize>, bool)> {
    let (b, li, lt, l) = (s.batch, s.img_len, s.txt_len, s.joint_len());
    let (h, m, hd) = (c.hidden_size, c.mlp_hidden(), c.head_dim());
    vec![
        ("img_in", vec![b * li, c.in_channels], false),
        ("txt_in", vec![b * lt, c.context_in_dim], false),
        ("y", vec![b, c.vec_in_dim], false),
        ("temb", vec![b, TIME_DIM], false),
        ("gemb", vec![b, TIME_DIM], false),
        ("e1", vec![b, h], false),
        ("e2", vec![b, h], false),
        ("vec", vec![b, h], false),
        ("vec_silu", vec![b, h], false),
        ("mod_a", vec![b, 6 * h], false),
        ("mod_b", vec![b, 6 * h], false),
        ("x_img", vec![b * li, h], false),
        ("x_txt", vec![b * lt, h], false),
        ("x", vec![b * l, h], false),
        ("n", vec![b * l, h], false),
        ("wide", vec![b * l, 3 * h + m], false),
        ("q", vec![b * l, h], false),
        ("k", vec![b * l, h], false),
        ("v", vec![b * l, h], false),
        ("attn", vec![b * l, h], false),
        ("part", vec![b * l, h], false),
        ("o", vec![b * l, h], false),
        ("mlp", vec![b * l, m], false),
        ("cat", vec![b * l, h + m], false),
        ("out", vec![b * li, c.out_channels], false),
        ("pe", vec![b * l, hd / 2, 2], true),
    ]
}

/// Activation bytes a pass over `shape` needs in `dtype`, plus the linear
/// kernels' scratch: the rotated and quantized inputs of the widest layer
/// that quantizes its activations (`widest_integer_k`, its input width; 0
/// when every linear is float, which needs none — 0.53 GiB at FLUX.1's 4,608
/// tokens that a bf16 model would otherwise hold for nothing).
pub fn scratch_bytes(
    c: &FluxConfig,
    shape: Shape,
    dtype: ActDtype,
    widest_integer_k: usize,
) -> u64 {
    let acts: u64 = act_shapes(c, shape)
        .iter()
        .map(|(_, s, f32_only)| {
            let size = if *f32_only { 4 } else { dtype.size() };
            word_bytes(s.iter().product(), size)
        })
        .sum();
    let rows = (shape.batch * shape.joint_len()) as u64;
    let linear = 2 * rows * widest_integer_k as u64 * 4;
    acts + linear
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
