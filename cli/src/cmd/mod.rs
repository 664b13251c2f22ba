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
pub mod gpu_timing;
pub mod outputs;
pub mod pipeline_plan;
pub mod plan;
pub mod probe;
pub mod profile;
pub mod quantize;
pub mod ranges;
pub mod run;
pub mod runtime_args;
pub mod synth;
pub mod trace_args;
pub mod txt2img;

/// dynvram's cache folder (the built-in model, the pipeline cache):
/// `$DYNVRAM_CACHE`, else `$XDG_CACHE_HOME/dynvram`, else
/// `~/.cache/dynvram`, else the temp dir (read here: the libraries take
/// paths, not the environment).
pub fn cache_dir() -> std::path::PathBuf {
    if let Some(d) = std::env::var_os("DYNVRAM_CACHE") {
        return d.into();
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("dynvram")
}
