//! Which variants of a kernel a test case runs.
//!
//! The kernel tests cross shapes with variants (tunings, subgroup or
//! portable kernels, activation dtypes), and every variant is a pipeline
//! the software adapters compile with LLVM — about a second each on
//! lavapipe, so the full cross products made CI's three adapter stages take
//! most of an hour. By default a case runs a rotating share of the
//! variants, so that consecutive cases run different ones and every variant
//! runs on several shapes; `DYNVRAM_THOROUGH=1` runs every combination (the
//! device runs and anyone changing a kernel).

/// `DYNVRAM_THOROUGH=1`: every case runs every variant.
pub fn thorough() -> bool {
    std::env::var("DYNVRAM_THOROUGH").is_ok_and(|v| v == "1")
}

/// The variants case `case` runs: `take` of `all`, starting at `case ·
/// take` (wrapping), or all of them under [`thorough`] or where `take`
/// covers them. Over `all.len() / take` consecutive cases every variant
/// runs once.
pub fn rotation<T: Clone>(all: &[T], case: usize, take: usize) -> Vec<T> {
    if thorough() || take >= all.len() {
        return all.to_vec();
    }
    (0..take)
        .map(|i| all[(case * take + i) % all.len()].clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_cases_cover_every_variant() {
        if thorough() {
            return; // every case gets everything: nothing to check here
        }
        let all = [10, 11, 12, 13, 14];
        assert_eq!(rotation(&all, 0, 2), [10, 11]);
        assert_eq!(rotation(&all, 1, 2), [12, 13]);
        assert_eq!(rotation(&all, 2, 2), [14, 10]);
        let mut seen: Vec<i32> = (0..3).flat_map(|c| rotation(&all, c, 2)).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen, all);
        assert_eq!(rotation(&[false, true], 7, 1), [true]);
        assert_eq!(rotation(&[false, true], 7, 2), [false, true]);
        assert_eq!(rotation(&[false], 3, 1), [false]);
    }
}
