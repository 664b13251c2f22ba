//! Value parsers for numeric flags with a documented range. A value out of
//! range, or one that means nothing (0 passes, 0 repetitions, 0 bytes), is
//! a parse error that clap reports before any work, naming the flag, the
//! value and the range: never reinterpreted, clamped or wrapped.

/// An integer from `LO` to `HI` (inclusive), as `T` (`usize`, `u32`, `u64`).
pub fn int<T: TryFrom<u64>, const LO: u64, const HI: u64>(s: &str) -> Result<T, String> {
    let range = || format!("expected {LO} to {HI}");
    let n: u64 = s
        .trim()
        .parse()
        .map_err(|e| format!("`{s}`: {e}; {}", range()))?;
    if !(LO..=HI).contains(&n) {
        return Err(format!("{n} is out of range: {}", range()));
    }
    T::try_from(n).map_err(|_| format!("{n} does not fit this machine; {}", range()))
}

/// A size (`512MiB`, `1GiB`, bytes) from `LO` to `HI` bytes.
pub fn bytes<const LO: u64, const HI: u64>(s: &str) -> Result<bytesize::ByteSize, String> {
    let size: bytesize::ByteSize = s.trim().parse().map_err(|e| format!("`{s}`: {e}"))?;
    if !(LO..=HI).contains(&size.as_u64()) {
        return Err(format!(
            "{} bytes is out of range: expected {} to {}",
            size.as_u64(),
            bytesize::ByteSize::b(LO).display().iec(),
            bytesize::ByteSize::b(HI).display().iec()
        ));
    }
    Ok(size)
}

/// A positive finite number up to `HI`.
pub fn positive<const HI: u64>(s: &str) -> Result<f64, String> {
    let x: f64 = s.trim().parse().map_err(|e| format!("`{s}`: {e}"))?;
    if !(x.is_finite() && x > 0.0 && x <= HI as f64) {
        return Err(format!(
            "{x} is out of range: expected a number above 0, at most {HI}"
        ));
    }
    Ok(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_values_are_refused_with_the_range() {
        assert_eq!(int::<usize, 1, 10>("10"), Ok(10));
        let e = int::<usize, 1, 10>("0").expect_err("zero");
        assert!(e.contains("expected 1 to 10"), "{e}");
        let e = int::<usize, 1, 10>("18446744073709551616").expect_err("2^64");
        assert!(e.contains("expected 1 to 10"), "{e}");
        int::<u32, 0, 10>("-1").expect_err("negative");
        assert_eq!(bytes::<1, 1024>("1KiB").map(|b| b.as_u64()), Ok(1024));
        let e = bytes::<1, 1024>("0").expect_err("zero bytes");
        assert!(e.contains("out of range"), "{e}");
        positive::<10>("NaN").expect_err("NaN");
        positive::<10>("0").expect_err("zero");
        positive::<10>("11").expect_err("too large");
        assert_eq!(positive::<10>("2.5"), Ok(2.5));
    }
}
