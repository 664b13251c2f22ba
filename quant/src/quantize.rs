//! The quantizer behind `dynvram quantize`: turns the 2-D float `*.weight` tensors of
//! a safetensors file into ComfyUI's quantized layout with kitchen's own arithmetic
//! (`conformance/README.md` §4.2, §4.6, §4.7), leaving every other tensor as it is.
//!
//! Memory: the input is memory-mapped; the math runs one layer at a time; the
//! quantized tensors (a fraction of the input's size) are held until the file is
//! written. The output appears atomically (temp file in the same folder, fsync, rename).

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use regex::Regex;
use safetensors::View;

use crate::format::{Format, LinearDtype};
use crate::meta::comfy_quant_json;
use crate::reference::{Rotation, f32_to_e4m3fn, is_power_of_four, pack_int4, rotate};
use crate::tensors::{Dtype, SafeFile, TensorList, f32_bytes, floats_to_f32};

/// Errors of the quantizer; each names the file or layer concerned.
#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    /// Reading, writing or renaming a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The input is not a readable safetensors file, or the output could not be serialized.
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
    /// Input and output are the same file.
    #[error("output {0} is the input file")]
    SameFile(PathBuf),
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

/// What to quantize and how.
#[derive(Debug, Clone)]
pub struct QuantizeOptions {
    /// Target format.
    pub target: TargetFormat,
    /// Only layers (names without `.weight`) matching this.
    pub only: Option<Regex>,
    /// Leave layers matching this as they are.
    pub skip: Option<Regex>,
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
            only: compile("only", only)?,
            skip: compile("skip", skip)?,
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
/// Returns (`[N, K/2]` bytes, `[N]` scales). `k` must be a multiple of `group`.
pub fn quantize_convrot_w4a4_weight(
    w: &[f32],
    k: usize,
    group: u32,
) -> Option<(Vec<u8>, Vec<f32>)> {
    // H is symmetric, so rotating by Hᵀ is the same product as the activation rotation.
    let rot = rotate(w, k, group, Rotation::Matmul).ok()?;
    let q = crate::reference::quantize_act_int4(&rot, k);
    Some((pack_int4(&q.codes), q.scales))
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

/// A tensor to write: borrowed from the input or newly made.
struct OutTensor<'a> {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Cow<'a, [u8]>,
}

impl View for &OutTensor<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
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

/// Quantizes one layer's float weight into its new tensors (weight, scale, comfy_quant).
fn quantize_layer(
    target: TargetFormat,
    w: &[f32],
    n: usize,
    k: usize,
) -> Vec<(&'static str, OutTensor<'static>)> {
    let (wt, st) = match target {
        TargetFormat::ConvrotW4a4 { group, .. } => {
            // `misfit` has checked k % group == 0, so the rotation cannot fail.
            let (packed, scales) = quantize_convrot_w4a4_weight(w, k, group).unwrap_or_default();
            (
                OutTensor {
                    dtype: Dtype::I8,
                    shape: vec![n, k / 2],
                    data: Cow::Owned(packed),
                },
                OutTensor {
                    dtype: Dtype::F32,
                    shape: vec![n],
                    data: Cow::Owned(f32_bytes(&scales)),
                },
            )
        }
        TargetFormat::Int8Tensorwise => {
            let (q, s) = quantize_int8_tensorwise_weight(w);
            (
                OutTensor {
                    dtype: Dtype::I8,
                    shape: vec![n, k],
                    data: Cow::Owned(q.iter().map(|&v| v as u8).collect()),
                },
                OutTensor {
                    dtype: Dtype::F32,
                    shape: vec![],
                    data: Cow::Owned(s.to_le_bytes().to_vec()),
                },
            )
        }
        TargetFormat::Float8E4m3fn => {
            let (q, s) = quantize_float8_e4m3fn_weight(w);
            (
                OutTensor {
                    dtype: Dtype::F8_E4M3,
                    shape: vec![n, k],
                    data: Cow::Owned(q),
                },
                OutTensor {
                    dtype: Dtype::F32,
                    shape: vec![],
                    data: Cow::Owned(s.to_le_bytes().to_vec()),
                },
            )
        }
    };
    let json = comfy_quant_json(target.format())
        .unwrap_or_default()
        .into_bytes();
    let jt = OutTensor {
        dtype: Dtype::U8,
        shape: vec![json.len()],
        data: Cow::Owned(json),
    };
    vec![("weight", wt), ("weight_scale", st), ("comfy_quant", jt)]
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> QuantizeError + '_ {
    move |source| QuantizeError::Io {
        path: path.to_owned(),
        source,
    }
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
    if let (Ok(a), Ok(b)) = (input.canonicalize(), output.canonicalize())
        && a == b
    {
        return Err(QuantizeError::SameFile(output.to_owned()));
    }
    let f = std::fs::File::open(input).map_err(io(input))?;
    // SAFETY: the map is read-only and lives only inside this call; the file is the
    // user's input, which we do not modify. A concurrent writer truncating it could
    // fault the process, which is the accepted contract of every mmap-based loader.
    let map = unsafe { memmap2::Mmap::map(&f) }.map_err(io(input))?;
    let file = SafeFile::parse(&map).map_err(|e| QuantizeError::Safetensors {
        path: input.to_owned(),
        message: e.to_string(),
    })?;
    let mut report = QuantizeReport {
        bytes_in: map.len() as u64,
        ..Default::default()
    };

    let mut names = file.names();
    names.sort();
    let candidates: Vec<(String, Dtype, usize, usize)> = names
        .iter()
        .filter_map(|name| {
            let layer = name.strip_suffix(".weight")?;
            let (dtype, shape) = file.dtype_shape(name)?;
            let float = matches!(dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16);
            (float && shape.len() == 2).then(|| (layer.to_owned(), dtype, shape[0], shape[1]))
        })
        .collect();

    let mut out: HashMap<String, OutTensor<'_>> = HashMap::new();
    let total = candidates.len();
    for (i, (layer, dtype, n, k)) in candidates.iter().enumerate() {
        let selected = opts.only.as_ref().is_none_or(|r| r.is_match(layer))
            && !opts.skip.as_ref().is_some_and(|r| r.is_match(layer));
        let reason = if !selected {
            Some("not selected by --only/--skip".to_owned())
        } else if file.dtype_shape(&format!("{layer}.comfy_quant")).is_some() {
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
                let bytes = file.data(&format!("{layer}.weight")).unwrap_or_default();
                let w = floats_to_f32(*dtype, bytes).unwrap_or_default();
                for (suffix, t) in quantize_layer(opts.target, &w, *n, *k) {
                    out.insert(format!("{layer}.{suffix}"), t);
                }
                report.quantized.push(layer.clone());
            }
        }
        progress(i + 1, total, layer);
    }
    for name in &names {
        if out.contains_key(name) {
            continue;
        }
        let view = file
            .tensors()
            .tensor(name)
            .map_err(|e| QuantizeError::Safetensors {
                path: input.to_owned(),
                message: e.to_string(),
            })?;
        out.insert(
            name.clone(),
            OutTensor {
                dtype: view.dtype(),
                shape: view.shape().to_vec(),
                data: Cow::Borrowed(view.data()),
            },
        );
        report.copied += 1;
    }
    report.bytes_out = write_atomic(output, &out, file.header_metadata().cloned())?;
    tracing::info!(
        quantized = report.quantized.len(),
        skipped = report.skipped.len(),
        "quantized"
    );
    Ok(report)
}

/// Writes the tensors to a temp file next to `output`, fsyncs it and renames it into
/// place; the temp file is removed on any error. Returns the size written.
fn write_atomic(
    output: &Path,
    tensors: &HashMap<String, OutTensor<'_>>,
    metadata: Option<HashMap<String, String>>,
) -> Result<u64, QuantizeError> {
    let dir = output
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let base = output
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{base}.tmp-{}", std::process::id()));
    let result = (|| {
        safetensors::serialize_to_file(
            tensors.iter().map(|(k, v)| (k.as_str(), v)),
            metadata,
            &tmp,
        )
        .map_err(|e| QuantizeError::Safetensors {
            path: tmp.clone(),
            message: e.to_string(),
        })?;
        let f = std::fs::File::open(&tmp).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        let len = f.metadata().map_err(io(&tmp))?.len();
        // safetensors creates the file owner-only (0600); a model file is
        // ordinarily readable by everyone, as `cp` would leave it.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))
                .map_err(io(&tmp))?;
        }
        std::fs::rename(&tmp, output).map_err(io(output))?;
        // Make the rename itself durable; not every platform can open a folder.
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(len)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
