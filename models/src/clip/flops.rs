//! Matrix FLOPs of one CLIP pass per runtime block (`plan`'s compute
//! time): 2·M·N·K per linear over the `batch × 77` rows, 4·L²·hidden per
//! layer's attention (QKᵀ and P·V, all heads; the causal mask's skipped
//! half is counted). The embeddings and norms move bytes, not products.

use super::config::ClipConfig;
use crate::tokenize::CLIP_MAX_LEN;

/// FLOPs of each block of a pass over `batch` prompts, in the order of
/// `ClipCheckpoint::blocks` (embeddings, attention and MLP of each layer,
/// final norm).
pub fn block_flops(c: &ClipConfig, batch: usize) -> Vec<u64> {
    let (b, l) = (batch as u64, CLIP_MAX_LEN as u64);
    let (h, m) = (c.hidden_size as u64, c.intermediate_size as u64);
    let rows = b * l;
    let attention = 4 * 2 * rows * h * h + 4 * b * l * l * h;
    let mlp = 2 * 2 * rows * h * m;
    std::iter::once(0)
        .chain((0..c.num_hidden_layers).flat_map(|_| [attention, mlp]))
        .chain(std::iter::once(0))
        .collect()
}
