//! Logging, progress bars and human-readable sizes shared by the subcommands.

use indicatif::{ProgressBar, ProgressStyle};
use tracing_indicatif::IndicatifLayer;
use tracing_subscriber::{EnvFilter, layer::SubscriberExt, util::SubscriberInitExt};

/// Installs `tracing` to stderr with progress bars that log lines do not
/// tear. Level: `RUST_LOG` when set, else [`log_filter`] of the `-v` count.
/// Colours only when stderr is a terminal and `NO_COLOR` is unset.
pub fn init_logging(verbose: u8) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(log_filter(verbose)));
    let indicatif = IndicatifLayer::new();
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(indicatif.get_stderr_writer())
                .with_ansi(colour())
                .with_target(false),
        )
        .with(indicatif)
        .try_init();
}

/// The log filter for `-v` given `verbose` times: warnings only, then our
/// crates' INFO, DEBUG and TRACE (other libraries stay at WARN).
pub fn log_filter(verbose: u8) -> &'static str {
    match verbose {
        0 => "warn",
        1 => {
            "warn,dynvram=info,dynvram_runtime=info,dynvram_models=info,dynvram_quant=info,dynvram_loader=info"
        }
        2 => {
            "warn,dynvram=debug,dynvram_runtime=debug,dynvram_models=debug,dynvram_quant=debug,dynvram_loader=debug,dynvram_memory=debug"
        }
        _ => {
            "warn,dynvram=trace,dynvram_runtime=trace,dynvram_models=trace,dynvram_quant=trace,dynvram_loader=trace,dynvram_memory=trace"
        }
    }
}

/// ANSI colours on stderr: a terminal, and no `NO_COLOR` (no-color.org).
fn colour() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// A progress bar over `total` units with a message.
pub fn bar(total: u64, what: &str) -> ProgressBar {
    styled_bar(total, what, "{msg:>12} [{bar:30}] {pos}/{len} {wide_msg}")
}

/// A progress bar over `total` units with the rate and the time left.
pub fn eta_bar(total: u64, what: &str) -> ProgressBar {
    styled_bar(
        total,
        what,
        "{msg:>12} [{bar:30}] {pos}/{len} {per_sec} eta {eta}",
    )
}

fn styled_bar(total: u64, what: &str, template: &str) -> ProgressBar {
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(what.to_owned());
    pb
}

/// A progress bar over `total` bytes, shown as sizes with a rate.
pub fn bytes_bar(total: u64, what: &str) -> ProgressBar {
    styled_bar(
        total,
        what,
        "{msg:>12} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
    )
}

/// The report line naming the adapter, its backend and the activations'
/// dtype.
pub fn print_adapter(adapter: &str, backend: &str, dtype: &str) {
    println!("adapter    {adapter} [{backend}], {dtype} activations");
}

/// An activation dtype as reports name it.
pub fn dtype_name(dtype: dynvram_runtime::ActDtype) -> &'static str {
    match dtype {
        dynvram_runtime::ActDtype::F16 => "f16",
        dynvram_runtime::ActDtype::F32 => "f32",
    }
}

/// Bytes as `1.5 GiB`.
pub fn size(bytes: u64) -> String {
    bytesize::ByteSize::b(bytes).display().iec().to_string()
}

/// Prints a serializable report as pretty JSON on stdout.
pub fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
