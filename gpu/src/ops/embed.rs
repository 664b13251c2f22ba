//! Embedding lookup: gathers rows of a `[vocab, hidden]` table (stored as
//! f32, f16 or bf16, as checkpoints ship it) into f32 or f16 activations.

use std::num::NonZeroU64;

use dynvram_shaders::transformer::EMBED;

use crate::device::{Gpu, GpuError};
use crate::ops::cache::PipelineCache;
use crate::ops::encoder::Encoder;
use crate::ops::kernel::{self, Dispatch, bad, expect_shape, to_u32};
use crate::tensor::GpuTensor;

const WG: u64 = 256;

/// Storage type of a table or weight that a kernel decodes itself
/// (embedding tables, convolution weights).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TableDtype {
    /// 32-bit float.
    F32,
    /// IEEE half (decoded in the shader; no f16 feature needed).
    F16,
    /// bfloat16 (the upper half of an f32).
    Bf16,
}

impl TableDtype {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::Bf16 => 2,
        }
    }

    /// The shaders' `DTYPE` / `WDT` constant (`stored_float.wgsl`).
    pub(crate) fn code(self) -> f64 {
        match self {
            Self::F32 => 0.0,
            Self::F16 => 1.0,
            Self::Bf16 => 2.0,
        }
    }
}

/// A `[vocab, hidden]` table in a GPU buffer (`STORAGE` usage), little-endian.
#[derive(Debug, Clone, Copy)]
pub struct EmbedTable<'a> {
    /// The buffer holding it.
    pub buffer: &'a wgpu::Buffer,
    /// Byte offset of row 0 (a multiple of the storage offset alignment).
    pub offset: u64,
    /// Rows.
    pub vocab: u64,
    /// Columns.
    pub hidden: u64,
    /// Element type.
    pub dtype: TableDtype,
}

/// Token ids, `count` little-endian `u32` values in a `STORAGE` buffer.
#[derive(Debug, Clone, Copy)]
pub struct TokenIds<'a> {
    /// The buffer holding them.
    pub buffer: &'a wgpu::Buffer,
    /// Byte offset of the first id (a multiple of the storage offset alignment).
    pub offset: u64,
    /// Number of ids.
    pub count: u64,
}

/// A buffer region binding of `bytes` bytes rounded up to whole 4-byte
/// words, checked to lie inside the buffer.
pub(crate) fn region<'a>(
    op: &'static str,
    name: &str,
    buffer: &'a wgpu::Buffer,
    offset: u64,
    bytes: u64,
) -> Result<wgpu::BindingResource<'a>, GpuError> {
    let size = bytes.div_ceil(4) * 4;
    if offset + size > buffer.size() {
        return Err(GpuError::OutsideBuffer {
            op,
            what: format!("`{name}`"),
            start: offset,
            end: offset + size,
            buffer_size: buffer.size(),
        });
    }
    let size = NonZeroU64::new(size).ok_or_else(|| bad(op, format!("`{name}` is empty")))?;
    Ok(wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer,
        offset,
        size: Some(size),
    }))
}

/// `embed.wgsl`'s `Params`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n_tokens: u32,
    cols: u32,
    /// The chunk of the table bound: rows `first_row..end_row`.
    first_row: u32,
    end_row: u32,
    vocab: u32,
    _pad: [u32; 3],
}
const _: () = assert!(size_of::<Params>() == 32);

/// Records `out[t] = table[ids[t]]` (converted to `out`'s dtype, f32 or f16)
/// for `out` `[ids.count, hidden]`.
/// An id ≥ vocab yields a zero row (the GPU cannot report it).
pub fn record_embed(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    table: &EmbedTable<'_>,
    ids: &TokenIds<'_>,
    out: &GpuTensor,
) -> Result<(), GpuError> {
    const OP: &str = "embed";
    expect_shape(OP, "out", out, &[ids.count, table.hidden], out.dtype)?;
    kernel::rows_cols(OP, "out", out)?;
    if *out.buffer == *table.buffer || *out.buffer == *ids.buffer {
        return Err(bad(
            OP,
            "`out` shares a buffer with the table or the ids".into(),
        ));
    }
    to_u32(OP, "vocab", table.vocab)?;
    let items = ids.count * table.hidden;
    let ids_binding = region(OP, "ids", ids.buffer, ids.offset, ids.count * 4)?;
    let _span =
        tracing::trace_span!("record", op = OP, tokens = ids.count, dtype = ?table.dtype).entered();
    let row_bytes = table.hidden * table.dtype.size();
    let chunk = chunk_rows(gpu, row_bytes).ok_or_else(|| {
        bad(
            OP,
            format!("a table row of {row_bytes} bytes exceeds one binding"),
        )
    })?;
    let mut first = 0;
    // One dispatch per chunk of rows that fits a binding (one in most cases).
    loop {
        let end = (first + chunk).min(table.vocab);
        let table_binding = region(
            OP,
            "table",
            table.buffer,
            table.offset + first * row_bytes,
            (end - first).max(1) * row_bytes,
        )?;
        // The chunk's elements are indexed in u32.
        to_u32(OP, "chunk * hidden", (end - first) * table.hidden)?;
        let params = Params {
            n_tokens: to_u32(OP, "tokens", ids.count)?,
            cols: to_u32(OP, "hidden", table.hidden)?,
            first_row: to_u32(OP, "first row", first)?,
            end_row: to_u32(OP, "end row", end)?,
            vocab: to_u32(OP, "vocab", table.vocab)?,
            _pad: [0; 3],
        };
        kernel::record(
            gpu,
            cache,
            enc,
            Dispatch {
                source: EMBED,
                entry: "gather",
                constants: &[("DTYPE", table.dtype.code())],
                params: bytemuck::bytes_of(&params),
                bindings: smallvec::smallvec![
                    (1, table_binding),
                    (2, ids_binding.clone()),
                    (3, out.binding()),
                ],
                groups: kernel::grid(gpu, OP, items, WG)?,
                act: out.dtype,
                cost: kernel::Cost::new(ids.count * (4 + row_bytes), out.bytes(), 0),
            },
        )?;
        if end >= table.vocab {
            return Ok(());
        }
        first = end;
    }
}

/// Rows per gather dispatch: as many as one storage binding holds, in steps
/// that keep every chunk's offset a multiple of the offset alignment.
fn chunk_rows(gpu: &Gpu, row_bytes: u64) -> Option<u64> {
    let limits = gpu.device.limits();
    let align = u64::from(limits.min_storage_buffer_offset_alignment).max(1);
    let step = align / gcd(row_bytes.max(1), align);
    let rows = limits.max_storage_buffer_binding_size / row_bytes.max(1) / step * step;
    (rows > 0).then_some(rows)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}
