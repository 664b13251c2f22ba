//! Integration tests of budget, residency and pin policies (property tests).
//!
//! One test binary per crate (one link in CI): each module below was its own
//! binary before; the shared set-up lives in the `*common` modules.

mod pin_props;
mod residency_props;
