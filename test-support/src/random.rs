//! Seeded test inputs: the same seed gives the same values on every machine.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A generator from a seed.
pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// `n` values uniform in `[-range, range)`.
pub fn uniform(rng: &mut ChaCha8Rng, n: usize, range: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-range..range)).collect()
}

/// [`uniform`] from a fresh generator seeded with `seed`.
pub fn uniform_seeded(seed: u64, n: usize, range: f32) -> Vec<f32> {
    uniform(&mut rng(seed), n, range)
}

/// `n` values of magnitude in `[0.05, range)` and random sign: never zero
/// nor tiny, so relative comparisons stay meaningful.
pub fn nonzero(seed: u64, n: usize, range: f32) -> Vec<f32> {
    let mut rng = rng(seed);
    (0..n)
        .map(|_| {
            let m: f32 = rng.random_range(0.05..range);
            if rng.random_bool(0.5) { m } else { -m }
        })
        .collect()
}

/// An `[m, k]` activation: uniform in `[-2, 2)` with one outlier channel
/// (`k / 3`, value 40), as real activations have.
pub fn activations(rng: &mut ChaCha8Rng, m: usize, k: usize) -> Vec<f32> {
    let mut x = uniform(rng, m * k, 2.0);
    x[k / 3] = 40.0;
    x
}

/// Deterministic pseudo-random bytes (xorshift; cheap for large files).
pub fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect()
}
