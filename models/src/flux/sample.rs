//! Sampling a Flux transformer: flow-matching Euler as diffusers'
//! `FluxPipeline` and `FlowMatchEulerDiscreteScheduler` run it.
//!
//! - **Schedules.** FLUX.1-dev's ([`Schedule::Shifted`]): `steps` sigmas
//!   `s = linspace(1, 1/steps, steps)`, shifted by `mu` from the image-token
//!   count ([`mu`]: 0.5 at 256 tokens, 1.15 at 4096, linear between and
//!   beyond) as `e^mu / (e^mu + (1/s − 1))`, in f32 as numpy computes it,
//!   then a final 0. FLUX.1-schnell's ([`Schedule::Linear`]): `s` itself,
//!   then 0. [`bfl_schedule`] is Black Forest Labs' `get_schedule` (f64,
//!   `linspace(1, 0, steps + 1)` shifted), which `dynvram dit --steps` runs.
//! - **Latents.** `[B, 16, h, w]` (h, w = image size / 8) packed 2×2 into
//!   `[B, (h/2)(w/2), 64]` tokens, row-major over the patch grid, feature
//!   `c·4 + ph·2 + pw` ([`pack`], [`unpack`]); image ids `(0, row, col)` per
//!   token ([`img_ids`]), text ids zeros.
//! - **Noise.** [`seeded_noise`]: `ChaCha8Rng::seed_from_u64(seed)` (crate
//!   `rand_chacha`) drawing `rand_distr::StandardNormal` f32 values, one
//!   stream for the whole batch in NCHW order (batch element 0's channel 0
//!   row by row first). It is not torch's generator: to reproduce another
//!   program's noise, pass it in ([`read_noise`], a safetensors file with
//!   `noise_latents` f32 `[B, 16, h, w]`).
//! - **Steps.** [`sample`]: per step `v = flux(x, sigma_i)` (the timestep
//!   the transformer gets is sigma, which it scales by 1000 inside; dev's
//!   guidance is given raw, likewise scaled inside) and
//!   `x += (sigma_{i+1} − sigma_i)·v` in f32. One prediction a step: dev's
//!   guidance is the distilled embedding, not classifier-free guidance.

use std::path::Path;

use dynvram_runtime::trace::Trace;
use dynvram_runtime::{Model, PassStats, Runtime};
use rand::SeedableRng;
use rand_distr::Distribution;

use super::config::FluxConfig;
use super::inputs::{input_error, read_tensors};
use super::{Flux, FluxError, FluxInputs, ForwardOptions, Shape};

/// Image tokens at which `mu` is [`BASE_SHIFT`] (diffusers' `base_image_seq_len`).
pub const BASE_SEQ_LEN: usize = 256;
/// Image tokens at which `mu` is [`MAX_SHIFT`] (`max_image_seq_len`).
pub const MAX_SEQ_LEN: usize = 4096;
/// `mu` at [`BASE_SEQ_LEN`] tokens.
pub const BASE_SHIFT: f64 = 0.5;
/// `mu` at [`MAX_SEQ_LEN`] tokens.
pub const MAX_SHIFT: f64 = 1.15;
/// Channels of the Flux VAE's latent.
pub const LATENT_CHANNELS: usize = 16;
/// Latent pixels per side of one packed token.
pub const PATCH: usize = 2;
/// The tensor [`read_noise`] takes.
pub const NOISE_NAME: &str = "noise_latents";
/// Position-id axes of a token (`(0, row, col)`).
pub const ID_AXES: usize = 3;

/// Which sigmas a run steps through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    /// FLUX.1-dev's: shifted by `mu` from the image-token count.
    Shifted,
    /// FLUX.1-schnell's: `linspace(1, 1/steps, steps)`, then 0.
    Linear,
}

impl Schedule {
    /// The schedule diffusers ships with the model: shifted for models with
    /// a guidance embedder (dev), linear for those without (schnell).
    pub fn for_config(c: &FluxConfig) -> Self {
        if c.guidance_embed {
            Self::Shifted
        } else {
            Self::Linear
        }
    }
}

impl Schedule {
    /// The schedule a diffusers `FlowMatchEulerDiscreteScheduler` config
    /// (`scheduler/scheduler_config.json`) sets: dynamic shifting on
    /// FLUX.1's line ([`BASE_SEQ_LEN`], [`BASE_SHIFT`]) – ([`MAX_SEQ_LEN`],
    /// [`MAX_SHIFT`]) is [`Self::Shifted`] (dev), no dynamic shifting at
    /// `shift` 1 is [`Self::Linear`] (schnell); any other is refused,
    /// naming the values, rather than run on the wrong sigmas.
    pub fn from_scheduler_config(path: &Path) -> Result<Self, FluxError> {
        let j = crate::hf_config::HfConfig::read(path)?;
        if j.flag_or("use_dynamic_shifting", false)? {
            let line = [
                ("base_image_seq_len", BASE_SEQ_LEN as f64),
                ("max_image_seq_len", MAX_SEQ_LEN as f64),
                ("base_shift", BASE_SHIFT),
                ("max_shift", MAX_SHIFT),
            ];
            for (key, flux) in line {
                let v = j.number_or(key, flux)?;
                if (v - flux).abs() > 1e-9 {
                    return Err(j.err(format!(
                        "dynamic shifting with `{key}` = {v}: dynvram runs FLUX.1's schedule \
                         ({key} = {flux})"
                    )));
                }
            }
            return Ok(Self::Shifted);
        }
        let shift = j.number_or("shift", 1.0)?;
        if shift != 1.0 {
            return Err(j.err(format!(
                "a static `shift` of {shift}: dynvram runs FLUX.1-schnell's unshifted schedule \
                 (shift 1) or dev's dynamic one"
            )));
        }
        Ok(Self::Linear)
    }
}

/// diffusers' `calculate_shift`: `mu` for `image_tokens` packed tokens, on
/// the line through ([`BASE_SEQ_LEN`], [`BASE_SHIFT`]) and ([`MAX_SEQ_LEN`],
/// [`MAX_SHIFT`]).
pub fn mu(image_tokens: usize) -> f64 {
    let m = (MAX_SHIFT - BASE_SHIFT) / (MAX_SEQ_LEN - BASE_SEQ_LEN) as f64;
    let b = BASE_SHIFT - m * BASE_SEQ_LEN as f64;
    image_tokens as f64 * m + b
}

/// `steps + 1` sigmas as diffusers' `FluxPipeline` sets its scheduler's:
/// `numpy.linspace(1, 1/steps, steps)` cast to f32, shifted in f32 where
/// the schedule says so, and a final 0. `steps` must be at least 1.
pub fn sigmas(schedule: Schedule, steps: usize, image_tokens: usize) -> Vec<f32> {
    let e = mu(image_tokens).exp() as f32;
    linspace(1.0, 1.0 / steps as f64, steps)
        .map(|s| match schedule {
            Schedule::Linear => s as f32,
            Schedule::Shifted => e / (e + (1.0 / s as f32 - 1.0)),
        })
        .chain(std::iter::once(0.0))
        .collect()
}

/// `numpy.linspace(start, stop, n)` in f64: `start + i·step`, the last value
/// `stop` exactly.
fn linspace(start: f64, stop: f64, n: usize) -> impl Iterator<Item = f64> {
    let step = if n > 1 {
        (stop - start) / (n - 1) as f64
    } else {
        0.0
    };
    (0..n).map(move |i| {
        if n > 1 && i == n - 1 {
            stop
        } else {
            i as f64 * step + start
        }
    })
}

/// Black Forest Labs' `get_schedule`: `steps + 1` sigmas from 1 to 0 in
/// f64, shifted by [`mu`] of `image_tokens` unless `shift` is off.
pub fn bfl_schedule(steps: usize, image_tokens: usize, shift: bool) -> Vec<f64> {
    let e = mu(image_tokens).exp();
    (0..=steps)
        .map(|i| {
            let t = 1.0 - i as f64 / steps as f64;
            if !shift || t <= 0.0 {
                t
            } else {
                e / (e + (1.0 / t - 1.0))
            }
        })
        .collect()
}

/// The size of a batch of latents `[batch, channels, height, width]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LatentShape {
    /// Batch elements.
    pub batch: usize,
    /// Channels ([`LATENT_CHANNELS`] for Flux).
    pub channels: usize,
    /// Latent rows (image height / 8); even.
    pub height: usize,
    /// Latent columns (image width / 8); even.
    pub width: usize,
}

impl LatentShape {
    /// The latents of `batch` images of `width × height` pixels (multiples
    /// of 16: 8 for the VAE, 2 for the packing).
    pub fn for_image(batch: usize, width: usize, height: usize) -> Result<Self, FluxError> {
        let unit = 8 * PATCH;
        if width == 0 || height == 0 || !width.is_multiple_of(unit) || !height.is_multiple_of(unit)
        {
            return Err(FluxError::Input(format!(
                "an image of {width}×{height}: width and height must be positive multiples of {unit} \
                 (the VAE's 8× and the transformer's 2×2 patches)"
            )));
        }
        if batch == 0 {
            return Err(FluxError::Input("a batch of 0 images".into()));
        }
        Ok(Self {
            batch,
            channels: LATENT_CHANNELS,
            height: height / 8,
            width: width / 8,
        })
    }

    /// Values of the whole batch.
    pub fn numel(&self) -> usize {
        self.batch * self.channels * self.height * self.width
    }

    /// Packed tokens per batch element (`(h/2)·(w/2)`).
    pub fn tokens(&self) -> usize {
        (self.height / PATCH) * (self.width / PATCH)
    }

    /// Features of a packed token (`channels · 4`).
    pub fn features(&self) -> usize {
        self.channels * PATCH * PATCH
    }

    fn check(&self, what: &str, len: usize) {
        assert!(
            self.height.is_multiple_of(PATCH) && self.width.is_multiple_of(PATCH),
            "{self:?}: latent sides must be even"
        );
        assert_eq!(len, self.numel(), "{what} of {self:?}");
    }
}

/// Where packed element `(b, token, feature)` sits in the unpacked
/// `[B, C, h, w]` latents, for every packed position in order.
fn packed_order(s: LatentShape) -> impl Iterator<Item = usize> {
    let (gh, gw) = (s.height / PATCH, s.width / PATCH);
    (0..s.batch).flat_map(move |b| {
        (0..gh * gw).flat_map(move |t| {
            let (r, col) = (t / gw, t % gw);
            (0..s.channels).flat_map(move |c| {
                (0..PATCH).flat_map(move |ph| {
                    (0..PATCH).map(move |pw| {
                        ((b * s.channels + c) * s.height + r * PATCH + ph) * s.width
                            + col * PATCH
                            + pw
                    })
                })
            })
        })
    })
}

/// `[B, C, h, w]` → `[B, (h/2)(w/2), 4C]` (FluxPipeline's `_pack_latents`).
/// Panics if `latents` is not `shape`'s size or a side is odd.
pub fn pack(latents: &[f32], shape: LatentShape) -> Vec<f32> {
    shape.check("latents", latents.len());
    packed_order(shape).map(|i| latents[i]).collect()
}

/// The inverse of [`pack`]: `[B, (h/2)(w/2), 4C]` → `[B, C, h, w]`.
pub fn unpack(packed: &[f32], shape: LatentShape) -> Vec<f32> {
    shape.check("packed latents", packed.len());
    let mut out = vec![0.0; packed.len()];
    for (v, i) in packed.iter().zip(packed_order(shape)) {
        out[i] = *v;
    }
    out
}

/// Image ids of one batch element: `(0, row, col)` per packed token,
/// row-major, `[(h/2)(w/2), 3]`.
pub fn img_ids(shape: LatentShape) -> Vec<f32> {
    let gw = shape.width / PATCH;
    (0..shape.tokens())
        .flat_map(|t| [0.0, (t / gw) as f32, (t % gw) as f32])
        .collect()
}

/// Gaussian noise of `shape` from `seed`: see the module's documentation
/// for the generator and the order.
pub fn seeded_noise(seed: u64, shape: LatentShape) -> Vec<f32> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..shape.numel())
        .map(|_| {
            let v: f32 = rand_distr::StandardNormal.sample(&mut rng);
            v
        })
        .collect()
}

/// Reads [`NOISE_NAME`] (F32, exactly `[B, C, h, w]` of `shape`, finite)
/// from the safetensors file `path`.
pub fn read_noise(path: &Path, shape: LatentShape) -> Result<Vec<f32>, FluxError> {
    let err = |why: String| input_error(path, why);
    let t = read_tensors(path)?
        .into_iter()
        .find(|t| t.name == NOISE_NAME)
        .ok_or_else(|| {
            err(format!(
                "no tensor `{NOISE_NAME}` (the initial noise, F32 [batch, {}, height/8, width/8])",
                shape.channels
            ))
        })?;
    let want = [shape.batch, shape.channels, shape.height, shape.width];
    if t.dtype != safetensors::Dtype::F32 || t.shape != want {
        return Err(err(format!(
            "`{NOISE_NAME}` is {:?} {:?}; this run needs F32 {want:?} (batch, channels, height/8, width/8)",
            t.dtype, t.shape
        )));
    }
    if let Some(i) = t.values.iter().position(|v| !v.is_finite()) {
        return Err(err(format!(
            "`{NOISE_NAME}` element {i} is {}",
            t.values[i]
        )));
    }
    Ok(t.values)
}

/// The inputs of a sampling run: packed noise, ids, the text conditioning
/// and dev's guidance (one scale for the batch; ignored by models without
/// a guidance embedder). `txt` is `[B, L_txt, context_in_dim]`, `y`
/// `[B, vec_in_dim]`; the timesteps are set by [`sample`].
pub fn sampling_inputs(
    config: &FluxConfig,
    noise: &[f32],
    latent: LatentShape,
    txt: Vec<f32>,
    y: Vec<f32>,
    guidance: f32,
) -> Result<FluxInputs, FluxError> {
    let b = latent.batch;
    let bad = |why: String| Err(FluxError::Input(why));
    if config.in_channels != latent.features() || config.out_channels != config.in_channels {
        return bad(format!(
            "the transformer takes {} and predicts {} features a token; sampling {}-channel latents \
             needs {} for both",
            config.in_channels,
            config.out_channels,
            latent.channels,
            latent.features()
        ));
    }
    if config.axes_dim.len() != ID_AXES {
        return bad(format!(
            "the transformer's RoPE has {} axes; Flux image ids have {ID_AXES}",
            config.axes_dim.len()
        ));
    }
    if y.len() != b * config.vec_in_dim {
        return bad(format!(
            "the pooled text vector has {} values; the transformer takes {b} × vec_in_dim {}",
            y.len(),
            config.vec_in_dim
        ));
    }
    let txt_len = txt.len() / (b * config.context_in_dim).max(1);
    if txt_len == 0 || txt.len() != b * txt_len * config.context_in_dim {
        return bad(format!(
            "the text states have {} values, not {b} × tokens × context_in_dim {}",
            txt.len(),
            config.context_in_dim
        ));
    }
    if !guidance.is_finite() {
        return bad(format!("guidance {guidance} is not a finite number"));
    }
    let ids = img_ids(latent);
    Ok(FluxInputs {
        shape: Shape {
            batch: b,
            img_len: latent.tokens(),
            txt_len,
        },
        img: pack(noise, latent),
        img_ids: ids.repeat(b),
        txt,
        txt_ids: vec![0.0; b * txt_len * ID_AXES],
        timesteps: vec![1.0; b],
        y,
        guidance: config.guidance_embed.then(|| vec![guidance; b]),
    })
}

/// One finished step, as [`SampleOptions::on_step`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct StepDone<'a> {
    /// 0-based index of the step.
    pub index: usize,
    /// Steps of the run.
    pub steps: usize,
    /// The sigma the transformer ran at.
    pub sigma: f64,
    /// The pass's figures.
    pub stats: &'a PassStats,
    /// The packed latents after the step, `[B, L_img, in_channels]`.
    pub latents: &'a [f32],
}

/// Options of [`sample`].
#[derive(Default)]
pub struct SampleOptions<'a> {
    /// A timeline of the last step's pass (cleared before each step).
    pub trace: Option<&'a mut Trace>,
    /// Called after every step (progress, captures).
    pub on_step: Option<&'a mut dyn FnMut(StepDone<'_>)>,
}

impl std::fmt::Debug for SampleOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SampleOptions")
            .field("trace", &self.trace.is_some())
            .field("on_step", &self.on_step.is_some())
            .finish()
    }
}

/// Runs the Euler loop over `sigmas` (descending, at least two; f32
/// sigmas widen exactly, and each step's `sigma_{i+1} − sigma_i` is then
/// rounded once to f32) from `inputs.img`, leaving the final packed
/// latents there. Returns each step's pass figures.
pub fn sample(
    flux: &mut Flux,
    rt: &Runtime,
    model: &Model,
    inputs: &mut FluxInputs,
    sigmas: &[f64],
    mut opts: SampleOptions<'_>,
) -> Result<Vec<PassStats>, FluxError> {
    let c = flux.config();
    if c.in_channels != c.out_channels {
        return Err(FluxError::Input(format!(
            "sampling needs out_channels = in_channels (the model predicts a velocity of the latent), \
             this model has {} and {}",
            c.out_channels, c.in_channels
        )));
    }
    if sigmas.len() < 2 || sigmas.iter().any(|s| !s.is_finite()) {
        return Err(FluxError::Input(format!(
            "a schedule of {} sigmas: sampling needs at least 2 finite ones",
            sigmas.len()
        )));
    }
    let steps = sigmas.len() - 1;
    let _span = tracing::info_span!("flux_sample", steps).entered();
    let mut stats = Vec::with_capacity(steps);
    for (index, w) in sigmas.windows(2).enumerate() {
        let (sigma, next) = (w[0], w[1]);
        inputs.timesteps.iter_mut().for_each(|t| *t = sigma as f32);
        let trace = opts.trace.as_deref_mut().map(|t| {
            *t = Trace::new();
            t
        });
        let f = flux.forward_with(
            rt,
            model,
            inputs,
            ForwardOptions {
                trace,
                ..ForwardOptions::default()
            },
        )?;
        FluxError::check_finite(
            "the transformer's velocity",
            || format!("sampling step {index}"),
            &f.out,
        )?;
        euler_step(&mut inputs.img, &f.out, sigma, next);
        stats.push(f.stats);
        if let Some(on_step) = opts.on_step.as_deref_mut() {
            on_step(StepDone {
                index,
                steps,
                sigma,
                stats: &stats[index],
                latents: &inputs.img,
            });
        }
    }
    Ok(stats)
}

/// `x += (next − sigma)·v`, the difference rounded to f32 once.
pub fn euler_step(x: &mut [f32], v: &[f32], sigma: f64, next: f64) {
    let dt = (next - sigma) as f32;
    x.iter_mut().zip(v).for_each(|(x, v)| *x += dt * v);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bfl_schedule_is_get_schedule() {
        assert_eq!(bfl_schedule(2, 4096, false), vec![1.0, 0.5, 0.0]);
        // mu = 1.15 at 4096 tokens: t = 0.5 maps to e^mu / (e^mu + 1).
        let s = bfl_schedule(2, 4096, true);
        let e = 1.15f64.exp();
        assert_eq!(s[0], 1.0);
        assert!((s[1] - e / (e + 1.0)).abs() < 1e-12, "{s:?}");
        assert_eq!(s[2], 0.0);
        // mu = 0.5 at 256 tokens.
        let s = bfl_schedule(4, 256, true);
        let e = 0.5f64.exp();
        assert!((s[3] - e / (e + 3.0)).abs() < 1e-12, "{s:?}");
        assert!(s.windows(2).all(|w| w[0] > w[1]), "{s:?}");
    }

    #[test]
    fn mu_is_diffusers_calculate_shift() {
        assert!((mu(256) - 0.5).abs() < 1e-12);
        assert!((mu(4096) - 1.15).abs() < 1e-12);
        // The tiny fixture's 36 tokens (its README: 0.4627604167).
        assert!(
            (mu(36) - 0.462_760_416_666_666_7).abs() < 1e-12,
            "{}",
            mu(36)
        );
    }

    #[test]
    fn linear_schedule_and_one_step() {
        assert_eq!(
            sigmas(Schedule::Linear, 4, 36),
            vec![1.0, 0.75, 0.5, 0.25, 0.0]
        );
        assert_eq!(sigmas(Schedule::Linear, 1, 36), vec![1.0, 0.0]);
        assert_eq!(sigmas(Schedule::Shifted, 1, 4096), vec![1.0, 0.0]);
    }

    #[test]
    fn pack_is_the_rearrange() {
        // b c (h ph) (w pw) -> b (h w) (c ph pw), checked on element values
        // that encode their own coordinates.
        let s = LatentShape {
            batch: 2,
            channels: 3,
            height: 4,
            width: 6,
        };
        let coord =
            |b: usize, c: usize, y: usize, x: usize| (b * 1000 + c * 100 + y * 10 + x) as f32;
        let mut lat = Vec::new();
        for b in 0..2 {
            for c in 0..3 {
                for y in 0..4 {
                    for x in 0..6 {
                        lat.push(coord(b, c, y, x));
                    }
                }
            }
        }
        let p = pack(&lat, s);
        let (gw, f) = (3, 12);
        for b in 0..2 {
            for t in 0..6 {
                for c in 0..3 {
                    for ph in 0..2 {
                        for pw in 0..2 {
                            let want = coord(b, c, (t / gw) * 2 + ph, (t % gw) * 2 + pw);
                            assert_eq!(p[(b * 6 + t) * f + c * 4 + ph * 2 + pw], want);
                        }
                    }
                }
            }
        }
        assert_eq!(unpack(&p, s), lat);
        assert_eq!(
            img_ids(s),
            vec![
                0., 0., 0., 0., 0., 1., 0., 0., 2., 0., 1., 0., 0., 1., 1., 0., 1., 2.
            ]
        );
    }

    #[test]
    fn image_sizes_are_checked() {
        let s = LatentShape::for_image(2, 96, 48).expect("96×48");
        assert_eq!(
            (s.height, s.width, s.tokens(), s.features()),
            (6, 12, 18, 64)
        );
        for (w, h) in [(100, 96), (96, 8), (0, 16)] {
            let e = LatentShape::for_image(1, w, h).expect_err("not a multiple of 16");
            assert!(e.to_string().contains("multiples of 16"), "{e}");
        }
    }

    #[test]
    fn seeded_noise_is_standard_normal_and_reproducible() {
        let s = LatentShape::for_image(1, 64, 64).expect("64²");
        let a = seeded_noise(7, s);
        assert_eq!(a, seeded_noise(7, s));
        assert_ne!(a, seeded_noise(8, s));
        let n = a.len() as f64;
        let mean = a.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let var = a
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / n;
        assert!(mean.abs() < 0.1 && (var - 1.0).abs() < 0.1, "{mean} {var}");
    }

    #[test]
    fn euler_rounds_the_difference_once() {
        let mut x = vec![1.0f32, -2.0];
        euler_step(&mut x, &[0.5, 4.0], 1.0, 0.75);
        assert_eq!(x, vec![0.875, -3.0]);
    }
}
