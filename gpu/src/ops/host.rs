//! The host boundary of activations: f32 values in and out, whatever the
//! tensor's dtype. f16 is rounded to nearest even on the way in (`half`)
//! and widened exactly on the way out.

use std::sync::Arc;

use crate::device::{Gpu, GpuError};
use crate::tensor::{ActDtype, GpuTensor};

/// `data` as the bytes of a `dtype` tensor.
pub fn encode(data: &[f32], dtype: ActDtype) -> Vec<u8> {
    match dtype {
        ActDtype::F32 => bytemuck::cast_slice(data).to_vec(),
        ActDtype::F16 => data
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect(),
    }
}

/// The bytes of a `dtype` tensor as f32 values.
pub fn decode(bytes: &[u8], dtype: ActDtype) -> Vec<f32> {
    match dtype {
        ActDtype::F32 => bytemuck::pod_collect_to_vec(bytes),
        ActDtype::F16 => bytes
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
    }
}

/// `v` rounded to the nearest value of `dtype` (what a round trip through
/// a `dtype` tensor gives), as f32.
pub fn round_to(v: f32, dtype: ActDtype) -> f32 {
    match dtype {
        ActDtype::F32 => v,
        ActDtype::F16 => half::f16::from_f32(v).to_f32(),
    }
}

/// A fresh `dtype` tensor of `shape` holding `data` (`STORAGE | COPY_SRC |
/// COPY_DST`, padded to whole 4-byte words). Checks `SHADER_F16` for f16.
pub fn upload(
    gpu: &Gpu,
    label: &str,
    data: &[f32],
    shape: Vec<u64>,
    dtype: ActDtype,
) -> Result<GpuTensor, GpuError> {
    crate::ops::cache::check_act_dtype(gpu, label, dtype)?;
    let numel: u64 = shape.iter().product();
    if numel != data.len() as u64 {
        return Err(GpuError::BadOperands {
            op: "upload",
            detail: format!("{} values for shape {shape:?}", data.len()),
        });
    }
    let mut bytes = encode(data, dtype);
    bytes.resize(bytes.len().div_ceil(4).max(4) * 4, 0);
    let buffer = gpu.create_buffer(
        label,
        bytes.len() as u64,
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
    )?;
    gpu.queue.write_buffer(&buffer, 0, &bytes);
    Ok(GpuTensor {
        buffer: Arc::new(buffer),
        offset: 0,
        shape,
        dtype,
    })
}

/// A zeroed `dtype` tensor of `shape` (see [`upload`]).
pub fn zeros(
    gpu: &Gpu,
    label: &str,
    shape: Vec<u64>,
    dtype: ActDtype,
) -> Result<GpuTensor, GpuError> {
    let n = shape.iter().product::<u64>() as usize;
    upload(gpu, label, &vec![0.0; n], shape, dtype)
}

/// Reads `t` back as f32 values (the 4-byte words around it are read, so an
/// f16 tensor may start or end on a half word).
pub fn read(gpu: &Gpu, t: &GpuTensor) -> Result<Vec<f32>, GpuError> {
    let start = t.offset / 4 * 4;
    let end = (t.offset + t.bytes()).div_ceil(4) * 4;
    let bytes = gpu.read_back(&t.buffer, start, end - start)?;
    let skip = (t.offset - start) as usize;
    Ok(decode(&bytes[skip..skip + t.bytes() as usize], t.dtype))
}
