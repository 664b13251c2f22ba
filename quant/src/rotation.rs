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
//! - with AVX2 (chosen at run time), columns are summed in tiles of 64
//!   held in registers across a block of `j`, and the `hi`
//!   sign is folded into the accumulators (see [`x86`]): one add per
//!   register and term.

use crate::format::is_power_of_four;

/// Columns of one lane group: the two low base-4 digits of a column.
const LANES: usize = 16;

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
    /// Where the block sums run.
    isa: Isa,
}

impl MatmulRotation {
    /// The rotation for `group` (a power of 4) summed in blocks of `block`
    /// terms; `None` for groups under 16 (too small to be worth it).
    pub(crate) fn new(group: u32, block: usize) -> Option<Self> {
        let g = group as usize;
        let block = block.min(g);
        // Blocks are whole lane groups of rows (128 or G in practice).
        if g < LANES || !is_power_of_four(group) || !block.is_multiple_of(LANES) {
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
            block,
            scale: hadamard_scale(group),
            lo,
            hi,
            isa: Isa::detect(),
        })
    }

    /// Rotates `x` (a whole number of groups) into `out` (same length).
    pub(crate) fn rotate_into(&self, x: &[f32], out: &mut [f32]) {
        assert_eq!(x.len(), out.len(), "rotation buffers differ in length");
        assert!(
            x.len().is_multiple_of(self.g),
            "not a whole number of groups"
        );
        let mut scaled = vec![0u32; self.g];
        for (src, dst) in x.chunks_exact(self.g).zip(out.chunks_exact_mut(self.g)) {
            // `v · ±scale` is `±(v · scale)` exactly: rounding is symmetric.
            for (s, &v) in scaled.iter_mut().zip(src) {
                *s = (v * self.scale).to_bits();
            }
            // `dst` starts at +0.0 as torch's accumulator does (0.0 + -0.0
            // is +0.0), then takes the block sums in order.
            dst.fill(0.0);
            for (b, terms) in scaled.chunks(self.block).enumerate() {
                self.add_block_sum(terms, b * self.block / LANES, dst);
            }
        }
    }

    /// Adds to `dst` the block sum of `terms` (`v · scale` as bits, rows
    /// from `first · 16` on), each column summed left to right.
    fn add_block_sum(&self, terms: &[u32], first: usize, dst: &mut [f32]) {
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Isa::Avx2` is only chosen when the CPU has AVX2.
            Isa::Avx2 => unsafe { x86::block_avx2(self, terms, first, dst) },
            Isa::Portable => self.block_portable(terms, first, dst),
        }
    }

    /// [`Self::add_block_sum`] in plain Rust, a lane group at a time.
    fn block_portable(&self, terms: &[u32], first: usize, dst: &mut [f32]) {
        let gh = self.g / LANES;
        for (gi, d) in dst.chunks_exact_mut(LANES).enumerate() {
            let mut acc = [0.0f32; LANES];
            for (jh, vals) in terms.chunks_exact(LANES).enumerate() {
                let h = self.hi[(first + jh) * gh + gi];
                for (lo, &v) in self.lo.iter().zip(vals) {
                    for (a, &l) in acc.iter_mut().zip(lo) {
                        *a += f32::from_bits(v ^ h ^ l);
                    }
                }
            }
            for (x, &a) in d.iter_mut().zip(&acc) {
                *x += a;
            }
        }
    }
}

/// The instruction set the block sums run on, chosen once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Isa {
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Portable,
}

impl Isa {
    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                return Isa::Avx2;
            }
        }
        Isa::Portable
    }
}

/// The block sums with x86 intrinsics: a tile of lane groups is summed in
/// registers (autovectorized, the accumulators went through the stack).
///
/// Each accumulator holds its column sums times the current sign `σ` of its
/// lane group (the `hi` entry, constant for 16 rows): adding `σ·t` to `s`
/// is adding `t` to `σ·s`, exactly (rounding is symmetric), so a row costs
/// one add per register and a change of `σ` one sign flip. (Only the sign of
/// an exact-zero partial can differ, and `dst`'s `+0.0 + ±0.0` erases it.)
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{LANES, MatmulRotation};

    /// `dst += ` block sum, tiles of 4 lane groups (8 of the 16 registers).
    #[target_feature(enable = "avx2")]
    pub(super) fn block_avx2(rot: &MatmulRotation, terms: &[u32], first: usize, dst: &mut [f32]) {
        let gh = rot.g / LANES;
        let four = gh.is_multiple_of(4);
        for (i, d) in dst
            .chunks_exact_mut(LANES * if four { 4 } else { 1 })
            .enumerate()
        {
            if four {
                tile_avx2::<4>(rot, terms, first, i * 4, d);
            } else {
                tile_avx2::<1>(rot, terms, first, i, d);
            }
        }
    }

    #[target_feature(enable = "avx2")]
    fn flip256(a: __m256, sign: u32) -> __m256 {
        _mm256_xor_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(sign as i32)))
    }

    /// Lane groups `g0..g0 + T` of `dst`, two registers each.
    #[target_feature(enable = "avx2")]
    fn tile_avx2<const T: usize>(
        rot: &MatmulRotation,
        terms: &[u32],
        first: usize,
        g0: usize,
        dst: &mut [f32],
    ) {
        let gh = rot.g / LANES;
        let mut acc = [[_mm256_setzero_ps(); 2]; T];
        let mut sign = [0u32; T];
        for (jh, vals) in terms.chunks_exact(LANES).enumerate() {
            let hi = &rot.hi[(first + jh) * gh + g0..][..T];
            for ((a, s), &h) in acc.iter_mut().zip(&mut sign).zip(hi) {
                *a = a.map(|r| flip256(r, *s ^ h));
                *s = h;
            }
            for (lo, &v) in rot.lo.iter().zip(vals) {
                let v = _mm256_set1_epi32(v as i32);
                // SAFETY: `lo` is 16 `u32`s, two 32-byte halves; the loads take any alignment.
                let lo = unsafe {
                    let p = lo.as_ptr().cast::<__m256i>();
                    [_mm256_loadu_si256(p), _mm256_loadu_si256(p.add(1))]
                };
                let t = lo.map(|l| _mm256_castsi256_ps(_mm256_xor_si256(v, l)));
                for a in acc.iter_mut() {
                    a[0] = _mm256_add_ps(a[0], t[0]);
                    a[1] = _mm256_add_ps(a[1], t[1]);
                }
            }
        }
        for ((d, a), s) in dst.chunks_exact_mut(LANES).zip(acc).zip(sign) {
            for (half, r) in d.chunks_exact_mut(LANES / 2).zip(a) {
                let p = half.as_mut_ptr();
                // SAFETY: `half` is 8 `f32`s; the load and store take any alignment.
                unsafe { _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), flip256(r, s))) };
            }
        }
    }
}

/// `1/√G`: the magnitude of every entry of the `G x G` Hadamard matrix (a
/// power of 2 for a power of 4).
pub(crate) fn hadamard_scale(g: u32) -> f32 {
    1.0 / (g as f32).sqrt()
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

    /// Small values from a few binades: many sums cancel to exact zeros
    /// (of either sign on the way) and hit ties.
    fn cancelling(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                [0.0, -0.0, 1.0, -1.0, 0.5, -2.0, 3.0, 1.5e-7][(s >> 20) as usize % 8]
            })
            .collect()
    }

    /// Every instruction set this CPU has gives the naive rotation's bits.
    #[test]
    fn fast_rotation_is_bit_identical_to_the_naive_one() {
        let mut isas = vec![Isa::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                isas.push(Isa::Avx2);
            }
        }
        for (g, block, rows) in [
            (16u32, 128, 5),
            (64, 128, 3),
            (256, 128, 4),
            (256, 256, 1),
            (1024, 128, 2),
            (4096, 128, 1),
            (64, 16, 2),
        ] {
            let seed = u64::from(g) * 7 + block as u64;
            for x in [
                awkward(g as usize * rows, seed),
                cancelling(g as usize * rows, seed),
            ] {
                let naive = rotate_matmul_naive(&x, g, block);
                let mut rot = MatmulRotation::new(g, block).expect("g >= 16");
                for &isa in &isas {
                    rot.isa = isa;
                    let mut fast = vec![1.0; x.len()];
                    rot.rotate_into(&x, &mut fast);
                    for (i, (a, b)) in fast.iter().zip(&naive).enumerate() {
                        assert_eq!(
                            a.to_bits(),
                            b.to_bits(),
                            "{isa:?} g {g} block {block} at {i}"
                        );
                    }
                }
            }
        }
    }
}
