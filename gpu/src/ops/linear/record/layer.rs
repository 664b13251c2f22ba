//! Recording one linear layer: the checks of its operands, the
//! [`Recorder`] for its options and adapter, and the kernel sequence of
//! its format (`integer.rs`, `float.rs`).

use std::cell::Cell;

use dynvram_quant::KernelChoice;

use super::coop::CoopShape;
use super::fold::{Fold, fold_unusable};
use super::fused::Fused;
use super::gemv_shape::{GemvShape, ROWS_GEMV_MAX_M, rows_aligned, rows_gemv_max_m};
use super::options::RecordOptions;
use super::recorder::Recorder;
use super::spec::{FloatWeights, IntPath};
use crate::device::{Gpu, SpreadQuant};
use crate::ops::cache::PipelineCache;
use crate::ops::encoder::Encoder;
use crate::ops::linear::{LinearError, LinearScratch, LinearWeights};
use crate::tensor::{ActDtype, GpuTensor};

/// [`record_linear_with`], with more weights of the same input in the
/// multi-row GEMV's launch where `fused` (checked by [`fused`]) and the
/// neighbouring ops of `fold` (checked here by [`fold_unusable`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn record(
    gpu: &Gpu,
    cache: &PipelineCache,
    encoder: &mut Encoder,
    weights: &LinearWeights,
    choice: KernelChoice,
    x: &GpuTensor,
    out: &GpuTensor,
    scratch: &mut LinearScratch,
    opts: &RecordOptions,
    fused: Option<&Fused<'_>>,
    fold: &Fold<'_>,
) -> Result<(), LinearError> {
    let (n, k) = (weights.n, weights.k);
    let _span =
        tracing::debug_span!("record_linear", n, k, format = ?weights.format, ?choice).entered();
    let limit = gpu.caps.max_storage_binding;
    let align = u64::from(gpu.device.limits().min_storage_buffer_offset_alignment);
    let m = check_operands(weights, x, out, limit, align)?;
    if let Some(why) = fold_unusable(gpu, weights, choice, m, fold) {
        return Err(LinearError::Unsupported {
            what: format!("a folded norm or residual add: {why}"),
            n,
            k,
        });
    }
    if fold.residual && fused.is_some() {
        return Err(LinearError::Unsupported {
            what: "a residual add folded into fused linears".into(),
            n,
            k,
        });
    }
    for (w, o) in fused.iter().flat_map(|f| &f.more) {
        check_operands(w, x, o, limit, align)?;
    }
    if opts.raw_accumulator && out.dtype != ActDtype::F32 {
        return Err(LinearError::ActDtype {
            tensor: "out",
            dtype: format!("{:?} (the raw i32 accumulator needs F32)", out.dtype),
        });
    }
    crate::ops::cache::check_act_dtype(gpu, "linear", x.dtype)?;
    let weight_limit = opts.max_binding.map_or(limit, |b| b.min(limit));
    let max_invocations = gpu.device.limits().max_compute_invocations_per_workgroup;
    let mut gemv = opts
        .gemv
        .unwrap_or_else(|| GemvShape::default_for(m, max_invocations));
    if fused.is_some_and(|f| f.glu) {
        gemv = gemv.halved(m);
    }
    let rows_max = if opts.gemv.is_some() {
        ROWS_GEMV_MAX_M
    } else {
        rows_gemv_max_m(gpu)
    };
    let rows_gemv = m <= rows_max && rows_aligned(weights.row_bytes());
    if rows_gemv {
        gemv.check(m, max_invocations)
            .map_err(|what| LinearError::Unsupported { what, n, k })?;
    }
    let dispatches = Cell::new(0);
    let rec = Recorder {
        gpu,
        cache,
        weights,
        limit: weight_limit,
        align,
        m,
        act: x.dtype,
        gemv: rows_gemv.then_some(gemv),
        gemm: opts.gemm,
        coop: opts
            .coop
            .unwrap_or_else(|| CoopShape::for_adapter(&gpu.caps)),
        coop_asked: opts.coop,
        coop_gemm: opts.coop_gemm.unwrap_or_else(|| gpu.coop_gemm()),
        spirv_gemm: opts.spirv_gemm.unwrap_or_else(|| gpu.spirv_gemm()),
        cm2_bf16: opts.cm2_bf16.unwrap_or_else(|| gpu.cm2_bf16()),
        cm2_int4: opts.cm2_int4.unwrap_or_else(|| gpu.cm2_int4()),
        cm2_split: opts.cm2_split.unwrap_or_else(|| gpu.cm2_split()),
        piece_bytes: opts
            .piece_bytes
            .unwrap_or_else(|| crate::device::converted_piece_limit(m).max(scratch.piece_room())),
        cm2_kernel: opts.cm2_kernel,
        spirv_check: opts.spirv_check,
        gelu: opts.gelu_tanh,
        cm2_stack: opts.cm2_stack.unwrap_or_else(|| gpu.cm2_stack()),
        reuse_codes: opts.reuse_codes,
        quant_wgs: opts.quant_wgs,
        spread: if opts.quantize_apart {
            SpreadQuant::Off
        } else {
            opts.spread_quant.unwrap_or_else(|| gpu.spread_quant())
        },
        fused,
        fold: *fold,
        dispatches: &dispatches,
    };
    let unsupported = |what: String| LinearError::Unsupported { what, n, k };
    let choice_err = |why| LinearError::Choice {
        choice,
        format: weights.format,
        why,
    };
    // Weights converted for the layer before are not this one's (the row
    // chunks of an integer layer share this one's: `Recorder::each_converted`).
    scratch.forget_converted();
    scratch.set_gelu(false);
    match choice {
        KernelChoice::Integer { act, fast } => {
            if fast && !gpu.caps.subgroups {
                return Err(choice_err(
                    "the fast kernel needs subgroups, which this adapter lacks",
                ));
            }
            let int = IntPath::of(weights.format, act).map_err(choice_err)?;
            if int.w4 && k % 8 != 0 {
                return Err(unsupported(format!(
                    "int4 weights need K % 8 == 0, K = {k}"
                )));
            }
            let r = rec.integer_chunked(encoder, &int, fast, x, out, scratch, opts.raw_accumulator);
            scratch.set_dispatches(dispatches.get());
            r
        }
        KernelChoice::Float => {
            let wfmt = FloatWeights::of(weights.format)
                .ok_or_else(|| choice_err("an integer format needs an integer kernel"))?;
            let r = rec.float(encoder, wfmt, x, out, scratch);
            scratch.set_dispatches(dispatches.get());
            r
        }
    }
}

/// Checks shapes, dtypes, regions and binding sizes; returns M.
fn check_operands(
    w: &LinearWeights,
    x: &GpuTensor,
    out: &GpuTensor,
    limit: u64,
    align: u64,
) -> Result<u64, LinearError> {
    let (n, k) = (w.n, w.k);
    let shape_err = |tensor, t: &GpuTensor, expected: String| LinearError::Shape {
        tensor,
        shape: t.shape.clone(),
        expected,
        n,
        k,
    };
    if out.dtype != x.dtype {
        return Err(LinearError::ActDtype {
            tensor: "out",
            dtype: format!("{} while `x` is {}", out.dtype, x.dtype),
        });
    }
    let m = match x.shape.split_last() {
        Some((&kk, outer)) if kk == k => outer.iter().product::<u64>(),
        _ => return Err(shape_err("x", x, format!("[.., {k}]"))),
    };
    if out.shape.last() != Some(&n) || out.numel() != m * n {
        return Err(shape_err("out", out, format!("[{m}, {n}]")));
    }
    if m == 0 || n == 0 {
        return Err(shape_err("x", x, "non-empty operands".into()));
    }
    if k % 4 != 0 || k == 0 {
        return Err(LinearError::Unsupported {
            what: format!("K must be a non-zero multiple of 4, K = {k}"),
            n,
            k,
        });
    }
    if let Some(what) = beyond_u32_indices(m, n, k) {
        return Err(LinearError::Unsupported { what, n, k });
    }
    for (tensor, t) in [("x", x), ("out", out)] {
        if t.offset + t.binding_bytes() > t.buffer.size() {
            return Err(shape_err(
                tensor,
                t,
                format!(
                    "{} bytes at offset {} inside a buffer of {}",
                    t.binding_bytes(),
                    t.offset,
                    t.buffer.size()
                ),
            ));
        }
        if t.bytes() > limit {
            return Err(LinearError::BindingTooLarge {
                tensor,
                bytes: t.bytes(),
                limit,
            });
        }
    }
    let rows: u64 = w.parts.iter().map(|p| p.rows).sum();
    if rows != n {
        return Err(LinearError::Unsupported {
            what: format!("weight parts hold {rows} rows, expected N"),
            n,
            k,
        });
    }
    let rb = w.row_bytes();
    let parts = w.parts.iter().map(|p| ("weight", &p.region, p.rows * rb));
    let scale = w.scale.iter().map(|s| ("weight_scale", s, 4));
    let bias = w.bias.iter().map(|b| ("bias", b, 4 * n));
    for (region, r, need) in parts.chain(scale).chain(bias) {
        let err = |why: String| LinearError::Region {
            region,
            offset: r.offset,
            size: r.size,
            why,
        };
        if r.offset % align != 0 {
            return Err(err(format!(
                "offset is not a multiple of min_storage_buffer_offset_alignment {align}"
            )));
        }
        if r.size < need || r.offset + r.size > r.buffer.size() {
            return Err(err(format!(
                "needs {need} bytes inside a buffer of {}",
                r.buffer.size()
            )));
        }
        if region != "weight" && r.size > limit {
            return Err(LinearError::BindingTooLarge {
                tensor: region,
                bytes: r.size,
                limit,
            });
        }
    }
    Ok(m)
}

/// Why the kernels' u32 element indices cannot address these operands: the
/// products they index are M·K (activations), N·K (weights) and M·N
/// (outputs), each on its own.
fn beyond_u32_indices(m: u64, n: u64, k: u64) -> Option<String> {
    [("M·K", m, k), ("N·K", n, k), ("M·N", m, n)]
        .into_iter()
        .find(|&(_, a, b)| a.saturating_mul(b) > u64::from(u32::MAX))
        .map(|(what, a, b)| {
            format!("{what} = {a}·{b} is beyond the u32 element indices of the kernels")
        })
}

#[cfg(test)]
mod tests {
    use super::beyond_u32_indices;

    #[test]
    fn large_vocabularies_fit_the_kernels_indices() {
        // Llama 3's lm_head (vocab 128 256, hidden 4096), decode and a
        // 512-token prefill; Qwen2.5-7B's (152 064 × 3584).
        for (m, n, k) in [(1, 128_256, 4096), (512, 128_256, 4096), (1, 152_064, 3584)] {
            assert_eq!(beyond_u32_indices(m, n, k), None, "{m}x{n}x{k}");
        }
        // Each product on its own is what overflows.
        assert!(beyond_u32_indices(1, 1 << 20, 1 << 12).is_some());
        assert!(beyond_u32_indices(1 << 20, 4, 1 << 12).is_some());
        assert!(beyond_u32_indices(1 << 16, 1 << 16, 4).is_some());
    }
}
