//! The activations of a T5 pass: their shapes, and the bytes a plan
//! reserves for them.

use dynvram_runtime::ActDtype;

use super::config::T5Config;
use crate::LinearNeeds;
use crate::record::{ActShape, act_bytes};

/// Activation shapes of a pass.
pub(super) fn act_shapes(c: &T5Config, batch: usize, len: usize) -> Vec<ActShape> {
    let (r, d, inner, f) = (batch * len, c.d_model, c.inner_dim(), c.d_ff);
    vec![
        ActShape::new("x", [r, d]),
        ActShape::new("n", [r, d]),
        ActShape::new("q", [r, inner]),
        ActShape::new("k", [r, inner]),
        ActShape::new("v", [r, inner]),
        ActShape::new("attn", [r, inner]),
        ActShape::new("o", [r, d]),
        ActShape::new("gate", [r, f]),
        ActShape::new("up", [r, f]),
        ActShape::f32("bias", [len * len, c.num_heads]),
    ]
}

/// Activation bytes of a pass over `batch` prompts of `len` tokens in
/// `dtype` (the output is the residual stream's last norm, in `n`), plus
/// the linear kernels' scratch (`linear`).
pub fn scratch_bytes(
    c: &T5Config,
    batch: usize,
    len: usize,
    dtype: ActDtype,
    linear: LinearNeeds,
) -> u64 {
    act_bytes(&act_shapes(c, batch, len), dtype) + linear.scratch_bytes(batch * len)
}
