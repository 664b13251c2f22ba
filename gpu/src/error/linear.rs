//! Errors of the linear op (`ops::linear` re-exports them), apart from the
//! ops: the runtime's error wraps them.

use dynvram_quant::{Format, KernelChoice};

use crate::device::GpuError;

/// Why a linear could not be recorded or uploaded. Variants name the layer
/// or tensor and carry the sizes involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LinearError {
    /// The GPU refused a buffer or pipeline.
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// A tensor's shape does not fit the layer.
    #[error("linear [N={n}, K={k}]: `{tensor}` has shape {shape:?}, expected {expected}")]
    Shape {
        /// Which operand.
        tensor: &'static str,
        /// Its shape.
        shape: Vec<u64>,
        /// What was expected, in words.
        expected: String,
        /// Layer out_features.
        n: u64,
        /// Layer in_features.
        k: u64,
    },
    /// Activation dtypes that do not fit together (`x` and `out` share one
    /// dtype, F32 or F16; the raw accumulator needs F32).
    #[error("linear: `{tensor}` is {dtype}")]
    ActDtype {
        /// Which operand.
        tensor: &'static str,
        /// Its dtype, in words.
        dtype: String,
    },
    /// The kernel choice does not apply to the format.
    #[error("linear: kernel {choice} cannot run format {format}: {why}")]
    Choice {
        /// The kernel asked for.
        choice: KernelChoice,
        /// The layer's format.
        format: Format,
        /// Why not.
        why: &'static str,
    },
    /// A size rule of the kernels (K multiple of 4, group sizes, u32 ranges).
    #[error("linear [N={n}, K={k}]: {what}")]
    Unsupported {
        /// The rule that failed.
        what: String,
        /// Layer out_features.
        n: u64,
        /// Layer in_features.
        k: u64,
    },
    /// A buffer region is misplaced or too small.
    #[error("linear: region `{region}` (offset {offset}, {size} bytes): {why}")]
    Region {
        /// Which region.
        region: &'static str,
        /// Byte offset.
        offset: u64,
        /// Byte size.
        size: u64,
        /// What is wrong.
        why: String,
    },
    /// An operand larger than one storage binding that the op does not split.
    #[error("linear: `{tensor}` needs {bytes} bytes in one binding; the adapter allows {limit}")]
    BindingTooLarge {
        /// Which operand.
        tensor: &'static str,
        /// Bytes needed.
        bytes: u64,
        /// `max_storage_buffer_binding_size`.
        limit: u64,
    },
    /// The VRAM budget refused a scratch buffer.
    #[error("linear scratch `{label}` ({bytes} bytes): {why}")]
    Scratch {
        /// Which buffer.
        label: String,
        /// Bytes asked for.
        bytes: u64,
        /// The budget's answer.
        why: String,
    },
    /// Host-side tensor bytes of a layer were missing or malformed.
    #[error("layer {layer}: {what}")]
    LayerData {
        /// Layer name.
        layer: String,
        /// What is wrong.
        what: String,
    },
}
