//! `dynvram quantize MODEL_DIR OUT_DIR`: a whole Hugging Face model — a
//! folder with `model.safetensors` or shards and their
//! `model.safetensors.index.json`, or the index itself — quantized shard by
//! shard into a new folder: one output shard per input shard (each
//! quantized on all cores and written before the next is read, so memory
//! holds one output shard's quantized tensors and one float tensor), a new
//! index naming every output tensor's shard, and the folder's config,
//! generation config, tokenizer and chat-template files copied.
//!
//! The output folder appears whole or not at all: everything is written
//! into a temp folder beside it ([`AtomicDir`]), renamed into place at the
//! end; an error or a signal (the CLI's handler) removes it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use dynvram_loader::atomic::{AtomicDir, write_file};
use dynvram_loader::{LoadError, ModelFiles, SafetensorsFile};

use crate::quantize::{
    QuantizeError, QuantizeOptions, QuantizeReport, SkippedLayer, quantize_file,
};
use crate::tensors::Dtype;

/// The index file name transformers uses.
pub const INDEX: &str = "model.safetensors.index.json";

/// Side files copied beside the weights: configs, tokenizers, templates.
const SIDE_EXTENSIONS: [&str; 5] = ["json", "jinja", "txt", "model", "tiktoken"];

/// What quantizing a model did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ModelReport {
    /// The output folder.
    pub output: PathBuf,
    /// Output shards, in order.
    pub shards: Vec<PathBuf>,
    /// Layers written quantized.
    pub quantized: usize,
    /// Candidate layers left as they are, and why.
    pub skipped: Vec<SkippedLayer>,
    /// Tensors copied unchanged.
    pub copied: usize,
    /// Side files copied (config, tokenizer, …).
    pub files_copied: Vec<String>,
    /// Input weight bytes.
    pub bytes_in: u64,
    /// Output weight bytes.
    pub bytes_out: u64,
    /// Wall time.
    pub seconds: f64,
}

/// Whether `path` names a whole model (a folder or an index json) rather
/// than one safetensors file.
pub fn is_model(path: &Path) -> bool {
    path.is_dir() || path.extension().is_some_and(|e| e == "json")
}

/// The input's shards and the folder its side files are in.
fn shards(input: &Path) -> Result<(Vec<PathBuf>, PathBuf), QuantizeError> {
    let files = ModelFiles::open(input)?;
    let list: Vec<PathBuf> = files.files().iter().map(|f| f.path().to_owned()).collect();
    if list.is_empty() {
        return Err(QuantizeError::File(LoadError::Io {
            path: input.to_owned(),
            op: "quantize",
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no safetensors files here (nor an index naming any)",
            ),
        }));
    }
    let dir = if input.is_dir() {
        input.to_owned()
    } else {
        input
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_owned()
    };
    Ok((list, dir))
}

/// Candidate layers of a shard (2-D float `*.weight` tensors), for progress.
fn candidates(path: &Path) -> Result<usize, QuantizeError> {
    let f = SafetensorsFile::open(path)?;
    Ok(f.tensors()
        .iter()
        .filter(|t| {
            t.name.ends_with(".weight")
                && t.shape.len() == 2
                && matches!(t.dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16)
        })
        .count())
}

/// Quantizes the model at `input` into the folder `output` (see the module
/// docs). `progress(done, total, layer)` counts candidate layers over all
/// shards.
pub fn quantize_model(
    input: &Path,
    output: &Path,
    opts: &QuantizeOptions,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<ModelReport, QuantizeError> {
    let _span =
        tracing::info_span!("quantize_model", input = %input.display(), output = %output.display())
            .entered();
    let start = Instant::now();
    let (inputs, side_dir) = shards(input)?;
    let reads: Vec<&Path> = inputs
        .iter()
        .map(PathBuf::as_path)
        .chain([input, side_dir.as_path()])
        .collect();
    dynvram_loader::output_path::check_output_dir(output, &reads, opts.force)?;
    let counts = inputs
        .iter()
        .map(|p| candidates(p))
        .collect::<Result<Vec<_>, _>>()?;
    let total: usize = counts.iter().sum();
    let out = AtomicDir::replacing(output, opts.force)?;
    let mut report = ModelReport {
        output: output.to_owned(),
        ..ModelReport::default()
    };
    let mut weight_map = serde_json::Map::new();
    let mut done_before = 0;
    let n = inputs.len();
    for (i, shard) in inputs.iter().enumerate() {
        let name = if n == 1 {
            "model.safetensors".to_owned()
        } else {
            format!("model-{:05}-of-{n:05}.safetensors", i + 1)
        };
        let dst = out.tmp().join(&name);
        let r: QuantizeReport = quantize_file(shard, &dst, opts, &mut |done, _, layer| {
            progress(done_before + done, total, layer)
        })?;
        done_before += counts[i];
        report.quantized += r.quantized.len();
        report.skipped.extend(r.skipped);
        report.copied += r.copied;
        report.bytes_in += r.bytes_in;
        report.bytes_out += r.bytes_out;
        for t in SafetensorsFile::open(&dst)?.tensors() {
            weight_map.insert(t.name.clone(), serde_json::Value::String(name.clone()));
        }
        report.shards.push(output.join(&name));
    }
    let index = serde_json::json!({
        "metadata": {"total_size": report.bytes_out, "quantized_by": "dynvram quantize"},
        "weight_map": weight_map,
    });
    let text = serde_json::to_string_pretty(&index).unwrap_or_default() + "\n";
    write_file(out.tmp().join(INDEX), text.as_bytes())?;
    report.files_copied = copy_side_files(&side_dir, out.tmp())?;
    out.commit()?;
    report.seconds = start.elapsed().as_secs_f64();
    tracing::info!(
        quantized = report.quantized,
        shards = report.shards.len(),
        seconds = report.seconds,
        "quantized model"
    );
    Ok(report)
}

/// Copies `dir`'s configs, tokenizer files and templates (not its weights
/// nor its index, which are written anew) into `dst`; returns their names.
fn copy_side_files(dir: &Path, dst: &Path) -> Result<Vec<String>, QuantizeError> {
    let io = |path: &Path, op: &'static str| {
        let path = path.to_owned();
        move |source| {
            QuantizeError::File(LoadError::Io {
                path: path.clone(),
                op,
                source,
            })
        }
    };
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir, "list"))? {
        let path = entry.map_err(io(dir, "list"))?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let side = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| SIDE_EXTENSIONS.contains(&e));
        if !side || name == INDEX || name.starts_with('.') || !path.is_file() {
            continue;
        }
        let bytes = std::fs::read(&path).map_err(io(&path, "read"))?;
        write_file(dst.join(name), &bytes)?;
        names.push(name.to_owned());
    }
    names.sort();
    Ok(names)
}
