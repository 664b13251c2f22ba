//! Writing the text encoders' random-weight files: the parent folder made,
//! then `llama::synth::write_file` (chunked, parallel, atomic).

use std::path::Path;

use crate::error::ModelError;
use crate::llama::synth::{SynthDtype, SynthOptions, SynthTensor, write_file};

/// Writes `tensors` drawn in `dtype` from `seed` to `path`; returns the
/// bytes of tensor data.
pub(crate) fn write_tensors(
    path: &Path,
    tensors: &[SynthTensor],
    dtype: SynthDtype,
    seed: u64,
) -> Result<u64, ModelError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| ModelError::Io {
            path: dir.to_owned(),
            source,
        })?;
    }
    let opts = SynthOptions {
        dtype,
        seed,
        ..SynthOptions::default()
    };
    write_file(path, tensors, opts, &mut |_, _| {})
}
