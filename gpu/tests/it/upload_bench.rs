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

#[test]
fn copy_probe_times_each_host_memory_on_a_device_of_its_own() {
    let name = "copy_probe_times_each_host_memory_on_a_device_of_its_own";
    let Some(gpu) =
        dynvram_test_support::gpu::test_gpu(name, dynvram_test_support::gpu::any_adapter)
    else {
        return;
    };
    if gpu.caps.backend != "vulkan" {
        eprintln!(
            "{name}: skipped on {}: the probe needs Vulkan",
            gpu.caps.backend
        );
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let options = UploadBenchOptions {
        file: dir.path().join("bench.bin"),
        create_size: Some(4 << 20),
        threads: 2,
        ring: RingConfig::default(),
        ring_memories: Vec::new(),
        file_import: false,
        reps: 1,
        copy_probe: Some(gpu.caps.name.clone()),
    };
    let report = run_upload(&gpu.device, &gpu.queue, &options).expect("bench");
    let probed: Vec<_> = report
        .figures
        .iter()
        .filter(|f| f.name.contains("queue"))
        .collect();
    assert!(
        report.notes.iter().all(|n| !n.starts_with("copy probe")),
        "{:?}",
        report.notes
    );
    // At least imported RAM (every Vulkan device here imports) on the
    // universal queue, each a whole 4 MiB copy.
    assert!(
        probed.iter().any(|f| f.name.contains("universal queue")),
        "{report:?}"
    );
    for f in probed {
        assert!(f.bytes == 4 << 20 && f.seconds > 0.0, "{f}");
    }
}
