//! Tiled decoding's geometry: overlapping latent tiles and the weights that
//! blend their decoded images (as diffusers' `tiled_decode` and ComfyUI's
//! tiled VAE decode do). Each tile is decoded alone, so its GroupNorm
//! statistics are its own: the overlaps fade one tile into the next instead
//! of leaving seams.

/// How a decode is split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tiling {
    /// The whole latent where the budget holds its activations, else the
    /// largest tiles it holds.
    #[default]
    Auto,
    /// The whole latent in one pass, whatever the budget.
    Whole,
    /// Tiles of `size × size` latent pixels overlapping by `overlap`.
    Tiles {
        /// Latent pixels per tile side.
        size: usize,
        /// Latent pixels two neighbouring tiles share.
        overlap: usize,
    },
}

/// Tile sides tried by [`Tiling::Auto`], largest first (latent pixels).
pub(crate) const AUTO_SIZES: [usize; 8] = [128, 96, 64, 48, 32, 24, 16, 8];

/// The overlap [`Tiling::Auto`] gives tiles of `size`: a quarter of it.
pub(crate) fn auto_overlap(size: usize) -> usize {
    size / 4
}

/// Starts of tiles of `size` along an axis of `n` with `overlap`: every
/// `size − overlap` from 0, the last one flush with the end (so every tile
/// is whole); one tile of `n` when `n ≤ size`.
pub(crate) fn starts(n: usize, size: usize, overlap: usize) -> Vec<usize> {
    if n <= size {
        return vec![0];
    }
    let step = size.saturating_sub(overlap).max(1);
    let mut v: Vec<usize> = (0..)
        .map(|i| i * step)
        .take_while(|&s| s + size < n)
        .collect();
    v.push(n - size);
    v.dedup();
    v
}

/// Tiles [`Tiling::Auto`] decodes an `h × w` latent in with tiles of
/// `side` (1: whole).
pub(crate) fn auto_tiles(h: usize, w: usize, side: usize) -> usize {
    let axis = |n| starts(n, side, auto_overlap(side)).len();
    axis(h) * axis(w)
}

/// Blend weight of pixel `p` of a tile of `len` pixels starting at `start`
/// on an axis of `n`: rising over `ramp` pixels from an edge that has a
/// neighbour, 1 elsewhere (never 0, so every pixel has weight).
pub(crate) fn ramp(p: usize, start: usize, len: usize, n: usize, ramp: usize) -> f32 {
    let r = ramp.max(1) as f32;
    let mut w = 1.0f32;
    if start > 0 {
        w = w.min((p as f32 + 0.5) / r);
    }
    if start + len < n {
        w = w.min((len as f32 - p as f32 - 0.5) / r);
    }
    w.clamp(1e-3, 1.0)
}

/// Accumulates tiles of a `[batch, ch, h, w]` image as weighted sums.
#[derive(Debug)]
pub(crate) struct Blend {
    shape: [usize; 4],
    sum: Vec<f32>,
    weight: Vec<f32>,
}

impl Blend {
    pub fn new(shape: [usize; 4]) -> Self {
        let n = shape.iter().product();
        Self {
            shape,
            sum: vec![0.0; n],
            weight: vec![0.0; shape[2] * shape[3]],
        }
    }

    /// Adds `tile` `[batch, ch, th, tw]` at `(y0, x0)`, its edges ramped
    /// over `ramp` pixels where neighbours overlap it.
    pub fn add(
        &mut self,
        tile: &[f32],
        th: usize,
        tw: usize,
        y0: usize,
        x0: usize,
        ramp_px: usize,
    ) {
        let [b, c, h, w] = self.shape;
        for y in 0..th {
            let wy = ramp(y, y0, th, h, ramp_px);
            for x in 0..tw {
                let wt = wy * ramp(x, x0, tw, w, ramp_px);
                self.weight[(y0 + y) * w + x0 + x] += wt;
                for bc in 0..b * c {
                    self.sum[(bc * h + y0 + y) * w + x0 + x] += wt * tile[(bc * th + y) * tw + x];
                }
            }
        }
    }

    /// The blended image.
    pub fn finish(mut self) -> Vec<f32> {
        let [_, _, h, w] = self.shape;
        for (i, v) in self.sum.iter_mut().enumerate() {
            *v /= self.weight[i % (h * w)];
        }
        self.sum
    }
}

/// Latent tile `[batch, ch, th, tw]` at `(y0, x0)` of `z` `[batch, ch, h, w]`.
pub(crate) fn crop(
    z: &[f32],
    shape: [usize; 4],
    y0: usize,
    x0: usize,
    th: usize,
    tw: usize,
) -> Vec<f32> {
    let [b, c, h, w] = shape;
    let mut out = Vec::with_capacity(b * c * th * tw);
    for bc in 0..b * c {
        for y in y0..y0 + th {
            let row = (bc * h + y) * w;
            out.extend_from_slice(&z[row + x0..row + x0 + tw]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_cover_the_axis_and_overlap() {
        assert_eq!(starts(10, 16, 4), vec![0]);
        assert_eq!(starts(16, 16, 4), vec![0]);
        assert_eq!(starts(40, 16, 4), vec![0, 12, 24]);
        assert_eq!(starts(30, 16, 4), vec![0, 12, 14]);
        for (n, size, ov) in [(100, 32, 8), (33, 8, 2), (9, 8, 7)] {
            let s = starts(n, size, ov);
            assert_eq!(*s.last().unwrap() + size, n);
            for pair in s.windows(2) {
                assert!(pair[1] > pair[0] && pair[1] - pair[0] <= size - ov.min(size - 1));
            }
        }
    }

    #[test]
    fn blending_identical_tiles_gives_the_image() {
        let (b, c, h, w) = (2, 3, 20, 28);
        let img: Vec<f32> = (0..b * c * h * w)
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        let mut blend = Blend::new([b, c, h, w]);
        let (th, tw) = (12, 16);
        for &y0 in &starts(h, th, 4) {
            for &x0 in &starts(w, tw, 4) {
                let tile = crop(&img, [b, c, h, w], y0, x0, th, tw);
                blend.add(&tile, th, tw, y0, x0, 4);
            }
        }
        let out = blend.finish();
        for (i, (a, e)) in out.iter().zip(&img).enumerate() {
            assert!((a - e).abs() < 1e-5, "pixel {i}: {a} vs {e}");
        }
    }
}
