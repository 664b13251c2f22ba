//! Set-up of the text-encoder tests: the tiny-flux-pipeline fixture, its
//! reference, and opening a model resident or under a budget that streams.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use dynvram_models::llama::synth::SynthTensor;

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

/// A safetensors file of `tensors` (f16) whose data is a hole: the header
/// of a real-size checkpoint without writing gigabytes (sparse on disk).
pub fn sparse_f16_file(path: &Path, tensors: &[SynthTensor]) {
    let mut header = serde_json::Map::new();
    let mut offset = 0u64;
    for t in tensors {
        let bytes = 2 * t.shape.iter().product::<usize>() as u64;
        header.insert(
            t.name.clone(),
            serde_json::json!({"dtype": "F16", "shape": t.shape, "data_offsets": [offset, offset + bytes]}),
        );
        offset += bytes;
    }
    let mut text = serde_json::Value::Object(header).to_string();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut f = std::fs::File::create(path).expect("create");
    f.write_all(&(text.len() as u64).to_le_bytes())
        .expect("write");
    f.write_all(text.as_bytes()).expect("write");
    f.set_len(8 + text.len() as u64 + offset).expect("set_len");
}

/// The plan of `spec` under `usable` bytes: (streamed bytes, weight
/// bytes, VRAM the plan takes: resident pages, two arenas, scratch).
pub fn plan_under(spec: &ModelSpec, usable: u64) -> (u64, u64, u64) {
    let (plan, _) = dynvram_runtime::plan_spec(spec, usable).expect("plans");
    let taken = plan.plan.page_bytes + 2 * plan.arena_bytes + plan.scratch;
    let p = &plan.plan;
    (p.streamed_bytes, p.streamed_bytes + p.resident_bytes, taken)
}
