//! The test data in the repository's `fixtures/` folder (each with its
//! README). It is part of the repository: a missing fixture fails the test
//! that needs it, it never skips.

use std::path::PathBuf;

/// The `fixtures/` folder.
pub fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures"))
}

/// `fixtures/<name>`, asserting that it holds every file of `files`.
#[track_caller]
pub fn dir(name: &str, files: &[&str]) -> PathBuf {
    let dir = root().join(name);
    for f in files {
        assert!(
            dir.join(f).is_file(),
            "{} has no {f} (fixtures/ is part of the repository)",
            dir.display()
        );
    }
    dir
}

/// ComfyUI's kernel goldens (`fixtures/conformance`, with its manifest).
#[track_caller]
pub fn conformance() -> PathBuf {
    dir("conformance", &["manifest.json"])
}

/// The tiny Llama with transformers' outputs (`fixtures/tiny-llama`).
#[track_caller]
pub fn tiny_llama() -> PathBuf {
    dir(
        "tiny-llama",
        &["model.safetensors", "reference.safetensors"],
    )
}

/// The tiny Flux with diffusers' outputs (`fixtures/tiny-flux`).
#[track_caller]
pub fn tiny_flux() -> PathBuf {
    dir(
        "tiny-flux",
        &[
            "model.safetensors",
            "inputs.safetensors",
            "reference.safetensors",
        ],
    )
}

/// The tiny FLUX.1 text-to-image pipeline with diffusers' references
/// (`fixtures/tiny-flux-pipeline`: four weight files, configs, PNGs).
#[track_caller]
pub fn tiny_flux_pipeline() -> PathBuf {
    dir(
        "tiny-flux-pipeline",
        &[
            "flux1-dev.safetensors",
            "clip_l.safetensors",
            "t5xxl_fp16.safetensors",
            "ae.safetensors",
            "reference.safetensors",
            "configs/dev/transformer/config.json",
            "image_0.png",
            "image_1.png",
        ],
    )
}

/// The cache folder the tests share for generated models (the built-in
/// model), one for every test binary of a run (files are written
/// atomically).
pub fn test_cache() -> PathBuf {
    std::env::temp_dir().join("dynvram-test-cache")
}
