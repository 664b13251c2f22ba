//! The two-walk flash attention on cooperative matrices
//! (`flash_attention_two_walk.wgsl`): a workgroup takes a block of query
//! rows of one head, keeps their queries and outputs in registers, walks
//! the keys in blocks twice (the softmax statistics, then the output), and
//! never writes the score matrix. The runtime's default flash kernel
//! ([`super::flash`] chooses): it has run on the H200, the one-walk kernel
//! not yet correctly.

use dynvram_quant::AdapterCaps;
use dynvram_shaders::transformer::{FLASH_TWO_WALK8, FLASH_TWO_WALK16, with_two_walk_shape};

use super::scalar::Operands;
use super::shape::{Heads, Span};
use crate::gpu::{Gpu, GpuError};
use crate::ops::cache::PipelineCache;
use crate::ops::encoder::Encoder;
use crate::ops::kernel::to_u32;
use crate::ops::launch::{Launch, launch};
use crate::tensor::ActDtype;

/// A workgroup's shape: `nsg` subgroups of one matrix edge of query rows
/// each, `bc` keys per block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TwoWalkShape {
    pub nsg: u32,
    pub bc: u32,
}

impl TwoWalkShape {
    /// Workgroup memory for matrix edge `edge` and head dimension `hd`:
    /// the staged queries, then keys or values (f16, rows skewed by 8),
    /// the f32 scores and the f16 probabilities.
    pub fn workgroup_bytes(self, edge: u32, hd: u32) -> u32 {
        let br = self.nsg * edge;
        br.max(self.bc) * (hd + 8) * 2 + br * self.bc * 4 + br * (self.bc + 8) * 2
    }

    /// The widest shape that fits the adapter, most subgroups first (the
    /// staged keys serve more query rows), then the longest key blocks.
    fn for_adapter(caps: &AdapterCaps, hd: u32) -> Option<Self> {
        let edge = caps.coop_matrix_edge;
        let sg = caps.subgroup_min_size;
        [(4, 64), (4, 32), (2, 64), (2, 32), (1, 32), (1, 16)]
            .into_iter()
            .map(|(nsg, bc)| Self { nsg, bc })
            .find(|s| {
                s.bc.is_multiple_of(edge)
                    && s.nsg * sg <= caps.max_invocations_per_workgroup
                    && s.workgroup_bytes(edge, hd) <= caps.max_workgroup_storage
            })
    }
}

/// Why the two-walk kernel cannot run with `act` activations and head
/// dimension `hd` on this adapter, or the shape it runs with.
pub(super) fn shape(caps: &AdapterCaps, act: ActDtype, hd: u64) -> Result<TwoWalkShape, String> {
    let edge = caps.coop_matrix_edge;
    if edge == 0 || !caps.shader_f16 || !caps.subgroups {
        return Err("the adapter lacks f16 cooperative matrices, SHADER_F16 or subgroups".into());
    }
    if act != ActDtype::F16 {
        return Err("f32 activations would round to f16 (the kernel takes f16)".into());
    }
    let sg = caps.subgroup_min_size;
    if sg != caps.subgroup_max_size
        || sg < edge
        || !sg.is_multiple_of(edge)
        || !(sg / edge).is_power_of_two()
    {
        return Err(format!(
            "subgroups of {}..{} invocations do not split into rows of the {edge}x{edge} matrices",
            caps.subgroup_min_size, caps.subgroup_max_size
        ));
    }
    if !hd.is_multiple_of(u64::from(edge)) || hd > super::MAX_HEAD_DIM {
        return Err(format!(
            "head_dim {hd} is not a multiple of the matrix edge {edge} up to {}",
            super::MAX_HEAD_DIM
        ));
    }
    TwoWalkShape::for_adapter(caps, hd as u32).ok_or_else(|| {
        format!(
            "no workgroup shape fits {} bytes of workgroup memory",
            caps.max_workgroup_storage
        )
    })
}

/// Records the kernel for `span` with `shape` (from [`flash_shape`]).
pub(super) fn record(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    ops: &Operands<'_>,
    heads: Heads,
    span: Span,
    shape: TwoWalkShape,
) -> Result<(), GpuError> {
    const OP: &str = "flash_attention_two_walk";
    let Operands { q, k, v, out } = *ops;
    let edge = gpu.caps.coop_matrix_edge;
    let sg = gpu.caps.subgroup_min_size;
    let hd = to_u32(OP, "head_dim", heads.head_dim)?;
    let source = match edge {
        16 => FLASH_TWO_WALK16,
        _ => FLASH_TWO_WALK8,
    };
    let TwoWalkShape { nsg, bc } = shape;
    let source = with_two_walk_shape(source, nsg, bc, hd);
    let key = format!("flash_two_walk{edge}|SG={sg}|{nsg}x{bc}|HD={hd}");
    let scale = (1.0 / (heads.head_dim as f64).sqrt()) as f32;
    let params = crate::ops::kernel::params(&[
        to_u32(OP, "sq", span.sq)?,
        to_u32(OP, "n_heads", heads.n_heads)?,
        to_u32(OP, "n_kv_heads", heads.n_kv_heads)?,
        to_u32(OP, "kv_rows", span.kv_rows)?,
        to_u32(OP, "kv_len", span.kv_len)?,
        to_u32(OP, "pos0", span.pos0)?,
        scale.to_bits(),
        u32::from(span.causal),
    ]);
    let rows_per_group = u64::from(nsg * edge);
    let blocks = span.batch * span.sq.div_ceil(rows_per_group);
    let max_groups = u64::from(gpu.device.limits().max_compute_workgroups_per_dimension);
    if heads.n_heads > max_groups || blocks > max_groups {
        return Err(crate::ops::kernel::bad(
            OP,
            format!(
                "{} heads x {blocks} query blocks exceed {max_groups} workgroups per dimension",
                heads.n_heads
            ),
        ));
    }
    let constants = [("SG", f64::from(sg))];
    launch(
        gpu,
        cache,
        enc,
        Launch {
            key: &key,
            label: &"flash_attention_two_walk",
            source: &source,
            entry: "main",
            constants: &constants,
            act: q.dtype,
            bindings: vec![
                (1, q.binding()),
                (2, k.binding()),
                (3, v.binding()),
                (4, out.binding()),
            ],
            immediates: &params,
            groups: (
                to_u32(OP, "n_heads", heads.n_heads)?,
                to_u32(OP, "query blocks", blocks)?,
            ),
            cost: super::cost(q, heads, span),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(edge: u32, sg: u32, storage: u32) -> AdapterCaps {
        AdapterCaps {
            shader_f16: true,
            subgroups: true,
            subgroup_min_size: sg,
            subgroup_max_size: sg,
            coop_matrix_edge: edge,
            max_workgroup_storage: storage,
            max_invocations_per_workgroup: 1024,
            ..AdapterCaps::baseline("test", "vulkan")
        }
    }

    #[test]
    fn shapes_fit_the_adapter() {
        // The H200: 48 KiB, 16x16 matrices, subgroups of 32.
        let h200 = caps(16, 32, 48 << 10);
        let s = shape(&h200, ActDtype::F16, 128).expect("fits");
        assert!(s.workgroup_bytes(16, 128) <= 48 << 10, "{s:?}");
        assert_eq!(s, TwoWalkShape { nsg: 4, bc: 64 });
        let wide = shape(&h200, ActDtype::F16, 256).expect("fits");
        assert_eq!(wide, TwoWalkShape { nsg: 4, bc: 32 });
        assert!(shape(&h200, ActDtype::F32, 128).is_err());
        assert!(shape(&h200, ActDtype::F16, 72).is_err());
        assert!(shape(&caps(16, 32, 4 << 10), ActDtype::F16, 128).is_err());
        // Subgroups narrower than a matrix row block, or varying.
        assert!(shape(&caps(16, 8, 48 << 10), ActDtype::F16, 128).is_err());
        let mut varying = caps(16, 32, 48 << 10);
        varying.subgroup_min_size = 16;
        assert!(shape(&varying, ActDtype::F16, 128).is_err());
    }
}
