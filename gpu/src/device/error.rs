//! Errors from the wgpu side.

use crate::tensor::ActDtype;

/// A failure talking to the GPU. Each variant names what was being created
/// and the sizes involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GpuError {
    /// No adapter matched the requested backend/name.
    #[error("no GPU adapter matches {wanted}; available: {available}")]
    NoAdapter {
        /// What was asked for.
        wanted: String,
        /// What exists, one per adapter.
        available: String,
    },
    /// `--backend` named something wgpu does not know.
    #[error("unknown backend `{0}` (expected vulkan, gl, metal, dx12 or a comma list)")]
    UnknownBackend(String),
    /// The device could not be opened.
    #[error("could not open a device on adapter `{adapter}`: {message}")]
    RequestDevice {
        /// Adapter name.
        adapter: String,
        /// wgpu's message.
        message: String,
    },
    /// The driver refused an allocation; freeing something may help.
    #[error("GPU out of memory allocating `{label}` ({size} bytes): {message}")]
    OutOfMemory {
        /// Buffer label.
        label: String,
        /// Requested bytes.
        size: u64,
        /// wgpu's message.
        message: String,
    },
    /// A buffer larger than the adapter's `max_buffer_size`; it can never fit.
    #[error(
        "buffer `{label}` of {requested} bytes exceeds the adapter's max_buffer_size {maximum}"
    )]
    BufferTooLarge {
        /// Buffer label.
        label: String,
        /// Requested bytes.
        requested: u64,
        /// The limit.
        maximum: u64,
    },
    /// wgpu rejected a call (a bug in our code or an adapter limit).
    #[error("wgpu validation failed for {what}: {message}")]
    Validation {
        /// What was being created.
        what: String,
        /// wgpu's message.
        message: String,
    },
    /// The device was lost; every later call fails with this.
    #[error("GPU device lost: {reason}")]
    DeviceLost {
        /// The driver's reason.
        reason: String,
    },
    /// An error escaped every error scope.
    #[error("uncaptured GPU error: {message}")]
    Uncaptured {
        /// wgpu's message.
        message: String,
    },
    /// Waiting for the GPU failed.
    #[error("waiting for the GPU failed: {message}")]
    Poll {
        /// wgpu's message.
        message: String,
    },
    /// The VRAM budget refused an op's scratch buffer.
    #[error("{op}: scratch `{label}` ({bytes} bytes) refused: {why}")]
    Scratch {
        /// The op.
        op: &'static str,
        /// Which buffer.
        label: String,
        /// Bytes asked for.
        bytes: u64,
        /// The budget's answer.
        why: String,
    },
    /// An op was given operands whose shapes, dtypes or sizes do not fit
    /// together (a caller bug, never retried).
    #[error("{op}: bad operands: {detail}")]
    BadOperands {
        /// The op (e.g. `rms_norm`).
        op: &'static str,
        /// The shapes and numbers that disagree.
        detail: String,
    },
    /// An operand's shape is not the one the op needs.
    #[error("{op}: bad operands: `{name}` has shape {shape:?}, expected {expected:?}")]
    ShapeMismatch {
        /// The op.
        op: &'static str,
        /// The operand.
        name: String,
        /// Its shape.
        shape: Vec<u64>,
        /// The shape the op needs.
        expected: Vec<u64>,
    },
    /// An operand's element type is not the one the op needs.
    #[error("{op}: bad operands: `{name}` {shape:?} is {dtype}, expected {expected}")]
    DtypeMismatch {
        /// The op.
        op: &'static str,
        /// The operand.
        name: String,
        /// Its shape.
        shape: Vec<u64>,
        /// Its element type.
        dtype: ActDtype,
        /// The element type the op needs.
        expected: ActDtype,
    },
    /// An out-of-place op's output shares a buffer with one of its inputs
    /// (a dispatch may not bind one buffer both writable and readable).
    #[error(
        "{op}: bad operands: output shares a buffer with `{name}` {shape:?}; use the in-place variant"
    )]
    Aliased {
        /// The op.
        op: &'static str,
        /// The input sharing the output's buffer.
        name: String,
        /// The input's shape.
        shape: Vec<u64>,
    },
    /// An operand's bytes run past the end of its buffer.
    #[error(
        "{op}: bad operands: {what} needs bytes {start}..{end} but its buffer has {buffer_size}"
    )]
    OutsideBuffer {
        /// The op.
        op: &'static str,
        /// The operand, quoted, with its shape and dtype where it is a
        /// tensor.
        what: String,
        /// First byte it needs.
        start: u64,
        /// One past the last byte it needs.
        end: u64,
        /// Bytes in its buffer.
        buffer_size: u64,
    },
    /// A range of rows or positions runs past the end of what holds them
    /// (a KV cache's rows, a RoPE table's positions).
    #[error("{op}: bad operands: {what} {start}..{end} run past the {len} of {of}")]
    PastEnd {
        /// The op.
        op: &'static str,
        /// What the range counts (`rows`, `positions`).
        what: &'static str,
        /// First of the range.
        start: u64,
        /// One past its last.
        end: u64,
        /// How many there are.
        len: u64,
        /// What holds them, quoted, with its shape where it is a tensor.
        of: String,
    },
    /// f16 activations were asked for on an adapter without `SHADER_F16`
    /// (use f32 activations there).
    #[error("{op}: f16 activations need SHADER_F16, which adapter `{adapter}` lacks; use f32")]
    NoShaderF16 {
        /// The op or allocation that asked.
        op: String,
        /// The adapter's name.
        adapter: String,
    },
    /// Mapping a buffer failed.
    #[error("mapping a GPU buffer failed: {message}")]
    Map {
        /// wgpu's message.
        message: String,
    },
    /// A GPU step of moving host bytes to the GPU failed: a staging slot or
    /// pin (allocation, mapping), a copy's destination (alignment, usage,
    /// room), or waiting for staged copies.
    #[error("GPU {what}: {message}")]
    Upload {
        /// The operation and buffer.
        what: String,
        /// The details.
        message: String,
    },
}

/// What can go wrong moving bytes from a file to the GPU: reading them (the
/// loader's error, naming file and tensor) or the GPU side.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// Reading the bytes failed.
    #[error(transparent)]
    Load(#[from] dynvram_loader::LoadError),
    /// The GPU side failed (usually [`GpuError::Upload`]).
    #[error(transparent)]
    Gpu(#[from] GpuError),
}
