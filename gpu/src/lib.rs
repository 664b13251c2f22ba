//! dynvram-gpu: everything that touches the GPU API, below the runtime's
//! models and passes.
//!
//! - [`gpu`]: the wgpu device (adapter choice, capabilities, error capture,
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
//!
//! Knows nothing of models, passes, residency or pins (`dynvram_runtime`).

pub mod accounting;
mod error;
pub mod gpu;
pub mod ops;
mod stats;
pub mod tensor;

pub use accounting::{BufferError, TrackedBuffer};
pub use error::LinearError;
pub use gpu::{AdapterChoice, Gpu, GpuError};
pub use stats::{PassStats, StreamSources};
pub use tensor::{ActDtype, GpuTensor};
