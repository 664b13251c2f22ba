//! Quantized weight formats as ComfyUI writes them, their metadata, CPU reference
//! linears and the rule that picks a kernel path for a layer on an adapter.
//!
//! Owns: [`Format`] and metadata parsing (`comfy_quant` in all its forms), layout
//! validation, CPU references, [`kernel_path::KernelPath`], the quantizer.
//! Knows nothing of GPU memory policy or wgpu: adapters are described by plain
//! [`caps::AdapterCaps`]. The quantizer reads and writes files through
//! `dynvram-loader` (positional reads, the atomic writer).

pub mod caps;
mod convrot_rows;
pub mod format;
pub mod kernel_path;
pub mod layer;
pub mod meta;
pub mod model_dir;
pub mod quantize;
pub mod reference;
mod rotation;
mod safetensors_out;
pub mod tensors;
pub mod tolerance;

pub use caps::AdapterCaps;
pub use format::{Format, LinearDtype};
pub use kernel_path::{ActArith, KernelChoice, KernelPath, LinearDtypeOverride, choose};
pub use layer::{LayoutError, QuantLayer, check_scales, discover_layers, validate_layer};
pub use meta::{LayerMeta, MetaError, MetaSource, layer_meta, parse_comfy_quant};
pub use quantize::{QuantizeError, QuantizeOptions, QuantizeReport, TargetFormat, quantize_file};
pub use reference::{LayerBytes, LinearTrace, ReferenceError, reference_linear};
pub use tensors::{SafeFile, TensorList, TensorTable};
