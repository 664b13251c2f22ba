//! MLP stacks of random weights at transformer scale, for `dynvram bench
//! pass`: `blocks` blocks of `hidden × ffn` linears, written with the
//! chunked, parallel, atomic writer of the synthetic Llama checkpoints.

use std::path::Path;

use super::{Shape, layer_names};
use crate::error::ModelError;
use crate::synth::{self, Init, SynthDtype, SynthOptions, SynthTensor};

/// The tensors of a stack of `shape`, in file order: weights N(0, 1/K) so the
/// residual stream keeps its scale through many blocks, biases N(0, 0.01).
pub fn tensors(shape: Shape) -> Vec<SynthTensor> {
    let t = |name: String, shape: Vec<usize>, init| SynthTensor { name, shape, init };
    (0..shape.blocks)
        .flat_map(|i| {
            let [fc1, fc2] = layer_names(i);
            let (h, f) = (shape.hidden, shape.ffn);
            [
                t(
                    format!("{fc1}.weight"),
                    vec![f, h],
                    Init::Normal(1.0 / (h as f32).sqrt()),
                ),
                t(format!("{fc1}.bias"), vec![f], Init::Normal(0.01)),
                t(
                    format!("{fc2}.weight"),
                    vec![h, f],
                    Init::Normal(1.0 / (f as f32).sqrt()),
                ),
                t(format!("{fc2}.bias"), vec![h], Init::Normal(0.01)),
            ]
        })
        .collect()
}

/// Writes a random stack of `shape` in `dtype` to `path` (atomically);
/// returns the bytes of tensor data. `progress(done, total)` in bytes.
pub fn write(
    path: &Path,
    shape: Shape,
    dtype: SynthDtype,
    seed: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<u64, ModelError> {
    let _span = tracing::info_span!("synth_mlp", path = %path.display()).entered();
    let opts = SynthOptions {
        dtype,
        seed,
        ..SynthOptions::default()
    };
    synth::write_file(path, &tensors(shape), opts, progress)
}
