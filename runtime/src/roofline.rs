//! A pass's predicted time from sizes and FLOPs alone (`dynvram plan`, no
//! GPU). Each block takes the longest of three times: its matrix and
//! attention FLOPs at the matrix rate, its weights read at the memory rate,
//! and its streamed weights moved over PCIe (uploads overlap the work of
//! the block before, so per block the slower of the two sets the pace). A
//! pass takes the sum; launch costs and activations' traffic are not
//! counted, so it is a bound on speed, not a measurement.

use serde::Serialize;

use crate::planning::PlanWeight;

/// The rates a prediction assumes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rates {
    /// Host-to-GPU bytes per second for streamed weights.
    pub pcie_bytes_per_second: f64,
    /// VRAM bytes per second for reading weights.
    pub memory_bytes_per_second: f64,
    /// Matrix FLOPs per second (GEMMs and attention).
    pub matrix_flops_per_second: f64,
}

/// What one block of a pass does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BlockWork {
    /// Bytes of its weights (resident and streamed), read once a pass.
    pub weight_bytes: u64,
    /// Bytes of its weights moved host → GPU each pass.
    pub streamed_bytes: u64,
    /// Its matrix-multiply and attention FLOPs.
    pub flops: u64,
}

/// Which rate limits a block (or most of a pass).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// FLOPs at the matrix rate.
    Compute,
    /// Weight reads at the memory rate.
    Memory,
    /// Streamed weights over PCIe.
    Pcie,
}

impl Bound {
    /// As reports print it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Compute => "compute",
            Self::Memory => "memory",
            Self::Pcie => "pcie",
        }
    }
}

/// Each block's weight bytes, streamed bytes and FLOPs in a model's plan
/// of `blocks` blocks: `weights` as the plan sized them, `streamed(i)`
/// whether weight `i` streams, `flops` per block where counted.
pub fn block_work(
    blocks: usize,
    weights: &[PlanWeight],
    streamed: impl Fn(usize) -> bool,
    flops: Option<&[u64]>,
) -> Vec<BlockWork> {
    let mut work: Vec<BlockWork> = (0..blocks)
        .map(|b| BlockWork {
            flops: flops.and_then(|f| f.get(b)).copied().unwrap_or(0),
            ..BlockWork::default()
        })
        .collect();
    for (i, w) in weights.iter().enumerate() {
        let b = &mut work[w.block];
        b.weight_bytes += w.size;
        if streamed(i) {
            b.streamed_bytes += w.size;
        }
    }
    work
}

/// One block's three times.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BlockTime {
    /// FLOPs ÷ matrix rate.
    pub compute_seconds: f64,
    /// Weight bytes ÷ memory rate.
    pub memory_seconds: f64,
    /// Streamed bytes ÷ PCIe rate.
    pub transfer_seconds: f64,
}

impl BlockTime {
    /// `work` at `rates`.
    pub fn of(work: &BlockWork, rates: &Rates) -> Self {
        Self {
            compute_seconds: work.flops as f64 / rates.matrix_flops_per_second,
            memory_seconds: work.weight_bytes as f64 / rates.memory_bytes_per_second,
            transfer_seconds: work.streamed_bytes as f64 / rates.pcie_bytes_per_second,
        }
    }

    /// The longest of the three.
    pub fn seconds(&self) -> f64 {
        self.compute_seconds
            .max(self.memory_seconds)
            .max(self.transfer_seconds)
    }

    /// Which of the three is the longest (compute first on ties).
    pub fn bound(&self) -> Bound {
        let s = self.seconds();
        if self.compute_seconds == s {
            Bound::Compute
        } else if self.memory_seconds == s {
            Bound::Memory
        } else {
            Bound::Pcie
        }
    }
}

/// A pass's prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// Seconds a pass takes at least: the sum of each block's longest time.
    pub seconds: f64,
    /// FLOPs of the pass.
    pub flops: u64,
    /// All FLOPs at the matrix rate.
    pub compute_seconds: f64,
    /// All weight bytes at the memory rate.
    pub memory_seconds: f64,
    /// All streamed bytes at the PCIe rate.
    pub transfer_seconds: f64,
    /// Seconds of the pass spent in blocks bound by compute, memory, PCIe.
    pub seconds_by_bound: [f64; 3],
    /// The rate that limits most of the pass.
    pub bound: Bound,
}

impl Prediction {
    /// Passes per second (0 for an empty pass).
    pub fn per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            1.0 / self.seconds
        } else {
            0.0
        }
    }
}

/// Predicts a pass over `blocks` at `rates`.
pub fn predict(blocks: &[BlockWork], rates: &Rates) -> Prediction {
    let mut by_bound = [0.0f64; 3];
    let (mut compute, mut memory, mut transfer, mut flops) = (0.0, 0.0, 0.0, 0u64);
    for b in blocks {
        let t = BlockTime::of(b, rates);
        by_bound[t.bound() as usize] += t.seconds();
        compute += t.compute_seconds;
        memory += t.memory_seconds;
        transfer += t.transfer_seconds;
        flops = flops.saturating_add(b.flops);
    }
    let most = (0..3)
        .max_by(|&a, &b| by_bound[a].total_cmp(&by_bound[b]))
        .unwrap_or(0);
    Prediction {
        seconds: by_bound.iter().sum(),
        flops,
        compute_seconds: compute,
        memory_seconds: memory,
        transfer_seconds: transfer,
        seconds_by_bound: by_bound,
        bound: [Bound::Compute, Bound::Memory, Bound::Pcie][most],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATES: Rates = Rates {
        pcie_bytes_per_second: 10.0,
        memory_bytes_per_second: 100.0,
        matrix_flops_per_second: 1000.0,
    };

    #[test]
    fn each_block_takes_its_longest_time() {
        let blocks = [
            // 2 s of compute, 1 s of reads, nothing streamed.
            BlockWork {
                weight_bytes: 100,
                streamed_bytes: 0,
                flops: 2000,
            },
            // 5 s over PCIe beside 1 s of compute.
            BlockWork {
                weight_bytes: 50,
                streamed_bytes: 50,
                flops: 1000,
            },
            // 3 s of reads.
            BlockWork {
                weight_bytes: 300,
                streamed_bytes: 0,
                flops: 0,
            },
        ];
        let p = predict(&blocks, &RATES);
        assert_eq!(p.seconds, 10.0);
        assert_eq!(p.seconds_by_bound, [2.0, 3.0, 5.0]);
        assert_eq!(p.bound, Bound::Pcie);
        assert_eq!(
            (p.compute_seconds, p.memory_seconds, p.transfer_seconds),
            (3.0, 4.5, 5.0)
        );
        assert_eq!(p.flops, 3000);
        // Totals alone (max of the three sums) would say 5 s: each block
        // waits for its slowest part, so the pass is slower than that.
        assert!(
            p.seconds
                > p.transfer_seconds
                    .max(p.memory_seconds)
                    .max(p.compute_seconds)
        );
        assert_eq!(predict(&[], &RATES).per_second(), 0.0);
    }
}
