//! The activations of a CLIP pass: their shapes, and the bytes a plan
//! reserves for them.

use dynvram_runtime::ActDtype;

use super::config::ClipConfig;
use crate::record::{integer_scratch_bytes, word_bytes};
use crate::tokenize::CLIP_MAX_LEN;

/// Activation shapes of a pass over `batch` prompts: (name, shape).
pub(super) fn act_shapes(c: &ClipConfig, batch: usize) -> [(&'static str, [usize; 2]); 11] {
    let (rows, h) = (batch * CLIP_MAX_LEN, c.hidden_size);
    [
        ("tokens", [rows, h]),
        ("positions", [rows, 1]),
        ("x", [rows, h]),
        ("n", [rows, h]),
        ("q", [rows, h]),
        ("k", [rows, h]),
        ("v", [rows, h]),
        ("attn", [rows, h]),
        ("o", [rows, h]),
        ("mlp", [rows, c.intermediate_size]),
        ("out", [rows, h]),
    ]
}

/// Activation bytes of a pass over `batch` prompts in `dtype`, plus the
/// linear kernels' scratch for the widest layer that quantizes its
/// activations (`widest_integer_k`, its input width; 0 when none does).
pub fn scratch_bytes(
    c: &ClipConfig,
    batch: usize,
    dtype: ActDtype,
    widest_integer_k: usize,
) -> u64 {
    let acts: u64 = act_shapes(c, batch)
        .iter()
        .map(|(name, [r, w])| {
            let size = if *name == "positions" {
                4
            } else {
                dtype.size()
            };
            word_bytes(r * w, size)
        })
        .sum();
    acts + integer_scratch_bytes(batch * CLIP_MAX_LEN, widest_integer_k)
}
