//! Integration tests of the runtime end to end: streaming, pins, LoRA, several models, faults;
//! and the workspace's module graph (no import cycles inside a crate).
//!
//! One test binary per crate (one link in CI): each module below was its own
//! binary before; the set-up shared with other crates' tests lives in
//! `dynvram-test-support`.

mod common;
mod copy_queue;
mod faults;
mod immediates;
mod lora;
mod module_cycles;
mod multi_model;
mod pins;
mod resident_submits;
mod scratch_ledger;
mod streaming;
