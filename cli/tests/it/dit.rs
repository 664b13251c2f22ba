//! `dynvram dit` on the tiny-flux fixture (`fixtures/tiny-flux`):
//! `out` against the reference in f32, resident and with a small
//! `--vram-budget` (weights streamed); `--steps` against the same Euler
//! loop run through the models API; a clear error for bad inputs.

use std::path::Path;

use dynvram_models::flux::{Flux, FluxCheckpoint, FluxInputs};
use dynvram_runtime::{ActDtype, Model, Runtime, RuntimeConfig};
use dynvram_test_support::fixtures;
use dynvram_test_support::safetensors::{self, Tensor};
use dynvram_test_support::skip::skip_without_adapter;
use dynvram_test_support::tolerance::{assert_close_rel, cosine};

use crate::common::dynvram;

/// `out` of a safetensors file of F32 tensors.
fn out_of(path: &Path) -> Tensor {
    safetensors::read(path).remove("out").expect("tensor `out`")
}

/// Runs `dynvram --json dit TINY …extra`; the JSON report, or the stderr
/// of a failure (None: no adapter and none required).
fn dit(inputs: &Path, out: &Path, extra: &[&str]) -> Option<Result<serde_json::Value, String>> {
    let o = dynvram()
        .arg("--json")
        .arg("dit")
        .arg(fixtures::tiny_flux())
        .arg("--inputs")
        .arg(inputs)
        .arg("--out")
        .arg(out)
        .args(["--compute-dtype", "f32"])
        .args(extra)
        .output()
        .expect("runs");
    if o.status.success() {
        return Some(Ok(serde_json::from_slice(&o.stdout).expect("json report")));
    }
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    if skip_without_adapter("dit", &err) {
        return None;
    }
    Some(Err(err))
}

#[test]
fn dit_tiny_flux_matches_reference_resident_and_streamed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let want = out_of(&fixtures::tiny_flux().join("reference.safetensors"));
    // Default budget (all resident), then 0.0035 GiB (an explicit budget
    // is all of it, no reserve): room for the scratch, two arenas and a
    // few of the 3.6 MiB of weights, the rest streamed.
    let svg = dir.path().join("pass.svg");
    let json = dir.path().join("pass.json");
    let (svg_s, json_s) = (svg.to_str().expect("utf-8"), json.to_str().expect("utf-8"));
    let timed = [
        "--passes",
        "2",
        "--warmup",
        "1",
        "--timeline",
        svg_s,
        "--trace",
        json_s,
    ];
    // 0.002 GiB holds two arenas of a linear, not of a double block: the
    // blocks stream by part.
    for (name, extra) in [
        ("resident", timed.to_vec()),
        ("streamed", vec!["--vram-budget", "0.0035", "--profile"]),
        ("by part", vec!["--vram-budget", "0.002"]),
    ] {
        let out = dir.path().join(format!("{name}.safetensors"));
        let Some(report) = dit(
            &fixtures::tiny_flux().join("inputs.safetensors"),
            &out,
            &extra,
        ) else {
            return;
        };
        let report = report.unwrap_or_else(|e| panic!("{name}: {e}"));
        let streamed = report["streamed_bytes_per_pass"].as_u64().expect("bytes");
        eprintln!("{name}: {streamed} bytes streamed per pass");
        if name == "resident" {
            assert_eq!(streamed, 0, "{report}");
        } else {
            assert!(streamed > 0, "{report}");
        }
        let granularity = if name == "by part" { "part" } else { "block" };
        assert_eq!(
            report["model_report"]["granularity"], granularity,
            "{report}"
        );
        let budget = &report["budget"];
        assert!(
            budget["peak"].as_u64() <= budget["usable"].as_u64(),
            "{report}"
        );
        assert!(
            report["flops_per_pass"].as_u64().unwrap_or(0) > 0,
            "{report}"
        );
        assert!(
            report["achieved_tflops"].as_f64().unwrap_or(0.0) > 0.0,
            "{report}"
        );
        assert_eq!(report["passes"], if name == "resident" { 2 } else { 1 });
        if name == "streamed" {
            check_profile(&report);
        } else {
            assert!(report.get("profile").is_none(), "{report}");
        }
        let got = out_of(&out);
        assert_eq!(got.shape, want.shape);
        assert_close_rel(name, &got.values, &want.values, 1e-3);
    }
    let svg = std::fs::read_to_string(&svg).expect("timeline written");
    assert!(svg.starts_with("<svg") || svg.contains("<svg"), "{svg:.80}");
    let trace: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("trace written")).expect("json");
    assert!(
        trace.to_string().contains("final_layer"),
        "the trace names the blocks"
    );
}

/// `--profile`: every launch of the last pass in a row; the rows that do
/// FLOPs compared with the matrix peak where the adapter has cooperative
/// matrices (measured first), none where it has not.
fn check_profile(report: &serde_json::Value) {
    let p = &report["profile"];
    let rows = p["rows"].as_array().expect("profile rows");
    let listed: u64 = rows
        .iter()
        .map(|r| r["launches"].as_u64().unwrap_or(0))
        .sum();
    assert!(listed > 0 && p["launches"].as_u64() == Some(listed), "{p}");
    let peak = p["matrix_peak_tflops"].as_f64();
    for r in rows {
        let flops = r["flops"].as_u64().unwrap_or(0);
        let timed = r["tflops"].as_f64().is_some();
        assert_eq!(
            r["of_peak"].as_f64().is_some(),
            peak.is_some() && timed && flops > 0,
            "{r}"
        );
    }
    assert!(
        rows.iter()
            .any(|r| r["label"].as_str().is_some_and(|l| l.contains("gemm"))),
        "{p}"
    );
}

/// `--steps 2 --no-shift`: sigmas 1, 0.5, 0, and
/// `x ← x + (σ' − σ)·model(x, σ)` twice, as the models API computes it.
#[test]
fn dit_steps_is_the_euler_loop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out.safetensors");
    let inputs_path = fixtures::tiny_flux().join("inputs.safetensors");
    let Some(report) = dit(&inputs_path, &out, &["--steps", "2", "--no-shift"]) else {
        return;
    };
    let report = report.expect("dit --steps");
    assert_eq!(report["passes"], 2);
    assert_eq!(report["sigmas"], serde_json::json!([1.0, 0.5, 0.0]));
    let got = &out_of(&out).values;

    let ckpt = FluxCheckpoint::open(&fixtures::tiny_flux()).expect("open");
    let mut inputs = FluxInputs::from_file(&inputs_path, &ckpt.config).expect("inputs");
    let rt = Runtime::new(RuntimeConfig::default()).expect("runtime");
    let model = Model::open(&rt, &ckpt.spec(inputs.shape, ActDtype::F32)).expect("model");
    let mut flux = Flux::new(&rt, &ckpt, inputs.shape, ActDtype::F32).expect("runner");
    for (t, t_prev) in [(1.0f32, 0.5f32), (0.5, 0.0)] {
        inputs.timesteps = vec![t];
        let v = flux.forward(&rt, &model, &inputs).expect("forward").out;
        inputs
            .img
            .iter_mut()
            .zip(&v)
            .for_each(|(x, v)| *x += (t_prev - t) * v);
    }
    assert_close_rel("steps", got, &inputs.img, 1e-6);
}

#[test]
fn dit_bad_inputs_fail_clearly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.safetensors");
    let ins = safetensors::read(&fixtures::tiny_flux().join("inputs.safetensors"));
    safetensors::write(
        &bad,
        ins.iter().map(|(n, t)| {
            let name = if n == "img" { "latent" } else { n };
            (name.to_owned(), t)
        }),
    );
    let o = dynvram()
        .arg("dit")
        .arg(fixtures::tiny_flux())
        .arg("--inputs")
        .arg(&bad)
        .arg("--out")
        .arg(dir.path().join("out.safetensors"))
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unknown input `latent`"), "{err}");
    assert!(!dir.path().join("out.safetensors").exists());
}

/// `synth --like flux-dev` takes the Flux presets; the Llama presets' flags
/// are refused up front, before anything is written.
#[test]
fn synth_flux_refuses_llama_flags() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = dynvram()
        .arg("synth")
        .arg(dir.path().join("flux"))
        .args(["--like", "flux-dev", "--layers", "2"])
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--layers and --tokenizer apply to the Llama presets"),
        "{err}"
    );
    assert!(!dir.path().join("flux").exists());
}

/// `quantize` on a Flux file with the defaults: the linears of the blocks
/// become int8 (or int4), the embedders, modulations and final layer stay
/// bf16 (as ComfyUI's mixed files have them), and `dit` on the result stays
/// close to the bf16 reference.
#[test]
fn quantize_flux_keeps_embedders_modulation_and_final_layer() {
    // (format and its flags, least cosine to the bf16 reference); tiny-flux's
    // widths (128, 512, 640) take rotation groups of 64, not the default 256.
    for (format, least) in [
        (&["int8_tensorwise"][..], 0.995),
        (&["convrot_w4a4", "--group-size", "64"][..], 0.98),
    ] {
        if !quantized_flux_is_close(format, least) {
            return;
        }
    }
}

/// One format of [`quantize_flux_keeps_embedders_modulation_and_final_layer`];
/// false where it was skipped for want of a GPU.
fn quantized_flux_is_close(flags: &[&str], least: f64) -> bool {
    let (format, more) = (flags[0], &flags[1..]);
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join(format!("tiny-{format}"));
    std::fs::create_dir(&model).expect("mkdir");
    std::fs::copy(
        fixtures::tiny_flux().join("config.json"),
        model.join("config.json"),
    )
    .expect("config");
    let q = dynvram()
        .arg("quantize")
        .arg(fixtures::tiny_flux().join("model.safetensors"))
        .arg(model.join("model.safetensors"))
        .args(["--format", format])
        .args(more)
        .output()
        .expect("runs");
    assert!(q.status.success(), "{}", String::from_utf8_lossy(&q.stderr));
    let st = safetensors::read(&model.join("model.safetensors"));
    let dtype = |n: &str| safetensors::get(&st, n).dtype;
    for kept in [
        "img_in.weight",
        "txt_in.weight",
        "time_in.in_layer.weight",
        "guidance_in.out_layer.weight",
        "double_blocks.0.img_mod.lin.weight",
        "single_blocks.1.modulation.lin.weight",
        "final_layer.linear.weight",
        "final_layer.adaLN_modulation.1.weight",
    ] {
        assert_eq!(dtype(kept), safetensors::Dtype::BF16, "{format}: {kept}");
    }
    for quantized in [
        "double_blocks.0.img_attn.qkv.weight",
        "double_blocks.1.txt_mlp.2.weight",
        "single_blocks.0.linear1.weight",
        "single_blocks.1.linear2.weight",
    ] {
        assert_eq!(
            dtype(quantized),
            safetensors::Dtype::I8,
            "{format}: {quantized}"
        );
    }
    let out = dir.path().join("out.safetensors");
    let o = dynvram()
        .arg("--json")
        .arg("dit")
        .arg(&model)
        .arg("--inputs")
        .arg(fixtures::tiny_flux().join("inputs.safetensors"))
        .arg("--out")
        .arg(&out)
        .args(["--compute-dtype", "f32"])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() && skip_without_adapter(format, &err) {
        return false;
    }
    assert!(o.status.success(), "{err}");
    let got = out_of(&out).values;
    let want = out_of(&fixtures::tiny_flux().join("reference.safetensors")).values;
    let cosine = cosine(&got, &want);
    eprintln!("{format} Flux vs bf16 reference: cosine {cosine:.5}");
    assert!(cosine > least, "{format}: cosine {cosine}");
    true
}

/// `plan` on a Flux transformer (folder or its model.safetensors) without a
/// GPU: one step's blocks (embedders, the double and single blocks, the
/// final layer), all resident under a large budget, some streamed under a
/// small one; bad token counts are refused naming the flag.
#[test]
fn plan_takes_flux_files() {
    let plan = |model: &Path, budget: &str, tokens: &str| {
        let o = dynvram()
            .args([
                "--json",
                "plan",
                "--reserve-vram",
                "0",
                "--vram-budget",
                budget,
            ])
            .args(["--image-tokens", tokens, "--text-tokens", "16"])
            .arg(model)
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        o.status
            .success()
            .then(|| serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("json"))
            .ok_or(err)
    };
    for model in [
        fixtures::tiny_flux(),
        fixtures::tiny_flux().join("model.safetensors"),
    ] {
        let all = plan(&model, "1", "64").expect("plan");
        assert_eq!(all["kind"], "flux transformer", "{all}");
        assert_eq!(all["unit"], "step");
        // embed, 2 double, 2 single, final_layer (tiny-flux's config.json).
        assert_eq!(all["blocks"].as_array().map(Vec::len), Some(6), "{all}");
        assert_eq!(all["streamed_bytes_per_pass"], 0, "{all}");
        let tight = plan(&model, "0.004", "64").expect("plan");
        let streamed = tight["streamed_bytes_per_pass"].as_u64().unwrap_or(0);
        assert!(streamed > 0, "{tight}");
        assert_eq!(tight["weight_bytes"], all["weight_bytes"]);
        let err = plan(&model, "1", "0").expect_err("no image tokens");
        assert!(err.contains("--image-tokens"), "{err}");
        // FLOPs of one step at 64 image and 16 text tokens, per block and
        // in all, against the model's count; whole blocks at 4 MiB.
        let ckpt = dynvram_models::flux::FluxCheckpoint::open(&model).expect("opens");
        let shape = dynvram_models::flux::Shape {
            batch: 1,
            img_len: 64,
            txt_len: 16,
        };
        let flops = dynvram_models::flux::flops::block_flops(&ckpt.config, shape);
        assert_eq!(all["flops_per_pass"], flops.iter().sum::<u64>(), "{all}");
        assert_eq!(all["blocks"][1]["flops"], flops[1], "{all}");
        assert_eq!(all["flops_counted"], true);
        assert_eq!(all["granularity"], "block");
        assert_eq!(tight["granularity"], "block", "{tight}");
        // 2 MiB cannot hold two arenas of a double block: by part, within it.
        let parts = plan(&model, "0.002", "64").expect("plan");
        assert_eq!(parts["granularity"], "part", "{parts}");
        assert!(parts["streamed_parts"].as_u64() > tight["streamed_parts"].as_u64());
        assert!(
            parts["peak_bytes"].as_u64() <= parts["usable"].as_u64(),
            "{parts}"
        );
    }
}

/// `plan`'s prediction counts FLOPs: a step bound by compute takes its FLOPs
/// at `--matrix-tflops`, so twice the rate halves it; the text names the
/// FLOPs, the rate and the bound.
#[test]
fn plan_predicts_from_flops() {
    let model = fixtures::tiny_flux();
    let plan = |tflops: &str| {
        let o = dynvram()
            .args(["--json", "plan", "--vram-budget", "1"])
            .args(["--matrix-tflops", tflops])
            .arg(&model)
            .output()
            .expect("runs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("json")
    };
    let slow = plan("0.5");
    assert_eq!(slow["bound"], "compute", "{slow}");
    let flops = slow["flops_per_pass"].as_f64().expect("flops");
    let seconds = slow["predicted_seconds"].as_f64().expect("seconds");
    assert!((seconds - flops / 0.5e12).abs() < 1e-9 * seconds, "{slow}");
    let fast = plan("1");
    let halved = fast["predicted_seconds"].as_f64().expect("seconds");
    assert!((2.0 * halved - seconds).abs() < 1e-9 * seconds, "{fast}");
    let o = dynvram()
        .args(["plan", "--vram-budget", "1", "--matrix-tflops", "0.5"])
        .arg(&model)
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("TFLOP at 0.5 TFLOP/s") && text.contains("bound by compute"),
        "{text}"
    );
    let o = dynvram()
        .args(["plan", "--vram-budget", "1", "--matrix-tflops", "0"])
        .arg(&model)
        .output()
        .expect("runs");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--matrix-tflops"));
}
