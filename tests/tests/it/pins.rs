//! Pins used by passes (docs/behaviour.md, Pins): a pass streaming from registered pins is
//! bit-identical to one reading the file; the pin policy's ceiling and RAM
//! floor hold under a simulated small machine; outside RAM pressure frees
//! pins; `--fast-disk` keeps no unregistered RAM copies; pins built in the
//! background, and ahead of a model's first pass, feed the passes as well.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::common::builtin_model;
use dynvram_memory::{GIB, MIB, RamReading};
use dynvram_models::mlp_stack::{self, Probe};
use dynvram_runtime::{Model, PinSettings, RamFigures, RamReader, Runtime, RuntimeConfig};
use dynvram_test_support::gpu::{any_adapter, have_gpu, test_gpu};

fn runtime(vram_budget: u64, pins: PinSettings, fast_disk: bool) -> Runtime {
    Runtime::new(RuntimeConfig {
        pins,
        fast_disk,
        ..RuntimeConfig::with_vram(vram_budget)
    })
    .expect("runtime")
}

/// A simulated machine: `free` bytes above the 2 GiB floor the policy keeps.
fn small_machine(free: u64, max_pinned: Option<u64>) -> PinSettings {
    PinSettings {
        enabled: true,
        max_pinned,
        ram: RamFigures::Simulated {
            total: 2 * GIB + free,
            others: 0,
        },
        ..PinSettings::default()
    }
}

fn off() -> PinSettings {
    PinSettings {
        enabled: false,
        ..PinSettings::default()
    }
}

struct Setup {
    probe: Probe,
    rows: usize,
    x: Vec<f32>,
}

fn setup() -> Setup {
    let probe = Probe::open(&builtin_model()).expect("probe");
    let rows = 2;
    let x = probe.input(rows);
    Setup { probe, rows, x }
}

/// Whether the test adapter imports host RAM (its pins are imported, not
/// mapped buffers); `None` where there is no adapter (the test is skipped).
fn host_import(name: &str) -> Option<bool> {
    test_gpu(name, any_adapter).map(|gpu| gpu.host_import)
}

/// The reference every test compares with: a pass without pins at a
/// budget that streams, its runtime and model.
fn file_pass(s: &Setup) -> (u64, Runtime, Model, mlp_stack::GpuForward) {
    let budget = s.probe.weight_bytes() / 4;
    let plain = runtime(budget, off(), false);
    let model = Model::open(&plain, &s.probe.spec(s.rows)).expect("open");
    let want = mlp_stack::forward_gpu(&plain, &model, &s.x, s.rows, None).expect("file pass");
    (budget, plain, model, want)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

#[test]
fn passes_from_registered_pins_are_bit_identical_to_file_passes() {
    let name = "passes_from_registered_pins_are_bit_identical_to_file_passes";
    let Some(host_import) = host_import(name) else {
        return;
    };
    let s = setup();
    let (budget, plain, _, want) = file_pass(&s);
    let streamed = want.stats.streamed_bytes;
    assert!(streamed > 0, "the budget forces streaming");
    assert_eq!(want.stats.sources.file_bytes, streamed);
    assert!(!plain.pin_report().enabled);
    for background in [true, false] {
        pinned_passes(&s, budget, &want.out, streamed, host_import, background);
    }
}

/// `passes_from_registered_pins_are_bit_identical_to_file_passes` with pins
/// built in the background or by the pass itself.
fn pinned_passes(
    s: &Setup,
    budget: u64,
    want: &[f32],
    streamed: u64,
    host_import: bool,
    background: bool,
) {
    let settings = PinSettings {
        background,
        ..small_machine(4 * GIB, None)
    };
    let rt = runtime(budget, settings, false);
    let model = Model::open(&rt, &s.probe.spec(s.rows)).expect("open");
    let first = mlp_stack::forward_gpu(&rt, &model, &s.x, s.rows, None).expect("pass 1");
    // The first pass reads every streamed weight from the file (into its
    // pin, or through the ring while the pin is built).
    assert_eq!(
        first.stats.sources.file_bytes, streamed,
        "{:?}",
        first.stats
    );
    rt.finish_pins();
    let report = rt.pin_report();
    assert_eq!(report.registered_bytes, report.pinned_bytes, "{report:?}");
    assert!(report.registered_bytes >= streamed, "{report:?}");
    assert_eq!(report.ram_copies, 0);
    if host_import {
        assert_eq!(report.mapped_pins, 0, "imported host RAM: {report:?}");
    }
    // Linux says how much of the imported pins sits on huge pages: never
    // more than they hold.
    if cfg!(target_os = "linux") {
        let huge = report.huge_page_bytes.expect("smaps read");
        assert!(huge <= report.registered_bytes, "{report:?}");
    }
    let mut trace = dynvram_runtime::trace::Trace::new();
    let second =
        mlp_stack::forward_gpu(&rt, &model, &s.x, s.rows, Some(&mut trace)).expect("pass 2");
    assert_eq!(
        second.stats.sources,
        dynvram_runtime::StreamSources {
            registered_pin_bytes: streamed,
            ram_pin_bytes: 0,
            file_bytes: 0,
        },
        "the second pass streams from pins only"
    );
    assert!(
        trace
            .events
            .iter()
            .any(|e| e.name.ends_with(" B from registered pins")),
        "the trace names the pins"
    );
    assert_eq!(bits(&first.out), bits(want), "pass 1 differs");
    assert_eq!(bits(&second.out), bits(want), "pass 2 (from pins) differs");
    assert!(s.probe.verify(&model, &s.x, &second).expect("verify").pass);

    rt.release_pins(&model);
    let report = rt.pin_report();
    assert_eq!(
        (
            report.pinned_bytes,
            report.imported_pins + report.mapped_pins
        ),
        (0, 0)
    );
    let third = mlp_stack::forward_gpu(&rt, &model, &s.x, s.rows, None).expect("pass 3");
    assert_eq!(
        third.stats.sources.file_bytes, streamed,
        "released: re-read"
    );
    assert_eq!(bits(&third.out), bits(want));

    // Closing the model frees the pins it took again in pass 3.
    assert!(rt.pin_report().pinned_bytes > 0, "pass 3 pinned again");
    rt.finish_pins();
    drop(model);
    let report = rt.pin_report();
    assert_eq!(
        (
            report.pinned_bytes,
            report.imported_pins + report.mapped_pins
        ),
        (0, 0),
        "a dropped model leaves no pins behind"
    );
}

#[test]
fn pins_respect_the_ceiling_and_floor_of_a_small_simulated_machine() {
    let name = "pins_respect_the_ceiling_and_floor_of_a_small_simulated_machine";
    let Some(host_import) = host_import(name) else {
        return;
    };
    let s = setup();
    let (budget, _, _, want) = file_pass(&s);
    let streamed = want.stats.streamed_bytes;

    // RAM for about half the streamed bytes above the floor, and a
    // registration ceiling of a quarter: some weights pin in plain RAM,
    // some stream from the file.
    let free = streamed / 2;
    let ceiling = streamed / 4;
    let rt = runtime(budget, small_machine(free, Some(ceiling)), false);
    let model = Model::open(&rt, &s.probe.spec(s.rows)).expect("open");
    for pass in 0..3 {
        let out = mlp_stack::forward_gpu(&rt, &model, &s.x, s.rows, None).expect("pass");
        assert_eq!(bits(&out.out), bits(&want.out), "pass {pass} differs");
        rt.finish_pins();
        let r = rt.pin_report();
        assert!(r.registered_bytes <= ceiling, "ceiling: {r:?}");
        assert!(r.pinned_bytes <= free, "RAM floor: {r:?}");
        assert!(
            r.registered_bytes > 0 && r.pinned_bytes > r.registered_bytes,
            "both tiers used: {r:?}"
        );
        // Imported pins move to plain RAM when unregistered; mapped ones
        // (GL) cannot be read back and are re-read from the file when needed.
        if host_import {
            assert!(r.ram_copies > 0, "{r:?}");
        }
        let src = out.stats.sources;
        assert_eq!(src.total(), streamed);
        if pass > 0 {
            assert!(
                src.registered_pin_bytes + src.ram_pin_bytes > 0 && src.file_bytes > 0,
                "pins and the file both feed pass {pass}: {src:?}"
            );
        }
    }
}

#[test]
fn fast_disk_keeps_no_unregistered_ram_copies() {
    let name = "fast_disk_keeps_no_unregistered_ram_copies";
    if !have_gpu(name) {
        return;
    }
    let s = setup();
    let (budget, _, _, want) = file_pass(&s);
    let streamed = want.stats.streamed_bytes;

    let ceiling = streamed / 3;
    let rt = runtime(
        budget,
        small_machine(64 * MIB + streamed, Some(ceiling)),
        true,
    );
    assert!(rt.pin_report().fast_disk);
    let model = Model::open(&rt, &s.probe.spec(s.rows)).expect("open");
    for pass in 0..2 {
        let out = mlp_stack::forward_gpu(&rt, &model, &s.x, s.rows, None).expect("pass");
        assert_eq!(bits(&out.out), bits(&want.out), "pass {pass} differs");
        rt.finish_pins();
        let r = rt.pin_report();
        assert_eq!(r.ram_copies, 0, "no plain-RAM copies: {r:?}");
        assert_eq!(r.pinned_bytes, r.registered_bytes, "{r:?}");
        assert!(
            r.registered_bytes > 0 && r.registered_bytes <= ceiling,
            "{r:?}"
        );
        let src = out.stats.sources;
        assert_eq!(src.ram_pin_bytes, 0, "{src:?}");
        if pass > 0 {
            assert!(
                src.registered_pin_bytes > 0 && src.file_bytes > 0,
                "{src:?}"
            );
        }
    }
}

#[test]
fn outside_ram_pressure_frees_pins_at_the_next_pass() {
    let name = "outside_ram_pressure_frees_pins_at_the_next_pass";
    if !have_gpu(name) {
        return;
    }
    let s = setup();
    let budget = s.probe.weight_bytes() / 4;
    let available = Arc::new(AtomicU64::new(8 * GIB));
    let seen = available.clone();
    let reader: RamReader = Arc::new(move || {
        Ok(RamReading {
            total: 16 * GIB,
            available: seen.load(Ordering::Relaxed),
        })
    });
    let settings = PinSettings {
        enabled: true,
        max_pinned: None,
        ram: RamFigures::Custom(reader),
        ..PinSettings::default()
    };
    let rt = runtime(budget, settings, false);
    let model = Model::open(&rt, &s.probe.spec(s.rows)).expect("open");
    let first = mlp_stack::forward_gpu(&rt, &model, &s.x, s.rows, None).expect("pass 1");
    let streamed = first.stats.streamed_bytes;
    rt.finish_pins();
    assert!(rt.pin_report().pinned_bytes >= streamed);
    // Another program takes RAM: free RAM falls below the 2 GiB floor.
    available.store(GIB, Ordering::Relaxed);
    let second = mlp_stack::forward_gpu(&rt, &model, &s.x, s.rows, None).expect("pass 2");
    let r = rt.pin_report();
    assert_eq!(
        (
            r.pinned_bytes,
            r.imported_pins + r.mapped_pins + r.ram_copies
        ),
        (0, 0),
        "{r:?}"
    );
    assert_eq!(second.stats.sources.file_bytes, streamed);
    assert_eq!(bits(&second.out), bits(&first.out));
}

#[test]
fn pins_built_ahead_feed_the_first_pass() {
    let name = "pins_built_ahead_feed_the_first_pass";
    let Some(host_import) = host_import(name) else {
        return;
    };
    let s = setup();
    let (budget, plain, model, want) = file_pass(&s);
    let streamed = want.stats.streamed_bytes;
    assert_eq!(model.pin_ahead(&plain).expect("no pins"), 0, "pins are off");

    let rt = runtime(budget, small_machine(4 * GIB, None), false);
    let model = Model::open(&rt, &s.probe.spec(s.rows)).expect("open");
    if !host_import {
        // Mapped pins (GL) are built by the pass that streams the weight.
        assert_eq!(model.pin_ahead(&rt).expect("pin ahead"), 0);
        return;
    }
    assert_eq!(model.pin_ahead(&rt).expect("pin ahead"), streamed);
    rt.finish_pins();
    let report = rt.pin_report();
    assert!(report.registered_bytes >= streamed, "{report:?}");
    let first = mlp_stack::forward_gpu(&rt, &model, &s.x, s.rows, None).expect("pass 1");
    assert_eq!(
        first.stats.sources,
        dynvram_runtime::StreamSources {
            registered_pin_bytes: streamed,
            ram_pin_bytes: 0,
            file_bytes: 0,
        },
        "the first pass streams from the pins built ahead"
    );
    assert_eq!(bits(&first.out), bits(&want.out));
    // Built in the pass instead: nothing is queued ahead.
    let settings = PinSettings {
        background: false,
        ..small_machine(4 * GIB, None)
    };
    let rt = runtime(budget, settings, false);
    let model = Model::open(&rt, &s.probe.spec(s.rows)).expect("open");
    assert_eq!(model.pin_ahead(&rt).expect("pin ahead"), 0);
}
