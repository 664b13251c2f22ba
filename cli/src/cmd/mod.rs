//! One module per subcommand.

pub mod adapter_args;
pub mod bench;
pub mod bench_attention;
pub mod bench_coop;
pub mod bench_dispatch;
pub mod bench_pass;
pub mod budget_args;
pub mod conformance;
pub mod dit;
pub mod generate;
pub mod plan;
pub mod probe;
pub mod profile;
pub mod quantize;
pub mod run;
pub mod synth;
