#![doc = include_str!("../README.md")]
//!
//! The embeddable dynvram runtime: opens a GPU, loads models under a VRAM
//! budget, and runs their blocks with streamed weights prefetched between
//! submits.
//!
//! Owns: models and their residency ([`Model`]); passes with prefetch
//! (`Model::run_pass`, [`PassStats`]); pins, LoRA and accounting. The
//! device, the GPU side of uploads ([`device`]), tracked buffers and the ops
//! ([`ops`]) are `dynvram_gpu`'s, re-exported here; the file side of
//! uploads is [`loader`]'s. Knows nothing of model architectures.

mod activation;
mod block_folds;
mod block_ops;
mod config;
mod device_lanes;
mod error;
mod files_list;
mod lora;
mod model;
mod pass;
mod pin_builder;
mod pins;
pub mod planning;
mod residency;
pub mod roofline;
mod runtime;
pub mod trace;
mod upload;

pub use activation::Activation;
pub use block_folds::RmsNormOf;
pub use config::{PinSettings, RESIDENT_SUBMIT_BLOCKS, RamFigures, RamReader, RuntimeConfig};
pub use error::{Result, RuntimeError};
pub use files_list::FilesList;
pub use model::{BlockSpec, Model, ModelReport, ModelSpec, plan_spec};
pub use pass::{BlockCtx, PassEnd, PassRun, WeightView};
pub use pins::PinReport;
pub use residency::ModelResidency;
pub use runtime::{BudgetReport, Runtime};

// The GPU layer the runtime runs on, re-exported so applications and the
// models crate need only the runtime: the device and the GPU side of uploads
// (`device`), the ops, tensors, tracked buffers, the pass figures.
pub use dynvram_gpu::{
    ActDtype, AdapterChoice, Gpu, GpuError, GpuTensor, PassStats, PipelineTime, StreamSources,
    TrackedBuffer, device, ops, tensor,
};
/// Re-exported so applications and the models crate need only the runtime.
pub use dynvram_loader as loader;
/// Re-exported so applications and the models crate need only the runtime.
pub use dynvram_memory as memory;
/// Re-exported so applications and the models crate need only the runtime.
pub use dynvram_quant as quant;
