//! The on-disk pipeline cache: a saved cache seeds the next device; a
//! damaged, truncated or foreign file is ignored and replaced, the run
//! unaffected. Every cache lives in a temp folder.

use std::hash::Hasher;
use std::path::Path;

use dynvram_gpu::device::GpuOptions;
use dynvram_gpu::{AdapterChoice, Gpu};
use dynvram_test_support::gpu::{any_adapter, dispatch_once, test_gpu_with};

/// `out[i] = in[i] * k`, `k` an override constant: a new `k` is a new
/// pipeline for the driver.
const SCALE: &str = r#"
override k: f32 = 2.0;
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&dst) { dst[id.x] = src[id.x] * k; }
}
"#;

/// The envelope's header (pipeline_cache.rs: magic, length, hash).
const HEADER: usize = 24;

/// A device with its pipeline cache in `dir`; `None` (after saying why)
/// without an adapter or where it has no pipeline cache.
fn cached_gpu(test: &str, dir: &Path) -> Option<Gpu> {
    let choice = AdapterChoice {
        options: GpuOptions {
            pipeline_cache: Some(dir.to_owned()),
            ..GpuOptions::default()
        },
        ..AdapterChoice::default()
    };
    let gpu = test_gpu_with(test, &choice, any_adapter)?;
    if gpu.pipeline_cache_info().is_none() {
        eprintln!(
            "{test}: skipped: {} [{}] has no PIPELINE_CACHE",
            gpu.caps.name, gpu.caps.backend
        );
        return None;
    }
    Some(gpu)
}

/// Compiles the scale kernel with `k` and runs it on a few values.
fn scale(gpu: &Gpu, k: f64) {
    let pipeline = gpu
        .create_compute_pipeline("scale", SCALE, "main", &[("k", k)])
        .expect("pipeline");
    let data: Vec<f32> = (0..100).map(|i| i as f32).collect();
    let usage =
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
    let src = gpu.create_buffer("src", 400, usage).expect("src");
    let dst = gpu.create_buffer("dst", 400, usage).expect("dst");
    gpu.queue.write_buffer(&src, 0, bytemuck::cast_slice(&data));
    dispatch_once(gpu, &pipeline, &[&src, &dst], &[], 2);
    let back = gpu.read_f32(&dst, 0, 100).expect("read back");
    let want: Vec<f32> = data.iter().map(|v| v * k as f32).collect();
    assert_eq!(back, want, "k = {k}");
    gpu.check_health().expect("healthy");
}

/// The file's payload as written (the envelope checked by the library).
fn payload(file: &Path) -> Vec<u8> {
    let bytes = std::fs::read(file).expect("read the cache file");
    assert_eq!(&bytes[..8], b"DYNVPLC1", "{}", file.display());
    bytes[HEADER..].to_vec()
}

/// A valid envelope around `payload` (to hand the device data that passes
/// our checks but not wgpu's).
fn envelope(payload: &[u8]) -> Vec<u8> {
    let mut h = std::hash::DefaultHasher::new();
    h.write(payload);
    let mut out = b"DYNVPLC1".to_vec();
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&h.finish().to_le_bytes());
    out.extend_from_slice(payload);
    out
}

#[test]
fn a_saved_cache_seeds_the_next_device() {
    let test = "a_saved_cache_seeds_the_next_device";
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(gpu) = cached_gpu(test, dir.path()) else {
        return;
    };
    let info = gpu.pipeline_cache_info().expect("cache").clone();
    assert_eq!(info.loaded_bytes, 0, "nothing to load yet");
    assert!(info.path.starts_with(dir.path()), "{}", info.path.display());
    assert!(!info.path.exists());
    let empty = gpu.pipeline_cache_len().expect("cache");
    assert_eq!(
        gpu.save_pipeline_cache().expect("save"),
        None,
        "no pipeline yet"
    );
    scale(&gpu, 2.0);
    scale(&gpu, 3.0);
    let filled = gpu.pipeline_cache_len().expect("cache");
    let written = gpu.save_pipeline_cache().expect("save").expect("written");
    assert_eq!(written, (HEADER + filled) as u64);
    assert_eq!(payload(&info.path).len(), filled);
    assert_eq!(
        gpu.save_pipeline_cache().expect("save"),
        None,
        "nothing new"
    );
    drop(gpu);
    eprintln!("{test}: empty cache {empty} B, after two pipelines {filled} B");

    // The next device starts from the file, and runs the same kernels.
    let gpu = cached_gpu(test, dir.path()).expect("the same adapter");
    let info2 = gpu.pipeline_cache_info().expect("cache");
    assert_eq!(info2.path, info.path);
    assert_eq!(
        info2.loaded_bytes, filled as u64,
        "the file's payload was loaded"
    );
    assert_eq!(
        gpu.pipeline_cache_len(),
        Some(filled),
        "the cache holds the file's data"
    );
    scale(&gpu, 2.0);
    // A new kernel: the drop saves it (a driver that caches nothing keeps
    // the file as it was).
    scale(&gpu, 5.0);
    let grown = gpu.pipeline_cache_len().expect("cache");
    drop(gpu);
    assert_eq!(payload(&info.path).len(), grown, "saved on drop");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names.len(), 1, "one file, no temp file left: {names:?}");
}

#[test]
fn a_damaged_or_foreign_cache_file_starts_cold() {
    let test = "a_damaged_or_foreign_cache_file_starts_cold";
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(gpu) = cached_gpu(test, dir.path()) else {
        return;
    };
    let path = gpu.pipeline_cache_info().expect("cache").path.clone();
    let empty = gpu.pipeline_cache_len().expect("cache");
    scale(&gpu, 2.0);
    gpu.save_pipeline_cache().expect("save").expect("written");
    drop(gpu);
    let good = std::fs::read(&path).expect("read");
    let data = payload(&path);

    let mut flipped = good.clone();
    let mid = HEADER + data.len() / 2;
    flipped[mid] ^= 0x40;
    // wgpu's header names the adapter (vendor and device) in bytes 17..32:
    // another adapter's data under this adapter's name.
    let mut foreign = data.clone();
    foreign[20] ^= 0xff;
    let cases: [(&str, Vec<u8>); 5] = [
        (
            "garbage",
            b"not a pipeline cache at all, just text".repeat(100),
        ),
        ("empty", Vec::new()),
        ("truncated", good[..good.len() / 2].to_vec()),
        ("a flipped bit in the driver's data", flipped),
        ("another adapter's data", envelope(&foreign)),
    ];
    for (what, bytes) in cases {
        std::fs::write(&path, &bytes).expect("write the bad file");
        let gpu = cached_gpu(test, dir.path()).expect("the same adapter");
        let info = gpu.pipeline_cache_info().expect("cache");
        assert_eq!(info.loaded_bytes, 0, "{what}: not loaded");
        assert_eq!(
            gpu.pipeline_cache_len(),
            Some(empty),
            "{what}: starts empty"
        );
        scale(&gpu, 2.0);
        drop(gpu);
        assert_eq!(
            payload(&path).len(),
            data.len(),
            "{what}: replaced by a good file"
        );
    }
}

#[test]
fn an_unwritable_cache_folder_is_an_error_naming_it() {
    let test = "an_unwritable_cache_folder_is_an_error_naming_it";
    let dir = tempfile::tempdir().expect("tempdir");
    // A regular file where the folder should be: neither read nor created.
    let blocked = dir.path().join("blocked");
    std::fs::write(&blocked, b"a file, not a folder").expect("write");
    let Some(gpu) = cached_gpu(test, &blocked) else {
        return;
    };
    assert_eq!(gpu.pipeline_cache_info().expect("cache").loaded_bytes, 0);
    scale(&gpu, 2.0);
    let e = gpu
        .save_pipeline_cache()
        .expect_err("cannot create the folder");
    assert!(e.to_string().contains("blocked"), "{e}");
    eprintln!("{test}: {e}");
    // Still usable, and the drop only logs.
    scale(&gpu, 3.0);
    drop(gpu);
    assert_eq!(
        std::fs::read(&blocked).expect("read"),
        b"a file, not a folder"
    );
}
