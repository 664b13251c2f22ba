//! Embedding rows gathered on the host from the weights file: a table the
//! GPU would only gather a few rows of (the text encoders' token tables,
//! 76 MB for CLIP-L and 263 MB for T5-XXL; T5's tiny relative position
//! table; a tied Llama table, which the head holds anyway) stays out of
//! VRAM and out of the streamed blocks.

use dynvram_runtime::RuntimeError;
use dynvram_runtime::loader::{Dtype, ModelFiles};
use dynvram_runtime::quant::reference::{e4m3fn_to_f32, e5m2_to_f32};

use crate::error::ModelError;

/// Rows of one `[vocab, hidden]` table read from the file as needed.
#[derive(Debug)]
pub(crate) struct HostEmbed {
    files: ModelFiles,
    name: String,
    dtype: Dtype,
    vocab: usize,
    hidden: usize,
}

impl HostEmbed {
    /// The table `name` of `files`: f32, f16 or bf16, `[vocab, hidden]`.
    pub(crate) fn new(files: ModelFiles, name: &str) -> Result<Self, ModelError> {
        let weights_err = |why: String| ModelError::Weights {
            path: files
                .files()
                .first()
                .map(|f| f.path().to_owned())
                .unwrap_or_default(),
            why,
        };
        let (dtype, shape) = match files.info(name) {
            Some(t) => (t.dtype, t.shape.clone()),
            None => {
                return Err(weights_err(format!(
                    "no tensor `{name}` (the embedding table)"
                )));
            }
        };
        if !matches!(
            dtype,
            Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::F8_E4M3 | Dtype::F8_E5M2
        ) {
            return Err(weights_err(format!(
                "`{name}` is {dtype:?}; an embedding table must be f32, f16, bf16 or fp8"
            )));
        }
        let &[vocab, hidden] = shape.as_slice() else {
            return Err(weights_err(format!(
                "`{name}` has shape {shape:?}, expected [vocab, hidden]"
            )));
        };
        Ok(Self {
            files,
            name: name.to_owned(),
            dtype,
            vocab,
            hidden,
        })
    }

    /// `[ids.len(), hidden]` rows widened to f32 (fp8 at scale 1, as ComfyUI
    /// casts an unscaled fp8 table); an id past the table is an input
    /// error.
    pub(crate) fn gather(&self, ids: &[u32]) -> Result<Vec<f32>, ModelError> {
        let row_bytes = (self.hidden * self.dtype.bitsize() / 8) as u64;
        let path = self.files.path_of(&self.name).ok_or_else(|| {
            ModelError::Runtime(RuntimeError::MissingTensor {
                model: Default::default(),
                tensor: self.name.clone(),
            })
        })?;
        let mut raw = vec![0u8; row_bytes as usize];
        let mut out = Vec::with_capacity(ids.len() * self.hidden);
        for &id in ids {
            if id as usize >= self.vocab {
                return Err(ModelError::Input(format!(
                    "token id {id} is outside `{}`'s {} rows",
                    self.name, self.vocab
                )));
            }
            let start = u64::from(id) * row_bytes;
            self.files
                .read_into(&self.name, start..start + row_bytes, &mut raw)
                .map_err(RuntimeError::from)?;
            // Rows stay on the host and never pass the runtime's upload scan.
            if let Some((i, value)) =
                dynvram_runtime::quant::tensors::first_non_finite(self.dtype, &raw)
            {
                return Err(RuntimeError::NonFiniteWeight {
                    file: path.to_path_buf(),
                    tensor: self.name.clone(),
                    index: u64::from(id) * self.hidden as u64 + i as u64,
                    row: format!(" (row {id})"),
                    value,
                }
                .into());
            }
            match self.dtype {
                Dtype::F32 => out.extend(
                    raw.chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                ),
                Dtype::F16 => out.extend(
                    raw.chunks_exact(2)
                        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()),
                ),
                Dtype::F8_E4M3 => out.extend(raw.iter().map(|&b| e4m3fn_to_f32(b))),
                Dtype::F8_E5M2 => out.extend(raw.iter().map(|&b| e5m2_to_f32(b))),
                _ => out.extend(
                    raw.chunks_exact(2)
                        .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()),
                ),
            }
        }
        Ok(out)
    }
}
