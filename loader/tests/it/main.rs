//! Integration tests of file reading, host memory and the staging ring.
//!
//! One test binary per crate (one link in CI): each module below was its own
//! binary before; the shared set-up lives in the `*common` modules.

mod bench_smoke;
mod common;
mod host_memory;
mod index_faults;
mod model_files;
mod reader_pool;
mod ring_upload;
