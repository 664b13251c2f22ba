//! A model streamed under a small budget gives bit-identical output to the
//! same model fully resident; the run streams exactly what `plan` predicts;
//! an impossible budget is a clear error before any work.

use crate::common::{builtin_model, runtime};
use dynvram_models::mlp_stack::{self, Probe};
use dynvram_runtime::{Model, RuntimeError, plan_spec};
use dynvram_test_support::gpu::have_gpu;

#[test]
fn streamed_pass_is_bit_identical_to_resident_pass_and_matches_plan() {
    let name = "streamed_pass_is_bit_identical_to_resident_pass_and_matches_plan";
    if !have_gpu(name) {
        return;
    }
    let file = builtin_model();
    let probe = Probe::open(&file).expect("probe");
    let rows = 3;
    let x = probe.input(rows);
    let total = probe.weight_bytes();
    let spec = probe.spec(rows);

    let resident_rt = runtime(4 * total);
    let resident = Model::open(&resident_rt, &spec).expect("open resident");
    assert_eq!(
        resident.report().streamed_bytes,
        0,
        "everything fits: nothing streams"
    );
    let a = mlp_stack::forward_gpu(&resident_rt, &resident, &x, rows, None).expect("resident pass");

    let quarter = total / 4;
    let streamed_rt = runtime(quarter);
    let streamed = Model::open(&streamed_rt, &spec).expect("open streamed");
    let report = streamed.report();
    assert!(report.streamed_bytes > 0);
    assert_eq!(
        report.streamed_bytes + report.resident_bytes,
        report.model_bytes
    );
    let b = mlp_stack::forward_gpu(&streamed_rt, &streamed, &x, rows, None).expect("streamed pass");
    assert_eq!(
        b.stats.streamed_bytes, report.streamed_bytes,
        "a pass uploads every streamed weight once"
    );
    assert!(
        streamed_rt.budget_report().peak <= quarter,
        "tracked usage stayed in the budget"
    );

    let same = a
        .out
        .iter()
        .zip(&b.out)
        .all(|(p, q)| p.to_bits() == q.to_bits());
    assert!(same, "streamed output differs from resident output");

    // `dynvram plan` computes the same split without a GPU.
    let (plan, _) = plan_spec(&spec, quarter).expect("plan");
    assert_eq!(plan.plan.streamed_bytes, report.streamed_bytes);
    assert_eq!(plan.plan.streamed, report.streamed_tensors);

    let check = probe.verify(&streamed, &x, &b).expect("verify");
    assert!(check.pass, "{check:?}");
}

#[test]
fn budget_below_largest_tensor_is_a_clear_error_before_any_work() {
    let name = "budget_below_largest_tensor_is_a_clear_error_before_any_work";
    if !have_gpu(name) {
        return;
    }
    let file = builtin_model();
    let probe = Probe::open(&file).expect("probe");
    let rt = runtime(1 << 20);
    let err = Model::open(&rt, &probe.spec(2)).expect_err("1 MiB cannot hold a 4 MiB weight");
    assert!(matches!(err, RuntimeError::Plan { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("budget too small") && text.contains(".safetensors"),
        "{text}"
    );
    assert_eq!(rt.budget_report().tracked, 0, "nothing was allocated");
}

#[test]
fn trace_shows_next_block_staged_before_this_block_is_submitted() {
    let name = "trace_shows_next_block_staged_before_this_block_is_submitted";
    if !have_gpu(name) {
        return;
    }
    let file = builtin_model();
    let probe = Probe::open(&file).expect("probe");
    let rows = 2;
    let total = probe.weight_bytes();
    let rt = runtime(total / 4);
    let model = Model::open(&rt, &probe.spec(rows)).expect("open");
    let mut trace = dynvram_runtime::trace::Trace::new();
    mlp_stack::forward_gpu(&rt, &model, &probe.input(rows), rows, Some(&mut trace)).expect("pass");
    let position = |name: &str| {
        trace
            .events
            .iter()
            .position(|e| e.name == name)
            .unwrap_or_else(|| panic!("no event `{name}`"))
    };
    let blocks = model.block_count();
    for i in 0..blocks - 1 {
        let staged = position(&format!("stage blocks.{}", i + 1));
        let submitted = position(&format!("submit blocks.{i}"));
        assert!(
            staged < submitted,
            "block {} staged after block {i} was submitted",
            i + 1
        );
        if i > 0 {
            // ...and after the previous block's submit: one block ahead, not more.
            assert!(staged > position(&format!("submit blocks.{}", i - 1)));
        }
    }
    let streamed: u64 = trace.events.iter().map(|e| e.bytes).sum();
    assert_eq!(streamed, model.report().streamed_bytes);
    let svg = trace.to_svg();
    assert!(svg.starts_with("<svg") && svg.contains("stage blocks.1"));
    let json = trace.to_chrome_json();
    assert!(
        json["traceEvents"]
            .as_array()
            .is_some_and(|e| e.len() == trace.events.len())
    );
}
