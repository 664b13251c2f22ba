//! One forward pass of a Llama-family decoder on the runtime: the token
//! gather, one block per decoder layer with its KV cache, and the head.

use std::cell::Cell;

use dynvram_runtime::device::{ReadbackRing, ReadbackSlot};
use dynvram_runtime::loader::ModelFiles;
use dynvram_runtime::ops::attention::Heads;
use dynvram_runtime::ops::rope::RopeTable;
use dynvram_runtime::trace::Trace;
use dynvram_runtime::{
    ActDtype, Activation, BlockCtx, GpuTensor, Model, PassEnd, PassStats, RmsNormOf, Runtime,
    RuntimeError,
};

use super::checkpoint::{Checkpoint, Limits, names};
use super::{LlamaConfig, LlamaError};
use crate::host_embed::HostEmbed;

/// Which rows' logits a pass computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitRows {
    /// Every input row (`[seq, vocab]`).
    All,
    /// The last row only (`[1, vocab]`): decoding needs no more.
    Last,
}

/// Options of [`Llama::forward_with`].
#[derive(Debug, Default)]
pub struct ForwardOptions<'t> {
    /// Which logits to compute (default: all rows).
    pub logits: Option<LogitRows>,
    /// Also read back the residual stream after every layer and the final
    /// norm's output (for checks against a reference; costs copies).
    pub capture: bool,
    /// Record a timeline of the pass.
    pub trace: Option<&'t mut Trace>,
    /// Write new k/v rows through the k/v activations and copies even where
    /// the caches could take them straight from the GEMVs (the fallback for
    /// unaligned rows; both give the same bits).
    pub kv_copies: bool,
}

/// What a pass returns.
#[derive(Debug, Clone)]
pub struct Forward {
    /// Logits, row-major `[rows, vocab]`.
    pub logits: Vec<f32>,
    /// Rows of `logits`.
    pub rows: usize,
    /// The pass's figures (streamed bytes, time).
    pub stats: PassStats,
    /// With `capture`: the residual stream after each layer, `[seq, hidden]` each.
    pub hidden: Vec<Vec<f32>>,
    /// With `capture`: the final norm's output `[seq, hidden]`.
    pub final_norm: Vec<f32>,
}

/// Where a pass's token ids come from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ids<'a> {
    /// From the host.
    Host(&'a [u32]),
    /// One id the previous pass's [`Greedy`] choice left on the GPU: in the
    /// one-row set's id buffer, and with tied embeddings its row already
    /// gathered into that set's `x`.
    OnGpu,
}

impl Ids<'_> {
    fn len(&self) -> usize {
        match self {
            Self::Host(ids) => ids.len(),
            Self::OnGpu => 1,
        }
    }
}

/// A one-row pass choosing its next token on the GPU (the pipelined greedy
/// loop): the argmax of its logits goes into the one-row set's id buffer
/// (with tied embeddings, that token's row into its `x`: the table is the
/// head's weight) and is copied into a slot of `ring`; the logits are not
/// read back, and a resident pass returns without waiting for the GPU.
pub(crate) struct Greedy<'r> {
    pub ring: &'r mut ReadbackRing,
}

/// The activations of a pass over `rows` rows.
#[derive(Debug)]
struct Acts {
    rows: usize,
    /// Token ids (u32 bits) for the GPU gather.
    ids: Activation,
    x: Activation,
    h: Activation,
    q: Activation,
    k: Activation,
    v: Activation,
    attn: Activation,
    o: Activation,
    gate: Activation,
    up: Activation,
    act: Activation,
    /// `[rows, vocab]`.
    logits: Activation,
}

impl Acts {
    fn new(
        rt: &Runtime,
        c: &LlamaConfig,
        rows: usize,
        dtype: ActDtype,
    ) -> Result<Self, RuntimeError> {
        let a = |label: &str, cols: usize| rt.activation_of(label, &[rows, cols], dtype);
        Ok(Self {
            rows,
            ids: rt.activation("ids", &[rows])?,
            x: a("x", c.hidden_size)?,
            h: a("h", c.hidden_size)?,
            q: a("q", c.q_width())?,
            k: a("k", c.kv_width())?,
            v: a("v", c.kv_width())?,
            attn: a("attn", c.q_width())?,
            o: a("o", c.hidden_size)?,
            gate: a("gate", c.intermediate_size)?,
            up: a("up", c.intermediate_size)?,
            act: a("act", c.intermediate_size)?,
            logits: a("logits", c.vocab_size)?,
        })
    }
}

/// A Llama-family model ready to run on an opened [`Model`]: its KV cache,
/// RoPE table and activations.
///
/// Activations and the KV cache are f32 by default; [`Llama::with_dtype`]
/// makes them f16 (kernels still accumulate in f32, weights, norms and the
/// RoPE table are unchanged; logits come back widened to f32).
#[derive(Debug)]
pub struct Llama {
    config: LlamaConfig,
    limits: Limits,
    dtype: ActDtype,
    lm_head: &'static str,
    rope: RopeTable,
    kv: Vec<(Activation, Activation)>,
    /// Each layer's tensor names, formatted once (not per decode step).
    names: Vec<LayerNames>,
    sets: Vec<Acts>,
    host_embed: Option<HostEmbed>,
}

/// One decoder layer's tensor and linear names.
#[derive(Debug)]
struct LayerNames {
    input_norm: String,
    post_norm: String,
    q: String,
    k: String,
    v: String,
    o: String,
    gate: String,
    up: String,
    down: String,
}

impl LayerNames {
    fn new(l: usize) -> Self {
        let p = |name: &str| names::proj(l, name);
        Self {
            input_norm: names::input_norm(l),
            post_norm: names::post_norm(l),
            q: p("q_proj"),
            k: p("k_proj"),
            v: p("v_proj"),
            o: p("o_proj"),
            gate: p("gate_proj"),
            up: p("up_proj"),
            down: p("down_proj"),
        }
    }
}

impl Llama {
    /// Allocates the KV cache (`limits.max_seq` positions per layer) and
    /// uploads the RoPE table. Open the [`Model`] first with
    /// `ckpt.spec(limits)`, which reserves this memory in the plan.
    pub fn new(rt: &Runtime, ckpt: &Checkpoint, limits: Limits) -> Result<Self, LlamaError> {
        Self::with_dtype(rt, ckpt, limits, ActDtype::F32)
    }

    /// [`Self::new`] with activations and KV cache in `dtype`. F16 needs
    /// `SHADER_F16`; without it this fails with the runtime's
    /// `GpuError::NoShaderF16` (no silent fallback to f32).
    pub fn with_dtype(
        rt: &Runtime,
        ckpt: &Checkpoint,
        limits: Limits,
        dtype: ActDtype,
    ) -> Result<Self, LlamaError> {
        let c = ckpt.config.clone();
        let _span = tracing::info_span!(
            "llama_new",
            layers = c.num_hidden_layers,
            max_seq = limits.max_seq,
            ?dtype
        )
        .entered();
        if limits.max_seq == 0 || limits.max_rows == 0 || limits.max_rows > limits.max_seq {
            return Err(LlamaError::Input(format!(
                "limits max_rows {} and max_seq {} must satisfy 0 < max_rows <= max_seq",
                limits.max_rows, limits.max_seq
            )));
        }
        let rope = RopeTable::from_inv_freq(rt.gpu(), &c.inv_freq(), limits.max_seq as u64, 1.0)
            .map_err(RuntimeError::from)?;
        let kv = (0..c.num_hidden_layers)
            .map(|l| {
                let shape = [limits.max_seq, c.kv_width()];
                Ok((
                    rt.activation_of(&format!("k_cache.{l}"), &shape, dtype)?,
                    rt.activation_of(&format!("v_cache.{l}"), &shape, dtype)?,
                ))
            })
            .collect::<Result<Vec<_>, RuntimeError>>()?;
        let host_embed = if c.tie_word_embeddings {
            let files = match ckpt.weights.as_slice() {
                [one] => ModelFiles::open(one),
                many => ModelFiles::from_files(many),
            }
            .map_err(RuntimeError::from)?;
            Some(HostEmbed::new(files, names::EMBED)?)
        } else {
            None
        };
        let names = (0..c.num_hidden_layers).map(LayerNames::new).collect();
        Ok(Self {
            lm_head: ckpt.lm_head(),
            config: c,
            limits,
            dtype,
            rope,
            kv,
            names,
            sets: Vec::new(),
            host_embed,
        })
    }

    /// The config.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The limits it was built for.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The activation dtype.
    pub fn dtype(&self) -> ActDtype {
        self.dtype
    }

    /// Prefill-style pass: logits of every row of `ids` at positions
    /// `pos0..`, after writing their keys and values into the cache (rows
    /// `0..pos0` must hold the earlier positions).
    pub fn forward(
        &mut self,
        rt: &Runtime,
        model: &Model,
        ids: &[u32],
        pos0: usize,
    ) -> Result<Forward, LlamaError> {
        self.forward_with(rt, model, ids, pos0, ForwardOptions::default())
    }

    /// [`Self::forward`] with options.
    pub fn forward_with(
        &mut self,
        rt: &Runtime,
        model: &Model,
        ids: &[u32],
        pos0: usize,
        opts: ForwardOptions<'_>,
    ) -> Result<Forward, LlamaError> {
        self.pass(rt, model, Ids::Host(ids), pos0, opts, None)
            .map(|(f, _)| f)
    }

    /// One pass; with `greedy` (one row), the slot its token is read from.
    pub(crate) fn pass(
        &mut self,
        rt: &Runtime,
        model: &Model,
        ids: Ids<'_>,
        pos0: usize,
        opts: ForwardOptions<'_>,
        mut greedy: Option<Greedy<'_>>,
    ) -> Result<(Forward, Option<ReadbackSlot>), LlamaError> {
        let seq = ids.len();
        let kv_len = pos0 + seq;
        let _span = tracing::debug_span!("llama_forward", seq, pos0).entered();
        self.check_input(ids, pos0)?;
        if greedy.is_some() && seq != 1 {
            return Err(LlamaError::Input(format!(
                "a pass choosing its token on the GPU takes one token, not {seq}"
            )));
        }
        let want = opts.logits.unwrap_or(LogitRows::All);
        let set = self.acts(rt, seq)?;
        // Decode sets are one row; a prefill asked for its last row only
        // finishes in the one-row set.
        let last = if want == LogitRows::Last && seq > 1 {
            Some(self.acts(rt, 1)?)
        } else {
            None
        };
        let c = &self.config;
        let set = &self.sets[set];
        let last = last.map(|i| &self.sets[i]);
        let x = view_rows(&set.x, seq);
        match (ids, &self.host_embed) {
            (Ids::OnGpu, _) => {}
            (Ids::Host(ids), Some(host)) => rt.write_f32(&x, &host.gather(ids)?)?,
            (Ids::Host(ids), None) => {
                rt.gpu()
                    .queue
                    .write_buffer(&set.ids.buffer, 0, bytemuck::cast_slice(ids))
            }
        }
        let capture = if opts.capture {
            (0..=c.num_hidden_layers)
                .map(|l| {
                    rt.activation_of(&format!("capture.{l}"), &[seq, c.hidden_size], self.dtype)
                })
                .collect::<Result<Vec<_>, _>>()?
        } else {
            Vec::new()
        };
        let heads = Heads {
            n_heads: c.num_attention_heads as u64,
            n_kv_heads: c.num_key_value_heads as u64,
            head_dim: c.head_dim as u64,
        };
        let layers = c.num_hidden_layers;
        let step = Step {
            // Captures read the residual stream after each layer whole.
            defer_residual: !opts.capture,
            pending: Cell::new(false),
            kv_copies: opts.kv_copies,
            align: u64::from(rt.gpu().device.limits().min_storage_buffer_offset_alignment),
            config: c,
            set,
            last,
            x,
            seq,
            pos0: pos0 as u64,
            kv_len: kv_len as u64,
            heads,
            rope: &self.rope,
            kv: &self.kv,
            names: &self.names,
            lm_head: self.lm_head,
            gpu_embed: self.host_embed.is_none(),
            capture: &capture,
        };
        let end = match greedy {
            Some(_) => PassEnd::Submitted,
            None => PassEnd::Wait,
        };
        let mut slot = None;
        let run = model.run_pass_with(rt, opts.trace, end, |ctx| {
            match BlockRole::of(ctx.index(), layers) {
                BlockRole::Embed => step.embed(ctx),
                BlockRole::Layer(l) => step.layer(ctx, l),
                BlockRole::Head => {
                    slot = step.head(ctx, greedy.as_mut())?;
                    Ok(())
                }
            }
        })?;
        let stats = run.stats;
        let rows = match last {
            Some(_) => 1,
            None => seq,
        };
        if let Some(g) = greedy {
            let (Some(slot), Some(submit)) = (slot, run.last_submit) else {
                return Err(LlamaError::Input(
                    "the greedy pass recorded no token read-back".into(),
                ));
            };
            g.ring.submitted(slot, submit);
            let f = Forward {
                logits: Vec::new(),
                rows,
                stats,
                hidden: Vec::new(),
                final_norm: Vec::new(),
            };
            return Ok((f, Some(slot)));
        }
        let logits_t = view_rows(&last.unwrap_or(set).logits, rows);
        let logits = rt.read_f32(&logits_t)?;
        let mut hidden = capture
            .iter()
            .map(|t| rt.read_f32(t))
            .collect::<Result<Vec<_>, _>>()?;
        let final_norm = hidden.pop().unwrap_or_default();
        let f = Forward {
            logits,
            rows,
            stats,
            hidden,
            final_norm,
        };
        Ok((f, None))
    }

    fn check_input(&self, ids: Ids<'_>, pos0: usize) -> Result<(), LlamaError> {
        let c = &self.config;
        let (seq, kv_len) = (ids.len(), pos0 + ids.len());
        if seq == 0 || seq > self.limits.max_rows || kv_len > self.limits.max_seq {
            return Err(LlamaError::Input(format!(
                "{seq} tokens at position {pos0}: a pass takes 1..={} tokens and the cache holds {} positions",
                self.limits.max_rows, self.limits.max_seq
            )));
        }
        if let Some(w) = c.sliding_window.filter(|&w| kv_len > w) {
            return Err(LlamaError::Input(format!(
                "{kv_len} positions exceed the sliding window of {w}, which is not implemented"
            )));
        }
        let host = match ids {
            Ids::Host(ids) => ids,
            Ids::OnGpu => &[],
        };
        if let Some(bad) = host.iter().find(|&&id| id as usize >= c.vocab_size) {
            return Err(LlamaError::Input(format!(
                "token id {bad} is outside the vocabulary of {}",
                c.vocab_size
            )));
        }
        Ok(())
    }

    /// Index of the activation set for `rows` rows: the one-row decode set,
    /// or the prefill set of `max_rows` rows (used through views).
    fn acts(&mut self, rt: &Runtime, rows: usize) -> Result<usize, LlamaError> {
        let rows_needed = if rows == 1 { 1 } else { self.limits.max_rows };
        if let Some(i) = self.sets.iter().position(|s| s.rows == rows_needed) {
            return Ok(i);
        }
        let set = Acts::new(rt, &self.config, rows_needed, self.dtype)?;
        self.sets.push(set);
        Ok(self.sets.len() - 1)
    }
}

/// `t`'s first `rows` rows (a view of the same buffer).
fn view_rows(t: &GpuTensor, rows: usize) -> GpuTensor {
    let mut v = t.clone();
    if let Some(first) = v.shape.first_mut() {
        *first = rows as u64;
    }
    v
}

/// What a decoder layer's block needs.
struct Step<'a> {
    /// A layer's last residual add (its MLP output, left in `o`) may be
    /// made by the next layer's first norm, in one launch with it, or by
    /// the head after the last layer.
    defer_residual: bool,
    /// `o` holds such an add not yet made.
    pending: Cell<bool>,
    /// The device's storage-binding offset alignment: new k/v rows are
    /// written straight into the caches where their offset allows.
    align: u64,
    /// [`ForwardOptions::kv_copies`].
    kv_copies: bool,
    config: &'a LlamaConfig,
    /// The activations of this pass's rows.
    set: &'a Acts,
    /// The one-row set a prefill asked for its last row's logits only
    /// finishes in.
    last: Option<&'a Acts>,
    /// The residual stream, `seq` rows of `set.x`.
    x: GpuTensor,
    seq: usize,
    pos0: u64,
    kv_len: u64,
    heads: Heads,
    rope: &'a RopeTable,
    kv: &'a [(Activation, Activation)],
    names: &'a [LayerNames],
    lm_head: &'a str,
    /// The token rows are gathered on the GPU (no host table).
    gpu_embed: bool,
    /// With `capture`: the residual stream after each layer, then the
    /// final norm's output.
    capture: &'a [Activation],
}

/// What block `i` of a pass is: the token gather, decoder layer `l`, or the
/// final norm and head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockRole {
    Embed,
    Layer(usize),
    Head,
}

impl BlockRole {
    /// The role of block `i` of a model of `layers` layers.
    fn of(i: usize, layers: usize) -> Self {
        match i {
            0 => Self::Embed,
            i if i <= layers => Self::Layer(i - 1),
            _ => Self::Head,
        }
    }
}

impl Step<'_> {
    /// The token gather: the ids' table rows into `x` (a host table
    /// wrote them before the pass).
    fn embed(&self, ctx: &mut BlockCtx<'_>) -> Result<(), RuntimeError> {
        if self.gpu_embed {
            ctx.embed(names::EMBED, &view_rows(&self.set.ids, self.seq), &self.x)?;
        }
        Ok(())
    }

    /// Decoder layer `l`, then its capture.
    fn layer(&self, ctx: &mut BlockCtx<'_>, l: usize) -> Result<(), RuntimeError> {
        self.decoder_layer(ctx, l)?;
        if let Some(cap) = self.capture.get(l) {
            ctx.copy_rows(&self.x, 0, cap, 0, self.seq as u64)?;
        }
        Ok(())
    }

    /// The last layer's deferred residual add, the final norm and the head
    /// (of the last row only where `last` is set); with `greedy`, the
    /// argmax into the one-row set's ids (and, with a host table, that
    /// token's row into its `x`) and the slot its token is read from.
    fn head(
        &self,
        ctx: &mut BlockCtx<'_>,
        greedy: Option<&mut Greedy<'_>>,
    ) -> Result<Option<ReadbackSlot>, RuntimeError> {
        let (x, seq, set) = (&self.x, self.seq, self.set);
        if self.pending.replace(false) {
            ctx.add_assign(x, &view_rows(&set.o, seq))?;
        }
        let (src, out) = match self.last {
            Some(l) => {
                ctx.copy_rows(x, seq as u64 - 1, &l.x, 0, 1)?;
                (l, 1)
            }
            None => (set, seq),
        };
        let (hx, hh) = (view_rows(&src.x, out), view_rows(&src.h, out));
        let w = ctx.weight_tensor(names::FINAL_NORM)?;
        let logits = view_rows(&src.logits, out);
        let norm = RmsNormOf {
            x: &hx,
            weight: &w,
            eps: self.config.rms_norm_eps,
            out: &hh,
        };
        if let Some(cap) = self.capture.get(self.config.num_hidden_layers) {
            ctx.rms_norm(&hx, &w, &hh, norm.eps)?;
            ctx.copy_rows(&hh, 0, cap, 0, out as u64)?;
            ctx.linear(self.lm_head, &hh, &logits)?;
        } else {
            ctx.normed_linears(&norm, &[(self.lm_head, &logits)])?;
        }
        let Some(g) = greedy else {
            return Ok(None);
        };
        // One row: `set` is the one-row set the next pass reads.
        let next = view_rows(&set.ids, 1);
        ctx.argmax(&logits, &next)?;
        if !self.gpu_embed {
            ctx.embed(names::EMBED, &next, x)?;
        }
        let commands = ctx.encoder().commands();
        Ok(Some(g.ring.record(commands, &next.buffer, next.offset)?))
    }

    /// Records decoder layer `l`:
    /// `x += o(attn(rope(q(n1 x)), rope(k(n1 x)), v(n1 x)))`, then
    /// `x += down(silu(gate(n2 x)) · up(n2 x))`.
    fn decoder_layer(&self, ctx: &mut BlockCtx<'_>, l: usize) -> Result<(), RuntimeError> {
        let r = |t: &Activation| view_rows(t, self.seq);
        let s = self.set;
        let (x, h, q, k, v, attn, o) = (
            r(&s.x),
            r(&s.h),
            r(&s.q),
            r(&s.k),
            r(&s.v),
            r(&s.attn),
            r(&s.o),
        );
        let (gate, up, act) = (r(&s.gate), r(&s.up), r(&s.act));
        let names = &self.names[l];
        let eps = self.config.rms_norm_eps;
        let (k_cache, v_cache) = &self.kv[l];

        let n1 = ctx.weight_tensor(&names.input_norm)?;
        let (qp, kp, vp) = (&names.q, &names.k, &names.v);
        let norm = |weight| RmsNormOf {
            x: &x,
            weight,
            eps,
            out: &h,
        };
        let in_cache = |cache: &GpuTensor| {
            let row = cache.shape.get(1).copied().unwrap_or(0) * cache.dtype.size();
            let offset = cache.offset + self.pos0 * row;
            offset.is_multiple_of(self.align).then(|| GpuTensor {
                offset,
                shape: vec![self.seq as u64, row / cache.dtype.size()],
                ..cache.clone()
            })
        };
        // New k/v rows go straight into the caches where aligned, else
        // through the k/v activations and a copy.
        let direct = in_cache(k_cache)
            .zip(in_cache(v_cache))
            .filter(|_| !self.kv_copies);
        let (k_dst, v_dst) = direct.clone().unwrap_or_else(|| (k.clone(), v.clone()));
        let qkv = [(&qp[..], &q), (&kp[..], &k_dst), (&vp[..], &v_dst)];
        if self.pending.replace(false) {
            ctx.add_rms_norm_for(&x, &o, &n1, &h, eps, qp)?;
            ctx.linears(&qkv, &h)?;
        } else {
            ctx.normed_linears(&norm(&n1), &qkv)?;
        }
        if direct.is_none() {
            ctx.kv_write(&k, k_cache, self.pos0)?;
            ctx.kv_write(&v, v_cache, self.pos0)?;
        }
        // RoPE on q and the new cache rows of k, inside the attention
        // (fused into the decode kernel where it runs).
        ctx.attention(
            &q,
            k_cache,
            v_cache,
            &attn,
            self.heads,
            self.kv_len,
            self.pos0,
            Some(self.rope),
        )?;
        let n2 = ctx.weight_tensor(&names.post_norm)?;
        let (op, gp, up_p, dp) = (&names.o, &names.gate, &names.up, &names.down);
        // Float layers at decode sizes take the residual add and the next
        // norm in their own launches; else the add is made by the norm's
        // launch (with the rotation and quantization of integer layers).
        let m = self.seq as u64;
        if ctx.folds(op, m)? && ctx.folds(gp, m)? && ctx.folds(up_p, m)? {
            ctx.linear_add(op, &attn, &x, &o)?;
            ctx.normed_linears_swiglu(&norm(&n2), [gp, up_p], [&gate, &up], &act)?;
        } else {
            ctx.linear(op, &attn, &o)?;
            ctx.add_rms_norm_for(&x, &o, &n2, &h, eps, gp)?;
            ctx.linears_swiglu([gp, up_p], &h, [&gate, &up], &act)?;
        }
        // The next layer's q/k/v are taken to be like this one's.
        if self.defer_residual && !(ctx.folds(dp, m)? && ctx.folds(qp, m)?) {
            ctx.linear(dp, &act, &o)?;
            self.pending.set(true);
            return Ok(());
        }
        ctx.linear_add(dp, &act, &x, &o)
    }
}
