//! CLIP text encoder end to end: the tiny-flux-pipeline fixture's CLIP-L
//! (`clip_l.safetensors`, f16, HF keys) against diffusers'
//! `clip_last_hidden_state` and `clip_pooled` (within 1e-3 of their max),
//! resident and streamed under a budget; the config inferred from a
//! synthetic file's shapes; clear errors for a T5 file given as CLIP, a
//! missing layer, heads that cannot be inferred and bad ids.

use dynvram_models::clip::{ClipCheckpoint, ClipConfig, ClipError, ClipText, synth};
use dynvram_models::synth::SynthDtype;
use dynvram_models::tokenize::ClipTokenizer;
use dynvram_models::txt2img::TextEncoderKind;
use dynvram_runtime::ActDtype;
use dynvram_test_support::gpu::{have_gpu, needs_f16, test_gpu};
use dynvram_test_support::safetensors::{self, Dtype, Tensor};
use dynvram_test_support::tolerance::{assert_close_rel, cosine};

use crate::text_common::{REL, open, pipeline, plan_under, reference, sparse_f16_file};

fn fixture() -> ClipCheckpoint {
    let dir = pipeline();
    let config = ClipConfig::from_hf_json(&dir.join("configs/text_encoder/config.json"))
        .expect("config.json");
    ClipCheckpoint::open(&dir.join("clip_l.safetensors"), Some(config)).expect("clip opens")
}

fn check_fixture(test: &str, streamed: bool) {
    if !have_gpu(test) {
        return;
    }
    let ckpt = fixture();
    assert_eq!(ckpt.config.num_attention_heads, 2);
    let reference = reference();
    let ids = safetensors::get(&reference, "clip_input_ids").ids_u32();
    let batch = ids.len() / 77;
    let spec = ckpt.spec(batch, ActDtype::F32);
    let (rt, model) = open(&spec, streamed);
    let mut clip = ClipText::new(&rt, &ckpt, batch, ActDtype::F32).expect("runner");
    let out = clip.encode(&rt, &model, &ids).expect("encode");
    if streamed {
        assert!(out.stats.streamed_bytes > 0, "{:?}", out.stats);
    }
    let want = safetensors::get(&reference, "clip_last_hidden_state");
    assert_close_rel(
        "clip_last_hidden_state",
        &out.last_hidden_state,
        &want.values,
        REL,
    );
    let want = safetensors::get(&reference, "clip_pooled");
    assert_close_rel("clip_pooled", &out.pooled, &want.values, REL);
    // A second pass on the same runner gives the same values.
    let again = clip.encode(&rt, &model, &ids).expect("encode again");
    assert_eq!(again.pooled, out.pooled);
}

#[test]
fn clip_matches_diffusers_resident() {
    check_fixture("clip_matches_diffusers_resident", false);
}

#[test]
fn clip_matches_diffusers_streamed() {
    check_fixture("clip_matches_diffusers_streamed", true);
}

#[test]
fn clip_ignores_the_tensors_it_does_not_use_under_any_prefix() {
    let dir = pipeline();
    let mut tensors = safetensors::read(&dir.join("clip_l.safetensors"));
    // As a full SD checkpoint holds it, with transformers' extra tensors.
    let ids: Vec<u8> = (0..77i64).flat_map(i64::to_le_bytes).collect();
    tensors.insert(
        "text_model.embeddings.position_ids".into(),
        Tensor::new(Dtype::I64, vec![1, 77], ids),
    );
    tensors.insert(
        "text_projection.weight".into(),
        Tensor::from_f32(vec![16, 16], &[0.5; 256]),
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let config =
        ClipConfig::from_hf_json(&dir.join("configs/text_encoder/config.json")).expect("config");
    // Under a full SD checkpoint's prefix; and without `text_model.`, as
    // transformers 5 writes a CLIPTextModel.
    for (file, prefix, strip) in [
        ("sd.safetensors", "cond_stage_model.transformer.", ""),
        ("transformers5.safetensors", "", "text_model."),
    ] {
        let path = tmp.path().join(file);
        safetensors::write(
            &path,
            tensors.iter().map(|(n, t)| {
                let n = n.strip_prefix(strip).unwrap_or(n);
                (format!("{prefix}{n}"), t)
            }),
        );
        if prefix.is_empty() {
            assert_eq!(
                TextEncoderKind::of_file(&path).expect("header"),
                Some(TextEncoderKind::Clip)
            );
        }
        let ckpt = ClipCheckpoint::open(&path, Some(config.clone())).expect("opens");
        let base = if strip.is_empty() { "text_model." } else { "" };
        assert_eq!(ckpt.names.prefix, format!("{prefix}{base}"));
        if !have_gpu("clip_ignores_the_tensors_it_does_not_use_under_any_prefix") {
            return;
        }
        let reference = reference();
        let ids = safetensors::get(&reference, "clip_input_ids").ids_u32();
        let (rt, model) = open(&ckpt.spec(2, ActDtype::F32), false);
        let mut clip = ClipText::new(&rt, &ckpt, 2, ActDtype::F32).expect("runner");
        let out = clip.encode(&rt, &model, &ids).expect("encode");
        let want = safetensors::get(&reference, "clip_pooled");
        assert_close_rel(file, &out.pooled, &want.values, REL);
    }
}

#[test]
fn clip_in_f16_points_as_f32() {
    let test = "clip_in_f16_points_as_f32";
    if test_gpu(test, needs_f16).is_none() {
        return;
    }
    let ckpt = fixture();
    let reference = reference();
    let ids = safetensors::get(&reference, "clip_input_ids").ids_u32();
    let (rt, model) = open(&ckpt.spec(2, ActDtype::F16), false);
    let mut clip = ClipText::new(&rt, &ckpt, 2, ActDtype::F16).expect("runner");
    let out = clip.encode(&rt, &model, &ids).expect("encode");
    let want = safetensors::get(&reference, "clip_last_hidden_state");
    let cos = cosine(&out.last_hidden_state, &want.values);
    assert!(cos >= 0.999, "cosine {cos}");
}

#[test]
fn clip_l_shapes_infer_back_and_stream_under_64_mib() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("clip_l.safetensors");
    sparse_f16_file(&path, &synth::tensors(&ClipConfig::clip_l()));
    let ckpt = ClipCheckpoint::open(&path, None).expect("opens");
    assert_eq!(ckpt.config, ClipConfig::clip_l());
    let usable = 64 << 20;
    let (streamed, weights, taken) = plan_under(&ckpt.spec(1, ActDtype::F16), usable);
    eprintln!("CLIP-L under 64 MiB: {streamed} of {weights} B streamed, {taken} B taken");
    assert!(weights > 160_000_000, "{weights}");
    assert!(streamed * 2 > weights, "{streamed} of {weights}");
    assert!(taken <= usable, "{taken}");
}

#[test]
fn clip_tokenizer_feeds_the_encoder() {
    if !have_gpu("clip_tokenizer_feeds_the_encoder") {
        return;
    }
    let ckpt = fixture();
    let tok = ClipTokenizer::builtin().expect("tokenizer");
    let ids = tok
        .encode("a photo of a cat wearing a tiny red hat")
        .expect("ids")
        .ids;
    let (rt, model) = open(&ckpt.spec(1, ActDtype::F32), false);
    let mut clip = ClipText::new(&rt, &ckpt, 1, ActDtype::F32).expect("runner");
    let out = clip.encode(&rt, &model, &ids).expect("encode");
    let reference = reference();
    let want = safetensors::get(&reference, "clip_pooled");
    assert_close_rel("pooled of prompt 0", &out.pooled, &want.values[..16], REL);
}

#[test]
fn clip_infers_its_config_from_the_shapes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("clip.safetensors");
    let config = ClipConfig {
        hidden_size: 128,
        intermediate_size: 96,
        num_hidden_layers: 3,
        num_attention_heads: 2,
        vocab_size: 49408,
        max_position_embeddings: 77,
        layer_norm_eps: 1e-5,
    };
    synth::write(&path, &config, SynthDtype::Bf16, 7).expect("synth");
    let ckpt = ClipCheckpoint::open(&path, None).expect("opens");
    assert!(ckpt.inferred);
    assert_eq!(ckpt.config, config);
    // A whole CLIPConfig: its text_config is read.
    let text = std::fs::read_to_string(pipeline().join("configs/text_encoder/config.json"))
        .expect("config");
    let whole = dir.path().join("config.json");
    std::fs::write(
        &whole,
        format!("{{\"text_config\": {text}, \"projection_dim\": 16}}"),
    )
    .expect("write");
    let from_whole = ClipConfig::from_hf_json(&whole).expect("CLIPConfig");
    assert_eq!(
        (from_whole.hidden_size, from_whole.num_attention_heads),
        (16, 2)
    );
    let l = ClipConfig::clip_l();
    assert_eq!(
        (l.hidden_size, l.num_attention_heads, l.head_dim()),
        (768, 12, 64)
    );
    if !have_gpu("clip_infers_its_config_from_the_shapes") {
        return;
    }
    let tok = ClipTokenizer::builtin().expect("tokenizer");
    let ids = tok.encode("a cat").expect("ids").ids;
    let (rt, model) = open(&ckpt.spec(1, ActDtype::F32), false);
    let mut clip = ClipText::new(&rt, &ckpt, 1, ActDtype::F32).expect("runner");
    let out = clip.encode(&rt, &model, &ids).expect("encode");
    assert_eq!(out.last_hidden_state.len(), 77 * 128);
    assert!(out.last_hidden_state.iter().all(|v| v.is_finite()));
    // The pooled row is the EOS row (index 3: BOS, a, cat, EOS).
    assert_eq!(out.pooled, out.last_hidden_state[3 * 128..4 * 128]);
}

#[test]
fn clip_refuses_bad_checkpoints_and_ids() {
    let dir = pipeline();
    let t5 = dir.join("t5xxl_fp16.safetensors");
    let err = ClipCheckpoint::open(&t5, None).expect_err("T5 as CLIP");
    let msg = err.to_string();
    assert!(matches!(err, ClipError::Weights { .. }), "{msg}");
    assert!(
        msg.contains("t5xxl_fp16.safetensors")
            && msg.contains("T5")
            && msg.contains("token_embedding"),
        "{msg}"
    );
    // hidden 16 is no multiple of 64: the heads need the config.
    let err = ClipCheckpoint::open(&dir.join("clip_l.safetensors"), None).expect_err("heads");
    assert!(err.to_string().contains("config.json"), "{err}");
    // A config with more layers than the file has.
    let mut config =
        ClipConfig::from_hf_json(&dir.join("configs/text_encoder/config.json")).expect("config");
    config.num_hidden_layers = 3;
    let err = ClipCheckpoint::open(&dir.join("clip_l.safetensors"), Some(config))
        .expect_err("missing layer");
    let msg = err.to_string();
    assert!(msg.contains("encoder.layers.2.self_attn.q_proj"), "{msg}");
    // A truncated file: the header promises bytes the file lacks.
    let bytes = std::fs::read(dir.join("clip_l.safetensors")).expect("read");
    let tmp = tempfile::tempdir().expect("tempdir");
    let cut = tmp.path().join("cut.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("write");
    let err = ClipCheckpoint::open(&cut, None).expect_err("truncated");
    assert!(err.to_string().contains("cut.safetensors"), "{err}");
    // A T5 config given as CLIP's.
    let err = ClipConfig::from_hf_json(&dir.join("configs/text_encoder_2/config.json"))
        .expect_err("T5 config");
    let msg = err.to_string();
    assert!(
        msg.contains("text_encoder_2/config.json") && msg.contains("hidden_size"),
        "{msg}"
    );
    let ckpt = fixture();
    if !have_gpu("clip_refuses_bad_checkpoints_and_ids") {
        return;
    }
    let (rt, model) = open(&ckpt.spec(1, ActDtype::F32), false);
    let mut clip = ClipText::new(&rt, &ckpt, 1, ActDtype::F32).expect("runner");
    let err = clip
        .encode(&rt, &model, &[49406, 49407])
        .expect_err("2 ids");
    assert!(err.to_string().contains("77"), "{err}");
    let mut ids = vec![49407; 77];
    ids[1] = 50000;
    let err = clip
        .encode(&rt, &model, &ids)
        .expect_err("id past the vocabulary");
    assert!(err.to_string().contains("50000"), "{err}");
}
