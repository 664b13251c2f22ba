//! Matrix FLOPs of one Flux forward per runtime block (`dynvram plan`'s
//! compute time): 2·M·N·K per linear, M the rows it sees (image, text or
//! joint tokens; the batch for the vector path and the modulations), and
//! 4·L²·hidden per joint attention (QKᵀ and P·V over L joint tokens, all
//! heads). Norms, RoPE, gathers and activations are not counted: they move
//! bytes, not matrix products.

use super::Shape;
use super::config::{FluxConfig, TIME_DIM};

/// FLOPs of each block of one forward over `s`, in the order of
/// `FluxCheckpoint::blocks` (embed, double blocks, single blocks, final).
pub fn block_flops(c: &FluxConfig, s: Shape) -> Vec<u64> {
    let (h, m) = (c.hidden_size as u64, c.mlp_hidden() as u64);
    let (b, img, txt) = (s.batch as u64, s.img_len as u64, s.txt_len as u64);
    let joint = img + txt;
    let linear = |rows: u64, n: u64, k: u64| 2 * rows * n * k;
    let attention = 4 * b * joint * joint * h;
    let embedder = |k: u64| linear(b, h, k) + linear(b, h, h);
    let mut embed = linear(b * img, h, c.in_channels as u64)
        + linear(b * txt, h, c.context_in_dim as u64)
        + embedder(TIME_DIM as u64)
        + embedder(c.vec_in_dim as u64);
    if c.guidance_embed {
        embed += embedder(TIME_DIM as u64);
    }
    let stream = |rows: u64| {
        linear(b, 6 * h, h)
            + linear(rows, 3 * h, h)
            + linear(rows, h, h)
            + linear(rows, m, h)
            + linear(rows, h, m)
    };
    let double = stream(b * img) + stream(b * txt) + attention;
    let single = linear(b, 3 * h, h)
        + linear(b * joint, 3 * h + m, h)
        + linear(b * joint, h, h + m)
        + attention;
    let last = linear(b, 2 * h, h) + linear(b * img, c.out_channels as u64, h);
    std::iter::once(embed)
        .chain(std::iter::repeat_n(double, c.depth))
        .chain(std::iter::repeat_n(single, c.depth_single_blocks))
        .chain(std::iter::once(last))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FLUX.1-dev at 1024² (4096 image and 512 text tokens): 59 blocks,
    /// ~74.4 TFLOP a step, of which 57 joint attentions take 14.9.
    #[test]
    fn flux1_dev_at_1024_squared() {
        let c = crate::flux::synth::preset("flux-dev").expect("preset");
        let s = Shape {
            batch: 1,
            img_len: 4096,
            txt_len: 512,
        };
        let f = block_flops(&c, s);
        assert_eq!(f.len(), 1 + 19 + 38 + 1);
        // By hand: a double block's image stream at 4096 rows is
        // 2·4096·3072·(9216 + 3072 + 2·12288), its text stream the same at
        // 512 rows, the modulations 2·2·18432·3072, attention 4·4608²·3072.
        let per_row = 2 * 3072 * (9216 + 3072 + 2 * 12288u64);
        let double = per_row * (4096 + 512) + 2 * 2 * 18432 * 3072 + 4 * 4608 * 4608 * 3072;
        assert_eq!(f[1], double);
        assert_eq!(f[1], 1_304_822_808_576);
        // A single block: linear1 and linear2 at 4608 rows, modulation, attention.
        let single =
            2 * 4608 * 3072 * (21504 + 15360u64) + 2 * 9216 * 3072 + 4 * 4608 * 4608 * 3072;
        assert_eq!(f[20], single);
        let total: u64 = f.iter().sum();
        assert!((74.0e12..75.0e12).contains(&(total as f64)), "{total}");
        let attention = 57 * 4 * 4608 * 4608 * 3072u64;
        assert!((14.8e12..15.0e12).contains(&(attention as f64)));
        // Twice the batch, twice the work.
        let two: u64 = block_flops(&c, Shape { batch: 2, ..s }).iter().sum();
        assert_eq!(two, 2 * total);
    }
}
