//! Diffusion-transformer ops (Flux, as Black Forest Labs wrote it and
//! ComfyUI runs it), on f32 or f16 activations with f32 arithmetic:
//!
//! - [`record_ada_norm`]: adaLN modulation `(1 + scale) · LayerNorm(x) + shift`
//!   (no affine weights) with per-batch-element `shift`/`scale` chunks of a
//!   modulation tensor;
//! - [`record_gated_add`]: the gated residual `x += gate · y`;
//! - [`record_qk_place`]: per-head QK RMSNorm and interleaved-pair RoPE,
//!   written into the rows of a joint (txt + img) sequence;
//! - [`record_gather`]: a batched block copy of rows and columns, optionally
//!   through GELU (tanh) — splitting and joining token streams and the
//!   single block's `cat(attn, gelu(mlp))`;
//! - host tables: [`timestep_embedding`] and [`rope_table`] (n-axis RoPE
//!   from position ids, in f64 as ComfyUI computes it, stored as f32).
//!
//! Batched operands are `[batch · per_batch, cols]`: row r belongs to batch
//! element `r / per_batch`. A modulation tensor is `[batch, chunks · cols]`
//! (the output of `lin(silu(vec))`); chunk j of element b is columns
//! `j·cols..(j+1)·cols` of row b.

use dynvram_shaders::transformer::DIT;

use crate::device::{Gpu, GpuError};
use crate::ops::cache::PipelineCache;
use crate::ops::encoder::Encoder;
use crate::ops::kernel::{
    self, Dispatch, bad, expect_distinct, expect_dtype, expect_shape, rows_cols, to_u32,
};
use crate::tensor::{ActDtype, GpuTensor};

const WG: u64 = 256;

/// `dit.wgsl`'s `AdaNormParams`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct AdaNormParams {
    rows: u32,
    cols: u32,
    per_batch: u32,
    mod_cols: u32,
    shift0: u32,
    scale0: u32,
    eps: f32,
    _pad0: u32,
}
const _: () = assert!(size_of::<AdaNormParams>() == 32);

/// `dit.wgsl`'s `GatedAddParams`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GatedAddParams {
    rows: u32,
    cols: u32,
    per_batch: u32,
    mod_cols: u32,
    gate0: u32,
    _pad: [u32; 3],
}
const _: () = assert!(size_of::<GatedAddParams>() == 32);

/// `dit.wgsl`'s `QkPlaceParams`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct QkPlaceParams {
    rows: u32,
    cols: u32,
    src_per_batch: u32,
    src_width: u32,
    src_col0: u32,
    head_dim: u32,
    eps: f32,
    dst_per_batch: u32,
    dst_row0: u32,
    _pad: [u32; 3],
}
const _: () = assert!(size_of::<QkPlaceParams>() == 48);

/// `dit.wgsl`'s `GatherParams`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GatherParams {
    rows: u32,
    cols: u32,
    batch: u32,
    src_per_batch: u32,
    src_row0: u32,
    src_width: u32,
    src_col0: u32,
    dst_per_batch: u32,
    dst_row0: u32,
    dst_width: u32,
    dst_col0: u32,
    op: u32,
}
const _: () = assert!(size_of::<GatherParams>() == 48);

#[allow(clippy::too_many_arguments)] // one recorder for every entry
fn dispatch<P: bytemuck::Pod>(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    entry: &'static str,
    params: &P,
    bindings: kernel::Bindings<'_>,
    groups: (u32, u32),
    act: ActDtype,
    cost: kernel::Cost,
) -> Result<(), GpuError> {
    let _span = tracing::trace_span!("record", op = entry).entered();
    kernel::record(
        gpu,
        cache,
        enc,
        Dispatch {
            source: DIT,
            entry,
            constants: &[],
            params: bytemuck::bytes_of(params),
            bindings,
            groups,
            act,
            cost,
        },
    )
}

/// Checks a batched operand `x` `[rows, cols]` against a modulation tensor
/// `m` `[batch, chunks · cols]` and returns `(rows, cols, chunks)`.
fn check_modulated(
    op: &'static str,
    x: &GpuTensor,
    m: &GpuTensor,
    per_batch: u64,
) -> Result<(u64, u64, u64), GpuError> {
    let (rows, cols) = rows_cols(op, "x", x)?;
    expect_dtype(op, "modulation", m, x.dtype)?;
    let (batch, mod_cols) = rows_cols(op, "modulation", m)?;
    if per_batch == 0 || rows != batch * per_batch {
        return Err(bad(
            op,
            format!(
                "`x` {:?} is not {batch} batch elements of {per_batch} rows (modulation {:?})",
                x.shape, m.shape
            ),
        ));
    }
    if !mod_cols.is_multiple_of(cols) {
        return Err(bad(
            op,
            format!(
                "modulation {:?} is not chunks of x's {cols} columns",
                m.shape
            ),
        ));
    }
    Ok((rows, cols, mod_cols / cols))
}

fn check_chunk(op: &'static str, what: &str, chunk: u64, chunks: u64) -> Result<(), GpuError> {
    if chunk >= chunks {
        return Err(bad(
            op,
            format!("{what} chunk {chunk} is past the modulation's {chunks} chunks"),
        ));
    }
    Ok(())
}

/// Records `out = (1 + m[b, scale]) · LayerNorm(x) + m[b, shift]` per row
/// (LayerNorm without weights, biased variance, `eps`; `shift` and `scale`
/// are chunk indices of `m`). `x` and `out` `[batch · per_batch, cols]`, `m`
/// `[batch, chunks · cols]`, all of one dtype.
#[allow(clippy::too_many_arguments)] // the op's operands
pub fn record_ada_norm(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    x: &GpuTensor,
    m: &GpuTensor,
    per_batch: u64,
    [shift, scale]: [u64; 2],
    out: &GpuTensor,
    eps: f32,
) -> Result<(), GpuError> {
    const OP: &str = "ada_norm";
    let (rows, cols, chunks) = check_modulated(OP, x, m, per_batch)?;
    check_chunk(OP, "shift", shift, chunks)?;
    check_chunk(OP, "scale", scale, chunks)?;
    expect_shape(OP, "out", out, &x.shape, x.dtype)?;
    rows_cols(OP, "out", out)?;
    expect_distinct(OP, out, &[("x", x), ("modulation", m)])?;
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(bad(OP, format!("eps = {eps} must be finite and >= 0")));
    }
    let params = AdaNormParams {
        rows: to_u32(OP, "rows", rows)?,
        cols: to_u32(OP, "cols", cols)?,
        per_batch: to_u32(OP, "per_batch", per_batch)?,
        mod_cols: to_u32(OP, "modulation columns", chunks * cols)?,
        shift0: to_u32(OP, "shift offset", shift * cols)?,
        scale0: to_u32(OP, "scale offset", scale * cols)?,
        eps,
        _pad0: 0,
    };
    // Vectors of four where a row holds them whole and fits the registers.
    let (entry, at) = match cols.is_multiple_of(4) && cols <= ADA_MAX_VEC_COLS {
        true => ("ada_norm_vec", [9, 11, 10]),
        false => (OP, [1, 2, 3]),
    };
    let bindings: kernel::Bindings<'_> = smallvec::smallvec![
        (at[0], x.binding()),
        (at[1], m.binding()),
        (at[2], out.binding())
    ];
    dispatch(
        gpu,
        cache,
        enc,
        entry,
        &params,
        bindings,
        kernel::grid(gpu, OP, rows, 1)?,
        x.dtype,
        kernel::Cost::new(
            2 * x.bytes() + 2 * out.bytes(),
            out.bytes(),
            8 * rows * cols,
        ),
    )
}

/// Records `x += m[b, gate] · y` (the gated residual; `gate` a chunk index
/// of `m`). `x` and `y` `[batch · per_batch, cols]`, `m` `[batch, chunks · cols]`.
#[allow(clippy::too_many_arguments)] // the op's operands
pub fn record_gated_add(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    x: &GpuTensor,
    y: &GpuTensor,
    m: &GpuTensor,
    per_batch: u64,
    gate: u64,
) -> Result<(), GpuError> {
    const OP: &str = "gated_add";
    let (rows, cols, chunks) = check_modulated(OP, x, m, per_batch)?;
    check_chunk(OP, "gate", gate, chunks)?;
    expect_shape(OP, "y", y, &x.shape, x.dtype)?;
    rows_cols(OP, "y", y)?;
    expect_distinct(OP, x, &[("y", y), ("modulation", m)])?;
    let n = rows * cols;
    to_u32(OP, "elements", n)?;
    let params = GatedAddParams {
        rows: to_u32(OP, "rows", rows)?,
        cols: to_u32(OP, "cols", cols)?,
        per_batch: to_u32(OP, "per_batch", per_batch)?,
        mod_cols: to_u32(OP, "modulation columns", chunks * cols)?,
        gate0: to_u32(OP, "gate offset", gate * cols)?,
        _pad: [0; 3],
    };
    // Fours as vectors where rows (and so the gate's chunks) hold them whole.
    let (entry, at, run) = match cols.is_multiple_of(4) {
        true => ("gated_add_vec", [9, 11, 10], 4 * VECS),
        false => (OP, [1, 2, 3], 1),
    };
    let bindings: kernel::Bindings<'_> = smallvec::smallvec![
        (at[0], y.binding()),
        (at[1], m.binding()),
        (at[2], x.binding())
    ];
    dispatch(
        gpu,
        cache,
        enc,
        entry,
        &params,
        bindings,
        kernel::grid(gpu, OP, n.div_ceil(run), WG)?,
        x.dtype,
        kernel::Cost::new(3 * x.bytes(), x.bytes(), 2 * n),
    )
}

/// Where [`record_qk_place`] writes: rows `row0..row0 + per_batch_src` of
/// each batch element of `dst` `[batch · per_batch, heads · head_dim]`.
#[derive(Debug, Clone, Copy)]
pub struct Joint<'a> {
    /// The joint sequence's q or k.
    pub dst: &'a GpuTensor,
    /// Rows of one batch element in `dst` (L_txt + L_img).
    pub per_batch: u64,
    /// First row of this stream within each batch element (0 for txt, L_txt for img).
    pub row0: u64,
}

/// Records q or k of one token stream into the joint sequence: columns
/// `src_col0..src_col0 + heads·head_dim` of `src` `[batch · src_per_batch,
/// src_cols]` (a fused qkv output), each head RMS-normed over `head_dim`
/// (`x / √(mean(x²) + eps) · weight`, `weight` f32 `[head_dim]`), then
/// rotated by interleaved pairs `(x[2i], x[2i+1])` with the (cos, sin) of
/// its joint row in `pe` (f32 `[batch · dst.per_batch, head_dim / 2, 2]`,
/// see [`rope_table`]): `(c·x0 − s·x1, s·x0 + c·x1)`.
#[allow(clippy::too_many_arguments)] // the op's operands
pub fn record_qk_place(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    src: &GpuTensor,
    src_per_batch: u64,
    src_col0: u64,
    weight: &GpuTensor,
    pe: &GpuTensor,
    head_dim: u64,
    eps: f32,
    to: Joint<'_>,
) -> Result<(), GpuError> {
    const OP: &str = "qk_place";
    let (rows, src_cols) = rows_cols(OP, "src", src)?;
    let dst = to.dst;
    expect_dtype(OP, "dst", dst, src.dtype)?;
    let (dst_rows, cols) = rows_cols(OP, "dst", dst)?;
    if head_dim == 0
        || !head_dim.is_multiple_of(2)
        || !cols.is_multiple_of(head_dim)
        || head_dim > QK_MAX_HEAD_DIM
    {
        return Err(bad(
            OP,
            format!(
                "head_dim {head_dim} must be even, at most {QK_MAX_HEAD_DIM} and divide dst's {cols} columns ({:?})",
                dst.shape
            ),
        ));
    }
    // The kernel moves pairs: every row and head starts on one.
    if !(src_cols.is_multiple_of(2) && src_col0.is_multiple_of(2)) {
        return Err(bad(
            OP,
            format!(
                "src's width {src_cols} and first column {src_col0} must be even ({:?})",
                src.shape
            ),
        ));
    }
    if src_col0 + cols > src_cols {
        return Err(bad(
            OP,
            format!(
                "columns {src_col0}..{} are past src's {src_cols} ({:?})",
                src_col0 + cols,
                src.shape
            ),
        ));
    }
    if src_per_batch == 0 || !rows.is_multiple_of(src_per_batch) {
        return Err(bad(
            OP,
            format!("src {:?} is not batches of {src_per_batch} rows", src.shape),
        ));
    }
    let batch = rows / src_per_batch;
    if to.row0 + src_per_batch > to.per_batch || dst_rows != batch * to.per_batch {
        return Err(bad(
            OP,
            format!(
                "rows {}..{} of {batch} batch elements of {} rows do not fit dst {:?}",
                to.row0,
                to.row0 + src_per_batch,
                to.per_batch,
                dst.shape
            ),
        ));
    }
    expect_shape(OP, "weight", weight, &[head_dim], ActDtype::F32)?;
    expect_shape(OP, "pe", pe, &[dst_rows, head_dim / 2, 2], ActDtype::F32)?;
    rows_cols(OP, "pe", pe)?;
    rows_cols(OP, "weight", weight)?;
    expect_distinct(OP, dst, &[("src", src), ("weight", weight), ("pe", pe)])?;
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(bad(OP, format!("eps = {eps} must be finite and >= 0")));
    }
    let items = rows * (cols / head_dim);
    to_u32(OP, "rows * heads", items)?;
    to_u32(OP, "dst elements", dst.numel())?;
    let params = QkPlaceParams {
        rows: to_u32(OP, "rows", rows)?,
        cols: to_u32(OP, "cols", cols)?,
        src_per_batch: to_u32(OP, "src rows per batch", src_per_batch)?,
        src_width: to_u32(OP, "src columns", src_cols)?,
        src_col0: to_u32(OP, "src column", src_col0)?,
        head_dim: to_u32(OP, "head_dim", head_dim)?,
        eps,
        dst_per_batch: to_u32(OP, "dst rows per batch", to.per_batch)?,
        dst_row0: to_u32(OP, "dst row", to.row0)?,
        _pad: [0; 3],
    };
    // Quads as vectors where every head starts on one and fits a group's
    // QV_QUADS of them an invocation.
    let quads = head_dim.is_multiple_of(4)
        && head_dim <= QV_MAX_HEAD_DIM
        && src_cols.is_multiple_of(4)
        && src_col0.is_multiple_of(4);
    let (entry, at, per_group) = match quads {
        true => ("qk_place_vec", [9, 10, 12, 13], QV_ITEMS),
        false => (OP, [6, 7, 8, 5], 1),
    };
    let bindings: kernel::Bindings<'_> = smallvec::smallvec![
        (at[0], src.binding()),
        (at[1], dst.binding()),
        (at[2], weight.binding()),
        (at[3], pe.binding()),
    ];
    let moved = rows * cols * src.dtype.size();
    dispatch(
        gpu,
        cache,
        enc,
        entry,
        &params,
        bindings,
        // QK_ITEMS groups a workgroup, each of `per_group` (row, head) items.
        kernel::grid(gpu, OP, items.div_ceil(QK_ITEMS * per_group), 1)?,
        src.dtype,
        kernel::Cost::new(2 * moved + rows * cols * 4, moved, 10 * rows * cols),
    )
}

/// One side of a [`record_gather`]: a batched tensor `[batch · per_batch,
/// width]` and where the block starts in each batch element.
#[derive(Debug, Clone, Copy)]
pub struct Block<'a> {
    /// The tensor.
    pub t: &'a GpuTensor,
    /// Rows of one batch element.
    pub per_batch: u64,
    /// First row of the block within each batch element.
    pub row0: u64,
    /// First column of the block.
    pub col0: u64,
}

/// What [`record_gather`] applies to each element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatherOp {
    /// A plain copy (converted through f32: exact).
    Copy,
    /// GELU, tanh approximation.
    GeluTanh,
}

impl GatherOp {
    /// `GatherParams::op` in `dit.wgsl`.
    fn code(self) -> u32 {
        match self {
            Self::Copy => 0,
            Self::GeluTanh => 1,
        }
    }
}

/// Vectors of four each invocation of `gather_vec` and `gated_add_vec`
/// moves (`VECS` in `dit.wgsl`).
const VECS: u64 = 4;

/// Vectors of four each invocation of `ada_norm_vec` holds (`ADA_VECS` in
/// `dit.wgsl`).
const ADA_VECS: u64 = 4;

/// Widest row `ada_norm_vec` takes: `ADA_VECS` vectors of four for each of
/// its `WG` invocations; wider rows take `ada_norm`.
const ADA_MAX_VEC_COLS: u64 = 4 * ADA_VECS * WG;

/// (row, head) items a workgroup of `qk_place` (`QK_ITEMS` in `dit.wgsl`).
const QK_ITEMS: u64 = 8;

/// (row, head) items each group of `qk_place_vec` takes (`QV_ITEMS`).
const QV_ITEMS: u64 = 4;

/// Largest head dimension `qk_place_vec` takes (`4 · QK_WG · QV_QUADS`);
/// larger ones take `qk_place`.
const QV_MAX_HEAD_DIM: u64 = 4 * 32 * 2;

/// Largest head dimension `qk_place` takes: its invocations hold
/// `QK_PAIRS` pairs each, `QK_WG` of them an item (`dit.wgsl`).
pub const QK_MAX_HEAD_DIM: u64 = 2 * 32 * 4;

/// Columns each invocation of `gather` takes of rows
/// `cols` wide: four where a row holds whole fours (as the kernels decide),
/// else one.
fn four_or_one(cols: u64) -> u64 {
    if cols.is_multiple_of(4) { 4 } else { 1 }
}

/// Records, for each of `batch` elements, `dst[row0 + s, col0 + c] =
/// op(src[row0 + s, col0 + c])` for `s < rows`, `c < cols` (rows and
/// columns relative to each side's own block). `src` and `dst` share a
/// dtype, not a buffer.
#[allow(clippy::too_many_arguments)] // the op's operands
pub fn record_gather(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    src: Block<'_>,
    dst: Block<'_>,
    batch: u64,
    [rows, cols]: [u64; 2],
    op: GatherOp,
) -> Result<(), GpuError> {
    const OP: &str = "gather";
    expect_dtype(OP, "dst", dst.t, src.t.dtype)?;
    expect_distinct(OP, dst.t, &[("src", src.t)])?;
    let mut widths = [0u64; 2];
    for (i, (name, side)) in [("src", src), ("dst", dst)].into_iter().enumerate() {
        let (total, width) = rows_cols(OP, name, side.t)?;
        widths[i] = width;
        if side.row0 + rows > side.per_batch
            || total != batch * side.per_batch
            || side.col0 + cols > width
        {
            return Err(bad(
                OP,
                format!(
                    "rows {}..{} and columns {}..{} of {batch} batch elements of {} rows are not inside `{name}` {:?}",
                    side.row0,
                    side.row0 + rows,
                    side.col0,
                    side.col0 + cols,
                    side.per_batch,
                    side.t.shape
                ),
            ));
        }
        to_u32(OP, "elements", total * width)?;
    }
    let n = batch * rows * cols;
    if n == 0 {
        return Ok(());
    }
    to_u32(OP, "elements", n)?;
    let params = GatherParams {
        rows: to_u32(OP, "rows", rows)?,
        cols: to_u32(OP, "cols", cols)?,
        batch: to_u32(OP, "batch", batch)?,
        src_per_batch: to_u32(OP, "src rows per batch", src.per_batch)?,
        src_row0: to_u32(OP, "src row", src.row0)?,
        src_width: to_u32(OP, "src width", widths[0])?,
        src_col0: to_u32(OP, "src column", src.col0)?,
        dst_per_batch: to_u32(OP, "dst rows per batch", dst.per_batch)?,
        dst_row0: to_u32(OP, "dst row", dst.row0)?,
        dst_width: to_u32(OP, "dst width", widths[1])?,
        dst_col0: to_u32(OP, "dst column", dst.col0)?,
        op: op.code(),
    };
    // Fours as vectors where both sides hold them whole.
    let fours = [cols, widths[0], widths[1], src.col0, dst.col0]
        .iter()
        .all(|v| v.is_multiple_of(4));
    let (entry, [at_src, at_dst], run) = match fours {
        true => ("gather_vec", [9, 10], 4 * VECS),
        false => ("gather", [1, 3], four_or_one(cols)),
    };
    let bindings: kernel::Bindings<'_> =
        smallvec::smallvec![(at_src, src.t.binding()), (at_dst, dst.t.binding())];
    let bytes = n * src.t.dtype.size();
    dispatch(
        gpu,
        cache,
        enc,
        entry,
        &params,
        bindings,
        kernel::grid(gpu, OP, n.div_ceil(run), WG)?,
        src.t.dtype,
        kernel::Cost::new(bytes, bytes, n),
    )
}

/// The sinusoidal embedding of BFL's `timestep_embedding(t, dim)` with
/// `time_factor` 1000 and `max_period` 10000, computed in f32 as torch
/// does: `t' = 1000·t`, `freqs[i] = exp(−ln(10000)·i/half)`, the row
/// `[cos(t'·freqs), sin(t'·freqs)]` (cos first; a zero column appended
/// for odd `dim`). Returns `[t.len(), dim]` row-major.
pub fn timestep_embedding(t: &[f32], dim: usize) -> Vec<f32> {
    let half = dim / 2;
    let ln = 10000f64.ln();
    let freqs: Vec<f32> = (0..half)
        .map(|i| {
            // torch: (-ln(10000) · arange(half) in f32) / half, all f32, then exp.
            let a = (-(ln as f32)) * i as f32 / half as f32;
            a.exp()
        })
        .collect();
    let mut out = Vec::with_capacity(t.len() * dim);
    for &ti in t {
        let tt = 1000.0f32 * ti;
        let args: Vec<f32> = freqs.iter().map(|&f| tt * f).collect();
        out.extend(args.iter().map(|a| a.cos()));
        out.extend(args.iter().map(|a| a.sin()));
        if dim % 2 == 1 {
            out.push(0.0);
        }
    }
    out
}

/// The RoPE table of n-axis position ids (BFL `EmbedND`): `ids` is
/// `[rows, axes_dim.len()]` row-major; pair j of axis a (`axes_dim[a] / 2`
/// pairs each, axes in order) gets the angle `pos · theta^(−2j/axes_dim[a])`,
/// computed in f64 and stored as f32 `(cos, sin)`. Returns `[rows,
/// Σ axes_dim / 2, 2]` row-major, the `pe` of [`record_qk_place`].
pub fn rope_table(ids: &[f32], axes_dim: &[usize], theta: f64) -> Vec<f32> {
    let n_axes = axes_dim.len().max(1);
    let omegas: Vec<(usize, f64)> = axes_dim
        .iter()
        .enumerate()
        .flat_map(|(a, &d)| {
            (0..d / 2).map(move |j| (a, 1.0 / theta.powf(2.0 * j as f64 / d as f64)))
        })
        .collect();
    let mut out = Vec::with_capacity(ids.len() / n_axes * omegas.len() * 2);
    for row in ids.chunks_exact(n_axes) {
        for &(a, omega) in &omegas {
            let angle = f64::from(row[a]) * omega;
            out.push(angle.cos() as f32);
            out.push(angle.sin() as f32);
        }
    }
    out
}
