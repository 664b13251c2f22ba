//! The errors of the ops beyond [`crate::GpuError`]: [`LinearError`].

mod linear;
pub use linear::LinearError;
