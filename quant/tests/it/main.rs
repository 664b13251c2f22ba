//! Integration tests of quantized formats, their layouts and the ComfyUI conformance goldens.
//!
//! One test binary per crate (one link in CI): each module below was its own
//! binary before; the set-up shared with other crates' tests lives in
//! `dynvram-test-support`.

mod conformance;
mod meta_layout;
mod quantize;
