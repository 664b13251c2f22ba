//! What the linear GPU tests share (`linear_random`, `f16_linear`,
//! `linear_folds`): the test GPU with its pipeline cache and scratch, and
//! the random layer (one generator, so all draw the same layers).
#![allow(dead_code)] // each test file uses a different subset

use dynvram_gpu::device::{AdapterChoice, SpreadQuant};
use dynvram_gpu::ops::cache::PipelineCache;
use dynvram_gpu::ops::linear::LinearScratch;
use dynvram_gpu::{ActDtype, Gpu};
use dynvram_quant::reference::LayerBytes;
use dynvram_quant::tensors::Dtype;
use dynvram_quant::{AdapterCaps, Format, QuantLayer};
use dynvram_test_support::gpu::test_gpu_with;
use rand::{Rng, RngCore};
use rand_chacha::ChaCha8Rng;

/// The test GPU with what recording linears needs.
pub struct Env {
    pub gpu: Gpu,
    pub cache: PipelineCache,
    pub scratch: LinearScratch,
}

/// The test GPU on an adapter `needs` accepts (None = skipped, reported).
/// The spread quantization is on (off by default), to be tested.
pub fn env(test: &str, needs: impl Fn(&AdapterCaps) -> Result<(), String>) -> Option<Env> {
    let mut choice = AdapterChoice::default();
    choice.options.spread_quant = SpreadQuant::InGemv;
    env_with(test, &choice, needs)
}

/// [`env`] on the adapter and with the device options of `choice`.
pub fn env_with(
    test: &str,
    choice: &AdapterChoice,
    needs: impl Fn(&AdapterCaps) -> Result<(), String>,
) -> Option<Env> {
    test_gpu_with(test, choice, needs).map(|gpu| Env {
        gpu,
        cache: PipelineCache::default(),
        scratch: LinearScratch::new(),
    })
}

impl Env {
    /// Scratch as a runtime's pass has it: tracked in a budget (64 GiB,
    /// nothing held back) with `room` bytes beyond the pass's plan
    /// (`LinearScratch::set_piece_room`), instead of the untracked default.
    pub fn track_scratch(&mut self, room: u64) {
        use dynvram_memory::{Budget, BudgetConfig, CapacitySource, GIB};
        let cfg = BudgetConfig {
            vram_budget: None,
            reserve: 0,
            headroom: 0,
        };
        let budget = Budget::new(64 * GIB, CapacitySource::Explicit, cfg).expect("budget");
        self.scratch = LinearScratch::tracked(std::sync::Arc::new(std::sync::Mutex::new(budget)));
        self.scratch.set_piece_room(room);
    }

    /// The `fast` variants of the integer kernels the adapter runs (the
    /// subgroup ones where it has subgroups).
    pub fn fast_variants(&self) -> Vec<bool> {
        if self.gpu.caps.subgroups {
            vec![false, true]
        } else {
            vec![false]
        }
    }

    /// The [`Self::fast_variants`] case `case` runs: one of them, rotating
    /// (all with `DYNVRAM_THOROUGH=1`; `dynvram_test_support::variants`).
    pub fn fast_variants_for(&self, case: usize) -> Vec<bool> {
        dynvram_test_support::variants::rotation(&self.fast_variants(), case, 1)
    }

    /// The activation dtypes the adapter runs: f32, and f16 with SHADER_F16.
    pub fn act_dtypes(&self) -> Vec<ActDtype> {
        let mut d = vec![ActDtype::F32];
        if self.gpu.caps.shader_f16 {
            d.push(ActDtype::F16);
        }
        d
    }

    /// The activation codes (in column order) and per-row scales the last
    /// integer linear of `format` over an `[m, k]` input left in the
    /// scratch.
    pub fn act_codes_and_scales(&self, format: Format, m: u64, k: u64) -> (Vec<i8>, Vec<f32>) {
        let words = self
            .gpu
            .read_back(self.scratch.act_codes().expect("codes"), 0, m * k)
            .expect("codes");
        let paired = matches!(format, Format::ConvrotW4a4 { .. }) && !self.scratch.last_used_coop();
        let mut codes = vec![0i8; (m * k) as usize];
        for (i, &b) in words.iter().enumerate() {
            let (row, within) = (i / k as usize, i % k as usize);
            let (word, byte) = (within / 4, within % 4);
            let col = if paired {
                (word / 2) * 8 + word % 2 + 2 * byte
            } else {
                within
            };
            codes[row * k as usize + col] = b as i8;
        }
        let scales = self
            .gpu
            .read_f32(self.scratch.act_scales().expect("scales"), 0, m)
            .expect("scales");
        (codes, scales)
    }
}

/// A random layer: weight bytes, f32 scale bytes, optional f32 bias bytes.
pub struct HostLayer {
    pub meta: QuantLayer,
    pub weight: Vec<u8>,
    pub scale: Vec<u8>,
    pub bias: Option<Vec<u8>>,
}

impl HostLayer {
    pub fn random(rng: &mut ChaCha8Rng, format: Format, n: usize, k: usize, bias: bool) -> Self {
        let mut weight = vec![0u8; n * k];
        rng.fill_bytes(&mut weight);
        let mut scales = |count: usize, lo: f32, hi: f32| -> Vec<f32> {
            (0..count).map(|_| rng.random_range(lo..hi)).collect()
        };
        let (weight, scale): (Vec<u8>, Vec<f32>) = match format {
            Format::ConvrotW4a4 { .. } => {
                weight.truncate(n * k / 2);
                (weight, scales(n, 0.001, 0.05))
            }
            Format::Int8Tensorwise { convrot_group } => {
                let count = if convrot_group.is_some() { n } else { 1 };
                (weight, scales(count, 0.001, 0.05))
            }
            Format::Float8E4m3fn | Format::Float8E5m2 => (
                weight.iter().map(|b| b & 0b1011_1111).collect(),
                scales(1, 0.01, 0.1),
            ),
            Format::F32 => {
                let w: Vec<f32> = (0..n * k).map(|_| rng.random_range(-1.0..1.0)).collect();
                (bytemuck::cast_slice(&w).to_vec(), vec![])
            }
            Format::F16 => {
                let w: Vec<half::f16> = (0..n * k)
                    .map(|_| half::f16::from_f32(rng.random_range(-1.0..1.0)))
                    .collect();
                (bytemuck::cast_slice(&w).to_vec(), vec![])
            }
            _ => {
                let w: Vec<half::bf16> = (0..n * k)
                    .map(|_| half::bf16::from_f32(rng.random_range(-1.0..1.0)))
                    .collect();
                (bytemuck::cast_slice(&w).to_vec(), vec![])
            }
        };
        let bias: Option<Vec<f32>> =
            bias.then(|| (0..n).map(|_| rng.random_range(-0.5..0.5)).collect());
        let meta = QuantLayer {
            name: format!("random.{format:?}"),
            format,
            n,
            k,
            weight: "w".into(),
            scale: (!scale.is_empty()).then(|| "s".into()),
            bias: bias.as_ref().map(|_| "b".into()),
            bias_dtype: bias.as_ref().map(|_| Dtype::F32),
            input_scale: None,
            has_bias: bias.is_some(),
            full_precision_matrix_mult: false,
            source: None,
        };
        Self {
            meta,
            weight,
            scale: bytemuck::cast_slice(&scale).to_vec(),
            bias: bias.map(|b| bytemuck::cast_slice(&b).to_vec()),
        }
    }

    pub fn bytes(&self) -> LayerBytes<'_> {
        LayerBytes {
            weight: &self.weight,
            scale: (!self.scale.is_empty()).then_some(&self.scale[..]),
            bias: self.bias.as_deref(),
        }
    }

    pub fn bias_f32(&self) -> Option<Vec<f32>> {
        self.bias.as_ref().map(|b| bytemuck::pod_collect_to_vec(b))
    }
}
