//! The output-path rule at the CLI's edge: every command that writes
//! checks its outputs (and the pipeline cache folder) against what it reads
//! before any work.

use crate::cmd::adapter_args;

/// Refuses, before any work, an output of a command that resolves to one
/// of the paths it reads (`dynvram_loader::output_path`: through `..`,
/// symlinks and hard links), naming both; likewise the pipeline cache
/// folder of `adapter`, which files are written into. Absent outputs are
/// skipped.
pub fn check_outputs(
    reads: &[&std::path::Path],
    outputs: &[Option<&std::path::Path>],
    adapter: &adapter_args::AdapterArgs,
) -> anyhow::Result<()> {
    for out in outputs.iter().flatten() {
        dynvram_loader::output_path::check_output(out, reads)?;
    }
    if let Some(cache) = adapter.cache_folder() {
        dynvram_loader::output_path::check_write_into(&cache, reads)?;
    }
    Ok(())
}
