//! The reader pool reads files bit-exactly in 2 MiB (or smaller) tasks and
//! reports a short read for a file truncated after it was opened.

use dynvram_loader::{ByteSource, FileRange, HostBytes, LoadError, ReaderConfig, ReaderPool};
use dynvram_test_support::random;
use dynvram_test_support::safetensors::write_bytes;

fn range<'a>(
    file: &'a std::fs::File,
    path: &'a std::path::Path,
    start: u64,
    len: u64,
) -> FileRange<'a> {
    FileRange {
        file,
        path,
        tensor: "t",
        start,
        len,
    }
}

#[test]
fn reads_odd_sizes_bit_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = random::bytes((5 << 20) + 12_345, 7);
    let path = write_bytes(dir.path(), "blob", &data);
    let file = std::fs::File::open(&path).expect("open");
    for config in [
        ReaderConfig::default(),
        ReaderConfig {
            threads: 3,
            task_size: 4096,
            drop_behind: true,
        },
        ReaderConfig {
            threads: 0,
            ..ReaderConfig::default()
        },
    ] {
        let pool = ReaderPool::new(config).expect("pool");
        for (start, len) in [
            (0u64, data.len() as u64),
            (1, 1),
            (3, 4097),
            (777, (2 << 20) + 1),
            (12_345, 5 << 20),
        ] {
            let mut dst = vec![0u8; len as usize];
            pool.read_into(&range(&file, &path, start, len), 0, &mut dst)
                .expect("read");
            assert!(
                dst == data[start as usize..(start + len) as usize],
                "{config:?} start {start} len {len}"
            );
        }
        // A sub-range of a source (src_offset > 0).
        let mut dst = vec![0u8; 3 << 20];
        let src = range(&file, &path, 100, data.len() as u64 - 100);
        pool.read_into(&src, 999, &mut dst).expect("read");
        assert!(dst == data[1099..1099 + (3 << 20)]);
    }
}

#[test]
fn host_bytes_source() {
    let data = random::bytes(3 << 20, 8);
    let pool = ReaderPool::new(ReaderConfig::default()).expect("pool");
    let mut dst = vec![0u8; data.len() - 5];
    pool.read_into(&HostBytes(&data), 5, &mut dst)
        .expect("read");
    assert!(dst == data[5..]);
    let err = pool
        .read_into(&HostBytes(&data), 6, &mut dst)
        .expect_err("past the end");
    assert!(matches!(err, LoadError::RangeOutsideTensor { .. }), "{err}");
}

#[test]
fn truncated_after_open_reports_short_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = random::bytes(7 << 20, 9);
    let path = write_bytes(dir.path(), "blob", &data);
    let file = std::fs::File::open(&path).expect("open");
    let src = range(&file, &path, 0, data.len() as u64);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|h| h.set_len((5 << 20) + 100))
        .expect("truncate");
    let pool = ReaderPool::new(ReaderConfig::default()).expect("pool");
    let mut dst = vec![0u8; data.len()];
    let err = pool.read_into(&src, 0, &mut dst).expect_err("short read");
    match &err {
        LoadError::ShortRead {
            file,
            tensor,
            offset,
            expected,
            got,
        } => {
            assert_eq!((file, tensor.as_str()), (&path, "t"));
            // The task that straddles the cut: [4 MiB, 6 MiB) got 1 MiB + 100.
            assert_eq!(
                (*offset, *expected, *got),
                (4 << 20, 2 << 20, (1 << 20) + 100)
            );
        }
        other => panic!("expected ShortRead, got {other}"),
    }
    assert!(err.to_string().contains("blob"), "{err}");
    // The pool is still usable afterwards.
    let mut small = vec![0u8; 1000];
    pool.read_into(&src, 10, &mut small)
        .expect("read before the cut");
    assert!(small == data[10..1010]);
    assert_eq!(src.len(), data.len() as u64);
}
