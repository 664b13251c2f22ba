//! Integration tests of file reading, the reader pool and the staging ring's
//! bookkeeping: pure file I/O, no GPU (the GPU side of uploads is tested in
//! the runtime's binary).
//!
//! One test binary per crate (one link in CI): each module below was its own
//! binary before; the shared set-up lives in `dynvram-test-support`.

mod bench_smoke;
mod index_faults;
mod model_files;
mod reader_pool;
mod ring_slots;
mod views;
