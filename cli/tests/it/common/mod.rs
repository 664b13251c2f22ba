//! What the CLI's integration tests share: the binary with a private
//! cache and default logging, `synth` of small checkpoints, and `generate`
//! that reports `skipped:` without a GPU adapter (unless one is required).
#![allow(dead_code)] // each test binary uses a part

use std::path::Path;

use assert_cmd::Command;
use dynvram_test_support::fixtures;
use dynvram_test_support::skip::skip_without_adapter;

/// The `dynvram` binary with the tests' cache folder and no `RUST_LOG`.
pub fn dynvram() -> Command {
    let mut c = Command::cargo_bin("dynvram").expect("binary");
    c.env("DYNVRAM_CACHE", fixtures::test_cache());
    c.env_remove("RUST_LOG");
    c
}

/// `dynvram synth ARGS DIR`, which must succeed.
pub fn synth(dir: &Path, args: &[&str]) {
    let out = dynvram()
        .arg("synth")
        .args(args)
        .arg(dir)
        .output()
        .expect("synth");
    assert!(
        out.status.success(),
        "synth failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A 2-layer `tiny` checkpoint (vocab 1024, context 512) with its
/// tokenizer.json.
pub fn synth_tiny(dir: &Path) {
    synth(dir, &["--like", "tiny", "--layers", "2", "--tokenizer"]);
    assert!(dir.join("tokenizer.json").is_file());
}

/// `generate DIR ARGS`; None (and a `skipped:` line) without a GPU adapter
/// where none is required.
pub fn generate(test: &str, dir: &Path, args: &[&str]) -> Option<std::process::Output> {
    let out = dynvram()
        .arg("generate")
        .arg(dir)
        .args(args)
        .output()
        .expect("generate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && skip_without_adapter(test, &stderr) {
        return None;
    }
    assert!(out.status.success(), "{test}: generate failed: {stderr}");
    Some(out)
}
