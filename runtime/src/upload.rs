//! Moving one weight from its file to a GPU buffer through the staging ring.
//! Raw weights go file → `pread` into a mapped slot → GPU copy, with no
//! intermediate copy; float tensors that kernels read as `f32` (biases, norm
//! weights) are converted on the host first (they are small).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use dynvram_loader::{ByteSource, Dtype, HostBytes, ModelFiles, TensorInfo};
use dynvram_memory::ModelId;

use crate::error::{Result, RuntimeError};
use crate::planning::PlanWeight;
use dynvram_gpu::gpu::{Gpu, StagingRing};

/// One weight of a model: its tensor, its block and how it is uploaded.
#[derive(Debug)]
pub(crate) struct Weight {
    pub name: String,
    pub info: TensorInfo,
    pub block: usize,
    /// Its group in the block (`BlockSpec::groups`; 0 without groups).
    pub group: usize,
    pub upload: Upload,
    /// Its bytes were scanned for NaN and infinity ([`check_finite`]).
    pub checked: AtomicBool,
}

/// What moving a model's weights (uploads, pins, residency) needs to know
/// of the model, borrowed from it (`Model::view`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ModelView<'m> {
    /// Its id under the residency policy.
    pub id: ModelId,
    /// The file it was opened from, for errors.
    pub path: &'m Path,
    /// Its files.
    pub files: &'m ModelFiles,
    /// Its weights, load order.
    pub weights: &'m [Weight],
    /// Their sizes on the GPU, load order.
    pub plan_weights: &'m [PlanWeight],
    /// Activation bytes a pass needs.
    pub scratch_bytes: u64,
}

/// How a tensor's bytes are uploaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Upload {
    /// Bytes as stored.
    Raw,
    /// Converted to `f32` from the stored float dtype.
    ToF32,
}

impl Upload {
    /// Bytes it takes on the GPU.
    pub fn gpu_size(self, info: &TensorInfo) -> u64 {
        match self {
            Self::Raw => info.len(),
            Self::ToF32 => info.shape.iter().product::<usize>() as u64 * 4,
        }
    }
}

/// How a tensor is uploaded: raw when asked or already `f32`, converted when
/// it is another float type, an error otherwise.
pub(crate) fn upload_kind(model: &Path, info: &TensorInfo, raw: bool) -> Result<Upload> {
    match (raw, info.dtype) {
        (true, _) | (false, Dtype::F32) => Ok(Upload::Raw),
        (false, Dtype::F16 | Dtype::BF16) => Ok(Upload::ToF32),
        (false, dtype) => Err(RuntimeError::Dtype {
            model: model.to_owned(),
            tensor: info.name.clone(),
            dtype,
            why: "is not a float type (f32, f16 or bf16 expected)".into(),
        }),
    }
}

/// Records the upload of weight `w` into `dst` at `offset` from its file,
/// through the staging ring.
pub(crate) fn stage(
    model: ModelView<'_>,
    ring: &mut StagingRing,
    gpu: &Gpu,
    enc: &mut wgpu::CommandEncoder,
    w: &Weight,
    dst: &wgpu::Buffer,
    offset: u64,
) -> Result<()> {
    check_finite(model, w)?;
    match w.upload {
        Upload::Raw => {
            let source = model.files.source(&w.name)?;
            ring.upload(&gpu.device, &gpu.queue, enc, &source, dst, offset)?;
        }
        Upload::ToF32 => {
            let bytes = gpu_bytes(model, w)?;
            ring.upload(
                &gpu.device,
                &gpu.queue,
                enc,
                &HostBytes(&bytes),
                dst,
                offset,
            )?;
        }
    }
    Ok(())
}

/// Refuses weight `w` if it holds NaN or infinity
/// ([`RuntimeError::NonFiniteWeight`]). Each weight is scanned once, the
/// first time it is uploaded or pinned, so resident weights are checked as
/// they load and streamed ones before their first pass uses them; integer
/// payloads are skipped. The scan re-reads the bytes the upload is about to
/// read, so they come from the page cache.
pub(crate) fn check_finite(model: ModelView<'_>, w: &Weight) -> Result<()> {
    if w.checked.load(Ordering::Relaxed) || !dynvram_quant::tensors::can_be_non_finite(w.info.dtype)
    {
        return Ok(());
    }
    let source = model.files.source(&w.name)?;
    let element = w.info.dtype.bitsize().div_ceil(8).max(1) as u64;
    // A whole number of elements per read, small enough to stay in cache.
    const CHUNK: u64 = 1 << 20;
    let mut buf = vec![0u8; CHUNK.min(w.info.len()) as usize];
    let mut start = 0;
    while start < w.info.len() {
        let end = (start + CHUNK).min(w.info.len());
        let chunk = &mut buf[..(end - start) as usize];
        source.read_at(start, chunk.into())?;
        if let Some((i, value)) = dynvram_quant::tensors::first_non_finite(w.info.dtype, chunk) {
            let index = start / element + i as u64;
            let row_len = w.info.shape.iter().skip(1).product::<usize>().max(1) as u64;
            let row = if w.info.shape.len() >= 2 {
                format!(" (row {})", index / row_len)
            } else {
                String::new()
            };
            // Where a view reads it, the stored tensor holding it.
            let (at, _) = source
                .locate(index * element)
                .ok_or_else(|| missing(model, w))?;
            let tensor = if at.tensor == w.name {
                w.name.clone()
            } else {
                format!("{}` from `{}", w.name, at.tensor)
            };
            return Err(RuntimeError::NonFiniteWeight {
                file: at.path.to_path_buf(),
                tensor,
                index,
                row,
                value,
            });
        }
        start = end;
    }
    w.checked.store(true, Ordering::Relaxed);
    Ok(())
}

/// The model has no tensor of `w`'s name.
fn missing(model: ModelView<'_>, w: &Weight) -> RuntimeError {
    RuntimeError::MissingTensor {
        model: model.path.to_path_buf(),
        tensor: w.name.clone(),
    }
}

/// Weight `w`'s bytes as they go to the GPU (converted to `f32` where its
/// upload converts), read from its file into RAM.
pub(crate) fn gpu_bytes(model: ModelView<'_>, w: &Weight) -> Result<Vec<u8>> {
    let mut raw = vec![0u8; w.info.len() as usize];
    model.files.read_into(&w.name, 0..w.info.len(), &mut raw)?;
    Ok(match w.upload {
        Upload::Raw => raw,
        Upload::ToF32 => bytemuck::cast_slice(&to_f32(&raw, w.info.dtype)).to_vec(),
    })
}

fn to_f32(raw: &[u8], dtype: Dtype) -> Vec<f32> {
    let halves = raw
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]));
    match dtype {
        Dtype::F16 => halves.map(|h| half::f16::from_bits(h).to_f32()).collect(),
        Dtype::BF16 => halves.map(|h| half::bf16::from_bits(h).to_f32()).collect(),
        _ => bytemuck::pod_collect_to_vec(raw),
    }
}
