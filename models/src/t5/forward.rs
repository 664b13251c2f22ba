//! One T5 encoder pass on the runtime: two blocks per encoder block
//! (attention, gated MLP) and the final norm, so streamed blocks are
//! prefetched one ahead. Per block:
//! `x += o(attn(rms(x)))` with scores `q·k + bias` (no 1/√d_kv, no mask),
//! `x += wo(gelu_tanh(wi_0 h) · wi_1 h)` with `h = rms(x)`; the bias
//! `[L, L, heads]` is made on the host once per runner from block 0's
//! table (32 × heads values) and reused by every block and pass.

use dynvram_runtime::loader::ModelFiles;
use dynvram_runtime::ops::attention::{self, Heads};
use dynvram_runtime::ops::elementwise::{self, Binary};
use dynvram_runtime::{ActDtype, Activation, BlockCtx, Model, PassStats, Runtime, RuntimeError};

use super::checkpoint::{Names, T5Checkpoint};
use super::config::T5Config;
use super::scratch::act_shapes;
use crate::error::ModelError as T5Error;
use crate::host_embed::HostEmbed;
use crate::record::allocate;
use crate::record::op;

/// What a pass returns.
#[derive(Debug, Clone)]
pub struct T5Output {
    /// `[B, L, d_model]` row-major, after `final_layer_norm` (Flux's `txt`).
    pub hidden: Vec<f32>,
    /// The pass's figures.
    pub stats: PassStats,
}

/// The activations of a pass.
#[derive(Debug)]
struct Acts {
    /// The residual stream.
    x: Activation,
    /// A norm's output (the last one is the pass's output).
    n: Activation,
    q: Activation,
    k: Activation,
    v: Activation,
    attn: Activation,
    /// A projection's output.
    o: Activation,
    /// `wi_0 h`, then `gelu_tanh(wi_0 h) · wi_1 h`.
    gate: Activation,
    /// `wi_1 h`.
    up: Activation,
    /// `[L·L, heads]` f32: the relative position bias, written once.
    bias: Activation,
}

/// A T5 encoder ready to run passes over `batch` prompts of `len` tokens
/// on an opened [`Model`].
#[derive(Debug)]
pub struct T5Encoder {
    config: T5Config,
    names: Names,
    batch: usize,
    len: usize,
    acts: Acts,
    table: HostEmbed,
}

impl T5Encoder {
    /// Allocates the activations of passes over `batch` prompts of `len`
    /// tokens in `dtype` (open the [`Model`] with `ckpt.spec(batch, len,
    /// dtype)` first, which reserves them in the plan). F16 needs
    /// `SHADER_F16`.
    pub fn new(
        rt: &Runtime,
        ckpt: &T5Checkpoint,
        batch: usize,
        len: usize,
        dtype: ActDtype,
    ) -> Result<Self, T5Error> {
        if batch == 0 || len == 0 {
            return Err(T5Error::Input(format!(
                "T5 batch {batch} of {len} tokens: both must be at least 1"
            )));
        }
        let c = &ckpt.config;
        let mut it = allocate(rt, "t5", &act_shapes(c, batch, len), dtype)?.into_iter();
        let mut next = || it.next().expect("one activation per shape");
        let acts = Acts {
            x: next(),
            n: next(),
            q: next(),
            k: next(),
            v: next(),
            attn: next(),
            o: next(),
            gate: next(),
            up: next(),
            bias: next(),
        };
        let open = || ModelFiles::open(&ckpt.path).map_err(RuntimeError::from);
        rt.write_f32(&acts.bias, &position_bias(c, &ckpt.names, open()?, len)?)?;
        let files = open()?;
        Ok(Self {
            config: c.clone(),
            names: ckpt.names.clone(),
            batch,
            len,
            acts,
            table: HostEmbed::new(files, &ckpt.names.embedding)?,
        })
    }

    /// The config.
    pub fn config(&self) -> &T5Config {
        &self.config
    }

    /// Encodes `ids` (`batch × len` ids, each prompt's as
    /// [`crate::tokenize::T5Tokenizer::encode`] gives them for `len`).
    pub fn encode(
        &mut self,
        rt: &Runtime,
        model: &Model,
        ids: &[u32],
    ) -> Result<T5Output, T5Error> {
        if ids.len() != self.batch * self.len {
            return Err(T5Error::Input(format!(
                "{} T5 token ids for {} prompts of {}",
                ids.len(),
                self.batch,
                self.len
            )));
        }
        let _span = tracing::debug_span!("t5_encode", batch = self.batch, len = self.len).entered();
        let a = &self.acts;
        rt.write_f32(&a.x, &self.table.gather(ids)?)?;
        let step = Step {
            c: &self.config,
            nm: &self.names,
            a,
            batch: self.batch,
        };
        let halves = 2 * self.config.num_layers;
        let stats = model.run_pass(rt, None, |ctx| match ctx.index() {
            i if i < halves && i % 2 == 0 => step.attention(ctx, i / 2),
            i if i < halves => step.mlp(ctx, i / 2),
            _ => step.final_norm(ctx),
        })?;
        Ok(T5Output {
            hidden: rt.read_f32(&a.n)?,
            stats,
        })
    }
}

/// The relative position bias `[len, len, heads]` (query, key, head): block
/// 0's `relative_attention_bias` row of each pair's [`T5Config::bucket`].
fn position_bias(
    c: &T5Config,
    nm: &Names,
    files: ModelFiles,
    len: usize,
) -> Result<Vec<f32>, T5Error> {
    let table = HostEmbed::new(files, &nm.relative_attention_bias())?
        .gather(&(0..c.relative_attention_num_buckets as u32).collect::<Vec<_>>())?;
    let h = c.num_heads;
    let mut bias = Vec::with_capacity(len * len * h);
    for i in 0..len as i64 {
        for j in 0..len as i64 {
            let b = c.bucket(j - i) as usize;
            bias.extend_from_slice(&table[b * h..][..h]);
        }
    }
    Ok(bias)
}

/// What the blocks of one pass need.
struct Step<'a> {
    c: &'a T5Config,
    nm: &'a Names,
    a: &'a Acts,
    batch: usize,
}

impl Step<'_> {
    /// `n = T5LayerNorm(x)` (RMS only, in f32) with weight `w`.
    fn norm(&self, ctx: &mut BlockCtx<'_>, w: &str) -> Result<(), RuntimeError> {
        let w = ctx.weight_tensor(w)?;
        ctx.rms_norm(&self.a.x, &w, &self.a.n, self.c.layer_norm_epsilon)
    }

    /// Block `i`'s attention: `x += o(attn(rms(x)))`.
    fn attention(&self, ctx: &mut BlockCtx<'_>, i: usize) -> Result<(), RuntimeError> {
        let (a, c) = (self.a, self.c);
        self.norm(ctx, &self.nm.norm(i, 0))?;
        let [q, k, v, o] = self.nm.attn_linears(i);
        ctx.linears(&[(&q, &a.q), (&k, &a.k), (&v, &a.v)], &a.n)?;
        let heads = Heads {
            n_heads: c.num_heads as u64,
            n_kv_heads: c.num_heads as u64,
            head_dim: c.d_kv as u64,
        };
        let batch = self.batch as u64;
        op(ctx, |g, cc, e| {
            attention::record_attention_bias(
                g, cc, e, &a.q, &a.k, &a.v, &a.bias, &a.attn, heads, batch, 1.0,
            )
        })?;
        ctx.linear(&o, &a.attn, &a.o)?;
        ctx.add_assign(&a.x, &a.o)
    }

    /// Block `i`'s gated MLP: `x += wo(gelu_tanh(wi_0 h) · wi_1 h)`.
    fn mlp(&self, ctx: &mut BlockCtx<'_>, i: usize) -> Result<(), RuntimeError> {
        let a = self.a;
        self.norm(ctx, &self.nm.norm(i, 1))?;
        let [wi0, wi1, wo] = self.nm.mlp_linears(i);
        ctx.linears(&[(&wi0, &a.gate), (&wi1, &a.up)], &a.n)?;
        op(ctx, |g, cc, e| {
            elementwise::record_binary_inplace(g, cc, e, Binary::GeGlu, &a.gate, &a.up)
        })?;
        ctx.linear(&wo, &a.gate, &a.o)?;
        ctx.add_assign(&a.x, &a.o)
    }

    /// `n = final_layer_norm(x)`.
    fn final_norm(&self, ctx: &mut BlockCtx<'_>) -> Result<(), RuntimeError> {
        self.norm(ctx, &self.nm.final_norm())
    }
}
