//! The activations of a VAE pass, counted before they are allocated: four
//! rotating NCHW buffers of the largest map, the mid attention's values,
//! the GroupNorm statistics and the input (what the specs reserve and
//! tiling weighs against the budget).

use dynvram_runtime::ActDtype;
use dynvram_runtime::ops::group_norm::scratch_len;

use super::config::{GROUPS, VaeConfig};

/// Element counts of a decode's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sizes {
    /// Each of the four rotating buffers (the largest map of the batch).
    pub big: usize,
    /// The mid attention's values.
    pub mid: usize,
    /// GroupNorm statistics (f32).
    pub stats: usize,
    /// The latent input.
    pub z: usize,
}

pub(crate) fn sizes(c: &VaeConfig, batch: usize, h: usize, w: usize) -> Sizes {
    let n = c.levels();
    let gn = |ch: usize, hw: usize| {
        scratch_len(batch as u64, ch as u64, hw as u64, GROUPS as u64) as usize
    };
    let mid = c.mid_channels() * h * w;
    let (mut big, mut stats) = (mid, gn(c.mid_channels(), h * w));
    for i in (0..n).rev() {
        let hw = (h << (n - 1 - i)) * (w << (n - 1 - i));
        let cin = if i + 1 == n {
            c.mid_channels()
        } else {
            c.channels(i + 1)
        };
        big = big.max(cin * hw).max(c.channels(i) * hw);
        stats = stats.max(gn(cin, hw)).max(gn(c.channels(i), hw));
        if i > 0 {
            big = big.max(c.channels(i) * hw * 4);
        }
    }
    let full = (h << (n - 1)) * (w << (n - 1));
    big = big.max(c.image_channels * full);
    Sizes {
        big: big * batch,
        mid: mid * batch,
        stats,
        z: c.z_channels * h * w * batch,
    }
}

/// [`sizes`] of an encode of `batch` images of `h × w` pixels (sides
/// multiples of the config's scale).
pub(crate) fn encoder_sizes(c: &VaeConfig, batch: usize, h: usize, w: usize) -> Sizes {
    let n = c.levels();
    let gn = |ch: usize, hw: usize| {
        scratch_len(batch as u64, ch as u64, hw as u64, GROUPS as u64) as usize
    };
    let (mut big, mut stats) = (0, 0);
    for i in 0..n {
        let hw = (h >> i) * (w >> i);
        let cin = c.channels(i.saturating_sub(1));
        big = big.max(cin * hw).max(c.channels(i) * hw);
        stats = stats.max(gn(cin, hw)).max(gn(c.channels(i), hw));
        if i + 1 < n {
            big = big.max(c.channels(i) * hw / 4);
        }
    }
    let (m, hw) = (c.mid_channels(), (h >> (n - 1)) * (w >> (n - 1)));
    big = big.max(m * hw).max(2 * c.z_channels * hw);
    Sizes {
        big: big * batch,
        mid: m * hw * batch,
        stats: stats.max(gn(m, hw)),
        z: c.image_channels * h * w * batch,
    }
}

/// Bytes of activations an encode of `batch` images of `h × w` pixels
/// allocates in `dtype` (what `VaeCheckpoint::encoder_spec` reserves).
pub fn encoder_activation_bytes(
    c: &VaeConfig,
    batch: usize,
    h: usize,
    w: usize,
    dtype: ActDtype,
) -> u64 {
    sizes_bytes(encoder_sizes(c, batch, h, w), dtype)
}

fn sizes_bytes(s: Sizes, dtype: ActDtype) -> u64 {
    let word = |n: usize, size: u64| (n as u64 * size).div_ceil(4) * 4;
    4 * word(s.big, dtype.size())
        + word(s.mid, dtype.size())
        + word(s.z, dtype.size())
        + word(s.stats, 4)
}

/// Bytes of activations a decode of `batch` latents of `h × w` allocates
/// in `dtype` (what `VaeCheckpoint::spec` reserves).
pub fn activation_bytes(c: &VaeConfig, batch: usize, h: usize, w: usize, dtype: ActDtype) -> u64 {
    sizes_bytes(sizes(c, batch, h, w), dtype)
}
