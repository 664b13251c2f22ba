//! Bit reversal, the ordering behind offload balancing ("max scatter", docs/behaviour.md, Pins).
//!
//! Giving the `n`-th pinned weight the priority `bit_reverse16(n)` makes the
//! set of lowest-priority weights a van der Corput subset of execution order:
//! evenly spread over the pass instead of bunched at its end.

/// Reverses the low `bits` bits of `i`; higher bits of `i` are ignored.
///
/// `bits` is clamped to 64; `bits == 0` gives 0.
///
/// ```
/// use dynvram_memory::bit_reverse;
/// assert_eq!(bit_reverse(0b0001, 4), 0b1000);
/// assert_eq!(bit_reverse(0b0110, 4), 0b0110);
/// assert_eq!(bit_reverse(0b1_0001, 4), 0b1000); // bit 4 is outside the width
/// ```
pub fn bit_reverse(i: u64, bits: u32) -> u64 {
    match bits.min(64) {
        0 => 0,
        b => i.reverse_bits() >> (64 - b),
    }
}

/// Reverses the low 16 bits of `i` (the pin-priority function of docs/behaviour.md, Pins).
pub fn bit_reverse16(i: u64) -> u16 {
    // The result has at most 16 bits, so the cast is lossless.
    bit_reverse(i, 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The obvious loop, as a reference.
    fn naive(i: u64, bits: u32) -> u64 {
        (0..bits).fold(0, |acc, b| acc | (((i >> b) & 1) << (bits - 1 - b)))
    }

    #[test]
    fn exhaustive_small_widths() {
        for bits in 0..=12u32 {
            let n = 1u64 << bits;
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let r = bit_reverse(i, bits);
                assert_eq!(r, naive(i, bits), "i={i} bits={bits}");
                assert!(r < n);
                assert_eq!(bit_reverse(r, bits), i, "involution, i={i} bits={bits}");
                assert!(!seen[r as usize], "permutation, i={i} bits={bits}");
                seen[r as usize] = true;
            }
        }
    }

    #[test]
    fn sixteen_bits_and_wide_inputs() {
        for i in 0..=u16::MAX as u64 {
            assert_eq!(bit_reverse16(i) as u64, naive(i, 16));
            assert_eq!(
                bit_reverse16(i + (1 << 16)),
                bit_reverse16(i),
                "high bits ignored"
            );
        }
        assert_eq!(bit_reverse(1, 64), 1 << 63);
        assert_eq!(bit_reverse(1, 200), 1 << 63, "width clamped to 64");
        assert_eq!(bit_reverse(u64::MAX, 0), 0);
    }
}
