//! Greedy token choice: the index of the largest logit of a row, on the CPU
//! ([`argmax`]) or on the GPU ([`record_argmax`], written as a `u32` where
//! the next decode step's embedding gather reads it, so the CPU need not
//! wait for it). Both give the same index for every row.

use std::num::NonZeroU64;

use dynvram_shaders::transformer::ARGMAX;

use crate::device::{Gpu, GpuError};
use crate::ops::cache::PipelineCache;
use crate::ops::encoder::Encoder;
use crate::ops::kernel::{self, Dispatch, bad, to_u32};
use crate::tensor::GpuTensor;

/// `argmax.wgsl`'s `Params`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    /// Values in the row.
    n: u32,
    /// Element index of the row's first value in `logits`.
    first: u32,
    _pad: [u32; 2],
}
const _: () = assert!(size_of::<Params>() == 16);

/// Index of the largest value; the first one on ties (as `torch.argmax`),
/// NaN never wins (a row of NaN only gives its last index; an empty row 0).
pub fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] || row[best].is_nan() {
            best = i;
        }
    }
    best as u32
}

/// Records `out[0] = argmax(logits[row])` (the [`argmax`] of row `row` of
/// `logits` `[rows, n]`, f32 or f16) as a `u32`: `out` is any tensor whose
/// first 4 bytes take it (a token-ids activation). One workgroup.
pub fn record_argmax(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    logits: &GpuTensor,
    row: u64,
    out: &GpuTensor,
) -> Result<(), GpuError> {
    const OP: &str = "argmax";
    let (rows, n) = kernel::rows_cols(OP, "logits", logits)?;
    if row >= rows {
        return Err(bad(OP, format!("row {row} of `logits` {:?}", logits.shape)));
    }
    kernel::expect_distinct(OP, out, &[("logits", logits)])?;
    if out.offset + 4 > out.buffer.size() {
        return Err(GpuError::OutsideBuffer {
            op: OP,
            what: "`out`".into(),
            start: out.offset,
            end: out.offset + 4,
            buffer_size: out.buffer.size(),
        });
    }
    let params = Params {
        n: to_u32(OP, "n", n)?,
        first: to_u32(OP, "first", row * n)?,
        _pad: [0; 2],
    };
    let out_binding = wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer: &out.buffer,
        offset: out.offset,
        size: NonZeroU64::new(4),
    });
    kernel::record(
        gpu,
        cache,
        enc,
        Dispatch {
            source: ARGMAX,
            entry: "argmax",
            constants: &[],
            params: bytemuck::bytes_of(&params),
            bindings: smallvec::smallvec![(0, logits.binding()), (1, out_binding)],
            groups: (1, 1),
            act: logits.dtype,
            cost: kernel::Cost::new(n * logits.dtype.size(), 4, n),
        },
    )
}
