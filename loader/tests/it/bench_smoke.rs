//! The host-side figures of `bench upload` run on a small file (figures are
//! not checked against times, only that every measurement moved the right
//! bytes). The GPU figures are the runtime's tests.

use dynvram_loader::bench::{median_seconds, memcpy, raw_read, write_test_file};
use dynvram_loader::{ReaderConfig, ReaderPool};

#[test]
fn host_figures_run_on_a_small_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bench.bin");
    write_test_file(&file, (3 << 20) + 7).expect("test file");
    assert_eq!(std::fs::metadata(&file).expect("stat").len(), (3 << 20) + 7);
    let pool = ReaderPool::new(ReaderConfig {
        threads: 4,
        ..ReaderConfig::default()
    })
    .expect("pool");
    for cold in [false, true] {
        let f = raw_read(&file, &pool, cold, 2).expect("raw read");
        assert_eq!(f.bytes, (3 << 20) + 7, "{f}");
        assert!(f.seconds >= 0.0, "{f}");
    }
    assert_eq!(memcpy(1000, 3, 1).bytes, 1000);
    let mut runs = 0;
    let err = median_seconds(3, || {
        runs += 1;
        if runs == 2 { Err("second run") } else { Ok(()) }
    });
    assert_eq!(
        (err, runs),
        (Err("second run"), 2),
        "an error stops the runs"
    );
}
