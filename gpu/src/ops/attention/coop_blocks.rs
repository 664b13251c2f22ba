//! What the flash kernels on cooperative matrices (the one-walk kernel
//! of `flash.rs`, the two-walk kernel of `two_walk.rs`, the SPIR-V kernels
//! of `flash_cm2.rs`) share: what they
//! need of the adapter ([`coop_f16_unusable`]) and their launch over
//! blocks of query rows ([`launch_blocks`]).

use dynvram_quant::AdapterCaps;

use super::scalar::Operands;
use super::shape::{Heads, Span};
use crate::device::{Gpu, GpuError};
use crate::ops::cache::{PipelineCache, Program, SpirvProgram};
use crate::ops::encoder::Encoder;
use crate::ops::kernel::to_u32;
use crate::ops::launch::{Launch, launch, launch_spirv};
use crate::tensor::ActDtype;

/// What both flash kernels need of the adapter with `act` activations and
/// head dimension `hd`: f16 cooperative matrices and subgroups, f16
/// activations, one subgroup size that `sg_fits` (else `Err` with
/// "subgroups of MIN..MAX invocations `sg_need`"), and `hd` a multiple of
/// the matrix edge up to [`super::MAX_HEAD_DIM`].
pub(super) fn coop_f16_unusable(
    caps: &AdapterCaps,
    act: ActDtype,
    hd: u64,
    sg_fits: impl Fn(u32) -> bool,
    sg_need: &dyn std::fmt::Display,
) -> Result<(), String> {
    let edge = caps.coop_matrix_edge;
    if !caps.f16_coop_matrices() {
        return Err("the adapter lacks f16 cooperative matrices, SHADER_F16 or subgroups".into());
    }
    if act != ActDtype::F16 {
        return Err("f32 activations would round to f16 (the kernel takes f16)".into());
    }
    let sg = caps.subgroup_min_size;
    if sg != caps.subgroup_max_size || !sg_fits(sg) {
        return Err(format!(
            "subgroups of {}..{} invocations {sg_need}",
            caps.subgroup_min_size, caps.subgroup_max_size
        ));
    }
    if !hd.is_multiple_of(u64::from(edge)) || hd > super::MAX_HEAD_DIM {
        return Err(format!(
            "head_dim {hd} is not a multiple of the matrix edge {edge} up to {}",
            super::MAX_HEAD_DIM
        ));
    }
    Ok(())
}

/// What differs between the two flash kernels' launches
/// ([`launch_blocks`]).
pub(super) struct BlockLaunch<'a> {
    /// The op (errors) and the profile's label.
    pub op: &'static str,
    /// What runs.
    pub program: BlockProgram<'a>,
    /// Query rows per workgroup.
    pub rows: u64,
    /// The scores' factor (`Params::scale`, the one-walk kernel's `scale2`).
    pub scale: f32,
    /// Which kernel's `Params` the launch takes.
    pub params: FlashParamsOf,
}

/// The module of a flash launch.
pub(super) enum BlockProgram<'a> {
    /// A WGSL module and its override constants.
    Wgsl {
        source: &'static str,
        constants: &'a [(&'static str, f64)],
    },
    /// A SPIR-V module (`flash_cm2.rs`).
    Spirv(&'static SpirvProgram),
}

/// Which flash kernel's `Params` a launch fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FlashParamsOf {
    /// `flash_attention_two_walk.wgsl`'s: [`FlashParams`].
    TwoWalk,
    /// `flash_attention.wgsl`'s: [`OneWalkParams`].
    OneWalk,
}

/// `flash_attention_two_walk.wgsl`'s `Params`, field for field; the first
/// eight fields of `flash_attention.wgsl`'s.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct FlashParams {
    sq: u32,
    n_heads: u32,
    n_kv: u32,
    skv: u32,
    kv_len: u32,
    pos0: u32,
    scale: f32,
    /// 1: query row r sees keys `0..=pos0 + r`; 0: every key `0..kv_len`.
    causal: u32,
}
const _: () = assert!(size_of::<FlashParams>() == 32);

/// Bytes of [`FlashParams`] (the SPIR-V flash kernels' push constants).
pub(super) const FLASH_PARAMS_BYTES: u32 = size_of::<FlashParams>() as u32;

/// `flash_attention.wgsl`'s `Params`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct OneWalkParams {
    common: FlashParams,
    /// 1.0, which no compiler can fold (a matrix multiplied by it is in
    /// registers from there on).
    one: f32,
    _pad: [u32; 3],
}
const _: () = assert!(size_of::<OneWalkParams>() == 48);

/// Launches a flash kernel: one workgroup per head (x) and block of
/// `l.rows` query rows of each batch element (y), checked against the
/// adapter's workgroups per dimension; q, k, v and out at bindings 1 to 4;
/// the kernel's `Params` from `heads`, `span` and `l`.
pub(super) fn launch_blocks(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    l: BlockLaunch<'_>,
    ops: &Operands<'_>,
    heads: Heads,
    span: Span,
) -> Result<(), GpuError> {
    let op = l.op;
    let Operands { q, k, v, out } = *ops;
    let common = FlashParams {
        sq: to_u32(op, "sq", span.sq)?,
        n_heads: to_u32(op, "n_heads", heads.n_heads)?,
        n_kv: to_u32(op, "n_kv_heads", heads.n_kv_heads)?,
        skv: to_u32(op, "kv_rows", span.kv_rows)?,
        kv_len: to_u32(op, "kv_len", span.kv_len)?,
        pos0: to_u32(op, "pos0", span.pos0)?,
        scale: l.scale,
        causal: u32::from(span.causal),
    };
    let one_walk = OneWalkParams {
        common,
        one: 1.0,
        _pad: [0; 3],
    };
    let params = match l.params {
        FlashParamsOf::TwoWalk => bytemuck::bytes_of(&common),
        FlashParamsOf::OneWalk => bytemuck::bytes_of(&one_walk),
    };
    let blocks = span.batch * span.sq.div_ceil(l.rows);
    let max_groups = u64::from(gpu.device.limits().max_compute_workgroups_per_dimension);
    if heads.n_heads > max_groups || blocks > max_groups {
        return Err(crate::ops::kernel::bad(
            op,
            format!(
                "{} heads x {blocks} query blocks exceed {max_groups} workgroups per dimension",
                heads.n_heads
            ),
        ));
    }
    let bindings = [
        (1, q.binding()),
        (2, k.binding()),
        (3, v.binding()),
        (4, out.binding()),
    ];
    let groups = (
        to_u32(op, "n_heads", heads.n_heads)?,
        to_u32(op, "query blocks", blocks)?,
    );
    let cost = super::cost(q, heads, span);
    match l.program {
        BlockProgram::Wgsl { source, constants } => launch(
            gpu,
            cache,
            enc,
            Launch {
                program: Program {
                    source,
                    entry: "main",
                    constants,
                    act: q.dtype,
                },
                label: &op,
                bindings: &bindings,
                immediates: params,
                groups,
                cost,
            },
        ),
        BlockProgram::Spirv(program) => launch_spirv(
            gpu,
            cache,
            enc,
            Launch {
                program,
                label: &op,
                bindings: &bindings,
                immediates: params,
                groups,
                cost,
            },
        ),
    }
}
