//! Residual MLP stacks: `x = x + fc2(gelu_tanh(fc1(x)))` per block, with the
//! linears named `blocks.{i}.mlp.fc1` / `blocks.{i}.mlp.fc2`.

pub mod builtin;
pub mod synth;

use std::path::{Path, PathBuf};

use dynvram_runtime::quant::{self, ActArith, KernelChoice, QuantLayer, TensorList};
use dynvram_runtime::{BlockSpec, FilesList, ModelSpec, RuntimeError};

use crate::block_index::block_index;

/// Errors of this architecture.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MlpError {
    /// The runtime failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The file is not an MLP stack.
    #[error("{file}: {why}")]
    Layout {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// A layer failed validation.
    #[error(transparent)]
    Quant(#[from] quant::LayoutError),
    /// A tensor could not be read (a file shrank or changed under us).
    #[error(transparent)]
    Load(#[from] dynvram_runtime::loader::LoadError),
    /// The CPU reference failed.
    #[error(transparent)]
    Reference(#[from] quant::ReferenceError),
}

/// Seed of a generated input.
pub const INPUT_SEED: u64 = 7;

/// `n` seeded standard-normal values (ChaCha8, reproducible across
/// platforms): generated inputs, and the built-in model's weights.
pub fn random_normal(n: usize, seed: u64) -> Vec<f32> {
    use rand::SeedableRng;
    use rand_distr::{Distribution, StandardNormal};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| StandardNormal.sample(&mut rng)).collect()
}

/// Layer names of block `i`.
pub fn layer_names(i: usize) -> [String; 2] {
    [format!("blocks.{i}.mlp.fc1"), format!("blocks.{i}.mlp.fc2")]
}

/// The structure found in a file: block count and widths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Number of blocks.
    pub blocks: usize,
    /// Residual width (fc1's K, fc2's N).
    pub hidden: usize,
    /// Inner width (fc1's N, fc2's K).
    pub ffn: usize,
}

/// Finds the blocks of an MLP stack in a tensor list and checks their shapes chain.
pub fn discover(
    file: &Path,
    list: &dyn TensorList,
) -> Result<(Shape, Vec<[QuantLayer; 2]>), MlpError> {
    let bad = |why: String| MlpError::Layout {
        file: file.to_owned(),
        why,
    };
    let mut layers = Vec::new();
    while list
        .dtype_shape(&format!("{}.weight", layer_names(layers.len())[0]))
        .is_some()
    {
        let [a, b] = layer_names(layers.len());
        layers.push([
            quant::validate_layer(list, &a)?,
            quant::validate_layer(list, &b)?,
        ]);
    }
    let Some([fc1, _]) = layers.first() else {
        return Err(bad(
            "no `blocks.0.mlp.fc1.weight`: not an MLP stack (blocks.{i}.mlp.fc1/fc2)".into(),
        ));
    };
    check_names(list, layers.len()).map_err(bad)?;
    let shape = Shape {
        blocks: layers.len(),
        hidden: fc1.k,
        ffn: fc1.n,
    };
    for (i, [fc1, fc2]) in layers.iter().enumerate() {
        if (fc1.k, fc1.n, fc2.k, fc2.n) != (shape.hidden, shape.ffn, shape.ffn, shape.hidden) {
            return Err(bad(format!(
                "block {i}: fc1 is [{}, {}] and fc2 [{}, {}] (N×K); expected fc1 [{f}, {h}] and fc2 [{h}, {f}]",
                fc1.n,
                fc1.k,
                fc2.n,
                fc2.k,
                f = shape.ffn,
                h = shape.hidden
            )));
        }
    }
    Ok((shape, layers))
}

/// Every tensor belongs to one of the `blocks` blocks found from 0 up, or is
/// the `input`, or a reference output the conformance goldens carry
/// (`expected`, `expected_*`, `debug.blocks.{i}.*` of an existing block): a
/// block index past them means a block is missing (blocks 0 and 2 without 1
/// ran as a one-block model), any other name is not ours.
fn check_names(list: &dyn TensorList, blocks: usize) -> Result<(), String> {
    let mut names = list.names();
    names.sort();
    for name in &names {
        if name == INPUT || name == GOLDEN || name.starts_with("expected_") {
            continue;
        }
        let index = match name.strip_prefix("debug.") {
            Some(debug) => block_index(debug, "blocks."),
            None => block_index(name, "blocks."),
        };
        match index {
            Some(i) if i < blocks => {}
            Some(i) => {
                return Err(format!(
                    "tensor `{name}` is in block {i}, but block {blocks} is missing (no `{}.weight`): blocks must run from 0 without a gap",
                    layer_names(blocks)[0]
                ));
            }
            None => {
                return Err(format!(
                    "unexpected tensor `{name}`: an MLP stack holds `blocks.{{i}}.mlp.fc1/fc2`, optionally `{INPUT}` [rows, hidden], and the goldens' references (`{GOLDEN}`, `expected_*`, `debug.blocks.{{i}}.*`)"
                ));
            }
        }
    }
    Ok(())
}

/// The optional input tensor of an MLP-stack file.
pub const INPUT: &str = "input";

/// The goldens' end-to-end output of the stack for `input`, computed with
/// each layer's stated activation arithmetic (conformance README §7).
pub const GOLDEN: &str = "expected";

/// The golden for int4-stated layers run with int8 activations (an adapter
/// or `--linear-dtype int8` that takes the fallback).
pub const GOLDEN_INT8: &str = "expected_fallback_int8";

/// The runtime spec of a stack: one block per MLP block, scratch for `rows` rows.
pub fn model_spec(file: &Path, shape: Shape, rows: usize) -> ModelSpec {
    let blocks = (0..shape.blocks)
        .map(|i| BlockSpec {
            name: format!("blocks.{i}"),
            linears: layer_names(i).to_vec(),
            ..BlockSpec::default()
        })
        .collect();
    ModelSpec {
        views: Default::default(),
        files: vec![file.to_owned()],
        blocks,
        scratch_bytes: scratch_bytes(shape, rows),
        scratch_wish: 0,
    }
}

/// Activation bytes a pass needs: x, y, the fc1 output, the linear kernels'
/// rotated/quantized input (at most the widest row, in f32), and the
/// per-block snapshots of `x` that verification reads; plus, past the
/// GEMVs' rows, a bf16 layer's converted piece (counted whatever the
/// formats: the stack's file is not read here).
pub fn scratch_bytes(shape: Shape, rows: usize) -> u64 {
    let row = (2 * shape.hidden + 3 * shape.ffn + shape.blocks * shape.hidden) as u64;
    let (h, f) = (shape.hidden as u64, shape.ffn as u64);
    let bf16 = crate::LinearNeeds::of_bf16_layers([(f, h), (h, f)]);
    (rows as u64) * row * 4 + bf16.converted_scratch_bytes(rows)
}

/// GELU, tanh approximation, in f32 as `F.gelu(approximate="tanh")`.
pub fn gelu_tanh(h: f32) -> f32 {
    let c = (2.0f32 / std::f32::consts::PI).sqrt();
    0.5 * h * (1.0 + (c * (h + 0.044715 * h * h * h)).tanh())
}

/// The activation arithmetic a kernel plan uses, for the CPU reference.
pub fn kernel_act(kernel: KernelChoice) -> Option<ActArith> {
    match kernel {
        KernelChoice::Integer { act, .. } => Some(act),
        KernelChoice::Float => None,
    }
}

/// The CPU reference of one block: `x + fc2(gelu_tanh(fc1(x)))` with the
/// given activation arithmetic per linear.
pub fn block_cpu(
    list: &FilesList<'_>,
    block: &[QuantLayer; 2],
    act: [Option<ActArith>; 2],
    x: &[f32],
) -> Result<Vec<f32>, MlpError> {
    let h = reference(list, &block[0], x, act[0])?;
    let g: Vec<f32> = h.into_iter().map(gelu_tanh).collect();
    let y = reference(list, &block[1], &g, act[1])?;
    Ok(x.iter().zip(y).map(|(a, b)| a + b).collect())
}

/// The CPU reference of a pass: the same arithmetic per layer as the GPU
/// (`acts[i]` = each layer's activation arithmetic, as the plan chose).
pub fn forward_cpu(
    list: &FilesList<'_>,
    layers: &[[QuantLayer; 2]],
    acts: &[[Option<ActArith>; 2]],
    x: &[f32],
) -> Result<Vec<f32>, MlpError> {
    let mut x = x.to_vec();
    for (block, act) in layers.iter().zip(acts) {
        x = block_cpu(list, block, *act, &x)?;
    }
    Ok(x)
}

fn reference(
    list: &FilesList<'_>,
    layer: &QuantLayer,
    x: &[f32],
    act: Option<ActArith>,
) -> Result<Vec<f32>, MlpError> {
    let get = |name: &Option<String>| name.as_deref().map(|n| list.read(n)).transpose();
    let weight = list.read(&layer.weight)?;
    let scale = get(&layer.scale)?;
    let bias = get(&layer.bias)?;
    let bytes = quant::LayerBytes {
        weight: &weight,
        scale: scale.as_deref(),
        bias: bias.as_deref(),
    };
    Ok(quant::reference_linear(layer, bytes, x, act)?.out)
}

/// Per-block tolerance, relative to max|block output|: the block is fed the
/// GPU's own input to it, so only that block's rounding and at most a few
/// flipped activation codes remain (conformance README §7, stacks).
pub const BLOCK_TOLERANCE: f32 = 5e-3;

/// End-to-end tolerance against the CPU reference, relative to max|reference|.
/// The arithmetic is the same; what remains is f32 summation order (≈1e-7)
/// and, rarely, an activation code on the other side of a rounding boundary
/// (conformance README §7: one int4 flip moves an output by ≤ 3e-2·max, one
/// int8 flip by ≤ 2.2e-3·max, and later blocks amplify it).
pub const TOLERANCE: f32 = 5e-2;

/// An MLP-stack file, opened without a GPU.
#[derive(Debug)]
pub struct Probe {
    path: PathBuf,
    files: dynvram_runtime::loader::ModelFiles,
    shape: Shape,
    layers: Vec<[QuantLayer; 2]>,
    /// The file's `input` tensor, checked.
    input: Option<Vec<f32>>,
}

/// A check of a GPU pass against the file's own golden output.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GoldenCheck {
    /// The golden tensor compared with (`expected` or `expected_fallback_int8`).
    pub tensor: String,
    /// Max abs error against it relative to its max |value|.
    pub rel: f32,
}

impl Probe {
    /// Opens and validates the file's structure.
    pub fn open(path: &Path) -> Result<Self, MlpError> {
        let files =
            dynvram_runtime::loader::ModelFiles::from_files([path]).map_err(RuntimeError::from)?;
        let list = FilesList::new(&files);
        let (shape, layers) = discover(path, &list)?;
        let input = read_input(path, &list, shape)?;
        Ok(Self {
            path: path.to_owned(),
            files,
            shape,
            layers,
            input,
        })
    }

    /// The structure.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Bytes of every tensor the layers use, as stored.
    pub fn weight_bytes(&self) -> u64 {
        self.layers
            .iter()
            .flatten()
            .flat_map(|l| {
                [
                    Some(&l.weight),
                    l.scale.as_ref(),
                    l.bias.as_ref(),
                    l.input_scale.as_ref(),
                ]
            })
            .flatten()
            .filter_map(|n| self.files.info(n).map(|t| t.len()))
            .sum()
    }

    /// Input rows: the file's `input` tensor's, else `default`.
    pub fn rows(&self, default: usize) -> usize {
        self.input
            .as_ref()
            .map_or(default, |x| x.len() / self.shape.hidden)
    }

    /// The file's `input` tensor, else seeded N(0,1)-like values.
    pub fn input(&self, rows: usize) -> Vec<f32> {
        self.input
            .clone()
            .unwrap_or_else(|| random_normal(rows * self.shape.hidden, INPUT_SEED))
    }

    /// The runtime spec.
    pub fn spec(&self, rows: usize) -> ModelSpec {
        model_spec(&self.path, self.shape, rows)
    }

    fn acts(&self, model: &dynvram_runtime::Model) -> Vec<[Option<ActArith>; 2]> {
        (0..self.shape.blocks)
            .map(|i| {
                layer_names(i).map(|l| model.kernel_path(&l).and_then(|p| kernel_act(p.kernel)))
            })
            .collect()
    }

    /// The CPU reference with the activation arithmetic the model's plan chose per layer.
    pub fn reference(
        &self,
        model: &dynvram_runtime::Model,
        x: &[f32],
    ) -> Result<Vec<f32>, MlpError> {
        forward_cpu(
            &FilesList::new(&self.files),
            &self.layers,
            &self.acts(model),
            x,
        )
    }

    /// The golden that applies to the arithmetic `acts` chose, if the file
    /// has one: `expected` where every layer runs as the file states,
    /// `expected_fallback_int8` where every int4-stated layer runs int8.
    fn golden_name(&self, acts: &[[Option<ActArith>; 2]]) -> Option<&'static str> {
        let mut as_stated = true;
        let mut all_int8 = true;
        for (block, act) in self.layers.iter().zip(acts) {
            for (layer, act) in block.iter().zip(act) {
                let stated = match layer.format {
                    quant::Format::ConvrotW4a4 { linear_dtype, .. } => Some(match linear_dtype {
                        quant::LinearDtype::Int4 => ActArith::Int4,
                        quant::LinearDtype::Int8 => ActArith::Int8,
                    }),
                    _ => *act,
                };
                as_stated &= stated == *act;
                all_int8 &= stated != Some(ActArith::Int4) || *act == Some(ActArith::Int8);
            }
        }
        let list = FilesList::new(&self.files);
        let has = |n: &str| list.dtype_shape(n).is_some();
        if as_stated && has(GOLDEN) {
            Some(GOLDEN)
        } else if all_int8 && has(GOLDEN_INT8) {
            Some(GOLDEN_INT8)
        } else {
            None
        }
    }

    /// Checks a GPU pass: each block against the CPU reference fed the GPU's
    /// own input to that block, the output end to end, and, for a file with
    /// its input and golden output (the conformance goldens), the output
    /// against that golden within [`TOLERANCE`].
    pub fn verify(
        &self,
        model: &dynvram_runtime::Model,
        x: &[f32],
        gpu: &GpuForward,
    ) -> Result<Verification, MlpError> {
        let list = FilesList::new(&self.files);
        let acts = self.acts(model);
        let mut worst_block = (0usize, 0f32);
        for (i, out) in gpu.block_outputs.iter().enumerate() {
            let input = if i == 0 { x } else { &gpu.block_outputs[i - 1] };
            let cpu = block_cpu(&list, &self.layers[i], acts[i], input)?;
            let rel = max_abs_diff(out, &cpu) / max_abs(&cpu).max(f32::MIN_POSITIVE);
            if rel > worst_block.1 || !rel.is_finite() {
                worst_block = (i, rel);
            }
        }
        let reference = forward_cpu(&list, &self.layers, &acts, x)?;
        let max_reference = max_abs(&reference);
        let max_error = max_abs_diff(&gpu.out, &reference);
        let end_rel = max_error / max_reference.max(f32::MIN_POSITIVE);
        let golden = match (self.input.is_some(), self.golden_name(&acts)) {
            (true, Some(name)) => {
                let want = read_matrix(&self.path, &list, name, self.shape)?.unwrap_or_default();
                let rel = if want.len() == gpu.out.len() {
                    max_abs_diff(&gpu.out, &want) / max_abs(&want).max(f32::MIN_POSITIVE)
                } else {
                    f32::NAN
                };
                Some(GoldenCheck {
                    tensor: name.to_owned(),
                    rel,
                })
            }
            _ => None,
        };
        let golden_ok = golden.as_ref().is_none_or(|g| g.rel <= TOLERANCE);
        Ok(Verification {
            worst_block: worst_block.0,
            worst_block_rel: worst_block.1,
            max_error,
            max_reference,
            end_to_end_rel: end_rel,
            golden,
            pass: worst_block.1 <= BLOCK_TOLERANCE
                && end_rel <= TOLERANCE
                && golden_ok
                && all_finite(&gpu.out)
                && gpu.block_outputs.iter().all(|b| all_finite(b))
                && all_finite(&reference),
        })
    }
}

/// The file's `input` tensor as `f32`: it must be a float [rows, hidden]
/// matrix; any other is an error (it was silently replaced by random rows).
fn read_input(
    file: &Path,
    list: &FilesList<'_>,
    shape: Shape,
) -> Result<Option<Vec<f32>>, MlpError> {
    read_matrix(file, list, INPUT, shape)
}

/// Tensor `name` as `f32`, a finite float [rows, hidden] matrix, if present.
fn read_matrix(
    file: &Path,
    list: &FilesList<'_>,
    name: &str,
    shape: Shape,
) -> Result<Option<Vec<f32>>, MlpError> {
    let Some((dtype, dims)) = list.dtype_shape(name) else {
        return Ok(None);
    };
    let bad = |why: String| MlpError::Layout {
        file: file.to_owned(),
        why: format!("tensor `{name}` {dtype:?} {dims:?}: {why}"),
    };
    if dims.len() != 2 || dims[0] == 0 || dims[1] != shape.hidden {
        return Err(bad(format!(
            "expected [rows >= 1, {}] (rows × the stack's hidden width)",
            shape.hidden
        )));
    }
    let bytes = list.read(name)?;
    let x = quant::tensors::floats_to_f32(dtype, &bytes)
        .ok_or_else(|| bad("expected F32, F16 or BF16".into()))?;
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        return Err(bad(format!("element {i} is {}", x[i])));
    }
    Ok(Some(x))
}

/// The result of a verification of a GPU pass.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Verification {
    /// The block with the largest relative error.
    pub worst_block: usize,
    /// Its max abs error relative to max|its CPU output|.
    pub worst_block_rel: f32,
    /// End to end: max abs error.
    pub max_error: f32,
    /// End to end: max |reference|.
    pub max_reference: f32,
    /// End to end: `max_error / max_reference`.
    pub end_to_end_rel: f32,
    /// Against the file's golden output, where it has one that applies.
    pub golden: Option<GoldenCheck>,
    /// Within [`BLOCK_TOLERANCE`] per block and [`TOLERANCE`] end to end
    /// (and against the golden).
    pub pass: bool,
}

fn all_finite(v: &[f32]) -> bool {
    v.iter().all(|x| x.is_finite())
}

fn max_abs(v: &[f32]) -> f32 {
    v.iter().fold(0f32, |m, x| m.max(x.abs()))
}

/// The largest |a − b|; NaN where any difference is NaN (`f32::max` would
/// drop a NaN met before the last element, and a NaN weight scale passed).
fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0f32, |m, (x, y)| {
        if m.is_nan() || (x - y).is_nan() {
            f32::NAN
        } else {
            m.max((x - y).abs())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::max_abs_diff;

    #[test]
    fn a_nan_anywhere_makes_the_difference_nan() {
        assert_eq!(max_abs_diff(&[1.0, 2.0], &[1.5, 2.0]), 0.5);
        assert!(max_abs_diff(&[f32::NAN, 2.0, 3.0], &[1.0, 2.0, 3.0]).is_nan());
        assert!(max_abs_diff(&[1.0, 2.0], &[1.0, f32::NAN]).is_nan());
        // inf − inf, as a NaN scale times zero codes gives on both sides.
        assert!(max_abs_diff(&[f32::INFINITY, 0.0], &[f32::INFINITY, 0.0]).is_nan());
    }
}

/// What a GPU pass produced.
#[derive(Debug, Clone)]
pub struct GpuForward {
    /// The output rows.
    pub out: Vec<f32>,
    /// `x` after each block (copied out during the pass).
    pub block_outputs: Vec<Vec<f32>>,
    /// Pass figures.
    pub stats: dynvram_runtime::PassStats,
}

/// Runs one pass on the GPU; after each block `x` is copied to a snapshot
/// buffer so every block can be checked on its own.
pub fn forward_gpu(
    rt: &dynvram_runtime::Runtime,
    model: &dynvram_runtime::Model,
    x: &[f32],
    rows: usize,
    trace: Option<&mut dynvram_runtime::trace::Trace>,
) -> Result<GpuForward, MlpError> {
    let hidden = x.len() / rows.max(1);
    let ffn = model.linear_layer(&layer_names(0)[0]).map_or(0, |l| l.n);
    let xs = rt.activation("x", &[rows, hidden])?;
    rt.write_f32(&xs, x)?;
    let h = rt.activation("h", &[rows, ffn])?;
    let y = rt.activation("y", &[rows, hidden])?;
    let blocks = model.block_count();
    let snaps = rt.activation("block outputs", &[blocks.max(1), rows, hidden])?;
    let row_bytes = xs.bytes();
    let stats = model.run_pass(rt, trace, |ctx| {
        let i = ctx.index();
        let [fc1, fc2] = layer_names(i);
        ctx.linear_gelu(&fc1, &xs, &h)?;
        ctx.linear(&fc2, &h, &y)?;
        ctx.add_assign(&xs, &y)?;
        ctx.encoder().commands().copy_buffer_to_buffer(
            &xs.buffer,
            xs.offset,
            &snaps.buffer,
            i as u64 * row_bytes,
            row_bytes,
        );
        Ok(())
    })?;
    let all = rt.read_f32(&snaps)?;
    let per = rows * hidden;
    Ok(GpuForward {
        out: rt.read_f32(&xs)?,
        block_outputs: all.chunks(per).take(blocks).map(<[f32]>::to_vec).collect(),
        stats,
    })
}
