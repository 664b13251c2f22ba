//! Shared helpers of the `ops_*` GPU tests: upload, read back, run one
//! encoder, random data, tolerances, and a small safetensors reader.
#![allow(dead_code)] // each test file uses a different subset

use std::collections::HashMap;
use std::sync::Arc;

use dynvram_runtime::gpu::testing::{any_adapter, test_gpu};
use dynvram_runtime::ops::cache::PipelineCache;
use dynvram_runtime::ops::encoder::Encoder;
use dynvram_runtime::{ActDtype, Gpu, GpuError, GpuTensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// An opened test GPU with a pipeline cache.
pub struct Ctx {
    pub gpu: Gpu,
    pub cache: PipelineCache,
}

/// Opens the test adapter (None = skipped, already reported).
pub fn ctx(test: &str) -> Option<Ctx> {
    test_gpu(test, any_adapter).map(|gpu| Ctx {
        gpu,
        cache: PipelineCache::default(),
    })
}

fn usage() -> wgpu::BufferUsages {
    wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST
}

/// A raw storage buffer holding `bytes` (padded to 4 bytes).
pub fn upload_bytes(gpu: &Gpu, label: &str, bytes: &[u8]) -> wgpu::Buffer {
    let mut padded = bytes.to_vec();
    padded.resize(bytes.len().div_ceil(4).max(1) * 4, 0);
    let buf = gpu
        .create_buffer(label, padded.len() as u64, usage())
        .expect("create buffer");
    gpu.queue.write_buffer(&buf, 0, &padded);
    buf
}

/// An f32 tensor of `shape` holding `data`.
pub fn upload(gpu: &Gpu, shape: &[u64], data: &[f32]) -> GpuTensor {
    assert_eq!(
        shape.iter().product::<u64>() as usize,
        data.len(),
        "shape vs data"
    );
    GpuTensor {
        buffer: Arc::new(upload_bytes(gpu, "test input", bytemuck::cast_slice(data))),
        offset: 0,
        shape: shape.to_vec(),
        dtype: ActDtype::F32,
    }
}

/// An f32 tensor of `shape` filled with NaN (so unwritten outputs show).
pub fn nan_tensor(gpu: &Gpu, shape: &[u64]) -> GpuTensor {
    let n = shape.iter().product::<u64>() as usize;
    upload(gpu, shape, &vec![f32::NAN; n])
}

/// The tensor's values.
pub fn read(gpu: &Gpu, t: &GpuTensor) -> Vec<f32> {
    gpu.read_f32(&t.buffer, t.offset / 4, t.numel())
        .expect("read back")
}

/// Records with `f` into one encoder, submits and waits.
pub fn run(c: &Ctx, f: impl FnOnce(&mut Encoder) -> Result<(), GpuError>) {
    let mut enc = Encoder::new(&c.gpu.device, "test");
    f(&mut enc).expect("record");
    c.gpu.queue.submit([enc.finish()]);
    c.gpu.wait_idle().expect("wait");
}

/// Seeded random values in ±[0.05, range], never zero.
pub fn random(seed: u64, n: usize, range: f32) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let m: f32 = rng.random_range(0.05..range);
            if rng.random_bool(0.5) { m } else { -m }
        })
        .collect()
}

/// Asserts `|got − want| ≤ atol + rtol·|want|` everywhere.
pub fn assert_close(what: &str, got: &[f32], want: &[f32], atol: f32, rtol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = (0usize, 0.0f32);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs();
        assert!(
            err <= atol + rtol * w.abs(),
            "{what}: element {i}: got {g}, want {w} (|diff| {err} > {atol} + {rtol}·|want|)"
        );
        if err > worst.1 {
            worst = (i, err);
        }
    }
    eprintln!("{what}: max |diff| {:.3e} at {}", worst.1, worst.0);
}

/// One tensor of a safetensors file.
pub struct StTensor {
    pub dtype: String,
    pub shape: Vec<u64>,
    pub bytes: Vec<u8>,
}

impl StTensor {
    /// Values as f32 (F32 as is, BF16 widened exactly).
    pub fn f32(&self) -> Vec<f32> {
        match self.dtype.as_str() {
            "F32" => bytemuck::pod_collect_to_vec(&self.bytes),
            "BF16" => self
                .bytes
                .chunks_exact(2)
                .map(|b| f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16))
                .collect(),
            d => panic!("f32 of dtype {d}"),
        }
    }

    /// I64 values as u32 ids.
    pub fn ids(&self) -> Vec<u32> {
        assert_eq!(self.dtype, "I64");
        self.bytes
            .chunks_exact(8)
            .map(|b| u32::try_from(i64::from_le_bytes(b.try_into().expect("8 bytes"))).expect("id"))
            .collect()
    }
}

/// Every tensor of a safetensors file (small test files only).
pub fn read_safetensors(path: &std::path::Path) -> HashMap<String, StTensor> {
    let data = std::fs::read(path).expect("read safetensors");
    let n = u64::from_le_bytes(data[..8].try_into().expect("header length")) as usize;
    let header: serde_json::Value = serde_json::from_slice(&data[8..8 + n]).expect("header json");
    let body = &data[8 + n..];
    let mut out = HashMap::new();
    for (name, v) in header.as_object().expect("header object") {
        if name == "__metadata__" {
            continue;
        }
        let offs = &v["data_offsets"];
        let (a, b) = (
            offs[0].as_u64().expect("offset") as usize,
            offs[1].as_u64().expect("offset") as usize,
        );
        out.insert(
            name.clone(),
            StTensor {
                dtype: v["dtype"].as_str().expect("dtype").to_owned(),
                shape: v["shape"]
                    .as_array()
                    .expect("shape")
                    .iter()
                    .map(|d| d.as_u64().expect("dim"))
                    .collect(),
                bytes: body[a..b].to_vec(),
            },
        );
    }
    out
}
