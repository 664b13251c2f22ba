//! The text-to-image pipeline (`txt2img`) against diffusers' `FluxPipeline`
//! on the tiny-flux-pipeline fixture, both prompts as one batch: every
//! step's latents and the decoded image within 1e-3 of their max, the
//! bytes within one level of diffusers' `image_float · 255`, resident and
//! at a budget where weights stream; the stages' reports; and the checks
//! that refuse mismatched files and requests.

use std::collections::HashMap;

use dynvram_models::clip::ClipConfig;
use dynvram_models::flux::FluxConfig;
use dynvram_models::synth::SynthDtype;
use dynvram_models::t5::T5Config;
use dynvram_models::txt2img::synth::{self, Shapes};
use dynvram_models::txt2img::{
    Configs, Files, Noise, Pipeline, Progress, Request, Stage, TextEncoderKind,
};
use dynvram_models::vae::VaeConfig;
use dynvram_runtime::ActDtype;
use dynvram_runtime::roofline::Rates;
use dynvram_test_support::fixtures;
use dynvram_test_support::gpu::{have_gpu, quarter_budget, runtime};
use dynvram_test_support::safetensors::{self, Tensor, get};
use dynvram_test_support::tolerance::assert_close_rel;

/// ≤ 1e-3 × max|reference| in f32 (issue 33).
const REL: f32 = 1e-3;

/// The fixture's prompts (`spec.json`).
const PROMPTS: [&str; 2] = [
    "a photo of a cat wearing a tiny red hat",
    "A watercolor painting of the Eiffel Tower at sunset, highly detailed",
];

fn reference() -> HashMap<String, Tensor> {
    safetensors::read(&fixtures::tiny_flux_pipeline().join("reference.safetensors"))
}

fn files() -> Files {
    let d = fixtures::tiny_flux_pipeline();
    Files {
        transformer: d.join("flux1-dev.safetensors"),
        clip: d.join("clip_l.safetensors"),
        t5: d.join("t5xxl_fp16.safetensors"),
        vae: d.join("ae.safetensors"),
    }
}

/// The fixture's configs (the tiny models' heads cannot be inferred).
fn configs() -> Configs {
    let c = fixtures::tiny_flux_pipeline().join("configs");
    Configs {
        transformer: Some(
            FluxConfig::from_file(&c.join("dev/transformer/config.json")).expect("flux config"),
        ),
        clip: Some(ClipConfig::from_hf_json(&c.join("text_encoder/config.json")).expect("clip")),
        t5: Some(T5Config::from_hf_json(&c.join("text_encoder_2/config.json")).expect("t5")),
        vae: Some(VaeConfig::from_diffusers_json(&c.join("vae/config.json")).expect("vae")),
    }
}

/// The fixture's call.
fn request(r: &HashMap<String, Tensor>) -> Request {
    Request {
        prompts: PROMPTS.iter().map(|p| p.to_string()).collect(),
        width: 96,
        height: 96,
        steps: 4,
        guidance: 3.5,
        max_sequence_length: 32,
        noise: Noise::Latents(get(r, "noise_latents").values.clone()),
        schedule: None,
        dtype: ActDtype::F32,
    }
}

fn check_pipeline(test: &str, streamed: bool) {
    if !have_gpu(test) {
        return;
    }
    let r = reference();
    let p = Pipeline::open(&files(), configs()).expect("pipeline");
    let req = request(&r);
    // A budget where the largest stage keeps about a quarter of its
    // weights: the one alone is too small for some of them.
    let budget = streamed.then(|| {
        [
            p.flux.spec(
                dynvram_models::flux::Shape {
                    batch: 2,
                    img_len: 36,
                    txt_len: 32,
                },
                ActDtype::F32,
            ),
            p.vae.spec(2, 12, 12, ActDtype::F32),
        ]
        .iter()
        .map(quarter_budget)
        .max()
        .expect("specs")
    });
    let rt = runtime(budget);
    let mut steps = 0;
    let mut stages = Vec::new();
    let images = p
        .run(&rt, &req, &mut |pr| match pr {
            Progress::Stage(s) => stages.push(s),
            Progress::Step(d) => {
                let want = &get(&r, &format!("latents_after_step{}", d.index)).values;
                assert_close_rel(&format!("step {}", d.index), d.latents, want, REL);
                steps += 1;
            }
        })
        .expect("run");
    assert_eq!(steps, 4);
    assert_eq!(
        stages,
        [Stage::Clip, Stage::T5, Stage::Sample, Stage::Decode]
    );
    assert_eq!(images.sigmas, get(&r, "sigmas").values);
    assert!(images.truncated.is_empty());
    assert_close_rel(
        "vae_decoded",
        &images.decoded,
        &get(&r, "vae_decoded").values,
        REL,
    );
    // Bytes within one level of round(image_float · 255) (NHWC).
    let want = &get(&r, "image_float").values;
    assert_eq!(images.pixels.len(), want.len());
    let worst = images
        .pixels
        .iter()
        .zip(want)
        .map(|(&g, &w)| (f32::from(g) - (w * 255.0).round_ties_even()).abs())
        .fold(0f32, f32::max);
    assert!(worst <= 1.0, "a pixel is {worst} levels off");
    let streamed_bytes: u64 = images.stages.iter().map(|s| s.streamed_bytes).sum();
    assert_eq!(streamed_bytes > 0, streamed, "{:?}", images.stages);
    // Each stage after the first found its model's first weights
    // prefetched by the stage before; resident, all of them were, so the
    // stage itself loaded none. Under the budget, whatever room was free.
    assert_eq!(images.stages[0].prefetched_bytes, 0);
    for s in &images.stages[1..] {
        assert!(s.prefetched_bytes <= s.model.model_bytes, "{s:?}");
        if !streamed {
            assert!(s.prefetched_bytes > 0, "{s:?}");
            assert_eq!(s.loaded_bytes, 0, "{s:?}");
        }
    }
    // At a quarter of the largest stage, the text encoders leave room
    // for some of the transformer.
    if streamed {
        assert!(images.stages[2].prefetched_bytes > 0, "{:?}", images.stages);
    }
    for s in &images.stages {
        assert!(s.peak_vram > 0 && s.seconds > 0.0, "{s:?}");
        if let Some(b) = budget {
            assert!(s.peak_vram <= b, "{s:?} over the budget {b}");
        }
    }
}

#[test]
fn txt2img_matches_diffusers_resident() {
    check_pipeline("txt2img_matches_diffusers_resident", false);
}

#[test]
fn txt2img_matches_diffusers_streamed() {
    check_pipeline("txt2img_matches_diffusers_streamed", true);
}

#[test]
fn txt2img_refuses_mismatched_files_and_requests() {
    let f = files();
    // A T5 given as CLIP.
    let swapped = Files {
        clip: f.t5.clone(),
        ..f.clone()
    };
    let e = Pipeline::open(&swapped, configs())
        .expect_err("T5 as CLIP")
        .to_string();
    assert!(
        e.contains("t5xxl_fp16.safetensors")
            && e.contains("given as the CLIP-L text encoder")
            && e.contains("a T5 encoder"),
        "{e}"
    );
    // A transformer of another family.
    let not_flux = Files {
        transformer: f.vae.clone(),
        ..f.clone()
    };
    let e = Pipeline::open(&not_flux, configs())
        .expect_err("VAE as Flux")
        .to_string();
    assert!(
        e.contains("ae.safetensors") && e.contains("no Flux tensors"),
        "{e}"
    );
    // A VAE of 4 latent channels (Stable Diffusion's): its decoder's
    // first convolution is all the file needs to be told apart.
    let dir = tempfile::tempdir().expect("tempdir");
    let sd_vae = dir.path().join("sd_vae.safetensors");
    safetensors::write_f32(
        &sd_vae,
        &[(
            "decoder.conv_in.weight",
            vec![32, 4, 3, 3],
            vec![0.01; 32 * 4 * 9],
        )],
    );
    let four = Files {
        vae: sd_vae,
        ..f.clone()
    };
    let e = Pipeline::open(
        &four,
        Configs {
            vae: None,
            ..configs()
        },
    )
    .expect_err("4-channel VAE")
    .to_string();
    assert!(
        e.contains("sd_vae.safetensors") && e.contains("4 latent channels"),
        "{e}"
    );
    // A CLIP wider than the transformer's vec_in_dim.
    let mut wide = configs().clip.expect("clip");
    wide.hidden_size = 32;
    let wide_clip = dir.path().join("wide_clip.safetensors");
    dynvram_models::clip::synth::write(&wide_clip, &wide, SynthDtype::F16, 1).expect("synth");
    let e = Pipeline::open(
        &Files {
            clip: wide_clip,
            ..f.clone()
        },
        Configs {
            clip: Some(wide),
            ..configs()
        },
    )
    .expect_err("CLIP of another width")
    .to_string();
    assert!(
        e.contains("wide_clip.safetensors")
            && e.contains("CLIP's width 32")
            && e.contains("vec_in_dim 16"),
        "{e}"
    );
    // Requests.
    let p = Pipeline::open(&f, configs()).expect("pipeline");
    let r = reference();
    let bad = |change: &dyn Fn(&mut Request)| {
        let mut req = request(&r);
        change(&mut req);
        p.check(&req).expect_err("refused").to_string()
    };
    let e = bad(&|q| q.steps = 0);
    assert!(e.contains("0 steps"), "{e}");
    let e = bad(&|q| q.width = 88);
    assert!(e.contains("88×96") && e.contains("multiples of 16"), "{e}");
    let e = bad(&|q| q.max_sequence_length = 513);
    assert!(e.contains("513") && e.contains("1..=512"), "{e}");
    let e = bad(&|q| {
        q.prompts.pop();
    });
    assert!(e.contains("[1, 16, 12, 12]"), "{e}");
}

/// A random ComfyUI folder of the fixture's shapes (`txt2img::synth`) is
/// told apart by its tensors, opens as a pipeline and makes an image.
#[test]
fn synth_folder_runs_through_the_pipeline() {
    const TEST: &str = "synth_folder_runs_through_the_pipeline";
    let c = configs();
    let shapes = Shapes {
        flux: c.transformer.clone().expect("flux"),
        clip: c.clip.clone().expect("clip"),
        t5: c.t5.clone().expect("t5"),
        vae: c.vae.clone().expect("vae"),
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (files, bytes) =
        synth::write_folder(dir.path(), &shapes, SynthDtype::F16, 3, &mut |_, _| {})
            .expect("synth");
    assert!(bytes > 0);
    assert!(
        files
            .transformer
            .ends_with("diffusion_models/flux1-dev.safetensors")
    );
    assert!(files.t5.ends_with("text_encoders/t5xxl_fp16.safetensors"));
    for (path, kind) in [
        (&files.clip, TextEncoderKind::Clip),
        (&files.t5, TextEncoderKind::T5),
    ] {
        assert_eq!(TextEncoderKind::of_file(path).expect("header"), Some(kind));
    }
    let p = Pipeline::open(&files, c).expect("the written folder opens");
    if !have_gpu(TEST) {
        return;
    }
    let rt = runtime(None);
    let req = Request {
        prompts: vec!["a cat".into()],
        width: 32,
        height: 32,
        steps: 1,
        guidance: 3.5,
        max_sequence_length: 8,
        noise: Noise::Seed(1),
        schedule: None,
        dtype: ActDtype::F32,
    };
    let images = p.run(&rt, &req, &mut |_| {}).expect("run");
    assert_eq!(images.pixels.len(), 32 * 32 * 3);
    assert!(images.decoded.iter().all(|v| v.is_finite()));
    let first = images.pixels[0];
    assert!(images.pixels.iter().any(|&v| v != first), "a flat image");
}

/// `Pipeline::plan` without a GPU: everything resident with room to
/// spare, weights streamed near the least room, nothing below it; and a
/// run at the least room it names completes inside it.
#[test]
fn plan_names_the_least_budget_that_runs() {
    let r = reference();
    let p = Pipeline::open(&files(), configs()).expect("pipeline");
    let req = request(&r);
    let rates = Rates {
        pcie_bytes_per_second: 25e9,
        memory_bytes_per_second: 400e9,
        matrix_flops_per_second: 10e12,
    };
    let roomy = p.plan(&req, 1 << 30, &rates).expect("plan");
    assert_eq!(roomy.stages.len(), 4);
    // Every model's FLOPs counted; nothing streams, so the time is the
    // larger of FLOPs and weight reads per block.
    for s in &roomy.stages {
        assert!(s.flops > 0 && s.seconds > 0.0, "{s:?}");
    }
    let sample = &roomy.stages[2];
    assert!(
        (sample.seconds - 4.0 * sample.flops as f64 / 10e12).abs() <= sample.seconds * 0.5,
        "{sample:?}"
    );
    let total: f64 = roomy.stages.iter().map(|s| s.seconds).sum();
    assert_eq!(roomy.seconds, total);
    assert!(
        roomy.stages.iter().all(|s| s.streamed_bytes == 0),
        "{roomy:?}"
    );
    assert_eq!(roomy.stages[2].passes, 4);
    let least = roomy.least_usable;
    let tight = p
        .plan(&req, least, &rates)
        .expect("plans at the least room");
    assert!(
        tight.stages.iter().any(|s| s.streamed_bytes > 0),
        "{tight:?}"
    );
    assert!(
        tight.stages.iter().all(|s| s.vram_bytes <= least),
        "{tight:?}"
    );
    p.plan(&req, least - 1, &rates)
        .expect_err("below the least room");
    // Streaming costs PCIe time the resident plan does not pay.
    assert!(tight.seconds > roomy.seconds, "{tight:?} vs {roomy:?}");
    const TEST: &str = "plan_names_the_least_budget_that_runs";
    if !have_gpu(TEST) {
        return;
    }
    let reserve = dynvram_runtime::memory::BudgetConfig::default().reserve;
    let rt = runtime(Some(least + reserve));
    let images = p
        .run(&rt, &req, &mut |_| {})
        .expect("runs at the least room");
    for s in &images.stages {
        assert!(s.peak_vram <= least, "{s:?} over {least}");
    }
}
