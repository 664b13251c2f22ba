#![doc = include_str!("../README.md")]
//!
//! The embeddable dynvram runtime: opens a GPU, loads models under a VRAM
//! budget, and runs their blocks with streamed weights prefetched between
//! submits.
//!
//! Owns: the wgpu device, error capture and the GPU side of uploads
//! (host-memory import, pinned buffers, the staging ring's slots: [`gpu`];
//! the file side is [`loader`]'s); GPU ops ([`ops`]); models and their
//! residency ([`Model`]); passes with prefetch (`Model::run_pass`,
//! [`PassStats`]); accounting. Knows nothing of model architectures.

mod accounting;
mod activation;
mod block_folds;
mod block_ops;
mod config;
mod error;
mod files_list;
pub mod gpu;
mod lora;
mod model;
pub mod ops;
mod pass;
mod pins;
pub mod planning;
mod residency;
mod runtime;
mod stats;
pub mod tensor;
pub mod trace;
mod upload;

pub use accounting::TrackedBuffer;
pub use activation::Activation;
pub use block_folds::RmsNormOf;
pub use config::{PinSettings, RamFigures, RamReader, RuntimeConfig};
pub use error::{Result, RuntimeError};
pub use files_list::FilesList;
pub use gpu::{AdapterChoice, Gpu, GpuError};
pub use model::{BlockSpec, Model, ModelReport, ModelSpec, plan_spec};
pub use pass::{BlockCtx, PassEnd, PassRun, WeightView};
pub use pins::PinReport;
pub use residency::ModelResidency;
pub use runtime::{BudgetReport, Runtime};
pub use stats::{PassStats, StreamSources};
pub use tensor::{ActDtype, GpuTensor};

/// Re-exported so applications and the models crate need only the runtime.
pub use dynvram_loader as loader;
/// Re-exported so applications and the models crate need only the runtime.
pub use dynvram_memory as memory;
/// Re-exported so applications and the models crate need only the runtime.
pub use dynvram_quant as quant;
