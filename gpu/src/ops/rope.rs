//! Rotary position embedding, Hugging Face `rotate_half` form (NeoX,
//! non-interleaved: dimension i pairs with i + head_dim/2), applied in place
//! to q `[seq, n_heads·head_dim]` and k `[seq, n_kv·head_dim]` at positions
//! `pos0..pos0+seq`.
//!
//! cos/sin come from a host table computed in f32 exactly as torch does
//! (`inv_freq` in f32, angle = `pos · inv_freq` in f32, then cos/sin), so
//! the result does not depend on a GPU's sin/cos accuracy, which is loose
//! for large angles.

use std::sync::Arc;

use dynvram_shaders::transformer::ROPE;

use crate::device::{Gpu, GpuError};
use crate::ops::cache::PipelineCache;
use crate::ops::encoder::Encoder;
use crate::ops::kernel::{self, Dispatch, bad, rows_cols, to_u32};
use crate::tensor::{ActDtype, GpuTensor};

const WG: u64 = 256;

/// `rope.wgsl`'s `Params`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    n_heads: u32,
    half_dim: u32,
    pos0: u32,
    /// k's heads (`rope_qk`), and the row of k that is row 0.
    n_kv: u32,
    k_row0: u32,
    _pad: [u32; 2],
}
const _: () = assert!(size_of::<Params>() == 32);

/// Default RoPE inverse frequencies as torch computes them in f32:
/// `1 / theta^((2i) / head_dim)` for `i < head_dim / 2`. Scaled variants
/// (linear, llama3, …) are applied to this vector by the caller.
pub fn inv_freq(theta: f32, head_dim: usize) -> Vec<f32> {
    (0..head_dim / 2)
        .map(|i| 1.0f32 / theta.powf((2 * i) as f32 / head_dim as f32))
        .collect()
}

/// The (cos, sin) table `[positions, inv_freq.len(), 2]`, row-major, with
/// angle `pos · inv_freq[i]` in f32 and both values times `attention_scaling`
/// (1.0 for the default RoPE).
pub fn cos_sin_table(inv_freq: &[f32], positions: u64, attention_scaling: f32) -> Vec<f32> {
    let mut table = Vec::with_capacity(positions as usize * inv_freq.len() * 2);
    for pos in 0..positions {
        for &f in inv_freq {
            let angle = pos as f32 * f;
            table.push(angle.cos() * attention_scaling);
            table.push(angle.sin() * attention_scaling);
        }
    }
    table
}

/// A cos/sin table on the GPU for positions `0..positions`.
#[derive(Debug, Clone)]
pub struct RopeTable {
    /// `[positions, head_dim / 2, 2]` f32 (cos, sin) pairs.
    pub table: GpuTensor,
    /// The head dimension it rotates.
    pub head_dim: u64,
    /// How many positions it covers.
    pub positions: u64,
}

impl RopeTable {
    /// Uploads the default-RoPE table for `theta` and `head_dim`.
    pub fn new(gpu: &Gpu, theta: f32, head_dim: u64, positions: u64) -> Result<Self, GpuError> {
        Self::from_inv_freq(gpu, &inv_freq(theta, head_dim as usize), positions, 1.0)
    }

    /// Uploads the table for given inverse frequencies (`head_dim / 2` of them).
    pub fn from_inv_freq(
        gpu: &Gpu,
        inv_freq: &[f32],
        positions: u64,
        attention_scaling: f32,
    ) -> Result<Self, GpuError> {
        let half = inv_freq.len() as u64;
        if half == 0 || positions == 0 {
            return Err(bad(
                "rope_table",
                format!("{half} frequencies over {positions} positions: both must be > 0"),
            ));
        }
        let _span = tracing::debug_span!("upload", what = "rope_table", positions, half).entered();
        let data = cos_sin_table(inv_freq, positions, attention_scaling);
        let bytes: &[u8] = bytemuck::cast_slice(&data);
        let buffer = gpu.create_buffer(
            "rope_table",
            bytes.len() as u64,
            wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
        )?;
        gpu.queue.write_buffer(&buffer, 0, bytes);
        Ok(Self {
            table: GpuTensor {
                buffer: Arc::new(buffer),
                offset: 0,
                shape: vec![positions, half, 2],
                dtype: ActDtype::F32,
            },
            head_dim: 2 * half,
            positions,
        })
    }
}

/// Records RoPE in place on `x` `[seq, n_heads·head_dim]` (f32 or f16, head
/// h in columns `h·head_dim..(h+1)·head_dim`), row s at position `pos0 + s`.
pub fn record_rope(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    table: &RopeTable,
    x: &GpuTensor,
    n_heads: u64,
    pos0: u64,
) -> Result<(), GpuError> {
    let rows = check(table, "x", x, n_heads, pos0)?;
    record(gpu, cache, enc, table, (x, n_heads), None, rows, pos0)
}

/// RoPE on q and k of one attention layer (same rows and positions, same
/// table) in one launch. `k` may be a view into a KV cache.
#[allow(clippy::too_many_arguments)] // the op's operands
pub fn record_rope_qk(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    table: &RopeTable,
    q: &GpuTensor,
    k: &GpuTensor,
    n_heads: u64,
    n_kv_heads: u64,
    pos0: u64,
) -> Result<(), GpuError> {
    let heads = (n_heads, n_kv_heads);
    record_qk(gpu, cache, enc, table, q, k, heads, pos0, None)
}

/// [`record_rope_qk`] with k's rows in a KV cache: rotates q
/// `[seq, n_heads·head_dim]` and rows `pos0..pos0+seq` of `k_cache`
/// `[max_seq, n_kv·head_dim]` (bound whole, so any row offset works).
/// `heads`: (query heads, kv heads).
pub(crate) fn record_rope_q_cache(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    table: &RopeTable,
    [q, k_cache]: [&GpuTensor; 2],
    heads: (u64, u64),
    pos0: u64,
) -> Result<(), GpuError> {
    record_qk(gpu, cache, enc, table, q, k_cache, heads, pos0, Some(pos0))
}

/// q and k's rows `k_row0..` (`None`: k is exactly q's rows) in one launch.
#[allow(clippy::too_many_arguments)] // the op's operands
fn record_qk(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    table: &RopeTable,
    q: &GpuTensor,
    k: &GpuTensor,
    (n_heads, n_kv_heads): (u64, u64),
    pos0: u64,
    k_row0: Option<u64>,
) -> Result<(), GpuError> {
    let rows = check(table, "q", q, n_heads, pos0)?;
    let (k_rows, cols) = rows_cols(OP, "k", k)?;
    let fits = match k_row0 {
        None => k_rows == rows,
        Some(row0) => row0 + rows <= k_rows,
    };
    if cols != n_kv_heads * table.head_dim || !fits || k.dtype != q.dtype {
        return Err(bad(
            OP,
            format!(
                "`k` {:?} {:?} does not hold `q`'s {rows} rows of {:?} (from row {}) as [.., {n_kv_heads} * {}]",
                k.shape,
                k.dtype,
                q.dtype,
                k_row0.unwrap_or(0),
                table.head_dim
            ),
        ));
    }
    if *q.buffer == *k.buffer {
        return Err(bad(OP, "`q` and `k` share a buffer".into()));
    }
    record(
        gpu,
        cache,
        enc,
        table,
        (q, n_heads),
        Some((k, n_kv_heads, k_row0.unwrap_or(0))),
        rows,
        pos0,
    )
}

const OP: &str = "rope";

/// Checks `x` against the table and positions; returns its rows.
fn check(
    table: &RopeTable,
    name: &str,
    x: &GpuTensor,
    n_heads: u64,
    pos0: u64,
) -> Result<u64, GpuError> {
    let (rows, cols) = rows_cols(OP, name, x)?;
    let hd = table.head_dim;
    if n_heads == 0 || cols != n_heads * hd {
        return Err(bad(
            OP,
            format!(
                "`{name}` {:?} is not [seq, n_heads * head_dim] = [seq, {n_heads} * {hd}]",
                x.shape
            ),
        ));
    }
    if pos0 + rows > table.positions {
        return Err(GpuError::PastEnd {
            op: OP,
            what: "positions",
            start: pos0,
            end: pos0 + rows,
            len: table.positions,
            of: "the RoPE table".into(),
        });
    }
    Ok(rows)
}

/// One launch over `x` and, for `rope_qk`, `k`.
#[allow(clippy::too_many_arguments)]
fn record(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    table: &RopeTable,
    (x, n_heads): (&GpuTensor, u64),
    k: Option<(&GpuTensor, u64, u64)>,
    rows: u64,
    pos0: u64,
) -> Result<(), GpuError> {
    let half = table.head_dim / 2;
    let (n_kv, k_row0) = k.map_or((0, 0), |(_, n, row0)| (n, row0));
    let items = rows * (n_heads + n_kv) * half;
    to_u32(OP, "rows * heads * head_dim / 2", items)?;
    let _span = tracing::trace_span!("record", op = OP, rows, n_heads, n_kv, pos0).entered();
    let params = Params {
        rows: to_u32(OP, "rows", rows)?,
        n_heads: to_u32(OP, "n_heads", n_heads)?,
        half_dim: to_u32(OP, "head_dim / 2", half)?,
        pos0: to_u32(OP, "pos0", pos0)?,
        n_kv: to_u32(OP, "n_kv_heads", n_kv)?,
        k_row0: to_u32(OP, "k_row0", k_row0)?,
        _pad: [0; 2],
    };
    let mut bindings: kernel::Bindings<'_> =
        smallvec::smallvec![(1, table.table.binding()), (2, x.binding())];
    let mut bytes = x.bytes();
    if let Some((k, n_kv, _)) = k {
        bindings.push((3, k.binding()));
        bytes += rows * n_kv * table.head_dim * k.dtype.size();
    }
    kernel::record(
        gpu,
        cache,
        enc,
        Dispatch {
            source: ROPE,
            entry: if k.is_some() {
                "rope_qk"
            } else {
                "rope_inplace"
            },
            constants: &[],
            params: bytemuck::bytes_of(&params),
            bindings,
            groups: kernel::grid(gpu, OP, items, WG)?,
            act: x.dtype,
            cost: kernel::Cost::new(bytes + items * 8, bytes, 6 * items),
        },
    )
}
