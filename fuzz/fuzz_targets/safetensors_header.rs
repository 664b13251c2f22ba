//! The safetensors header parser on arbitrary bytes: the first 8 bytes give
//! the data-section length, the rest is the header JSON. Whatever it accepts
//! must satisfy the index's invariants (ranges inside the data section, byte
//! counts matching dtype × shape, no two non-empty tensors overlapping).
#![no_main]

use std::path::Path;

use dynvram_loader::{byte_count, parse_header};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((len, header)) = data.split_first_chunk::<8>() else {
        return;
    };
    let data_start = 8 + header.len() as u64;
    // A real caller passes `file_len − data_start`, so the sum never overflows.
    let data_len = u64::from_le_bytes(*len).min(u64::MAX - data_start);
    let Ok(parsed) = parse_header(Path::new("fuzz.safetensors"), header, data_len, data_start)
    else {
        return;
    };
    let end = data_start + data_len;
    let mut last_end = data_start;
    for t in &parsed.tensors {
        assert!(t.range.start >= data_start && t.range.end <= end, "{t:?}");
        assert!(t.range.start <= t.range.end, "{t:?}");
        assert_eq!(byte_count(t.dtype, &t.shape), Ok(t.len()), "{t:?}");
        if !t.is_empty() {
            assert!(t.range.start >= last_end, "overlap accepted: {t:?}");
            last_end = t.range.end;
        }
    }
});
