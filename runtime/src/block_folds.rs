//! Block ops that fold a neighbour into a linear's launch where the kernel
//! allows ([`dynvram_gpu::ops::linear::Fold`]): the RMS norm before q/k/v or
//! gate/up, the residual add after o or down. Each falls back to the
//! separate launches, so callers write one sequence for every format.

use std::sync::atomic::Ordering;

use crate::error::Result;
use crate::pass::BlockCtx;
use dynvram_gpu::ops::linear::{
    Fold, NORM_FOLD_MAX_M, NormFold, RecordOptions, fold_unusable, record_linear_folded,
};
use dynvram_gpu::tensor::GpuTensor;

/// `rms_norm(x)` as the linears after it read it.
#[derive(Debug, Clone, Copy)]
pub struct RmsNormOf<'a> {
    /// The rows normalised (the residual stream).
    pub x: &'a GpuTensor,
    /// The norm's f32 weight `[K]`.
    pub weight: &'a GpuTensor,
    pub eps: f32,
    /// Where the norm is written when it cannot be folded (`x`'s shape).
    pub out: &'a GpuTensor,
}

impl RmsNormOf<'_> {
    fn fold(&self) -> Fold<'_> {
        Fold {
            norm: Some(NormFold {
                weight: self.weight,
                eps: self.eps,
            }),
            residual: false,
        }
    }
}

impl BlockCtx<'_> {
    /// Whether linear layer `layer` takes a norm and a residual add in its
    /// own launch at `m` rows (no LoRA patch, the multi-row GEMV, `m`
    /// within [`NORM_FOLD_MAX_M`]; see [`fold_unusable`]).
    pub fn folds(&self, layer: &str, m: u64) -> Result<bool> {
        if m > NORM_FOLD_MAX_M || self.model().patches.contains_key(layer) {
            return Ok(false);
        }
        let l = self.model().linear(layer)?;
        // Answered once per layer and M (integer layers fold only with the
        // spread quantization, a device setting).
        let Some(memo) = usize::try_from(m)
            .ok()
            .and_then(|m| l.folds.get(m.wrapping_sub(1)))
        else {
            return Ok(false);
        };
        match memo.load(Ordering::Relaxed) {
            1 => return Ok(false),
            2 => return Ok(true),
            _ => {}
        }
        let (weights, choice) = self.layer_weights_located(layer)?;
        let any = Fold {
            norm: None,
            residual: true,
        };
        let folds = fold_unusable(self.runtime().gpu(), &weights, choice, m, &any).is_none();
        memo.store(if folds { 2 } else { 1 }, Ordering::Relaxed);
        Ok(folds)
    }

    /// The linears of `rms_norm(norm.x)` (as [`Self::linears`]), the norm
    /// folded into their launch where each takes it; else the norm into
    /// `norm.out` first.
    pub fn normed_linears(
        &mut self,
        norm: &RmsNormOf<'_>,
        layers: &[(&str, &GpuTensor)],
    ) -> Result<()> {
        let m = rows(norm.x);
        if !self.all_fold(layers.iter().map(|(l, _)| *l), m)? {
            self.rms_norm(norm.x, norm.weight, norm.out, norm.eps)?;
            return self.linears(layers, norm.out);
        }
        let fold = norm.fold();
        if self.try_fused(super::block_ops::Fuse::Stack(layers), norm.x, &fold)? {
            return Ok(());
        }
        // Integer layers after the first take the rotated rows it left.
        for (i, (layer, out)) in layers.iter().enumerate() {
            self.linear_folded(layer, norm.x, out, &fold, i > 0)?;
        }
        Ok(())
    }

    /// SwiGLU's first half on `rms_norm(norm.x)` (as
    /// [`Self::linears_swiglu`]), the norm folded in where the layers take
    /// it; else the norm into `norm.out` first.
    pub fn normed_linears_swiglu(
        &mut self,
        norm: &RmsNormOf<'_>,
        [gate, up]: [&str; 2],
        [gate_out, up_out]: [&GpuTensor; 2],
        out: &GpuTensor,
    ) -> Result<()> {
        let m = rows(norm.x);
        let fold = norm.fold();
        if self.all_fold([gate, up].into_iter(), m)?
            && self.try_fused(super::block_ops::Fuse::Glu([gate, up], out), norm.x, &fold)?
        {
            return Ok(());
        }
        self.rms_norm(norm.x, norm.weight, norm.out, norm.eps)?;
        self.linears_swiglu([gate, up], norm.out, [gate_out, up_out], out)
    }

    /// `resid += x · Wᵀ + b` for linear layer `layer`: one launch where
    /// the layer takes the add, else the linear into `tmp` and the add.
    pub fn linear_add(
        &mut self,
        layer: &str,
        x: &GpuTensor,
        resid: &GpuTensor,
        tmp: &GpuTensor,
    ) -> Result<()> {
        if self.folds(layer, rows(x))? {
            let fold = Fold {
                norm: None,
                residual: true,
            };
            return self.linear_folded(layer, x, resid, &fold, false);
        }
        self.linear(layer, x, tmp)?;
        self.add_assign(resid, tmp)
    }

    fn all_fold<'n>(&self, mut layers: impl Iterator<Item = &'n str>, m: u64) -> Result<bool> {
        layers.try_fold(true, |all, l| Ok(all && self.folds(l, m)?))
    }

    fn linear_folded(
        &mut self,
        layer: &str,
        x: &GpuTensor,
        out: &GpuTensor,
        fold: &Fold<'_>,
        reuse_codes: bool,
    ) -> Result<()> {
        self.quantized = false;
        let (weights, choice) = self.layer_weights(layer)?;
        let rt = self.runtime();
        let mut scratch = rt.linear_scratch.lock().unwrap_or_else(|e| e.into_inner());
        record_linear_folded(
            rt.gpu(),
            rt.pipelines(),
            self.encoder(),
            &weights,
            choice,
            x,
            out,
            &mut scratch,
            fold,
            &RecordOptions {
                reuse_codes,
                ..RecordOptions::default()
            },
        )
        .map_err(|source| crate::RuntimeError::Linear {
            layer: layer.to_owned(),
            source,
        })
    }
}

/// Rows of `[.., K]` activations.
fn rows(x: &GpuTensor) -> u64 {
    x.numel() / x.shape.last().copied().unwrap_or(1).max(1)
}
