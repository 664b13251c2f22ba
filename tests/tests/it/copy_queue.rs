//! Streamed weights copied from registered pins on the copy queue: the
//! output is bit-identical to a resident pass, block *i+1*'s copy batch is
//! submitted before block *i*'s kernels and the first two streamed blocks'
//! before any kernel, and `copy_queue: false` keeps every copy on wgpu's
//! queue.
//!
//! Adapters with one queue (the software ones in CI) get the same path on
//! wgpu's own queue (`CopyQueueMode::Shared`, asked for here): the same
//! recording, timeline semaphores and ordering, without the concurrency.

use dynvram_models::mlp_stack::{self, Probe, builtin};
use dynvram_runtime::device::{CopyQueueMode, GpuOptions};
use dynvram_runtime::trace::{Lane, Trace};
use dynvram_runtime::{AdapterChoice, Model, Runtime, RuntimeConfig};
use dynvram_test_support::fixtures;
use dynvram_test_support::gpu::{any_adapter, test_gpu_with};

/// The copy queue where the adapter has one, else the same path on wgpu's
/// queue.
fn choice() -> AdapterChoice {
    AdapterChoice {
        options: GpuOptions {
            copy_queue: CopyQueueMode::Shared,
            ..GpuOptions::default()
        },
        ..AdapterChoice::default()
    }
}

fn runtime(vram_budget: u64, copy_queue: bool) -> Runtime {
    Runtime::new(RuntimeConfig {
        copy_queue,
        adapter: choice(),
        ..RuntimeConfig::with_vram(vram_budget)
    })
    .expect("runtime")
}

#[test]
fn copy_queue_pass_is_bit_identical_and_submitted_one_block_ahead() {
    let name = "copy_queue_pass_is_bit_identical_and_submitted_one_block_ahead";
    let Some(gpu) = test_gpu_with(name, &choice(), any_adapter) else {
        return;
    };
    if gpu.transfer_queue().is_none() {
        eprintln!(
            "{name}: skipped on {} [{}]: no copy queue (needs Vulkan 1.2)",
            gpu.caps.name, gpu.caps.backend
        );
        return;
    }
    drop(gpu);
    let file =
        builtin::ensure_cached_in(&fixtures::test_cache()).expect("write the built-in model");
    let probe = Probe::open(&file).expect("probe");
    let rows = 3;
    let x = probe.input(rows);
    let total = probe.weight_bytes();
    let spec = probe.spec(rows);

    let resident_rt = runtime(4 * total, true);
    let resident = Model::open(&resident_rt, &spec).expect("open resident");
    let want = mlp_stack::forward_gpu(&resident_rt, &resident, &x, rows, None).expect("resident");

    let rt = runtime(total / 4, true);
    let model = Model::open(&rt, &spec).expect("open streamed");
    let blocks = model.block_count();
    // Pass 1 reads the files and pins; pass 2 copies from the pins.
    for pass in 1..=2 {
        let mut trace = Trace::new();
        let got = mlp_stack::forward_gpu(&rt, &model, &x, rows, Some(&mut trace)).expect("pass");
        let same = want
            .out
            .iter()
            .zip(&got.out)
            .all(|(p, q)| p.to_bits() == q.to_bits());
        assert!(same, "pass {pass}: streamed output differs from resident");
        if pass == 1 {
            continue;
        }
        let pinned = got.stats.sources.registered_pin_bytes;
        assert!(pinned > 0, "pass 2 streamed nothing from registered pins");
        let position = |name: &str| trace.events.iter().position(|e| e.name == name);
        let mut queued = 0;
        for i in 0..blocks - 1 {
            let Some(copied) = position(&format!("copy queue: block {}", i + 1)) else {
                continue;
            };
            queued += trace.events[copied].bytes;
            let submitted = position(&format!("submit blocks.{i}")).expect("submit event");
            assert!(
                copied < submitted,
                "block {} copied after block {i} was submitted",
                i + 1
            );
        }
        assert!(
            queued > 0 && queued <= pinned,
            "copy queue carried {queued} of {pinned} pinned bytes"
        );
        // The first two streamed blocks are staged before any kernel (both
        // arenas are free), so the resident blocks' work overlaps copies.
        let is_copy = |e: &&dynvram_runtime::trace::Event| e.name.starts_with("copy queue: ");
        let first_submit = trace
            .events
            .iter()
            .position(|e| e.name.starts_with("submit "))
            .expect("a submit event");
        let early = trace.events[..first_submit].iter().filter(is_copy).count();
        let batches = trace.events.iter().filter(is_copy).count();
        assert_eq!(
            early,
            batches.min(2),
            "copy batches staged before the first submit"
        );
        eprintln!("{name}: {queued} of {pinned} bytes from pins went through the copy queue");
        // The device lanes: every batch and submit seen to run, each batch
        // ending before the unit that reads it starts.
        let lane = |l: Lane| -> Vec<&dynvram_runtime::trace::Event> {
            trace.events.iter().filter(|e| e.lane == l).collect()
        };
        let (ran, copied) = (lane(Lane::Device), lane(Lane::CopyEngine));
        assert_eq!(copied.len(), batches, "device copy spans");
        let device_bytes: u64 = copied.iter().map(|e| e.bytes).sum();
        let host_bytes: u64 = trace.events.iter().filter(is_copy).map(|e| e.bytes).sum();
        assert_eq!(device_bytes, host_bytes, "device copy spans' bytes");
        let submits = trace
            .events
            .iter()
            .filter(|e| e.name.starts_with("submit "))
            .count();
        assert_eq!(ran.len(), submits, "device kernel spans");
        for c in &copied {
            let block = c.name.trim_start_matches("copy ");
            let run = ran
                .iter()
                .find(|r| r.name == format!("run {block}"))
                .expect("the unit reading a batch ran");
            assert!(
                c.start_us + c.dur_us <= run.start_us + 1e-6,
                "{} ended at {} after {} started at {}",
                c.name,
                c.start_us + c.dur_us,
                run.name,
                run.start_us
            );
        }
    }

    // Off: the same passes, no copy-queue batches.
    let off = runtime(total / 4, false);
    let model = Model::open(&off, &spec).expect("open");
    for _ in 0..2 {
        let mut trace = Trace::new();
        let got = mlp_stack::forward_gpu(&off, &model, &x, rows, Some(&mut trace)).expect("pass");
        assert_eq!(want.out, got.out);
        assert!(
            !trace
                .events
                .iter()
                .any(|e| e.name.starts_with("copy queue")),
            "copy_queue: false still used the copy queue"
        );
    }
}
