//! `--timeline` and `--trace`: the last pass drawn or written, shared by
//! `run`, `dit` and `txt2img`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use dynvram_loader::atomic::write_file;
use dynvram_runtime::trace::Trace;

/// Where to write the last pass's timeline and trace.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TraceArgs {
    /// Draw the last pass as an SVG timeline: a time axis in ms, named lanes
    /// (reads/uploads, kernel recording, submits, waiting for the GPU,
    /// staging stalls, drawn only where the ring stalled; with a copy queue
    /// the device's copies and kernels as they ran) and a legend.
    #[arg(long, value_name = "FILE.svg")]
    pub timeline: Option<PathBuf>,
    /// Write a Chrome/Perfetto trace of the last pass.
    #[arg(long, value_name = "FILE.json")]
    pub trace: Option<PathBuf>,
}

impl TraceArgs {
    /// The files it writes, for the output-path rule.
    pub fn outputs(&self) -> [Option<&Path>; 2] {
        [self.timeline.as_deref(), self.trace.as_deref()]
    }

    /// Whether either is asked for.
    pub fn wanted(&self) -> bool {
        self.timeline.is_some() || self.trace.is_some()
    }

    /// Writes what was asked for, atomically.
    pub fn write(&self, trace: &Trace) -> anyhow::Result<()> {
        if let Some(path) = &self.timeline {
            write_file(path, trace.to_svg().as_bytes())
                .with_context(|| format!("writing {}", path.display()))?;
        }
        if let Some(path) = &self.trace {
            write_file(path, &serde_json::to_vec_pretty(&trace.to_chrome_json())?)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }
}
