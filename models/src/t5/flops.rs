//! Matrix FLOPs of one T5 encoder pass per runtime block (`plan`'s compute
//! time): 2·M·N·K per linear over the `batch × len` rows, 4·L²·inner per
//! block's attention (QKᵀ and P·V, all heads). Norms and the position
//! bias move bytes, not products.

use super::config::T5Config;

/// FLOPs of each block of a pass over `batch` prompts of `len` tokens, in
/// the order of `T5Checkpoint::blocks` (attention and MLP of each encoder
/// block, final norm).
pub fn block_flops(c: &T5Config, batch: usize, len: usize) -> Vec<u64> {
    let (b, l) = (batch as u64, len as u64);
    let (d, inner, f) = (c.d_model as u64, c.inner_dim() as u64, c.d_ff as u64);
    let rows = b * l;
    let attention = 4 * 2 * rows * d * inner + 4 * b * l * l * inner;
    let mlp = 3 * 2 * rows * d * f;
    (0..c.num_layers)
        .flat_map(|_| [attention, mlp])
        .chain(std::iter::once(0))
        .collect()
}
