//! Shared helpers of the `ops_*` GPU tests: the test GPU with a pipeline
//! cache, upload, read back, run one encoder. Random data, tolerances and
//! safetensors reading are `dynvram_test_support`'s.
#![allow(dead_code)] // each test file uses a different subset

use std::sync::Arc;

use dynvram_gpu::ops::cache::PipelineCache;
use dynvram_gpu::ops::embed::TableDtype;
use dynvram_gpu::ops::encoder::Encoder;
use dynvram_gpu::ops::host;
use dynvram_gpu::{ActDtype, Gpu, GpuError, GpuTensor};
use dynvram_quant::AdapterCaps;
use dynvram_test_support::gpu::{any_adapter, test_gpu};

/// An opened test GPU with a pipeline cache.
pub struct Ctx {
    pub gpu: Gpu,
    pub cache: PipelineCache,
}

/// Opens the test adapter (None = skipped, already reported).
pub fn ctx(test: &str) -> Option<Ctx> {
    ctx_with(test, any_adapter)
}

/// [`ctx`] on an adapter `needs` accepts.
pub fn ctx_with(test: &str, needs: impl Fn(&AdapterCaps) -> Result<(), String>) -> Option<Ctx> {
    test_gpu(test, needs).map(|gpu| Ctx {
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

/// The tensor's values (f16 ones widened).
pub fn read(gpu: &Gpu, t: &GpuTensor) -> Vec<f32> {
    host::read(gpu, t).expect("read back")
}

/// Records with `f` into one encoder, submits and waits.
pub fn run(c: &Ctx, f: impl FnOnce(&mut Encoder) -> Result<(), GpuError>) {
    let mut enc = Encoder::new(&c.gpu.device, "test");
    f(&mut enc).expect("record");
    c.gpu.queue.submit([enc.finish()]);
    c.gpu.wait_idle().expect("wait");
}

/// A tensor of `dtype` holding `data` (rounded to `dtype`).
pub fn up(c: &Ctx, data: &[f32], shape: &[u64], dtype: ActDtype) -> GpuTensor {
    host::upload(&c.gpu, "input", data, shape.to_vec(), dtype).expect("upload")
}

/// A zeroed tensor of `dtype`.
pub fn zeros(c: &Ctx, shape: &[u64], dtype: ActDtype) -> GpuTensor {
    host::zeros(&c.gpu, "out", shape.to_vec(), dtype).expect("zeros")
}

/// `values` stored as `dtype`: the f32 values the stored ones really are,
/// and their little-endian bytes.
pub fn stored_as(values: &[f32], dtype: TableDtype) -> (Vec<f32>, Vec<u8>) {
    use half::{bf16, f16};
    match dtype {
        TableDtype::F32 => (values.to_vec(), bytemuck::cast_slice(values).to_vec()),
        TableDtype::F16 => {
            let h: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
            (
                h.iter().map(|v| v.to_f32()).collect(),
                h.iter().flat_map(|v| v.to_le_bytes()).collect(),
            )
        }
        TableDtype::Bf16 => {
            let h: Vec<bf16> = values.iter().map(|&v| bf16::from_f32(v)).collect();
            (
                h.iter().map(|v| v.to_f32()).collect(),
                h.iter().flat_map(|v| v.to_le_bytes()).collect(),
            )
        }
    }
}
