//! How much of some host memory sits on transparent huge pages (Linux
//! `/proc/self/smaps`, `AnonHugePages`): the registered pins ask for them
//! (`MADV_HUGEPAGE`), and a pin the kernel could not back with them is
//! filled more slowly and, behind an IOMMU, may be copied to the GPU more
//! slowly too — a figure to read beside a run's stream rate.

/// Bytes on transparent huge pages among `ranges` (start address, length)
/// of this process, or `None` where `/proc/self/smaps` cannot be read (not
/// Linux, or no procfs).
pub fn huge_page_bytes(ranges: &[(u64, u64)]) -> Option<u64> {
    if ranges.is_empty() {
        return Some(0);
    }
    let text = std::fs::read_to_string("/proc/self/smaps").ok()?;
    Some(huge_bytes_in(&text, ranges))
}

/// [`huge_page_bytes`] over `smaps` text: each mapping's `AnonHugePages`,
/// counted up to the bytes it shares with `ranges` (a mapping can hold more
/// than the ranges asked about).
pub fn huge_bytes_in(smaps: &str, ranges: &[(u64, u64)]) -> u64 {
    let mut total = 0u64;
    // The bytes the current mapping shares with `ranges`.
    let mut shared = 0u64;
    for line in smaps.lines() {
        if let Some((start, end)) = mapping_header(line) {
            shared = ranges
                .iter()
                .map(|&(s, len)| end.min(s.saturating_add(len)).saturating_sub(start.max(s)))
                .sum();
        } else if let Some(v) = line.strip_prefix("AnonHugePages:") {
            let kb = v
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
            total += kb.saturating_mul(1024).min(shared);
        }
    }
    total
}

/// A mapping's first line, `start-end perms ...` in hex: its range.
fn mapping_header(line: &str) -> Option<(u64, u64)> {
    let range = line.split_whitespace().next()?;
    let (s, e) = range.split_once('-')?;
    let start = u64::from_str_radix(s, 16).ok()?;
    let end = u64::from_str_radix(e, 16).ok()?;
    (start <= end).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
7f0000000000-7f0004000000 rw-p 00000000 00:00 0 
Size:              65536 kB
AnonHugePages:     61440 kB
7f0004000000-7f0004001000 r--p 00000000 08:01 42                         /usr/lib/libc.so
Size:                  4 kB
AnonHugePages:         0 kB
7f1000000000-7f1000400000 rw-p 00000000 00:00 0 
Size:               4096 kB
AnonHugePages:      4096 kB
";

    #[test]
    fn counts_the_huge_pages_of_the_mappings_the_ranges_touch() {
        // The first mapping whole: its 60 MiB.
        assert_eq!(
            huge_bytes_in(SMAPS, &[(0x7f00_0000_0000, 64 << 20)]),
            60 << 20
        );
        // Half of it: at most the bytes shared.
        assert_eq!(
            huge_bytes_in(SMAPS, &[(0x7f00_0000_0000, 32 << 20)]),
            32 << 20
        );
        // Both anonymous mappings.
        let both = [(0x7f00_0000_0000, 64 << 20), (0x7f10_0000_0000, 4 << 20)];
        assert_eq!(huge_bytes_in(SMAPS, &both), 64 << 20);
        // Nothing asked, or memory outside every mapping.
        assert_eq!(huge_bytes_in(SMAPS, &[]), 0);
        assert_eq!(huge_bytes_in(SMAPS, &[(0x1000, 4096)]), 0);
        assert_eq!(huge_page_bytes(&[]), Some(0));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_this_process() {
        let v = vec![1u8; 8 << 20];
        let got = huge_page_bytes(&[(v.as_ptr() as u64, v.len() as u64)]);
        assert!(got.is_some_and(|b| b <= v.len() as u64), "{got:?}");
    }
}
