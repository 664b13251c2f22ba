//! The VAE's error type.

use std::path::PathBuf;

use crate::error::ModelError;

/// What can go wrong opening or running a VAE.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VaeError {
    /// The runtime failed (GPU, budget, files).
    #[error(transparent)]
    Runtime(#[from] dynvram_runtime::RuntimeError),
    /// A config file is unreadable, or its values are not a VAE this code runs.
    #[error("{path}: {why}")]
    Config {
        /// The config file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The file is not a Flux VAE, or a tensor does not match the config.
    #[error("{path}: {why}")]
    Weights {
        /// The weights file.
        path: PathBuf,
        /// Which tensor and how (or what kind of file it looks like).
        why: String,
    },
    /// Bad input: a latent of the wrong size, a zero dimension.
    #[error("{0}")]
    Input(String),
    /// The budget cannot hold even the smallest tile's activations.
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
    /// A file could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl From<VaeError> for ModelError {
    fn from(e: VaeError) -> Self {
        match e {
            VaeError::Runtime(r) => ModelError::Runtime(r),
            VaeError::Config { path, why } => ModelError::Config { path, why },
            VaeError::Weights { path, why } => ModelError::Weights { path, why },
            VaeError::Io { path, source } => ModelError::Io { path, source },
            e @ (VaeError::Input(_) | VaeError::NoRoom { .. }) => ModelError::Input(e.to_string()),
        }
    }
}
