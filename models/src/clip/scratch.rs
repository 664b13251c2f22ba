//! The activations of a CLIP pass: their shapes, and the bytes a plan
//! reserves for them.

use dynvram_runtime::ActDtype;

use super::config::ClipConfig;
use crate::LinearNeeds;
use crate::record::{ActShape, act_bytes};
use crate::tokenize::CLIP_MAX_LEN;

/// Activation shapes of a pass over `batch` prompts.
pub(super) fn act_shapes(c: &ClipConfig, batch: usize) -> Vec<ActShape> {
    let (rows, h) = (batch * CLIP_MAX_LEN, c.hidden_size);
    let mut v = vec![
        ActShape::new("tokens", [rows, h]),
        ActShape::f32("positions", [rows]),
    ];
    v.extend(["x", "n", "q", "k", "v", "attn", "o"].map(|n| ActShape::new(n, [rows, h])));
    v.extend([
        ActShape::new("mlp", [rows, c.intermediate_size]),
        ActShape::new("out", [rows, h]),
    ]);
    v
}

/// Activation bytes of a pass over `batch` prompts in `dtype`, plus the
/// linear kernels' scratch (`linear`).
pub fn scratch_bytes(c: &ClipConfig, batch: usize, dtype: ActDtype, linear: LinearNeeds) -> u64 {
    act_bytes(&act_shapes(c, batch), dtype) + linear.scratch_bytes(batch * CLIP_MAX_LEN)
}
