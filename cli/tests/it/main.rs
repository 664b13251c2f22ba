//! Integration tests of the `dynvram` command line, run as a process.
//!
//! One test binary per crate (one link in CI): each module below was its own
//! binary before; the set-up shared with other crates' tests lives in
//! `dynvram-test-support`, the set-up of this crate's alone in the `*common`
//! modules.

mod bounds;
mod cli;
mod common;
mod day_one;
mod dit;
mod faults;
mod generate_f16;
mod generate_prompt;
mod outputs;
mod poison;
mod readme_tours;
mod streams;
mod txt2img;
