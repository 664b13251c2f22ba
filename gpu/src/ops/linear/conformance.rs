//! Running the golden cases of a folder laid out like `fixtures/conformance`
//! (`manifest.json` + one safetensors file per case) on a GPU, checking each
//! against the target of the path it took with the two-tier rule of the
//! README §7. Shared by `dynvram conformance` and the tests.

use std::path::{Path, PathBuf};

use dynvram_quant::reference::{LayerBytes, declared_act, reference_linear};
use dynvram_quant::tensors::f32s;
use dynvram_quant::tolerance::{Comparison, FlipAllowance, compare};
use dynvram_quant::{
    ActArith, Format, KernelChoice, LinearDtypeOverride, QuantLayer, SafeFile, choose,
    validate_layer,
};
use serde::Serialize;

use super::{LinearError, LinearScratch, LinearWeights, record_linear};
use crate::device::{Gpu, GpuError};
use crate::ops::cache::PipelineCache;
use crate::tensor::{ActDtype, GpuTensor};

/// Per-block stack tolerance: `5e-3 · max|target|` (README §7).
pub const STACK_BLOCK_REL: f32 = 5e-3;
/// End-to-end stack tolerance: `5e-2 · max|target|`.
pub const STACK_END_REL: f32 = 5e-2;

/// Why a folder or case could not be run (a failing comparison is a report, not an error).
#[derive(Debug, thiserror::Error)]
pub enum ConformanceError {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// `manifest.json` is malformed.
    #[error("{path}: {what}")]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// A case file is malformed.
    #[error("{file}: {what}")]
    Case {
        /// The case file.
        file: String,
        /// What is wrong.
        what: String,
    },
    /// Recording a linear failed.
    #[error("{file}: {source}")]
    Linear {
        /// The case file.
        file: String,
        /// The cause.
        source: LinearError,
    },
    /// The GPU failed.
    #[error(transparent)]
    Gpu(#[from] GpuError),
}

/// The outcome of one check (a case, or one stage of the stack).
#[derive(Debug, Clone, Serialize)]
pub struct CaseReport {
    /// Case (file stem, plus `/block i` or `/end-to-end` for the stack).
    pub case: String,
    /// The path taken, e.g. `int4-act fast`, `int8-act portable`, `float`, `mixed`.
    pub path: String,
    /// The tensor compared with (`expected`, `expected_fallback_int8`, …).
    pub target: String,
    /// Why the case was skipped, if it was.
    pub skipped: Option<String>,
    /// The comparison (absent when skipped).
    pub comparison: Option<Comparison>,
    /// Why `kernel choice` picked the path.
    pub reason: String,
}

impl CaseReport {
    /// Passed, or skipped with a reason.
    pub fn ok(&self) -> bool {
        self.skipped.is_some() || self.comparison.as_ref().is_some_and(|c| c.pass)
    }
}

/// Runs every case listed in `dir/manifest.json`.
pub fn run_dir(
    gpu: &Gpu,
    dir: &Path,
    ov: LinearDtypeOverride,
) -> Result<Vec<CaseReport>, ConformanceError> {
    let manifest_path = dir.join("manifest.json");
    let text = read(&manifest_path)?;
    let manifest: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| ConformanceError::Manifest {
            path: manifest_path.clone(),
            what: e.to_string(),
        })?;
    let cases = manifest["cases"]
        .as_array()
        .ok_or_else(|| ConformanceError::Manifest {
            path: manifest_path.clone(),
            what: "no `cases` array".into(),
        })?;
    let cache = PipelineCache::default();
    let mut scratch = LinearScratch::new();
    let mut reports = Vec::new();
    for case in cases {
        let file = case["file"]
            .as_str()
            .ok_or_else(|| ConformanceError::Manifest {
                path: manifest_path.clone(),
                what: "a case without `file`".into(),
            })?;
        let _span = tracing::info_span!("conformance_case", file).entered();
        let bytes = read(&dir.join(file))?;
        let st = SafeFile::parse(&bytes).map_err(|e| case_err(file, e.to_string()))?;
        let mut ctx = Ctx {
            gpu,
            cache: &cache,
            scratch: &mut scratch,
            file,
            st: &st,
        };
        if st.data("layer.weight").is_some() {
            reports.push(ctx.single(ov)?);
        } else {
            reports.extend(ctx.stack(ov)?);
        }
    }
    Ok(reports)
}

fn read(path: &Path) -> Result<Vec<u8>, ConformanceError> {
    std::fs::read(path).map_err(|source| ConformanceError::Io {
        path: path.to_owned(),
        source,
    })
}

fn case_err(file: &str, what: String) -> ConformanceError {
    ConformanceError::Case {
        file: file.to_owned(),
        what,
    }
}

/// `gelu(h, approximate="tanh")` in f32.
pub fn gelu_tanh(h: f32) -> f32 {
    let c = (2.0f32 / std::f32::consts::PI).sqrt();
    0.5 * h * (1.0 + (c * (h + 0.044715 * h * h * h)).tanh())
}

/// The path name of a kernel choice.
pub fn path_name(choice: KernelChoice) -> String {
    match choice {
        KernelChoice::Integer { act, fast } => format!(
            "{}-act {}",
            if act == ActArith::Int4 {
                "int4"
            } else {
                "int8"
            },
            if fast { "fast" } else { "portable" }
        ),
        KernelChoice::Float => "float".into(),
    }
}

/// The largest weight code of an integer format (the flip allowance's `Q`).
fn weight_q(format: Format) -> Option<f32> {
    match format {
        Format::ConvrotW4a4 { .. } => Some(7.0),
        Format::Int8Tensorwise { .. } => Some(127.0),
        _ => None,
    }
}

/// The target tensor of a single-layer case for the arithmetic taken, or why there is none.
fn target_for(
    format: Format,
    act: Option<ActArith>,
    has: impl Fn(&str) -> bool,
) -> Result<&'static str, String> {
    match (declared_act(format), act) {
        (Some(ActArith::Int4), Some(ActArith::Int8)) => Ok("expected_fallback_int8"),
        (Some(ActArith::Int8), Some(ActArith::Int4))
            if matches!(format, Format::ConvrotW4a4 { .. }) =>
        {
            if has("expected_eager_cpu") {
                Ok("expected_eager_cpu")
            } else {
                Err(
                    "int4 forced on a file that states int8, and it has no expected_eager_cpu"
                        .into(),
                )
            }
        }
        _ => Ok("expected"),
    }
}

struct Ctx<'a, 'd> {
    gpu: &'a Gpu,
    cache: &'a PipelineCache,
    scratch: &'a mut LinearScratch,
    file: &'a str,
    st: &'a SafeFile<'d>,
}

/// A layer ready to run: its metadata, host bytes and GPU weights.
struct Layer<'d> {
    meta: QuantLayer,
    bytes: LayerBytes<'d>,
    gpu: LinearWeights,
}

impl<'d> Ctx<'_, 'd> {
    fn tensor(&self, name: &str) -> Result<&'d [u8], ConformanceError> {
        self.st
            .data(name)
            .ok_or_else(|| case_err(self.file, format!("missing tensor `{name}`")))
    }

    fn layer(&self, name: &str) -> Result<Layer<'d>, ConformanceError> {
        let meta = validate_layer(self.st, name).map_err(|e| case_err(self.file, e.to_string()))?;
        let bytes = LayerBytes {
            weight: self.tensor(&meta.weight)?,
            scale: meta.scale.as_deref().map(|s| self.tensor(s)).transpose()?,
            bias: meta.bias.as_deref().map(|b| self.tensor(b)).transpose()?,
        };
        let gpu = LinearWeights::upload(self.gpu, &meta, bytes).map_err(|source| {
            ConformanceError::Linear {
                file: self.file.to_owned(),
                source,
            }
        })?;
        Ok(Layer { meta, bytes, gpu })
    }

    /// Runs one layer on `x` (`[M, K]`); returns the output and the activation scales used.
    fn run(
        &mut self,
        layer: &Layer<'_>,
        choice: KernelChoice,
        x: &[f32],
    ) -> Result<(Vec<f32>, Vec<f32>), ConformanceError> {
        let (n, k) = (layer.gpu.n, layer.gpu.k);
        let m = x.len() as u64 / k;
        let x_t = upload_f32(self.gpu, "conformance.x", x, vec![m, k])?;
        let out = GpuTensor {
            buffer: std::sync::Arc::new(self.gpu.create_buffer(
                "conformance.out",
                m * n * 4,
                wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            )?),
            offset: 0,
            shape: vec![m, n],
            dtype: ActDtype::F32,
        };
        let mut enc = crate::ops::encoder::Encoder::new(&self.gpu.device, "conformance");
        record_linear(
            self.gpu,
            self.cache,
            &mut enc,
            &layer.gpu,
            choice,
            &x_t,
            &out,
            self.scratch,
        )
        .map_err(|source| ConformanceError::Linear {
            file: self.file.to_owned(),
            source,
        })?;
        self.gpu.queue.submit([enc.finish()]);
        let y = self.gpu.read_f32(&out.buffer, 0, m * n)?;
        let scales = match (choice, self.scratch.act_scales()) {
            (KernelChoice::Integer { .. }, Some(s)) => self.gpu.read_f32(s, 0, m)?,
            _ => Vec::new(),
        };
        Ok((y, scales))
    }

    fn allowance<'s>(
        &self,
        layer: &Layer<'s>,
        scales: &'s [f32],
        w_scales: &'s [f32],
    ) -> Option<FlipAllowance<'s>> {
        weight_q(layer.meta.format).map(|q| FlipAllowance {
            act_scales: scales,
            weight_scales: w_scales,
            q,
        })
    }

    fn single(&mut self, ov: LinearDtypeOverride) -> Result<CaseReport, ConformanceError> {
        let layer = self.layer("layer")?;
        let plan = choose(layer.meta.format, &self.gpu.caps, ov);
        let act = match plan.kernel {
            KernelChoice::Integer { act, .. } => Some(act),
            KernelChoice::Float => None,
        };
        let case = self.file.trim_end_matches(".safetensors").to_owned();
        let target = match target_for(layer.meta.format, act, |t| self.st.data(t).is_some()) {
            Ok(t) => t,
            Err(why) => {
                return Ok(CaseReport {
                    case,
                    path: path_name(plan.kernel),
                    target: "-".into(),
                    skipped: Some(why),
                    comparison: None,
                    reason: plan.reason,
                });
            }
        };
        let x = f32s(self.tensor("input")?);
        let expected = f32s(self.tensor(target)?);
        let (y, scales) = self.run(&layer, plan.kernel, &x)?;
        let mut path = path_name(plan.kernel);
        if self.scratch.last_used_coop() {
            path.push_str(" coop-matrix");
        }
        let w_scales = layer.bytes.scale.map(f32s).unwrap_or_default();
        let cmp = compare(
            &y,
            &expected,
            layer.gpu.n as usize,
            self.allowance(&layer, &scales, &w_scales),
        );
        Ok(CaseReport {
            case,
            path,
            target: target.into(),
            skipped: None,
            comparison: Some(cmp),
            reason: plan.reason,
        })
    }

    /// The `stack_mixed` chain: `x = x + fc2(gelu(fc1(x)))` per block.
    fn stack(&mut self, ov: LinearDtypeOverride) -> Result<Vec<CaseReport>, ConformanceError> {
        let case = self.file.trim_end_matches(".safetensors").to_owned();
        let mut blocks = Vec::new();
        while self
            .st
            .data(&format!("blocks.{}.mlp.fc1.weight", blocks.len()))
            .is_some()
        {
            let i = blocks.len();
            blocks.push((
                self.layer(&format!("blocks.{i}.mlp.fc1"))?,
                self.layer(&format!("blocks.{i}.mlp.fc2"))?,
            ));
        }
        if blocks.is_empty() {
            return Err(case_err(
                self.file,
                "neither `layer.weight` nor `blocks.0.mlp.fc1.weight`".into(),
            ));
        }
        let plans: Vec<_> = blocks
            .iter()
            .flat_map(|(a, b)| [a, b])
            .map(|l| (l.meta.format, choose(l.meta.format, &self.gpu.caps, ov)))
            .collect();
        // Which chain the plans reproduce: every integer layer as declared, all int8, or all int4.
        let acts: Vec<(Option<ActArith>, Option<ActArith>)> = plans
            .iter()
            .map(|(f, p)| {
                let act = match p.kernel {
                    KernelChoice::Integer { act, .. } => Some(act),
                    KernelChoice::Float => None,
                };
                let convrot = matches!(f, Format::ConvrotW4a4 { .. });
                (
                    if convrot { declared_act(*f) } else { None },
                    if convrot { act } else { None },
                )
            })
            .collect();
        let chain = if acts.iter().all(|(d, a)| d == a) {
            Some("expected")
        } else if acts
            .iter()
            .all(|(_, a)| a.is_none() || *a == Some(ActArith::Int8))
        {
            Some("expected_fallback_int8")
        } else if acts
            .iter()
            .all(|(_, a)| a.is_none() || *a == Some(ActArith::Int4))
        {
            Some("expected_eager_cpu")
        } else {
            None
        };
        let mut paths: Vec<String> = plans.iter().map(|(_, p)| path_name(p.kernel)).collect();
        paths.sort();
        paths.dedup();
        let path = paths.join(" + ");
        let reason = "per layer, see `dynvram probe`".to_owned();
        let mut reports = Vec::new();
        let input = f32s(self.tensor("input")?);
        let mut x_chain = input.clone();
        for (i, (fc1, fc2)) in blocks.iter().enumerate() {
            let golden_in = if i == 0 {
                input.clone()
            } else {
                f32s(self.tensor(&format!("debug.blocks.{}.out", i - 1))?)
            };
            let c1 = plans[2 * i].1.kernel;
            let c2 = plans[2 * i + 1].1.kernel;
            let y = self.block(fc1, fc2, c1, c2, &golden_in)?;
            // Per-block targets: the file's goldens belong to the `expected`
            // chain; for another chain the CPU reference of the same arithmetic.
            let (target, e) = if chain == Some("expected") {
                (
                    "debug.blocks.out".to_owned(),
                    f32s(self.tensor(&format!("debug.blocks.{i}.out"))?),
                )
            } else {
                (
                    "CPU reference".to_owned(),
                    self.cpu_block(fc1, fc2, c1, c2, &golden_in)?,
                )
            };
            reports.push(CaseReport {
                case: format!("{case}/block {i}"),
                path: format!("{} + {}", path_name(c1), path_name(c2)),
                target,
                skipped: None,
                comparison: Some(compare_abs(&y, &e, fc2.gpu.n as usize, STACK_BLOCK_REL)),
                reason: reason.clone(),
            });
            x_chain = self.block(fc1, fc2, c1, c2, &x_chain)?;
        }
        reports.push(match chain {
            Some(t) if self.st.data(t).is_some() => {
                let e = f32s(self.tensor(t)?);
                CaseReport {
                    case: format!("{case}/end-to-end"),
                    path,
                    target: t.into(),
                    skipped: None,
                    comparison: Some(compare_abs(
                        &x_chain,
                        &e,
                        blocks[0].1.gpu.n as usize,
                        STACK_END_REL,
                    )),
                    reason,
                }
            }
            _ => CaseReport {
                case: format!("{case}/end-to-end"),
                path,
                target: "-".into(),
                skipped: Some(
                    "the chosen paths mix int4 and int8 in a way no stored chain has".into(),
                ),
                comparison: None,
                reason,
            },
        });
        Ok(reports)
    }

    fn block(
        &mut self,
        fc1: &Layer<'_>,
        fc2: &Layer<'_>,
        c1: KernelChoice,
        c2: KernelChoice,
        x: &[f32],
    ) -> Result<Vec<f32>, ConformanceError> {
        let (h, _) = self.run(fc1, c1, x)?;
        let g: Vec<f32> = h.into_iter().map(gelu_tanh).collect();
        let (y, _) = self.run(fc2, c2, &g)?;
        Ok(x.iter().zip(&y).map(|(a, b)| a + b).collect())
    }

    fn cpu_block(
        &self,
        fc1: &Layer<'_>,
        fc2: &Layer<'_>,
        c1: KernelChoice,
        c2: KernelChoice,
        x: &[f32],
    ) -> Result<Vec<f32>, ConformanceError> {
        let run = |l: &Layer<'_>, c: KernelChoice, x: &[f32]| {
            let act = match (c, l.meta.format) {
                (KernelChoice::Integer { act, .. }, Format::ConvrotW4a4 { .. }) => Some(act),
                _ => None,
            };
            reference_linear(&l.meta, l.bytes, x, act)
                .map(|t| t.out)
                .map_err(|e| case_err(self.file, e.to_string()))
        };
        let h = run(fc1, c1, x)?;
        let g: Vec<f32> = h.into_iter().map(gelu_tanh).collect();
        let y = run(fc2, c2, &g)?;
        Ok(x.iter().zip(&y).map(|(a, b)| a + b).collect())
    }
}

/// Every element within `rel · max|e|` (the stack rule).
fn compare_abs(y: &[f32], e: &[f32], n: usize, rel: f32) -> Comparison {
    let mut c = compare(y, e, n, None);
    let scale = e.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    c.failures = y
        .iter()
        .zip(e)
        .filter(|(a, b)| {
            let d = (*a - *b).abs();
            d.is_nan() || d > rel * scale
        })
        .count()
        + usize::from(y.len() != e.len());
    c.tier2_rows = 0;
    c.pass = c.failures == 0;
    c
}

/// An `F32` tensor with `data` (`STORAGE | COPY_SRC | COPY_DST`).
pub fn upload_f32(
    gpu: &Gpu,
    label: &str,
    data: &[f32],
    shape: Vec<u64>,
) -> Result<GpuTensor, GpuError> {
    let buffer = gpu.create_buffer(
        label,
        (data.len() as u64 * 4).max(16),
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
    )?;
    gpu.queue
        .write_buffer(&buffer, 0, bytemuck::cast_slice(data));
    Ok(GpuTensor {
        buffer: std::sync::Arc::new(buffer),
        offset: 0,
        shape,
        dtype: ActDtype::F32,
    })
}
