//! Flash attention's shapes (`flash_attention.wgsl`): the [`FlashTuning`]
//! a launch runs with, its text form, and the module generated for it
//! ([`flash_attention`]). The shape is text, not `override` constants: it
//! sizes workgroup arrays, and every cooperative matrix is a variable of
//! its own (NVIDIA's compiler runs arrays of them at half speed,
//! BENCHMARKS.md run G).

mod generate;
mod geometry;
mod tuning;

pub use generate::flash_attention;
pub use geometry::FlashGeometry;
pub use tuning::{Cm2Block, FlashKernel, FlashTuning, KvStaging};
