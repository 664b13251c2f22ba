//! What dynvram's integration tests share, so each crate's test binary
//! holds tests rather than set-up: a dev-dependency only, never published.
//!
//! - [`skip`]: the skip-or-fail rule. A test that lacks what it needs (a GPU
//!   adapter, a feature) says `skipped: why` and passes; with
//!   `DYNVRAM_REQUIRE_GPU=1` (CI) a missing adapter fails it instead.
//! - [`fixtures`]: the test data inside the repository (`fixtures/`), which
//!   must be there: a missing fixture fails, never skips.
//! - [`random`]: seeded inputs; [`tolerance`]: the comparisons against CPU
//!   references and goldens.
//! - [`variants`]: which variants of a kernel a test case runs (a
//!   rotating share by default, all with `DYNVRAM_THOROUGH=1`).
//! - [`allocations`]: a counting global allocator, for "allocates
//!   nothing" checks of hot paths.
//! - [`safetensors`]: reading small safetensors files whole, and writing
//!   them by hand (broken ones included).
//! - `gpu` (feature `gpu`): opening the test adapter through `dynvram_gpu`,
//!   or a bare wgpu device, under the skip rule; with feature `runtime`,
//!   runtimes at a budget.
//!
//! This crate and the CLI are the only places that read environment
//! variables; here only the tests' own (`DYNVRAM_REQUIRE_GPU`,
//! `DYNVRAM_REQUIRE_COOP`, `DYNVRAM_THOROUGH`).

pub mod allocations;
pub mod fixtures;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod random;
pub mod safetensors;
pub mod skip;
pub mod tolerance;
pub mod variants;
