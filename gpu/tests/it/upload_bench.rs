//! `bench upload` runs end to end on a small file (figures are not checked
//! against times, only that every measurement moved the right bytes).

use dynvram_gpu::device::upload_bench::{UploadBenchOptions, run_upload};
use dynvram_gpu::device::{HostMemoryChoice, RingConfig};
use dynvram_test_support::gpu::test_device;

#[test]
fn upload_bench_runs_on_a_small_file() {
    let Some((device, queue)) = test_device("upload_bench_runs_on_a_small_file") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let options = UploadBenchOptions {
        file: dir.path().join("bench.bin"),
        create_size: Some((3 << 20) + 7),
        threads: 4,
        ring: RingConfig {
            slots: 2,
            slot_size: 1 << 20,
            ..RingConfig::default()
        },
        ring_memories: vec![HostMemoryChoice::Mapped, HostMemoryChoice::Host],
        file_import: true,
        reps: 1,
        copy_probe: None,
    };
    let report = run_upload(&device, &queue, &options).expect("bench");
    // raw warm, 2 memcpy, file → new pin, 2 pins, 2 per file-map import
    // (or a note each), 2 rings, raw cold, ring cold.
    let refused = report
        .notes
        .iter()
        .filter(|n| n.contains("refused"))
        .count();
    assert_eq!(report.figures.len(), 14 - 2 * refused, "{report:?}");
    for f in &report.figures {
        assert!(f.bytes > 0 && f.seconds >= 0.0, "{f}");
    }
    assert_eq!(report.warm_counters.len(), 2);
    for (name, c) in &report.warm_counters {
        assert_eq!(c.bytes_staged, (3 << 20) + 7, "{name}");
        assert_eq!(c.slots_used, 4, "{name}");
    }
}
