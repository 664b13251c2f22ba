//! The scratch a pass's linear layers hold besides the activations, which
//! the plan reserves with them (`ModelSpec::scratch_bytes`).

use dynvram_runtime::BlockSpec;
use dynvram_runtime::device::BF16_LONG_ROWS;
use dynvram_runtime::ops::linear::{GEMV_MAX_M, bf16_piece_bytes, integer_scratch_bytes};
use dynvram_runtime::quant::{self, Format, TensorList};

/// What a model's linears need in scratch: the rotated and quantized input
/// of the widest layer that quantizes its activations, and the converted
/// piece of the largest bf16 layer (the SPIR-V GEMM takes bf16 weights
/// converted to f16 a piece at a time; where the plan left no room for it,
/// a later planned allocation would fail).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinearNeeds {
    /// Input width of the widest layer that quantizes its activations (0
    /// where none does).
    pub integer_k: usize,
    /// Scratch bytes of the largest bf16 layer's converted piece for
    /// inputs of fewer than `BF16_LONG_ROWS` rows, and for longer ones (0
    /// where there is no bf16 layer). Counted for every bf16 layer, those
    /// that only ever see a GEMV's few rows (modulations) too: at most one
    /// piece more than a pass takes.
    pub bf16_piece: [u64; 2],
}

impl LinearNeeds {
    /// The needs of every linear of `blocks` in `list` (layers that fail
    /// validation are the pass's error to report, not this estimate's).
    pub fn of(list: &dyn TensorList, blocks: &[BlockSpec]) -> Self {
        let layers: Vec<_> = blocks
            .iter()
            .flat_map(|b| &b.linears)
            .filter_map(|l| quant::validate_layer(list, l).ok())
            .collect();
        let integer_k = layers
            .iter()
            .filter(|l| l.format.quantizes_activations())
            .map(|l| l.k)
            .max()
            .unwrap_or(0);
        let bf16 = layers
            .iter()
            .filter(|l| l.format == Format::Bf16)
            .map(|l| (l.n as u64, l.k as u64));
        Self {
            integer_k,
            ..Self::of_bf16_layers(bf16)
        }
    }

    /// The needs of bf16 layers of these (n, k) alone.
    pub fn of_bf16_layers(layers: impl IntoIterator<Item = (u64, u64)>) -> Self {
        let mut bf16_piece = [0; 2];
        for (n, k) in layers {
            bf16_piece[0] = bf16_piece[0].max(bf16_piece_bytes(n, k, GEMV_MAX_M + 1));
            bf16_piece[1] = bf16_piece[1].max(bf16_piece_bytes(n, k, BF16_LONG_ROWS));
        }
        Self {
            integer_k: 0,
            bf16_piece,
        }
    }

    /// Scratch bytes for inputs of `rows` rows: the integer kernels' for
    /// one chunk of rows of the widest such layer, and past the GEMVs'
    /// rows the bf16 piece.
    pub fn scratch_bytes(&self, rows: usize) -> u64 {
        let integer = if self.integer_k == 0 {
            0
        } else {
            integer_scratch_bytes(rows as u64, self.integer_k as u64)
        };
        integer + self.bf16_scratch_bytes(rows)
    }

    /// The bf16 piece where inputs of `rows` rows take a GEMM, else 0.
    pub fn bf16_scratch_bytes(&self, rows: usize) -> u64 {
        let rows = rows as u64;
        if rows <= GEMV_MAX_M {
            0
        } else {
            self.bf16_piece[usize::from(rows >= BF16_LONG_ROWS)]
        }
    }
}
