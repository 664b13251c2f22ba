//! Activations on the GPU: a buffer region with a shape.

use std::sync::Arc;

/// Element type of an activation tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActDtype {
    /// 32-bit float.
    F32,
    /// 16-bit float (needs `SHADER_F16`).
    F16,
}

impl std::fmt::Display for ActDtype {
    /// `f32` or `f16`, as the CLI's `--compute-dtype` spells them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
        })
    }
}

impl ActDtype {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            Self::F32 => 4,
            Self::F16 => 2,
        }
    }
}

/// A dense row-major tensor living in a GPU buffer (`STORAGE | COPY_SRC | COPY_DST`).
#[derive(Debug, Clone)]
pub struct GpuTensor {
    /// The buffer (shared: views of one buffer are cheap clones).
    pub buffer: Arc<wgpu::Buffer>,
    /// Byte offset of element 0 (a multiple of the adapter's storage offset alignment).
    pub offset: u64,
    /// Shape, outermost first (e.g. `[M, K]`).
    pub shape: Vec<u64>,
    /// Element type.
    pub dtype: ActDtype,
}

impl GpuTensor {
    /// Number of elements.
    pub fn numel(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        self.numel() * self.dtype.size()
    }

    /// Bytes a binding of the tensor covers: [`Self::bytes`] rounded up to
    /// whole 4-byte words (storage bindings must be; an odd count of f16
    /// values binds the half word after it, which kernels never touch).
    pub fn binding_bytes(&self) -> u64 {
        self.bytes().div_ceil(4) * 4
    }

    /// Rows `first..first + rows` of the tensor seen as a matrix of its
    /// last dimension (outer dimensions folded into rows), in the same
    /// buffer. The caller keeps the new offset on the storage offset
    /// alignment.
    pub fn row_view(&self, first: u64, rows: u64) -> GpuTensor {
        let width = self.shape.last().copied().unwrap_or(1);
        GpuTensor {
            buffer: self.buffer.clone(),
            offset: self.offset + first * width * self.dtype.size(),
            shape: vec![rows, width],
            dtype: self.dtype,
        }
    }

    /// The buffer region as a binding resource.
    pub fn binding(&self) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &self.buffer,
            offset: self.offset,
            size: std::num::NonZeroU64::new(self.binding_bytes()),
        })
    }
}
