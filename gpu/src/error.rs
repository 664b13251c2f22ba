//! The errors of the ops beyond [`crate::GpuError`]: [`LinearError`]
//! (public as `ops::linear::LinearError`).

mod linear;
pub use linear::LinearError;
