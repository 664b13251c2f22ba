//! Sampling a Flux transformer from an application, without the CLI: open
//! a GPU under a VRAM budget, open the checkpoint as a runtime model, take
//! text conditioning, and run FLUX.1-dev's Euler loop from seeded noise.
//!
//! `cargo run -p dynvram-models --example flux_sample -- [FLUX_DIR] [STEPS]`
//! (default: the repository's `fixtures/tiny-flux`, a folder with
//! `model.safetensors`, `config.json` and `inputs.safetensors`, whose `txt`
//! and `y` stand in for the text encoders' outputs; 4 steps).

use std::path::PathBuf;

use dynvram_models::flux::sample::{self, LatentShape, SampleOptions, Schedule, StepDone};
use dynvram_models::flux::{Flux, FluxCheckpoint, FluxInputs};
use dynvram_runtime::{ActDtype, Model, Runtime, RuntimeConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir: PathBuf = args.next().map_or_else(
        || {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../fixtures/tiny-flux"
            ))
        },
        PathBuf::from,
    );
    let steps: usize = args.next().map_or(Ok(4), |s| s.parse())?;

    let ckpt = FluxCheckpoint::open(&dir)?;
    // The text conditioning of one prompt: T5's states and CLIP's pooled
    // vector (here the fixture's recorded inputs).
    let given = FluxInputs::from_file(&dir.join("inputs.safetensors"), &ckpt.config)?;
    let b = given.shape.batch;
    // A 64×64 image: 8×8 latents, 16 packed tokens.
    let latent = LatentShape::for_image(b, 64, 64)?;
    let noise = sample::seeded_noise(42, latent);
    let mut inputs = sample::sampling_inputs(
        &ckpt.config,
        &noise,
        latent,
        given.txt.clone(),
        given.y.clone(),
        3.5,
    )?;

    let mut config = RuntimeConfig::default();
    // As `--vram-budget 0.0625`: an explicit budget keeps no reserve.
    config.budget.vram_budget = Some(64 << 20);
    config.budget.reserve = 0;
    let rt = Runtime::new(config)?;
    let model = Model::open(&rt, &ckpt.spec(inputs.shape, ActDtype::F32))?;
    let mut flux = Flux::new(&rt, &ckpt, inputs.shape, ActDtype::F32)?;

    let schedule = Schedule::for_config(&ckpt.config);
    let sigmas: Vec<f64> = sample::sigmas(schedule, steps, latent.tokens())
        .into_iter()
        .map(f64::from)
        .collect();
    let mut on_step = |d: StepDone<'_>| {
        println!(
            "step {}/{} at sigma {:.4}: {:.1} ms, {} bytes streamed",
            d.index + 1,
            d.steps,
            d.sigma,
            d.stats.seconds * 1e3,
            d.stats.streamed_bytes
        );
    };
    let opts = SampleOptions {
        on_step: Some(&mut on_step),
        ..SampleOptions::default()
    };
    sample::sample(&mut flux, &rt, &model, &mut inputs, &sigmas, opts)?;
    // [B, 16, 8, 8]: what the VAE decodes after `/ 0.3611 + 0.1159`.
    let latents = sample::unpack(&inputs.img, latent);
    println!("latents[..4] = {:?}", &latents[..4]);
    println!("{:?}", model.report());
    Ok(())
}
