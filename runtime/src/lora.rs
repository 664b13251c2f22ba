//! Live LoRA patches (docs/behaviour.md, LoRA): low-rank `A [r, K]`, `B [N, r]` and `alpha`
//! per linear layer, applied on the fly after the layer's own kernel:
//! `y += (alpha / r) · (x Aᵀ) Bᵀ`. Patches are uploaded once when attached,
//! counted as `patches` in the ledger, and never in `loaded_vram`.

use dynvram_memory::OwnerClass;
use dynvram_quant::{Format, KernelChoice};

use crate::error::{Result, RuntimeError};
use dynvram_gpu::accounting::{SharedBudget, TrackedBuffer};
use dynvram_gpu::device::Gpu;
use dynvram_gpu::ops::linear::{LinearWeights, Region, WeightPart};

/// One attached patch.
#[derive(Debug)]
pub(crate) struct LoraPatch {
    a: TrackedBuffer,
    b: TrackedBuffer,
    rank: u64,
    n: u64,
    k: u64,
    /// `alpha / rank` (the PEFT convention).
    pub scale: f32,
}

impl LoraPatch {
    fn f32_linear(buf: &TrackedBuffer, n: u64, k: u64) -> LinearWeights {
        LinearWeights {
            format: Format::F32,
            n,
            k,
            parts: [WeightPart {
                region: Region {
                    buffer: buf.buffer.clone(),
                    offset: 0,
                    size: n * k * 4,
                },
                rows: n,
            }]
            .into(),
            scale: None,
            bias: None,
        }
    }

    /// `A` as a linear `K → r`.
    pub fn down(&self) -> LinearWeights {
        Self::f32_linear(&self.a, self.rank, self.k)
    }

    /// `B` as a linear `r → N`.
    pub fn up(&self) -> LinearWeights {
        Self::f32_linear(&self.b, self.n, self.rank)
    }

    /// Rank.
    pub fn rank(&self) -> u64 {
        self.rank
    }

    /// The kernel of both low-rank products.
    pub fn kernel() -> KernelChoice {
        KernelChoice::Float
    }
}

impl LoraPatch {
    /// Checks the shapes against a layer `[n, k]` and uploads `a` (`[rank, K]`)
    /// and `b` (`[N, rank]`), row-major `f32`, as `patches` in the ledger.
    #[allow(clippy::too_many_arguments)]
    pub fn upload(
        gpu: &Gpu,
        budget: &SharedBudget,
        layer: &str,
        (n, k): (usize, usize),
        a: &[f32],
        b: &[f32],
        rank: usize,
        alpha: f32,
    ) -> Result<Self> {
        if rank == 0 || a.len() != rank * k || b.len() != n * rank {
            return Err(RuntimeError::Shape {
                op: format!("attach_lora({layer})"),
                detail: format!(
                    "rank {rank}, A has {} values (want rank·K = {}), B has {} (want N·rank = {})",
                    a.len(),
                    rank * k,
                    b.len(),
                    n * rank
                ),
            });
        }
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
        let upload = |name: &str, data: &[f32]| -> Result<TrackedBuffer> {
            let buf = TrackedBuffer::new(
                gpu,
                budget,
                OwnerClass::Patches,
                name,
                data.len() as u64 * 4,
                usage,
            )?;
            gpu.queue
                .write_buffer(&buf.buffer, 0, bytemuck::cast_slice(data));
            Ok(buf)
        };
        Ok(Self {
            a: upload(&format!("{layer}.lora_A"), a)?,
            b: upload(&format!("{layer}.lora_B"), b)?,
            rank: rank as u64,
            n: n as u64,
            k: k as u64,
            scale: alpha / rank as f32,
        })
    }
}
