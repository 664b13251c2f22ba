//! Several models under one runtime share its one budget (docs/behaviour.md, Residency; issues 4
//! and 6): the model that runs goes on top, the lowest-priority other model
//! yields its top weights when room is short, the active model is evicted
//! from last, a model that fits beside the others is never reloaded, and a
//! model that yielded takes its weights back on its next pass. Every output
//! is bit-identical to the same model alone and fully resident.

use std::path::{Path, PathBuf};

use crate::common::runtime;
use dynvram_models::mlp_stack::{self, Probe, builtin};
use dynvram_runtime::{Model, PassStats, Runtime};
use dynvram_test_support::gpu::have_gpu;
use safetensors::{Dtype, tensor::TensorView};

const ROWS: usize = 2;
const HIDDEN: usize = 256;
const FFN: usize = 1024;

/// Writes an MLP stack of `blocks` blocks with seeded weights, stored as
/// `dtype` (F32 or F16), and f32 biases.
fn write_stack(path: &Path, blocks: usize, dtype: Dtype, seed: u64) {
    let mut tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for i in 0..2 * blocks {
        let (block, second) = (i / 2, i % 2 == 1);
        let (n, k) = if second { (HIDDEN, FFN) } else { (FFN, HIDDEN) };
        let mut w = builtin::random_normal(n * k + n, seed * 1000 + i as u64);
        let b: Vec<f32> = w.split_off(n * k).into_iter().map(|v| 0.1 * v).collect();
        let scale = 1.0 / (k as f32).sqrt();
        let bytes = match dtype {
            Dtype::F16 => w
                .iter()
                .flat_map(|&v| half::f16::from_f32(v * scale).to_le_bytes())
                .collect(),
            _ => w.iter().flat_map(|&v| (v * scale).to_le_bytes()).collect(),
        };
        let name = &mlp_stack::layer_names(block)[usize::from(second)];
        tensors.push((format!("{name}.weight"), dtype, vec![n, k], bytes));
        tensors.push((
            format!("{name}.bias"),
            Dtype::F32,
            vec![n],
            bytemuck::cast_slice(&b).to_vec(),
        ));
    }
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(name, dtype, shape, data)| {
            (
                name.clone(),
                TensorView::new(*dtype, shape.clone(), data).expect("tensor view"),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).expect("write stack");
}

/// Two different stacks (so a model reading the other's buffers would show).
struct Pair {
    _dir: tempfile::TempDir,
    a: PathBuf,
    b: PathBuf,
}

fn pair() -> Pair {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = dir.path().join("a.safetensors");
    let b = dir.path().join("b.safetensors");
    write_stack(&a, 6, Dtype::F32, 1);
    write_stack(&b, 4, Dtype::F16, 2);
    Pair { _dir: dir, a, b }
}

/// One model's file, probe and input.
struct Subject {
    probe: Probe,
    x: Vec<f32>,
}

impl Subject {
    fn new(path: &Path) -> Self {
        let probe = Probe::open(path).expect("probe");
        let x = probe.input(ROWS);
        Self { probe, x }
    }

    fn open(&self, rt: &Runtime) -> Model {
        Model::open(rt, &self.probe.spec(ROWS)).expect("open")
    }

    /// Runs a pass; checks it against the reference output bit for bit.
    fn run(&self, rt: &Runtime, model: &Model, reference: &[f32]) -> PassStats {
        let out = mlp_stack::forward_gpu(rt, model, &self.x, ROWS, None).expect("pass");
        assert!(
            out.out
                .iter()
                .zip(reference)
                .all(|(p, q)| p.to_bits() == q.to_bits()),
            "output differs from the model alone fully resident"
        );
        let report = rt.budget_report();
        assert!(report.tracked <= report.usable, "{report:?}");
        out.stats
    }

    /// Output of the model alone, fully resident, checked against the CPU.
    fn reference(&self) -> Vec<f32> {
        let rt = runtime(1 << 30);
        let model = self.open(&rt);
        assert_eq!(model.report().streamed_bytes, 0);
        let out = mlp_stack::forward_gpu(&rt, &model, &self.x, ROWS, None).expect("pass");
        let check = self.probe.verify(&model, &self.x, &out).expect("verify");
        assert!(check.pass, "{check:?}");
        out.out
    }

    /// Bytes the model takes on the GPU when fully resident.
    fn bytes(&self) -> u64 {
        let (plan, _) = dynvram_runtime::plan_spec(&self.probe.spec(ROWS), 1 << 30).expect("plan");
        plan.plan.resident_bytes
    }
}

fn loaded(model: &Model) -> u64 {
    model.report().loaded_vram
}

/// The ledger's `loaded_vram` is exactly the models' resident buffers.
fn ledger_agrees(rt: &Runtime, models: &[&Model]) {
    let report = rt.budget_report();
    let sum: u64 = models.iter().map(|m| loaded(m)).sum();
    assert_eq!(report.loaded_vram, sum, "{report:?}");
    assert_eq!(report.models.len(), models.len());
    for m in models {
        assert_eq!(m.report().resident_bytes, loaded(m), "{:?}", m.report());
    }
}

#[test]
fn two_models_that_do_not_fit_together_take_turns() {
    let name = "two_models_that_do_not_fit_together_take_turns";
    if !have_gpu(name) {
        return;
    }
    let files = pair();
    let (a, b) = (Subject::new(&files.a), Subject::new(&files.b));
    let (ref_a, ref_b) = (a.reference(), b.reference());
    let (size_a, size_b) = (a.bytes(), b.bytes());
    // One fits with room to spare, not both: half of B's bytes are missing.
    let scratch = a.probe.spec(ROWS).scratch_bytes + b.probe.spec(ROWS).scratch_bytes;
    let usable = size_a + size_b / 2 + scratch;
    let rt = runtime(usable);

    let ma = a.open(&rt);
    assert_eq!(loaded(&ma), size_a, "A alone is fully resident");
    let s = a.run(&rt, &ma, &ref_a);
    assert_eq!((s.loaded_bytes, s.streamed_bytes), (0, 0), "{s:?}");

    // Opening B puts it on top: A yields its top weights.
    let mb = b.open(&rt);
    assert_eq!(loaded(&mb), size_b, "B is fully resident");
    let a_left = loaded(&ma);
    assert!(
        a_left < size_a && a_left >= size_a - size_b,
        "A yielded {a_left}"
    );
    assert!(ma.report().streamed_bytes > 0);
    let order = rt.budget_report().models;
    assert_eq!((order[0].id, order[1].id), (mb.id(), ma.id()));
    assert!(order[0].active && !order[1].active);
    ledger_agrees(&rt, &[&ma, &mb]);

    // B runs: it already has everything; A is not touched.
    let s = b.run(&rt, &mb, &ref_b);
    assert_eq!((s.loaded_bytes, s.streamed_bytes), (0, 0), "{s:?}");
    assert_eq!(loaded(&ma), a_left);

    // A runs again: it takes its weights back from B (lowest priority now).
    let s = a.run(&rt, &ma, &ref_a);
    assert!(s.loaded_bytes > 0 && s.streamed_bytes == 0, "{s:?}");
    assert_eq!(loaded(&ma), size_a, "A re-acquired everything");
    let b_left = loaded(&mb);
    assert!(b_left < size_b, "B yielded");
    ledger_agrees(&rt, &[&ma, &mb]);

    // A again: fully resident beside what B kept, so nothing moves.
    let s = a.run(&rt, &ma, &ref_a);
    assert_eq!((s.loaded_bytes, s.streamed_bytes), (0, 0), "{s:?}");
    assert_eq!(loaded(&mb), b_left, "B is not touched by A's repeat");

    // And B once more, bit-identical after yielding.
    let s = b.run(&rt, &mb, &ref_b);
    assert!(s.loaded_bytes > 0, "{s:?}");
    assert_eq!(loaded(&mb), size_b);
    ledger_agrees(&rt, &[&ma, &mb]);

    let report = rt.budget_report();
    assert!(report.peak <= report.usable, "{report:?}");
    drop(ma);
    assert_eq!(rt.budget_report().loaded_vram, size_b);
    drop(mb);
    assert_eq!(rt.budget_report().tracked, 0, "dropping frees every buffer");
}

#[test]
fn the_active_model_streams_what_does_not_fit_and_takes_all_room_first() {
    let name = "the_active_model_streams_what_does_not_fit_and_takes_all_room_first";
    if !have_gpu(name) {
        return;
    }
    let files = pair();
    let (a, b) = (Subject::new(&files.a), Subject::new(&files.b));
    let (ref_a, ref_b) = (a.reference(), b.reference());
    let size_b = b.bytes();
    // Three quarters of A: A streams even alone; B fits alone.
    let usable = a.bytes() * 3 / 4;
    let spec_a = a.probe.spec(ROWS);
    // What A keeps when it is alone under this budget...
    let (solo, _) = dynvram_runtime::plan_spec(&spec_a, usable).expect("plan");
    assert!(solo.plan.streamed_bytes > 0 && solo.plan.resident_bytes > 0);
    // ...leaves no room for all of B.
    let room_left = usable - solo.plan.page_bytes - 2 * solo.arena_bytes - spec_a.scratch_bytes;
    assert!(room_left < size_b && size_b < usable);
    let rt = runtime(usable);
    let mb = b.open(&rt);
    assert_eq!(loaded(&mb), size_b);
    for round in 0..2 {
        // A opens (round 0) or runs: on top, it gets at least its room
        // alone, taking it from B (exhaustion prediction over the budget).
        let ma = a.open(&rt);
        for _ in 0..=round {
            let s = a.run(&rt, &ma, &ref_a);
            let report = ma.report();
            assert!(
                report.resident_bytes >= solo.plan.resident_bytes,
                "the active model gets at least its room alone: {report:?}"
            );
            assert_eq!(
                s.streamed_bytes, report.streamed_bytes,
                "A streams exactly what it does not keep"
            );
            assert!(loaded(&mb) <= room_left, "B yielded to the active model");
            ledger_agrees(&rt, &[&ma, &mb]);
            // B runs: all of it back, A yields.
            let s = b.run(&rt, &mb, &ref_b);
            assert_eq!(s.streamed_bytes, 0, "{s:?}");
            assert!(s.loaded_bytes > 0, "{s:?}");
            assert_eq!(loaded(&mb), size_b, "B takes back its weights");
            assert!(loaded(&ma) + size_b <= usable);
            ledger_agrees(&rt, &[&ma, &mb]);
        }
        // Dropping A leaves B alone and whole.
        drop(ma);
        ledger_agrees(&rt, &[&mb]);
        assert_eq!(loaded(&mb), size_b);
    }
    let report = rt.budget_report();
    assert!(report.peak <= report.usable, "{report:?}");
}

#[test]
fn models_that_fit_together_are_never_evicted_or_reloaded() {
    let name = "models_that_fit_together_are_never_evicted_or_reloaded";
    if !have_gpu(name) {
        return;
    }
    let files = pair();
    let (a, b) = (Subject::new(&files.a), Subject::new(&files.b));
    let (ref_a, ref_b) = (a.reference(), b.reference());
    let (size_a, size_b) = (a.bytes(), b.bytes());
    let rt = runtime(2 * (size_a + size_b));
    let ma = a.open(&rt);
    let mb = b.open(&rt);
    for _ in 0..2 {
        let s = a.run(&rt, &ma, &ref_a);
        assert_eq!((s.loaded_bytes, s.streamed_bytes), (0, 0), "{s:?}");
        let s = b.run(&rt, &mb, &ref_b);
        assert_eq!((s.loaded_bytes, s.streamed_bytes), (0, 0), "{s:?}");
        assert_eq!((loaded(&ma), loaded(&mb)), (size_a, size_b));
    }
    ledger_agrees(&rt, &[&ma, &mb]);
}

#[test]
fn a_yielded_model_that_cannot_reload_fails_alone_and_the_other_still_runs() {
    let name = "a_yielded_model_that_cannot_reload_fails_alone_and_the_other_still_runs";
    if !have_gpu(name) {
        return;
    }
    let files = pair();
    let (a, b) = (Subject::new(&files.a), Subject::new(&files.b));
    let ref_b = b.reference();
    let (size_a, size_b) = (a.bytes(), b.bytes());
    let scratch = a.probe.spec(ROWS).scratch_bytes + b.probe.spec(ROWS).scratch_bytes;
    let rt = runtime(size_a + size_b / 2 + scratch);
    let ma = a.open(&rt);
    let mb = b.open(&rt);
    assert!(loaded(&ma) < size_a, "A yielded to B");
    // A's file loses its bytes: taking its weights back must fail.
    let len = std::fs::metadata(&files.a).expect("stat").len();
    std::fs::File::options()
        .write(true)
        .open(&files.a)
        .expect("open")
        .set_len(len / 8)
        .expect("truncate");
    let err = mlp_stack::forward_gpu(&rt, &ma, &a.x, ROWS, None).expect_err("bytes are gone");
    let text = err.to_string();
    assert!(
        text.contains("a.safetensors") && text.contains("short read"),
        "{text}"
    );
    assert_eq!(loaded(&ma), 0, "the failed model holds nothing");
    ledger_agrees(&rt, &[&ma, &mb]);
    // B yielded to A's attempt (room is made before loading); it takes its
    // weights back on its next pass, bit-identical.
    let s = b.run(&rt, &mb, &ref_b);
    assert_eq!(s.streamed_bytes, 0, "{s:?}");
    assert_eq!(loaded(&mb), size_b);
    drop(ma);
    drop(mb);
    assert_eq!(rt.budget_report().tracked, 0);
}

/// A model used with another runtime than its own is refused, naming the
/// file, even where that runtime holds a model of the same id; both
/// runtimes' own models still run right afterwards.
#[test]
fn a_model_run_on_another_runtime_is_refused() {
    let name = "a_model_run_on_another_runtime_is_refused";
    if !have_gpu(name) {
        return;
    }
    let files = pair();
    let (a, b) = (Subject::new(&files.a), Subject::new(&files.b));
    let (ref_a, ref_b) = (a.reference(), b.reference());
    let (rt1, rt2) = (runtime(1 << 30), runtime(1 << 30));
    let (ma, mb) = (a.open(&rt1), b.open(&rt2));
    assert_eq!(
        ma.id(),
        mb.id(),
        "each runtime numbers its models from the same start"
    );
    let err = mlp_stack::forward_gpu(&rt2, &ma, &a.x, ROWS, None).expect_err("foreign runtime");
    let msg = format!("{err:#}");
    assert!(msg.contains("another runtime"), "{msg}");
    assert!(msg.contains("a.safetensors"), "{msg}");
    a.run(&rt1, &ma, &ref_a);
    b.run(&rt2, &mb, &ref_b);
}
