//! The scratch a pass's linear layers hold besides the activations, which
//! the plan reserves with them (`ModelSpec::scratch_bytes`).

use dynvram_runtime::BlockSpec;
use dynvram_runtime::device::CONVERTED_LONG_ROWS;
use dynvram_runtime::ops::linear::{
    GEMV_MAX_M, converted_layer_bytes, converted_piece_bytes, integer_scratch_bytes,
};
use dynvram_runtime::quant::{self, Format, TensorList};

/// What a model's linears need in scratch: the rotated and quantized input
/// of the widest layer that quantizes its activations, and the converted
/// piece of the largest bf16 or int4 layer (the SPIR-V GEMMs take bf16
/// weights converted to f16 and int4 weights widened to int8 a piece at a
/// time; where the plan left no room for it, a later planned allocation
/// would fail).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinearNeeds {
    /// Input width of the widest layer that quantizes its activations (0
    /// where none does).
    pub integer_k: usize,
    /// Scratch bytes of the largest converted piece (a bf16 layer's as
    /// f16, an int4 layer's as int8) for inputs of fewer than
    /// `CONVERTED_LONG_ROWS` rows, and for longer ones (0 where no layer
    /// converts). Counted for every such layer, those that only ever see a
    /// GEMV's few rows (modulations) too: at most one piece more than a
    /// pass takes.
    pub converted_piece: [u64; 2],
    /// Scratch bytes of the largest converted layer whole.
    pub converted_whole: u64,
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
        // Bytes a converted weight takes: bf16 as f16, int4 as int8.
        let converted = layers.iter().filter_map(|l| {
            let bytes = match l.format {
                Format::Bf16 => 2,
                Format::ConvrotW4a4 { .. } => 1,
                _ => return None,
            };
            Some((l.n as u64, l.k as u64, bytes))
        });
        Self {
            integer_k,
            ..Self::of_converted_layers(converted)
        }
    }

    /// The needs of bf16 layers of these (n, k) alone.
    pub fn of_bf16_layers(layers: impl IntoIterator<Item = (u64, u64)>) -> Self {
        Self::of_converted_layers(layers.into_iter().map(|(n, k)| (n, k, 2)))
    }

    /// The needs of converted layers of these (n, k, bytes a converted
    /// weight) alone.
    fn of_converted_layers(layers: impl IntoIterator<Item = (u64, u64, u64)>) -> Self {
        let mut piece = [0; 2];
        let mut whole = 0;
        for (n, k, b) in layers {
            piece[0] = piece[0].max(converted_piece_bytes(n, k, GEMV_MAX_M + 1, b));
            piece[1] = piece[1].max(converted_piece_bytes(n, k, CONVERTED_LONG_ROWS, b));
            whole = whole.max(converted_layer_bytes(n, k, b));
        }
        Self {
            integer_k: 0,
            converted_piece: piece,
            converted_whole: whole,
        }
    }

    /// Scratch bytes for inputs of `rows` rows: the integer kernels' for
    /// one chunk of rows of the widest such layer, and past the GEMVs'
    /// rows the converted piece.
    pub fn scratch_bytes(&self, rows: usize) -> u64 {
        let integer = if self.integer_k == 0 {
            0
        } else {
            integer_scratch_bytes(rows as u64, self.integer_k as u64)
        };
        integer + self.converted_scratch_bytes(rows)
    }

    /// Scratch a pass over inputs of `rows` rows would use beyond
    /// [`Self::scratch_bytes`] where the budget has room
    /// (`ModelSpec::scratch_wish`): its largest converted layer whole, so
    /// that every converted layer is one GEMM, where they take GEMMs.
    pub fn scratch_wish(&self, rows: usize) -> u64 {
        if rows as u64 <= GEMV_MAX_M {
            0
        } else {
            self.converted_whole
        }
    }

    /// The converted piece where inputs of `rows` rows take a GEMM, else 0.
    pub fn converted_scratch_bytes(&self, rows: usize) -> u64 {
        let rows = rows as u64;
        if rows <= GEMV_MAX_M {
            0
        } else {
            self.converted_piece[usize::from(rows >= CONVERTED_LONG_ROWS)]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int4_layers_count_their_widened_piece() {
        // FLUX.1's widest int4 layer as int8 (a byte a weight): one 63 MiB
        // piece for short inputs, under half of 64 MiB for long ones.
        let int4 = LinearNeeds::of_converted_layers([(21504, 3072, 1)]);
        assert_eq!(int4.converted_piece[0], 21504 * 3072);
        assert!(int4.converted_piece[1] <= 32 << 20, "{int4:?}");
        // The largest piece of any layer, bf16 or int4.
        let both = LinearNeeds::of_converted_layers([(3072, 3072, 2), (21504, 3072, 1)]);
        assert_eq!(both.converted_piece, int4.converted_piece);
        let bf16 = LinearNeeds::of_bf16_layers([(3072, 3072)]);
        assert_eq!(bf16.converted_piece[0], 3072 * 3072 * 2);
        assert_eq!(bf16.integer_k, 0);
    }
}
