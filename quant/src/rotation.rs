//! The matmul-order group rotation (`x.reshape(-1, G) @ H`, torch's CPU
//! summation order, [`crate::reference::rotate_matmul`]) computed fast and
//! bit for bit.
//!
//! Why not a fast Hadamard transform: its sums are taken in another order
//! and differ from torch's in the last bit. The order is kept, the cost per
//! term is cut instead:
//! - every product is `v · ±2^-m` (exact up to underflow, and rounding is
//!   symmetric), so `v · h[j][c]` is `v · 2^-m` with its sign bit flipped
//!   where `h` is negative: one xor, no multiply;
//! - the sign of `h[j][c]` is a product over base-4 digits, so it splits into
//!   a 16 x 16 table for the two low digits (one row of 16 lanes per `j`)
//!   and a `G/16 x G/16` table for the rest (one scalar per lane group):
//!   kilobytes in L1 instead of the `G x G` matrix;
//! - columns are summed in tiles of 64 held in registers across a whole
//!   block of `j`, compiled for AVX-512 or AVX2 where the CPU has them.

use crate::reference::hadamard_scale;

/// Columns of one lane group: the two low base-4 digits of a column.
const LANES: usize = 16;

/// Lane groups summed together (64 columns: 4 AVX-512 or 8 AVX2 registers).
const TILE: usize = 4;

/// The sign bit of an `f32`.
const SIGN: u32 = 0x8000_0000;

/// The sign bit of `H4[a][b]`, whose -1 entries are where `a + b == 3`.
fn h4_sign(a: usize, b: usize) -> u32 {
    if a + b == 3 { SIGN } else { 0 }
}

/// The sign bit of `H[i][j]` for a Hadamard matrix of `span` (a power of 4):
/// the xor of the `H4` signs over the base-4 digits of `i` and `j`.
fn h_sign(mut i: usize, mut j: usize, span: usize) -> u32 {
    let mut sign = 0;
    let mut s = 1;
    while s < span {
        sign ^= h4_sign(i % 4, j % 4);
        i /= 4;
        j /= 4;
        s *= 4;
    }
    sign
}

/// A matmul-order rotation for one group size and summation block.
#[derive(Debug, Clone)]
pub(crate) struct MatmulRotation {
    /// Group size `G` (a power of 4, at least 16).
    g: usize,
    /// Terms per block sum (`min(block, G)`).
    block: usize,
    /// `1/√G`, the magnitude of every entry of `H`.
    scale: f32,
    /// Sign bits of `H16`: the two low digits of row and column.
    lo: [[u32; LANES]; LANES],
    /// Sign bits of `H_{G/16}`, row-major: the other digits.
    hi: Vec<u32>,
}

impl MatmulRotation {
    /// The rotation for `group` (a power of 4) summed in blocks of `block`
    /// terms; `None` for groups under 16 (too small to be worth it).
    pub(crate) fn new(group: u32, block: usize) -> Option<Self> {
        let g = group as usize;
        if g < LANES || !crate::reference::is_power_of_four(group) || block == 0 {
            return None;
        }
        let mut lo = [[0; LANES]; LANES];
        for (j, row) in lo.iter_mut().enumerate() {
            for (c, s) in row.iter_mut().enumerate() {
                *s = h_sign(j, c, LANES);
            }
        }
        let gh = g / LANES;
        let hi = (0..gh * gh).map(|i| h_sign(i / gh, i % gh, gh)).collect();
        Some(Self {
            g,
            block: block.min(g),
            scale: hadamard_scale(group),
            lo,
            hi,
        })
    }

    /// Rotates `x` (a whole number of groups) into `out` (same length).
    pub(crate) fn rotate_into(&self, x: &[f32], out: &mut [f32]) {
        assert_eq!(x.len(), out.len(), "rotation buffers differ in length");
        assert!(
            x.len().is_multiple_of(self.g),
            "not a whole number of groups"
        );
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has AVX-512F (checked just above).
                return unsafe { self.rotate_avx512(x, out) };
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2 (checked just above).
                return unsafe { self.rotate_avx2(x, out) };
            }
        }
        self.rotate_portable(x, out);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    fn rotate_avx512(&self, x: &[f32], out: &mut [f32]) {
        self.rotate_portable(x, out);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn rotate_avx2(&self, x: &[f32], out: &mut [f32]) {
        self.rotate_portable(x, out);
    }

    /// The rotation in plain Rust, inlined into each `target_feature`
    /// wrapper so it is vectorized for that instruction set.
    #[inline(always)]
    fn rotate_portable(&self, x: &[f32], out: &mut [f32]) {
        let mut scaled = vec![0u32; self.g];
        for (src, dst) in x.chunks_exact(self.g).zip(out.chunks_exact_mut(self.g)) {
            // `v · ±scale` is `±(v · scale)` exactly: rounding is symmetric.
            for (s, &v) in scaled.iter_mut().zip(src) {
                *s = (v * self.scale).to_bits();
            }
            self.rotate_group(&scaled, dst);
        }
    }

    /// One group: `scaled` holds `v · scale` as bits.
    #[inline(always)]
    fn rotate_group(&self, scaled: &[u32], dst: &mut [f32]) {
        // `dst` starts at +0.0 as torch's accumulator does (0.0 + -0.0 is
        // +0.0), then takes the block sums in order.
        dst.fill(0.0);
        for (b, terms) in scaled.chunks(self.block).enumerate() {
            let first = b * self.block;
            if self.g >= TILE * LANES {
                for (t, d) in dst.chunks_exact_mut(TILE * LANES).enumerate() {
                    self.block_tile::<TILE>(terms, first, t * TILE, d);
                }
            } else {
                for (t, d) in dst.chunks_exact_mut(LANES).enumerate() {
                    self.block_tile::<1>(terms, first, t, d);
                }
            }
        }
    }

    /// Adds to `dst` (columns of lane groups `gh0..gh0 + T`) the block sum
    /// of `terms` (rows `first..`), each column summed left to right.
    #[inline(always)]
    fn block_tile<const T: usize>(&self, terms: &[u32], first: usize, gh0: usize, dst: &mut [f32]) {
        let gh = self.g / LANES;
        let mut acc = [[0.0f32; LANES]; T];
        for (jj, &v) in terms.iter().enumerate() {
            let j = first + jj;
            let lo = &self.lo[j % LANES];
            let hi = &self.hi[(j / LANES) * gh + gh0..][..T];
            for (a, &h) in acc.iter_mut().zip(hi) {
                let s = v ^ h;
                for (x, &l) in a.iter_mut().zip(lo) {
                    *x += f32::from_bits(s ^ l);
                }
            }
        }
        for (d, a) in dst.chunks_exact_mut(LANES).zip(&acc) {
            for (x, &p) in d.iter_mut().zip(a) {
                *x += p;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::{hadamard, rotate_matmul_naive};

    #[test]
    fn sign_tables_match_the_hadamard_matrix() {
        for g in [16u32, 64, 256] {
            let h = hadamard(g);
            let gu = g as usize;
            for i in 0..gu {
                for j in 0..gu {
                    let neg = h[i * gu + j] < 0.0;
                    assert_eq!(h_sign(i, j, gu) == SIGN, neg, "g {g} ({i},{j})");
                }
            }
        }
    }

    /// Values over many binades, zeros of both signs and subnormal
    /// products: the last bit of every sum depends on the order.
    fn awkward(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                match s % 23 {
                    0 => 0.0,
                    1 => -0.0,
                    2 => f32::from_bits((s >> 40) as u32 & 0x807F_FFFF),
                    _ => {
                        let e = ((s >> 8) % 40) as i32 - 30;
                        let m = ((s >> 16) as u32 & 0x00FF_FFFF) as f32 / 16_777_216.0 + 1.0;
                        let v = m * 2f32.powi(e);
                        if s & 1 == 0 { v } else { -v }
                    }
                }
            })
            .collect()
    }

    #[test]
    fn fast_rotation_is_bit_identical_to_the_naive_one() {
        for (g, block, rows) in [
            (16u32, 128, 5),
            (64, 128, 3),
            (256, 128, 4),
            (256, 256, 1),
            (1024, 128, 2),
            (4096, 128, 1),
            (64, 16, 2),
        ] {
            let x = awkward(g as usize * rows, u64::from(g) * 7 + block as u64);
            let rot = MatmulRotation::new(g, block).expect("g >= 16");
            let mut fast = vec![1.0; x.len()];
            rot.rotate_into(&x, &mut fast);
            let naive = rotate_matmul_naive(&x, g, block);
            let mut portable = vec![1.0; x.len()];
            rot.rotate_portable(&x, &mut portable);
            for (i, ((a, b), c)) in fast.iter().zip(&naive).zip(&portable).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "g {g} block {block} at {i}");
                assert_eq!(c.to_bits(), b.to_bits(), "portable, g {g} at {i}");
            }
        }
    }
}
