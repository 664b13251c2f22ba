//! The tiny pipeline in diffusers' folder layout (`diffusers-dev/`, written
//! by diffusers' `save_pretrained`, every model sharded) read as the BFL
//! and ComfyUI files hold it: each tensor the same dtype, shape and bytes
//! (the transformer's fused q/k/v, linear1 and swapped final modulation
//! read in place from diffusers' split tensors, the VAE's renamed ones);
//! its configs and schedule are the fixture's. Folders that are not a
//! float FLUX.1 transformer are refused naming the file and the tensor.
//! (`txt2img` on the folder against diffusers' images: the CLI's test.)

use std::path::Path;

use dynvram_models::clip::{ClipCheckpoint, ClipConfig};
use dynvram_models::flux::sample::Schedule;
use dynvram_models::flux::{FluxCheckpoint, FluxConfig};
use dynvram_models::t5::{T5Checkpoint, T5Config};
use dynvram_models::txt2img::diffusers::DiffusersFolder;
use dynvram_models::vae::{VaeCheckpoint, VaeConfig};
use dynvram_runtime::loader::ModelFiles;
use dynvram_test_support::fixtures;
use dynvram_test_support::safetensors::{self, Dtype, Tensor};

fn folder() -> std::path::PathBuf {
    fixtures::tiny_flux_pipeline().join("diffusers-dev")
}

/// Every tensor of `want` (a ComfyUI file) is in `got` with the same
/// dtype, shape and bytes; with `all`, `got` holds nothing else.
fn same_tensors(what: &str, got: &ModelFiles, want: &Path, all: bool) {
    let want = ModelFiles::open(want).expect("the fixture's file");
    let bytes = |m: &ModelFiles, name: &str| {
        let info = m.info(name).expect("info");
        let mut b = vec![0; info.len() as usize];
        m.read_into(name, 0..info.len(), &mut b).expect("read");
        b
    };
    for w in want.tensors() {
        let g = got
            .info(&w.name)
            .unwrap_or_else(|| panic!("{what}: no `{}`", w.name));
        assert_eq!(
            (g.dtype, &g.shape),
            (w.dtype, &w.shape),
            "{what} `{}`",
            w.name
        );
        assert!(
            bytes(got, &w.name) == bytes(&want, &w.name),
            "{what}: `{}` differs",
            w.name
        );
    }
    if all {
        assert_eq!(got.len(), want.len(), "{what}");
    }
}

#[test]
fn diffusers_folder_reads_the_bfl_tensors() {
    let fx = fixtures::tiny_flux_pipeline();
    let f = DiffusersFolder::open(&folder()).expect("the folder opens");
    let configs = fx.join("configs");
    assert_eq!(f.schedule, Some(Schedule::Shifted));
    assert_eq!(
        f.configs.clip,
        Some(ClipConfig::from_hf_json(&configs.join("text_encoder/config.json")).expect("clip"))
    );
    assert_eq!(
        f.configs.t5,
        Some(T5Config::from_hf_json(&configs.join("text_encoder_2/config.json")).expect("t5"))
    );
    assert_eq!(
        f.configs.vae,
        Some(VaeConfig::from_diffusers_json(&configs.join("vae/config.json")).expect("vae"))
    );
    let flux = FluxCheckpoint::open(&f.files.transformer).expect("transformer");
    assert!(!flux.inferred, "its config.json is read");
    assert_eq!(
        flux.config,
        FluxConfig::from_file(&configs.join("dev/transformer/config.json")).expect("config")
    );
    assert!(!flux.views.is_empty());
    same_tensors(
        "transformer",
        flux.files(),
        &fx.join("flux1-dev.safetensors"),
        true,
    );
    let vae = VaeCheckpoint::open(&f.files.vae, f.configs.vae.clone()).expect("vae");
    same_tensors("vae", vae.files(), &fx.join("ae.safetensors"), true);
    let clip = ClipCheckpoint::open(&f.files.clip, f.configs.clip.clone()).expect("clip");
    same_tensors("clip", clip.files(), &fx.join("clip_l.safetensors"), false);
    let t5 = T5Checkpoint::open(&f.files.t5, f.configs.t5.clone()).expect("t5");
    same_tensors("t5", t5.files(), &fx.join("t5xxl_fp16.safetensors"), false);
}

/// Every tensor of the fixture's sharded transformer.
fn transformer_tensors() -> Vec<(String, Tensor)> {
    let dir = folder().join("transformer");
    let mut out: Vec<(String, Tensor)> = std::fs::read_dir(&dir)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .flat_map(|p| safetensors::read(&p))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// A transformer folder of `tensors` (one file) and the fixture's config.
fn transformer_folder(root: &Path, name: &str, tensors: &[(String, Tensor)]) -> std::path::PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::copy(
        folder().join("transformer/config.json"),
        dir.join("config.json"),
    )
    .expect("config");
    safetensors::write(
        &dir.join("diffusion_pytorch_model.safetensors"),
        tensors.iter().map(|(n, t)| (n.clone(), t)),
    );
    dir
}

#[test]
fn diffusers_folders_that_are_no_float_flux_are_refused_naming_the_tensor() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let all = transformer_tensors();
    let refused = |name: &str, tensors: Vec<(String, Tensor)>| {
        let dir = transformer_folder(tmp.path(), name, &tensors);
        let e = FluxCheckpoint::open(&dir).expect_err(name).to_string();
        assert!(e.contains("diffusion_pytorch_model.safetensors"), "{e}");
        e
    };
    // The whole set in one file opens (the refusals below are the edits').
    let dir = transformer_folder(tmp.path(), "whole", &all);
    FluxCheckpoint::open(&dir).expect("one unsharded file");
    // A quantized folder's extra tensor (bitsandbytes keeps one per weight).
    let mut quantized = all.clone();
    quantized.push((
        "transformer_blocks.0.attn.to_q.weight.absmax".into(),
        Tensor::from_f32(vec![4], &[1.0; 4]),
    ));
    let e = refused("quantized", quantized);
    assert!(
        e.contains("transformer_blocks.0.attn.to_q.weight.absmax")
            && e.contains("FluxTransformer2DModel"),
        "{e}"
    );
    // A weight in a dtype other than a float.
    let mut int8 = all.clone();
    let (_, t) = int8
        .iter_mut()
        .find(|(n, _)| n == "single_transformer_blocks.1.proj_out.weight")
        .expect("tensor");
    *t = Tensor::new(
        Dtype::I8,
        t.shape.clone(),
        vec![1; t.shape.iter().product()],
    );
    let e = refused("int8", int8);
    assert!(
        e.contains("single_transformer_blocks.1.proj_out.weight") && e.contains("I8"),
        "{e}"
    );
    // A part of a fused BFL tensor missing.
    let no_k: Vec<_> = all
        .iter()
        .filter(|(n, _)| n != "transformer_blocks.1.attn.add_k_proj.weight")
        .cloned()
        .collect();
    let e = refused("no_k", no_k);
    assert!(
        e.contains("transformer_blocks.1.attn.add_k_proj.weight")
            && e.contains("double_blocks.1.txt_attn.qkv.weight"),
        "{e}"
    );
    // A part of another width: named by the view, with both shapes.
    let mut narrow = all.clone();
    let (_, t) = narrow
        .iter_mut()
        .find(|(n, _)| n == "single_transformer_blocks.0.attn.to_v.weight")
        .expect("tensor");
    let rows = t.shape[0];
    *t = Tensor::new(t.dtype, vec![rows, 8], vec![0; rows * 8 * 2]);
    let e = refused("narrow", narrow);
    assert!(
        e.contains("single_blocks.0.linear1.weight")
            && e.contains("single_transformer_blocks.0.attn.to_v.weight"),
        "{e}"
    );
}

/// The scheduler's config sets the schedule: FLUX.1-dev's dynamic line,
/// schnell's unshifted one; any other is refused naming the value.
#[test]
fn scheduler_configs_give_dev_and_schnell_schedules_and_refuse_others() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let schedule = |json: &str| {
        let p = tmp.path().join("scheduler_config.json");
        std::fs::write(&p, json).expect("write");
        Schedule::from_scheduler_config(&p).map_err(|e| e.to_string())
    };
    let dev = std::fs::read_to_string(folder().join("scheduler/scheduler_config.json"))
        .expect("the fixture's");
    assert_eq!(schedule(&dev), Ok(Schedule::Shifted));
    let schnell = r#"{"_class_name": "FlowMatchEulerDiscreteScheduler",
        "shift": 1.0, "use_dynamic_shifting": false}"#;
    assert_eq!(schedule(schnell), Ok(Schedule::Linear));
    let e = schedule(r#"{"shift": 3.0, "use_dynamic_shifting": false}"#).expect_err("shift 3");
    assert!(
        e.contains("scheduler_config.json") && e.contains("shift` of 3"),
        "{e}"
    );
    let e = schedule(r#"{"use_dynamic_shifting": true, "max_shift": 1.5}"#).expect_err("line");
    assert!(e.contains("max_shift` = 1.5"), "{e}");
}
