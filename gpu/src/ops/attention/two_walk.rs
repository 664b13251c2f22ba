//! The two-walk flash attention on cooperative matrices
//! (`flash_attention_two_walk.wgsl`): a workgroup takes a block of query
//! rows of one head, keeps their queries and outputs in registers, walks
//! the keys in blocks twice (the softmax statistics, then the output), and
//! never writes the score matrix. The runtime's default flash kernel
//! ([`super::flash`] chooses): it has run on the H200, the one-walk kernel
//! not yet correctly.

use dynvram_quant::AdapterCaps;
use dynvram_shaders::transformer::{FLASH_TWO_WALK8, FLASH_TWO_WALK16, with_two_walk_shape};

use super::coop_blocks::BlockLaunch;
use super::scalar::Operands;
use super::shape::{Heads, Span};
use crate::device::{Gpu, GpuError};
use crate::ops::cache::{Generated, PipelineCache};
use crate::ops::encoder::Encoder;
use crate::ops::kernel::to_u32;
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
    super::coop_blocks::coop_f16_unusable(
        caps,
        act,
        hd,
        |sg| sg >= edge && sg.is_multiple_of(edge) && (sg / edge).is_power_of_two(),
        &format_args!("do not split into rows of the {edge}x{edge} matrices"),
    )?;
    TwoWalkShape::for_adapter(caps, hd as u32).ok_or_else(|| {
        format!(
            "no workgroup shape fits {} bytes of workgroup memory",
            caps.max_workgroup_storage
        )
    })
}

/// Records the kernel for `span` with `shape` (from [`shape`]).
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
    let edge = gpu.caps.coop_matrix_edge;
    let sg = gpu.caps.subgroup_min_size;
    let hd = to_u32(OP, "head_dim", heads.head_dim)?;
    let source = match edge {
        16 => FLASH_TWO_WALK16,
        _ => FLASH_TWO_WALK8,
    };
    let TwoWalkShape { nsg, bc } = shape;
    static SOURCES: Generated<(u32, u32, u32, u32)> = Generated::new();
    let source = SOURCES.get((edge, nsg, bc, hd), || {
        with_two_walk_shape(source, nsg, bc, hd)
    });
    let scale = (1.0 / (heads.head_dim as f64).sqrt()) as f32;
    let constants = [("SG", f64::from(sg))];
    super::coop_blocks::launch_blocks(
        gpu,
        cache,
        enc,
        BlockLaunch {
            op: OP,
            program: super::coop_blocks::BlockProgram::Wgsl {
                source,
                constants: &constants,
            },
            rows: u64::from(nsg * edge),
            scale,
            params: super::coop_blocks::FlashParamsOf::TwoWalk,
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
