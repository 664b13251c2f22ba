//! Attention with an additive bias per (query row, key, head) and a score
//! scale of the caller's, no mask (`attention_bias.wgsl`, on the scalar
//! kernel's online softmax): the T5 encoder's unscaled `q·k` plus its
//! relative position bias. Portable (any adapter, f32 or f16 activations,
//! f32 sums); one workgroup per (head, query row).

use dynvram_shaders::transformer::ATTENTION_BIAS;

use super::shape::{Heads, Span};
use crate::device::{Gpu, GpuError};
use crate::ops::cache::PipelineCache;
use crate::ops::encoder::Encoder;
use crate::ops::kernel::{self, Dispatch, bad, expect_distinct, expect_dtype, to_u32};
use crate::tensor::{ActDtype, GpuTensor};

/// Records `out = softmax(q kᵀ · scale + bias) v` for `batch` elements:
/// q, k, v and out as [`super::record_flash_attention`] takes them (element
/// b's `sq` query rows and `skv` key rows contiguous), `bias` f32 with
/// `sq · skv · n_heads` values laid out `[sq, skv, n_heads]` (heads
/// innermost: a `[buckets, heads]` table gathered by a `[sq, skv]` bucket
/// id), shared by every batch element.
#[allow(clippy::too_many_arguments)] // the op's operands
pub fn record_attention_bias(
    gpu: &Gpu,
    cache: &PipelineCache,
    enc: &mut Encoder,
    q: &GpuTensor,
    k: &GpuTensor,
    v: &GpuTensor,
    bias: &GpuTensor,
    out: &GpuTensor,
    heads: Heads,
    batch: u64,
    scale: f32,
) -> Result<(), GpuError> {
    const OP: &str = "attention_bias";
    let (q_rows, kv_rows) = super::check(OP, q, k, v, out, heads)?;
    if batch == 0 || !q_rows.is_multiple_of(batch) || !kv_rows.is_multiple_of(batch) {
        return Err(bad(
            OP,
            format!(
                "{q_rows} query rows and {kv_rows} key rows do not split into {batch} batch elements"
            ),
        ));
    }
    let (sq, skv) = (q_rows / batch, kv_rows / batch);
    expect_dtype(OP, "bias", bias, ActDtype::F32)?;
    if bias.numel() != sq * skv * heads.n_heads {
        return Err(bad(
            OP,
            format!(
                "`bias` {:?} has {} values, [sq, skv, n_heads] = [{sq}, {skv}, {}] needs {}",
                bias.shape,
                bias.numel(),
                heads.n_heads,
                sq * skv * heads.n_heads
            ),
        ));
    }
    expect_distinct(OP, out, &[("bias", bias)])?;
    if !scale.is_finite() {
        return Err(bad(OP, format!("scale {scale} is not finite")));
    }
    let max_groups = u64::from(gpu.device.limits().max_compute_workgroups_per_dimension);
    if heads.n_heads > max_groups || q_rows > max_groups {
        return Err(bad(
            OP,
            format!(
                "{} heads x {q_rows} query rows exceed {max_groups} workgroups per dimension",
                heads.n_heads
            ),
        ));
    }
    let _span = tracing::trace_span!("record", op = OP, batch, sq, skv).entered();
    let span = Span {
        batch,
        sq,
        kv_rows: skv,
        kv_len: skv,
        pos0: 0,
        causal: false,
    };
    let params = super::scalar::params_scaled(heads, span, skv, 1, scale)?;
    let bindings: kernel::Bindings<'_> = smallvec::smallvec![
        (1, q.binding()),
        (2, k.binding()),
        (3, v.binding()),
        (4, out.binding()),
        (6, bias.binding()),
    ];
    let mut cost = super::cost(q, heads, span);
    cost.bytes += bias.bytes();
    kernel::record(
        gpu,
        cache,
        enc,
        Dispatch {
            source: ATTENTION_BIAS,
            entry: "attend_bias",
            constants: &[],
            params: &params,
            bindings,
            groups: (
                to_u32(OP, "n_heads", heads.n_heads)?,
                to_u32(OP, "rows", q_rows)?,
            ),
            act: q.dtype,
            cost,
        },
    )
}
