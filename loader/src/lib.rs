//! dynvram-loader: the safetensors index and the file side of uploads. Pure
//! file I/O: no GPU API, so everything here builds and is tested without one.
//!
//! - [`SafetensorsFile`] / [`ModelFiles`]: validated tensor index over a
//!   read-only map; streamed bytes are read with `pread` (no SIGBUS on a
//!   truncated file).
//! - [`TensorView`]: a tensor as a model reads it, made of row ranges of
//!   stored ones (another layout's split or reordered tensors), read in place.
//! - [`ReaderPool`]: reads split into 2 MiB tasks over reader threads, into
//!   [`WriteOnlyBytes`] (a mapped staging slot, or ordinary memory).
//! - [`RingSlots`]: the staging ring's bookkeeping (slot states, placement,
//!   counters); the slots' GPU memory is `dynvram_gpu::device`'s.
//! - [`atomic`]: every file dynvram writes, through a temp file and a rename.
//! - [`output_path`]: the one output-path rule (never an input; a folder
//!   with files in it only with `--force`), checked by every writer.
//! - [`bench`](mod@bench): the host-side measurements of `dynvram bench upload`.

pub mod atomic;
pub mod bench;
mod error;
mod fileio;
mod index;
mod model_files;
pub mod output_path;
mod reader;
mod ring;
mod source;
mod views;
mod write_only;

pub use error::{LoadError, Result};
pub use index::{
    MAX_HEADER_LEN, ParsedHeader, SafetensorsFile, TensorInfo, byte_count, parse_header,
};
pub use model_files::ModelFiles;
pub use reader::{DEFAULT_TASK_SIZE, DEFAULT_THREADS, ReaderConfig, ReaderPool};
pub use ring::{
    DEFAULT_SLOT_SIZE, DEFAULT_SLOTS, NotReady, Placement, RingCounters, RingSlots, SlotState,
    align4,
};
pub use safetensors::Dtype;
pub use source::{ByteSource, FileRange, HostBytes};
pub use views::{TensorBytes, TensorView, ViewPart};
pub use write_only::WriteOnlyBytes;

/// Drops a file's pages from the OS page cache (`posix_fadvise(DONTNEED)` on
/// Linux; a no-op elsewhere), so the next read is cold.
pub fn drop_page_cache(file: &std::fs::File) {
    fileio::advise(file, 0, 0, fileio::Hint::DontNeed);
}
