//! The GEMMs on f16 cooperative matrices (`linear_gemm_coop.wgsl`): when
//! they may run, their workgroup shape, and their specialisation.
//!
//! Integer layers: activation codes and weights are integers of at most 8
//! (int4) or 128 (int8) in magnitude, exact in f16, so every product is
//! exact, and an f32 sum of integers is exact while it stays within 2^24.
//! Where `max|code| · max|weight| · K <= 2^24` the result equals the dot4
//! GEMM's i32 accumulator, and the shared epilogue makes the outputs equal
//! bit for bit.
//!
//! Float layers: only with f16 activations (staged exactly) and f16, bf16
//! or fp8 weights (exact in f16, bf16 within f16's range, fp8 without its
//! scale, which multiplies the sum); products are exact in f32, sums f32 in
//! another order than the tiled GEMM's, so outputs agree to rounding.
//!
//! Two kernels ([`CoopGemmKernel`], the device's `GpuOptions::coop_gemm`):
//! the single-stage one (`linear_gemm_coop.wgsl`, the default) and the
//! double-buffered one with 16-byte loads (`linear_gemm_coop_db.wgsl`),
//! which needs K a multiple of its slots' columns ([`double_unusable`]);
//! layers it does not fit take the single-stage kernel.

use dynvram_quant::{AdapterCaps, Format};
use dynvram_shaders::linear as shaders;
pub use dynvram_shaders::linear::CoopGemmKernel;

use crate::ops::cache::Generated;
use crate::tensor::ActDtype;

/// Which kernel multiplies when M is past the GEMVs (integer formats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GemmKernel {
    /// Cooperative matrices where [`coop_gemm_unusable`] finds nothing
    /// against them, else dot4.
    #[default]
    Auto,
    /// The tiled GEMM (`dot4I8Packed` for integer formats, f32 products for
    /// float ones).
    Tiled,
    /// The f16 cooperative-matrix GEMM; an error where it cannot run.
    Coop,
}

/// Workgroup shape of the cooperative-matrix GEMM: `sg_m × sg_n` subgroups,
/// each computing `wm × wn` matrices of the adapter's edge `e` (an output
/// tile of `wm·e·sg_m × wn·e·sg_n`), staging `bk` columns of K per step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CoopShape {
    /// Subgroups along M (`SG_M`).
    pub sg_m: u32,
    /// Subgroups along N (`SG_N`).
    pub sg_n: u32,
    /// K columns staged per step (`BK`).
    pub bk: u32,
    /// Accumulators per subgroup along M (`WM`).
    pub wm: u32,
    /// Accumulators per subgroup along N (`WN`).
    pub wn: u32,
}

impl Default for CoopShape {
    /// 2 × 2 subgroups of 2 × 2 accumulators, 32 columns: 64 × 64 tiles on
    /// 16 × 16 matrices.
    fn default() -> Self {
        Self {
            sg_m: 2,
            sg_n: 2,
            bk: 32,
            wm: 2,
            wn: 2,
        }
    }
}

impl std::fmt::Display for CoopShape {
    /// `SG_MxSG_NxBKxWMxWN`, as `bench linear --coop-shapes` takes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self {
            sg_m,
            sg_n,
            bk,
            wm,
            wn,
        } = self;
        write!(f, "{sg_m}x{sg_n}x{bk}x{wm}x{wn}")
    }
}

impl std::str::FromStr for CoopShape {
    type Err = String;

    /// `SG_MxSG_NxBK` (2 × 2 accumulators) or `SG_MxSG_NxBKxWMxWN`.
    fn from_str(s: &str) -> Result<Self, String> {
        let v: Vec<u32> = s
            .split('x')
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("bad shape `{s}` (want SG_MxSG_NxBK[xWMxWN]): {e}"))?;
        match v[..] {
            [sg_m, sg_n, bk] => Ok(Self {
                sg_m,
                sg_n,
                bk,
                ..Self::default()
            }),
            [sg_m, sg_n, bk, wm, wn] => Ok(Self {
                sg_m,
                sg_n,
                bk,
                wm,
                wn,
            }),
            _ => Err(format!(
                "bad shape `{s}`: want SG_MxSG_NxBK or SG_MxSG_NxBKxWMxWN, e.g. 2x4x32x4x2"
            )),
        }
    }
}

impl CoopShape {
    /// The shape used when none is asked for: on 16 × 16 matrices (tensor
    /// cores) 4 × 4 subgroups, where the adapter fits them (the H200's
    /// fastest in a sweep of eight shapes: 1.9× the 2 × 2 default at
    /// 4096 × 12288 × 3072, BENCHMARKS.md); otherwise [`CoopShape::default`].
    pub fn for_adapter(caps: &AdapterCaps) -> Self {
        let big = Self {
            sg_m: 4,
            sg_n: 4,
            ..Self::default()
        };
        if caps.coop_matrix_edge == 16 && coop_unusable(caps, big).is_none() {
            big
        } else {
            Self::default()
        }
    }

    /// The shape of the double-buffered kernel when none is asked for: the
    /// largest of 128 × 128 tiles of 4 subgroups with 4 × 4 accumulators,
    /// 128 × 128 tiles of 8 subgroups with 4 × 2, then
    /// [`CoopShape::default`] that fits the adapter's workgroup memory and
    /// invocations (two stages of tiles take twice the memory of one).
    /// Not measured yet: the candidates follow the usual tensor-core tiling
    /// (CUTLASS's 128 × 128 × 32 with 64 × 64 warp tiles first).
    pub fn for_double(caps: &AdapterCaps) -> Self {
        let tensor_cores = [
            Self {
                sg_m: 2,
                sg_n: 2,
                bk: 32,
                wm: 4,
                wn: 4,
            },
            Self {
                sg_m: 2,
                sg_n: 4,
                bk: 32,
                wm: 4,
                wn: 2,
            },
        ];
        let candidates = if caps.coop_matrix_edge == 16 {
            &tensor_cores[..]
        } else {
            &[]
        };
        candidates
            .iter()
            .copied()
            .find(|&s| kernel_unusable(caps, s, CoopGemmKernel::Double).is_none())
            .unwrap_or_default()
    }

    /// Output tile `(rows of M, rows of N)` for matrix edge `edge`.
    pub fn tile(self, edge: u32) -> (u32, u32) {
        (self.wm * edge * self.sg_m, self.wn * edge * self.sg_n)
    }

    /// Workgroup memory of the single-stage kernel for matrix edge `edge`:
    /// the two staged f16 tiles (rows padded by 8 columns) and one f32
    /// matrix per subgroup.
    pub fn workgroup_bytes(self, edge: u32) -> u32 {
        self.workgroup_bytes_of(edge, CoopGemmKernel::Single)
    }

    /// Workgroup memory of `kernel` for matrix edge `edge`: each stage's two
    /// staged f16 tiles and one f32 matrix per subgroup.
    pub fn workgroup_bytes_of(self, edge: u32, kernel: CoopGemmKernel) -> u32 {
        let (tm, tn) = self.tile(edge);
        kernel.stages() * (tm + tn) * (self.bk + 8) * 2 + self.sg_m * self.sg_n * edge * edge * 4
    }

    /// Checks the shape against the kernel's and the adapter's limits.
    fn check(
        self,
        edge: u32,
        sg: u32,
        caps: &AdapterCaps,
        kernel: CoopGemmKernel,
    ) -> Result<(), String> {
        let Self {
            sg_m,
            sg_n,
            bk,
            wm,
            wn,
        } = self;
        if !(1..=8).contains(&sg_m) || !(1..=8).contains(&sg_n) {
            return Err(format!("{sg_m} x {sg_n} subgroups: each must be 1..=8"));
        }
        if !(1..=4).contains(&wm) || !(1..=4).contains(&wn) {
            return Err(format!(
                "{wm} x {wn} accumulators per subgroup: each must be 1..=4"
            ));
        }
        if bk == 0 || bk % 8 != 0 || bk % edge != 0 || bk > 256 {
            return Err(format!(
                "{bk} staged K columns: a multiple of 8 and of the matrix edge {edge}, at most 256"
            ));
        }
        let (invocations, bytes) = (sg * sg_m * sg_n, self.workgroup_bytes_of(edge, kernel));
        if invocations > caps.max_invocations_per_workgroup || bytes > caps.max_workgroup_storage {
            return Err(format!(
                "{sg_m} x {sg_n} subgroups of {sg} ({invocations} invocations) and {bytes} bytes of workgroup memory exceed the adapter's {} and {}",
                caps.max_invocations_per_workgroup, caps.max_workgroup_storage
            ));
        }
        Ok(())
    }
}

/// Why no cooperative-matrix GEMM can run on this adapter with `shape`, or
/// `None` when one can.
pub fn coop_unusable(caps: &AdapterCaps, shape: CoopShape) -> Option<String> {
    kernel_unusable(caps, shape, CoopGemmKernel::Single)
}

/// Why the double-buffered GEMM cannot run a layer of depth `k` with
/// `shape` — integer (`int4_weights` says which weights) or `float` (f16
/// or bf16 weights, f16 activations: [`float_coop_unusable`] checks the
/// rest) — or `None` when it can: besides the adapter, its 16-byte slots
/// need K a multiple of their columns (rows of activations and weights on
/// 16 bytes), and integer slots of 32 weight columns need BK a multiple
/// of 32.
pub fn double_unusable(
    caps: &AdapterCaps,
    shape: CoopShape,
    k: u64,
    float: Option<Format>,
    int4_weights: bool,
) -> Option<String> {
    if let Some(why) = kernel_unusable(caps, shape, CoopGemmKernel::Double) {
        return Some(why);
    }
    let (a_cols, b_cols) = CoopGemmKernel::Double.slot_columns(float.is_some());
    let need = match float {
        Some(Format::F16 | Format::Bf16) => u64::from(b_cols),
        Some(other) => return Some(format!("{other} weights (it reads f16 and bf16)")),
        None if int4_weights => u64::from(b_cols),
        None => u64::from(a_cols),
    };
    if !k.is_multiple_of(need) {
        return Some(format!(
            "K = {k} is not a multiple of {need} (its 16-byte loads)"
        ));
    }
    if float.is_none() && !shape.bk.is_multiple_of(b_cols) {
        return Some(format!(
            "{} staged K columns: integer layers need a multiple of {b_cols}",
            shape.bk
        ));
    }
    None
}

/// [`coop_unusable`] for `kernel`.
fn kernel_unusable(caps: &AdapterCaps, shape: CoopShape, kernel: CoopGemmKernel) -> Option<String> {
    let edge = caps.coop_matrix_edge;
    if !caps.f16_coop_matrices() {
        return Some(
            "the adapter lacks f16 cooperative matrices (16x16 or 8x8 with f32 sums), SHADER_F16 or subgroups"
                .into(),
        );
    }
    let sg = caps.subgroup_min_size;
    if sg == 0 || sg != caps.subgroup_max_size {
        return Some(format!(
            "the subgroup size is not fixed ({}..{})",
            caps.subgroup_min_size, caps.subgroup_max_size
        ));
    }
    shape.check(edge, sg, caps, kernel).err()
}

/// Why the cooperative-matrix GEMM cannot run an integer layer of depth `k`
/// on this adapter with `shape`, or `None` when it can (see the module docs
/// for the 2^24 bound).
pub fn coop_gemm_unusable(
    caps: &AdapterCaps,
    k: u64,
    int4_act: bool,
    int4_weights: bool,
    shape: CoopShape,
) -> Option<String> {
    if let Some(why) = coop_unusable(caps, shape) {
        return Some(why);
    }
    let a_max: u64 = if int4_act { 8 } else { 128 };
    let w_max: u64 = if int4_weights { 8 } else { 128 };
    if a_max * w_max * k > 1 << 24 {
        return Some(format!(
            "K = {k} with codes up to {a_max} and weights up to {w_max} can leave f32's exact integers"
        ));
    }
    None
}

/// Why the cooperative-matrix GEMM cannot run a float layer of weight
/// format `format` on activations of `act`, or `None` when it can.
pub fn float_coop_unusable(
    caps: &AdapterCaps,
    format: Format,
    act: ActDtype,
    shape: CoopShape,
) -> Option<String> {
    if let Some(why) = coop_unusable(caps, shape) {
        return Some(why);
    }
    if act != ActDtype::F16 {
        return Some(format!(
            "{act} activations would round to f16 (the path takes f16 activations)"
        ));
    }
    match format {
        Format::F16 | Format::Bf16 | Format::Float8E4m3fn | Format::Float8E5m2 => None,
        other => Some(format!("{other} weights would round to f16")),
    }
}

/// The kernel specialised for one adapter and shape.
pub(super) struct CoopKernel {
    /// The module, its shape written in (made once per process and shape).
    pub source: &'static str,
    /// The subgroup size (`SG`), the one override constant besides the
    /// integer or float kernels' own.
    pub constants: [(&'static str, f64); 1],
    /// Output tile `(M, N)` of a workgroup.
    pub tile: (u64, u64),
}

/// The integer (`float` false) or float `kernel` on an adapter whose
/// matrix edge and subgroup size are `edge` and `sg` (checked by
/// [`coop_unusable`] or [`double_unusable`]).
pub(super) fn specialise(
    edge: u32,
    sg: u32,
    shape: CoopShape,
    float: bool,
    kernel: CoopGemmKernel,
) -> CoopKernel {
    use CoopGemmKernel::{Double, Single};
    let source = match (kernel, float, edge) {
        (Single, false, 16) => shaders::INT_GEMM_COOP16,
        (Single, false, _) => shaders::INT_GEMM_COOP8,
        (Single, true, 16) => shaders::FLOAT_GEMM_COOP16,
        (Single, true, _) => shaders::FLOAT_GEMM_COOP8,
        (Double, false, 16) => shaders::INT_GEMM_COOP16_DB,
        (Double, false, _) => shaders::INT_GEMM_COOP8_DB,
        (Double, true, 16) => shaders::FLOAT_GEMM_COOP16_DB,
        (Double, true, _) => shaders::FLOAT_GEMM_COOP8_DB,
    };
    let CoopShape {
        sg_m,
        sg_n,
        bk,
        wm,
        wn,
    } = shape;
    let (tm, tn) = shape.tile(edge);
    let text = shaders::CoopGemmShape {
        sg,
        sg_m,
        sg_n,
        wm,
        wn,
        bk,
    };
    static SOURCES: Generated<(u32, u32, CoopShape, bool, CoopGemmKernel)> = Generated::new();
    CoopKernel {
        source: SOURCES.get((edge, sg, shape, float, kernel), || {
            shaders::coop_gemm(source, edge, text, kernel, float)
        }),
        constants: [("SG", f64::from(sg))],
        tile: (u64::from(tm), u64::from(tn)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coop_caps(edge: u32, sg: u32) -> AdapterCaps {
        AdapterCaps {
            shader_f16: true,
            subgroups: true,
            subgroup_min_size: sg,
            subgroup_max_size: sg,
            coop_matrix_edge: edge,
            max_workgroup_storage: 48 << 10,
            max_invocations_per_workgroup: 1024,
            ..AdapterCaps::baseline("test", "vulkan")
        }
    }

    #[test]
    fn exactness_bound_decides_by_depth_and_arithmetic() {
        let caps = coop_caps(16, 32);
        let d = CoopShape::default();
        assert_eq!(coop_gemm_unusable(&caps, 262_144, true, true, d), None);
        assert!(coop_gemm_unusable(&caps, 262_152, true, true, d).is_some());
        assert_eq!(coop_gemm_unusable(&caps, 16_384, false, true, d), None);
        assert!(coop_gemm_unusable(&caps, 16_392, false, true, d).is_some());
        assert_eq!(coop_gemm_unusable(&caps, 1024, false, false, d), None);
        let why = coop_gemm_unusable(&caps, 1028, false, false, d).expect("past 2^24");
        assert!(why.contains("K = 1028"), "{why}");
    }

    #[test]
    fn adapters_without_the_pieces_are_refused() {
        let d = CoopShape::default();
        let none = coop_gemm_unusable(&coop_caps(0, 32), 64, true, true, d);
        assert!(none.is_some_and(|w| w.contains("cooperative matrices")));
        let mut varying = coop_caps(16, 32);
        varying.subgroup_min_size = 16;
        let why = coop_gemm_unusable(&varying, 64, true, true, d).expect("varying subgroups");
        assert!(why.contains("16..32"), "{why}");
    }

    #[test]
    fn tensor_cores_get_the_larger_default_where_it_fits() {
        let big = CoopShape {
            sg_m: 4,
            sg_n: 4,
            ..CoopShape::default()
        };
        assert_eq!(CoopShape::for_adapter(&coop_caps(16, 32)), big);
        assert_eq!(
            CoopShape::for_adapter(&coop_caps(8, 32)),
            CoopShape::default()
        );
        // 4 x 4 subgroups of 64 are 1024 invocations.
        let mut narrow = coop_caps(16, 64);
        narrow.max_invocations_per_workgroup = 512;
        assert_eq!(CoopShape::for_adapter(&narrow), CoopShape::default());
        let mut small = coop_caps(16, 32);
        small.max_workgroup_storage = 32 << 10;
        assert_eq!(CoopShape::for_adapter(&small), CoopShape::default());
    }

    #[test]
    fn shapes_are_checked_against_the_limits() {
        let caps = coop_caps(16, 32);
        // 64 x 64 tiles: 128 · 40 · 2 + 4 · 256 · 4 bytes.
        assert_eq!(CoopShape::default().workgroup_bytes(16), 14_336);
        assert_eq!(CoopShape::default().tile(8), (32, 32));
        let big = CoopShape {
            sg_m: 4,
            sg_n: 4,
            bk: 64,
            ..CoopShape::default()
        };
        let why = coop_gemm_unusable(&caps, 64, true, true, big).expect("too much memory");
        assert!(why.contains("workgroup memory"), "{why}");
        let odd = CoopShape {
            bk: 24,
            ..CoopShape::default()
        };
        assert!(coop_gemm_unusable(&caps, 64, true, true, odd).is_some());
        let fits = CoopShape {
            sg_m: 4,
            sg_n: 2,
            ..CoopShape::default()
        };
        assert_eq!(coop_gemm_unusable(&caps, 64, true, true, fits), None);
        let deep = CoopShape {
            wm: 4,
            wn: 4,
            ..CoopShape::default()
        };
        assert_eq!(deep.tile(16), (128, 128));
        assert_eq!(coop_gemm_unusable(&caps, 64, true, true, deep), None);
        let wide = CoopShape { wm: 5, ..deep };
        assert!(coop_gemm_unusable(&caps, 64, true, true, wide).is_some());
    }

    #[test]
    fn the_double_buffered_kernel_takes_what_fits() {
        let caps = coop_caps(16, 32);
        let four = CoopShape::for_double(&caps);
        assert_eq!(four.to_string(), "2x2x32x4x4");
        // Two stages of 128-row tiles, padded: 2 · 256 · 40 · 2 + 4 · 1024.
        assert_eq!(four.workgroup_bytes_of(16, CoopGemmKernel::Double), 45_056);
        let mut small = coop_caps(16, 32);
        small.max_workgroup_storage = 32 << 10;
        assert_eq!(CoopShape::for_double(&small), CoopShape::default());
        assert_eq!(
            CoopShape::for_double(&coop_caps(8, 8)),
            CoopShape::default()
        );
        // 4 x 4 subgroups of 2 x 2 fit one stage in 48 KiB, not two.
        let big = CoopShape::for_adapter(&caps);
        assert!(coop_unusable(&caps, big).is_none());
        let why = double_unusable(&caps, big, 64, None, true).expect("two stages");
        assert!(why.contains("workgroup memory"), "{why}");
        let d = CoopShape::default();
        assert_eq!(double_unusable(&caps, d, 96, None, true), None);
        assert!(double_unusable(&caps, d, 80, None, true).is_some_and(|w| w.contains("K = 80")));
        assert_eq!(double_unusable(&caps, d, 80, None, false), None);
        assert_eq!(
            double_unusable(&caps, d, 40, Some(Format::Bf16), false),
            None
        );
        assert!(double_unusable(&caps, d, 44, Some(Format::F16), false).is_some());
        assert!(double_unusable(&caps, d, 64, Some(Format::Float8E4m3fn), false).is_some());
        let shallow = CoopShape { bk: 16, ..d };
        assert!(double_unusable(&caps, shallow, 64, None, true).is_some());
        assert_eq!(
            double_unusable(&caps, shallow, 64, Some(Format::F16), false),
            None
        );
    }

    #[test]
    fn shapes_parse_and_print() {
        let s: CoopShape = "2x4x64x4x2".parse().expect("parses");
        assert_eq!((s.sg_m, s.sg_n, s.bk, s.wm, s.wn), (2, 4, 64, 4, 2));
        assert_eq!(s.to_string(), "2x4x64x4x2");
        let short: CoopShape = "4x4x32".parse().expect("parses");
        assert_eq!((short.wm, short.wn), (2, 2));
        assert!("4x4".parse::<CoopShape>().is_err());
        assert!("4xax32".parse::<CoopShape>().is_err());
    }
}
