//! The activations of a T5 pass: their shapes, and the bytes a plan
//! reserves for them.

use dynvram_runtime::ActDtype;

use super::config::T5Config;
use crate::record::{integer_scratch_bytes, word_bytes};

/// Activation shapes of a pass: (name, shape, always f32).
pub(super) fn act_shapes(
    c: &T5Config,
    batch: usize,
    len: usize,
) -> [(&'static str, [usize; 2], bool); 10] {
    let (r, d, inner, f) = (batch * len, c.d_model, c.inner_dim(), c.d_ff);
    [
        ("x", [r, d], false),
        ("n", [r, d], false),
        ("q", [r, inner], false),
        ("k", [r, inner], false),
        ("v", [r, inner], false),
        ("attn", [r, inner], false),
        ("o", [r, d], false),
        ("gate", [r, f], false),
        ("up", [r, f], false),
        ("bias", [len * len, c.num_heads], true),
    ]
}

/// Activation bytes of a pass over `batch` prompts of `len` tokens in
/// `dtype` (the output is the residual stream's last norm, in `n`), plus
/// the linear kernels' scratch for the widest layer that quantizes its
/// activations (`widest_integer_k`; 0 when none does).
pub fn scratch_bytes(
    c: &T5Config,
    batch: usize,
    len: usize,
    dtype: ActDtype,
    widest_integer_k: usize,
) -> u64 {
    let acts: u64 = act_shapes(c, batch, len)
        .iter()
        .map(|(_, [r, w], f32_only)| word_bytes(r * w, if *f32_only { 4 } else { dtype.size() }))
        .sum();
    acts + integer_scratch_bytes(batch * len, widest_integer_k)
}
