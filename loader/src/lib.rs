//! dynvram-loader: the safetensors index and the host side of uploads.
//!
//! - [`SafetensorsFile`] / [`ModelFiles`]: validated tensor index over a
//!   read-only map; streamed bytes are read with `pread` (no SIGBUS on a
//!   truncated file).
//! - [`ReaderPool`]: reads split into 2 MiB tasks over reader threads.
//! - [`StagingRing`]: mapped staging slots, file → slot → `copy_buffer_to_buffer`.
//! - [`PinnedBuffer`]: registered pins, copied to the GPU with no CPU copy.
//! - [`hostmem`]: buffers guaranteed to be host RAM (`VK_EXT_external_memory_host`).
//! - [`atomic`]: every file dynvram writes, through a temp file and a rename.
//! - [`bench`](mod@bench): the measurements behind `dynvram bench upload`.

pub mod atomic;
pub mod bench;
mod error;
mod fileio;
mod gpu;
pub mod hostmem;
mod index;
mod pinned;
mod reader;
mod ring;
mod source;

pub use error::{LoadError, Result};
pub use hostmem::{HostMemory, HostMemoryChoice, ImportError, ImportedBuffer};
pub use index::{
    MAX_HEADER_LEN, ModelFiles, ParsedHeader, SafetensorsFile, TensorInfo, byte_count, parse_header,
};
pub use pinned::PinnedBuffer;
pub use reader::{DEFAULT_TASK_SIZE, DEFAULT_THREADS, ReaderConfig, ReaderPool};
pub use ring::{DEFAULT_SLOT_SIZE, DEFAULT_SLOTS, RingConfig, RingCounters, StagingRing};
pub use safetensors::Dtype;
pub use source::{ByteSource, FileRange, HostBytes};

/// Drops a file's pages from the OS page cache (`posix_fadvise(DONTNEED)` on
/// Linux; a no-op elsewhere), so the next read is cold.
pub fn drop_page_cache(file: &std::fs::File) {
    fileio::advise(file, 0, 0, fileio::Hint::DontNeed);
}
