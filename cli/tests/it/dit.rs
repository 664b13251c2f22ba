//! `dynvram dit` on the tiny-flux fixture (`fixtures/tiny-flux`):
//! `out` against the reference in f32, resident and with a small
//! `--vram-budget` (weights streamed); `--steps` against the same Euler
//! loop run through the models API; a clear error for bad inputs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use dynvram_models::flux::{Flux, FluxCheckpoint, FluxInputs};
use dynvram_runtime::{ActDtype, Model, Runtime, RuntimeConfig};

const TINY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/tiny-flux");

fn tiny() -> PathBuf {
    PathBuf::from(TINY)
}

fn read_f32(path: &Path) -> HashMap<String, (Vec<usize>, Vec<f32>)> {
    let bytes = std::fs::read(path).expect("read");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    st.tensors()
        .into_iter()
        .map(|(n, v)| {
            assert_eq!(v.dtype(), safetensors::Dtype::F32, "{n}");
            let values = v
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            (n, (v.shape().to_vec(), values))
        })
        .collect()
}

/// Runs `dynvram --json dit TINY …extra`; the JSON report, or the stderr
/// of a failure (None: no adapter and none required).
fn dit(inputs: &Path, out: &Path, extra: &[&str]) -> Option<Result<serde_json::Value, String>> {
    let o = Command::cargo_bin("dynvram")
        .expect("binary")
        .arg("--json")
        .arg("dit")
        .arg(TINY)
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
    if err.contains("no GPU adapter") && std::env::var("DYNVRAM_REQUIRE_GPU").is_err() {
        eprintln!("skipped: no GPU adapter");
        return None;
    }
    Some(Err(err))
}

fn assert_close_rel(what: &str, got: &[f32], want: &[f32], rel: f32) {
    assert_eq!(got.len(), want.len(), "{what}");
    let max = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let err = got
        .iter()
        .zip(want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(
        err <= rel * max,
        "{what}: max abs error {err:.3e} > {rel} × {max:.3e}"
    );
    eprintln!("{what}: max abs error {err:.3e}");
}

#[test]
fn dit_tiny_flux_matches_reference_resident_and_streamed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let want = &read_f32(&tiny().join("reference.safetensors"))["out"];
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
    for (name, extra) in [
        ("resident", timed.to_vec()),
        ("streamed", vec!["--vram-budget", "0.0035"]),
    ] {
        let out = dir.path().join(format!("{name}.safetensors"));
        let Some(report) = dit(&tiny().join("inputs.safetensors"), &out, &extra) else {
            return;
        };
        let report = report.unwrap_or_else(|e| panic!("{name}: {e}"));
        let streamed = report["streamed_bytes_per_pass"].as_u64().expect("bytes");
        eprintln!("{name}: {streamed} bytes streamed per pass");
        if name == "streamed" {
            assert!(streamed > 0, "{report}");
        } else {
            assert_eq!(streamed, 0, "{report}");
        }
        assert_eq!(report["passes"], if name == "resident" { 2 } else { 1 });
        let got = &read_f32(&out)["out"];
        assert_eq!(got.0, want.0);
        assert_close_rel(name, &got.1, &want.1, 1e-3);
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

/// `--steps 2 --no-shift`: sigmas 1, 0.5, 0, and
/// `x ← x + (σ' − σ)·model(x, σ)` twice, as the models API computes it.
#[test]
fn dit_steps_is_the_euler_loop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out.safetensors");
    let inputs_path = tiny().join("inputs.safetensors");
    let Some(report) = dit(&inputs_path, &out, &["--steps", "2", "--no-shift"]) else {
        return;
    };
    let report = report.expect("dit --steps");
    assert_eq!(report["passes"], 2);
    assert_eq!(report["sigmas"], serde_json::json!([1.0, 0.5, 0.0]));
    let got = &read_f32(&out)["out"].1;

    let ckpt = FluxCheckpoint::open(&tiny()).expect("open");
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
    let ins = read_f32(&tiny().join("inputs.safetensors"));
    let renamed: Vec<(String, Vec<usize>, Vec<u8>)> = ins
        .iter()
        .map(|(n, (s, v))| {
            let name = if n == "img" {
                "latent".into()
            } else {
                n.clone()
            };
            (
                name,
                s.clone(),
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            )
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = renamed
        .iter()
        .map(|(n, s, b)| {
            let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b)
                .expect("view");
            (n.clone(), view)
        })
        .collect();
    safetensors::serialize_to_file(views, None, &bad).expect("write");
    let o = Command::cargo_bin("dynvram")
        .expect("binary")
        .arg("dit")
        .arg(TINY)
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
    let o = Command::cargo_bin("dynvram")
        .expect("binary")
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
    std::fs::copy(tiny().join("config.json"), model.join("config.json")).expect("config");
    let q = Command::cargo_bin("dynvram")
        .expect("binary")
        .arg("quantize")
        .arg(tiny().join("model.safetensors"))
        .arg(model.join("model.safetensors"))
        .args(["--format", format])
        .args(more)
        .output()
        .expect("runs");
    assert!(q.status.success(), "{}", String::from_utf8_lossy(&q.stderr));
    let bytes = std::fs::read(model.join("model.safetensors")).expect("read");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let dtype = |n: &str| st.tensor(n).unwrap_or_else(|e| panic!("{n}: {e}")).dtype();
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
    let o = Command::cargo_bin("dynvram")
        .expect("binary")
        .arg("--json")
        .arg("dit")
        .arg(&model)
        .arg("--inputs")
        .arg(tiny().join("inputs.safetensors"))
        .arg("--out")
        .arg(&out)
        .args(["--compute-dtype", "f32"])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    if !o.status.success()
        && err.contains("no GPU adapter")
        && std::env::var("DYNVRAM_REQUIRE_GPU").is_err()
    {
        eprintln!("skipped: no GPU adapter");
        return false;
    }
    assert!(o.status.success(), "{err}");
    let got = &read_f32(&out)["out"].1;
    let want = &read_f32(&tiny().join("reference.safetensors"))["out"].1;
    let dot: f64 = got
        .iter()
        .zip(want)
        .map(|(a, b)| f64::from(*a) * f64::from(*b))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let cosine = dot / (norm(got) * norm(want));
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
        let o = Command::cargo_bin("dynvram")
            .expect("binary")
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
    for model in [tiny(), tiny().join("model.safetensors")] {
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
    }
}
