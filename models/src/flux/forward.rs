//! One Flux forward on the runtime: the embedders, the double-stream
//! blocks, the single-stream blocks and the final layer, one runtime block
//! each, so streamed blocks are prefetched one ahead.

use dynvram_runtime::ops::attention::{self, Heads, Mask};
use dynvram_runtime::ops::dit::{self, Block, GatherOp, Joint};
use dynvram_runtime::ops::elementwise::{self, Unary};
use dynvram_runtime::trace::Trace;
use dynvram_runtime::{
    ActDtype, Activation, BlockCtx, GpuTensor, Model, PassStats, Runtime, RuntimeError,
};

use super::checkpoint::{
    DoubleNames, EmbedNames, EmbedderNames, FinalNames, FluxCheckpoint, SingleNames, StreamNames,
};
use super::config::{FluxConfig, TIME_DIM};
use super::scratch::{Acts, capture_rows};
use super::{FluxError, FluxInputs, Shape};
use crate::record::{activation, op, row_view, view};

/// LayerNorm and QK RMSNorm epsilon (BFL).
const EPS: f32 = 1e-6;

/// Options of [`Flux::forward_with`].
#[derive(Debug, Default)]
pub struct ForwardOptions<'t> {
    /// Also read back the intermediates of the reference file (`vec`,
    /// `img_embed`, `txt_embed`, `img_after_double0`, `txt_after_double0`,
    /// `after_double_blocks`, `after_single0`, `before_final_layer`) where
    /// the model has the blocks they follow.
    pub capture: bool,
    /// Record a timeline of the pass.
    pub trace: Option<&'t mut Trace>,
}

/// What a pass returns.
#[derive(Debug, Clone)]
pub struct FluxForward {
    /// `[B, L_img, out_channels]` row-major.
    pub out: Vec<f32>,
    /// The pass's figures.
    pub stats: PassStats,
    /// With `capture`: (name, values) of each intermediate, `[B, L, H]` each.
    pub captures: Vec<(String, Vec<f32>)>,
}

/// Which chunks of a modulation tensor `lin(silu(vec))` `[B, chunks·H]`
/// hold one branch's shift, scale and gate (BFL's `ModulationOut`).
#[derive(Debug, Clone, Copy)]
struct ModulationOut {
    shift: u64,
    scale: u64,
    gate: u64,
}

impl ModulationOut {
    /// `mod1`: a double stream's attention branch, a single block's only
    /// one; the final layer's (shift, scale) are its first two chunks too.
    const ATTN: Self = Self {
        shift: 0,
        scale: 1,
        gate: 2,
    };
    /// `mod2`: a double stream's MLP branch.
    const MLP: Self = Self {
        shift: 3,
        scale: 4,
        gate: 5,
    };

    /// `[shift, scale]`, as `dit::record_ada_norm` takes them.
    fn shift_scale(self) -> [u64; 2] {
        [self.shift, self.scale]
    }
}

/// Every block's tensor names, formatted once (not per pass).
#[derive(Debug)]
struct BlockNames {
    embed: EmbedNames,
    double: Vec<DoubleNames>,
    single: Vec<SingleNames>,
    last: FinalNames,
}

/// A Flux model ready to run passes of one [`Shape`] on an opened [`Model`].
#[derive(Debug)]
pub struct Flux {
    config: FluxConfig,
    names: BlockNames,
    shape: Shape,
    dtype: ActDtype,
    acts: Acts<Activation>,
}

impl Flux {
    /// Allocates the activations of passes over `shape` in `dtype` (open
    /// the [`Model`] first with `ckpt.spec(shape, dtype)`, which reserves
    /// them in the plan). F16 needs `SHADER_F16` (no silent fallback).
    pub fn new(
        rt: &Runtime,
        ckpt: &FluxCheckpoint,
        shape: Shape,
        dtype: ActDtype,
    ) -> Result<Self, FluxError> {
        if shape.batch == 0 || shape.img_len == 0 || shape.txt_len == 0 {
            return Err(FluxError::Input(format!(
                "shape {shape:?}: batch, img_len and txt_len must be at least 1"
            )));
        }
        let c = ckpt.config.clone();
        let acts = Acts::build(&c, shape, |name, s, f32_only| {
            activation(rt, "flux", name, s, f32_only, dtype)
        })?;
        let nm = &ckpt.names;
        let names = BlockNames {
            embed: nm.embed_block(c.guidance_embed),
            double: (0..c.depth).map(|i| nm.double_block(i)).collect(),
            single: (0..c.depth_single_blocks)
                .map(|i| nm.single_block(i))
                .collect(),
            last: nm.final_block(),
        };
        Ok(Self {
            config: c,
            names,
            shape,
            dtype,
            acts,
        })
    }

    /// The config.
    pub fn config(&self) -> &FluxConfig {
        &self.config
    }

    /// The shape its activations hold.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The activation dtype.
    pub fn dtype(&self) -> ActDtype {
        self.dtype
    }

    /// One forward: `out` of `inputs` (which must have this runner's shape).
    pub fn forward(
        &mut self,
        rt: &Runtime,
        model: &Model,
        inputs: &FluxInputs,
    ) -> Result<FluxForward, FluxError> {
        self.forward_with(rt, model, inputs, ForwardOptions::default())
    }

    /// [`Self::forward`] with options.
    pub fn forward_with(
        &mut self,
        rt: &Runtime,
        model: &Model,
        inputs: &FluxInputs,
        opts: ForwardOptions<'_>,
    ) -> Result<FluxForward, FluxError> {
        let c = &self.config;
        let s = self.shape;
        if inputs.shape != s {
            return Err(FluxError::Input(format!(
                "inputs of shape {:?} for a runner built for {s:?}",
                inputs.shape
            )));
        }
        if c.guidance_embed != inputs.guidance.is_some() {
            return Err(FluxError::Input(if c.guidance_embed {
                "the model has a guidance embedder and needs `guidance`".into()
            } else {
                "`guidance` given, but the model has no guidance embedder".into()
            }));
        }
        let _span = tracing::debug_span!("flux_forward", ?s).entered();
        let a = &self.acts;
        rt.write_f32(&a.img_in, &inputs.img)?;
        rt.write_f32(&a.txt_in, &inputs.txt)?;
        rt.write_f32(&a.y, &inputs.y)?;
        rt.write_f32(
            &a.temb,
            &dit::timestep_embedding(&inputs.timesteps, TIME_DIM),
        )?;
        if let Some(g) = &inputs.guidance {
            rt.write_f32(&a.gemb, &dit::timestep_embedding(g, TIME_DIM))?;
        }
        rt.write_f32(
            &a.pe,
            &dit::rope_table(&inputs.joint_ids(), &c.axes_dim, c.theta),
        )?;
        let capture_shapes = if opts.capture {
            capture_rows(c, s)
        } else {
            Vec::new()
        };
        let h = c.hidden_size;
        let captures = capture_shapes
            .iter()
            .map(|&(name, rows)| {
                Ok((
                    name,
                    rt.activation_of(&format!("capture.{name}"), &[rows, h], self.dtype)?,
                ))
            })
            .collect::<Result<Vec<_>, RuntimeError>>()?;
        let step = Step {
            c,
            nm: &self.names,
            s,
            a,
            captures: &captures,
        };
        let (depth, singles) = (c.depth, c.depth_single_blocks);
        let stats = model.run_pass(rt, opts.trace, |ctx| {
            let i = ctx.index();
            if i == 0 {
                step.embed(ctx)
            } else if i <= depth {
                step.double(ctx, i - 1)
            } else if i <= depth + singles {
                step.single(ctx, i - 1 - depth)
            } else {
                step.final_layer(ctx)
            }
        })?;
        let out = rt.read_f32(&a.out)?;
        let captures = captures
            .iter()
            .map(|(name, t)| Ok((name.to_string(), rt.read_f32(t)?)))
            .collect::<Result<Vec<_>, RuntimeError>>()?;
        Ok(FluxForward {
            out,
            stats,
            captures,
        })
    }
}

/// What the blocks of one pass need.
struct Step<'a> {
    c: &'a FluxConfig,
    nm: &'a BlockNames,
    s: Shape,
    a: &'a Acts<Activation>,
    captures: &'a [(&'static str, Activation)],
}

/// One token stream of a double block.
struct Stream<'a> {
    /// Its tensors in the block.
    nm: &'a StreamNames,
    /// Its residual stream.
    x: &'a GpuTensor,
    /// Its modulation tensor.
    md: &'a GpuTensor,
    /// Tokens per batch element.
    len: usize,
    /// Its first row in the joint sequence (txt first).
    row0: usize,
}

impl Step<'_> {
    fn capture(
        &self,
        ctx: &mut BlockCtx<'_>,
        name: &str,
        src: &GpuTensor,
    ) -> Result<(), RuntimeError> {
        if let Some((_, dst)) = self.captures.iter().find(|(n, _)| *n == name) {
            ctx.copy_rows(src, 0, dst, 0, dst.shape[0])?;
        }
        Ok(())
    }

    /// An MLP embedder `out_layer(silu(in_layer(x)))` into `out`.
    fn embedder(
        &self,
        ctx: &mut BlockCtx<'_>,
        nm: &EmbedderNames,
        x: &GpuTensor,
        out: &GpuTensor,
    ) -> Result<(), RuntimeError> {
        let e1 = &self.a.e1;
        ctx.linear(&nm.in_layer, x, e1)?;
        op(ctx, |g, c, e| {
            elementwise::record_unary_inplace(g, c, e, Unary::Silu, e1)
        })?;
        ctx.linear(&nm.out_layer, e1, out)
    }

    /// `img_in`, `txt_in`, and `vec = time_in(emb(t)) [+ guidance_in(emb(g))]
    /// + vector_in(y)`, then `silu(vec)` for every modulation.
    fn embed(&self, ctx: &mut BlockCtx<'_>) -> Result<(), RuntimeError> {
        let (a, nm) = (self.a, &self.nm.embed);
        ctx.linear(&nm.img_in, &a.img_in, &a.x_img)?;
        ctx.linear(&nm.txt_in, &a.txt_in, &a.x_txt)?;
        let (vec, e2) = (&a.vec, &a.e2);
        self.embedder(ctx, &nm.time_in, &a.temb, vec)?;
        if let Some(guidance_in) = &nm.guidance_in {
            self.embedder(ctx, guidance_in, &a.gemb, e2)?;
            ctx.add_assign(vec, e2)?;
        }
        self.embedder(ctx, &nm.vector_in, &a.y, e2)?;
        ctx.add_assign(vec, e2)?;
        let vs = &a.vec_silu;
        op(ctx, |g, c, e| {
            elementwise::record_unary(g, c, e, Unary::Silu, vec, vs)
        })?;
        self.capture(ctx, "vec", vec)?;
        self.capture(ctx, "img_embed", &a.x_img)?;
        self.capture(ctx, "txt_embed", &a.x_txt)
    }

    fn heads(&self) -> Heads {
        Heads {
            n_heads: self.c.num_heads as u64,
            n_kv_heads: self.c.num_heads as u64,
            head_dim: self.c.head_dim() as u64,
        }
    }

    /// q and k of `src` (columns 0.. and H..) normed and rotated, v (2H..)
    /// copied, into rows `row0..row0 + len` of each element's joint sequence.
    fn place_qkv(
        &self,
        ctx: &mut BlockCtx<'_>,
        src: &GpuTensor,
        len: usize,
        row0: usize,
        [qn, kn]: [&str; 2],
    ) -> Result<(), RuntimeError> {
        let (a, h, hd) = (self.a, self.c.hidden_size as u64, self.c.head_dim() as u64);
        let joint = self.s.joint_len() as u64;
        let pe = &a.pe;
        for (col0, norm, dst) in [(0, qn, &a.q), (h, kn, &a.k)] {
            let w = ctx.weight_tensor(norm)?;
            let to = Joint {
                dst,
                per_batch: joint,
                row0: row0 as u64,
            };
            op(ctx, |g, c, e| {
                dit::record_qk_place(g, c, e, src, len as u64, col0, &w, pe, hd, EPS, to)
            })?;
        }
        self.gather(
            ctx,
            (src, len, 0, 2 * h as usize),
            (&a.v, self.s.joint_len(), row0, 0),
            [len, h as usize],
            GatherOp::Copy,
        )
    }

    /// [`dit::record_gather`] of `rows × cols` per batch element, each side
    /// given as (tensor, rows per element, row0, col0).
    fn gather(
        &self,
        ctx: &mut BlockCtx<'_>,
        src: (&GpuTensor, usize, usize, usize),
        dst: (&GpuTensor, usize, usize, usize),
        [rows, cols]: [usize; 2],
        how: GatherOp,
    ) -> Result<(), RuntimeError> {
        fn side<'t>((t, per, row0, col0): (&'t GpuTensor, usize, usize, usize)) -> Block<'t> {
            Block {
                t,
                per_batch: per as u64,
                row0: row0 as u64,
                col0: col0 as u64,
            }
        }
        let batch = self.s.batch as u64;
        op(ctx, |g, c, e| {
            dit::record_gather(
                g,
                c,
                e,
                side(src),
                side(dst),
                batch,
                [rows as u64, cols as u64],
                how,
            )
        })
    }

    /// Joint attention of q, k, v into `attn` (no mask, per batch element).
    fn attention(&self, ctx: &mut BlockCtx<'_>) -> Result<(), RuntimeError> {
        let a = self.a;
        let heads = self.heads();
        let batch = self.s.batch as u64;
        let (q, k, v, out) = (&a.q, &a.k, &a.v, &a.attn);
        op(ctx, |g, c, e| {
            attention::record_flash_attention(g, c, e, q, k, v, out, heads, batch, Mask::None)
        })
    }

    /// The image stream, then the text stream.
    fn streams<'n>(&'n self, nm: &'n DoubleNames) -> [Stream<'n>; 2] {
        let a = self.a;
        [
            Stream {
                nm: &nm.img,
                x: &a.x_img,
                md: &a.mod_img,
                len: self.s.img_len,
                row0: self.s.txt_len,
            },
            Stream {
                nm: &nm.txt,
                x: &a.x_txt,
                md: &a.mod_txt,
                len: self.s.txt_len,
                row0: 0,
            },
        ]
    }

    /// Double block `i`: each stream modulated and projected to q, k, v;
    /// joint attention; each stream's projection, MLP and gated residuals.
    fn double(&self, ctx: &mut BlockCtx<'_>, i: usize) -> Result<(), RuntimeError> {
        let (a, c) = (self.a, self.c);
        let (h, m, b) = (c.hidden_size, c.mlp_hidden(), self.s.batch);
        let (attn_mod, mlp_mod) = (ModulationOut::ATTN, ModulationOut::MLP);
        let streams = self.streams(&self.nm.double[i]);
        for s in &streams {
            let (x, md, nm) = (s.x, s.md, s.nm);
            let rows = b * s.len;
            let n = view(&a.n, rows, h);
            let qkv = view(&a.wide, rows, 3 * h);
            ctx.linear(&nm.mod_lin, &a.vec_silu, md)?;
            op(ctx, |g, cc, e| {
                let ss = attn_mod.shift_scale();
                dit::record_ada_norm(g, cc, e, x, md, s.len as u64, ss, &n, EPS)
            })?;
            ctx.linear(&nm.qkv, &n, &qkv)?;
            self.place_qkv(ctx, &qkv, s.len, s.row0, [&nm.query_norm, &nm.key_norm])?;
        }
        self.attention(ctx)?;
        for s in &streams {
            let (x, md, nm) = (s.x, s.md, s.nm);
            let rows = b * s.len;
            let (part, o, n) = (
                view(&a.part, rows, h),
                view(&a.o, rows, h),
                view(&a.n, rows, h),
            );
            let hidden = view(&a.mlp, rows, m);
            // One batch element: the stream's rows of the attention are
            // contiguous, read where they are.
            let align = ctx
                .runtime()
                .gpu()
                .device
                .limits()
                .min_storage_buffer_offset_alignment;
            let rows_of_attn = (b == 1)
                .then(|| row_view(&a.attn, s.row0, s.len, h, u64::from(align)))
                .flatten();
            let part = match rows_of_attn {
                Some(rows) => rows,
                None => {
                    self.gather(
                        ctx,
                        (&a.attn, self.s.joint_len(), s.row0, 0),
                        (&part, s.len, 0, 0),
                        [s.len, h],
                        GatherOp::Copy,
                    )?;
                    part
                }
            };
            ctx.linear(&nm.proj, &part, &o)?;
            let per = s.len as u64;
            op(ctx, |g, cc, e| {
                dit::record_gated_add(g, cc, e, x, &o, md, per, attn_mod.gate)
            })?;
            op(ctx, |g, cc, e| {
                let ss = mlp_mod.shift_scale();
                dit::record_ada_norm(g, cc, e, x, md, per, ss, &n, EPS)
            })?;
            ctx.linear_gelu(&nm.mlp_in, &n, &hidden)?;
            ctx.linear(&nm.mlp_out, &hidden, &o)?;
            op(ctx, |g, cc, e| {
                dit::record_gated_add(g, cc, e, x, &o, md, per, mlp_mod.gate)
            })?;
        }
        if i == 0 {
            self.capture(ctx, "img_after_double0", &a.x_img)?;
            self.capture(ctx, "txt_after_double0", &a.x_txt)?;
        }
        Ok(())
    }

    /// Single block `i` on the joint sequence `x`: modulation, linear1 into
    /// q, k, v and the MLP input, attention, linear2 of
    /// `cat(attn, gelu(mlp))`, gated residual. Block 0 first joins txt and
    /// img into `x`.
    fn single(&self, ctx: &mut BlockCtx<'_>, i: usize) -> Result<(), RuntimeError> {
        let (a, c, s) = (self.a, self.c, self.s);
        let nm = &self.nm.single[i];
        let (h, m, b, l) = (c.hidden_size, c.mlp_hidden(), s.batch, s.joint_len());
        let x = &a.x;
        if i == 0 {
            self.gather(
                ctx,
                (&a.x_txt, s.txt_len, 0, 0),
                (x, l, 0, 0),
                [s.txt_len, h],
                GatherOp::Copy,
            )?;
            self.gather(
                ctx,
                (&a.x_img, s.img_len, 0, 0),
                (x, l, s.txt_len, 0),
                [s.img_len, h],
                GatherOp::Copy,
            )?;
            self.capture(ctx, "after_double_blocks", x)?;
        }
        let modulation = ModulationOut::ATTN;
        let md = view(&a.mod_img, b, 3 * h);
        ctx.linear(&nm.modulation, &a.vec_silu, &md)?;
        let n = &a.n;
        op(ctx, |g, cc, e| {
            let ss = modulation.shift_scale();
            dit::record_ada_norm(g, cc, e, x, &md, l as u64, ss, n, EPS)
        })?;
        let wide = &a.wide;
        ctx.linear(&nm.linear1, n, wide)?;
        self.place_qkv(ctx, wide, l, 0, [&nm.query_norm, &nm.key_norm])?;
        self.attention(ctx)?;
        let cat = &a.cat;
        self.gather(
            ctx,
            (&a.attn, l, 0, 0),
            (cat, l, 0, 0),
            [l, h],
            GatherOp::Copy,
        )?;
        self.gather(
            ctx,
            (wide, l, 0, 3 * h),
            (cat, l, 0, h),
            [l, m],
            GatherOp::GeluTanh,
        )?;
        let o = &a.o;
        ctx.linear(&nm.linear2, cat, o)?;
        op(ctx, |g, cc, e| {
            dit::record_gated_add(g, cc, e, x, o, &md, l as u64, modulation.gate)
        })?;
        if i == 0 {
            self.capture(ctx, "after_single0", x)?;
        }
        Ok(())
    }

    /// The image tokens, `linear((1 + scale)·LayerNorm(x) + shift)` with
    /// `(shift, scale) = adaLN_modulation.1(silu(vec))`.
    fn final_layer(&self, ctx: &mut BlockCtx<'_>) -> Result<(), RuntimeError> {
        let (a, c, s, nm) = (self.a, self.c, self.s, &self.nm.last);
        let (h, b) = (c.hidden_size, s.batch);
        let x_img = &a.x_img;
        if c.depth_single_blocks > 0 {
            self.gather(
                ctx,
                (&a.x, s.joint_len(), s.txt_len, 0),
                (x_img, s.img_len, 0, 0),
                [s.img_len, h],
                GatherOp::Copy,
            )?;
        }
        self.capture(ctx, "before_final_layer", x_img)?;
        let md = view(&a.mod_img, b, 2 * h);
        ctx.linear(&nm.modulation, &a.vec_silu, &md)?;
        let n = view(&a.n, b * s.img_len, h);
        let per = s.img_len as u64;
        op(ctx, |g, cc, e| {
            let ss = ModulationOut::ATTN.shift_scale();
            dit::record_ada_norm(g, cc, e, x_img, &md, per, ss, &n, EPS)
        })?;
        ctx.linear(&nm.linear, &n, &a.out)
    }
}
