//! Ops as a block's code calls them: thin wrappers that pass the runtime's
//! GPU, pipeline cache and the block's encoder to [`dynvram_gpu::ops`].

use dynvram_quant::KernelChoice;
use smallvec::SmallVec;

use crate::error::Result;
use crate::pass::BlockCtx;
use dynvram_gpu::ops::elementwise::{self, Unary};
use dynvram_gpu::ops::linear::{
    AddNorm, Fold, Fusion, LinearWeights, RecordOptions, Region, WeightPart, record_add_norm_quant,
    record_linear, record_linear_with, record_linears_fused,
};
use dynvram_gpu::tensor::GpuTensor;

impl BlockCtx<'_> {
    /// A weight of this block as an `f32` tensor view (norm weights, biases:
    /// tensors the model declared in [`crate::BlockSpec::tensors`]).
    pub fn weight_tensor(&mut self, name: &str) -> Result<GpuTensor> {
        let w = self.weight(name)?;
        if !(w.as_f32 || w.dtype == dynvram_loader::Dtype::F32) {
            return Err(crate::RuntimeError::Dtype {
                model: self.model().path().to_owned(),
                tensor: name.to_owned(),
                dtype: w.dtype,
                why: "was uploaded raw; declare it in BlockSpec::tensors to get f32".into(),
            });
        }
        Ok(GpuTensor {
            buffer: w.shared.clone(),
            offset: w.offset,
            shape: w.shape.iter().map(|&d| d as u64).collect(),
            dtype: crate::ActDtype::F32,
        })
    }

    /// `out = x · Wᵀ + b` for linear layer `layer` of this block, with the
    /// kernel path the model's plan chose for it (`x` `[M, K]`, `out` `[M, N]`,
    /// both f32 or both f16).
    pub fn linear(&mut self, layer: &str, x: &GpuTensor, out: &GpuTensor) -> Result<()> {
        let quantized = std::mem::take(&mut self.quantized);
        self.linear_with(layer, x, out, quantized, false)
            .map(|_| ())
    }

    /// [`Self::linear`] then `out = gelu_tanh(out)`: in the GEMM's epilogue
    /// where the layer runs on the float SPIR-V GEMMs (no LoRA patch), else
    /// a launch after it.
    pub fn linear_gelu(&mut self, layer: &str, x: &GpuTensor, out: &GpuTensor) -> Result<()> {
        let quantized = std::mem::take(&mut self.quantized);
        if !self.linear_with(layer, x, out, quantized, true)? {
            self.gelu_tanh(out)?;
        }
        Ok(())
    }

    /// [`Self::linear`] for several layers of one input (q/k/v): one launch
    /// where the kernels allow ([`Fusion::Stack`]), else back to back, an
    /// integer layer using the activation codes the one before it made of
    /// `x` where they were quantized the same way, so the input is rotated
    /// and quantized once.
    pub fn linears(&mut self, layers: &[(&str, &GpuTensor)], x: &GpuTensor) -> Result<()> {
        if self.try_fused(Fuse::Stack(layers), x, &Fold::default())? {
            return Ok(());
        }
        let quantized = std::mem::take(&mut self.quantized);
        let model = self.model();
        // A LoRA patch records linears of its own between them.
        let reuse = !layers.iter().any(|(l, _)| model.patches.contains_key(*l));
        for (i, (layer, out)) in layers.iter().enumerate() {
            self.linear_with(layer, x, out, reuse && (i > 0 || quantized), false)?;
        }
        Ok(())
    }

    /// `out = silu(x · gateᵀ) · (x · upᵀ)` (SwiGLU's first half): one launch
    /// where the kernels allow ([`Fusion::Glu`]), else the two linears into
    /// `gate_out` and `up_out` and the SwiGLU kernel.
    pub fn linears_swiglu(
        &mut self,
        [gate, up]: [&str; 2],
        x: &GpuTensor,
        [gate_out, up_out]: [&GpuTensor; 2],
        out: &GpuTensor,
    ) -> Result<()> {
        if self.try_fused(Fuse::Glu([gate, up], out), x, &Fold::default())? {
            return Ok(());
        }
        // try_fused took `quantized` only if it recorded.
        self.linears(&[(gate, gate_out), (up, up_out)], x)?;
        self.swiglu(gate_out, up_out, out)
    }

    /// Records `layers` as one fused launch (with `fold`) and returns
    /// `true`, or records nothing and returns `false` (a LoRA patch,
    /// differing kernel choices, or what [`record_linears_fused`] refuses).
    pub(crate) fn try_fused(
        &mut self,
        layers: Fuse<'_>,
        x: &GpuTensor,
        fold: &Fold<'_>,
    ) -> Result<bool> {
        // Inline: recorded for every layer of every token.
        let names: SmallVec<[&str; 4]> = match layers {
            Fuse::Stack(l) => l.iter().map(|(name, _)| *name).collect(),
            Fuse::Glu(names, _) => SmallVec::from_slice(&names),
        };
        let model = self.model();
        if names.iter().any(|l| model.patches.contains_key(*l)) {
            return Ok(false);
        }
        // One launch reads every layer: they must be in one part (a later
        // layer's part would end the part holding the first).
        let mut weights: SmallVec<[LinearWeights; 4]> = SmallVec::new();
        let mut choice = None;
        let unit = self.unit();
        for layer in &names {
            let (w, c) = self.layer_weights(layer)?;
            if self.unit() != unit {
                return Err(self.part_order(model.linear(names[0])?.weight, unit));
            }
            if choice.is_some_and(|first| first != c) {
                return Ok(false);
            }
            choice = Some(c);
            weights.push(w);
        }
        let (Some(choice), [first, second, rest @ ..]) = (choice, &weights[..]) else {
            return Ok(false);
        };
        let stack: SmallVec<[(&LinearWeights, &GpuTensor); 4]>;
        let fusion = match layers {
            Fuse::Stack(l) => {
                stack = weights.iter().zip(l).map(|(w, (_, o))| (w, *o)).collect();
                Fusion::Stack(&stack)
            }
            Fuse::Glu(_, out) if rest.is_empty() => Fusion::Glu {
                gate: first,
                up: second,
                out,
            },
            Fuse::Glu(..) => return Ok(false),
        };
        let rt = self.runtime();
        let mut scratch = rt.linear_scratch.lock().unwrap_or_else(|e| e.into_inner());
        let opts = RecordOptions {
            reuse_codes: self.quantized,
            ..RecordOptions::default()
        };
        let fused = record_linears_fused(
            rt.gpu(),
            rt.pipelines(),
            self.encoder(),
            fusion,
            choice,
            x,
            &mut scratch,
            &opts,
            fold,
        )
        .map_err(|source| crate::RuntimeError::Linear {
            layer: names.join("+"),
            source,
        })?;
        if fused {
            self.quantized = false;
        }
        Ok(fused)
    }

    /// Layer `layer`'s weights as the linear kernels take them, and the
    /// kernel path the model's plan chose for it.
    pub(crate) fn layer_weights(&mut self, layer: &str) -> Result<(LinearWeights, KernelChoice)> {
        let l = self.model().linear(layer)?;
        Ok((self.linear_weights(l)?, l.path.kernel))
    }

    /// [`Self::layer_weights`] without moving to the layer's part (for its
    /// shapes and format; the regions may be in a part not staged yet).
    pub(crate) fn layer_weights_located(
        &self,
        layer: &str,
    ) -> Result<(LinearWeights, KernelChoice)> {
        let l = self.model().linear(layer)?;
        Ok((self.linear_weights_located(l)?, l.path.kernel))
    }

    /// `l`'s tensors where they are during this block, its part entered.
    fn linear_weights(&mut self, l: &crate::model::Linear) -> Result<LinearWeights> {
        for i in [Some(l.weight), l.scale, l.bias].into_iter().flatten() {
            self.enter(i)?;
        }
        self.linear_weights_located(l)
    }

    /// `l`'s tensors where they are during their part.
    fn linear_weights_located(&self, l: &crate::model::Linear) -> Result<LinearWeights> {
        let region_of = |w: crate::WeightView<'_>| Region {
            buffer: w.shared.clone(),
            offset: w.offset,
            size: w.size,
        };
        let region = |i: usize| -> Result<Region> { Ok(region_of(self.locate(i)?.0)) };
        let weight = self.locate(l.weight)?.0;
        Ok(LinearWeights {
            // A resident bf16 weight converted as it was uploaded.
            format: if weight.as_f16 {
                dynvram_quant::Format::F16
            } else {
                l.info.format
            },
            n: l.info.n as u64,
            k: l.info.k as u64,
            parts: [WeightPart {
                region: region_of(weight),
                rows: l.info.n as u64,
            }]
            .into(),
            scale: l.scale.map(region).transpose()?,
            bias: l.bias.map(region).transpose()?,
        })
    }

    /// The linear, with GELU on its output where `gelu` asks and the kernel
    /// takes it in its epilogue: whether it did.
    fn linear_with(
        &mut self,
        layer: &str,
        x: &GpuTensor,
        out: &GpuTensor,
        reuse_codes: bool,
        gelu: bool,
    ) -> Result<bool> {
        let model = self.model();
        let l = self.model().linear(layer)?;
        let (weights, kernel, info) = (self.linear_weights(l)?, l.path.kernel, &l.info);
        let rt = self.runtime();
        let patch = model.patches.get(layer).cloned();
        let mut scratch = rt.linear_scratch.lock().unwrap_or_else(|e| e.into_inner());
        let linear_err = |source| crate::RuntimeError::Linear {
            layer: layer.to_owned(),
            source,
        };
        let (gpu, cache) = (rt.gpu(), rt.pipelines());
        record_linear_with(
            gpu,
            cache,
            self.encoder(),
            &weights,
            kernel,
            x,
            out,
            &mut scratch,
            &RecordOptions {
                reuse_codes,
                // A patch's product is added to the output first.
                gelu_tanh: gelu && patch.is_none(),
                ..RecordOptions::default()
            },
        )
        .map_err(linear_err)?;
        let Some(patch) = patch else {
            return Ok(scratch.last_gelu());
        };
        // y += scale · (x Aᵀ) Bᵀ: two small f32-weight linears, a scale, an
        // add, with intermediates in the activations' dtype.
        let m = (x.numel() / info.k as u64) as usize;
        let t = rt.activation_of(
            &format!("{layer}.lora_t"),
            &[m, patch.rank() as usize],
            x.dtype,
        )?;
        let u = rt.activation_of(&format!("{layer}.lora_u"), &[m, info.n], x.dtype)?;
        let kernel = crate::lora::LoraPatch::kernel();
        record_linear(
            gpu,
            cache,
            self.encoder(),
            &patch.down(),
            kernel,
            x,
            &t,
            &mut scratch,
        )
        .map_err(linear_err)?;
        record_linear(
            gpu,
            cache,
            self.encoder(),
            &patch.up(),
            kernel,
            &t,
            &u,
            &mut scratch,
        )
        .map_err(linear_err)?;
        drop(scratch);
        elementwise::record_unary_inplace(
            gpu,
            cache,
            self.encoder(),
            Unary::Scale(patch.scale),
            &u,
        )?;
        // `out` may be a view with more dimensions; the add sees it as [M, N].
        let out_2d = GpuTensor {
            shape: u.shape.clone(),
            ..out.clone()
        };
        elementwise::record_add_inplace(gpu, cache, self.encoder(), &out_2d, &u)?;
        self.keep_alive(t);
        self.keep_alive(u);
        Ok(false)
    }

    /// `x = gelu_tanh(x)` in place.
    pub fn gelu_tanh(&mut self, x: &GpuTensor) -> Result<()> {
        let rt = self.runtime();
        Ok(elementwise::record_unary_inplace(
            rt.gpu(),
            rt.pipelines(),
            self.encoder(),
            Unary::GeluTanh,
            x,
        )?)
    }

    /// `x += y` (residual add).
    pub fn add_assign(&mut self, x: &GpuTensor, y: &GpuTensor) -> Result<()> {
        let rt = self.runtime();
        Ok(elementwise::record_add_inplace(
            rt.gpu(),
            rt.pipelines(),
            self.encoder(),
            x,
            y,
        )?)
    }
}

/// Layers [`BlockCtx::try_fused`] records as one launch.
pub(crate) enum Fuse<'a> {
    /// Each into its own output.
    Stack(&'a [(&'a str, &'a GpuTensor)]),
    /// Gate and up into one SwiGLU output.
    Glu([&'a str; 2], &'a GpuTensor),
}

/// Decoder-transformer ops (Llama family): RMSNorm, RoPE, the KV cache,
/// attention, SwiGLU, the embedding gather, the greedy argmax and row
/// copies, as thin wrappers over [`dynvram_gpu::ops`] like the ones above.
impl BlockCtx<'_> {
    /// `out = weight · x / √(mean(x²) + eps)` per row (RMSNorm in f32);
    /// `weight` is f32 `[hidden]`, `x` and `out` `[rows, hidden]` of one
    /// dtype (f32 or f16).
    pub fn rms_norm(
        &mut self,
        x: &GpuTensor,
        weight: &GpuTensor,
        out: &GpuTensor,
        eps: f32,
    ) -> Result<()> {
        let rt = self.runtime();
        Ok(dynvram_gpu::ops::norm::record_rms_norm(
            rt.gpu(),
            rt.pipelines(),
            self.encoder(),
            x,
            weight,
            out,
            eps,
        )?)
    }

    /// `x += delta`, then `out = rms_norm(x)` (one launch).
    pub fn add_rms_norm(
        &mut self,
        x: &GpuTensor,
        delta: &GpuTensor,
        weight: &GpuTensor,
        out: &GpuTensor,
        eps: f32,
    ) -> Result<()> {
        let rt = self.runtime();
        Ok(dynvram_gpu::ops::norm::record_add_rms_norm(
            rt.gpu(),
            rt.pipelines(),
            self.encoder(),
            x,
            delta,
            weight,
            out,
            eps,
        )?)
    }

    /// [`Self::add_rms_norm`] before the linear layer `next` (the first of
    /// the linears recorded next on `out`): with an integer kernel, the
    /// rotation and quantization of `out` run in the norm's launch
    /// ([`record_add_norm_quant`]) and those linears take its codes; else
    /// the plain norm. Record the linears on `out` right after.
    #[allow(clippy::too_many_arguments)] // the norm's operands and `next`
    pub fn add_rms_norm_for(
        &mut self,
        x: &GpuTensor,
        delta: &GpuTensor,
        weight: &GpuTensor,
        out: &GpuTensor,
        eps: f32,
        next: &str,
    ) -> Result<()> {
        self.quantized = false;
        if !self.model().patches.contains_key(next) {
            let (first, choice) = self.layer_weights(next)?;
            let rt = self.runtime();
            let mut scratch = rt.linear_scratch.lock().unwrap_or_else(|e| e.into_inner());
            let norm = AddNorm {
                xs: x,
                delta,
                weight,
                eps,
                out,
            };
            self.quantized = record_add_norm_quant(
                rt.gpu(),
                rt.pipelines(),
                self.encoder(),
                &norm,
                &first,
                choice,
                &mut scratch,
            )
            .map_err(|source| crate::RuntimeError::Linear {
                layer: next.to_owned(),
                source,
            })?;
        }
        if self.quantized {
            return Ok(());
        }
        self.add_rms_norm(x, delta, weight, out, eps)
    }

    /// RoPE on q and k of the same rows (one launch); `k` may be a view of a
    /// KV cache.
    #[allow(clippy::too_many_arguments)] // the op's operands
    pub fn rope_qk(
        &mut self,
        table: &dynvram_gpu::ops::rope::RopeTable,
        q: &GpuTensor,
        k: &GpuTensor,
        n_heads: u64,
        n_kv_heads: u64,
        pos0: u64,
    ) -> Result<()> {
        let rt = self.runtime();
        Ok(dynvram_gpu::ops::rope::record_rope_qk(
            rt.gpu(),
            rt.pipelines(),
            self.encoder(),
            table,
            q,
            k,
            n_heads,
            n_kv_heads,
            pos0,
        )?)
    }

    /// RoPE (`rotate_half` form) in place on `x` `[seq, n_heads·head_dim]`,
    /// row s at position `pos0 + s`.
    pub fn rope(
        &mut self,
        table: &dynvram_gpu::ops::rope::RopeTable,
        x: &GpuTensor,
        n_heads: u64,
        pos0: u64,
    ) -> Result<()> {
        let rt = self.runtime();
        Ok(dynvram_gpu::ops::rope::record_rope(
            rt.gpu(),
            rt.pipelines(),
            self.encoder(),
            table,
            x,
            n_heads,
            pos0,
        )?)
    }

    /// Copies `rows` `[s, width]` into rows `pos0..pos0+s` of a KV cache `[max_seq, width]`.
    pub fn kv_write(&mut self, rows: &GpuTensor, cache: &GpuTensor, pos0: u64) -> Result<()> {
        Ok(dynvram_gpu::ops::attention::record_kv_write(
            self.encoder(),
            rows,
            cache,
            pos0,
        )?)
    }

    /// Causal GQA attention of the query rows at `pos0..` over cache rows
    /// `0..kv_len`; with `rope`, q and the new cache rows `pos0..` of k are
    /// rotated first (fused into the decode kernel where it runs; see
    /// [`dynvram_gpu::ops::attention::record_attention`]).
    #[allow(clippy::too_many_arguments)] // the op's operands
    pub fn attention(
        &mut self,
        q: &GpuTensor,
        k_cache: &GpuTensor,
        v_cache: &GpuTensor,
        out: &GpuTensor,
        heads: dynvram_gpu::ops::attention::Heads,
        kv_len: u64,
        pos0: u64,
        rope: Option<&dynvram_gpu::ops::rope::RopeTable>,
    ) -> Result<()> {
        let rt = self.runtime();
        let mut scratch = rt.linear_scratch.lock().unwrap_or_else(|e| e.into_inner());
        Ok(dynvram_gpu::ops::attention::record_attention(
            rt.gpu(),
            rt.pipelines(),
            self.encoder(),
            q,
            k_cache,
            v_cache,
            out,
            heads,
            kv_len,
            pos0,
            rope,
            &mut scratch,
        )?)
    }

    /// `out = silu(gate) · up`.
    pub fn swiglu(&mut self, gate: &GpuTensor, up: &GpuTensor, out: &GpuTensor) -> Result<()> {
        let rt = self.runtime();
        Ok(elementwise::record_swiglu(
            rt.gpu(),
            rt.pipelines(),
            self.encoder(),
            gate,
            up,
            out,
        )?)
    }

    /// `out[t] = table[ids[t]]` in `out`'s dtype (f32 or f16), where `table` is a `[vocab, hidden]`
    /// weight of this block declared in [`crate::BlockSpec::raw_tensors`]
    /// (f32, f16 or bf16 as stored) and `ids` holds `u32` token ids (their
    /// bits, in a tensor of shape `[tokens]`).
    pub fn embed(&mut self, table: &str, ids: &GpuTensor, out: &GpuTensor) -> Result<()> {
        use dynvram_gpu::ops::embed::{EmbedTable, TableDtype, TokenIds, record_embed};
        let w = self.weight(table)?;
        let dtype_err = |why: &str| crate::RuntimeError::Dtype {
            model: self.model().path().to_owned(),
            tensor: table.to_owned(),
            dtype: w.dtype,
            why: why.into(),
        };
        if w.as_f32 {
            return Err(dtype_err(
                "was converted to f32; declare it in BlockSpec::raw_tensors",
            ));
        }
        let dtype = match w.dtype {
            dynvram_loader::Dtype::F32 => TableDtype::F32,
            dynvram_loader::Dtype::F16 => TableDtype::F16,
            dynvram_loader::Dtype::BF16 => TableDtype::Bf16,
            _ => {
                return Err(dtype_err(
                    "is not an embedding table type (f32, f16 or bf16)",
                ));
            }
        };
        let &[vocab, hidden] = w.shape else {
            return Err(crate::RuntimeError::Shape {
                op: "embed".into(),
                detail: format!(
                    "table `{table}` has shape {:?}, expected [vocab, hidden]",
                    w.shape
                ),
            });
        };
        let table = EmbedTable {
            buffer: w.buffer,
            offset: w.offset,
            vocab: vocab as u64,
            hidden: hidden as u64,
            dtype,
        };
        let ids = TokenIds {
            buffer: &ids.buffer,
            offset: ids.offset,
            count: ids.numel(),
        };
        let rt = self.runtime();
        Ok(record_embed(
            rt.gpu(),
            rt.pipelines(),
            self.encoder(),
            &table,
            &ids,
            out,
        )?)
    }

    /// `out[0] = argmax(logits' last row)` as a `u32` (greedy decoding on
    /// the GPU; see [`dynvram_gpu::ops::argmax`]); `logits` `[rows, vocab]`, f32
    /// or f16.
    pub fn argmax(&mut self, logits: &GpuTensor, out: &GpuTensor) -> Result<()> {
        let rows = logits.numel() / logits.shape.last().copied().unwrap_or(1).max(1);
        let rt = self.runtime();
        Ok(dynvram_gpu::ops::argmax::record_argmax(
            rt.gpu(),
            rt.pipelines(),
            self.encoder(),
            logits,
            rows.saturating_sub(1),
            out,
        )?)
    }

    /// Copies `rows` rows starting at `src_row` of `src` `[.., width]` to
    /// `dst` `[.., width]` starting at `dst_row` (capturing a hidden state,
    /// taking the last row of a sequence).
    pub fn copy_rows(
        &mut self,
        src: &GpuTensor,
        src_row: u64,
        dst: &GpuTensor,
        dst_row: u64,
        rows: u64,
    ) -> Result<()> {
        let width = |t: &GpuTensor| t.shape.last().copied().unwrap_or(0);
        let height = |t: &GpuTensor| t.numel() / width(t).max(1);
        if src.dtype != dst.dtype
            || width(src) != width(dst)
            || src_row + rows > height(src)
            || dst_row + rows > height(dst)
            || *src.buffer == *dst.buffer
        {
            return Err(crate::RuntimeError::Shape {
                op: "copy_rows".into(),
                detail: format!(
                    "rows {src_row}..{} of {:?} {:?} into rows {dst_row}..{} of {:?} {:?} (distinct buffers, same width and dtype)",
                    src_row + rows,
                    src.shape,
                    src.dtype,
                    dst_row + rows,
                    dst.shape,
                    dst.dtype
                ),
            });
        }
        let row_bytes = width(src) * src.dtype.size();
        let (from, to, bytes) = (
            src.offset + src_row * row_bytes,
            dst.offset + dst_row * row_bytes,
            rows * row_bytes,
        );
        if !from.is_multiple_of(4) || !to.is_multiple_of(4) || !bytes.is_multiple_of(4) {
            return Err(crate::RuntimeError::Shape {
                op: "copy_rows".into(),
                detail: format!(
                    "copies must be whole 4-byte words: {bytes} bytes from byte {from} to byte {to} ({:?})",
                    src.dtype
                ),
            });
        }
        self.encoder()
            .commands()
            .copy_buffer_to_buffer(&src.buffer, from, &dst.buffer, to, bytes);
        Ok(())
    }
}
