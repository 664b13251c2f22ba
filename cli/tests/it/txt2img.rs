//! `dynvram txt2img` on the tiny-flux-pipeline fixture laid out as a
//! ComfyUI `models/` folder: diffusers' PNGs within one level per pixel,
//! resident and at a budget that streams; a prompt cut to fit with a
//! warning; and clear errors for bad sizes, steps and files.

use std::path::{Path, PathBuf};

use dynvram_test_support::fixtures;
use dynvram_test_support::safetensors::{self, get};
use dynvram_test_support::skip::skip_without_adapter;

use crate::common::dynvram;

/// The fixture's prompts (`spec.json`).
const PROMPTS: [&str; 2] = [
    "a photo of a cat wearing a tiny red hat",
    "A watercolor painting of the Eiffel Tower at sunset, highly detailed",
];

/// The fixture's size, steps and T5 length (`spec.json`).
const FIXTURE_RUN: [&str; 8] = [
    "--width",
    "96",
    "--height",
    "96",
    "--steps",
    "4",
    "--max-sequence-length",
    "32",
];

/// A ComfyUI `models/` folder of links to the fixture's four files.
fn models_folder(root: &Path) -> PathBuf {
    let fx = fixtures::tiny_flux_pipeline();
    let m = root.join("models");
    for (dir, file) in [
        ("diffusion_models", "flux1-dev.safetensors"),
        ("text_encoders", "clip_l.safetensors"),
        ("text_encoders", "t5xxl_fp16.safetensors"),
        ("vae", "ae.safetensors"),
    ] {
        std::fs::create_dir_all(m.join(dir)).expect("mkdir");
        std::os::unix::fs::symlink(fx.join(file), m.join(dir).join(file)).expect("link");
    }
    m
}

/// The reference's noise as `--noise` takes it.
fn noise_file(root: &Path) -> PathBuf {
    let r = safetensors::read(&fixtures::tiny_flux_pipeline().join("reference.safetensors"));
    let path = root.join("noise.safetensors");
    safetensors::write(
        &path,
        [("noise_latents".to_string(), get(&r, "noise_latents"))],
    );
    path
}

/// `dynvram --json txt2img MODELS --configs … ARGS`: the JSON report, or
/// the stderr of a failure (None: no adapter and none required).
fn txt2img(models: &Path, args: &[&str]) -> Option<Result<serde_json::Value, String>> {
    let configs = fixtures::tiny_flux_pipeline().join("configs");
    let mut with = vec!["--configs", configs.to_str().expect("utf-8")];
    with.extend(args);
    txt2img_bare(models, &with)
}

/// `dynvram --json txt2img MODELS ARGS` (a diffusers folder's configs are
/// its own).
fn txt2img_bare(models: &Path, args: &[&str]) -> Option<Result<serde_json::Value, String>> {
    let o = dynvram()
        .arg("--json")
        .arg("txt2img")
        .arg(models)
        .args(["--compute-dtype", "f32"])
        .args(args)
        .output()
        .expect("runs");
    if o.status.success() {
        return Some(Ok(serde_json::from_slice(&o.stdout).expect("json report")));
    }
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    if skip_without_adapter("txt2img", &err) {
        return None;
    }
    Some(Err(err))
}

/// The failure's stderr (these fail before any GPU work).
fn txt2img_err(models: &Path, args: &[&str]) -> String {
    match txt2img(models, args) {
        Some(Err(e)) => e,
        Some(Ok(r)) => panic!("txt2img {args:?} succeeded: {r}"),
        None => panic!("txt2img {args:?} needed an adapter"),
    }
}

/// RGB bytes and size of a PNG.
fn decode_png(path: &Path) -> (Vec<u8>, u32, u32) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut dec = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .expect("png header");
    let mut buf = vec![0; dec.output_buffer_size().expect("size")];
    let info = dec.next_frame(&mut buf).expect("png data");
    assert_eq!(
        (info.color_type, info.bit_depth),
        (png::ColorType::Rgb, png::BitDepth::Eight),
        "{}",
        path.display()
    );
    buf.truncate(info.buffer_size());
    (buf, info.width, info.height)
}

/// The fixture as a ComfyUI folder (with `--configs`) and in diffusers'
/// layout (its configs and scheduler its own).
#[test]
fn txt2img_pngs_match_diffusers_resident_and_streamed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let comfy = models_folder(dir.path());
    let diffusers = fixtures::tiny_flux_pipeline().join("diffusers-dev");
    let noise = noise_file(dir.path());
    let fx = fixtures::tiny_flux_pipeline();
    // Default budget (all resident), then 0.0096 GiB (an explicit budget
    // is all of it): the VAE's activations for the whole latents of both
    // images (9 MiB) leave room for part of its weights, the rest streams.
    let runs = [
        ("resident", None, &comfy),
        ("streamed", Some("0.0096"), &comfy),
        ("diffusers_resident", None, &diffusers),
        ("diffusers_streamed", Some("0.0096"), &diffusers),
    ];
    for (name, budget, models) in runs {
        let out = dir.path().join(format!("{name}.png"));
        let mut args = vec![
            "--prompt",
            PROMPTS[0],
            "--prompt",
            PROMPTS[1],
            "--guidance",
            "3.5",
        ];
        args.extend(FIXTURE_RUN);
        let (noise_s, out_s) = (noise.to_str().expect("utf-8"), out.to_str().expect("utf-8"));
        args.extend(["--noise", noise_s, "--out", out_s]);
        if let Some(b) = budget {
            args.extend(["--vram-budget", b]);
        }
        // The streamed run draws and writes its last step's pass.
        let (svg, trace) = (dir.path().join("step.svg"), dir.path().join("step.json"));
        let (svg_s, trace_s) = (svg.to_str().expect("utf-8"), trace.to_str().expect("utf-8"));
        if name == "streamed" {
            args.extend(["--timeline", svg_s, "--trace", trace_s]);
        }
        let report = if models == &comfy {
            txt2img(models, &args)
        } else {
            txt2img_bare(models, &args)
        };
        let Some(report) = report else {
            return;
        };
        let report = report.unwrap_or_else(|e| panic!("{name}: {e}"));
        let stages = report["stages"].as_array().expect("stages");
        let names: Vec<&str> = stages.iter().filter_map(|s| s["stage"].as_str()).collect();
        assert_eq!(names, ["clip", "t5", "sample", "decode"], "{report}");
        assert_eq!(stages[2]["passes"], 4, "{report}");
        assert_eq!(stages[3]["tiles"], 1, "decoded whole: {report}");
        let streamed: u64 = stages
            .iter()
            .map(|s| s["streamed_bytes"].as_u64().expect("bytes"))
            .sum();
        eprintln!("{name}: {streamed} bytes streamed");
        assert_eq!(streamed > 0, budget.is_some(), "{report}");
        assert!(report["peak_vram"].as_u64().expect("peak") > 0);
        if name == "streamed" {
            let t: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&trace).expect("trace written"))
                    .expect("trace json");
            let events = t["traceEvents"].as_array().expect("events");
            let named = |p: &str| {
                events
                    .iter()
                    .filter(|e| e["name"].as_str().is_some_and(|n| n.starts_with(p)))
                    .count()
            };
            assert!(named("record ") > 0 && named("submit ") > 0, "{t}");
            let svg = std::fs::read_to_string(&svg).expect("timeline written");
            assert!(svg.starts_with("<svg") && svg.contains("kernel recording"));
        }
        for (i, png) in ["image_0.png", "image_1.png"].iter().enumerate() {
            let path = dir.path().join(format!("{name}_{i}.png"));
            assert_eq!(
                report["outputs"][i],
                path.to_str().expect("utf-8"),
                "{report}"
            );
            let (got, w, h) = decode_png(&path);
            let (want, ww, wh) = decode_png(&fx.join(png));
            assert_eq!((w, h), (ww, wh));
            let worst = got
                .iter()
                .zip(&want)
                .map(|(a, b)| a.abs_diff(*b))
                .max()
                .expect("pixels");
            assert!(worst <= 1, "{name} {png}: a pixel is {worst} levels off");
        }
    }
}

#[test]
fn txt2img_warns_and_cuts_a_long_prompt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let models = models_folder(dir.path());
    let long = "a cat ".repeat(60);
    let out = dir.path().join("long.png");
    let args = [
        "--prompt",
        &long,
        "--width",
        "16",
        "--height",
        "16",
        "--steps",
        "1",
        "--max-sequence-length",
        "8",
        "--out",
        out.to_str().expect("utf-8"),
    ];
    let Some(report) = txt2img(&models, &args) else {
        return;
    };
    let report = report.expect("a long prompt is cut, not refused");
    let cut: Vec<&str> = report["truncated"]
        .as_array()
        .expect("truncated")
        .iter()
        .filter_map(|t| t["encoder"].as_str())
        .collect();
    assert_eq!(cut, ["clip", "t5"], "{report}");
    assert_eq!(decode_png(&out).1, 16);
}

#[test]
fn txt2img_errors_name_the_problem() {
    let dir = tempfile::tempdir().expect("tempdir");
    let models = models_folder(dir.path());
    let fx = fixtures::tiny_flux_pipeline();
    let out = dir.path().join("never.png");
    let out_s = out.to_str().expect("utf-8");
    let base = ["--prompt", "a cat", "--out", out_s];
    let with = |extra: &[&str]| -> Vec<String> {
        base.iter().chain(extra).map(|s| s.to_string()).collect()
    };
    let err = |m: &Path, extra: &[&str]| {
        let a = with(extra);
        txt2img_err(m, &a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let e = err(&models, &["--width", "100"]);
    assert!(
        e.contains("100×1024") && e.contains("multiples of 16"),
        "{e}"
    );
    let e = err(&models, &["--steps", "0"]);
    assert!(e.contains("--steps") && e.contains("1..="), "{e}");
    // A T5 given as CLIP, the transformer given by file.
    let t5 = fx.join("t5xxl_fp16.safetensors");
    let t5_s = t5.to_str().expect("utf-8");
    let (clip, vae) = (fx.join("clip_l.safetensors"), fx.join("ae.safetensors"));
    let (clip_s, vae_s) = (clip.to_str().expect("utf-8"), vae.to_str().expect("utf-8"));
    let e = err(
        &fx.join("flux1-dev.safetensors"),
        &["--clip-l", t5_s, "--t5", t5_s, "--vae", vae_s],
    );
    assert!(
        e.contains("t5xxl_fp16.safetensors")
            && e.contains("given as the CLIP-L")
            && e.contains("T5"),
        "{e}"
    );
    // A transformer of another family.
    let e = err(&clip, &["--clip-l", clip_s, "--t5", t5_s, "--vae", vae_s]);
    assert!(
        e.contains("clip_l.safetensors") && e.contains("no Flux tensors"),
        "{e}"
    );
    // The transformer file without the others.
    let e = err(&fx.join("flux1-dev.safetensors"), &[]);
    assert!(e.contains("--clip-l, --t5 and --vae"), "{e}");
    // Two transformers: the candidates are listed.
    let two = dir.path().join("two");
    std::fs::create_dir_all(two.join("diffusion_models")).expect("mkdir");
    for n in ["a.safetensors", "b.safetensors"] {
        std::os::unix::fs::symlink(
            fx.join("flux1-dev.safetensors"),
            two.join("diffusion_models").join(n),
        )
        .expect("link");
    }
    let e = err(&two, &[]);
    assert!(
        e.contains("2 transformers found") && e.contains("--model") && e.contains("b.safetensors"),
        "{e}"
    );
    // No text encoders in the folder.
    let e = err(&two, &["--model", "a.safetensors"]);
    assert!(
        e.contains("no CLIP-L text encoder found") && e.contains("text_encoders/"),
        "{e}"
    );
    // A diffusers folder of another pipeline; --configs with one.
    let fx_diffusers = fx.join("diffusers-dev");
    let other = dir.path().join("sd3");
    std::fs::create_dir_all(&other).expect("mkdir");
    for d in [
        "transformer",
        "text_encoder",
        "text_encoder_2",
        "vae",
        "scheduler",
    ] {
        std::os::unix::fs::symlink(fx_diffusers.join(d), other.join(d)).expect("link");
    }
    std::fs::write(
        other.join("model_index.json"),
        r#"{"_class_name": "StableDiffusion3Pipeline",
            "transformer": ["diffusers", "SD3Transformer2DModel"]}"#,
    )
    .expect("index");
    let e = match txt2img_bare(&other, &base) {
        Some(Err(e)) => e,
        r => panic!("another pipeline: {r:?}"),
    };
    assert!(
        e.contains("model_index.json")
            && e.contains("StableDiffusion3Pipeline")
            && e.contains("SD3Transformer2DModel")
            && e.contains("FluxTransformer2DModel"),
        "{e}"
    );
    let e = err(&fx_diffusers, &[]);
    assert!(
        e.contains("--configs") && e.contains("diffusers folder"),
        "{e}"
    );
    assert!(!out.exists(), "no image is written on failure");
}

/// `--plan` answers without a GPU: each stage's resident and streamed
/// bytes under the budget and the least budget; no image is made.
#[test]
fn txt2img_plan_needs_no_gpu() {
    let dir = tempfile::tempdir().expect("tempdir");
    let models = models_folder(dir.path());
    let out = dir.path().join("never.png");
    let mut args = vec!["--prompt", "a cat"];
    args.extend(FIXTURE_RUN);
    args.extend([
        "--vram-budget",
        "0.003",
        "--plan",
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    let report = match txt2img(&models, &args) {
        Some(Ok(r)) => r,
        other => panic!("--plan: {other:?}"),
    };
    let stages = report["plan"]["stages"].as_array().expect("stages");
    let names: Vec<&str> = stages.iter().filter_map(|s| s["stage"].as_str()).collect();
    assert_eq!(names, ["clip", "t5", "sample", "decode"], "{report}");
    assert_eq!(stages[2]["passes"], 4);
    // 3 MiB holds the transformer; the VAE's activations leave its weights
    // only part of the room.
    assert_eq!(stages[2]["streamed_bytes"], 0, "{report}");
    assert!(
        stages[3]["streamed_bytes"].as_u64().expect("bytes") > 0,
        "{report}"
    );
    let least = report["plan"]["least_usable"].as_u64().expect("least");
    assert!(least > 0 && least <= 3 << 20, "{report}");
    assert!(!out.exists());
    let e = txt2img_err(&models, &["--prompt", "a cat", "--plan"]);
    assert!(e.contains("--plan needs --vram-budget"), "{e}");
}

/// `dynvram plan MODELS` of a ComfyUI folder answers as `txt2img --plan`
/// does (one code): the same stages, FLOPs, times and least budget; and
/// names the flags a pipeline takes instead of --image-tokens.
#[test]
fn plan_of_a_models_folder_is_txt2img_plan() {
    let dir = tempfile::tempdir().expect("tempdir");
    let models = models_folder(dir.path());
    let configs = fixtures::tiny_flux_pipeline().join("configs");
    let json = |args: &[&str]| -> serde_json::Value {
        let o = dynvram().arg("--json").args(args).output().expect("runs");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{args:?}: {err}");
        serde_json::from_slice(&o.stdout).expect("json")
    };
    let m = models.to_str().expect("utf-8");
    let c = configs.to_str().expect("utf-8");
    let budget = ["--vram-budget", "0.003", "--matrix-tflops", "20"];
    let mut plan_args = vec!["plan", m, "--configs", c, "--width", "96", "--height", "96"];
    plan_args.extend(["--steps", "4", "--text-tokens", "32"]);
    plan_args.extend(budget);
    let mut txt2img_args = vec!["txt2img", m, "--configs", c, "--prompt", "a cat", "--plan"];
    txt2img_args.extend(FIXTURE_RUN);
    txt2img_args.extend(budget);
    let plan = json(&plan_args);
    let via_txt2img = json(&txt2img_args);
    assert_eq!(plan["plan"], via_txt2img["plan"], "{plan}\n{via_txt2img}");
    let stages = plan["plan"]["stages"].as_array().expect("stages");
    assert_eq!(stages.len(), 4, "{plan}");
    for s in stages {
        assert!(s["flops"].as_u64().expect("flops") > 0, "{s}");
    }
    assert_eq!(plan["plan"]["rates"]["matrix_flops_per_second"], 20e12);
    let o = dynvram()
        .args(["plan", m, "--configs", c, "--image-tokens", "36"])
        .args(budget)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("--width × --height"),
        "{err}"
    );
}
