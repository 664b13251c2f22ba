//! Weights converted for a SPIR-V GEMM a piece at a time: bf16 → f16 for
//! the f16 kernels (`Cm2Bf16::ViaF16`), int4 → int8 for the int8 kernels
//! (`Cm2Int4::ViaInt8`). A piece is whole weight rows in one scratch buffer
//! (`LinearScratch::converted_weights`), converted by one launch and then
//! multiplied; the conversions give the values the staged kernels make in
//! shared memory, so the products are the same.

use dynvram_shaders::linear as shaders;

use super::recorder::{Chunk, Recorder, buf};
use crate::ops::encoder::Encoder;
use crate::ops::launch::Cost;
use crate::ops::linear::{LinearError, LinearScratch};

/// A conversion of stored weights for a kernel of another type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Widen {
    /// bf16 to f16 (`bf16_to_f16.wgsl`), through f32 as the bf16 kernels do.
    Bf16ToF16,
    /// int4 nibbles to int8 (`int4_to_int8.wgsl`), sign-extended as the
    /// int4 kernels do.
    Int4ToInt8,
}

impl Widen {
    /// Bytes of one converted weight.
    pub(super) const fn bytes(self) -> u64 {
        match self {
            Self::Bf16ToF16 => 2,
            Self::Int4ToInt8 => 1,
        }
    }

    /// Stored weights in one word of the source.
    const fn per_word(self) -> u64 {
        match self {
            Self::Bf16ToF16 => 2,
            Self::Int4ToInt8 => 8,
        }
    }

    /// The launch's label and shader.
    const fn shader(self) -> (&'static str, &'static str) {
        match self {
            Self::Bf16ToF16 => ("bf16_to_f16", shaders::BF16_TO_F16),
            Self::Int4ToInt8 => ("int4_to_int8", shaders::INT4_TO_INT8),
        }
    }
}

/// `bf16_to_f16.wgsl`'s and `int4_to_int8.wgsl`'s `Params`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ConvertParams {
    words: u32,
    src_word0: u32,
    _pad: [u32; 2],
}

/// Workgroups of one conversion at most (it loops over the rest).
const CONVERT_GROUPS: u64 = 4096;

/// Bytes of scratch a layer of `n` × `k` weights can hold when it takes a
/// SPIR-V GEMM converted a piece at a time to `weight_bytes` a weight, for
/// inputs of `m` rows: one piece of the default size for `m`
/// (`converted_piece_limit`) at either tile width, as the scratch buffer grows
/// to hold it. A planner counts the largest over a model's converted
/// layers that see more than `GEMV_MAX_M` rows.
pub fn converted_piece_bytes(n: u64, k: u64, m: u64, weight_bytes: u64) -> u64 {
    if n == 0 || k == 0 {
        return 0;
    }
    let limit = crate::device::converted_piece_limit(m);
    let row = k * weight_bytes;
    let piece = [128, 256]
        .into_iter()
        .map(|tile| piece_rows(limit, row, n, tile) * row)
        .max()
        .unwrap_or(0);
    super::super::scratch::scratch_capacity_bound(piece)
}

/// Bytes of scratch a layer of `n` × `k` weights takes converted whole to
/// `weight_bytes` a weight: what a pass with that much room
/// (`LinearScratch::set_piece_room`) multiplies in one GEMM.
pub fn converted_layer_bytes(n: u64, k: u64, weight_bytes: u64) -> u64 {
    super::super::scratch::scratch_capacity_bound(n * k * weight_bytes)
}

/// Weight rows of one piece of at most `bytes` for a layer of `n` rows of
/// `row` bytes converted: all of them where they fit, else as many as fit
/// in whole tiles of `tile_n` rows (at least one tile).
pub(super) fn piece_rows(bytes: u64, row: u64, n: u64, tile_n: u64) -> u64 {
    let fit = bytes / row.max(1);
    if fit >= n {
        return n.max(1);
    }
    (fit / tile_n).max(1) * tile_n
}

/// A chunk of `rows` weight rows as pieces of at most `per` rows, as
/// (first row, rows), of equal size but the last.
fn pieces(rows: u64, per: u64) -> impl Iterator<Item = (u64, u64)> {
    (0..rows.div_ceil(per)).map(move |i| (i * per, per.min(rows - i * per)))
}

impl Recorder<'_> {
    /// Records `each` over every piece of the layer's weights converted by
    /// `widen` into the scratch, pieces of whole rows of at most
    /// `piece_bytes` in whole `tile_n` tiles: one conversion launch a
    /// piece, none where the scratch holds that piece of this layer already
    /// (the row chunks of one integer layer, when the layer is one piece;
    /// `LinearScratch::forget_converted` at each layer's start). Rows
    /// start on a source word: K is a multiple of the weights in one.
    pub(super) fn each_converted(
        &self,
        encoder: &mut Encoder,
        widen: Widen,
        tile_n: u64,
        scratch: &mut LinearScratch,
        mut each: impl FnMut(&mut Encoder, &Chunk<'_>) -> Result<(), LinearError>,
    ) -> Result<(), LinearError> {
        let k = self.weights.k;
        if !k.is_multiple_of(widen.per_word()) {
            return Err(self.unsupported(format!(
                "converting {widen:?} needs K a multiple of {}",
                widen.per_word()
            )));
        }
        let row = k * widen.bytes();
        // A piece is one binding: within the device's binding size whatever
        // room the pass has.
        let rows = piece_rows(
            self.piece_bytes.min(self.limit),
            row,
            self.weights.n,
            tile_n,
        );
        // Word counts and offsets within a chunk (the layer's indices fit
        // u32: `record` checked them).
        let to_u32 = |v: u64| {
            u32::try_from(v).map_err(|_| self.unsupported(format!("{v} weight words exceed u32")))
        };
        let converted = scratch.converted_weights(self.gpu, rows * row)?;
        let (label, source) = widen.shader();
        for c in self.chunks()? {
            for (first, count) in pieces(c.rows, rows) {
                let first_row = c.first_row + first;
                let words = count * k / widen.per_word();
                let bytes = count * row;
                if scratch.converted() != Some((first_row, count)) {
                    let params = ConvertParams {
                        words: to_u32(words)?,
                        src_word0: to_u32(first * k / widen.per_word())?,
                        _pad: [0; 2],
                    };
                    let groups = words.div_ceil(256).min(CONVERT_GROUPS) as u32;
                    self.dispatch(
                        encoder,
                        label,
                        source,
                        &[],
                        [buf(c.buffer, c.offset, c.size), buf(&converted, 0, bytes)],
                        params,
                        (groups, 1),
                        Cost::new(words * 4, bytes, 0),
                    )?;
                    scratch.set_converted((first_row, count));
                }
                let piece = Chunk {
                    buffer: &converted,
                    offset: 0,
                    size: bytes,
                    rows: count,
                    first_row,
                };
                each(encoder, &piece)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::CONVERTED_PIECE_BYTES;

    #[test]
    fn pieces_cover_every_row_once() {
        // FLUX.1's widest (21504 x 3072, 132 MB as f16): pieces of whole
        // 256-row tiles under 64 MiB.
        let per = piece_rows(CONVERTED_PIECE_BYTES, 3072 * 2, 21504, 256);
        assert_eq!(per % 256, 0);
        assert!(per * 3072 * 2 <= CONVERTED_PIECE_BYTES, "{per}");
        let all: Vec<_> = pieces(21504, per).collect();
        assert_eq!(all.iter().map(|p| p.1).sum::<u64>(), 21504);
        for w in all.windows(2) {
            assert_eq!(w[0].0 + w[0].1, w[1].0);
        }
        // As int8 (a byte a weight), the same layer is one piece.
        assert_eq!(piece_rows(CONVERTED_PIECE_BYTES, 3072, 21504, 256), 21504);
        // A layer that fits is one piece; a row wider than a piece is one
        // tile a piece.
        assert_eq!(piece_rows(CONVERTED_PIECE_BYTES, 64 * 2, 300, 256), 300);
        assert_eq!(pieces(300, 300).collect::<Vec<_>>(), [(0, 300)]);
        assert_eq!(piece_rows(CONVERTED_PIECE_BYTES, 1 << 27, 1000, 128), 128);
        assert_eq!(pieces(0, 128).count(), 0);
    }

    #[test]
    fn the_planned_piece_holds_every_piece_the_recorder_converts() {
        // FLUX.1's widest: the larger of the two tiles' pieces, under 64 MiB.
        let flux = converted_piece_bytes(21504, 3072, 100, 2);
        for tile in [128, 256] {
            let rows = piece_rows(CONVERTED_PIECE_BYTES, 3072 * 2, 21504, tile);
            assert!(rows * 3072 * 2 <= flux, "{tile}");
        }
        assert!(flux <= CONVERTED_PIECE_BYTES, "{flux}");
        // A small layer: its bytes, and half again where the scratch grows
        // geometrically from a smaller piece.
        assert_eq!(
            converted_piece_bytes(300, 64, 100, 2),
            300 * 64 * 2 / 256 * 384
        );
        assert_eq!(converted_piece_bytes(0, 64, 100, 2), 0);
        // Past the geometric growth, exactly the piece.
        let mid = converted_piece_bytes(3072, 4096, 100, 2);
        assert_eq!(mid, 3072 * 4096 * 2);
        // int8: a byte a weight.
        assert_eq!(converted_piece_bytes(6144, 4096, 100, 1), 6144 * 4096);
        // Long inputs: half the piece.
        let long = converted_piece_bytes(21504, 3072, 4608, 2);
        assert!(
            long <= CONVERTED_PIECE_BYTES / 2 && long * 2 > flux * 9 / 10,
            "{long} {flux}"
        );
    }
}
