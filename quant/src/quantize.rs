//! The quantizer behind `dynvram quantize`: turns the 2-D float `*.weight` tensors of
//! a safetensors file into ComfyUI's quantized layout with kitchen's own arithmetic
//! (`conformance/README.md` §4.2, §4.6, §4.7), leaving every other tensor as it is.
//!
//! Files: the input is read with positional reads (`dynvram_loader::SafetensorsFile`),
//! never through a map, so an input that shrinks while we run is an error naming
//! the file and tensor instead of SIGBUS. The output appears atomically
//! (`dynvram_loader::atomic`: temp file in the same folder, fsync, rename).
//!
//! Memory: the math runs one layer at a time, its rows split over all cores
//! (rayon); the quantized tensors (a fraction of the input's size) are held
//! until the file is written; unchanged tensors are copied from the input in
//! chunks while it is. A sharded model is quantized shard by shard
//! ([`crate::model_dir`]), so this is one output shard at most.
//!
//! Kept in high precision by default ([`DEFAULT_KEEP`]), as ComfyUI's
//! quantized checkpoints keep them: embeddings, `lm_head` and norms, and a
//! Flux transformer's embedders, modulations and final layer (biases and
//! other 1-D tensors are never candidates).
//!
//! Weights holding NaN or ±inf are refused ([`QuantizeError::NonFinite`]): one
//! of them makes the scale inf or NaN and every code of the tensor garbage.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dynvram_loader::atomic::AtomicFile;
use dynvram_loader::{LoadError, SafetensorsFile};
use rayon::prelude::*;
use regex::Regex;

use crate::convrot_rows::{ConvrotRows, block_for};
use crate::format::{Format, LinearDtype};
use crate::meta::comfy_quant_json;
use crate::reference::{f32_to_e4m3fn, is_power_of_four};
use crate::safetensors_out::{self, OutTensor, Source, WriteFault};
use crate::tensors::{Dtype, f32_bytes, floats_into_f32, floats_to_f32};

/// Errors of the quantizer; each names the file or layer concerned.
#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    /// The output's header could not be serialized.
    #[error("{path}: {message}")]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// `--group-size` is not a power of 4 >= 4.
    #[error("group size {0} is not a power of 4 >= 4 (16, 64, 256, 1024, 4096)")]
    GroupSize(u32),
    /// An `--only`/`--skip` pattern does not compile.
    #[error("--{flag} {pattern:?} is not a valid regular expression: {message}")]
    Regex {
        /// `only` or `skip`.
        flag: &'static str,
        /// The pattern.
        pattern: String,
        /// The regex error.
        message: String,
    },
    /// The input holds no tensor: there is nothing to quantize.
    #[error("`{}` holds no tensor: nothing to quantize", .0.display())]
    NoTensors(PathBuf),
    /// Reading the input or writing the output failed (the loader's error
    /// names the file, the tensor and the sizes).
    #[error(transparent)]
    File(#[from] LoadError),
    /// A weight holds NaN or ±inf (refused unless `allow_nonfinite`).
    #[error(
        "{}: tensor `{tensor}` has {value} at element {index} (row {row}, column {column}); its scale would be inf or NaN (allow non-finite weights to quantize it anyway)",
        path.display()
    )]
    NonFinite {
        /// The input file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// The first bad element, flat index.
        index: usize,
        /// Its row.
        row: usize,
        /// Its column.
        column: usize,
        /// The value (NaN, inf or -inf).
        value: f32,
    },
}

/// The format to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetFormat {
    /// `convrot_w4a4` with this group size and `linear_dtype`.
    ConvrotW4a4 {
        /// `convrot_groupsize` (power of 4).
        group: u32,
        /// Written as `"linear_dtype": "int8"` only when int8.
        linear_dtype: LinearDtype,
    },
    /// `int8_tensorwise` (scalar scale, no rotation).
    Int8Tensorwise,
    /// `float8_e4m3fn` (scalar scale).
    Float8E4m3fn,
}

impl TargetFormat {
    fn format(self) -> Format {
        match self {
            TargetFormat::ConvrotW4a4 {
                group,
                linear_dtype,
            } => Format::ConvrotW4a4 {
                group,
                linear_dtype,
            },
            TargetFormat::Int8Tensorwise => Format::Int8Tensorwise {
                convrot_group: None,
            },
            TargetFormat::Float8E4m3fn => Format::Float8E4m3fn,
        }
    }
}

/// Layers kept in their float dtype unless asked otherwise: token and
/// position embeddings, the output head and every norm — what ComfyUI's
/// quantized checkpoints keep in high precision (the embedding must stay
/// float for its row gather; the head and norms are small and sensitive) —
/// and, in a Flux transformer (BFL names), the input embedders (`img_in`,
/// `txt_in`, `time_in`, `vector_in`, `guidance_in`), the modulations
/// (`img_mod`, `txt_mod`, `modulation`) and `final_layer`: the layers
/// ComfyUI's mixed-precision Flux files leave in bf16 (small, and every
/// block's scale and shift go through them).
pub const DEFAULT_KEEP: &str = r"(^|\.)(embed_tokens|embeddings?|wte|wpe|lm_head|[^.]*norm[^.]*|img_in|txt_in|time_in|vector_in|guidance_in|img_mod|txt_mod|modulation|final_layer)(\.|$)";

/// What to quantize and how.
#[derive(Debug, Clone)]
pub struct QuantizeOptions {
    /// Target format.
    pub target: TargetFormat,
    /// Layers kept in high precision whatever `only` says ([`DEFAULT_KEEP`]
    /// by default; `None` quantizes them too).
    pub keep: Option<Regex>,
    /// Only layers (names without `.weight`) matching this.
    pub only: Option<Regex>,
    /// Leave layers matching this as they are.
    pub skip: Option<Regex>,
    /// Quantize weights holding NaN or ±inf instead of refusing them.
    pub allow_nonfinite: bool,
    /// Replace an output folder that exists with files in it (refused by
    /// default; see `dynvram_loader::output_path`).
    pub force: bool,
}

impl QuantizeOptions {
    /// Options from command-line strings (patterns are Rust `regex` syntax, matched
    /// anywhere in the layer name, which is the tensor name without `.weight`).
    pub fn new(
        target: TargetFormat,
        only: Option<&str>,
        skip: Option<&str>,
    ) -> Result<Self, QuantizeError> {
        let compile = |flag: &'static str, p: Option<&str>| {
            p.map(|p| {
                Regex::new(p).map_err(|e| QuantizeError::Regex {
                    flag,
                    pattern: p.to_owned(),
                    message: e.to_string(),
                })
            })
            .transpose()
        };
        Ok(Self {
            target,
            keep: Some(Regex::new(DEFAULT_KEEP).expect("the default pattern compiles")),
            only: compile("only", only)?,
            skip: compile("skip", skip)?,
            allow_nonfinite: false,
            force: false,
        })
    }
}

/// A layer left unquantized, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SkippedLayer {
    /// Layer name.
    pub layer: String,
    /// Why, in words.
    pub reason: String,
}

/// What the quantizer did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct QuantizeReport {
    /// Layers written quantized.
    pub quantized: Vec<String>,
    /// Candidate layers (2-D float weights) left as they are.
    pub skipped: Vec<SkippedLayer>,
    /// Tensors copied unchanged.
    pub copied: usize,
    /// Input size in bytes.
    pub bytes_in: u64,
    /// Output size in bytes.
    pub bytes_out: u64,
}

/// `convrot_w4a4` weight quantization (kitchen `quantize_convrot_w4a4_weight`):
/// rotate rows in groups (`W · Hᵀ`, matmul order), `s[n] = max(absmax, 1e-10) / 7`,
/// `q = clamp(rhe(W_rot / s), -7, 7)`, nibbles packed low = even column.
/// Returns (`[N, K/2]` bytes, `[N]` scales); `None` unless `group` is a power
/// of 4 dividing `k` and `w` holds whole rows.
pub fn quantize_convrot_w4a4_weight(
    w: &[f32],
    k: usize,
    group: u32,
) -> Option<(Vec<u8>, Vec<f32>)> {
    // H is symmetric, so rotating by Hᵀ is the same product as the activation
    // rotation (`rotate`, `quantize_act_int4`, `pack_int4`), done row by row.
    let fits = is_power_of_four(group) && k.is_multiple_of(group as usize);
    if !fits || k == 0 || !w.len().is_multiple_of(k) {
        return None;
    }
    let n = w.len() / k;
    let rows = ConvrotRows::new(group, block_for(n, k, group));
    let mut rot = vec![0.0f32; k];
    let mut packed = vec![0u8; w.len() / 2];
    let scales = w
        .chunks_exact(k)
        .zip(packed.chunks_exact_mut(k / 2))
        .map(|(row, p)| rows.row(row, &mut rot, p))
        .collect();
    Some((packed, scales))
}

/// `int8_tensorwise` weight quantization (kitchen `quantize_int8_tensorwise`):
/// `s = max(max|W| / 127, 1e-30)` (true division), `q = clamp(rhe(W / s), -128, 127)`.
pub fn quantize_int8_tensorwise_weight(w: &[f32]) -> (Vec<i8>, f32) {
    let amax = w.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let s = (amax / 127.0).max(1e-30);
    let q = w
        .iter()
        .map(|&v| (v / s).round_ties_even().clamp(-128.0, 127.0) as i8)
        .collect();
    (q, s)
}

/// `float8_e4m3fn` weight quantization (kitchen `quantize_per_tensor_fp8`):
/// `s = amax / 448`, `q = e4m3fn(clamp(W * (1/s), -448, 448))` (round to nearest even).
/// An all-zero weight gets scale 0 and zero codes (kitchen would divide by zero).
pub fn quantize_float8_e4m3fn_weight(w: &[f32]) -> (Vec<u8>, f32) {
    let amax = w.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let s = amax / 448.0;
    if s == 0.0 {
        return (vec![0; w.len()], 0.0);
    }
    let inv = 1.0 / s;
    (
        w.iter()
            .map(|&v| f32_to_e4m3fn((v * inv).clamp(-448.0, 448.0)))
            .collect(),
        s,
    )
}

/// Why a candidate layer does not fit the target, if it does not.
fn misfit(target: TargetFormat, n: usize, k: usize) -> Option<String> {
    if n == 0 || k == 0 {
        return Some(format!("empty weight [{n}, {k}]"));
    }
    if let TargetFormat::ConvrotW4a4 { group, .. } = target {
        if !k.is_multiple_of(group as usize) {
            return Some(format!(
                "in_features {k} is not a multiple of the group size {group}"
            ));
        }
        if !k.is_multiple_of(64) {
            return Some(format!(
                "in_features {k} is not a multiple of 64 (convrot_w4a4)"
            ));
        }
    }
    None
}

/// Rows per parallel piece of a weight: about four pieces per core (the
/// pieces of a layer finish together), each of at least ~64 Ki values (the
/// scheduling and read costs stay small).
fn rows_per_piece(n: usize, k: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    let by_cores = n.div_ceil(threads * 4);
    by_cores.max((1 << 16) / k.max(1)).max(1)
}

/// [`quantize_convrot_w4a4_weight`] on all cores, the same bytes.
#[cfg(test)]
fn convrot_parallel(w: &[f32], n: usize, k: usize, group: u32) -> (Vec<u8>, Vec<f32>) {
    let rows = ConvrotRows::new(group, block_for(n, k, group));
    let mut packed = vec![0u8; n * k / 2];
    let mut scales = vec![0.0f32; n];
    packed
        .par_chunks_mut(k / 2)
        .zip(scales.par_iter_mut())
        .zip(w.par_chunks(k))
        .with_min_len(rows_per_piece(n, k))
        .for_each_init(
            || vec![0.0f32; k],
            |rot, ((p, s), row)| *s = rows.row(row, rot, p),
        );
    (packed, scales)
}

/// Scratch of one convrot task: the piece as read, one row as `f32`, its rotation.
#[derive(Default)]
struct RowScratch {
    bytes: Vec<u8>,
    row: Vec<f32>,
    rot: Vec<f32>,
}

/// The first non-finite element seen: (flat index, value).
type FirstBad = Option<(usize, f32)>;

/// convrot_w4a4 of the weight `name` straight from the file, on all cores:
/// each task reads a piece of rows, converts, checks, rotates and packs it
/// row by row, so reading overlaps the math and the tensor is never held
/// as `f32`. The same bytes as [`quantize_convrot_w4a4_weight`].
fn convrot_streamed(
    file: &SafetensorsFile,
    name: &str,
    shape: (Dtype, usize, usize),
    group: u32,
    opts: &QuantizeOptions,
) -> Result<(Vec<u8>, Vec<f32>), QuantizeError> {
    let (dtype, n, k) = shape;
    let elem = (dtype.bitsize() / 8).max(1);
    let rows = ConvrotRows::new(group, block_for(n, k, group));
    let per_piece = rows_per_piece(n, k);
    let mut packed = vec![0u8; n * k / 2];
    let mut scales = vec![0.0f32; n];
    let piece = |scratch: &mut RowScratch,
                 (i, (packed, scales)): (usize, (&mut [u8], &mut [f32]))|
     -> Result<FirstBad, LoadError> {
        let first_row = i * per_piece;
        let at = (first_row * k * elem) as u64;
        scratch.bytes.resize(scales.len() * k * elem, 0);
        file.read_into(
            name,
            at..at + scratch.bytes.len() as u64,
            &mut scratch.bytes,
        )?;
        scratch.row.resize(k, 0.0);
        scratch.rot.resize(k, 0.0);
        let outs = packed.chunks_exact_mut(k / 2).zip(scales.iter_mut());
        for (r, (src, (p, s))) in scratch.bytes.chunks_exact(k * elem).zip(outs).enumerate() {
            floats_into_f32(dtype, src, &mut scratch.row);
            if !opts.allow_nonfinite
                && let Some(c) = scratch.row.iter().position(|v| !v.is_finite())
            {
                return Ok(Some(((first_row + r) * k + c, scratch.row[c])));
            }
            *s = rows.row(&scratch.row, &mut scratch.rot, p);
        }
        Ok(None)
    };
    let bad = packed
        .par_chunks_mut(per_piece * k / 2)
        .zip(scales.par_chunks_mut(per_piece))
        .enumerate()
        .map_init(RowScratch::default, piece)
        .try_reduce(|| None, |a, b| Ok(first_bad(a, b)))?;
    if let Some((index, value)) = bad {
        return Err(non_finite(file, name, k, index, value));
    }
    Ok((packed, scales))
}

/// The earlier of two first non-finite elements.
fn first_bad(a: FirstBad, b: FirstBad) -> FirstBad {
    match (a, b) {
        (Some(x), Some(y)) => Some(if x.0 <= y.0 { x } else { y }),
        (x, y) => x.or(y),
    }
}

/// The error for a non-finite element at flat `index` of `tensor`.
fn non_finite(
    file: &SafetensorsFile,
    tensor: &str,
    k: usize,
    index: usize,
    value: f32,
) -> QuantizeError {
    QuantizeError::NonFinite {
        path: file.path().to_owned(),
        tensor: tensor.to_owned(),
        index,
        row: index / k.max(1),
        column: index % k.max(1),
        value,
    }
}

/// Largest |value|, on all cores.
fn absmax_parallel(w: &[f32]) -> f32 {
    w.par_chunks(1 << 16)
        .map(|c| c.iter().fold(0.0f32, |m, v| m.max(v.abs())))
        .reduce(|| 0.0, f32::max)
}

/// Quantizes one layer's float weight into its new tensors (weight, scale,
/// comfy_quant), on all cores; the same bytes as the single-threaded
/// `quantize_*_weight` functions.
#[cfg(test)]
fn quantize_layer(
    target: TargetFormat,
    w: &[f32],
    n: usize,
    k: usize,
) -> Vec<(&'static str, OutTensor)> {
    match target {
        TargetFormat::ConvrotW4a4 { group, .. } => {
            let (packed, scales) = convrot_parallel(w, n, k, group);
            convrot_tensors(target, n, k, packed, &scales)
        }
        _ => scalar_scaled_layer(target, w, n, k),
    }
}

/// The new tensors of a convrot_w4a4 layer from its packed codes and scales.
fn convrot_tensors(
    target: TargetFormat,
    n: usize,
    k: usize,
    packed: Vec<u8>,
    scales: &[f32],
) -> Vec<(&'static str, OutTensor)> {
    let wt = OutTensor::owned(Dtype::I8, vec![n, k / 2], packed);
    let st = OutTensor::owned(Dtype::F32, vec![n], f32_bytes(scales));
    layer_tensors(target, wt, st)
}

/// An `int8_tensorwise` or `float8_e4m3fn` layer (one scale for the
/// tensor), on all cores.
fn scalar_scaled_layer(
    target: TargetFormat,
    w: &[f32],
    n: usize,
    k: usize,
) -> Vec<(&'static str, OutTensor)> {
    let (wt, s) = if target == TargetFormat::Int8Tensorwise {
        let s = (absmax_parallel(w) / 127.0).max(1e-30);
        let q: Vec<u8> = w
            .par_iter()
            .map(|&v| (v / s).round_ties_even().clamp(-128.0, 127.0) as i8 as u8)
            .collect();
        (OutTensor::owned(Dtype::I8, vec![n, k], q), s)
    } else {
        let s = absmax_parallel(w) / 448.0;
        let q: Vec<u8> = if s == 0.0 {
            vec![0; w.len()]
        } else {
            let inv = 1.0 / s;
            w.par_iter()
                .map(|&v| f32_to_e4m3fn((v * inv).clamp(-448.0, 448.0)))
                .collect()
        };
        (OutTensor::owned(Dtype::F8_E4M3, vec![n, k], q), s)
    };
    let st = OutTensor::owned(Dtype::F32, vec![], s.to_le_bytes().to_vec());
    layer_tensors(target, wt, st)
}

/// A layer's weight and scale with its `comfy_quant` tensor.
fn layer_tensors(
    target: TargetFormat,
    wt: OutTensor,
    st: OutTensor,
) -> Vec<(&'static str, OutTensor)> {
    let json = comfy_quant_json(target.format())
        .unwrap_or_default()
        .into_bytes();
    let jt = OutTensor::owned(Dtype::U8, vec![json.len()], json);
    vec![("weight", wt), ("weight_scale", st), ("comfy_quant", jt)]
}

/// Quantizes the weight of `layer` from `file` into its new tensors.
fn quantize_from_file(
    file: &SafetensorsFile,
    layer: &str,
    shape: (Dtype, usize, usize),
    opts: &QuantizeOptions,
) -> Result<Vec<(&'static str, OutTensor)>, QuantizeError> {
    let name = format!("{layer}.weight");
    let (dtype, n, k) = shape;
    Ok(match opts.target {
        // `misfit` has checked k % group == 0.
        TargetFormat::ConvrotW4a4 { group, .. } => {
            let (packed, scales) = convrot_streamed(file, &name, shape, group, opts)?;
            convrot_tensors(opts.target, n, k, packed, &scales)
        }
        target => {
            let w = read_weight(file, &name, dtype, k, opts)?;
            scalar_scaled_layer(target, &w, n, k)
        }
    })
}

/// Quantizes `input` into `output` (see the module docs). `progress(done, total, layer)`
/// is called after each candidate layer, quantized or skipped.
pub fn quantize_file(
    input: &Path,
    output: &Path,
    opts: &QuantizeOptions,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<QuantizeReport, QuantizeError> {
    let _span =
        tracing::info_span!("quantize", input = %input.display(), output = %output.display())
            .entered();
    if let TargetFormat::ConvrotW4a4 { group, .. } = opts.target
        && !is_power_of_four(group)
    {
        return Err(QuantizeError::GroupSize(group));
    }
    dynvram_loader::output_path::check_output(output, &[input])?;
    let file = SafetensorsFile::open(input)?;
    if file.tensors().is_empty() {
        return Err(QuantizeError::NoTensors(input.to_owned()));
    }
    // Created up front: an output that cannot be written is refused before
    // the work, and an interrupted run has a temp file the signal handler removes.
    let mut dst = AtomicFile::create(output)?;
    let mut report = QuantizeReport {
        bytes_in: file.len(),
        ..Default::default()
    };

    let mut infos: Vec<_> = file.tensors().iter().collect();
    infos.sort_by(|a, b| a.name.cmp(&b.name));
    let candidates: Vec<(String, Dtype, usize, usize)> = infos
        .iter()
        .filter_map(|t| {
            let layer = t.name.strip_suffix(".weight")?;
            let float = matches!(t.dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16);
            (float && t.shape.len() == 2)
                .then(|| (layer.to_owned(), t.dtype, t.shape[0], t.shape[1]))
        })
        .collect();

    let mut out: BTreeMap<String, OutTensor> = BTreeMap::new();
    let total = candidates.len();
    for (i, (layer, dtype, n, k)) in candidates.iter().enumerate() {
        let selected = opts.only.as_ref().is_none_or(|r| r.is_match(layer))
            && !opts.skip.as_ref().is_some_and(|r| r.is_match(layer));
        let kept = opts.keep.as_ref().is_some_and(|r| r.is_match(layer));
        let reason = if kept {
            Some(
                "kept in high precision (embedding, lm_head or norm; --quantize-all quantizes it)"
                    .to_owned(),
            )
        } else if !selected {
            Some("not selected by --only/--skip".to_owned())
        } else if file.get(&format!("{layer}.comfy_quant")).is_some() {
            Some("already has comfy_quant".to_owned())
        } else {
            misfit(opts.target, *n, *k)
        };
        match reason {
            Some(reason) => {
                tracing::debug!(layer, reason, "skipped");
                report.skipped.push(SkippedLayer {
                    layer: layer.clone(),
                    reason,
                });
            }
            None => {
                for (suffix, t) in quantize_from_file(&file, layer, (*dtype, *n, *k), opts)? {
                    out.insert(format!("{layer}.{suffix}"), t);
                }
                report.quantized.push(layer.clone());
            }
        }
        progress(i + 1, total, layer);
    }
    for t in infos {
        if !out.contains_key(&t.name) {
            out.insert(
                t.name.clone(),
                OutTensor {
                    dtype: t.dtype,
                    shape: t.shape.clone(),
                    len: t.len() as usize,
                    source: Source::Input,
                },
            );
            report.copied += 1;
        }
    }
    let metadata = (!file.metadata().is_empty()).then(|| {
        file.metadata()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    });
    tracing::debug!("layers quantized, writing");
    safetensors_out::write(&mut dst, &file, &out, metadata).map_err(|fault| match fault {
        WriteFault::Output(e) => QuantizeError::File(dst.error(e)),
        WriteFault::Input(e) => QuantizeError::File(e),
        WriteFault::Header(e) => QuantizeError::Safetensors {
            path: output.to_owned(),
            message: e.to_string(),
        },
    })?;
    report.bytes_out = dst.commit()?;
    tracing::info!(
        quantized = report.quantized.len(),
        skipped = report.skipped.len(),
        "quantized"
    );
    Ok(report)
}

/// A float weight as `f32`, read with positional reads; refused when it holds
/// NaN or ±inf unless the options allow it.
fn read_weight(
    file: &SafetensorsFile,
    name: &str,
    dtype: Dtype,
    k: usize,
    opts: &QuantizeOptions,
) -> Result<Vec<f32>, QuantizeError> {
    let len = file.tensor(name)?.len();
    let mut bytes = vec![0u8; len as usize];
    file.read_into(name, 0..len, &mut bytes)?;
    // Converted and checked on all cores, in pieces of whole elements.
    const PIECE: usize = 1 << 16;
    let elem = (dtype.bitsize() / 8).max(1);
    let mut w = vec![0.0f32; bytes.len() / elem];
    w.par_chunks_mut(PIECE)
        .zip(bytes.par_chunks(PIECE * elem))
        .for_each(|(dst, src)| {
            if let Some(v) = floats_to_f32(dtype, src) {
                dst.copy_from_slice(&v);
            }
        });
    drop(bytes);
    if !opts.allow_nonfinite
        && let Some(index) = w.par_iter().position_first(|v| !v.is_finite())
    {
        return Err(non_finite(file, name, k, index, w[index]));
    }
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weights(n: usize, k: usize) -> Vec<f32> {
        (0..n * k)
            .map(|i| ((i as f32 * 0.618).sin() * 3.0) * if i % 97 == 0 { 10.0 } else { 1.0 })
            .collect()
    }

    fn bytes(t: &OutTensor) -> &[u8] {
        match &t.source {
            Source::Owned(b) => b,
            Source::Input => &[],
        }
    }

    /// The layer split over all cores gives the bytes of the one-thread
    /// reference functions, for every format and for shapes where a piece
    /// could be one row (n = 1, k = group: the GEMV summation order).
    #[test]
    fn parallel_layers_match_the_serial_quantizers() {
        for (n, k, group) in [
            (1, 256, 256),
            (3, 256, 256),
            (37, 512, 64),
            (300, 1024, 256),
        ] {
            let w = weights(n, k);
            let out = quantize_layer(
                TargetFormat::ConvrotW4a4 {
                    group,
                    linear_dtype: LinearDtype::Int4,
                },
                &w,
                n,
                k,
            );
            let (packed, scales) = quantize_convrot_w4a4_weight(&w, k, group).expect("fits");
            assert_eq!(bytes(&out[0].1), packed.as_slice(), "{n}x{k}/{group}");
            assert_eq!(bytes(&out[1].1), f32_bytes(&scales).as_slice(), "{n}x{k}");
            let out = quantize_layer(TargetFormat::Int8Tensorwise, &w, n, k);
            let (q, s) = quantize_int8_tensorwise_weight(&w);
            let q: Vec<u8> = q.iter().map(|&v| v as u8).collect();
            assert_eq!(bytes(&out[0].1), q.as_slice());
            assert_eq!(bytes(&out[1].1), s.to_le_bytes().as_slice());
            let out = quantize_layer(TargetFormat::Float8E4m3fn, &w, n, k);
            let (q, s) = quantize_float8_e4m3fn_weight(&w);
            assert_eq!(bytes(&out[0].1), q.as_slice());
            assert_eq!(bytes(&out[1].1), s.to_le_bytes().as_slice());
        }
    }

    /// A bf16 file quantized piece by piece as it is read gives the bytes of
    /// the one-thread reference, and the first non-finite element over all
    /// pieces is the one named.
    #[test]
    fn streamed_convrot_matches_the_serial_quantizer() {
        let (n, k, group) = (300, 1024, 256);
        let w: Vec<f32> = weights(n, k)
            .iter()
            .map(|&v| half::bf16::from_f32(v).to_f32())
            .collect();
        let dir = tempfile::tempdir().expect("tempdir");
        let (input, out) = (dir.path().join("in.safetensors"), dir.path().join("o"));
        let write = |w: &[f32]| {
            let bytes: Vec<u8> = w
                .iter()
                .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
                .collect();
            let view = safetensors::tensor::TensorView::new(Dtype::BF16, vec![n, k], &bytes)
                .expect("view");
            safetensors::serialize_to_file([("l.weight", view)], None, &input).expect("write");
        };
        write(&w);
        let target = TargetFormat::ConvrotW4a4 {
            group,
            linear_dtype: LinearDtype::Int4,
        };
        let opts = QuantizeOptions::new(target, None, None).expect("opts");
        quantize_file(&input, &out, &opts, &mut |_, _, _| {}).expect("quantize");
        let buf = std::fs::read(&out).expect("read");
        let file = crate::SafeFile::parse(&buf).expect("parse");
        let (packed, scales) = quantize_convrot_w4a4_weight(&w, k, group).expect("fits");
        assert_eq!(file.data("l.weight").expect("weight"), packed.as_slice());
        assert_eq!(
            file.data("l.weight_scale").expect("scale"),
            f32_bytes(&scales).as_slice()
        );
        let mut bad = w.clone();
        bad[250 * k + 3] = f32::NAN;
        bad[70 * k + 9] = f32::INFINITY;
        write(&bad);
        let e = quantize_file(&input, &out, &opts, &mut |_, _, _| {}).expect_err("inf");
        assert!(
            e.to_string().contains(&format!("element {} ", 70 * k + 9)),
            "{e}"
        );
    }

    /// ComfyUI's high-precision layers match the default keep pattern;
    /// the linears of a block do not.
    #[test]
    fn default_keep_is_embeddings_head_and_norms() {
        let keep = Regex::new(DEFAULT_KEEP).expect("compiles");
        for kept in [
            "model.embed_tokens",
            "lm_head",
            "model.norm",
            "model.layers.3.input_layernorm",
            "model.layers.3.post_attention_layernorm",
            "transformer.wte",
            "transformer.wpe",
            "text_model.embeddings.token_embedding",
            "blocks.0.norm1",
            "img_in",
            "model.diffusion_model.txt_in",
            "time_in.in_layer",
            "guidance_in.out_layer",
            "vector_in.in_layer",
            "double_blocks.4.img_mod.lin",
            "double_blocks.4.txt_mod.lin",
            "single_blocks.11.modulation.lin",
            "final_layer.linear",
            "final_layer.adaLN_modulation.1",
        ] {
            assert!(keep.is_match(kept), "{kept}");
        }
        for quantized in [
            "model.layers.3.self_attn.q_proj",
            "model.layers.3.mlp.down_proj",
            "blocks.0.mlp.fc1",
            "lin",
            "model.layers.0.self_attn.o_proj",
            "double_blocks.4.img_attn.qkv",
            "double_blocks.4.txt_attn.proj",
            "model.diffusion_model.double_blocks.0.img_mlp.0",
            "double_blocks.0.txt_mlp.2",
            "single_blocks.11.linear1",
            "single_blocks.11.linear2",
        ] {
            assert!(!keep.is_match(quantized), "{quantized}");
        }
    }
}
