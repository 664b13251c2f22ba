//! The decoder on the runtime: one pass per latent (or per tile of it), one
//! runtime block per [`Stage`], the activations in four rotating NCHW
//! buffers of the largest map plus the mid attention's values and the
//! GroupNorm statistics.
//!
//! ```text
//! h = conv_in(z)                                   16 → C_mid
//! h = mid.block_2(mid.attn_1(mid.block_1(h)))
//! for i = levels−1 .. 0: h = up[i].block[0..=n](h); if i > 0: h = conv(upsample_2x(h))
//! image = conv_out(silu(norm_out(h)))              C_0 → 3
//! ResNet(x) = conv2(silu(gn2(conv1(silu(gn1(x)))))) + (nin_shortcut(x) or x)
//! attn(x)   = x + proj_out(softmax(q kᵀ/√C) v),  q, k, v = 1×1 convs of gn(x)
//! ```

use dynvram_runtime::ops::cache::PipelineCache;
use dynvram_runtime::ops::conv::{ConvWeight, Geometry, record_conv2d};
use dynvram_runtime::ops::embed::TableDtype;
use dynvram_runtime::ops::encoder::Encoder;
use dynvram_runtime::ops::group_norm::record_group_norm;
use dynvram_runtime::ops::spatial_attention::record_spatial_attention;
use dynvram_runtime::{
    ActDtype, Activation, BlockCtx, Gpu, GpuError, GpuTensor, Model, PassStats, Runtime,
    RuntimeError,
};

use super::VaeError;
use super::activations::{Sizes, activation_bytes, encoder_sizes, sizes};
use super::checkpoint::{Names, ResBlock, Stage, VaeCheckpoint, encoder_stages, stages};
use super::config::{EPS, GROUPS, VaeConfig};
use super::tiles::{AUTO_SIZES, Blend, Tiling, auto_overlap, crop, starts};

/// Image pixels one pass decodes at most under [`Tiling::Auto`]: the
/// convolution's pixel tiles (64 each) fill one grid axis of 65,535
/// workgroups, WebGPU's minimum limit.
const MAX_PASS_PIXELS: u64 = 65_535 * 64;

/// What a decode returns.
#[derive(Debug, Clone)]
pub struct VaeDecoded {
    /// `[batch, 3, scale·h, scale·w]` (about −1..1, unclamped).
    pub image: Vec<f32>,
    /// The passes' figures, summed over tiles.
    pub stats: PassStats,
    /// Passes run (1 without tiling).
    pub tiles: usize,
}

/// What a set of buffers was sized for: an encode or a decode of
/// `[batch, .., h, w]` inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    encoder: bool,
    batch: usize,
    h: usize,
    w: usize,
}

impl Key {
    fn sizes(self, c: &VaeConfig) -> Sizes {
        if self.encoder {
            encoder_sizes(c, self.batch, self.h, self.w)
        } else {
            sizes(c, self.batch, self.h, self.w)
        }
    }
}

/// What an encode returns.
#[derive(Debug, Clone)]
pub struct VaeEncoded {
    /// `[batch, z_channels, h/8, w/8]`: the latent distribution's mean.
    pub mean: Vec<f32>,
    /// The pass's figures.
    pub stats: PassStats,
}

/// The buffers of passes over one input shape.
#[derive(Debug)]
struct Acts {
    key: Key,
    z: Activation,
    bufs: [Activation; 4],
    v: Activation,
    stats: Activation,
}

impl Acts {
    fn new(rt: &Runtime, c: &VaeConfig, key: Key, dtype: ActDtype) -> Result<Self, RuntimeError> {
        let s = key.sizes(c);
        let a = |label: &str, n: usize| rt.activation_of(label, &[n], dtype);
        Ok(Self {
            key,
            z: a("vae z", s.z)?,
            bufs: [
                a("vae a", s.big)?,
                a("vae b", s.big)?,
                a("vae c", s.big)?,
                a("vae d", s.big)?,
            ],
            v: a("vae v", s.mid)?,
            stats: rt.activation_of("vae norm stats", &[s.stats], ActDtype::F32)?,
        })
    }

    fn bytes(&self) -> u64 {
        self.bufs
            .iter()
            .chain([&self.z, &self.v, &self.stats])
            .map(|t| t.binding_bytes())
            .sum()
    }
}

/// `t`'s buffer as `[b, c, h, w]`.
fn view(t: &GpuTensor, shape: [usize; 4]) -> GpuTensor {
    debug_assert!(shape.iter().product::<usize>() as u64 <= t.numel());
    GpuTensor {
        shape: shape.iter().map(|&d| d as u64).collect(),
        ..t.clone()
    }
}

/// A decoder stage's recording: the context, the buffers, the batch.
struct Rec<'c, 'a, 'b> {
    ctx: &'c mut BlockCtx<'a>,
    acts: &'b Acts,
    batch: usize,
}

impl Rec<'_, '_, '_> {
    /// Buffer `i` as `[batch, c, h, w]`.
    fn buf(&self, i: usize, c: usize, h: usize, w: usize) -> GpuTensor {
        view(&self.acts.bufs[i], [self.batch, c, h, w])
    }

    /// `out = conv(x) + bias (+ res)` with layer `name`'s weights.
    fn conv(
        &mut self,
        name: &str,
        x: &GpuTensor,
        out: &GpuTensor,
        res: Option<&GpuTensor>,
        geom: Geometry,
    ) -> Result<(), RuntimeError> {
        let key = format!("{name}.weight");
        let w = self.ctx.weight(&key)?;
        let dtype = match (w.as_f32, w.dtype) {
            (true, _) | (false, dynvram_runtime::loader::Dtype::F32) => TableDtype::F32,
            (false, dynvram_runtime::loader::Dtype::F16) => TableDtype::F16,
            (false, dynvram_runtime::loader::Dtype::BF16) => TableDtype::Bf16,
            (false, other) => {
                return Err(RuntimeError::Dtype {
                    model: self.ctx.model().path().to_owned(),
                    tensor: key,
                    dtype: other,
                    why: "is not a convolution weight type (f32, f16 or bf16)".into(),
                });
            }
        };
        let &[cout, cin, k, _] = w.shape else {
            return Err(RuntimeError::Shape {
                op: "conv2d".into(),
                detail: format!("`{key}` has shape {:?}, expected [out, in, k, k]", w.shape),
            });
        };
        let weight = ConvWeight {
            buffer: w.buffer,
            offset: w.offset,
            dtype,
            cout: cout as u64,
            cin: cin as u64,
            ksize: k as u64,
        };
        let bias = self.ctx.weight_tensor(&format!("{name}.bias"))?;
        self.op(|gpu, cache, enc| record_conv2d(gpu, cache, enc, x, &weight, &bias, res, out, geom))
    }

    /// Records one raw op into the block's encoder.
    fn op(
        &mut self,
        f: impl FnOnce(&Gpu, &PipelineCache, &mut Encoder) -> Result<(), GpuError>,
    ) -> Result<(), RuntimeError> {
        let rt = self.ctx.runtime();
        Ok(f(rt.gpu(), rt.pipelines(), self.ctx.encoder())?)
    }

    /// `out = GroupNorm(x)` with norm `name`'s affine weights, then SiLU where `silu`.
    fn norm(
        &mut self,
        name: &str,
        x: &GpuTensor,
        out: &GpuTensor,
        silu: bool,
    ) -> Result<(), RuntimeError> {
        let weight = self.ctx.weight_tensor(&format!("{name}.weight"))?;
        let bias = self.ctx.weight_tensor(&format!("{name}.bias"))?;
        let stats = &self.acts.stats;
        self.op(|gpu, cache, enc| {
            let groups = GROUPS as u64;
            record_group_norm(
                gpu, cache, enc, x, &weight, &bias, stats, out, groups, EPS, silu,
            )
        })
    }

    /// A ResNet block on the map in buffer `x` (`h × w`); returns the buffer
    /// holding its output.
    fn resnet(
        &mut self,
        b: &ResBlock,
        x: usize,
        h: usize,
        w: usize,
    ) -> Result<usize, RuntimeError> {
        let [a, t, y] = others(x);
        let (p, ci, co) = (&b.prefix, b.cin, b.cout);
        let xin = self.buf(x, ci, h, w);
        let (a_in, a_out) = (self.buf(a, ci, h, w), self.buf(a, co, h, w));
        let (tt, yt) = (self.buf(t, co, h, w), self.buf(y, co, h, w));
        self.norm(&format!("{p}norm1"), &xin, &a_in, true)?;
        self.conv(&format!("{p}conv1"), &a_in, &tt, None, Geometry::same(1))?;
        self.norm(&format!("{p}norm2"), &tt, &a_out, true)?;
        // The shortcut reuses conv1's buffer, free after norm2.
        let skip = if ci == co {
            xin
        } else {
            self.conv(
                &format!("{p}nin_shortcut"),
                &xin,
                &tt,
                None,
                Geometry::same(0),
            )?;
            tt
        };
        let same = Geometry::same(1);
        self.conv(&format!("{p}conv2"), &a_out, &yt, Some(&skip), same)?;
        Ok(y)
    }

    /// The mid block's attention on buffer `x`; returns its output buffer.
    fn attention(
        &mut self,
        p: &str,
        x: usize,
        c: usize,
        h: usize,
        w: usize,
    ) -> Result<usize, RuntimeError> {
        let [a, q, k] = others(x);
        let xin = self.buf(x, c, h, w);
        let v = view(&self.acts.v, [self.batch, c, h, w]);
        self.norm(&format!("{p}norm"), &xin, &self.buf(a, c, h, w), false)?;
        for (l, out) in [
            ("q", self.buf(q, c, h, w)),
            ("k", self.buf(k, c, h, w)),
            ("v", v.clone()),
        ] {
            self.conv(
                &format!("{p}{l}"),
                &self.buf(a, c, h, w),
                &out,
                None,
                Geometry::same(0),
            )?;
        }
        let (qt, kt, ot) = (
            self.buf(q, c, h, w),
            self.buf(k, c, h, w),
            self.buf(a, c, h, w),
        );
        self.op(|gpu, cache, enc| record_spatial_attention(gpu, cache, enc, &qt, &kt, &v, &ot))?;
        self.conv(
            &format!("{p}proj_out"),
            &self.buf(a, c, h, w),
            &self.buf(q, c, h, w),
            Some(&xin),
            Geometry::same(0),
        )?;
        Ok(q)
    }
}

impl Rec<'_, '_, '_> {
    /// Records `stage` of a pass whose input `input` is `h × w`, the map in
    /// buffer `cur`; returns the buffer holding the stage's output.
    #[allow(clippy::too_many_arguments)] // the stage and where the pass stands
    fn stage(
        &mut self,
        c: &VaeConfig,
        nm: &Names,
        stage: Stage,
        input: &GpuTensor,
        h: usize,
        w: usize,
        cur: usize,
    ) -> Result<usize, RuntimeError> {
        let n = c.levels();
        match stage {
            Stage::Mid => {
                let out = self.buf(0, c.mid_channels(), h, w);
                self.conv(&nm.dec("conv_in"), input, &out, None, Geometry::same(1))?;
                self.mid(c, nm, false, 0, h, w)
            }
            Stage::Up(i) => {
                let (lh, lw) = (h << (n - 1 - i), w << (n - 1 - i));
                let mut cur = cur;
                for b in nm.up_blocks(c, i) {
                    cur = self.resnet(&b, cur, lh, lw)?;
                }
                if i == 0 {
                    return Ok(cur);
                }
                let ci = c.channels(i);
                let out = others(cur)[0];
                let geom = Geometry {
                    up: 2,
                    ..Geometry::same(1)
                };
                let (x, y) = (self.buf(cur, ci, lh, lw), self.buf(out, ci, 2 * lh, 2 * lw));
                self.conv(
                    &nm.dec(&format!("up.{i}.upsample.conv")),
                    &x,
                    &y,
                    None,
                    geom,
                )?;
                Ok(out)
            }
            Stage::Out => self.out(
                &nm.dec(""),
                c.channels(0),
                c.image_channels,
                cur,
                h << (n - 1),
                w << (n - 1),
            ),
            Stage::Down(i) => {
                let (lh, lw) = (h >> i, w >> i);
                let mut cur = cur;
                if i == 0 {
                    let out = self.buf(0, c.channels(0), h, w);
                    self.conv(&nm.enc("conv_in"), input, &out, None, Geometry::same(1))?;
                    cur = 0;
                }
                for b in nm.down_blocks(c, i) {
                    cur = self.resnet(&b, cur, lh, lw)?;
                }
                if i + 1 == n {
                    return Ok(cur);
                }
                let ci = c.channels(i);
                let out = others(cur)[0];
                // BFL's Downsample: pad (0, 1, 0, 1), then 3×3 stride 2.
                let geom = Geometry {
                    up: 1,
                    stride: 2,
                    pad: [0, 1, 0, 1],
                };
                let (x, y) = (self.buf(cur, ci, lh, lw), self.buf(out, ci, lh / 2, lw / 2));
                self.conv(
                    &nm.enc(&format!("down.{i}.downsample.conv")),
                    &x,
                    &y,
                    None,
                    geom,
                )?;
                Ok(out)
            }
            Stage::EncoderMid => self.mid(c, nm, true, cur, h >> (n - 1), w >> (n - 1)),
            Stage::EncoderOut => self.out(
                &nm.enc(""),
                c.mid_channels(),
                2 * c.z_channels,
                cur,
                h >> (n - 1),
                w >> (n - 1),
            ),
        }
    }

    /// The mid block (ResNet, attention, ResNet) on buffer `x`.
    #[allow(clippy::too_many_arguments)] // the block and its map
    fn mid(
        &mut self,
        c: &VaeConfig,
        nm: &Names,
        encoder: bool,
        x: usize,
        h: usize,
        w: usize,
    ) -> Result<usize, RuntimeError> {
        let [b1, b2] = nm.mid_blocks(c, encoder);
        let x = self.resnet(&b1, x, h, w)?;
        let attn = if encoder {
            nm.enc("mid.attn_1.")
        } else {
            nm.dec("mid.attn_1.")
        };
        let x = self.attention(&attn, x, c.mid_channels(), h, w)?;
        self.resnet(&b2, x, h, w)
    }

    /// `conv_out(silu(norm_out(x)))` under `part` (`…coder.`), from `cin` to
    /// `cout` channels of an `h × w` map in buffer `x`.
    fn out(
        &mut self,
        part: &str,
        cin: usize,
        cout: usize,
        x: usize,
        h: usize,
        w: usize,
    ) -> Result<usize, RuntimeError> {
        let [a, out, _] = others(x);
        let (xt, at) = (self.buf(x, cin, h, w), self.buf(a, cin, h, w));
        self.norm(&format!("{part}norm_out"), &xt, &at, true)?;
        let ot = self.buf(out, cout, h, w);
        self.conv(
            &format!("{part}conv_out"),
            &at,
            &ot,
            None,
            Geometry::same(1),
        )?;
        Ok(out)
    }
}

/// The three buffers besides `x`.
fn others(x: usize) -> [usize; 3] {
    [(x + 1) % 4, (x + 2) % 4, (x + 3) % 4]
}

/// The Flux VAE decoder, ready to run decodes on an opened [`Model`].
#[derive(Debug)]
pub struct FluxVae {
    config: VaeConfig,
    names: Names,
    dtype: ActDtype,
    tiling: Tiling,
    acts: Option<Acts>,
}

impl FluxVae {
    /// A decoder for `ckpt` with activations in `dtype` (f16 needs
    /// `SHADER_F16`); open the [`Model`] with `ckpt.spec(..)` of the largest
    /// latent (or tile) it decodes. Tiling is [`Tiling::Auto`].
    pub fn new(rt: &Runtime, ckpt: &VaeCheckpoint, dtype: ActDtype) -> Result<Self, VaeError> {
        dynvram_runtime::ops::cache::check_act_dtype(rt.gpu(), "vae", dtype)
            .map_err(RuntimeError::from)?;
        Ok(Self {
            config: ckpt.config.clone(),
            names: ckpt.names.clone(),
            dtype,
            tiling: Tiling::Auto,
            acts: None,
        })
    }

    /// How later decodes are split.
    pub fn with_tiling(mut self, tiling: Tiling) -> Self {
        self.tiling = tiling;
        self
    }

    /// Decodes `z` `[batch, z_channels, h, w]` (already `latents / 0.3611 +
    /// 0.1159`) into `[batch, 3, 8h, 8w]` (for Flux's 4 levels), in tiles
    /// where [`Tiling`] says so.
    pub fn decode(
        &mut self,
        rt: &Runtime,
        model: &Model,
        z: &[f32],
        batch: usize,
        h: usize,
        w: usize,
    ) -> Result<VaeDecoded, VaeError> {
        let c = &self.config.clone();
        let want = batch * c.z_channels * h * w;
        if batch == 0 || h == 0 || w == 0 || z.len() != want {
            return Err(VaeError::Input(format!(
                "latent of {} values for [batch {batch}, {} channels, {h}, {w}] ({want} values, none of the sizes 0)",
                z.len(),
                c.z_channels
            )));
        }
        let (size, overlap) = self.tile_size(rt, model, batch, h, w)?;
        let (th, tw) = (h.min(size), w.min(size));
        let _span = tracing::info_span!("vae_decode", batch, h, w, th, tw).entered();
        let s = c.scale();
        let shape = [batch, c.z_channels, h, w];
        if (th, tw) == (h, w) {
            let key = Key {
                encoder: false,
                batch,
                h,
                w,
            };
            let (image, stats) = self.pass(
                rt,
                model,
                z,
                key,
                &stages(c),
                [batch, c.image_channels, h * s, w * s],
            )?;
            return Ok(VaeDecoded {
                image,
                stats,
                tiles: 1,
            });
        }
        let mut blend = Blend::new([batch, c.image_channels, h * s, w * s]);
        let mut stats = PassStats::default();
        let mut tiles = 0;
        for &y0 in &starts(h, th, overlap) {
            for &x0 in &starts(w, tw, overlap) {
                let tile = crop(z, shape, y0, x0, th, tw);
                let key = Key {
                    encoder: false,
                    batch,
                    h: th,
                    w: tw,
                };
                let out = [batch, c.image_channels, th * s, tw * s];
                let (img, st) = self.pass(rt, model, &tile, key, &stages(c), out)?;
                blend.add(&img, th * s, tw * s, y0 * s, x0 * s, overlap * s);
                stats.add(&st);
                tiles += 1;
            }
        }
        tracing::debug!(tiles, th, tw, overlap, "tiled decode");
        Ok(VaeDecoded {
            image: blend.finish(),
            stats,
            tiles,
        })
    }

    /// The latent tile side and overlap of a decode (the whole latent:
    /// its larger side and 0).
    fn tile_size(
        &self,
        rt: &Runtime,
        model: &Model,
        batch: usize,
        h: usize,
        w: usize,
    ) -> Result<(usize, usize), VaeError> {
        let c = &self.config;
        let bytes = |th: usize, tw: usize| activation_bytes(c, batch, th, tw, self.dtype);
        match self.tiling {
            Tiling::Whole => Ok((h.max(w), 0)),
            Tiling::Tiles { size, overlap } => {
                if size == 0 || overlap >= size {
                    return Err(VaeError::Input(format!(
                        "tiles of {size} latent pixels overlapping by {overlap}: the overlap must be below the size"
                    )));
                }
                Ok((size, overlap))
            }
            Tiling::Auto => {
                // Free budget now, plus what this decoder holds (freed before
                // new buffers are allocated), and at least the room the
                // model's plan reserved for activations.
                let report = rt.budget_report();
                let held = self.acts.as_ref().map_or(0, Acts::bytes);
                let room =
                    (report.usable.saturating_sub(report.tracked) + held).max(model.plan().scratch);
                // A pass's image must also stay inside the kernels' grids
                // (the convolution's 64-pixel tiles on one grid axis).
                let fits = |th: usize, tw: usize| {
                    bytes(th, tw) <= room
                        && (th * tw * c.scale() * c.scale()) as u64 <= MAX_PASS_PIXELS
                };
                if fits(h, w) {
                    return Ok((h.max(w), 0));
                }
                let fit = AUTO_SIZES
                    .iter()
                    .copied()
                    .find(|&t| fits(h.min(t), w.min(t)));
                match fit {
                    Some(t) => Ok((t, auto_overlap(t))),
                    None => {
                        let t = AUTO_SIZES[AUTO_SIZES.len() - 1];
                        Err(VaeError::NoRoom {
                            tile_h: h.min(t),
                            tile_w: w.min(t),
                            need: bytes(h.min(t), w.min(t)),
                            room,
                        })
                    }
                }
            }
        }
    }

    /// Encodes `image` `[batch, 3, h, w]` (values in −1..1; sides multiples
    /// of 8 for Flux) into the latent distribution's mean `[batch,
    /// z_channels, h/8, w/8]` (the first half of `conv_out`'s channels; the
    /// sampler's latent is `(mean − SHIFT_FACTOR) · SCALING_FACTOR`), in one
    /// pass on a model opened with [`VaeCheckpoint::encoder_spec`]. Not tiled.
    pub fn encode(
        &mut self,
        rt: &Runtime,
        model: &Model,
        image: &[f32],
        batch: usize,
        h: usize,
        w: usize,
    ) -> Result<VaeEncoded, VaeError> {
        let c = &self.config.clone();
        let s = c.scale();
        let want = batch * c.image_channels * h * w;
        if batch == 0
            || h == 0
            || w == 0
            || !h.is_multiple_of(s)
            || !w.is_multiple_of(s)
            || image.len() != want
        {
            return Err(VaeError::Input(format!(
                "image of {} values for [batch {batch}, {} channels, {h}, {w}] ({want} values; sides positive multiples of {s})",
                image.len(),
                c.image_channels
            )));
        }
        let _span = tracing::info_span!("vae_encode", batch, h, w).entered();
        let key = Key {
            encoder: true,
            batch,
            h,
            w,
        };
        let (lh, lw) = (h / s, w / s);
        let out = [batch, 2 * c.z_channels, lh, lw];
        let (moments, stats) = self.pass(rt, model, image, key, &encoder_stages(c), out)?;
        // The first z_channels of each image's moments are the mean.
        let per = c.z_channels * lh * lw;
        let mean = moments
            .chunks(2 * per)
            .flat_map(|m| &m[..per])
            .copied()
            .collect();
        Ok(VaeEncoded { mean, stats })
    }

    /// One pass of `plan` over `input` (a latent or tile for the decoder,
    /// an image for the encoder) of `key`'s shape; returns the map of shape
    /// `out` the last stage wrote.
    fn pass(
        &mut self,
        rt: &Runtime,
        model: &Model,
        input: &[f32],
        key: Key,
        plan: &[Stage],
        out: [usize; 4],
    ) -> Result<(Vec<f32>, PassStats), VaeError> {
        if model.block_count() != plan.len() {
            return Err(VaeError::Input(format!(
                "{}: the model has {} blocks, this VAE's {} has {}; open it with VaeCheckpoint::{}",
                model.path().display(),
                model.block_count(),
                if key.encoder { "encoder" } else { "decoder" },
                plan.len(),
                if key.encoder { "encoder_spec" } else { "spec" },
            )));
        }
        if self.acts.as_ref().is_none_or(|a| a.key != key) {
            // Old buffers go first: both need not fit at once.
            self.acts = None;
            self.acts = Some(Acts::new(rt, &self.config, key, self.dtype)?);
        }
        let acts = self.acts.as_ref().expect("allocated above");
        let (c, nm) = (&self.config, &self.names);
        let in_ch = if key.encoder {
            c.image_channels
        } else {
            c.z_channels
        };
        let xt = view(&acts.z, [key.batch, in_ch, key.h, key.w]);
        rt.write_f32(&xt, input)?;
        let mut cur = 0usize;
        let stats = model.run_pass(rt, None, |ctx| {
            let stage = plan[ctx.index()];
            let mut r = Rec {
                ctx,
                acts,
                batch: key.batch,
            };
            cur = r.stage(c, nm, stage, &xt, key.h, key.w, cur)?;
            Ok(())
        })?;
        let image = rt.read_f32(&view(&acts.bufs[cur], out))?;
        Ok((image, stats))
    }
}
