//! The activations of a Flux pass: their shapes, and the bytes a pass
//! declares for them (the checkpoint's `ModelSpec` and the forward both
//! read this, so neither imports the other).

use dynvram_runtime::ActDtype;

use super::Shape;
use super::config::{FluxConfig, TIME_DIM};
use crate::record::{ActShape, act_bytes, word_bytes};

/// Every activation of a pass.
pub(super) fn act_shapes(c: &FluxConfig, s: Shape) -> Vec<ActShape> {
    let (b, li, lt, l) = (s.batch, s.img_len, s.txt_len, s.joint_len());
    let (h, m, hd) = (c.hidden_size, c.mlp_hidden(), c.head_dim());
    vec![
        ActShape::new("img_in", vec![b * li, c.in_channels]),
        ActShape::new("txt_in", vec![b * lt, c.context_in_dim]),
        ActShape::new("y", vec![b, c.vec_in_dim]),
        ActShape::new("temb", vec![b, TIME_DIM]),
        ActShape::new("gemb", vec![b, TIME_DIM]),
        ActShape::new("e1", vec![b, h]),
        ActShape::new("e2", vec![b, h]),
        ActShape::new("vec", vec![b, h]),
        ActShape::new("vec_silu", vec![b, h]),
        ActShape::new("mod_a", vec![b, 6 * h]),
        ActShape::new("mod_b", vec![b, 6 * h]),
        ActShape::new("x_img", vec![b * li, h]),
        ActShape::new("x_txt", vec![b * lt, h]),
        ActShape::new("x", vec![b * l, h]),
        ActShape::new("n", vec![b * l, h]),
        ActShape::new("wide", vec![b * l, 3 * h + m]),
        ActShape::new("q", vec![b * l, h]),
        ActShape::new("k", vec![b * l, h]),
        ActShape::new("v", vec![b * l, h]),
        ActShape::new("attn", vec![b * l, h]),
        ActShape::new("part", vec![b * l, h]),
        ActShape::new("o", vec![b * l, h]),
        ActShape::new("mlp", vec![b * l, m]),
        ActShape::new("cat", vec![b * l, h + m]),
        ActShape::new("out", vec![b * li, c.out_channels]),
        ActShape::f32("pe", vec![b * l, hd / 2, 2]),
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
    let acts = act_bytes(&act_shapes(c, shape), dtype);
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
