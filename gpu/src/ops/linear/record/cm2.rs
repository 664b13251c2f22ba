//! The GEMMs on NVIDIA's cooperative matrices 2 (SPIR-V,
//! `dynvram_shaders::spirv`): whether a layer may take one on this device,
//! which, and why not.
//!
//! Float layers: what the WGSL cooperative GEMM's float path computes (f16
//! activations and output, f16 or bf16 weights exact in f16, f32 sums, the
//! bias added in f32 before the one rounding), with the same bindings and
//! immediates. Integer layers: int8 codes times int8 or int4 weights summed
//! exactly in s32 (the dot4 GEMM's accumulator) and the integer epilogue,
//! f16 outputs, with the integer linears' bindings. Both on workgroup-scope
//! matrices whose staging the driver does, and only where the device
//! enabled `VK_NV_cooperative_matrix2` with every feature they use
//! ([`crate::device::Cm2Caps`]), the driver lists their matrix shapes, and
//! their own shared memory fits beside the driver's; the WGSL kernels
//! everywhere else.

use dynvram_quant::Format;
use dynvram_shaders::spirv::{CM2_GEMMS, CM2_SPLIT_GEMMS, CM2_STACK_GEMMS, LINEAR_CHECK};
pub use dynvram_shaders::spirv::{Cm2Gemm, Cm2Weights};

use crate::device::cm2::{
    COMPONENT_F16, COMPONENT_F32, COMPONENT_S8, COMPONENT_S32, Cm2Footprint, Cm2Misfit, SPLIT_MAX,
    SPLIT_MIN_K, enabled_with,
};
use crate::device::{Cm2Caps, Cm2Split};
use crate::ops::cache::{SpirvProgram, spirv_programs};
use crate::tensor::ActDtype;

/// Bindings 0 to N - 1 as (binding, read-only): read-only but those whose
/// bit `written` sets.
const fn numbered<const N: usize>(written: u32) -> [(u32, bool); N] {
    let mut b = [(0, true); N];
    let mut i = 0;
    while i < N {
        b[i] = (i as u32, written & (1 << i) == 0);
        i += 1;
    }
    b
}

/// The bindings of the float linears (`linear_float_common.wgsl`): weights,
/// weight scale, bias, activations (read-only), output.
const BINDINGS: [(u32, bool); 5] = numbered(1 << 4);

/// The bindings of the split float linears (`SPLIT` in
/// `shaders/spirv/gemm_cm2.glsl`): [`BINDINGS`], then the f32 partial sums
/// (written).
const SPLIT_BINDINGS: [(u32, bool); 6] = numbered(1 << 4 | 1 << 5);

/// The bindings of the integer linears (`linear_int_common.wgsl`): weights,
/// weight scale, bias, activation codes, their scales (read-only), output.
const INT_BINDINGS: [(u32, bool); 6] = numbered(1 << 5);

/// The bindings of the split integer linears (`SPLIT` in
/// `shaders/spirv/gemm_cm2_int.glsl`): [`INT_BINDINGS`], then the exact
/// partial sums (written).
const INT_SPLIT_BINDINGS: [(u32, bool); 7] = numbered(1 << 5 | 1 << 6);

/// The bindings of the stacked float linears (`STACK` in
/// `shaders/spirv/gemm_cm2.glsl`): [`BINDINGS`], then each further
/// weight's weights, bias (read-only) and output.
const STACK_BINDINGS: [(u32, bool); 11] = numbered(1 << 4 | 1 << 7 | 1 << 10);

/// `Params` of `shaders/spirv/cm2_params.glsl`: the push constants of the
/// cooperative-matrix-2 GEMMs and the check kernel, field for field. The
/// layout of the WGSL linears' `GemmParams` with `flags` where those have
/// the fused GEMV's `n1`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct Cm2Params {
    /// Rows of the activations.
    pub m: u32,
    /// Weight rows in this dispatch (one binding's chunk of N).
    pub n: u32,
    pub k: u32,
    /// Output column (and scale/bias index) of the chunk's first row.
    pub n_base: u32,
    /// Row stride of the output: the layer's full N.
    pub out_stride: u32,
    /// Bit 0: add the bias. Integer layers: bit 1, `acc · (s_x · s_w)`
    /// (else `(acc · s_x) · s_w`); bit 2, a weight scale per output row.
    pub flags: u32,
    /// Split kernels: K columns a split sums ([`split_span`]). Stacked
    /// kernels (`STACK`): the second weight's rows, where the first's are
    /// `n` (its output its own: `n_base` 0, `out_stride` `n`).
    pub k_span: u32,
    /// Stacked kernels: the third weight's rows (0: none). Split kernels:
    /// the row tiles before the split ones that take all of K
    /// ([`SplitPlan::whole`]).
    pub n2: u32,
}
const _: () = assert!(size_of::<Cm2Params>() == 32);

/// The program of `g` with `bindings` and [`Cm2Params`] immediates.
const fn bound(g: &'static Cm2Gemm, bindings: &'static [(u32, bool)]) -> SpirvProgram {
    SpirvProgram {
        spirv: g.spirv,
        entry: "main",
        bindings,
        immediate_size: size_of::<Cm2Params>() as u32,
    }
}

/// The program of `g`: its linears' bindings.
const fn program(g: &'static Cm2Gemm) -> SpirvProgram {
    bound(
        g,
        match g.weights {
            Cm2Weights::Int8 | Cm2Weights::Int4 => &INT_BINDINGS,
            Cm2Weights::F16 | Cm2Weights::Bf16 => &BINDINGS,
        },
    )
}

/// The programs of [`CM2_GEMMS`], in the same order.
static PROGRAMS: [SpirvProgram; CM2_GEMMS.len()] = spirv_programs!(CM2_GEMMS, program);

/// The programs of [`CM2_STACK_GEMMS`], in the same order.
static STACK_PROGRAMS: [SpirvProgram; CM2_STACK_GEMMS.len()] =
    spirv_programs!(CM2_STACK_GEMMS, stack_program);

/// The program of a stacked GEMM `g`.
const fn stack_program(g: &'static Cm2Gemm) -> SpirvProgram {
    bound(g, &STACK_BINDINGS)
}

/// The programs of [`CM2_SPLIT_GEMMS`], in the same order.
static SPLIT_PROGRAMS: [SpirvProgram; CM2_SPLIT_GEMMS.len()] =
    spirv_programs!(CM2_SPLIT_GEMMS, split_program);

/// The program of a split GEMM `g`.
const fn split_program(g: &'static Cm2Gemm) -> SpirvProgram {
    bound(
        g,
        match g.weights {
            Cm2Weights::Int8 | Cm2Weights::Int4 => &INT_SPLIT_BINDINGS,
            Cm2Weights::F16 | Cm2Weights::Bf16 => &SPLIT_BINDINGS,
        },
    )
}

/// [`LINEAR_CHECK`]'s program.
static CHECK_PROGRAM: SpirvProgram = program(&LINEAR_CHECK);

/// The SPIR-V launch path's check kernel ([`LINEAR_CHECK`]) for a float
/// layer of `format` weights on `act` activations on a device that takes
/// raw SPIR-V (`passthrough`), or why it cannot run.
pub(super) fn linear_check(
    passthrough: bool,
    format: Format,
    act: ActDtype,
) -> Result<Cm2Kernel, String> {
    if !passthrough {
        return Err("the device takes no raw SPIR-V".into());
    }
    if (format, act) != (Format::F16, ActDtype::F16) {
        return Err(format!(
            "{format} weights on {act} activations (it takes f16 on f16)"
        ));
    }
    Ok(Cm2Kernel {
        gemm: &LINEAR_CHECK,
        program: &CHECK_PROGRAM,
    })
}

/// Every cooperative-matrix-2 GEMM, in the order they are preferred.
pub fn cm2_gemms() -> &'static [Cm2Gemm] {
    &CM2_GEMMS
}

/// The cooperative-matrix-2 GEMM named `name` (as `probe` and
/// `RecordOptions::cm2_kernel` name them), if there is one.
pub fn cm2_named(name: &str) -> Option<&'static Cm2Gemm> {
    CM2_GEMMS.iter().find(|g| g.name == name)
}

/// The weights of the cooperative-matrix-2 GEMMs a layer of `format` could
/// take (none for the other formats).
pub fn cm2_weights_of(format: Format) -> Option<Cm2Weights> {
    match format {
        Format::F16 => Some(Cm2Weights::F16),
        Format::Bf16 => Some(Cm2Weights::Bf16),
        Format::ConvrotW4a4 { .. } => Some(Cm2Weights::Int4),
        Format::Int8Tensorwise { .. } => Some(Cm2Weights::Int8),
        _ => None,
    }
}

/// A cooperative-matrix-2 GEMM chosen for a layer.
#[derive(Debug, Clone, Copy)]
pub struct Cm2Kernel {
    /// The kernel and its tile.
    pub gemm: &'static Cm2Gemm,
    /// Its pipeline's program.
    pub(crate) program: &'static SpirvProgram,
}

/// The SPIR-V GEMM a float layer of weight `format` on `act` activations
/// takes on a device with `cm2` (what it enabled of the extension, `None`
/// where it did not) — the first of [`CM2_GEMMS`] that fits, or the one
/// named `only` — or why none can.
pub fn cm2_gemm(
    cm2: Option<&Cm2Caps>,
    format: Format,
    act: ActDtype,
    only: Option<&str>,
) -> Result<Cm2Kernel, String> {
    let caps = usable(cm2)?;
    if act != ActDtype::F16 {
        return Err(format!(
            "{act} activations (the SPIR-V GEMM takes f16 activations)"
        ));
    }
    let weights = match format {
        Format::F16 => Cm2Weights::F16,
        Format::Bf16 => Cm2Weights::Bf16,
        other => {
            return Err(format!(
                "{other} weights (the SPIR-V GEMM reads f16 and bf16)"
            ));
        }
    };
    pick(caps, weights, only)
}

/// The SPIR-V GEMM an integer layer takes (int4 weights or int8 ones,
/// `w4`; activation codes in natural column order) on a device with `cm2`,
/// for `act` outputs (f16 only) and the integer epilogue (`raw`: the raw
/// accumulator, which these kernels do not write) — the first of
/// [`CM2_GEMMS`] that fits, or the one named `only` — or why none can.
pub fn cm2_int_gemm(
    cm2: Option<&Cm2Caps>,
    w4: bool,
    act: ActDtype,
    raw: bool,
    only: Option<&str>,
) -> Result<Cm2Kernel, String> {
    let caps = usable(cm2)?;
    if act != ActDtype::F16 {
        return Err(format!(
            "{act} outputs (the integer SPIR-V GEMM writes f16)"
        ));
    }
    if raw {
        return Err("the raw accumulator (an f32 output)".into());
    }
    let weights = if w4 {
        Cm2Weights::Int4
    } else {
        Cm2Weights::Int8
    };
    pick(caps, weights, only)
}

/// Whether a layer of `weights`, `converted` to them a piece at a time
/// first or read as stored, may take the kernel for small grids. int4
/// widened to int8 keeps the first kernel (the small-grid tiles are
/// unmeasured there); bf16 through f16 takes them as f16 does (session 28,
/// H100, 512 rows: 121.9 against 104.4 TFLOP/s at 4096 x 4096, 132.4
/// against 112.4 at 4096 x 11008; session 27's 32.7 was a first use).
pub(super) fn small_grids_for(weights: Cm2Weights, converted: bool) -> bool {
    !(converted && weights.integer())
}

/// The kernel a layer of `weights` (`converted` to them first, or read as
/// stored) takes on this device where the first choice's tiles fill at
/// most half the multiprocessors, if the device counts them and one fits
/// (`probe` names it).
pub fn cm2_small_grid(
    cm2: &Cm2Caps,
    weights: Cm2Weights,
    converted: bool,
) -> Option<&'static Cm2Gemm> {
    if cm2.sm_count == 0 || !small_grids_for(weights, converted) {
        return None;
    }
    CM2_GEMMS
        .iter()
        .find(|g| g.small_grids && g.weights == weights && fits(cm2, g).is_ok())
}

/// Column tiles from which a grid takes the grouped twin of its kernel
/// ([`Cm2Gemm::group_m`]): where the weight panels a wave of workgroups
/// reads in the ungrouped order (whole rows of tiles) outgrow L2. On the
/// H100 (session 34) grouped won at 36, 48 and 84 column tiles of 128 x
/// 256 (up to 14 %) and lost at 12 (1-2 %, int8 up to 21 %).
pub const GROUPED_MIN_COLUMN_TILES: u64 = 32;

/// The twin of `g` whose workgroups take their tiles in groups of row
/// tiles, on this device, if one fits: the kernel of grids of at least
/// [`GROUPED_MIN_COLUMN_TILES`] column tiles (`probe` names it).
pub fn cm2_grouped(cm2: &Cm2Caps, g: &Cm2Gemm) -> Option<&'static Cm2Gemm> {
    grouped_twin(cm2, g).map(|(g, _)| g)
}

fn grouped_twin(cm2: &Cm2Caps, g: &Cm2Gemm) -> Option<(&'static Cm2Gemm, &'static SpirvProgram)> {
    CM2_GEMMS.iter().zip(&PROGRAMS).find(|(t, _)| {
        t.group_m > 0
            && g.group_m == 0
            && !t.persistent
            && t.weights == g.weights
            && (t.tile_m, t.tile_n, t.tile_k, t.invocations)
                == (g.tile_m, g.tile_n, g.tile_k, g.invocations)
            && fits(cm2, t).is_ok()
    })
}

/// The split-K variant of `g` on this device (where small grids split K,
/// `Cm2Split`), if it has one that fits (`probe` names it).
pub fn cm2_split_gemm(cm2: &Cm2Caps, g: &Cm2Gemm) -> Option<&'static Cm2Gemm> {
    split_variant(cm2, g).map(|k| k.gemm)
}

/// The GEMM that takes up to three f16 layers of one input in one launch
/// on a device with `cm2` ([`CM2_STACK_GEMMS`]), its tiles in groups of
/// row tiles where `grouped` asks (`Cm2Stack::Grouped`), if one fits.
pub fn cm2_stack_gemm(cm2: Option<&Cm2Caps>, grouped: bool) -> Option<Cm2Kernel> {
    let caps = usable(cm2).ok()?;
    CM2_STACK_GEMMS
        .iter()
        .zip(&STACK_PROGRAMS)
        .find(|(g, _)| (g.group_m > 0) == grouped && fits(caps, g).is_ok())
        .map(|(gemm, program)| Cm2Kernel { gemm, program })
}

/// `cm2` where the device enabled every feature the GEMMs use.
fn usable(cm2: Option<&Cm2Caps>) -> Result<&Cm2Caps, String> {
    enabled_with(cm2, Cm2Caps::missing_features)
}

/// Whether a choice of the kernel named `only` (any, where `None`) may
/// take `g`: the subgroup-scope kernels by name only (not yet measured on
/// a GPU).
fn considered(g: &Cm2Gemm, only: Option<&str>) -> bool {
    only.map_or(!g.subgroup, |n| n == g.name)
}

/// The first kernel of `weights` (named `only`, where given) that fits.
fn pick(caps: &Cm2Caps, weights: Cm2Weights, only: Option<&str>) -> Result<Cm2Kernel, String> {
    let mut why = Vec::new();
    for (g, program) in CM2_GEMMS.iter().zip(&PROGRAMS) {
        if g.weights != weights || !considered(g, only) {
            continue;
        }
        match fits(caps, g) {
            Ok(()) => return Ok(Cm2Kernel { gemm: g, program }),
            Err(w) => why.push(format!("{} ({:?}): {w}", g.name, g.weights)),
        }
    }
    if why.is_empty() {
        return Err(format!(
            "no {weights:?} kernel named {}",
            only.unwrap_or_default()
        ));
    }
    Err(why.join("; "))
}

/// Whether `g` fits the device's limits and a listed matrix shape (its
/// subgroups', [`Cm2Caps::subgroup_misfit`], for subgroup-scope kernels).
fn fits(caps: &Cm2Caps, g: &Cm2Gemm) -> Result<(), Cm2Misfit> {
    if g.subgroup {
        return caps
            .subgroup_misfit(g.invocations, g.shared_bytes)
            .map_or(Ok(()), Err);
    }
    let types = if g.weights.integer() {
        [COMPONENT_S8, COMPONENT_S8, COMPONENT_S32, COMPONENT_S32]
    } else {
        [COMPONENT_F16, COMPONENT_F16, COMPONENT_F32, COMPONENT_F32]
    };
    // The accumulator converted for the epilogue (f32, integer kernels) and
    // for the store (f16).
    let converted = [COMPONENT_F16, COMPONENT_F32];
    let footprint = Cm2Footprint {
        invocations: g.invocations,
        products: &[[g.tile_m, g.tile_n, g.tile_k]],
        shared_bytes: g.shared_bytes,
        types,
        converted: &converted[..if g.weights.integer() { 2 } else { 1 }],
    };
    caps.misfit(&footprint).map_or(Ok(()), Err)
}

/// The weights of a float layer's SPIR-V GEMM: `format` f16 or bf16 on f16
/// activations, else none ([`cm2_gemm`] says why).
pub(super) fn float_weights(format: Format, act: ActDtype) -> Option<Cm2Weights> {
    match (format, act) {
        (Format::F16, ActDtype::F16) => Some(Cm2Weights::F16),
        (Format::Bf16, ActDtype::F16) => Some(Cm2Weights::Bf16),
        _ => None,
    }
}

/// The weights of an integer layer's SPIR-V GEMM (f16 outputs, the scaled
/// epilogue), else none ([`cm2_int_gemm`] says why).
pub(super) fn int_weights(w4: bool, act: ActDtype, raw: bool) -> Option<Cm2Weights> {
    match (act, raw) {
        (ActDtype::F16, false) if w4 => Some(Cm2Weights::Int4),
        (ActDtype::F16, false) => Some(Cm2Weights::Int8),
        _ => None,
    }
}

/// The launch path's choice for a GEMM of `grid` (M, N; `None`: the
/// first kernel whatever the grid; `small_grids`: whether the kernels for
/// small grids may take it) over `k` columns: what [`pick`] picks,
/// without formatting why not (none where a feature is missing) — unless a
/// kernel was named, the first kernel for small grids instead where the
/// first choice's tiles fill at most half the multiprocessors and `split`
/// does not split its K there ([`splits`]), or the kernel named `large`
/// (where it is of these weights and fits) where they fill more of its
/// grid (M, N), or else the first choice's grouped twin ([`cm2_grouped`])
/// where its grid has at least [`GROUPED_MIN_COLUMN_TILES`] column tiles
/// and is not small.
pub(super) fn fitting(
    caps: &Cm2Caps,
    weights: Cm2Weights,
    (only, large): (Option<&str>, Option<LargeGrid<'_>>),
    (grid, small_grids): (Option<(u64, u64)>, bool),
    (split, k): (Cm2Split, u64),
) -> Option<Cm2Kernel> {
    let shape = grid.filter(|_| small_grids);
    if !caps.complete() {
        return None;
    }
    let mut kernels = CM2_GEMMS
        .iter()
        .zip(&PROGRAMS)
        .filter(|(g, _)| g.weights == weights && fits(caps, g).is_ok());
    let (gemm, program) = kernels.clone().find(|(g, _)| considered(g, only))?;
    if only.is_none()
        && !gemm.small_grids
        && shape.is_some_and(|shape| {
            small_grid(caps, gemm, shape) && split_of(caps, split, gemm, shape, k).is_none()
        })
        && let Some((gemm, program)) = kernels.clone().find(|(g, _)| g.small_grids)
    {
        return Some(Cm2Kernel { gemm, program });
    }
    if only.is_none()
        && let Some((name, grid)) = large
        && !small_grid(caps, gemm, grid)
        && let Some((gemm, program)) = kernels.find(|(g, _)| g.name == name)
    {
        return Some(Cm2Kernel { gemm, program });
    }
    // Not on small grids: one wave, nothing to reuse across waves, and
    // their split-K variants are the plain kernel's.
    if only.is_none()
        && grid.is_some_and(|g| {
            g.1.div_ceil(u64::from(gemm.tile_n)) >= GROUPED_MIN_COLUMN_TILES
                && !small_grid(caps, gemm, g)
        })
        && let Some((gemm, program)) = grouped_twin(caps, gemm)
    {
        return Some(Cm2Kernel { gemm, program });
    }
    Some(Cm2Kernel { gemm, program })
}

/// A kernel asked for on large grids (`GpuOptions::cm2_large`) and the
/// layer's grid (M, N).
pub(super) type LargeGrid<'a> = (&'a str, (u64, u64));

/// Whether `g`'s tiles over `shape` (M, N) fill at most half the device's
/// multiprocessors (never where it does not say how many): then tiles of
/// half the width, twice as many, still run in one wave. On the H100 (132)
/// the 128-wide tiles won at 64 of 128 x 256 (512 x 4096: f16 159 against
/// 127 TFLOP/s, int8 233 against 177 TOPS) and lost at 96 (1024-row chunks
/// of 4608 x 3072 x 15360, int8 206 against 262).
fn small_grid(caps: &Cm2Caps, g: &Cm2Gemm, shape: (u64, u64)) -> bool {
    2 * tiles(g, shape) <= u64::from(caps.sm_count)
}

/// The grid of the stacked GEMM `g` over layers of `rows` weight rows
/// each at `m` rows: (its tiles along N, every layer's after the one
/// before, and along M).
pub(super) fn stack_grid(g: &Cm2Gemm, rows: impl IntoIterator<Item = u64>, m: u64) -> (u64, u64) {
    let cols = rows
        .into_iter()
        .map(|n| n.div_ceil(u64::from(g.tile_n)))
        .sum();
    (cols, m.div_ceil(u64::from(g.tile_m)))
}

/// Whether layers of `ns` weight rows each at `m` rows gain from one
/// launch of the stacked GEMM `g` ([`Cm2Stack::Auto`](crate::device::Cm2Stack)):
/// where a layer alone is a small grid ([`small_grid`]: it would split K
/// or take narrower tiles one by one), or where the stacked tiles take more
/// than 5 points more of the places of their whole waves of the device's
/// multiprocessors than the first layer's alone; always where the device
/// does not count them. On the H100 (132), 512 rows (BENCHMARKS.md, sessions 31 and 33):
/// Llama-7B's q/k/v (64 tiles each) and gate/up (172 tiles, 65 % of their
/// last wave, stacked 344, 87 %: 157 → 191 TFLOP/s) and Llama-3-8B's
/// q/k/v (64 + 16 + 16 tiles: 7.6 → 5.0 ms) gain; Llama-3-8B's gate/up
/// (224 tiles, 85 % either way) lost (197 → 180 TFLOP/s).
pub(super) fn stack_pays(
    caps: &Cm2Caps,
    g: &Cm2Gemm,
    mut ns: impl Iterator<Item = u64> + Clone,
    m: u64,
) -> bool {
    let sms = u64::from(caps.sm_count);
    if sms == 0 || ns.clone().any(|n| small_grid(caps, g, (m, n))) {
        return true;
    }
    // Percent of the places of whole waves the tiles take.
    let fill = |tiles: u64| 100 * tiles / (tiles.div_ceil(sms) * sms).max(1);
    let (cols, rows) = stack_grid(g, ns.clone(), m);
    let first = ns.next().map_or(0, |n| tiles(g, (m, n)));
    fill(cols * rows) > fill(first) + 5
}

/// The tiles of `g` over `(m, n)`.
fn tiles(g: &Cm2Gemm, (m, n): (u64, u64)) -> u64 {
    m.div_ceil(u64::from(g.tile_m)) * n.div_ceil(u64::from(g.tile_n))
}

/// How a GEMM's K splits ([`splits`]): the row tiles that take all of K,
/// first in the grid, then the rest split in `splits` parts of `span`
/// columns each (the last may be shorter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SplitPlan {
    /// K columns a split sums.
    pub span: u64,
    /// Splits of each tile past the whole ones (1: none).
    pub splits: u64,
    /// Row tiles taken whole, before the split ones.
    pub whole: u64,
}

impl SplitPlan {
    /// All of `k` in one piece: no split.
    pub fn unsplit(k: u64) -> Self {
        Self {
            span: k,
            splits: 1,
            whole: 0,
        }
    }

    /// The rows of `m` that split (`m` where every tile does), of tiles
    /// `tile_m` high.
    pub fn split_rows(&self, m: u64, tile_m: u32) -> u64 {
        m.saturating_sub(self.whole * u64::from(tile_m))
    }
}

/// How K of a GEMM of `g`'s tiles over `(m, n)` x `k` splits under
/// `split` on a device of `sm_count` multiprocessors (0: unknown); 1 split
/// for none. [`Cm2Split::Auto`] and [`Cm2Split::Waves`]: as many as fill
/// the device where the tiles fill at most half of it and K is at least
/// [`SPLIT_MIN_K`], at most [`SPLIT_MAX`] — at most one wave of
/// workgroups, so the partial sums are at most `sm_count` tiles of f32.
/// [`Cm2Split::Waves`] too: where the grid's last wave is at most half
/// full, the row tiles holding it ([`last_wave_split`]), integer kernels
/// as well (bit for bit the unsplit output on the H100, session 37; int4
/// FLUX.1's `linear2` 37.7 -> 33.6 ms a step). Integer kernels do not
/// split small grids (unmeasured) unless asked by count
/// ([`Cm2Split::Splits`]).
pub(super) fn splits(
    split: Cm2Split,
    sm_count: u32,
    g: &Cm2Gemm,
    shape: (u64, u64),
    k: u64,
) -> SplitPlan {
    let (sms, tiles) = (u64::from(sm_count), tiles(g, shape));
    let (want, whole) = match split {
        Cm2Split::Off => (1, 0),
        Cm2Split::Splits(n) => (u64::from(n), 0),
        _ if sms == 0 || k < SPLIT_MIN_K => (1, 0),
        // The integer kernels' small grids unmeasured split: whole.
        _ if 2 * tiles <= sms && g.weights.integer() => (1, 0),
        _ if 2 * tiles <= sms => ((sms / tiles).min(SPLIT_MAX), 0),
        Cm2Split::Auto => (1, 0),
        Cm2Split::Waves => last_wave_split(sms, g, shape),
    };
    let (span, splits) = split_span(k, want);
    SplitPlan {
        span,
        splits,
        whole: if splits > 1 { whole } else { 0 },
    }
}

/// Where the last wave of `g`'s tiles over `(m, n)` on `sms`
/// multiprocessors is at most half full: (the splits of the row tiles that
/// hold it, as many as fill the places the whole tiles leave in their last
/// wave, at most [`SPLIT_MAX`]; the row tiles before them); else `(1, 0)`.
/// One workgroup of 128 x 256 a multiprocessor: FLUX.1's `linear2` (4608 x
/// 3072, 36 x 12 tiles, 432 on 132) runs 33 row tiles whole (three waves)
/// and the last 3 (36 tiles) in 3 splits.
fn last_wave_split(sms: u64, g: &Cm2Gemm, (m, n): (u64, u64)) -> (u64, u64) {
    let last = tiles(g, (m, n)) % sms;
    if last == 0 || 2 * last > sms {
        return (1, 0);
    }
    let cols = n.div_ceil(u64::from(g.tile_n));
    let rows = m.div_ceil(u64::from(g.tile_m));
    let tail = last.div_ceil(cols).min(rows);
    let whole = rows - tail;
    // The places the whole tiles leave free in their last wave.
    let room = sms - (whole * cols) % sms;
    ((room / (tail * cols)).min(SPLIT_MAX), whole)
}

/// The K columns each split sums and the splits that makes, for `k` in
/// `want` parts: spans of whole 256 columns (a multiple of every kernel's
/// unrolled steps), none empty; `(k, 1)` unsplit.
pub(super) fn split_span(k: u64, want: u64) -> (u64, u64) {
    if want < 2 || k == 0 {
        return (k, 1);
    }
    let span = k.div_ceil(want).div_ceil(256) * 256;
    match k.div_ceil(span) {
        1 => (k, 1),
        splits => (span, splits),
    }
}

/// Bytes of f32 partial sums a GEMM over `(m, n)` split in `splits` parts
/// writes.
pub(super) fn split_partial_bytes(splits: u64, (m, n): (u64, u64)) -> u64 {
    // Whole 16 bytes: the sum reads them as vec4s.
    (splits * m * n * 4).next_multiple_of(16)
}

/// The split-K variant of `g` and its [`SplitPlan`] for a GEMM over
/// `shape` (M, N) x `k` where `split` splits it there ([`splits`]) and `g`
/// has a variant that fits the device.
pub(super) fn split_of(
    caps: &Cm2Caps,
    split: Cm2Split,
    g: &Cm2Gemm,
    shape: (u64, u64),
    k: u64,
) -> Option<(Cm2Kernel, SplitPlan)> {
    let plan = splits(split, caps.sm_count, g, shape, k);
    if plan.splits < 2 {
        return None;
    }
    Some((split_variant(caps, g)?, plan))
}

/// The split-K variant of `g` (`NAME_split`, [`CM2_SPLIT_GEMMS`]) where
/// there is one and it fits the device.
pub(super) fn split_variant(caps: &Cm2Caps, g: &Cm2Gemm) -> Option<Cm2Kernel> {
    CM2_SPLIT_GEMMS
        .iter()
        .zip(&SPLIT_PROGRAMS)
        .find(|(s, _)| s.name.strip_suffix("_split") == Some(g.name) && fits(caps, s).is_ok())
        .map(|(gemm, program)| Cm2Kernel { gemm, program })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Cm2Stack;
    use crate::device::cm2::test_caps::{f16_sums, f32_sums};
    use crate::device::cm2::{FlexibleDims, SCOPE_WORKGROUP};

    /// An H100-like device (`test_caps::nvidia`): 16-granular f16 workgroup
    /// shapes of 128 and 256 invocations, f16 sums of 256 (int8 ones:
    /// [`with_int8`]).
    fn nvidia() -> Cm2Caps {
        crate::device::cm2::test_caps::nvidia(vec![f32_sums(128), f32_sums(256), f16_sums(256)])
    }

    /// `caps` listing s8 x s8 + s32 workgroup shapes of 256 invocations,
    /// 32-granular in K.
    fn with_int8(mut caps: Cm2Caps) -> Cm2Caps {
        caps.flexible.push(FlexibleDims {
            m_granularity: 16,
            n_granularity: 16,
            k_granularity: 32,
            types: [COMPONENT_S8, COMPONENT_S8, COMPONENT_S32, COMPONENT_S32],
            scope: SCOPE_WORKGROUP,
            workgroup_invocations: 256,
        });
        caps
    }

    #[test]
    fn small_grids_split_k_where_it_is_long_enough_and_the_kernel_can() {
        assert_eq!(split_span(4096, 2), (2048, 2));
        assert_eq!(split_span(11008, 2), (5632, 2));
        // Spans of whole 256 columns: 3 x 1536 covers 4100, none empty.
        assert_eq!(split_span(4100, 3), (1536, 3));
        assert_eq!(split_span(1028, 8), (256, 5));
        assert_eq!(split_span(36, 2), (36, 1));
        assert_eq!(split_span(4096, 1), (4096, 1));
        assert_eq!(split_span(0, 4), (0, 1));
        let caps = nvidia();
        let first = cm2_named("gemm_cm2_f16_k32_fast").expect("listed");
        let prefill = (512, 4096);
        let plan = |split, shape, k| {
            let p = splits(split, 132, first, shape, k);
            (p.span, p.splits, p.whole)
        };
        // 64 tiles of 128 x 256 on 132: two splits, every tile.
        assert_eq!(plan(Cm2Split::Auto, prefill, 4096), (2048, 2, 0));
        assert_eq!(plan(Cm2Split::Waves, prefill, 4096), (2048, 2, 0));
        // 16 tiles: eight (the cap); K too short: none; a grid whose last
        // wave is 91 % full (3024 tiles): none.
        assert_eq!(plan(Cm2Split::Auto, (512, 1024), 4096).1, 8);
        assert_eq!(plan(Cm2Split::Auto, prefill, 1024).1, 1);
        assert_eq!(plan(Cm2Split::Waves, (4608, 21504), 3072).1, 1);
        assert_eq!(splits(Cm2Split::Auto, 0, first, prefill, 4096).splits, 1);
        assert_eq!(plan(Cm2Split::Off, prefill, 4096).1, 1);
        assert_eq!(plan(Cm2Split::Splits(3), (4608, 12288), 4100), (1536, 3, 0));
        // FLUX.1's linear2: 432 tiles, the last wave 36 (27 %): 33 row
        // tiles whole, the last 3 in 3 splits (108 workgroups), where last
        // waves split.
        let linear2 = (4608, 3072);
        assert_eq!(plan(Cm2Split::Waves, linear2, 15360), (5120, 3, 33));
        assert_eq!(plan(Cm2Split::Auto, linear2, 15360).1, 1);
        assert_eq!(plan(Cm2Split::Waves, linear2, 1024).1, 1);
        // 1152 tiles (4096 x 9216), the last wave 96 (73 %): whole.
        assert_eq!(plan(Cm2Split::Waves, (4096, 9216), 3072).1, 1);
        // 144 tiles (512 x 9216): the last 12 tiles' row tile holds 36, more
        // than the 24 places the whole ones leave: whole.
        assert_eq!(plan(Cm2Split::Waves, (512, 9216), 3072).1, 1);
        // 13 row tiles of 12 (156): 11 whole waves' rows, the last 2 row
        // tiles (24 tiles) in 5 splits (120 of the 132 places); 14 of 10
        // (140): the last row tile (10 tiles) beside 130 whole ones has 2
        // places: whole.
        let p = splits(Cm2Split::Waves, 132, first, (13 * 128, 12 * 256), 8192);
        assert_eq!((p.span, p.splits, p.whole), (1792, 5, 11));
        assert_eq!(p.split_rows(13 * 128 - 5, 128), 2 * 128 - 5);
        assert_eq!(plan(Cm2Split::Waves, (14 * 128, 10 * 256), 8192).1, 1);
        // The integer kernels split alike, or by count as asked.
        let int8 = cm2_named("gemm_cm2_w8_k64_fast").expect("listed");
        assert_eq!(splits(Cm2Split::Waves, 132, int8, linear2, 15360).splits, 3);
        assert_eq!(
            splits(Cm2Split::Splits(2), 132, int8, linear2, 15360).splits,
            2
        );
        let split = split_variant(&caps, first).expect("a split variant");
        assert_eq!(split.gemm.name, "gemm_cm2_f16_k32_fast_split");
        assert_eq!(
            (split.gemm.tile_m, split.gemm.tile_n, split.gemm.weights),
            (first.tile_m, first.tile_n, first.weights)
        );
        // The other kernels have none.
        let narrow = cm2_named("gemm_cm2_f16_n128_fast").expect("listed");
        assert!(split_variant(&caps, narrow).is_none());
        // Where K splits, the first kernel stays (its split runs); where it
        // does not, the narrower tiles.
        let pick = |split, k| {
            fitting(
                &caps,
                Cm2Weights::F16,
                (None, None),
                (Some(prefill), true),
                (split, k),
            )
            .map(|k| k.gemm.name)
        };
        assert_eq!(pick(Cm2Split::Auto, 4096), Some("gemm_cm2_f16_k32_fast"));
        // A kernel asked for on large grids: taken there, not on small
        // ones, nor for other weights.
        let sg = "gemm_sg_f16_128x128k32w64x64";
        let large = |weights, shape, small: bool| {
            let named = (None, Some((sg, shape)));
            let small = small.then_some(shape);
            fitting(&caps, weights, named, (small, true), (Cm2Split::Auto, 3072))
                .map(|k| k.gemm.name)
        };
        assert_eq!(large(Cm2Weights::F16, (4608, 12288), true), Some(sg));
        assert_eq!(
            large(Cm2Weights::F16, prefill, true),
            Some("gemm_cm2_f16_k32_fast")
        );
        // Where small grids take no other kernel, still not on them.
        assert_eq!(
            large(Cm2Weights::F16, prefill, false),
            Some("gemm_cm2_f16_k32_fast")
        );
        assert_eq!(
            large(Cm2Weights::Bf16, (4608, 12288), true),
            Some("gemm_cm2_bf16_k32")
        );
        assert_eq!(pick(Cm2Split::Auto, 1024), Some("gemm_cm2_f16_n128_fast"));
        assert_eq!(pick(Cm2Split::Off, 4096), Some("gemm_cm2_f16_n128_fast"));
        assert_eq!(split_partial_bytes(2, prefill), 2 * 512 * 4096 * 4);
        for (s, want) in [
            ("auto", Cm2Split::Auto),
            ("waves", Cm2Split::Waves),
            ("off", Cm2Split::Off),
            ("1", Cm2Split::Off),
            ("3", Cm2Split::Splits(3)),
        ] {
            assert_eq!(s.parse::<Cm2Split>(), Ok(want), "{s}");
        }
        assert!("65".parse::<Cm2Split>().is_err());
        assert!("many".parse::<Cm2Split>().is_err());
    }

    #[test]
    fn subgroup_scope_gemms_need_32_lane_subgroups_and_their_shared_memory() {
        let g = cm2_named("gemm_sg_f16_128x128k32w64x64").expect("listed");
        assert!(g.subgroup && g.shared_bytes == 40 << 10);
        let mut caps = nvidia();
        assert_eq!(fits(&caps, g), Ok(()));
        // The driver's reservation is for workgroup-scope matrices.
        caps.reserved_shared_memory = 32 << 10;
        assert_eq!(fits(&caps, g), Ok(()));
        caps.max_shared_memory = 32 << 10;
        assert_eq!(
            fits(&caps, g),
            Err(Cm2Misfit::Shared(40 << 10, 32 << 10, 0))
        );
        let mut wide = nvidia();
        wide.subgroup_size = 64;
        assert_eq!(fits(&wide, g), Err(Cm2Misfit::Subgroup(128, 64)));
        // Never the first choice: by name only.
        assert_ne!(
            pick(&nvidia(), Cm2Weights::F16, None).map(|k| k.gemm.subgroup),
            Ok(true)
        );
        for (s, want) in [
            ("off", Cm2Stack::Off),
            ("on", Cm2Stack::Auto),
            ("auto", Cm2Stack::Auto),
            ("always", Cm2Stack::Always),
            ("grouped", Cm2Stack::Grouped),
        ] {
            assert_eq!(s.parse::<Cm2Stack>(), Ok(want), "{s}");
        }
        assert!("yes".parse::<Cm2Stack>().is_err());
    }

    #[test]
    fn every_module_binds_the_ranks_of_its_layout() {
        for p in PROGRAMS
            .iter()
            .chain(&SPLIT_PROGRAMS)
            .chain([&CHECK_PROGRAM])
        {
            assert_eq!(crate::device::check_bindings(p.spirv, p.bindings), Ok(()));
        }
    }

    fn name(r: Result<Cm2Kernel, String>) -> Result<&'static str, String> {
        r.map(|k| k.gemm.name)
    }

    #[test]
    fn the_launch_path_picks_what_the_explained_choice_picks() {
        let mut tight = with_int8(nvidia());
        tight.reserved_shared_memory = 32 << 10;
        let mut partial = with_int8(nvidia());
        partial.tensor_addressing = false;
        let all = [
            Cm2Weights::F16,
            Cm2Weights::Bf16,
            Cm2Weights::Int8,
            Cm2Weights::Int4,
        ];
        for caps in [nvidia(), with_int8(nvidia()), tight, partial] {
            for weights in all {
                for only in [None, Some("gemm_cm2_bf16_n128"), Some("gemm_cm2_w4_k32")] {
                    let explained = usable(Some(&caps))
                        .and_then(|c| pick(c, weights, only))
                        .ok()
                        .map(|k| k.gemm.name);
                    let fast = fitting(
                        &caps,
                        weights,
                        (only, None),
                        (None, true),
                        (Cm2Split::Auto, 4096),
                    )
                    .map(|k| k.gemm.name);
                    assert_eq!(fast, explained, "{weights:?} {only:?}");
                }
            }
        }
        assert_eq!(
            float_weights(Format::Bf16, ActDtype::F16),
            Some(Cm2Weights::Bf16)
        );
        assert_eq!(float_weights(Format::Bf16, ActDtype::F32), None);
        assert_eq!(float_weights(Format::F32, ActDtype::F16), None);
        assert_eq!(
            int_weights(true, ActDtype::F16, false),
            Some(Cm2Weights::Int4)
        );
        assert_eq!(int_weights(false, ActDtype::F16, true), None);
        assert_eq!(int_weights(false, ActDtype::F32, false), None);
    }

    #[test]
    fn small_grids_take_the_narrower_tiles_where_the_device_counts_its_multiprocessors() {
        let caps = with_int8(nvidia());
        let mut uncounted = caps.clone();
        uncounted.sm_count = 0;
        let named = Some("gemm_cm2_f16_k32");
        // (device, weights, kernel named, M x N, the kernel taken)
        let cases = [
            // 4 x 16 tiles of 128 x 256: half of 132 multiprocessors.
            (
                &caps,
                Cm2Weights::F16,
                None,
                (512, 4096),
                "gemm_cm2_f16_n128_fast",
            ),
            (
                &caps,
                Cm2Weights::Int8,
                None,
                (512, 4096),
                "gemm_cm2_w8_n128_fast",
            ),
            // The staged int4 kernels have no kernel for small grids.
            (
                &caps,
                Cm2Weights::Int4,
                None,
                (512, 4096),
                "gemm_cm2_w4_k64",
            ),
            // 4 x 43 and 8 x 12 tiles: more than half; 43 column tiles,
            // in groups of row tiles.
            (
                &caps,
                Cm2Weights::F16,
                None,
                (512, 11008),
                "gemm_cm2_f16_k32_fast_g8",
            ),
            (
                &caps,
                Cm2Weights::F16,
                None,
                (4608, 21504),
                "gemm_cm2_f16_k32_fast_g8",
            ),
            (
                &caps,
                Cm2Weights::Int8,
                None,
                (4096, 12288),
                "gemm_cm2_w8_k64_fast_g8",
            ),
            // 43 column tiles in one row tile: a small grid, its kernel,
            // not grouped.
            (
                &caps,
                Cm2Weights::F16,
                None,
                (128, 11008),
                "gemm_cm2_f16_n128_fast",
            ),
            // 31 column tiles: not grouped.
            (
                &caps,
                Cm2Weights::F16,
                None,
                (4608, 7936),
                "gemm_cm2_f16_k32_fast",
            ),
            (
                &caps,
                Cm2Weights::Int8,
                None,
                (1024, 3072),
                "gemm_cm2_w8_k64_fast",
            ),
            (
                &caps,
                Cm2Weights::F16,
                None,
                (4608, 3072),
                "gemm_cm2_f16_k32_fast",
            ),
            // A kernel named is taken as named.
            (
                &caps,
                Cm2Weights::F16,
                named,
                (512, 4096),
                "gemm_cm2_f16_k32",
            ),
            // A driver that does not count its multiprocessors: the first.
            (
                &uncounted,
                Cm2Weights::F16,
                None,
                (512, 4096),
                "gemm_cm2_f16_k32_fast",
            ),
        ];
        for (caps, weights, only, shape, want) in cases {
            let got = fitting(
                caps,
                weights,
                (only, None),
                (Some(shape), true),
                (Cm2Split::Off, 4096),
            )
            .map(|k| k.gemm.name);
            assert_eq!(got, Some(want), "{weights:?} {only:?} {shape:?}");
        }
        // A kernel named for large grids is taken there as named.
        let got = fitting(
            &caps,
            Cm2Weights::F16,
            (None, Some(("gemm_cm2_f16_k32_fast", (4608, 21504)))),
            (Some((4608, 21504)), true),
            (Cm2Split::Off, 3072),
        )
        .map(|k| k.gemm.name);
        assert_eq!(got, Some("gemm_cm2_f16_k32_fast"));
        // The automatic choice for `weights` over `grid` (`small`: whether
        // the kernels for small grids may take it).
        let auto = |weights, grid, small| {
            fitting(
                &caps,
                weights,
                (None, None),
                (grid, small),
                (Cm2Split::Auto, 4096),
            )
            .map(|k| k.gemm.name)
        };
        // Kernels for small grids not allowed (int4 widened first): the
        // first kernel, grouped on many column tiles but for small grids
        // (there split K takes the plain kernel's variant).
        assert_eq!(
            auto(Cm2Weights::F16, Some((128, 11008)), true),
            Some("gemm_cm2_f16_k32_fast")
        );
        assert_eq!(
            auto(Cm2Weights::Int8, Some((512, 4096)), false),
            Some("gemm_cm2_w8_k64_fast")
        );
        assert_eq!(
            auto(Cm2Weights::Int8, Some((4608, 21504)), false),
            Some("gemm_cm2_w8_k64_fast_g8")
        );
        // No grid: the first kernel.
        assert_eq!(
            auto(Cm2Weights::F16, None, true),
            Some("gemm_cm2_f16_k32_fast")
        );
    }

    #[test]
    fn integer_layers_need_listed_int8_shapes_and_f16_outputs() {
        let f16_only = nvidia();
        let why = name(cm2_int_gemm(
            Some(&f16_only),
            true,
            ActDtype::F16,
            false,
            None,
        ))
        .expect_err("no int8 shape");
        assert!(why.contains("lists no"), "{why}");
        let caps = with_int8(nvidia());
        assert_eq!(
            name(cm2_int_gemm(Some(&caps), true, ActDtype::F16, false, None)),
            Ok("gemm_cm2_w4_k64")
        );
        assert_eq!(
            name(cm2_int_gemm(Some(&caps), false, ActDtype::F16, false, None)),
            Ok("gemm_cm2_w8_k64_fast")
        );
        let why = name(cm2_int_gemm(Some(&caps), true, ActDtype::F32, false, None))
            .expect_err("f32 outputs");
        assert!(why.contains("f32 outputs"), "{why}");
        let why = name(cm2_int_gemm(Some(&caps), true, ActDtype::F16, true, None))
            .expect_err("raw accumulator");
        assert!(why.contains("raw accumulator"), "{why}");
        assert!(cm2_int_gemm(None, true, ActDtype::F16, false, None).is_err());
        // The int4 tiles' 20 and 12 KiB of shared weights beside the reserve.
        let mut tight = with_int8(nvidia());
        tight.reserved_shared_memory = 32 << 10;
        assert_eq!(
            name(cm2_int_gemm(Some(&tight), true, ActDtype::F16, false, None)),
            Ok("gemm_cm2_w4_k32")
        );
        tight.reserved_shared_memory = 40 << 10;
        assert!(cm2_int_gemm(Some(&tight), true, ActDtype::F16, false, None).is_err());
        assert_eq!(
            name(cm2_int_gemm(
                Some(&tight),
                false,
                ActDtype::F16,
                false,
                None
            )),
            Ok("gemm_cm2_w8_k64_fast")
        );
        // Float layers never take an integer kernel, nor the reverse.
        assert_eq!(
            name(cm2_gemm(Some(&caps), Format::F16, ActDtype::F16, None)),
            Ok("gemm_cm2_f16_k32_fast")
        );
    }

    #[test]
    fn without_the_extension_it_is_never_chosen() {
        let why =
            name(cm2_gemm(None, Format::Bf16, ActDtype::F16, None)).expect_err("no extension");
        assert!(why.contains("VK_NV_cooperative_matrix2"), "{why}");
        // Every feature missing in turn.
        let full = nvidia();
        type Strip = fn(&mut Cm2Caps);
        let cases: [(&str, Strip); 5] = [
            ("Vulkan 1.3", |c| c.vulkan_1_3 = false),
            ("cooperativeMatrixWorkgroupScope", |c| {
                c.workgroup_scope = false
            }),
            ("cooperativeMatrixFlexibleDimensions", |c| {
                c.flexible_dimensions = false
            }),
            ("cooperativeMatrixPerElementOperations", |c| {
                c.per_element_operations = false
            }),
            ("cooperativeMatrixTensorAddressing", |c| {
                c.tensor_addressing = false
            }),
        ];
        for (feature, strip) in cases {
            let mut caps = full.clone();
            strip(&mut caps);
            let why =
                name(cm2_gemm(Some(&caps), Format::F16, ActDtype::F16, None)).expect_err(feature);
            assert!(why.contains(feature), "{feature}: {why}");
        }
        // A default (empty) capability set is refused too.
        assert!(cm2_gemm(Some(&Cm2Caps::default()), Format::F16, ActDtype::F16, None).is_err());
    }

    #[test]
    fn only_f16_activations_and_f16_or_bf16_weights() {
        let caps = nvidia();
        assert_eq!(
            name(cm2_gemm(Some(&caps), Format::F16, ActDtype::F16, None)),
            Ok("gemm_cm2_f16_k32_fast")
        );
        // bf16 weights: 32 K columns a step first (the measured order);
        // 36 KiB of staging at 64 do not fit beside the 16 KiB reserved,
        // but fit without it, asked for by name.
        assert_eq!(
            name(cm2_gemm(Some(&caps), Format::Bf16, ActDtype::F16, None)),
            Ok("gemm_cm2_bf16_k32")
        );
        let k64 = Some("gemm_cm2_bf16_k64");
        assert!(cm2_gemm(Some(&caps), Format::Bf16, ActDtype::F16, k64).is_err());
        let mut roomy = nvidia();
        roomy.reserved_shared_memory = 0;
        assert_eq!(
            name(cm2_gemm(Some(&roomy), Format::Bf16, ActDtype::F16, k64)),
            Ok("gemm_cm2_bf16_k64")
        );
        let why = name(cm2_gemm(Some(&caps), Format::Bf16, ActDtype::F32, None)).expect_err("f32");
        assert!(why.contains("f16 activations"), "{why}");
        for f in [Format::F32, Format::Float8E4m3fn] {
            let why = name(cm2_gemm(Some(&caps), f, ActDtype::F16, None)).expect_err("format");
            assert!(why.contains("weights"), "{why}");
        }
    }

    #[test]
    fn tiles_follow_the_shared_memory_and_the_listed_shapes() {
        // 20 KiB of bf16 staging do not fit beside 32 KiB reserved: the
        // 128-wide tile (10 KiB) does.
        let mut tight = nvidia();
        tight.reserved_shared_memory = 32 << 10;
        assert_eq!(
            name(cm2_gemm(Some(&tight), Format::Bf16, ActDtype::F16, None)),
            Ok("gemm_cm2_bf16_n128")
        );
        // f16 weights declare no shared memory.
        tight.reserved_shared_memory = 48 << 10;
        assert_eq!(
            name(cm2_gemm(Some(&tight), Format::F16, ActDtype::F16, None)),
            Ok("gemm_cm2_f16_k32_fast")
        );
        let why =
            name(cm2_gemm(Some(&tight), Format::Bf16, ActDtype::F16, None)).expect_err("full");
        assert!(why.contains("shared memory"), "{why}");
        // No listed shape of 256 invocations, or a granularity the tiles miss.
        let mut unlisted = nvidia();
        unlisted.flexible.retain(|d| d.workgroup_invocations != 256);
        let why =
            name(cm2_gemm(Some(&unlisted), Format::F16, ActDtype::F16, None)).expect_err("list");
        assert!(why.contains("lists no"), "{why}");
        // The f16 tile the kernels store needs f16 accumulators listed.
        let mut f32_only = nvidia();
        f32_only.flexible.retain(|d| d.types[2] != COMPONENT_F16);
        let why = name(cm2_gemm(Some(&f32_only), Format::F16, ActDtype::F16, None))
            .expect_err("no f16 accumulators");
        assert!(why.contains("lists no"), "{why}");
        let mut coarse = nvidia();
        for d in &mut coarse.flexible {
            d.k_granularity = 128;
        }
        assert!(cm2_gemm(Some(&coarse), Format::F16, ActDtype::F16, None).is_err());
        let mut small = nvidia();
        small.max_workgroup_size = 128;
        let why = name(cm2_gemm(Some(&small), Format::F16, ActDtype::F16, None)).expect_err("size");
        assert!(why.contains("invocations"), "{why}");
        // A kernel asked for by name: that one, or none.
        let n128 = Some("gemm_cm2_bf16_n128");
        assert_eq!(
            name(cm2_gemm(Some(&nvidia()), Format::Bf16, ActDtype::F16, n128)),
            Ok("gemm_cm2_bf16_n128")
        );
        let why = name(cm2_gemm(Some(&nvidia()), Format::F16, ActDtype::F16, n128))
            .expect_err("not an f16 kernel");
        assert!(why.contains("named gemm_cm2_bf16_n128"), "{why}");
        // 256 invocations are 4 subgroups of 64, not 3 of 96.
        let mut wide = nvidia();
        wide.subgroup_size = 64;
        assert!(cm2_gemm(Some(&wide), Format::F16, ActDtype::F16, None).is_ok());
        wide.subgroup_size = 96;
        let why = name(cm2_gemm(Some(&wide), Format::F16, ActDtype::F16, None))
            .expect_err("subgroups of 96");
        assert!(why.contains("power-of-two multiple"), "{why}");
        // The 128-wide tile where 256 is past the flexible dimensions.
        let mut narrow = nvidia();
        narrow.max_dimension = 128;
        assert_eq!(
            name(cm2_gemm(Some(&narrow), Format::F16, ActDtype::F16, None)),
            Ok("gemm_cm2_f16_n128_fast")
        );
        narrow.max_dimension = 64;
        let why = name(cm2_gemm(Some(&narrow), Format::F16, ActDtype::F16, None)).expect_err("dim");
        assert!(why.contains("flexible-dimension"), "{why}");
    }

    #[test]
    fn layers_stack_where_a_layer_alone_is_small_or_the_waves_fill_better() {
        let caps = nvidia();
        let g = cm2_stack_gemm(Some(&caps), false)
            .expect("the stacked kernel fits")
            .gemm;
        let grouped = cm2_stack_gemm(Some(&caps), true).expect("the grouped twin fits");
        assert_eq!(grouped.gemm.name, "gemm_cm2_f16_k32_fast_stack_g8");
        assert_eq!((grouped.gemm.group_m, g.group_m), (8, 0));
        // (weight rows of each layer, stacked) at 512 rows on 132
        // multiprocessors, tiles of 128 x 256.
        let cases: [(&[u64], bool); 6] = [
            // Llama-7B q/k/v: 64 tiles each, split K alone.
            (&[4096, 4096, 4096], true),
            // Llama-3-8B q/k/v: 64 + 16 + 16.
            (&[4096, 1024, 1024], true),
            // Llama-7B gate/up: 172 tiles (65 % of two waves), 344 (87 %).
            (&[11008, 11008], true),
            // Llama-3-8B gate/up: 224 (85 %), 448 (85 %).
            (&[14336, 14336], false),
            // Qwen2.5-7B gate/up: 296 (75 %), 592 (90 %).
            (&[18944, 18944], true),
            // Full waves either way.
            (&[33792, 33792], false),
        ];
        for (ns, stacked) in cases {
            assert_eq!(
                stack_pays(&caps, g, ns.iter().copied(), 512),
                stacked,
                "{ns:?}"
            );
        }
        // A device that does not count its multiprocessors: always.
        let mut uncounted = caps.clone();
        uncounted.sm_count = 0;
        assert!(stack_pays(&uncounted, g, [14336, 14336].into_iter(), 512));
    }
}
