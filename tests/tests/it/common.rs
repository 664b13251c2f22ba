//! What this binary's modules share beyond `dynvram_test_support`: the
//! built-in model and runtimes of an exact VRAM capacity.

use std::path::PathBuf;

use dynvram_models::mlp_stack::builtin;
use dynvram_runtime::{Runtime, RuntimeConfig};
use dynvram_test_support::fixtures;

/// The built-in MLP stack, written once into the tests' shared cache.
pub fn builtin_model() -> PathBuf {
    builtin::ensure_cached_in(&fixtures::test_cache()).expect("write the built-in model")
}

/// A runtime of exactly `vram_budget` bytes of VRAM, other settings default.
pub fn runtime(vram_budget: u64) -> Runtime {
    Runtime::new(RuntimeConfig::with_vram(vram_budget)).expect("runtime")
}
