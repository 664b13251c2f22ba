//! Set-up of the text-encoder tests: the tiny-flux-pipeline fixture, its
//! reference, and opening a model resident or under a budget that streams.

use std::collections::HashMap;
use std::path::PathBuf;

use dynvram_runtime::{Model, ModelSpec, Runtime};
use dynvram_test_support::fixtures;
use dynvram_test_support::gpu::{quarter_budget, runtime};
use dynvram_test_support::safetensors::{self, Tensor};

/// ≤ 1e-3 × max|reference| (issue 33).
pub const REL: f32 = 1e-3;

/// `fixtures/tiny-flux-pipeline`.
pub fn pipeline() -> PathBuf {
    fixtures::dir(
        "tiny-flux-pipeline",
        &[
            "clip_l.safetensors",
            "t5xxl_fp16.safetensors",
            "reference.safetensors",
            "configs/text_encoder/config.json",
            "configs/text_encoder_2/config.json",
        ],
    )
}

/// What diffusers computed for the fixture.
pub fn reference() -> HashMap<String, Tensor> {
    safetensors::read(&pipeline().join("reference.safetensors"))
}

/// A runtime and `spec` opened on it: fully resident, or (`streamed`)
/// under a budget that keeps about a quarter of the weights, asserting
/// that some stream.
pub fn open(spec: &ModelSpec, streamed: bool) -> (Runtime, Model) {
    let budget = streamed.then(|| quarter_budget(spec));
    let rt = runtime(budget);
    let model = Model::open(&rt, spec).expect("model opens");
    let report = model.report();
    if streamed {
        assert!(report.streamed_bytes > 0, "nothing streams: {report:?}");
    } else {
        assert_eq!(report.streamed_bytes, 0, "fully resident: {report:?}");
    }
    (rt, model)
}
