//! Every golden case of `fixtures/conformance` on the test adapter, with the
//! path the kernel choice picks, and with int4 and int8 forced.

use dynvram_gpu::ops::linear::conformance::run_dir;
use dynvram_quant::LinearDtypeOverride;
use dynvram_test_support::fixtures;
use dynvram_test_support::gpu::{any_adapter, test_gpu};

fn check(test: &str, ov: LinearDtypeOverride) {
    let dir = fixtures::conformance();
    let Some(gpu) = test_gpu(test, any_adapter) else {
        return;
    };
    let reports = run_dir(&gpu, &dir, ov).expect("conformance cases run");
    assert!(
        reports.len() >= 15,
        "expected every case, got {}",
        reports.len()
    );
    let mut failed = Vec::new();
    for r in &reports {
        eprintln!(
            "{:<52} {:<36} {:<24} {:?} {}",
            r.case,
            r.path,
            r.target,
            r.comparison
                .as_ref()
                .map(|c| (c.max_rel_to_max, c.tier2_rows)),
            r.skipped
                .as_deref()
                .unwrap_or(if r.ok() { "PASS" } else { "FAIL" })
        );
        if !r.ok() {
            failed.push(r.case.clone());
        }
    }
    assert!(failed.is_empty(), "failed: {failed:?}");
}

#[test]
fn conformance_auto() {
    check("conformance_auto", LinearDtypeOverride::Auto);
}

#[test]
fn conformance_forced_int4() {
    check("conformance_forced_int4", LinearDtypeOverride::Int4);
}

#[test]
fn conformance_forced_int8() {
    check("conformance_forced_int8", LinearDtypeOverride::Int8);
}
