//! The runtime's error type: every failure names the model file, tensor and sizes.

use std::path::PathBuf;

use dynvram_gpu::accounting::BufferError;
use dynvram_gpu::device::{GpuError, UploadError};
use dynvram_gpu::ops::linear::LinearError;

/// Anything that can go wrong while opening or running a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A GPU call failed (allocation, pipeline, device loss).
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// Reading a file failed.
    #[error(transparent)]
    Load(#[from] dynvram_loader::LoadError),
    /// A layer's tensors do not match its format.
    #[error("{model}: {source}")]
    Layout {
        /// The model's file.
        model: PathBuf,
        /// Which layer and tensor, and why.
        source: dynvram_quant::LayoutError,
    },
    /// The budget flags or an allocation against the budget failed.
    #[error(transparent)]
    Budget(#[from] dynvram_memory::BudgetError),
    /// The budget refused a buffer (the deficit rule); names the buffer.
    #[error("buffer `{label}`: {source}")]
    BudgetRefused {
        /// Buffer label.
        label: String,
        /// Why the budget refused.
        source: dynvram_memory::BudgetError,
    },
    /// Even streaming everything does not fit the budget.
    #[error("{model}: {source}")]
    Plan {
        /// The model's file.
        model: PathBuf,
        /// Why.
        source: dynvram_memory::PlanError,
    },
    /// The residency policy refused (an unknown model or bad page layout).
    #[error("{model}: {source}")]
    Residency {
        /// The model's file.
        model: PathBuf,
        /// Why.
        source: dynvram_memory::ResidencyError,
    },
    /// A float weight holds NaN or infinity: refused the first time its
    /// bytes are read, before anything computed from it is used.
    #[error(
        "{file}: tensor `{tensor}` holds {value} at element {index}{row}: weights must be finite (the file is damaged or was saved from a diverged run)"
    )]
    NonFiniteWeight {
        /// The file holding the tensor.
        file: PathBuf,
        /// The tensor.
        tensor: String,
        /// The first non-finite element, in storage order.
        index: u64,
        /// " (row N)" for a tensor of two or more dimensions, else empty.
        row: String,
        /// Its value (NaN, inf or -inf).
        value: f32,
    },
    /// The model has no tensor of that name.
    #[error("{model}: no tensor `{tensor}`")]
    MissingTensor {
        /// The model's file.
        model: PathBuf,
        /// The name asked for.
        tensor: String,
    },
    /// A model used with a runtime other than the one it was opened on
    /// (its weights, ids and budget belong to that one).
    #[error(
        "{model}: the model was opened on another runtime; open it again on this one to use it here"
    )]
    ForeignModel {
        /// The model's file.
        model: PathBuf,
    },
    /// The model has no linear layer of that name.
    #[error("{model}: no linear layer `{layer}` (a `{layer}.weight` of 2 dimensions)")]
    MissingLayer {
        /// The model's file.
        model: PathBuf,
        /// The name asked for.
        layer: String,
    },
    /// An op got tensors of the wrong shape.
    #[error("{op}: {detail}")]
    Shape {
        /// The op.
        op: String,
        /// Shapes involved.
        detail: String,
    },
    /// A tensor was used outside the block that declares it.
    #[error(
        "tensor `{tensor}` is not a weight of block {block} (`{block_name}`); declare it in that block"
    )]
    NotInBlock {
        /// Tensor name.
        tensor: String,
        /// Block index.
        block: usize,
        /// Block name.
        block_name: String,
    },
    /// A block's `BlockSpec::groups` do not cover its linears and tensors
    /// exactly once.
    #[error("{model}: block `{block}`: bad groups: {why}")]
    BadGroups {
        /// The model's file.
        model: PathBuf,
        /// Block name.
        block: String,
        /// What is wrong.
        why: String,
    },
    /// A block's code used a weight of a part of the block that streamed
    /// before the current one (its arena has been reused since).
    #[error(
        "block `{block_name}` streams in parts and its code used `{tensor}` (part {part}) after part {current}: declare BlockSpec::groups in the order the code uses them"
    )]
    PartOrder {
        /// Tensor name.
        tensor: String,
        /// Block name.
        block_name: String,
        /// The tensor's part.
        part: usize,
        /// The part being recorded.
        current: usize,
    },
    /// A linear layer could not be recorded.
    #[error("linear layer `{layer}`: {source}")]
    Linear {
        /// Layer name.
        layer: String,
        /// Why.
        source: LinearError,
    },
    /// A tensor's bytes could not be converted for upload.
    #[error("{model}: tensor `{tensor}` has dtype {dtype:?}, which {why}")]
    Dtype {
        /// The model's file.
        model: PathBuf,
        /// Tensor name.
        tensor: String,
        /// Its dtype.
        dtype: dynvram_loader::Dtype,
        /// What was expected.
        why: String,
    },
}

/// A failed upload is the loader's error (reading) or the GPU's.
impl From<UploadError> for RuntimeError {
    fn from(e: UploadError) -> Self {
        match e {
            UploadError::Load(e) => Self::Load(e),
            UploadError::Gpu(e) => Self::Gpu(e),
        }
    }
}

/// A tracked buffer the budget or the GPU refused.
impl From<BufferError> for RuntimeError {
    fn from(e: BufferError) -> Self {
        match e {
            BufferError::BudgetRefused { label, source } => Self::BudgetRefused { label, source },
            BufferError::Gpu(e) => Self::Gpu(e),
        }
    }
}

/// Shorthand.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
