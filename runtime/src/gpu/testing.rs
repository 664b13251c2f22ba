//! Opening a GPU in tests, wgpu-style: the adapter comes from `WGPU_BACKEND` /
//! `WGPU_ADAPTER_NAME`; a test that needs a missing feature is reported as
//! *skipped* with the reason. With `DYNVRAM_REQUIRE_GPU=1` (CI) a missing
//! adapter is a failure, not a skip.

use super::{AdapterChoice, Gpu};
use dynvram_quant::AdapterCaps;

/// Opens the test adapter. Returns `None` (after printing `skipped: …` with the
/// test name) when there is no adapter or `needs` rejects its caps.
///
/// `needs` returns `Err(reason)` for an adapter the test cannot use.
pub fn test_gpu(test: &str, needs: impl Fn(&AdapterCaps) -> Result<(), String>) -> Option<Gpu> {
    test_gpu_with(test, &AdapterChoice::default(), needs)
}

/// [`test_gpu`] on the adapter and with the device options of `choice`.
pub fn test_gpu_with(
    test: &str,
    choice: &AdapterChoice,
    needs: impl Fn(&AdapterCaps) -> Result<(), String>,
) -> Option<Gpu> {
    let required = std::env::var("DYNVRAM_REQUIRE_GPU").is_ok_and(|v| v == "1");
    let gpu = match Gpu::open(choice) {
        Ok(gpu) => gpu,
        Err(e) if required => panic!("{test}: DYNVRAM_REQUIRE_GPU=1 but no GPU: {e}"),
        Err(e) => {
            eprintln!("{test}: skipped: no GPU adapter ({e})");
            return None;
        }
    };
    let tag = format!("{} [{}]", gpu.caps.name, gpu.caps.backend);
    match needs(&gpu.caps) {
        Ok(()) => {
            eprintln!("{test}: running on {tag}");
            Some(gpu)
        }
        Err(reason) => {
            eprintln!("{test}: skipped on {tag}: {reason}");
            None
        }
    }
}

/// A `needs` for tests that run on any adapter.
pub fn any_adapter(_: &AdapterCaps) -> Result<(), String> {
    Ok(())
}
