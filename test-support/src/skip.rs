//! The skip-or-fail rule of every test that needs something the machine
//! may lack.

/// `DYNVRAM_REQUIRE_GPU=1`: a test that finds no GPU adapter fails instead
/// of being skipped (CI sets it).
pub fn gpu_required() -> bool {
    std::env::var("DYNVRAM_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// `DYNVRAM_REQUIRE_COOP=1`: the tests of the cooperative-matrix kernels
/// fail where the adapter would not run them (CI's Mesa 26 stage).
pub fn coop_required() -> bool {
    std::env::var("DYNVRAM_REQUIRE_COOP").is_ok_and(|v| v == "1")
}

/// A cooperative-matrix path the adapter does not take (`msg` says which
/// and why): a failure under [`coop_required`], else said on stderr.
#[track_caller]
pub fn coop_skipped(msg: &str) {
    assert!(!coop_required(), "{msg}");
    eprintln!("{msg}");
}

/// `DYNVRAM_REQUIRE_SPIRV=1`: the tests of the SPIR-V cooperative-matrix-2
/// kernels fail where the device would not run them (`bench/spirv_check.sh`
/// on an NVIDIA GPU).
pub fn spirv_required() -> bool {
    std::env::var("DYNVRAM_REQUIRE_SPIRV").is_ok_and(|v| v == "1")
}

/// A SPIR-V path the device does not take (`msg` says which and why): a
/// failure under [`spirv_required`], else said on stderr.
#[track_caller]
pub fn spirv_skipped(msg: &str) {
    assert!(!spirv_required(), "{msg}");
    eprintln!("{msg}");
}

/// No GPU adapter for `test` (`why` says what failed): a failure under
/// [`gpu_required`], else `skipped: …` on stderr and `None`.
#[track_caller]
pub fn no_gpu<T>(test: &str, why: impl std::fmt::Display) -> Option<T> {
    assert!(
        !gpu_required(),
        "{test}: DYNVRAM_REQUIRE_GPU=1 but no GPU: {why}"
    );
    eprintln!("{test}: skipped: no GPU adapter ({why})");
    None
}

/// Whether a `dynvram` run's stderr says it found no GPU adapter and the
/// run is to be skipped (after saying so) rather than failed: never under
/// [`gpu_required`].
pub fn skip_without_adapter(test: &str, stderr: &str) -> bool {
    if stderr.contains("no GPU adapter") && !gpu_required() {
        eprintln!("{test}: skipped: no GPU adapter");
        return true;
    }
    false
}
