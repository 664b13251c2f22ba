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

/// Writes to stdout; a failure ends the process ([`stream_failed`]).
pub fn out(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args) {
        stream_failed("stdout", &e);
    }
}

/// Writes to stderr; a failure ends the process ([`stream_failed`]).
pub fn err(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    if let Err(e) = std::io::stderr().lock().write_fmt(args) {
        stream_failed("stderr", &e);
    }
}

/// Flushes stdout (buffered output of a `write!` without a newline),
/// ending the process on failure ([`stream_failed`]).
pub fn flush_stdout() {
    use std::io::Write;
    if let Err(e) = std::io::stdout().lock().flush() {
        stream_failed("stdout", &e);
    }
}

/// A write to stdout or stderr failed: the command's output is lost, so it
/// fails. Temp files of writes in progress are removed (as on a signal),
/// the reason goes to stderr where it still can, and the process exits
/// with status 2, the status of every other error. A broken pipe exits
/// quietly (the reader left on purpose, as `head` does; with SIGPIPE at its
/// default this is only reached where the signal is ignored).
pub fn stream_failed(stream: &str, e: &std::io::Error) -> ! {
    use std::io::Write;
    let _removed = dynvram_loader::atomic::remove_temp_files();
    if e.kind() != std::io::ErrorKind::BrokenPipe {
        let _ = writeln!(std::io::stderr(), "error: writing to {stream}: {e}");
    }
    std::process::exit(2)
}

/// Which of stdout (bit 0) and stderr (bit 1) were closed when the process
/// started, recorded by [`record_closed_streams`].
static CLOSED_AT_START: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Runs before Rust's runtime starts (an ELF constructor): the runtime
/// opens /dev/null on a closed standard descriptor, after which a closed
/// stdout cannot be told from `> /dev/null`.
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static RECORD_CLOSED_STREAMS: extern "C" fn() = record_closed_streams;

#[cfg(target_os = "linux")]
extern "C" fn record_closed_streams() {
    let mut closed = 0;
    for (bit, fd) in [(1u8, 1), (2, 2)] {
        // SAFETY: F_GETFD only asks whether the descriptor is open.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            closed |= bit;
        }
    }
    CLOSED_AT_START.store(closed, std::sync::atomic::Ordering::Relaxed);
}

/// Refuses to start with stdout or stderr closed (`>&-`): the output would
/// be lost at exit 0 (Linux; elsewhere the runtime's own handling stands).
/// Returns the exit status to end with.
pub fn check_standard_streams() -> Result<(), std::process::ExitCode> {
    let closed = CLOSED_AT_START.load(std::sync::atomic::Ordering::Relaxed);
    if closed & 1 != 0 {
        // stderr may be closed too: then this goes to /dev/null.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"error: stdout is closed: the output would be lost\n",
        );
    }
    if closed != 0 {
        return Err(std::process::ExitCode::from(2));
    }
    Ok(())
}

/// Prints a serializable report as pretty JSON on stdout.
pub fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
