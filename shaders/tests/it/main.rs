//! Integration tests of the WGSL modules (parse, validate, registration).
//!
//! One test binary per crate (one link in CI): each module below was its own
//! binary before; the set-up shared with other crates' tests lives in
//! `dynvram-test-support`.

mod fragments;
mod translate;
mod validate;
mod variants;
