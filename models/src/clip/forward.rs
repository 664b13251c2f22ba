//! One CLIP text-encoder pass on the runtime: the embeddings, two blocks
//! per encoder layer (attention, MLP), the final LayerNorm, so streamed
//! blocks are prefetched one ahead. Per layer (pre-LN):
//! `x += out_proj(attn(layer_norm1(x)))`, `x += fc2(quick_gelu(fc1(layer_norm2(x))))`,
//! attention causal with scores `q·k / √head_dim`.

use dynvram_runtime::loader::ModelFiles;
use dynvram_runtime::ops::attention::{self, Heads, Mask};
use dynvram_runtime::ops::elementwise::{self, Unary};
use dynvram_runtime::ops::norm;
use dynvram_runtime::{ActDtype, Activation, BlockCtx, Model, PassStats, Runtime, RuntimeError};

use super::checkpoint::{ClipCheckpoint, Names};
use super::config::ClipConfig;
use super::scratch::act_shapes;
use crate::error::ModelError as ClipError;
use crate::host_embed::HostEmbed;
use crate::record::allocate;
use crate::record::op;
use crate::tokenize::CLIP_MAX_LEN;

/// What a pass returns.
#[derive(Debug, Clone)]
pub struct ClipOutput {
    /// `[B, 77, hidden]` row-major, after `final_layer_norm`.
    pub last_hidden_state: Vec<f32>,
    /// `[B, hidden]`: each prompt's row of `last_hidden_state` at
    /// `argmax(ids)` (its first EOS, 49407: the highest id), Flux's `y`.
    pub pooled: Vec<f32>,
    /// The pass's figures.
    pub stats: PassStats,
}

/// The activations of a pass.
#[derive(Debug)]
struct Acts {
    /// The token embeddings (gathered on the host).
    tokens: Activation,
    /// Position ids `0..77` per prompt (u32 bits).
    positions: Activation,
    /// The residual stream.
    x: Activation,
    /// A norm's output.
    n: Activation,
    q: Activation,
    k: Activation,
    v: Activation,
    attn: Activation,
    /// A projection's output.
    o: Activation,
    /// The MLP's inner activations.
    mlp: Activation,
    /// `final_layer_norm(x)`.
    out: Activation,
}

/// A CLIP text encoder ready to run passes over `batch` prompts on an
/// opened [`Model`].
#[derive(Debug)]
pub struct ClipText {
    config: ClipConfig,
    names: Names,
    batch: usize,
    acts: Acts,
    table: HostEmbed,
}

impl ClipText {
    /// Allocates the activations of passes over `batch` prompts in `dtype`
    /// (open the [`Model`] with `ckpt.spec(batch, dtype)` first, which
    /// reserves them in the plan). F16 needs `SHADER_F16`.
    pub fn new(
        rt: &Runtime,
        ckpt: &ClipCheckpoint,
        batch: usize,
        dtype: ActDtype,
    ) -> Result<Self, ClipError> {
        if batch == 0 {
            return Err(ClipError::Input("CLIP batch 0: at least one prompt".into()));
        }
        let c = &ckpt.config;
        let mut it = allocate(rt, "clip", &act_shapes(c, batch), dtype)?.into_iter();
        let mut next = || it.next().expect("one activation per shape");
        let acts = Acts {
            tokens: next(),
            positions: next(),
            x: next(),
            n: next(),
            q: next(),
            k: next(),
            v: next(),
            attn: next(),
            o: next(),
            mlp: next(),
            out: next(),
        };
        let positions: Vec<u32> = (0..batch).flat_map(|_| 0..CLIP_MAX_LEN as u32).collect();
        rt.gpu()
            .queue
            .write_buffer(&acts.positions.buffer, 0, bytemuck::cast_slice(&positions));
        let files = ModelFiles::open(&ckpt.path).map_err(RuntimeError::from)?;
        Ok(Self {
            config: c.clone(),
            names: ckpt.names.clone(),
            batch,
            acts,
            table: HostEmbed::new(files, &ckpt.names.token_embedding())?,
        })
    }

    /// The config.
    pub fn config(&self) -> &ClipConfig {
        &self.config
    }

    /// Prompts per pass.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Encodes `ids` (`batch × 77` ids, each prompt's as
    /// [`crate::tokenize::ClipTokenizer::encode`] gives them).
    pub fn encode(
        &mut self,
        rt: &Runtime,
        model: &Model,
        ids: &[u32],
    ) -> Result<ClipOutput, ClipError> {
        let c = &self.config;
        let rows = self.batch * CLIP_MAX_LEN;
        if ids.len() != rows {
            return Err(ClipError::Input(format!(
                "{} CLIP token ids for {} prompts of {CLIP_MAX_LEN}",
                ids.len(),
                self.batch
            )));
        }
        let _span = tracing::debug_span!("clip_encode", batch = self.batch).entered();
        let a = &self.acts;
        rt.write_f32(&a.tokens, &self.table.gather(ids)?)?;
        let step = Step {
            c,
            nm: &self.names,
            a,
            batch: self.batch,
        };
        let halves = 2 * c.num_hidden_layers;
        let stats = model.run_pass(rt, None, |ctx| match ctx.index() {
            0 => step.embed(ctx),
            i if i <= halves && i % 2 == 1 => step.attention(ctx, (i - 1) / 2),
            i if i <= halves => step.mlp(ctx, (i - 1) / 2),
            _ => step.final_norm(ctx),
        })?;
        let last_hidden_state = rt.read_f32(&a.out)?;
        let h = c.hidden_size;
        let pooled = ids
            .chunks(CLIP_MAX_LEN)
            .enumerate()
            .flat_map(|(b, row)| {
                let at = argmax(row);
                last_hidden_state[(b * CLIP_MAX_LEN + at) * h..][..h].to_vec()
            })
            .collect();
        Ok(ClipOutput {
            last_hidden_state,
            pooled,
            stats,
        })
    }
}

/// Index of the first largest id (torch's `argmax`, which pools CLIP).
fn argmax(ids: &[u32]) -> usize {
    let mut best = 0;
    for (i, &id) in ids.iter().enumerate() {
        if id > ids[best] {
            best = i;
        }
    }
    best
}

/// What the blocks of one pass need.
struct Step<'a> {
    c: &'a ClipConfig,
    nm: &'a Names,
    a: &'a Acts,
    batch: usize,
}

impl Step<'_> {
    /// `x = token_embedding[ids] + position_embedding[0..77]` (the token
    /// rows gathered on the host).
    fn embed(&self, ctx: &mut BlockCtx<'_>) -> Result<(), RuntimeError> {
        let a = self.a;
        ctx.embed(&self.nm.position_embedding(), &a.positions, &a.x)?;
        ctx.add_assign(&a.x, &a.tokens)
    }

    /// `out = LayerNorm(x)` with the affine tensors `[weight, bias]`.
    fn layer_norm(
        &self,
        ctx: &mut BlockCtx<'_>,
        [w, b]: [&str; 2],
        out: &Activation,
    ) -> Result<(), RuntimeError> {
        let (w, b) = (ctx.weight_tensor(w)?, ctx.weight_tensor(b)?);
        let (x, eps) = (&self.a.x, self.c.layer_norm_eps);
        op(ctx, |g, c, e| {
            norm::record_layer_norm(g, c, e, x, &w, Some(&b), out, eps)
        })
    }

    /// Layer `i`'s attention: `x += out_proj(attn(layer_norm1(x)))`.
    fn attention(&self, ctx: &mut BlockCtx<'_>, i: usize) -> Result<(), RuntimeError> {
        let (a, c) = (self.a, self.c);
        let [q, k, v, o] = self.nm.attn_linears(i);
        let [w, b] = self.nm.layer_norm(i, 1);
        self.layer_norm(ctx, [&w, &b], &a.n)?;
        ctx.linears(&[(&q, &a.q), (&k, &a.k), (&v, &a.v)], &a.n)?;
        let heads = Heads {
            n_heads: c.num_attention_heads as u64,
            n_kv_heads: c.num_attention_heads as u64,
            head_dim: c.head_dim() as u64,
        };
        let batch = self.batch as u64;
        op(ctx, |g, cc, e| {
            attention::record_flash_attention(
                g,
                cc,
                e,
                &a.q,
                &a.k,
                &a.v,
                &a.attn,
                heads,
                batch,
                Mask::Causal,
            )
        })?;
        ctx.linear(&o, &a.attn, &a.o)?;
        ctx.add_assign(&a.x, &a.o)
    }

    /// Layer `i`'s MLP: `x += fc2(quick_gelu(fc1(layer_norm2(x))))`.
    fn mlp(&self, ctx: &mut BlockCtx<'_>, i: usize) -> Result<(), RuntimeError> {
        let a = self.a;
        let [fc1, fc2] = self.nm.mlp_linears(i);
        let [w, b] = self.nm.layer_norm(i, 2);
        self.layer_norm(ctx, [&w, &b], &a.n)?;
        ctx.linear(&fc1, &a.n, &a.mlp)?;
        op(ctx, |g, cc, e| {
            elementwise::record_unary_inplace(g, cc, e, Unary::QuickGelu, &a.mlp)
        })?;
        ctx.linear(&fc2, &a.mlp, &a.o)?;
        ctx.add_assign(&a.x, &a.o)
    }

    /// `out = final_layer_norm(x)`.
    fn final_norm(&self, ctx: &mut BlockCtx<'_>) -> Result<(), RuntimeError> {
        let [w, b] = self.nm.final_norm();
        self.layer_norm(ctx, [&w, &b], &self.a.out)
    }
}
