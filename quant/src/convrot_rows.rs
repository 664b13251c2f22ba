//! convrot_w4a4 weight rows, one at a time: rotate (matmul order), take the
//! row's int4 scale, quantize and pack — the bytes of
//! [`crate::quantize::quantize_convrot_w4a4_weight`], with no allocation per
//! row, so the quantizer can run it on pieces of rows as they are read.

use crate::reference::rotate_matmul_naive;
use crate::rotation::MatmulRotation;

/// Block length of torch's CPU GEMM along the summed dimension.
const GEMM_BLOCK: usize = 128;

/// Lanes of the absmax reduction (any split gives the same maximum).
const LANES: usize = 16;

/// The summation block a whole `[n, k]` weight's rotation uses: a GEMV's
/// (the whole group) when the tensor is a single group, else a GEMM's.
pub(crate) fn block_for(n: usize, k: usize, group: u32) -> usize {
    if n * k == group as usize {
        group as usize
    } else {
        GEMM_BLOCK
    }
}

/// The per-row work of one weight.
#[derive(Debug, Clone)]
pub(crate) struct ConvrotRows {
    group: u32,
    block: usize,
    /// The fast rotation (`None` for groups under 16: the naive one).
    rot: Option<MatmulRotation>,
}

impl ConvrotRows {
    /// For `group` (a power of 4 dividing the rows) summed in blocks of `block`.
    pub(crate) fn new(group: u32, block: usize) -> Self {
        Self {
            group,
            block,
            rot: MatmulRotation::new(group, block),
        }
    }

    /// Quantizes one row `w` (even length, a multiple of the group) into
    /// `packed` (half its length); `rot` is scratch of `w`'s length.
    /// Returns the row's scale.
    pub(crate) fn row(&self, w: &[f32], rot: &mut [f32], packed: &mut [u8]) -> f32 {
        match &self.rot {
            Some(r) => r.rotate_into(w, rot),
            None => rot.copy_from_slice(&rotate_matmul_naive(w, self.group, self.block)),
        }
        quantize_pack(rot, packed)
    }
}

/// int4 codes of a rotated row packed two per byte (low nibble = even
/// column), as `quantize_act_int4` and `pack_int4` make them; returns the
/// scale.
fn quantize_pack(rot: &[f32], packed: &mut [u8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            return unsafe { quantize_pack_avx2(rot, packed) };
        }
    }
    quantize_pack_portable(rot, packed)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn quantize_pack_avx2(rot: &[f32], packed: &mut [u8]) -> f32 {
    quantize_pack_portable(rot, packed)
}

/// Inlined into the `target_feature` wrapper so it is vectorized there
/// (`round_ties_even` is one instruction from SSE4.1 on, a libm call before).
#[inline(always)]
fn quantize_pack_portable(rot: &[f32], packed: &mut [u8]) -> f32 {
    debug_assert_eq!(rot.len(), packed.len() * 2);
    // `max` is exact and ignores NaN, so lanes give the serial fold's value.
    let mut lanes = [0.0f32; LANES];
    let chunks = rot.chunks_exact(LANES);
    let tail = chunks
        .remainder()
        .iter()
        .fold(0.0f32, |m, v| m.max(v.abs()));
    for c in chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            *m = m.max(v.abs());
        }
    }
    let amax = lanes.iter().fold(tail, |m, &v| m.max(v));
    // kitchen eager: `s = max(absmax, 1e-10) / 7`, an f32 true division per code.
    let s = amax.max(1e-10) / 7.0;
    let code = |v: f32| ((v / s).round_ties_even().clamp(-7.0, 7.0) as i8 as u8) & 0xF;
    for (b, p) in packed.iter_mut().zip(rot.chunks_exact(2)) {
        *b = code(p[0]) | (code(p[1]) << 4);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::{pack_int4, quantize_act_int4, rotate_matmul_blocked};

    #[test]
    fn rows_match_the_reference_quantizer() {
        for (group, k) in [(4u32, 64usize), (16, 64), (64, 192), (256, 512)] {
            let w: Vec<f32> = (0..k)
                .map(|i| ((i as f32 * 0.37).sin() * 2.5) * if i % 13 == 0 { 9.0 } else { 1.0 })
                .collect();
            let rows = ConvrotRows::new(group, GEMM_BLOCK);
            let mut rot = vec![0.0; k];
            let mut packed = vec![0u8; k / 2];
            let s = rows.row(&w, &mut rot, &mut packed);
            let q = quantize_act_int4(&rotate_matmul_blocked(&w, group, GEMM_BLOCK), k);
            assert_eq!(packed, pack_int4(&q.codes), "group {group}");
            assert_eq!(s.to_bits(), q.scales[0].to_bits(), "group {group}");
        }
        let mut packed = [0u8; 32];
        let s = quantize_pack(&[0.0; 64], &mut packed);
        assert_eq!(s, 1e-10f32 / 7.0);
        assert_eq!(packed, [0; 32]);
    }
}
