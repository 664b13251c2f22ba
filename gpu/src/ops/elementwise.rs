//! Elementwise ops on f32 or f16 activations (every operand of one call in
//! the same dtype, computed in f32): residual add, GELU (tanh), SiLU,
//! quick GELU (CLIP's `x·sigmoid(1.702x)`), SwiGLU (`silu(gate) * up`), GEGLU
//! (`gelu_tanh(gate) * up`, T5's gated MLP), multiply and scale, each out of
//! place or in place.

use dynvram_shaders::transformer::ELEMENTWISE;

use crate::device::{Gpu, GpuError};
use crate::ops::cache::PipelineCache;
use crate::ops::encoder::Encoder;
use crate::ops::kernel::{self, Dispatch, expect_distinct, expect_dtype, rows_cols, to_u32};
use crate::tensor::{ActDtype, GpuTensor};

const WG: u64 = 256;

/// A one-input op.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Unary {
    /// `0.5·h·(1 + tanh(√(2/π)·(h + 0.044715·h³)))` (GPT-2 / `gelu_pytorch_tanh`).
    GeluTanh,
    /// `x · sigmoid(x)`.
    Silu,
    /// `x · s`.
    Scale(f32),
    /// `x · sigmoid(1.702·x)` (CLIP's `quick_gelu`).
    QuickGelu,
}

/// A two-input op `f(a, b)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binary {
    /// `a + b` (residual add).
    Add,
    /// `silu(a) · b` (SwiGLU with `a` = gate, `b` = up).
    SwiGlu,
    /// `a · b`.
    Mul,
    /// `gelu_tanh(a) · b` (T5 v1.1's gated GELU with `a` = `wi_0 h`, `b` =
    /// `wi_1 h`).
    GeGlu,
}

impl Unary {
    fn code(self) -> f64 {
        match self {
            Self::GeluTanh => 0.0,
            Self::Silu => 1.0,
            Self::Scale(_) => 2.0,
            Self::QuickGelu => 3.0,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::GeluTanh => "gelu_tanh",
            Self::Silu => "silu",
            Self::Scale(_) => "scale",
            Self::QuickGelu => "quick_gelu",
        }
    }

    fn scale(self) -> f32 {
        match self {
            Self::Scale(s) => s,
            _ => 1.0,
        }
    }
}

impl Binary {
    fn code(self) -> f64 {
        match self {
            Self::Add => 0.0,
            Self::SwiGlu => 1.0,
            Self::Mul => 2.0,
            Self::GeGlu => 3.0,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Add => "add",
            Self::SwiGlu => "swiglu",
            Self::Mul => "mul",
            Self::GeGlu => "geglu",
        }
    }
}

/// `elementwise.wgsl`'s `Params`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    /// `Unary::Scale`'s factor (1 otherwise).
    scale: f32,
    _pad: [u32; 2],
}
const _: () = assert!(size_of::<Params>() == 16);

/// Element count of `t` (non-empty, of dtype `act`) as the kernel's u32.
fn count(op: &'static str, name: &str, t: &GpuTensor, act: ActDtype) -> Result<u32, GpuError> {
    expect_dtype(op, name, t, act)?;
    let (rows, cols) = rows_cols(op, name, t)?;
    to_u32(op, "elements", rows * cols)
}

fn same_shape(
    op: &'static str,
    a: (&str, &GpuTensor),
    b: (&str, &GpuTensor),
) -> Result<(), GpuError> {
    if a.1.shape != b.1.shape {
        return Err(GpuError::ShapeMismatch {
            op,
            name: b.0.to_owned(),
            shape: b.1.shape.clone(),
            expected: a.1.shape.clone(),
        });
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)] // one recorder for every (entry, op) pair
fn dispatch(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    op: &'static str,
    entry: &'static str,
    code: f64,
    n: u32,
    scale: f32,
    bindings: kernel::Bindings<'_>,
    act: ActDtype,
) -> Result<(), GpuError> {
    let _span = tracing::trace_span!("record", op, n).entered();
    let bindings_len = bindings.len();
    kernel::record(
        gpu,
        cache,
        enc,
        Dispatch {
            source: ELEMENTWISE,
            entry,
            constants: &[("OP", code)],
            params: bytemuck::bytes_of(&Params {
                n,
                scale,
                _pad: [0; 2],
            }),
            bindings,
            groups: kernel::grid(gpu, op, u64::from(n), WG)?,
            act,
            // Each binding is read or written once, element by element.
            cost: kernel::Cost::new(
                bindings_len as u64 * u64::from(n) * act.size(),
                0,
                u64::from(n),
            ),
        },
    )
}

/// Records `out = op(x)`; `out` has `x`'s shape and its own buffer.
pub fn record_unary(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    op: Unary,
    x: &GpuTensor,
    out: &GpuTensor,
) -> Result<(), GpuError> {
    let name = op.name();
    let n = count(name, "x", x, x.dtype)?;
    count(name, "out", out, x.dtype)?;
    same_shape(name, ("x", x), ("out", out))?;
    expect_distinct(name, out, &[("x", x)])?;
    let bindings: kernel::Bindings<'_> = smallvec::smallvec![(1, x.binding()), (3, out.binding())];
    dispatch(
        gpu,
        cache,
        enc,
        name,
        "unary_out",
        op.code(),
        n,
        op.scale(),
        bindings,
        x.dtype,
    )
}

/// Records `x = op(x)` in place.
pub fn record_unary_inplace(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    op: Unary,
    x: &GpuTensor,
) -> Result<(), GpuError> {
    let name = op.name();
    let n = count(name, "x", x, x.dtype)?;
    let bindings: kernel::Bindings<'_> = smallvec::smallvec![(3, x.binding())];
    dispatch(
        gpu,
        cache,
        enc,
        name,
        "unary_inplace",
        op.code(),
        n,
        op.scale(),
        bindings,
        x.dtype,
    )
}

/// Records `out = op(a, b)`; all three share one shape, `out` its own buffer.
pub fn record_binary(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    op: Binary,
    a: &GpuTensor,
    b: &GpuTensor,
    out: &GpuTensor,
) -> Result<(), GpuError> {
    let name = op.name();
    let n = count(name, "a", a, a.dtype)?;
    count(name, "b", b, a.dtype)?;
    count(name, "out", out, a.dtype)?;
    same_shape(name, ("a", a), ("b", b))?;
    same_shape(name, ("a", a), ("out", out))?;
    expect_distinct(name, out, &[("a", a), ("b", b)])?;
    let bindings: kernel::Bindings<'_> =
        smallvec::smallvec![(1, a.binding()), (2, b.binding()), (3, out.binding())];
    dispatch(
        gpu,
        cache,
        enc,
        name,
        "binary_out",
        op.code(),
        n,
        1.0,
        bindings,
        a.dtype,
    )
}

/// Records `x = op(x, y)` in place (`x += y` for [`Binary::Add`]); `y` has
/// `x`'s shape and its own buffer.
pub fn record_binary_inplace(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    op: Binary,
    x: &GpuTensor,
    y: &GpuTensor,
) -> Result<(), GpuError> {
    let name = op.name();
    let n = count(name, "x", x, x.dtype)?;
    count(name, "y", y, x.dtype)?;
    same_shape(name, ("x", x), ("y", y))?;
    expect_distinct(name, x, &[("y", y)])?;
    let bindings: kernel::Bindings<'_> = smallvec::smallvec![(2, y.binding()), (3, x.binding())];
    dispatch(
        gpu,
        cache,
        enc,
        name,
        "binary_inplace",
        op.code(),
        n,
        1.0,
        bindings,
        x.dtype,
    )
}

/// Residual add in place: `x += y`.
pub fn record_add_inplace(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    x: &GpuTensor,
    y: &GpuTensor,
) -> Result<(), GpuError> {
    record_binary_inplace(gpu, cache, enc, Binary::Add, x, y)
}

/// `out = silu(gate) · up` (the Llama MLP's SwiGLU).
pub fn record_swiglu(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    gate: &GpuTensor,
    up: &GpuTensor,
    out: &GpuTensor,
) -> Result<(), GpuError> {
    record_binary(gpu, cache, enc, Binary::SwiGlu, gate, up, out)
}
