//! Shared helpers of the Llama tests: the tiny-llama folder, reference
//! tensors, runtimes at a budget, comparisons.

#![allow(dead_code)] // each test binary uses a subset

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use dynvram_models::llama::{Checkpoint, Limits, Llama};
use dynvram_runtime::memory::BudgetConfig;
use dynvram_runtime::{Model, Runtime, RuntimeConfig};

/// The golden tiny-llama checkpoint.
pub const TINY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/tiny-llama");

/// The tiny-llama fixture (part of the repository: missing files fail).
pub fn tiny_dir(test: &str) -> Option<PathBuf> {
    let dir = PathBuf::from(TINY);
    assert!(
        dir.join("model.safetensors").is_file() && dir.join("reference.safetensors").is_file(),
        "{test}: {TINY} has no model.safetensors/reference.safetensors (fixtures/ is part of the repository)"
    );
    Some(dir)
}

/// Whether a GPU adapter is there (prints `skipped: …` otherwise).
pub fn have_gpu(test: &str) -> bool {
    dynvram_runtime::gpu::testing::test_gpu(test, dynvram_runtime::gpu::testing::any_adapter)
        .is_some()
}

/// A tensor of a safetensors file as f32 (F32/F16/BF16) or as ids (I64).
#[derive(Debug, Clone)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
    pub ids: Vec<i64>,
}

/// Every tensor of a safetensors file.
pub fn read_safetensors(path: &Path) -> HashMap<String, Tensor> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
    st.tensors()
        .into_iter()
        .map(|(name, view)| {
            let data = view.data();
            let (values, ids) = match view.dtype() {
                safetensors::Dtype::F32 => (
                    data.chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                        .collect(),
                    vec![],
                ),
                safetensors::Dtype::F16 => (
                    data.chunks_exact(2)
                        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                        .collect(),
                    vec![],
                ),
                safetensors::Dtype::BF16 => (
                    data.chunks_exact(2)
                        .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                        .collect(),
                    vec![],
                ),
                safetensors::Dtype::I64 => (
                    vec![],
                    data.chunks_exact(8)
                        .map(|b| {
                            i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
                        })
                        .collect(),
                ),
                _ => (vec![], vec![]),
            };
            (
                name,
                Tensor {
                    shape: view.shape().to_vec(),
                    values,
                    ids,
                },
            )
        })
        .collect()
}

/// `name` of `m`, or a panic naming it.
pub fn get<'a>(m: &'a HashMap<String, Tensor>, name: &str) -> &'a Tensor {
    m.get(name)
        .unwrap_or_else(|| panic!("reference tensor `{name}` missing"))
}

/// Ids as u32.
pub fn ids(t: &Tensor) -> Vec<u32> {
    t.ids
        .iter()
        .map(|&i| u32::try_from(i).expect("id fits u32"))
        .collect()
}

/// Max |v|.
pub fn max_abs(v: &[f32]) -> f32 {
    v.iter().fold(0f32, |m, x| m.max(x.abs()))
}

/// Max |a − b| ≤ `rel` × max|b|, with a message naming `what`.
pub fn assert_close_rel(what: &str, got: &[f32], want: &[f32], rel: f32) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: {} values, expected {}",
        got.len(),
        want.len()
    );
    let err = got
        .iter()
        .zip(want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    let tol = rel * max_abs(want);
    assert!(
        err <= tol && got.iter().all(|v| v.is_finite()),
        "{what}: max abs error {err:.3e} > {tol:.3e} ({rel} × max|ref| {:.3e})",
        max_abs(want)
    );
    eprintln!("{what}: max abs error {err:.3e} (tolerance {tol:.3e})");
}

/// A runtime with an explicit VRAM capacity (or the adapter's when `None`).
pub fn runtime(vram_budget: Option<u64>) -> Runtime {
    let config = RuntimeConfig {
        budget: BudgetConfig {
            vram_budget,
            ..BudgetConfig::default()
        },
        ..RuntimeConfig::default()
    };
    Runtime::new(config).expect("runtime opens")
}

/// A capacity that keeps a quarter of the model's weights resident: the
/// reserve, the scratch, two arenas for the largest block, and
/// `model_bytes / 4` (the arenas alone exceed a quarter of a 4-layer model,
/// so they are added on top).
pub fn quarter_budget(ckpt: &Checkpoint, limits: Limits) -> u64 {
    let spec = ckpt.spec(limits);
    let (_, weights) = dynvram_runtime::plan_spec(&spec, u64::MAX).expect("plan");
    let model: u64 = weights.iter().map(|w| w.size).sum();
    let mut per_block = HashMap::new();
    for w in &weights {
        *per_block.entry(w.block).or_insert(0u64) += w.size.next_multiple_of(256);
    }
    let arena = per_block.values().copied().max().unwrap_or(0);
    BudgetConfig::default().reserve + spec.scratch_bytes + 2 * arena + model / 4
}

/// Opens the model and its runner.
pub fn open(rt: &Runtime, ckpt: &Checkpoint, limits: Limits) -> (Model, Llama) {
    let model = Model::open(rt, &ckpt.spec(limits)).expect("model opens");
    let llama = Llama::new(rt, ckpt, limits).expect("runner");
    (model, llama)
}

/// Cosine similarity.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb).max(1e-30)
}
