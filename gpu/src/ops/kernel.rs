//! Shared plumbing of the transformer op recorders: operand checks, the
//! params, and a 2-D dispatch grid. Kept in one place
//! so every op fails the same way on bad operands.

use crate::device::{Gpu, GpuError};
use crate::ops::cache::{PipelineCache, Program};
use crate::ops::encoder::Encoder;
pub(crate) use crate::ops::launch::{Bindings, Cost};
use crate::ops::launch::{Launch, launch};
use crate::tensor::{ActDtype, GpuTensor};

/// A [`GpuError::BadOperands`] for `op`.
pub(crate) fn bad(op: &'static str, detail: String) -> GpuError {
    GpuError::BadOperands { op, detail }
}

/// Fails unless `t` holds `dtype` values.
pub(crate) fn expect_dtype(
    op: &'static str,
    name: &str,
    t: &GpuTensor,
    dtype: ActDtype,
) -> Result<(), GpuError> {
    if t.dtype != dtype {
        return Err(GpuError::DtypeMismatch {
            op,
            name: name.to_owned(),
            shape: t.shape.clone(),
            dtype: t.dtype,
            expected: dtype,
        });
    }
    Ok(())
}

/// Fails unless `t` is `dtype` with exactly shape `want`.
pub(crate) fn expect_shape(
    op: &'static str,
    name: &str,
    t: &GpuTensor,
    want: &[u64],
    dtype: ActDtype,
) -> Result<(), GpuError> {
    expect_dtype(op, name, t, dtype)?;
    if t.shape != want {
        return Err(GpuError::ShapeMismatch {
            op,
            name: name.to_owned(),
            shape: t.shape.clone(),
            expected: want.to_vec(),
        });
    }
    Ok(())
}

/// `t` as `[rows, cols]`: a 1-D tensor is one row, higher ranks fold their
/// outer dimensions into rows. Also checks that its binding (whole 4-byte
/// words) lies inside its buffer.
pub(crate) fn rows_cols(
    op: &'static str,
    name: &str,
    t: &GpuTensor,
) -> Result<(u64, u64), GpuError> {
    if t.offset + t.binding_bytes() > t.buffer.size() {
        return Err(GpuError::OutsideBuffer {
            op,
            what: format!("`{name}` {:?} {:?}", t.shape, t.dtype),
            start: t.offset,
            end: t.offset + t.binding_bytes(),
            buffer_size: t.buffer.size(),
        });
    }
    match t.shape.split_last() {
        Some((&cols, outer)) if cols > 0 => Ok((outer.iter().product(), cols)),
        _ => Err(bad(
            op,
            format!(
                "`{name}` has shape {:?}, expected at least one non-zero dimension",
                t.shape
            ),
        )),
    }
}

/// A count as the `u32` a kernel indexes with.
pub(crate) fn to_u32(op: &'static str, what: &str, v: u64) -> Result<u32, GpuError> {
    u32::try_from(v).map_err(|_| {
        bad(
            op,
            format!("{what} = {v} exceeds the u32 range kernels index with"),
        )
    })
}

/// Fails when two tensors share a buffer: a dispatch may not bind one buffer
/// both writable and readable (use the in-place entry instead).
pub(crate) fn expect_distinct(
    op: &'static str,
    out: &GpuTensor,
    inputs: &[(&str, &GpuTensor)],
) -> Result<(), GpuError> {
    for (name, t) in inputs {
        if *t.buffer == *out.buffer {
            return Err(GpuError::Aliased {
                op,
                name: (*name).to_owned(),
                shape: t.shape.clone(),
            });
        }
    }
    Ok(())
}

/// A kernel's immediates: its `Params` struct as bytes.
pub(crate) type Immediates = smallvec::SmallVec<[u8; 64]>;

/// One compute dispatch: which kernel, its params and its bindings.
pub(crate) struct Dispatch<'a, 'b> {
    /// WGSL source.
    pub source: &'static str,
    /// Entry point (also the profile's and the pipeline's label).
    pub entry: &'static str,
    /// Override constants.
    pub constants: &'a [(&'static str, f64)],
    /// The module's immediates, exactly its `Params` struct.
    pub params: &'a [u8],
    /// Storage bindings (binding index, resource).
    pub bindings: Bindings<'b>,
    /// Workgroups (x, y).
    pub groups: (u32, u32),
    /// Activation type of the module's `act` buffers (picks the variant).
    pub act: ActDtype,
    /// Bytes and FLOPs, for the profile.
    pub cost: Cost,
}

/// Workgroups for `items` items at `per_group` items each, laid out as a 2-D
/// grid within the adapter's per-dimension limit (kernels index
/// `(wid.y * nwg.x + wid.x)`).
pub(crate) fn grid(
    gpu: &Gpu,
    op: &'static str,
    items: u64,
    per_group: u64,
) -> Result<(u32, u32), GpuError> {
    let groups = items.div_ceil(per_group).max(1);
    let max = u64::from(gpu.device.limits().max_compute_workgroups_per_dimension);
    let x = groups.min(max);
    let y = groups.div_ceil(x);
    if y > max {
        return Err(bad(
            op,
            format!("{items} items need {groups} workgroups, over {max} x {max}"),
        ));
    }
    Ok((
        to_u32(op, "workgroups x", x)?,
        to_u32(op, "workgroups y", y)?,
    ))
}

/// Records `d` as one compute pass into `enc` through [`launch`].
pub(crate) fn record(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    d: Dispatch<'_, '_>,
) -> Result<(), GpuError> {
    launch(
        gpu,
        cache,
        enc,
        Launch {
            program: Program {
                source: d.source,
                entry: d.entry,
                constants: d.constants,
                act: d.act,
            },
            label: &d.entry,
            bindings: &d.bindings,
            immediates: d.params,
            groups: d.groups,
            cost: d.cost,
        },
    )
}
