//! GPU ops: each records compute passes into a caller's encoder, so a block's
//! kernels and the next block's uploads can share one submit.

pub mod argmax;
pub mod attention;
mod bindings;
pub mod cache;
pub mod conv;
pub mod dit;
pub mod elementwise;
pub mod embed;
pub mod encoder;
pub mod group_norm;
pub mod host;
mod kernel;
pub mod launch;
pub mod linear;
pub mod norm;
pub mod profile;
pub mod rope;
pub mod spatial_attention;
