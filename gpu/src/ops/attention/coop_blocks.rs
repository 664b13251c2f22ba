//! What both flash kernels on cooperative matrices (the one-walk kernel
//! of `flash.rs`, the two-walk kernel of `two_walk.rs`) share: what they
//! need of the adapter ([`coop_f16_unusable`]) and their launch over
//! blocks of query rows ([`launch_blocks`]).

use dynvram_quant::AdapterCaps;

use super::scalar::Operands;
use super::shape::{Heads, Span};
use crate::device::{Gpu, GpuError};
use crate::ops::cache::{PipelineCache, Program};
use crate::ops::encoder::Encoder;
use crate::ops::kernel::to_u32;
use crate::ops::launch::{Launch, launch};
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
    /// The module.
    pub source: &'static str,
    /// Its override constants.
    pub constants: &'a [(&'static str, f64)],
    /// Query rows per workgroup.
    pub rows: u64,
    /// The scores' factor (parameter word 6).
    pub scale: f32,
    /// Parameter words after the causal flag.
    pub extra: &'a [u32],
}

/// Launches a flash kernel: one workgroup per head (x) and block of
/// `l.rows` query rows of each batch element (y), checked against the
/// adapter's workgroups per dimension; q, k, v and out at bindings 1 to 4;
/// the parameters sq, n_heads, n_kv_heads, kv_rows, kv_len, pos0, the
/// scale, the causal flag, then `l.extra`.
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
    let mut words: smallvec::SmallVec<[u32; 16]> = smallvec::smallvec![
        to_u32(op, "sq", span.sq)?,
        to_u32(op, "n_heads", heads.n_heads)?,
        to_u32(op, "n_kv_heads", heads.n_kv_heads)?,
        to_u32(op, "kv_rows", span.kv_rows)?,
        to_u32(op, "kv_len", span.kv_len)?,
        to_u32(op, "pos0", span.pos0)?,
        l.scale.to_bits(),
        u32::from(span.causal),
    ];
    words.extend_from_slice(l.extra);
    let params = crate::ops::kernel::params(&words);
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
    launch(
        gpu,
        cache,
        enc,
        Launch {
            program: Program {
                source: l.source,
                entry: "main",
                constants: l.constants,
                act: q.dtype,
            },
            label: &op,
            bindings: &[
                (1, q.binding()),
                (2, k.binding()),
                (3, v.binding()),
                (4, out.binding()),
            ],
            immediates: &params,
            groups: (
                to_u32(op, "n_heads", heads.n_heads)?,
                to_u32(op, "query blocks", blocks)?,
            ),
            cost: super::cost(q, heads, span),
        },
    )
}
