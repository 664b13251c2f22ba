//! Text to image with FLUX.1, as diffusers' `FluxPipeline` computes it:
//!
//! 1. tokenize each prompt (built-in CLIP BPE, 77 ids; T5 Unigram,
//!    `max_sequence_length` ids; longer prompts are cut and reported);
//! 2. CLIP-L's pooled output (`y`) and T5's hidden states (`txt`);
//! 3. sample the transformer from noise ([`crate::flux::sample`]);
//! 4. unpack the latents, `z = latents / 0.3611 + 0.1159`, VAE decode;
//! 5. `clamp(x / 2 + 0.5, 0, 1)`, × 255 rounded half to even into RGB bytes.
//!
//! The four models run on one [`Runtime`], under its one budget. All four
//! are opened as runtime [`Model`]s before the first stage, holding no
//! VRAM ([`Model::open_unloaded`], each below the last in priority); a
//! stage loads its model (on top of the priority list, so models still
//! open yield to it) and, before its last pass, prefetches the next
//! stage's first weights into the room free then ([`Model::prefetch`]:
//! nothing is evicted for it, and the running model outranks it). The
//! transformer's streamed weights are pinned in host RAM in the background
//! while the encoders run ([`Model::pin_ahead`]), so its first step copies
//! them from pins. The text encoders are dropped once their outputs are
//! read: nothing of theirs holds VRAM while the transformer samples. Every stage reports its wall
//! time, the bytes it uploaded and streamed, and the ledger's peak while it
//! ran; the fixed costs (opening files, tokenizers) are reported apart.

pub mod diffusers;
pub mod synth;

use std::path::{Path, PathBuf};
use std::time::Instant;

use dynvram_runtime::loader::ModelFiles;
use dynvram_runtime::memory::Placement;
use dynvram_runtime::quant::TensorList;
use dynvram_runtime::roofline::{self, Bound, Rates};
use dynvram_runtime::trace::Trace;
use dynvram_runtime::{
    ActDtype, FilesList, Model, ModelReport, ModelSpec, PassStats, PipelineTime, Runtime,
    RuntimeError, StreamSources,
};

use crate::clip::{ClipCheckpoint, ClipConfig, ClipText};
use crate::error::ModelError;
use crate::flux::sample::{self, LatentShape, SampleOptions, Schedule, StepDone};
use crate::flux::{Flux, FluxCheckpoint, FluxConfig};
use crate::t5::{T5Checkpoint, T5Config, T5Encoder};
use crate::tokenize::{ClipTokenizer, T5Tokenizer};
use crate::vae::{FluxVae, SCALING_FACTOR, SHIFT_FACTOR, VaeCheckpoint, VaeConfig};

/// The most T5 tokens a prompt may take (diffusers refuses more).
pub const MAX_SEQUENCE_LENGTH: usize = 512;

/// The four weight files of a pipeline.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Files {
    /// The Flux transformer (BFL layout, e.g. `flux1-dev.safetensors`).
    pub transformer: PathBuf,
    /// CLIP-L's text model (HF `text_model.*` keys).
    pub clip: PathBuf,
    /// The T5 v1.1 encoder (HF `encoder.*` keys).
    pub t5: PathBuf,
    /// The 16-channel autoencoder (BFL `ae.safetensors` layout).
    pub vae: PathBuf,
}

/// Configs given instead of inferring them from the shapes (needed where
/// the shapes do not tell, such as head counts of small test models).
#[derive(Debug, Clone, Default)]
pub struct Configs {
    /// The transformer's.
    pub transformer: Option<FluxConfig>,
    /// CLIP's.
    pub clip: Option<ClipConfig>,
    /// T5's.
    pub t5: Option<T5Config>,
    /// The VAE's.
    pub vae: Option<VaeConfig>,
}

/// What a text-encoder file holds, told by its tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TextEncoderKind {
    /// A CLIP text model (`text_model.embeddings.token_embedding.weight`,
    /// or without `text_model.`).
    Clip,
    /// A T5 encoder (`shared.weight`, `encoder.embed_tokens.weight` or
    /// `encoder.block.0.…`).
    T5,
}

impl TextEncoderKind {
    /// The kind of the tensors in `list`, if either.
    pub fn of(list: &dyn TensorList) -> Option<Self> {
        let has = |n: &str| list.dtype_shape(n).is_some();
        if has("text_model.embeddings.token_embedding.weight") || has(crate::clip::TOKEN_EMBEDDING)
        {
            Some(Self::Clip)
        } else if has("shared.weight")
            || has("encoder.embed_tokens.weight")
            || has("encoder.block.0.layer.0.SelfAttention.q.weight")
        {
            Some(Self::T5)
        } else {
            None
        }
    }

    /// The kind of the safetensors file `path` (reads its header).
    pub fn of_file(path: &Path) -> Result<Option<Self>, ModelError> {
        let files = ModelFiles::open(path).map_err(RuntimeError::from)?;
        Ok(Self::of(&FilesList::new(&files)))
    }

    fn name(self) -> &'static str {
        match self {
            Self::Clip => "a CLIP text model",
            Self::T5 => "a T5 encoder",
        }
    }
}

/// Checks that `path` holds `want`, naming what it holds instead.
fn expect_kind(path: &Path, want: TextEncoderKind, role: &str) -> Result<(), ModelError> {
    match TextEncoderKind::of_file(path)? {
        Some(k) if k == want => Ok(()),
        found => Err(ModelError::Weights {
            path: path.to_owned(),
            why: format!(
                "given as the {role}, but it holds {}",
                found.map_or(
                    "neither a CLIP nor a T5 text encoder",
                    TextEncoderKind::name
                )
            ),
        }),
    }
}

/// The pipeline's checkpoints and tokenizers, opened and checked against
/// each other (CLIP's width is the transformer's `vec_in_dim`, T5's its
/// `context_in_dim`).
#[derive(Debug)]
pub struct Pipeline {
    /// The transformer.
    pub flux: FluxCheckpoint,
    /// CLIP-L.
    pub clip: ClipCheckpoint,
    /// T5.
    pub t5: T5Checkpoint,
    /// The VAE.
    pub vae: VaeCheckpoint,
    clip_tokenizer: ClipTokenizer,
    t5_tokenizer: T5Tokenizer,
    /// Seconds spent opening the files and the tokenizers.
    pub open_seconds: f64,
}

/// Where the noise comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Noise {
    /// [`sample::seeded_noise`] of this seed.
    Seed(u64),
    /// Given latents `[B, 16, H/8, W/8]` (e.g. [`sample::read_noise`]).
    Latents(Vec<f32>),
}

/// One text-to-image run.
#[derive(Debug, Clone)]
pub struct Request {
    /// One image per prompt.
    pub prompts: Vec<String>,
    /// Image width in pixels (a multiple of 16).
    pub width: usize,
    /// Image height in pixels (a multiple of 16).
    pub height: usize,
    /// Euler steps (at least 1).
    pub steps: usize,
    /// Distilled guidance (dev; models without `guidance_in` ignore it).
    pub guidance: f32,
    /// T5 tokens each prompt is padded or cut to.
    pub max_sequence_length: usize,
    /// The initial noise.
    pub noise: Noise,
    /// The schedule; `None`: the model's own ([`Schedule::for_config`]).
    pub schedule: Option<Schedule>,
    /// Activation dtype of every model.
    pub dtype: ActDtype,
}

/// The stages of a run, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// CLIP-L's pass.
    Clip,
    /// T5's pass.
    T5,
    /// The transformer's steps.
    Sample,
    /// The VAE decoder's pass.
    Decode,
}

/// What one stage cost.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StageReport {
    /// Which.
    pub stage: Stage,
    /// Wall seconds, the model's opening (its resident uploads) included.
    pub seconds: f64,
    /// Of those, opening the model.
    pub open_seconds: f64,
    /// Passes run.
    pub passes: usize,
    /// Weight bytes streamed by the passes.
    pub streamed_bytes: u64,
    /// Where they came from: registered pins (DMA), RAM pins or the files
    /// (both through the staging ring).
    pub streamed_from: StreamSources,
    /// Times the staging ring waited for a slot's earlier copy.
    pub ring_stalls: u64,
    /// Each pass's wall seconds (the sample stage: one a step).
    pub pass_seconds: Vec<f64>,
    /// Of the passes' time, CPU seconds recording their kernels.
    pub record_seconds: f64,
    /// CPU seconds staging weights and submitting (a pass bound by its
    /// stream spends it here, and waits little at its end).
    pub submit_seconds: f64,
    /// Seconds waiting for the GPU at the passes' ends.
    pub wait_seconds: f64,
    /// Pipelines created in the stage (kernels no stage before it needed)
    /// and the seconds that took: inside `seconds`, a fixed cost of the
    /// first image.
    pub pipelines: PipelineTime,
    /// Weight bytes uploaded to stay resident (when the stage loaded its
    /// model and by passes).
    pub loaded_bytes: u64,
    /// Weight bytes of its model the stage before uploaded into free room
    /// (prefetched while that stage ran its last pass).
    pub prefetched_bytes: u64,
    /// The ledger's peak while the stage ran.
    pub peak_vram: u64,
    /// The model's residency at the end of the stage.
    pub model: ModelReport,
    /// The runtime's host RAM copies of streamed weights at the stage's
    /// end, its model still open (they go with it).
    pub pins: dynvram_runtime::PinReport,
    /// Decode: the latent tiles decoded one by one (1: whole).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tiles: Option<usize>,
}

/// A prompt cut to fit an encoder.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Truncated {
    /// Index into [`Request::prompts`].
    pub prompt: usize,
    /// The encoder (`clip` or `t5`).
    pub encoder: &'static str,
    /// Tokens it takes.
    pub max_tokens: usize,
}

/// What a run made.
#[derive(Debug, Clone)]
pub struct Images {
    /// Images.
    pub batch: usize,
    /// Pixels per row.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// `[B, H, W, 3]` RGB bytes.
    pub pixels: Vec<u8>,
    /// `[B, 3, H, W]` the VAE's raw output.
    pub decoded: Vec<f32>,
    /// `[B, L_img, 64]` the final packed latents.
    pub latents: Vec<f32>,
    /// The schedule run.
    pub sigmas: Vec<f32>,
    /// Prompts cut to fit an encoder (warn about them).
    pub truncated: Vec<Truncated>,
    /// Per stage, in order.
    pub stages: Vec<StageReport>,
}

impl Images {
    /// Image `b`'s `[H, W, 3]` bytes.
    pub fn image(&self, b: usize) -> &[u8] {
        let n = self.width * self.height * 3;
        &self.pixels[b * n..][..n]
    }
}

/// Progress of a run, for a caller's display.
#[derive(Debug, Clone, Copy)]
pub enum Progress<'a> {
    /// A stage begins.
    Stage(Stage),
    /// A sampling step ended.
    Step(StepDone<'a>),
}

impl Pipeline {
    /// Opens the four files (headers and configs; no weight is read) and the
    /// built-in tokenizers, and checks that the models fit together.
    pub fn open(files: &Files, configs: Configs) -> Result<Self, ModelError> {
        let t0 = Instant::now();
        let _span = tracing::info_span!("txt2img_open").entered();
        expect_kind(&files.clip, TextEncoderKind::Clip, "CLIP-L text encoder")?;
        expect_kind(&files.t5, TextEncoderKind::T5, "T5 text encoder")?;
        let detected = FluxCheckpoint::detect(&files.transformer)?;
        let flux = match configs.transformer {
            Some(c) => detected.open_with(c)?,
            None => detected.open()?,
        };
        let clip = ClipCheckpoint::open(&files.clip, configs.clip)?;
        let t5 = T5Checkpoint::open(&files.t5, configs.t5)?;
        let vae = VaeCheckpoint::open(&files.vae, configs.vae)?;
        let fc = &flux.config;
        let mismatch = |path: &Path, why: String| ModelError::Weights {
            path: path.to_owned(),
            why,
        };
        // The encoders' widths are what the transformer's embedders take.
        for (path, what, got, input, want) in [
            (
                &files.clip,
                "CLIP's width",
                clip.config.hidden_size,
                "vec_in_dim",
                fc.vec_in_dim,
            ),
            (
                &files.t5,
                "T5's d_model",
                t5.config.d_model,
                "context_in_dim",
                fc.context_in_dim,
            ),
        ] {
            if got != want {
                return Err(mismatch(
                    path,
                    format!(
                        "{what} {got} is not the transformer's {input} {want} ({})",
                        files.transformer.display()
                    ),
                ));
            }
        }
        let latent_features = vae.config.z_channels * sample::PATCH * sample::PATCH;
        if vae.config.z_channels != sample::LATENT_CHANNELS || fc.in_channels != latent_features {
            return Err(mismatch(
                &files.vae,
                format!(
                    "a VAE of {} latent channels; FLUX.1's has {} (the transformer takes {} = channels × 2 × 2)",
                    vae.config.z_channels,
                    sample::LATENT_CHANNELS,
                    fc.in_channels
                ),
            ));
        }
        let clip_tokenizer = ClipTokenizer::builtin()?;
        let t5_tokenizer = T5Tokenizer::builtin()?;
        Ok(Self {
            flux,
            clip,
            t5,
            vae,
            clip_tokenizer,
            t5_tokenizer,
            open_seconds: t0.elapsed().as_secs_f64(),
        })
    }

    /// Checks `req` against the models: prompts, sizes, steps, lengths and
    /// the noise's size.
    pub fn check(&self, req: &Request) -> Result<LatentShape, ModelError> {
        let bad = |why: String| Err(ModelError::Input(why));
        if req.prompts.is_empty() {
            return bad("no prompt".into());
        }
        if req.steps == 0 {
            return bad("0 steps: sampling needs at least 1".into());
        }
        if req.max_sequence_length == 0 || req.max_sequence_length > MAX_SEQUENCE_LENGTH {
            return bad(format!(
                "max_sequence_length {} must be in 1..={MAX_SEQUENCE_LENGTH}",
                req.max_sequence_length
            ));
        }
        if !req.guidance.is_finite() {
            return bad(format!("guidance {} is not a finite number", req.guidance));
        }
        let latent = LatentShape::for_image(req.prompts.len(), req.width, req.height)?;
        if let Noise::Latents(n) = &req.noise
            && n.len() != latent.numel()
        {
            return bad(format!(
                "the noise holds {} values; {} images of {}×{} take {:?} = {}",
                n.len(),
                latent.batch,
                req.width,
                req.height,
                [latent.batch, latent.channels, latent.height, latent.width],
                latent.numel()
            ));
        }
        Ok(latent)
    }

    /// Runs `req` on `rt`: see the module's documentation.
    pub fn run(
        &self,
        rt: &Runtime,
        req: &Request,
        progress: &mut dyn FnMut(Progress<'_>),
    ) -> Result<Images, ModelError> {
        self.run_traced(rt, req, progress, None)
    }

    /// [`Self::run`], with the transformer's last step recorded in `trace`
    /// (its pass timeline: host lanes, and the device's where weights
    /// stream through a copy queue).
    pub fn run_traced(
        &self,
        rt: &Runtime,
        req: &Request,
        progress: &mut dyn FnMut(Progress<'_>),
        trace: Option<&mut Trace>,
    ) -> Result<Images, ModelError> {
        let latent = self.check(req)?;
        let _span = tracing::info_span!("txt2img", batch = latent.batch).entered();
        let b = latent.batch;
        let mut stages = Vec::new();
        let mut truncated = Vec::new();

        // Tokens: CLIP's 77 and T5's max_sequence_length per prompt.
        let mut clip_ids = Vec::with_capacity(b * crate::tokenize::CLIP_MAX_LEN);
        let mut t5_ids = Vec::with_capacity(b * req.max_sequence_length);
        for (i, p) in req.prompts.iter().enumerate() {
            let c = self.clip_tokenizer.encode(p)?;
            let t = self.t5_tokenizer.encode(p, req.max_sequence_length)?;
            for (tokens, encoder, max_tokens) in [
                (&c, "clip", crate::tokenize::CLIP_MAX_LEN),
                (&t, "t5", req.max_sequence_length),
            ] {
                if tokens.truncated {
                    tracing::warn!(prompt = i, encoder, max_tokens, "prompt truncated");
                    truncated.push(Truncated {
                        prompt: i,
                        encoder,
                        max_tokens,
                    });
                }
            }
            clip_ids.extend(c.ids);
            t5_ids.extend(t.ids);
        }

        // The decoder's room: the whole budget less what outlives the
        // stages (measured before any model holds VRAM).
        let room = {
            let r = rt.budget_report();
            r.usable.saturating_sub(r.tracked)
        };
        let noise = match &req.noise {
            Noise::Seed(seed) => sample::seeded_noise(*seed, latent),
            Noise::Latents(n) => n.clone(),
        };
        let schedule = req
            .schedule
            .unwrap_or_else(|| Schedule::for_config(&self.flux.config));
        let sigmas = sample::sigmas(schedule, req.steps, latent.tokens());
        let wide: Vec<f64> = sigmas.iter().map(|&s| f64::from(s)).collect();
        let flux_shape = crate::flux::Shape {
            batch: b,
            img_len: latent.tokens(),
            txt_len: req.max_sequence_length,
        };
        // Every model is opened (headers, plans) before the first stage,
        // each below the last, holding no VRAM; each stage prefetches the
        // next one's first weights into free room before its last pass.
        let [clip, t5, flux, vae] = [
            self.clip.spec(b, req.dtype),
            self.t5.spec(b, req.max_sequence_length, req.dtype),
            self.flux.spec(flux_shape, req.dtype),
            self.vae_spec(room, latent, req.dtype).0,
        ]
        .map(|spec| Opened::new(rt, spec));
        let [clip, t5, flux, vae] = [clip?, t5?, flux?, vae?];
        // Host RAM only: built while the encoders run.
        flux.model.pin_ahead(rt)?;

        progress(Progress::Stage(Stage::Clip));
        let (y, report) = stage(rt, Stage::Clip, clip, |model| {
            let mut enc = ClipText::new(rt, &self.clip, b, req.dtype)?;
            t5.prefetch(rt)?;
            let out = enc.encode(rt, model, &clip_ids)?;
            ModelError::check_finite("CLIP's pooled output", || "encoding".into(), &out.pooled)?;
            Ok((out.pooled, vec![out.stats]))
        })?;
        stages.push(report);

        progress(Progress::Stage(Stage::T5));
        let (txt, report) = stage(rt, Stage::T5, t5, |model| {
            let mut enc = T5Encoder::new(rt, &self.t5, b, req.max_sequence_length, req.dtype)?;
            flux.prefetch(rt)?;
            let out = enc.encode(rt, model, &t5_ids)?;
            ModelError::check_finite("T5's hidden states", || "encoding".into(), &out.hidden)?;
            Ok((out.hidden, vec![out.stats]))
        })?;
        stages.push(report);

        progress(Progress::Stage(Stage::Sample));
        let mut inputs =
            sample::sampling_inputs(&self.flux.config, &noise, latent, txt, y, req.guidance)?;
        let ((), report) = stage(rt, Stage::Sample, flux, |model| {
            let mut flux = Flux::new(rt, &self.flux, inputs.shape, req.dtype)?;
            // Before the last step: after the one before it, or now.
            let mut prefetched = Ok(());
            if req.steps == 1 {
                prefetched = vae.prefetch(rt);
            }
            let mut on_step = |d: StepDone<'_>| {
                if d.index + 2 == req.steps {
                    prefetched = vae.prefetch(rt);
                }
                progress(Progress::Step(d))
            };
            let opts = SampleOptions {
                on_step: Some(&mut on_step),
                trace,
            };
            let stats = sample::sample(&mut flux, rt, model, &mut inputs, &wide, opts)?;
            prefetched?;
            Ok(((), stats))
        })?;
        stages.push(report);

        progress(Progress::Stage(Stage::Decode));
        let z: Vec<f32> = sample::unpack(&inputs.img, latent)
            .into_iter()
            .map(|v| v / SCALING_FACTOR + SHIFT_FACTOR)
            .collect();
        let ((decoded, tiles), mut report) = stage(rt, Stage::Decode, vae, |model| {
            let mut vae = FluxVae::new(rt, &self.vae, req.dtype)?;
            let out = vae.decode(rt, model, &z, b, latent.height, latent.width)?;
            ModelError::check_finite("the VAE decoder's image", || "decoding".into(), &out.image)?;
            Ok(((out.image, out.tiles), vec![out.stats]))
        })?;
        report.tiles = Some(tiles);
        stages.push(report);

        let pixels = to_rgb8(&decoded, b, req.height, req.width);
        Ok(Images {
            batch: b,
            width: req.width,
            height: req.height,
            pixels,
            decoded,
            latents: inputs.img,
            sigmas,
            truncated,
            stages,
        })
    }
}

impl Pipeline {
    /// The VAE's spec for decoding `latent` within `room` bytes: the whole
    /// latent where its activations and two arenas fit, else the largest
    /// tile of [`crate::vae::AUTO_SIZES`] that does (the decoder's
    /// `Tiling::Auto` then tiles to what the plan reserved); the smallest
    /// when none fits, so opening it names what is short. With the tile's
    /// latent rows and columns.
    fn vae_spec(&self, room: u64, latent: LatentShape, dtype: ActDtype) -> (ModelSpec, [usize; 2]) {
        let (h, w) = (latent.height, latent.width);
        let side = h.max(w);
        let sides = std::iter::once(side)
            .chain(crate::vae::AUTO_SIZES.iter().copied().filter(|&s| s < side));
        let mut out = (self.vae.spec(latent.batch, h, w, dtype), [h, w]);
        for s in sides {
            let tile = [h.min(s), w.min(s)];
            out = (self.vae.spec(latent.batch, tile[0], tile[1], dtype), tile);
            if dynvram_runtime::plan_spec(&out.0, room).is_ok() {
                break;
            }
        }
        out
    }

    /// Each stage's spec for `req` (the VAE's planned within `room`), the
    /// FLOPs of each of its blocks in one pass, and its passes.
    fn specs(&self, req: &Request, latent: LatentShape, room: u64) -> [StageSpec; 4] {
        let b = latent.batch;
        let len = req.max_sequence_length;
        let shape = crate::flux::Shape {
            batch: b,
            img_len: latent.tokens(),
            txt_len: len,
        };
        let (vae, [th, tw]) = self.vae_spec(room, latent, req.dtype);
        let tiles = if [th, tw] == [latent.height, latent.width] {
            1
        } else {
            crate::vae::auto_tiles(latent.height, latent.width, th.max(tw))
        };
        [
            StageSpec {
                stage: Stage::Clip,
                spec: self.clip.spec(b, req.dtype),
                flops: crate::clip::flops::block_flops(&self.clip.config, b),
                passes: 1,
            },
            StageSpec {
                stage: Stage::T5,
                spec: self.t5.spec(b, len, req.dtype),
                flops: crate::t5::flops::block_flops(&self.t5.config, b, len),
                passes: 1,
            },
            StageSpec {
                stage: Stage::Sample,
                spec: self.flux.spec(shape, req.dtype),
                flops: crate::flux::flops::block_flops(&self.flux.config, shape),
                passes: req.steps,
            },
            StageSpec {
                stage: Stage::Decode,
                spec: vae,
                flops: crate::vae::flops::block_flops(&self.vae.config, b, th, tw),
                passes: tiles,
            },
        ]
    }

    /// What `req` would keep resident and stream in each stage with
    /// `usable` bytes of VRAM (no GPU needed: the plans `Model::open`
    /// makes, one model at a time as [`Self::run`] opens them), each
    /// stage's predicted time at `rates` (per block the longest of its
    /// FLOPs, its weight reads and its streamed bytes:
    /// [`dynvram_runtime::roofline`]), and the smallest `usable` every stage
    /// plans in.
    pub fn plan(
        &self,
        req: &Request,
        usable: u64,
        rates: &Rates,
    ) -> Result<PipelinePlan, ModelError> {
        let latent = self.check(req)?;
        let mut stages = Vec::new();
        for s in self.specs(req, latent, usable) {
            let (plan, weights) = dynvram_runtime::plan_spec(&s.spec, usable)?;
            let streamed = |i: usize| plan.plan.tensors[i].placement == Placement::Stream;
            let work =
                roofline::block_work(s.spec.blocks.len(), &weights, streamed, Some(&s.flops));
            let pass = roofline::predict(&work, rates);
            stages.push(StagePlan {
                stage: s.stage,
                passes: s.passes,
                resident_bytes: plan.plan.resident_bytes,
                streamed_bytes: plan.plan.streamed_bytes,
                vram_bytes: plan.plan.page_bytes + 2 * plan.arena_bytes + plan.scratch,
                flops: pass.flops,
                seconds: pass.seconds * s.passes as f64,
                bound: pass.bound,
            });
        }
        // The smallest room each stage plans in (the VAE at its smallest
        // tile): plans only shrink what stays resident as room shrinks.
        let mut least = 0;
        for StageSpec { spec, .. } in self.specs(req, latent, 0) {
            let (mut lo, mut hi) = (0u64, spec_bytes(&spec)?);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if dynvram_runtime::plan_spec(&spec, mid).is_ok() {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            least = least.max(lo);
        }
        Ok(PipelinePlan {
            usable,
            seconds: stages.iter().map(|s| s.seconds).sum(),
            rates: *rates,
            stages,
            least_usable: least,
        })
    }
}

/// One stage's model as a plan sees it.
struct StageSpec {
    stage: Stage,
    spec: ModelSpec,
    /// Per block, one pass.
    flops: Vec<u64>,
    passes: usize,
}

/// Room that holds `spec` whole: its weights twice over (resident pages
/// and arenas with padding) and its scratch; an upper bound for the search.
fn spec_bytes(spec: &ModelSpec) -> Result<u64, ModelError> {
    let (plan, _) = dynvram_runtime::plan_spec(spec, u64::MAX / 4)?;
    Ok(2 * (plan.plan.page_bytes + 2 * plan.arena_bytes) + plan.scratch + (64 << 20))
}

/// One stage of a [`PipelinePlan`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct StagePlan {
    /// Which.
    pub stage: Stage,
    /// Passes it runs.
    pub passes: usize,
    /// Weight bytes kept on the GPU.
    pub resident_bytes: u64,
    /// Weight bytes streamed every pass.
    pub streamed_bytes: u64,
    /// VRAM the plan takes: resident pages, two arenas, activations.
    pub vram_bytes: u64,
    /// Matrix and attention FLOPs of one pass.
    pub flops: u64,
    /// Predicted seconds of all its passes.
    pub seconds: f64,
    /// What limits most of a pass.
    pub bound: Bound,
}

/// [`Pipeline::plan`]'s answer.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PipelinePlan {
    /// The room planned in.
    pub usable: u64,
    /// Per stage, in order.
    pub stages: Vec<StagePlan>,
    /// The smallest room every stage plans in.
    pub least_usable: u64,
    /// The rates the times assume.
    pub rates: Rates,
    /// Predicted seconds of the whole run (the stages' sum; switching
    /// models and the fixed costs are not counted).
    pub seconds: f64,
}

/// A stage's model opened ahead of its turn ([`Model::open_unloaded`]):
/// no VRAM until the stage before prefetches its first weights or its own
/// stage loads it.
struct Opened {
    model: Model,
    /// Seconds opening it took (headers, checks, plan).
    open_seconds: f64,
    /// Bytes the stage before loaded for it.
    prefetched: std::cell::Cell<u64>,
}

impl Opened {
    fn new(rt: &Runtime, spec: ModelSpec) -> Result<Self, ModelError> {
        let t0 = Instant::now();
        let model = Model::open_unloaded(rt, &spec)?;
        Ok(Self {
            model,
            open_seconds: t0.elapsed().as_secs_f64(),
            prefetched: Default::default(),
        })
    }

    /// Loads its first weights into the room free now, at most the pages
    /// its own plan keeps resident (more would not stay once it runs).
    fn prefetch(&self, rt: &Runtime) -> Result<(), ModelError> {
        let bytes = self.model.prefetch(rt, self.model.plan().plan.page_bytes)?;
        self.prefetched.set(self.prefetched.get() + bytes);
        Ok(())
    }
}

/// Loads a stage's model on `rt` (on top of the priority list: others
/// yield to it, the running model last), runs `body` on it and drops it,
/// timing it all and taking the ledger's peak.
fn stage<T>(
    rt: &Runtime,
    which: Stage,
    opened: Opened,
    body: impl FnOnce(&Model) -> Result<(T, Vec<PassStats>), ModelError>,
) -> Result<(T, StageReport), ModelError> {
    let _span = tracing::info_span!("txt2img_stage", stage = ?which).entered();
    rt.reset_peak();
    let t0 = Instant::now();
    let pipelines0 = rt.gpu().pipeline_time();
    let Opened {
        model,
        open_seconds: opening,
        prefetched,
    } = opened;
    let loaded = model.load(rt)?;
    let open_seconds = opening + t0.elapsed().as_secs_f64();
    let (out, stats) = body(&model)?;
    let total = stats.iter().fold(PassStats::default(), |mut total, s| {
        total.add(s);
        total
    });
    let report = StageReport {
        stage: which,
        seconds: opening + t0.elapsed().as_secs_f64(),
        open_seconds,
        passes: stats.len(),
        streamed_bytes: total.streamed_bytes,
        streamed_from: total.sources,
        ring_stalls: total.ring_stalls,
        pass_seconds: stats.iter().map(|s| s.seconds).collect(),
        record_seconds: total.record_seconds,
        submit_seconds: total.submit_seconds,
        wait_seconds: total.wait_seconds,
        pipelines: rt.gpu().pipeline_time().since(pipelines0),
        loaded_bytes: loaded + total.loaded_bytes,
        prefetched_bytes: prefetched.get(),
        peak_vram: rt.budget_report().peak,
        model: model.report(),
        pins: rt.pin_report(),
        tiles: None,
    };
    drop(model);
    Ok((out, report))
}

/// `[B, 3, H, W]` decoder output → `[B, H, W, 3]` bytes:
/// `round_half_even(clamp(x / 2 + 0.5, 0, 1) · 255)` in f32, as diffusers'
/// image processor and `numpy_to_pil` compute it.
pub fn to_rgb8(decoded: &[f32], batch: usize, height: usize, width: usize) -> Vec<u8> {
    let plane = height * width;
    let mut out = vec![0u8; batch * plane * 3];
    for b in 0..batch {
        for c in 0..3 {
            let src = &decoded[(b * 3 + c) * plane..][..plane];
            for (p, &x) in src.iter().enumerate() {
                let v = (x / 2.0 + 0.5).clamp(0.0, 1.0);
                out[(b * plane + p) * 3 + c] = (v * 255.0).round_ties_even() as u8;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::to_rgb8;

    #[test]
    fn rgb8_is_clamped_rounded_half_even_and_interleaved() {
        // One 1×2 image as channel planes R, G, B; x/2 + 0.5 is exact here.
        let decoded = [-3.0, 1.0, 0.0, 3.0, -0.5, 0.5];
        // G's 0.5 · 255 = 127.5 rounds to even; B's 63.75 and 191.25 to nearest.
        assert_eq!(to_rgb8(&decoded, 1, 1, 2), vec![0, 128, 64, 255, 255, 191]);
    }
}
