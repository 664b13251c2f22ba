//! Which GEMV a layer's M takes, and the multi-row GEMV's workgroup shape.

use crate::device::Gpu;

/// Rows of activations up to which every GEMV kernel runs (and activation
/// rotation and quantization fuse); above, the multi-row GEMV up to
/// [`ROWS_GEMV_MAX_M`] where rows are 16-byte aligned, else the tiled GEMMs.
pub const GEMV_MAX_M: u64 = 8;

/// Rows of activations up to which the multi-row GEMV kernels run (each
/// weight byte read once, the activations re-read from cache per workgroup);
/// the tiled GEMM has too few workgroups to stream weights at small M (the
/// H200 took 50× longer at M = 16 than at M = 1 on it).
pub const ROWS_GEMV_MAX_M: u64 = 32;

/// Rows of activations up to which the multi-row GEMVs run by default on
/// `gpu`: [`ROWS_GEMV_MAX_M`], except on CPU adapters (lavapipe,
/// llvmpipe), where the GEMVs' workgroup-wide reductions cost more than the
/// tiled GEMM's idle workgroups: 704 × 256 bf16 took 817 ms at M = 32 on
/// the rows GEMV against 88 ms at M = 33 on the tiled GEMM (lavapipe,
/// `dynvram bench linear`), so there they stop at [`GEMV_MAX_M`]. An
/// explicit [`GemvShape`] (`RecordOptions::gemv`) still runs them up to
/// [`ROWS_GEMV_MAX_M`].
pub fn rows_gemv_max_m(gpu: &Gpu) -> u64 {
    if gpu.info.device_type == wgpu::DeviceType::Cpu {
        GEMV_MAX_M
    } else {
        ROWS_GEMV_MAX_M
    }
}

/// Workgroup shape of the multi-row GEMV kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemvShape {
    /// Output rows per workgroup (`ROWS`), at most 16, `rows · M <= 64`.
    pub rows: u32,
    /// Invocations per workgroup (`WGS`), a power of two in 64..=1024.
    pub wgs: u32,
}

/// Most accumulators one invocation holds (`ROWS · MR`, the kernels' arrays).
const MAX_ACCUMULATORS: u64 = 64;

/// Most rows per workgroup (the kernels' array of in-flight weight quads).
const MAX_ROWS: u32 = 16;

impl GemvShape {
    /// The default for `m` activation rows on an adapter allowing
    /// `max_invocations` invocations per workgroup: 4 rows up to M = 16
    /// (`rows · M` accumulators plus `rows` 16-byte loads per invocation
    /// must stay in registers; above M = 16, 64 / M rows); 128 invocations
    /// up to M = 8, else 256 (multiples of every subgroup size). On the H200
    /// at M = 1 and the decode layers' shapes (4096², 11008 × 4096, 4096 ×
    /// 11008; bf16 and int4, alone, q/k/v stacked, gate/up with SwiGLU),
    /// 4 × 128 was the best or within 5 % of it everywhere, while 256
    /// invocations lost up to 2.3× on the fused gate/up launch (session 8,
    /// `bench/gemv_sweep.sh`); at 16384² every shape of 1–8 rows and
    /// 64–512 invocations streamed within a few percent (session 6).
    pub fn default_for(m: u64, max_invocations: u32) -> Self {
        let wgs = match (m, max_invocations) {
            (0..=8, 128..) => 128,
            (_, 256..) => 256,
            _ => 64,
        };
        let rows = match m {
            0..=16 => 4,
            _ => (MAX_ACCUMULATORS / m).max(1) as u32,
        };
        Self { rows, wgs }
    }

    /// Checks a shape against the kernels' and the adapter's limits.
    pub(super) fn check(self, m: u64, max_invocations: u32) -> Result<(), String> {
        let Self { rows, wgs } = self;
        if rows == 0 || rows > MAX_ROWS || u64::from(rows) * m > MAX_ACCUMULATORS {
            return Err(format!(
                "GEMV rows per workgroup {rows} must be in 1..={MAX_ROWS} with rows · M <= {MAX_ACCUMULATORS} (M = {m})"
            ));
        }
        if !wgs.is_power_of_two() || !(64..=1024).contains(&wgs) || wgs > max_invocations {
            return Err(format!(
                "GEMV workgroup size {wgs} must be a power of two in 64..=min(1024, {max_invocations})"
            ));
        }
        Ok(())
    }
}

/// Whether rows of `row_bytes` bytes can be read as 16-byte quads.
pub(super) fn rows_aligned(row_bytes: u64) -> bool {
    row_bytes.is_multiple_of(16)
}

#[cfg(test)]
mod tests {
    use super::GemvShape;

    #[test]
    fn default_shapes_pass_their_own_check() {
        for m in 1..=8 {
            for max in [64, 128, 256, 1024] {
                let s = GemvShape::default_for(m, max);
                assert_eq!(s.check(m, max), Ok(()), "M={m} max={max}: {s:?}");
                assert!(s.wgs <= max);
            }
        }
    }

    #[test]
    fn bad_shapes_are_refused() {
        let bad = [
            (GemvShape { rows: 0, wgs: 256 }, 1),
            (GemvShape { rows: 17, wgs: 256 }, 1),
            (GemvShape { rows: 16, wgs: 256 }, 8),
            (GemvShape { rows: 4, wgs: 96 }, 1),
            (GemvShape { rows: 4, wgs: 32 }, 1),
            (GemvShape { rows: 4, wgs: 2048 }, 1),
        ];
        for (s, m) in bad {
            assert!(s.check(m, 1024).is_err(), "{s:?} M={m}");
        }
        assert!(GemvShape { rows: 4, wgs: 512 }.check(1, 256).is_err());
    }
}
