//! Flash attention on NVIDIA's cooperative matrices 2 (SPIR-V,
//! `dynvram_shaders::spirv::CM2_FLASH`): whether a launch may take one on
//! this device, which, and its launch. The kernels compute what the one-walk
//! WGSL kernel computes (f16 in and out, f32 scores and sums, f16
//! probabilities) on workgroup-scope matrices, one module per block shape
//! and head dimension; they run only where the device enabled
//! `VK_NV_cooperative_matrix2` with every feature they use (the SPIR-V
//! kernels' switch, `GpuOptions::spirv_gemm`), the driver lists their
//! matrix shapes. The first that runs is the default there
//! (`flash::choose`), and the subgroup-scope `cm2-128x64-sg-lz` where its
//! workgroups fill two waves of the multiprocessors ([`preferred`]);
//! `DYNVRAM_FLASH` names another. Their first launches
//! on NVIDIA faulted (BENCHMARKS.md, sessions 22 and 23: the modules bound
//! wgpu's binding numbers, not Vulkan's, which `device::spirv_pipeline` now
//! checks); their reference test passed on the H100 in session 24. The
//! `FA_FAST` variants (listed last, so never the first that runs there)
//! have not run on a GPU yet.

use dynvram_shaders::flash::{Cm2Block, FlashKernel};
use dynvram_shaders::spirv::{CM2_FLASH, CM2_FLASH_LARGE, CM2_FLASH_LARGE_WAVES, Cm2Flash};

use super::coop_blocks::{
    BlockLaunch, BlockProgram, FLASH_PARAMS_BYTES, FlashParamsOf, launch_blocks,
};
use super::scalar::Operands;
use super::shape::{FlashGrid, Heads, Span};
use crate::device::cm2::{COMPONENT_F16, COMPONENT_F32, Cm2Footprint, Cm2Misfit, enabled_with};
use crate::device::{Cm2Caps, Gpu, GpuError};
use crate::ops::cache::{PipelineCache, SpirvProgram, spirv_programs};
use crate::ops::encoder::Encoder;
use crate::tensor::ActDtype;

/// The bindings of the flash kernels: q, k, v (read-only), out.
const BINDINGS: [(u32, bool); 4] = [(1, true), (2, true), (3, true), (4, false)];

/// The program of `f`: the flash bindings and the two-walk kernel's
/// `Params`.
const fn program(f: &'static Cm2Flash) -> SpirvProgram {
    SpirvProgram {
        spirv: f.spirv,
        entry: "main",
        bindings: &BINDINGS,
        immediate_size: FLASH_PARAMS_BYTES,
    }
}

/// The programs of [`CM2_FLASH`], in the same order.
static PROGRAMS: [SpirvProgram; CM2_FLASH.len()] = spirv_programs!(CM2_FLASH, program);

/// `cm2` where the device enabled every feature the flash kernels use.
fn usable(cm2: Option<&Cm2Caps>) -> Result<&Cm2Caps, String> {
    enabled_with(cm2, Cm2Caps::flash_missing_features)
}

/// Why `f` cannot run on a device with `caps` (every feature there), or
/// `None`: its matrix shapes (S = Q Kᵀ and O += P V, P and the output
/// converted to f16) and workgroup, and for subgroup-scope kernels
/// [`Cm2Caps::subgroup_misfit`]. Allocates nothing.
fn misfit(caps: &Cm2Caps, f: &Cm2Flash) -> Option<Cm2Misfit> {
    if f.subgroup > 0 {
        return caps.subgroup_misfit(f.invocations, f.shared_bytes);
    }
    caps.misfit(&Cm2Footprint {
        invocations: f.invocations,
        products: &[[f.rows, f.keys, f.head_dim], [f.rows, f.head_dim, f.keys]],
        shared_bytes: 0,
        types: [COMPONENT_F16, COMPONENT_F16, COMPONENT_F32, COMPONENT_F32],
        converted: &[COMPONENT_F16],
    })
}

/// The kernel of `block` at head dimension `hd` and its program, or why
/// there is none that runs here.
fn variant(
    cm2: Option<&Cm2Caps>,
    act: ActDtype,
    hd: u64,
    block: Cm2Block,
) -> Result<(&'static Cm2Flash, &'static SpirvProgram), String> {
    let caps = usable(cm2)?;
    if act != ActDtype::F16 {
        return Err(format!("{act} activations (the kernels take f16)"));
    }
    let (f, p) = CM2_FLASH
        .iter()
        .zip(&PROGRAMS)
        .find(|(f, _)| f.block() == block && u64::from(f.head_dim) == hd)
        .ok_or_else(|| {
            let kernel = FlashKernel::Cm2(block);
            format!("no {kernel} kernel is built for head_dim {hd}")
        })?;
    match misfit(caps, f) {
        None => Ok((f, p)),
        Some(why) => Err(format!("{}: {why}", f.name)),
    }
}

/// Why the SPIR-V flash kernel of `block` cannot run on this device with
/// `act` activations at head dimension `hd`, or `None`.
pub fn unusable(cm2: Option<&Cm2Caps>, act: ActDtype, hd: u64, block: Cm2Block) -> Option<String> {
    variant(cm2, act, hd, block).err()
}

/// The SPIR-V flash kernel that runs on this device with `act` activations
/// at head dimension `hd` over `grid`, if any: of [`CM2_FLASH_LARGE`]'s
/// kernels that fit where their workgroups fill at least
/// [`CM2_FLASH_LARGE_WAVES`] waves of the device's multiprocessors, the one
/// whose whole waves (one workgroup a multiprocessor) hold the fewest query
/// rows — the last wave's idle places counted — the first listed of equals;
/// else the first of [`CM2_FLASH`] (`grid` `None`: that one).
pub fn preferred(
    cm2: Option<&Cm2Caps>,
    act: ActDtype,
    hd: u64,
    grid: Option<FlashGrid>,
) -> Option<FlashKernel> {
    // Every launch asks: nothing allocated (no error text, no list of
    // missing features) where there is no kernel.
    let caps = cm2.filter(|c| c.flash_complete())?;
    if act != ActDtype::F16 {
        return None;
    }
    let fits =
        |f: &&Cm2Flash| f.probe == 0 && u64::from(f.head_dim) == hd && misfit(caps, f).is_none();
    let sms = u64::from(caps.sm_count);
    let waves = CM2_FLASH_LARGE_WAVES * sms;
    let large = grid.filter(|_| sms > 0).and_then(|g| {
        CM2_FLASH
            .iter()
            .filter(|f| CM2_FLASH_LARGE.contains(&f.name))
            .filter(|f| fits(f) && g.workgroups(f.rows) >= waves)
            .min_by_key(|f| g.workgroups(f.rows).div_ceil(sms) * u64::from(f.rows))
    });
    large
        .or_else(|| CM2_FLASH.iter().find(fits))
        .map(|f| FlashKernel::Cm2(f.block()))
}

/// Records the kernel of `block` for `span` (one that cannot run here is
/// an error).
pub(super) fn record(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    ops: &Operands<'_>,
    heads: Heads,
    span: Span,
    block: Cm2Block,
) -> Result<(), GpuError> {
    const OP: &str = "flash_attention";
    let (f, program) = variant(gpu.cm2(), ops.q.dtype, heads.head_dim, block).map_err(|why| {
        crate::ops::kernel::bad(OP, format!("{}: {why}", FlashKernel::Cm2(block)))
    })?;
    // The softmax runs on exp2: the scores' scale times log2(e).
    let scale2 = (std::f64::consts::LOG2_E / (heads.head_dim as f64).sqrt()) as f32;
    launch_blocks(
        gpu,
        cache,
        enc,
        BlockLaunch {
            op: f.name,
            program: BlockProgram::Spirv(program),
            rows: u64::from(f.rows),
            scale: scale2,
            params: FlashParamsOf::TwoWalk,
        },
        ops,
        heads,
        span,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::cm2::test_caps::{f16_sums, f32_sums, nvidia};

    /// f32 and f16 sums at 128 and 256 invocations.
    fn h100() -> Cm2Caps {
        nvidia(vec![
            f32_sums(128),
            f32_sums(256),
            f16_sums(128),
            f16_sums(256),
        ])
    }

    /// The plain kernel of `rows` x `keys` blocks.
    fn blk(rows: u32, keys: u32) -> Cm2Block {
        Cm2Block {
            rows,
            keys,
            fast: 0,
            probe: 0,
            subgroup: 0,
            double_buffer: false,
            lazy: false,
            q_shared: false,
        }
    }

    #[test]
    fn the_first_listed_kernel_of_the_head_dim_runs() {
        let caps = h100();
        let fast = Cm2Block {
            fast: 1,
            ..blk(64, 32)
        };
        assert_eq!(
            preferred(Some(&caps), ActDtype::F16, 128, None),
            Some(FlashKernel::Cm2(fast))
        );
        for f in &CM2_FLASH {
            assert!(unusable(Some(&caps), ActDtype::F16, 128, f.block()).is_none());
        }
        // No module for other head dims, other activations, or without
        // the extension.
        assert_eq!(preferred(Some(&caps), ActDtype::F16, 64, None), None);
        assert_eq!(preferred(Some(&caps), ActDtype::F32, 128, None), None);
        assert_eq!(preferred(None, ActDtype::F16, 128, None), None);
        let why = unusable(Some(&caps), ActDtype::F16, 64, blk(128, 64)).expect("no module");
        assert!(why.contains("head_dim 64"), "{why}");
        let why = unusable(None, ActDtype::F16, 128, blk(128, 64)).expect("no extension");
        assert!(why.contains("not enabled"), "{why}");
    }

    #[test]
    fn grids_of_two_waves_take_the_subgroup_kernel() {
        let caps = h100();
        let large = Cm2Block {
            subgroup: 1,
            lazy: true,
            ..blk(128, 64)
        };
        let first = preferred(Some(&caps), ActDtype::F16, 128, None);
        let at = |heads, rows| {
            preferred(
                Some(&caps),
                ActDtype::F16,
                128,
                Some(FlashGrid { heads, rows }),
            )
        };
        // FLUX.1's attention: 24 heads x 36 blocks of 128 rows.
        assert_eq!(at(24, 4608), Some(FlashKernel::Cm2(large)));
        // 264 workgroups, two waves of 132; one fewer is not.
        assert_eq!(at(33, 1024), Some(FlashKernel::Cm2(large)));
        assert_eq!(at(263, 128), first);
        // Prefill's 512 rows over 32 heads: 128 workgroups.
        assert_eq!(at(32, 512), first);
        // A device that does not count its multiprocessors: the first.
        let mut uncounted = caps.clone();
        uncounted.sm_count = 0;
        let grid = Some(FlashGrid {
            heads: 24,
            rows: 4608,
        });
        assert_eq!(preferred(Some(&uncounted), ActDtype::F16, 128, grid), first);
    }

    #[test]
    fn every_module_binds_the_ranks_of_its_layout() {
        for p in &PROGRAMS {
            assert_eq!(crate::device::check_bindings(p.spirv, p.bindings), Ok(()));
        }
    }

    #[test]
    fn missing_features_and_unlisted_shapes_say_why() {
        let mut caps = h100();
        caps.reductions = false;
        let why = unusable(Some(&caps), ActDtype::F16, 128, blk(128, 64)).expect("no reductions");
        assert!(why.contains("cooperativeMatrixReductions"), "{why}");
        assert_eq!(preferred(Some(&caps), ActDtype::F16, 128, None), None);
        // Without f16 accumulators the probabilities cannot be converted.
        let mut caps = h100();
        caps.flexible.retain(|d| d.types[2] == COMPONENT_F32);
        let why = unusable(Some(&caps), ActDtype::F16, 128, blk(64, 64)).expect("unlisted");
        assert!(why.contains("lists no workgroup-scope shape"), "{why}");
        // Only 256-invocation shapes listed: the 128-row kernels run.
        let mut caps = h100();
        caps.flexible.retain(|d| d.workgroup_invocations == 256);
        assert_eq!(
            preferred(Some(&caps), ActDtype::F16, 128, None),
            Some(FlashKernel::Cm2(blk(128, 32)))
        );
    }
}
