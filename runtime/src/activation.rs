//! Activations: scratch tensors counted in the ledger as `scratch`, in f32
//! or (where the adapter has `SHADER_F16`) f16. The host side always sees
//! f32: [`Runtime::write_f32`] and [`Runtime::read_f32`] convert at this
//! boundary (round to nearest even on the way in, exact on the way out).

use dynvram_memory::OwnerClass;

use crate::error::{Result, RuntimeError};
use crate::runtime::Runtime;
use dynvram_gpu::accounting::TrackedBuffer;
use dynvram_gpu::tensor::{ActDtype, GpuTensor};

/// An activation tensor that owns its (ledger-tracked) buffer; its dtype is
/// `tensor.dtype`.
#[derive(Debug)]
pub struct Activation {
    /// The tensor view.
    pub tensor: GpuTensor,
    _buffer: TrackedBuffer,
}

impl std::ops::Deref for Activation {
    type Target = GpuTensor;
    fn deref(&self) -> &GpuTensor {
        &self.tensor
    }
}

impl Runtime {
    /// Allocates an `f32` activation of `shape` (zeroed).
    pub fn activation(&self, label: &str, shape: &[usize]) -> Result<Activation> {
        self.activation_of(label, shape, ActDtype::F32)
    }

    /// Allocates a zeroed activation of `shape` and `dtype`. F16 on an
    /// adapter without `SHADER_F16` is [`crate::GpuError::NoShaderF16`]
    /// (no silent fallback: the caller picked the dtype).
    pub fn activation_of(
        &self,
        label: &str,
        shape: &[usize],
        dtype: ActDtype,
    ) -> Result<Activation> {
        dynvram_gpu::ops::cache::check_act_dtype(&self.gpu, label, dtype)?;
        let numel: u64 = shape.iter().map(|&d| d as u64).product();
        // Whole 4-byte words: storage bindings and copies need them.
        let bytes = (numel * dtype.size()).div_ceil(4) * 4;
        let buffer = TrackedBuffer::new(
            &self.gpu,
            &self.budget,
            OwnerClass::Scratch,
            label,
            bytes,
            wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
        )?;
        Ok(Activation {
            tensor: GpuTensor {
                buffer: buffer.buffer.clone(),
                offset: 0,
                shape: shape.iter().map(|&d| d as u64).collect(),
                dtype,
            },
            _buffer: buffer,
        })
    }

    /// Writes host values into an activation (converted to its dtype). An
    /// f16 write must cover whole 4-byte words (an even element count at an
    /// even element offset), as queue writes do.
    pub fn write_f32(&self, t: &GpuTensor, data: &[f32]) -> Result<()> {
        let shape_err = |detail: String| RuntimeError::Shape {
            op: "write_f32".into(),
            detail,
        };
        if data.len() as u64 != t.numel() {
            return Err(shape_err(format!(
                "{} values for a tensor of shape {:?}",
                data.len(),
                t.shape
            )));
        }
        let bytes = dynvram_gpu::ops::host::encode(data, t.dtype);
        if !t.offset.is_multiple_of(4) || !bytes.len().is_multiple_of(4) {
            return Err(shape_err(format!(
                "{:?} {:?} at byte {} is not whole 4-byte words",
                t.dtype, t.shape, t.offset
            )));
        }
        self.gpu.queue.write_buffer(&t.buffer, t.offset, &bytes);
        Ok(())
    }

    /// Reads an activation back to the host as f32 (f16 widened exactly).
    pub fn read_f32(&self, t: &GpuTensor) -> Result<Vec<f32>> {
        Ok(dynvram_gpu::ops::host::read(&self.gpu, t)?)
    }
}
