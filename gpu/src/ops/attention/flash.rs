//! Flash attention on cooperative matrices: which kernel runs
//! ([`FlashKernel`]: the two-walk kernel of `two_walk.rs`, or the one-walk
//! kernel here), and the one-walk kernel (`flash_attention.wgsl`): a
//! workgroup takes a block of query rows of one head, keeps their queries
//! and outputs in registers, walks the keys once in blocks with an online
//! softmax (outputs rescaled lazily through workgroup memory), and never
//! writes the score matrix. Used where the adapter has f16 cooperative
//! matrices with a fixed subgroup size and the activations are f16; the
//! scalar kernels run elsewhere.
//!
//! The one-walk kernel's shape is a [`FlashTuning`] (rows and keys per
//! block, subgroups, how they split the two products, how keys and values
//! are staged), generated as text per tuning (`dynvram_shaders::flash`).
//! [`default_tuning`] picks one from the adapter's limits, and the one-walk
//! kernel is the device's default where a tuning fits (the two-walk kernel
//! where none does). On the H200 (run P1, BENCHMARKS.md) `128x32w8c2` ran
//! FLUX.1-dev's joint attention at 66 TFLOP/s against the two-walk
//! kernel's 8.9 and `64x64w4c2`'s 30.8, and its tests pass there since the
//! workgroup variables are 16-byte multiples (8f1af39). Another kernel
//! runs where asked for ([`super::record_flash_attention_tuned`],
//! `GpuOptions::flash` / `DYNVRAM_FLASH`, `dynvram bench attention
//! --queries`).

use std::sync::Mutex;

use dynvram_quant::AdapterCaps;
use dynvram_shaders::flash::{FlashGeometry, FlashKernel, FlashTuning, flash_attention};
use dynvram_shaders::transformer::{FLASH_ATTENTION8, FLASH_ATTENTION16};

use super::scalar::Operands;
use super::shape::{FlashGrid, Heads, Span};
use crate::device::{Gpu, GpuError};
use crate::ops::cache::{Generated, PipelineCache};
use crate::ops::encoder::Encoder;
use crate::ops::kernel::to_u32;
use crate::tensor::ActDtype;

/// The default tunings, most preferred first: the first that fits the
/// adapter and head dimension within [`DEFAULT_REGISTERS`] runs
/// ([`default_tuning`]). Timed on the H200 (`bench/flash_sweep.sh`, run
/// P1): 128 rows by 32 keys over 8 subgroups, the output columns split in
/// two, 2.1–2.2× faster than 64 rows by 64 keys at 4608 tokens and at
/// 2048 causal ones; the later ones serve larger head dims (more
/// subgroups, fewer matrices each) and smaller matrix edges.
const DEFAULTS: &[&str] = &[
    "128x32w8c2",
    "64x64w4c2",
    "64x64w4",
    "64x32w8k2c4",
    "64x32w4c2",
    "64x32w4",
    "32x32w8k2c4",
    "32x32w4k2c2",
    "32x32w2",
    "16x16w4k2c2",
    "16x16w1",
];

/// The most registers per invocation ([`FlashGeometry::registers`]) a
/// default tuning's matrices may take: beyond, NVIDIA's compiler spills
/// (255 a thread, addresses and the softmax besides), and lavapipe takes
/// minutes to compile the unrolled products.
pub const DEFAULT_REGISTERS: u32 = 160;

/// Why the adapter cannot run flash attention at all with `act`
/// activations and head dimension `hd` (any tuning), or `Ok`.
fn supported(caps: &AdapterCaps, act: ActDtype, hd: u64) -> Result<(), String> {
    super::coop_blocks::coop_f16_unusable(
        caps,
        act,
        hd,
        |sg| sg.is_power_of_two() && sg >= 4,
        &"(the kernel needs one fixed power-of-two size)",
    )
}

/// Why `tuning` cannot run on this adapter for head dimension `head_dim`
/// with f16 activations, or `None` when it can.
pub fn tuning_unusable(caps: &AdapterCaps, tuning: &FlashTuning, head_dim: u64) -> Option<String> {
    if let Err(why) = supported(caps, ActDtype::F16, head_dim) {
        return Some(why);
    }
    let g = match tuning.geometry(
        caps.coop_matrix_edge,
        caps.subgroup_min_size,
        head_dim as u32,
    ) {
        Ok(g) => g,
        Err(why) => return Some(why),
    };
    if g.invocations() > caps.max_invocations_per_workgroup {
        return Some(format!(
            "{} invocations per workgroup exceed the adapter's {}",
            g.invocations(),
            caps.max_invocations_per_workgroup
        ));
    }
    if g.workgroup_bytes() > caps.max_workgroup_storage {
        return Some(format!(
            "{} bytes of workgroup memory at head_dim {head_dim} exceed the adapter's {}",
            g.workgroup_bytes(),
            caps.max_workgroup_storage
        ));
    }
    None
}

/// Every tuning [`default_tuning`] can pick, most preferred first.
pub fn default_tunings() -> Vec<FlashTuning> {
    DEFAULTS
        .iter()
        .map(|t| t.parse::<FlashTuning>().expect("a default tuning parses"))
        .collect()
}

/// The tuning flash attention runs with by default on this adapter at
/// head dimension `head_dim`: the first of [`default_tunings`] that fits, its
/// matrices within [`DEFAULT_REGISTERS`].
pub fn default_tuning(caps: &AdapterCaps, head_dim: u64) -> Option<FlashTuning> {
    default_tunings().into_iter().find(|t| {
        tuning_unusable(caps, t, head_dim).is_none()
            && geometry(caps, t, head_dim).is_some_and(|g| g.registers() <= DEFAULT_REGISTERS)
    })
}

/// `tuning`'s sizes on this adapter at `head_dim` (`None` where it has
/// none).
pub fn geometry(caps: &AdapterCaps, tuning: &FlashTuning, head_dim: u64) -> Option<FlashGeometry> {
    let hd = u32::try_from(head_dim).ok()?;
    tuning
        .geometry(caps.coop_matrix_edge, caps.subgroup_min_size, hd)
        .ok()
}

/// Why blocks of query rows with `act` activations and head dimension
/// `hd` run on the scalar kernels on this adapter (no flash kernel fits),
/// or `None`.
pub(super) fn unusable(caps: &AdapterCaps, act: ActDtype, hd: u64) -> Option<String> {
    if let Err(why) = supported(caps, act, hd) {
        return Some(why);
    }
    remembered_default(caps, act, hd).is_none().then(|| {
        format!(
            "no flash kernel fits {} bytes of workgroup memory at head_dim {hd}",
            caps.max_workgroup_storage
        )
    })
}

/// Why `kernel` cannot run on this device for head dimension `head_dim`
/// with f16 activations, or `None` when it can.
pub fn kernel_unusable(gpu: &Gpu, kernel: &FlashKernel, head_dim: u64) -> Option<String> {
    match *kernel {
        FlashKernel::TwoWalk => super::two_walk::shape(&gpu.caps, ActDtype::F16, head_dim).err(),
        FlashKernel::OneWalk(t) => tuning_unusable(&gpu.caps, &t, head_dim),
        FlashKernel::Cm2(block) => {
            super::flash_cm2::unusable(gpu.cm2(), ActDtype::F16, head_dim, block)
        }
    }
}

/// The kernel flash attention runs by default on this adapter: the
/// one-walk kernel in its [`default_tuning`] (a third fewer products than
/// the two-walk kernel and larger blocks: 7.5× faster on the H200), else
/// the two-walk kernel where it fits.
pub fn default_kernel(caps: &AdapterCaps, act: ActDtype, hd: u64) -> Option<FlashKernel> {
    supported(caps, act, hd).ok()?;
    if let Some(t) = default_tuning(caps, hd) {
        return Some(FlashKernel::OneWalk(t));
    }
    super::two_walk::shape(caps, act, hd)
        .is_ok()
        .then_some(FlashKernel::TwoWalk)
}

/// [`default_kernel`], searched once per adapter shape, `act` and `hd`:
/// the search parses tunings and formats why each unfit one fails, which a
/// launch must not repeat (warm launches allocate nothing).
fn remembered_default(caps: &AdapterCaps, act: ActDtype, hd: u64) -> Option<FlashKernel> {
    // Few entries (one adapter, a head dim or two): a scan, not a hash of
    // every capability.
    type Memo = Vec<(AdapterCaps, ActDtype, u64, Option<FlashKernel>)>;
    static MEMO: Mutex<Memo> = Mutex::new(Vec::new());
    let mut memo = MEMO
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(e) = memo
        .iter()
        .find(|e| e.1 == act && e.2 == hd && e.0 == *caps)
    {
        return e.3;
    }
    let kernel = default_kernel(caps, act, hd);
    memo.push((caps.clone(), act, hd, kernel));
    kernel
}

/// The kernel flash attention runs here over `grid`: the device's
/// `GpuOptions::flash` where it fits, else the SPIR-V kernel the device
/// prefers there (NVIDIA's cooperative matrices 2: 1.9× the WGSL kernel at
/// FLUX.1's attention on the H100, BENCHMARKS.md session 24;
/// [`super::flash_cm2::preferred`]), else [`default_kernel`]; or why
/// blocks of query rows run on the scalar kernels.
pub fn choose(gpu: &Gpu, act: ActDtype, hd: u64, grid: FlashGrid) -> Result<FlashKernel, String> {
    supported(&gpu.caps, act, hd)?;
    if let Some(k) = gpu.flash_kernel() {
        match kernel_unusable(gpu, &k, hd) {
            None => return Ok(k),
            Some(why) => {
                tracing::debug!(%k, %why, hd, "the asked flash kernel does not fit; the default runs");
            }
        }
    }
    if let Some(k) = super::flash_cm2::preferred(gpu.cm2(), act, hd, Some(grid)) {
        return Ok(k);
    }
    remembered_default(&gpu.caps, act, hd).ok_or_else(|| {
        format!(
            "no flash kernel fits {} bytes of workgroup memory at head_dim {hd}",
            gpu.caps.max_workgroup_storage
        )
    })
}

/// Records `kernel` for `span` (an unfit kernel is an error).
pub(super) fn record_kernel(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    ops: &Operands<'_>,
    heads: Heads,
    span: Span,
    kernel: &FlashKernel,
) -> Result<(), GpuError> {
    match *kernel {
        FlashKernel::OneWalk(t) => record(gpu, cache, enc, ops, heads, span, &t),
        FlashKernel::Cm2(block) => {
            super::flash_cm2::record(gpu, cache, enc, ops, heads, span, block)
        }
        FlashKernel::TwoWalk => {
            let shape =
                super::two_walk::shape(&gpu.caps, ops.q.dtype, heads.head_dim).map_err(|why| {
                    crate::ops::kernel::bad("flash_attention", format!("two-walk: {why}"))
                })?;
            super::two_walk::record(gpu, cache, enc, ops, heads, span, shape)
        }
    }
}

/// The module for `tuning` on this adapter's matrices and subgroups at
/// head dimension `hd` (checked: [`tuning_unusable`] is `None`), made
/// once per process and shape.
fn source(edge: u32, sg: u32, hd: u32, tuning: FlashTuning) -> Result<&'static str, String> {
    static SOURCES: Generated<(u32, u32, u32, FlashTuning)> = Generated::new();
    SOURCES.try_get((edge, sg, hd, tuning), || {
        let file = if edge == 16 {
            FLASH_ATTENTION16
        } else {
            FLASH_ATTENTION8
        };
        flash_attention(file, edge, sg, hd, tuning)
    })
}

/// Records the kernel for `span` with `tuning` (checked by
/// [`tuning_unusable`] here: an unfit tuning is an error).
pub(super) fn record(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    ops: &Operands<'_>,
    heads: Heads,
    span: Span,
    tuning: &FlashTuning,
) -> Result<(), GpuError> {
    const OP: &str = "flash_attention";
    if ops.q.dtype != ActDtype::F16 {
        return Err(crate::ops::kernel::bad(
            OP,
            format!("flash attention takes f16 activations, not {}", ops.q.dtype),
        ));
    }
    if let Some(why) = tuning_unusable(&gpu.caps, tuning, heads.head_dim) {
        return Err(crate::ops::kernel::bad(
            OP,
            format!("flash tuning {tuning}: {why}"),
        ));
    }
    let edge = gpu.caps.coop_matrix_edge;
    let sg = gpu.caps.subgroup_min_size;
    let hd = to_u32(OP, "head_dim", heads.head_dim)?;
    let source = source(edge, sg, hd, *tuning)
        .map_err(|why| crate::ops::kernel::bad(OP, format!("flash tuning {tuning}: {why}")))?;
    // The softmax runs on exp2: the scores' scale times log2(e).
    let scale2 = (std::f64::consts::LOG2_E / (heads.head_dim as f64).sqrt()) as f32;
    super::coop_blocks::launch_blocks(
        gpu,
        cache,
        enc,
        super::coop_blocks::BlockLaunch {
            op: OP,
            program: super::coop_blocks::BlockProgram::Wgsl {
                source,
                constants: &[],
            },
            rows: u64::from(tuning.rows),
            scale: scale2,
            params: super::coop_blocks::FlashParamsOf::OneWalk,
        },
        ops,
        heads,
        span,
    )
}

#[cfg(test)]
mod tests {
    use super::super::coop_caps as caps;
    use super::*;

    fn tuning(text: &str) -> FlashTuning {
        text.parse().expect("tuning")
    }

    #[test]
    fn defaults_fit_the_adapter() {
        // The H200: 48 KiB, 16x16 matrices, subgroups of 32.
        let h200 = caps(16, 32, 48 << 10);
        assert_eq!(default_tuning(&h200, 128), Some(tuning("128x32w8c2")));
        assert_eq!(default_tuning(&h200, 64), Some(tuning("128x32w8c2")));
        // The one-walk kernel is the default kernel wherever a tuning fits.
        assert_eq!(
            default_kernel(&h200, ActDtype::F16, 128),
            Some(FlashKernel::OneWalk(tuning("128x32w8c2")))
        );
        assert_eq!(
            remembered_default(&h200, ActDtype::F16, 128),
            default_kernel(&h200, ActDtype::F16, 128)
        );
        assert_eq!(default_kernel(&h200, ActDtype::F32, 128), None);
        // Five column tiles do not split in two.
        assert_eq!(default_tuning(&h200, 80), Some(tuning("64x64w4")));
        // 256 columns: half the keys a block, eight subgroups.
        assert_eq!(default_tuning(&h200, 256), Some(tuning("64x32w8k2c4")));
        for hd in [16u64, 32, 48, 64, 80, 96, 112, 128, 160, 192, 256] {
            let t = default_tuning(&h200, hd).expect("a default");
            assert!(tuning_unusable(&h200, &t, hd).is_none(), "{hd}: {t}");
            let g = geometry(&h200, &t, hd).expect("geometry");
            assert!(g.registers() <= DEFAULT_REGISTERS, "{hd}: {t}");
        }
        // Lavapipe's 8x8 matrices and subgroups of 8 (16 with
        // LP_NATIVE_VECTOR_WIDTH=512): up to head_dim 128 (at 256 the
        // queries alone take more registers; the scalar kernels run).
        for sg in [8, 16] {
            let lvp = caps(8, sg, 32 << 10);
            for hd in [8u64, 40, 64, 80, 128] {
                assert!(default_tuning(&lvp, hd).is_some(), "{sg} {hd}");
            }
        }
        assert!(supported(&h200, ActDtype::F32, 128).is_err());
        assert!(supported(&h200, ActDtype::F16, 72).is_err());
        assert!(default_tuning(&caps(16, 32, 4 << 10), 128).is_none());
        let mut varying = caps(16, 32, 48 << 10);
        varying.subgroup_min_size = 16;
        assert!(supported(&varying, ActDtype::F16, 128).is_err());
    }

    #[test]
    fn unfit_tunings_say_why() {
        let h200 = caps(16, 32, 48 << 10);
        let why = |t: &str, hd| tuning_unusable(&h200, &tuning(t), hd).expect("unfit");
        assert!(
            why("128x64w4", 128).contains("workgroup memory"),
            "{}",
            why("128x64w4", 128)
        );
        assert!(why("64x64w4c3", 128).contains("column groups"));
        assert!(why("64x64w4k2g", 128).contains("key group"));
        assert!(tuning_unusable(&h200, &tuning("64x64w32"), 128).is_some());
        assert!(tuning_unusable(&h200, &tuning("128x32w8c2"), 128).is_none());
    }
}
