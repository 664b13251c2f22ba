//! What the Llama tests share beyond `dynvram_test_support`: opening the
//! model with its runner.

use dynvram_models::llama::{Checkpoint, Limits, Llama};
use dynvram_runtime::{Model, Runtime};

/// Opens the model and its runner.
pub fn open(rt: &Runtime, ckpt: &Checkpoint, limits: Limits) -> (Model, Llama) {
    let model = Model::open(rt, &ckpt.spec(limits)).expect("model opens");
    let llama = Llama::new(rt, ckpt, limits).expect("runner");
    (model, llama)
}
