//! Intermediate buffers of the integer path: rotated input, packed
//! activation codes, per-row scales; and the attention's split-K partials. Grown on demand, reused across layers
//! (the dispatches of one encoder run in order). A runtime's scratch is
//! counted in its ledger as `scratch` (at M = 4096, K = 12288 the rotated
//! input alone is 192 MiB).

use std::sync::Arc;

use dynvram_memory::OwnerClass;

use super::{CoopGemmKernel, CoopShape, LinearError};
use crate::accounting::{BufferError, SharedBudget, TrackedBuffer};
use crate::device::Gpu;

/// One scratch buffer, with its ledger entry where there is a budget.
#[derive(Debug)]
struct Slot {
    buffer: Arc<wgpu::Buffer>,
    _ledger: Option<TrackedBuffer>,
}

/// Scratch space for [`super::record_linear`].
#[derive(Debug, Default)]
pub struct LinearScratch {
    /// The budget whose ledger counts the buffers (none: untracked, for
    /// tools and tests outside a runtime).
    budget: Option<SharedBudget>,
    x_rot: Option<Slot>,
    codes: Option<Slot>,
    scales: Option<Slot>,
    chunk_max: Option<Slot>,
    arrived: Option<Slot>,
    dummy: Option<Slot>,
    partials: Option<Slot>,
    converted_weights: Option<Slot>,
    /// The layer's rows the converted weights hold, as (first row, rows):
    /// valid within one layer's recording only (see
    /// [`Self::forget_converted`]).
    converted: Option<(u64, u64)>,
    /// Bytes a converted piece may take beyond the default for the input's
    /// rows: room the budget has besides what its plan reserved
    /// ([`Self::set_piece_room`]).
    piece_room: u64,
    /// What the codes hold (see [`super::RecordOptions::reuse_codes`]).
    codes_key: Option<super::record::CodesKey>,
    /// Dispatches the last recorded linear took.
    dispatches: u32,
    /// The cooperative-matrix GEMM kernel and shape the last recorded
    /// linear ran, if it ran that GEMM.
    coop: Option<(CoopShape, CoopGemmKernel)>,
    /// The SPIR-V GEMM the last recorded linear ran, if it ran one.
    spirv: Option<&'static str>,
    /// Whether the last recorded linear applied GELU to its output.
    gelu: bool,
}

/// Scratch buffers up to this size grow geometrically (see `ensure`).
const GROW_GEOMETRIC_MAX: u64 = 16 << 20;

/// A request of `bytes` as [`ensure`] allocates it: at least 16, in whole
/// 256-byte units.
fn rounded(bytes: u64) -> u64 {
    bytes.max(16).div_ceil(256) * 256
}

/// Half again a buffer of `size` bytes (a multiple of 256): what [`ensure`]
/// grows a small buffer to at least.
fn half_again(size: u64) -> u64 {
    size / 256 * 384
}

/// The most one scratch buffer grows to when no request is larger than
/// `max_request` bytes: the request rounded as [`ensure`] rounds it, or half
/// again a smaller buffer where that stays geometric.
pub(super) fn scratch_capacity_bound(max_request: u64) -> u64 {
    if max_request == 0 {
        return 0;
    }
    let p = rounded(max_request);
    p.max(GROW_GEOMETRIC_MAX).min(half_again(p))
}

const USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

fn ensure(
    slot: &mut Option<Slot>,
    budget: Option<&SharedBudget>,
    gpu: &Gpu,
    label: &str,
    bytes: u64,
) -> Result<Arc<wgpu::Buffer>, LinearError> {
    let bytes = rounded(bytes);
    if let Some(s) = slot.as_ref().filter(|s| s.buffer.size() >= bytes) {
        return Ok(s.buffer.clone());
    }
    // Grown by half again at least: a freed buffer empties the bind-group
    // cache (`PipelineCache::bind_group`), so growing a little at a time
    // (decode attention's partials, as the context grows) would rebuild
    // every bind group each time.
    // Large buffers (prefill's rotated input) grow exactly: the budget
    // reserved for them is what they need.
    let grown = slot.as_ref().map_or(0, |s| half_again(s.buffer.size()));
    let bytes = if grown <= GROW_GEOMETRIC_MAX {
        bytes.max(grown)
    } else {
        bytes
    };
    // Free the smaller one first: the ledger never holds both (recorded
    // dispatches keep the old buffer alive on their own).
    *slot = None;
    let new = match budget {
        Some(budget) => {
            let tracked = TrackedBuffer::new(gpu, budget, OwnerClass::Scratch, label, bytes, USAGE)
                .map_err(|e| match e {
                    BufferError::Gpu(g) => LinearError::Gpu(g),
                    other => LinearError::Scratch {
                        label: label.to_owned(),
                        bytes,
                        why: other.to_string(),
                    },
                })?;
            Slot {
                buffer: tracked.buffer.clone(),
                _ledger: Some(tracked),
            }
        }
        None => Slot {
            buffer: Arc::new(gpu.create_buffer(label, bytes, USAGE)?),
            _ledger: None,
        },
    };
    let buffer = new.buffer.clone();
    *slot = Some(new);
    Ok(buffer)
}

impl LinearScratch {
    /// Empty scratch; buffers appear on first use, outside any ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// Empty scratch whose buffers are counted in `budget`'s ledger as
    /// `scratch` (and refused where the budget has no room).
    pub fn tracked(budget: SharedBudget) -> Self {
        Self {
            budget: Some(budget),
            ..Self::default()
        }
    }

    /// The rotated-input buffer, at least `bytes` long.
    pub(super) fn x_rot(
        &mut self,
        gpu: &Gpu,
        bytes: u64,
    ) -> Result<Arc<wgpu::Buffer>, LinearError> {
        ensure(
            &mut self.x_rot,
            self.budget.as_ref(),
            gpu,
            "linear.x_rot",
            bytes,
        )
    }

    /// A piece of weights converted for a SPIR-V GEMM (bf16 to f16,
    /// `Cm2Bf16::ViaF16`; int4 to int8, `Cm2Int4::ViaInt8`), at least
    /// `bytes` long; a new buffer holds no piece.
    pub(super) fn converted_weights(
        &mut self,
        gpu: &Gpu,
        bytes: u64,
    ) -> Result<Arc<wgpu::Buffer>, LinearError> {
        let old = self.converted_weights.as_ref().map(|s| s.buffer.clone());
        let b = ensure(
            &mut self.converted_weights,
            self.budget.as_ref(),
            gpu,
            "linear.converted_weights",
            bytes,
        );
        if b.as_ref().ok().map(Arc::as_ptr) != old.as_ref().map(Arc::as_ptr) {
            self.converted = None;
        }
        b
    }

    /// Whether `bytes` more scratch fit the room a runtime's pass has beyond
    /// its plan ([`Self::set_piece_room`]); always outside a budget. Scratch
    /// no plan counts (the split GEMMs' partial sums) is taken only there,
    /// so it never takes what the plan reserved for later in the pass.
    pub(super) fn room_for(&self, bytes: u64) -> bool {
        self.budget.is_none() || self.planned_room_for(bytes)
    }

    /// Whether `bytes` more scratch fit the room a runtime's pass has beyond
    /// its plan: [`Self::room_for`], but never outside a budget, where no
    /// plan bounds the scratch to what it counts.
    pub(super) fn planned_room_for(&self, bytes: u64) -> bool {
        self.budget.is_some() && self.piece_room >= bytes
    }

    /// The split-K GEMMs' partial sums (f32), at least `bytes` long: the
    /// attention's partials' buffer (each use writes it before reading it,
    /// one launch after another).
    pub(super) fn split_partials(
        &mut self,
        gpu: &Gpu,
        bytes: u64,
    ) -> Result<Arc<wgpu::Buffer>, LinearError> {
        ensure(
            &mut self.partials,
            self.budget.as_ref(),
            gpu,
            "linear.split_partials",
            bytes,
        )
    }

    /// The rows of the layer being recorded that the converted weights
    /// hold, as (first row, rows).
    pub(super) fn converted(&self) -> Option<(u64, u64)> {
        self.converted
    }

    /// Records which rows the converted weights now hold.
    pub(super) fn set_converted(&mut self, rows: (u64, u64)) {
        self.converted = Some(rows);
    }

    /// Forgets what the converted weights hold: a new layer's recording
    /// (another layer's rows, or the same buffer with other weights
    /// streamed in).
    pub(super) fn forget_converted(&mut self) {
        self.converted = None;
    }

    /// Lets a converted piece take up to `bytes` (0: the default size for
    /// the input's rows, `converted_piece_limit`): a runtime's room beyond what
    /// its plan reserved, set before each pass. Larger pieces are fewer
    /// and wider GEMMs — a piece of FLUX.1's 15,360-column layer at the
    /// default 32 MiB is 144 workgroups, a GPU wave and a few, where the
    /// whole layer is 432.
    pub fn set_piece_room(&mut self, bytes: u64) {
        self.piece_room = bytes;
    }

    /// [`Self::set_piece_room`]'s bytes.
    pub fn piece_room(&self) -> u64 {
        self.piece_room
    }

    /// The packed-codes buffer, at least `bytes` long.
    pub(super) fn codes(
        &mut self,
        gpu: &Gpu,
        bytes: u64,
    ) -> Result<Arc<wgpu::Buffer>, LinearError> {
        ensure(
            &mut self.codes,
            self.budget.as_ref(),
            gpu,
            "linear.act_codes",
            bytes,
        )
    }

    /// The per-row scale buffer, at least `bytes` long.
    pub(super) fn scales(
        &mut self,
        gpu: &Gpu,
        bytes: u64,
    ) -> Result<Arc<wgpu::Buffer>, LinearError> {
        ensure(
            &mut self.scales,
            self.budget.as_ref(),
            gpu,
            "linear.act_scales",
            bytes,
        )
    }

    /// The rows' counts of `linear_rotate_codes.wgsl` (one u32 a row, 0
    /// between launches: a new buffer is zeroed, and each launch sets its
    /// rows' counts back to 0), at least `bytes` long.
    pub(super) fn arrived(
        &mut self,
        gpu: &Gpu,
        bytes: u64,
    ) -> Result<Arc<wgpu::Buffer>, LinearError> {
        ensure(
            &mut self.arrived,
            self.budget.as_ref(),
            gpu,
            "linear.arrived",
            bytes,
        )
    }

    /// The rotated rows' chunk maxima (`linear_rotate_max.wgsl`), at least
    /// `bytes` long.
    pub(super) fn chunk_max(
        &mut self,
        gpu: &Gpu,
        bytes: u64,
    ) -> Result<Arc<wgpu::Buffer>, LinearError> {
        ensure(
            &mut self.chunk_max,
            self.budget.as_ref(),
            gpu,
            "linear.chunk_max",
            bytes,
        )
    }

    /// A small buffer bound where a layer has no scale or bias (256 bytes
    /// for the scratch's life: a placeholder, not a workload, so it stays
    /// out of the ledger and dropping every model leaves the ledger empty).
    pub(super) fn dummy(&mut self, gpu: &Gpu) -> Result<Arc<wgpu::Buffer>, LinearError> {
        ensure(&mut self.dummy, None, gpu, "linear.unused", 16)
    }

    /// The last activation codes (`[M, ceil(K/4)]` u32 words, four i8 codes
    /// each, byte 0 first; for int4 weights on the dot4 kernels each 8-column
    /// block holds its even columns in the first word and its odd columns in
    /// the second, see [`Self::last_used_coop`]).
    pub fn act_codes(&self) -> Option<&Arc<wgpu::Buffer>> {
        self.codes.as_ref().map(|s| &s.buffer)
    }

    /// The last per-row activation scales (`[M]` f32).
    pub fn act_scales(&self) -> Option<&Arc<wgpu::Buffer>> {
        self.scales.as_ref().map(|s| &s.buffer)
    }

    /// Compute dispatches the last recorded linear took (a figure for
    /// benchmarks: each dispatch boundary costs a pipeline drain).
    pub fn last_dispatches(&self) -> u32 {
        self.dispatches
    }

    pub(super) fn set_dispatches(&mut self, count: u32) {
        self.dispatches = count;
    }

    /// The last recorded linear multiplied on cooperative matrices, WGSL or
    /// SPIR-V (its activation codes are in column order).
    pub fn last_used_coop(&self) -> bool {
        self.coop.is_some() || self.spirv.is_some()
    }

    /// The workgroup shape of the cooperative-matrix GEMM the last recorded
    /// linear ran, if it ran one.
    pub fn last_coop_shape(&self) -> Option<CoopShape> {
        self.coop.map(|c| c.0)
    }

    /// Which cooperative-matrix GEMM kernel the last recorded linear ran,
    /// if it ran one.
    pub fn last_coop_kernel(&self) -> Option<CoopGemmKernel> {
        self.coop.map(|c| c.1)
    }

    pub(super) fn set_coop(&mut self, coop: Option<(CoopShape, CoopGemmKernel)>) {
        self.coop = coop;
        self.spirv = None;
    }

    /// The SPIR-V cooperative-matrix-2 GEMM (its kernel's name) the last
    /// recorded linear ran, if it ran one.
    pub fn last_spirv_gemm(&self) -> Option<&'static str> {
        self.spirv
    }

    pub(super) fn set_spirv(&mut self, name: &'static str) {
        self.coop = None;
        self.spirv = Some(name);
    }

    /// Whether the last recorded linear applied GELU (tanh) to its output,
    /// as `RecordOptions::gelu_tanh` asks where the float SPIR-V GEMMs run.
    pub fn last_gelu(&self) -> bool {
        self.gelu
    }

    pub(super) fn set_gelu(&mut self, gelu: bool) {
        self.gelu = gelu;
    }

    /// The attention's split-K partials (f32), at least `bytes` long.
    pub(crate) fn attention_partials(
        &mut self,
        gpu: &Gpu,
        bytes: u64,
    ) -> Result<Arc<wgpu::Buffer>, crate::GpuError> {
        let label = "attention.partials";
        ensure(&mut self.partials, self.budget.as_ref(), gpu, label, bytes).map_err(|e| match e {
            LinearError::Gpu(g) => g,
            other => crate::GpuError::Scratch {
                op: "attention",
                label: label.to_owned(),
                bytes,
                why: other.to_string(),
            },
        })
    }

    pub(super) fn codes_key(&self) -> Option<&super::record::CodesKey> {
        self.codes_key.as_ref()
    }

    pub(super) fn set_codes_key(&mut self, key: Option<super::record::CodesKey>) {
        self.codes_key = key;
    }

    /// The last rotated input (`[M, K]` f32), for rotated layers.
    pub fn rotated(&self) -> Option<&Arc<wgpu::Buffer>> {
        self.x_rot.as_ref().map(|s| &s.buffer)
    }
}
