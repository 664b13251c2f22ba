//! dynvram-gpu: the device, the buffers and every kernel launch: dynvram's
//! layer on the GPU API, below the runtime's models and passes (which
//! record copies and submits on what this crate creates).
//!
//! - [`device`]: the wgpu device (adapter choice, capabilities, error capture,
//!   device loss, VRAM figures) and the GPU side of uploads (host-memory
//!   import, pinned buffers, the staging ring's slots, the copy queue, small
//!   read-backs); the file side is `dynvram_loader`'s.
//! - [`accounting`]: [`TrackedBuffer`], a buffer recorded in the VRAM
//!   budget's ledger with its owner class from allocation to drop.
//! - [`ops`]: every kernel launch (linears, attention, norms, RoPE,
//!   elementwise, embedding, argmax, the diffusion transformer's ops) and
//!   the one dispatch path they share (kernel specs, pipeline and
//!   bind-group cache, encoder, profile).
//! - [`tensor`]: [`GpuTensor`] and its [`ActDtype`].
//! - [`PassStats`], [`StreamSources`]: a pass's figures (the runtime fills
//!   them in; [`ops::profile`] reads them).
//!
//! Knows nothing of models, passes, residency or pins (`dynvram_runtime`).

pub mod accounting;
mod decode_tuning;
pub mod device;
mod error;
pub mod ops;
mod stats;
pub mod tensor;

pub use accounting::TrackedBuffer;
pub use device::{AdapterChoice, Gpu, GpuError};
pub use stats::{PassStats, PipelineTime, StreamSources};
pub use tensor::{ActDtype, GpuTensor};
