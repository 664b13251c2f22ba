//! Integration tests of budget, residency and pin policies (property tests).
//!
//! One test binary per crate (one link in CI): each module below was its own
//! binary before; the set-up shared with other crates' tests lives in
//! `dynvram-test-support`.

mod pin_props;
mod residency_props;
