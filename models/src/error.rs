//! The error type of the model families.

use std::path::PathBuf;

/// Errors of every model family (Llama, Flux, the text encoders, the VAE):
/// one type, so the CLI and embedders handle them once.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The runtime failed (GPU, budget, files).
    #[error(transparent)]
    Runtime(#[from] dynvram_runtime::RuntimeError),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// `config.json` is missing a key or asks for something not implemented.
    #[error("{path}: {why}")]
    Config {
        /// The config file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The weights do not match the config (or no variant of the family).
    #[error("{path}: {why}")]
    Weights {
        /// The checkpoint folder or file.
        path: PathBuf,
        /// Which tensor and how.
        why: String,
    },
    /// Bad input: token ids out of range, sequence longer than the cache.
    #[error("{0}")]
    Input(String),
    /// A run computed NaN or ±inf (poisoned weights, an overflow): stopped
    /// before a token, PASS or image is made from it.
    #[error(
        "{op} at {step} is {value} at element {index}: the run stopped (a weight or scale of the model is likely NaN or infinite)"
    )]
    NonFinite {
        /// The op whose output it is.
        op: &'static str,
        /// When: `the prompt`, `decode step N`.
        step: String,
        /// The element.
        index: usize,
        /// The value.
        value: f32,
    },
    /// The budget cannot hold even the smallest VAE tile's activations.
    #[error(
        "a VAE decode of a {tile_h}x{tile_w} latent tile needs {need} bytes of activations; the budget has {room} free"
    )]
    NoRoom {
        /// Latent rows of the smallest tile tried.
        tile_h: usize,
        /// Latent columns of the smallest tile tried.
        tile_w: usize,
        /// Activation bytes that tile needs.
        need: u64,
        /// Bytes the budget has for them.
        room: u64,
    },
    /// `tokenizer.json` is missing or unreadable, or text failed to encode.
    #[error("{path}: {why}")]
    Tokenizer {
        /// The tokenizer file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

impl ModelError {
    /// Refuses `values` holding NaN or ±inf ([`ModelError::NonFinite`],
    /// naming `op` and `step()`): a token, PASS or image made from them
    /// would look as if it meant something.
    pub fn check_finite(
        op: &'static str,
        step: impl FnOnce() -> String,
        values: &[f32],
    ) -> Result<(), ModelError> {
        match values.iter().position(|v| !v.is_finite()) {
            None => Ok(()),
            Some(index) => Err(ModelError::NonFinite {
                op,
                step: step(),
                index,
                value: values[index],
            }),
        }
    }
}
