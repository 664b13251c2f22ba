//! Integration tests of the WGSL modules (parse, validate, registration).
//!
//! One test binary per crate (one link in CI): each module below was its own
//! binary before; the shared set-up lives in the `*common` modules.

mod fragments;
mod validate;
