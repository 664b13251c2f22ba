//! `dynvram`: run models larger than VRAM on any wgpu adapter.

/// `println!` that never panics: a failed write to stdout (a full disk, a
/// closed descriptor) ends the process with a message and status 2
/// ([`output::stream_failed`]) instead of Rust's panic. Defined before the
/// modules so that every `println!` of this crate is this one.
macro_rules! println {
    () => { $crate::output::out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::output::out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprintln!` that never panics (see `println!`).
macro_rules! eprintln {
    ($($arg:tt)*) => { $crate::output::err(format_args!("{}\n", format_args!($($arg)*))) };
}

#[cfg(test)]
mod args_proptest;
mod cmd;
mod output;
mod signals;

use clap::{Parser, Subcommand};

/// Run models larger than the GPU's memory on Vulkan, Metal, DX12 and GL.
#[derive(Debug, Parser)]
#[command(name = "dynvram", version, about, long_about = None)]
struct Cli {
    /// Print reports as JSON on stdout instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// More log lines on stderr: -v for progress (INFO), -vv for DEBUG,
    /// -vvv for TRACE. Default: warnings and errors only. `RUST_LOG`, when
    /// set, decides instead.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

/// A closed stdout (`dynvram plan … | head -1`) ends the process quietly
/// by SIGPIPE, as command-line tools do, instead of Rust's ignored signal
/// turning it into a panic at the next `println!`.
fn restore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called first in main, before any thread exists; SIG_DFL is a
    // valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List GPU adapters, their features and limits, and the kernel path each format gets.
    Probe(cmd::probe::Args),
    /// Run a block model (built-in by default) under a VRAM budget and verify it.
    Run(cmd::run::Args),
    /// Will a model fit a VRAM budget, and how fast? Resident and streamed weights, no GPU needed.
    Plan(cmd::plan::Args),
    /// Quantize a model folder (or one safetensors file) into ComfyUI's formats.
    Quantize(cmd::quantize::Args),
    /// Check the linear kernels against a folder of golden cases.
    Conformance(cmd::conformance::Args),
    /// Text generation with a Llama-family checkpoint under a VRAM budget (greedy or sampled).
    Generate(cmd::generate::Args),
    /// One forward (or --steps of sampling) of a Flux diffusion transformer under a VRAM budget.
    Dit(cmd::dit::Args),
    /// Write a randomly initialised checkpoint of a real model's shapes.
    Synth(cmd::synth::Args),
    /// FLUX.1 text to image from ComfyUI's four files under a VRAM budget, written as PNG.
    Txt2img(cmd::txt2img::Args),
    /// Measure throughput (uploads, kernels).
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
}

impl Command {
    /// The budget flags, for the subcommands that take them.
    fn budget(&self) -> Option<&cmd::budget_args::BudgetArgs> {
        match self {
            Command::Run(a) => Some(&a.budget),
            Command::Plan(a) => Some(&a.budget),
            Command::Generate(a) => Some(&a.budget),
            Command::Dit(a) => Some(&a.runtime.budget),
            Command::Txt2img(a) => Some(&a.runtime.budget),
            Command::Bench(cmd::bench::BenchCommand::Pass(a)) => Some(&a.budget),
            _ => None,
        }
    }

    /// The flag checks that need no GPU and no file, made before any work so
    /// a bad number is named up front (the argument proptest drives these).
    fn check_flags(&self) -> anyhow::Result<()> {
        if let Some(b) = self.budget() {
            b.config()?;
            b.host_config()?;
        }
        match self {
            Command::Quantize(a) => drop(cmd::quantize::options(a)?),
            Command::Synth(a) => drop(cmd::synth::options(a)?),
            Command::Generate(a) => drop(cmd::generate::sampling(a)?),
            _ => {}
        }
        Ok(())
    }
}

/// Recording a decode step makes thousands of small allocations (wgpu's
/// commands and trackers, kernel keys): mimalloc takes 10 % fewer of the
/// main thread's instructions per token than glibc's malloc (BENCHMARKS.md,
/// session 13). Its ~10 MiB more peak RSS was transparent huge pages, now
/// off (the `no_thp` feature; session 19).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    restore_sigpipe();
    if let Err(code) = output::check_standard_streams() {
        return code;
    }
    let cli = Cli::parse();
    output::init_logging(cli.verbose);
    signals::remove_temp_files_on_exit();
    let result = cli.command.check_flags().and_then(|()| match cli.command {
        Command::Probe(a) => cmd::probe::run(a, cli.json),
        Command::Run(a) => cmd::run::run(a, cli.json),
        Command::Plan(a) => cmd::plan::run(a, cli.json),
        Command::Quantize(a) => cmd::quantize::run(a, cli.json),
        Command::Conformance(a) => cmd::conformance::run(a, cli.json),
        Command::Generate(a) => cmd::generate::run(a, cli.json),
        Command::Synth(a) => cmd::synth::run(a, cli.json),
        Command::Dit(a) => cmd::dit::run(a, cli.json),
        Command::Txt2img(a) => cmd::txt2img::run(a, cli.json),
        Command::Bench(c) => cmd::bench::run(c, cli.json),
    });
    // Rust flushes stdout at exit and ignores a failure: flush here.
    output::flush_stdout();
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", describe(&e));
            std::process::ExitCode::from(2)
        }
    }
}

/// The error and its causes, each once: several of our errors already show
/// their source in their own message, so a cause that the text so far ends
/// with is not repeated.
fn describe(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let msg = cause.to_string();
        if out.ends_with(&msg) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&msg);
    }
    out
}
