//! T5 encoder end to end: the tiny-flux-pipeline fixture's T5 v1.1
//! (`t5xxl_fp16.safetensors`, f16, HF keys, config inferred from the
//! shapes) against diffusers' `t5_last_hidden_state` (within 1e-3 of its
//! max), resident and streamed under a budget; the same file in ComfyUI's
//! scaled fp8 form against its dequantized weights and the f16 output;
//! the `comfy_quant` int8 and fp8 forms (written by the quantizer) against
//! the f16 output, streamed; f16 activations; relative-position buckets
//! against HF's formula; a synthetic encoder whose inner width differs
//! from d_model, over 150 tokens, against an f64 CPU port of HF's T5; clear errors for a CLIP file given as T5, a config that
//! does not match and bad ids.

use std::collections::HashMap;

use dynvram_models::llama::synth::SynthDtype;
use dynvram_models::t5::{T5Checkpoint, T5Config, T5Encoder, T5Error, synth};
use dynvram_models::tokenize::T5Tokenizer;
use dynvram_runtime::ActDtype;
use dynvram_runtime::quant::quantize::quantize_float8_e4m3fn_weight;
use dynvram_runtime::quant::reference::{e4m3fn_to_f32, f32_to_e4m3fn};
use dynvram_runtime::quant::{QuantizeOptions, TargetFormat, quantize_file};
use dynvram_test_support::gpu::{have_gpu, needs_f16, test_gpu};
use dynvram_test_support::safetensors::{self, Dtype, Tensor};
use dynvram_test_support::tolerance::{assert_close_rel, cosine, max_abs};

use crate::text_common::{REL, open, pipeline, plan_under, reference, sparse_f16_file};

/// The fixture's T5 ids and the prompts' length.
fn fixture_ids() -> (Vec<u32>, usize) {
    let t = safetensors::get(&reference(), "t5_input_ids").clone();
    (t.ids_u32(), t.shape[1])
}

/// One pass of `ckpt` over `ids` (`len` per prompt).
fn encode(ckpt: &T5Checkpoint, ids: &[u32], len: usize, streamed: bool) -> Vec<f32> {
    let batch = ids.len() / len;
    let (rt, model) = open(&ckpt.spec(batch, len, ActDtype::F32), streamed);
    let mut t5 = T5Encoder::new(&rt, ckpt, batch, len, ActDtype::F32).expect("runner");
    let out = t5.encode(&rt, &model, ids).expect("encode");
    if streamed {
        assert!(out.stats.streamed_bytes > 0, "{:?}", out.stats);
    }
    out.hidden
}

fn check_fixture(test: &str, streamed: bool) {
    let dir = pipeline();
    let ckpt = T5Checkpoint::open(&dir.join("t5xxl_fp16.safetensors"), None).expect("t5 opens");
    let given = T5Config::from_hf_json(&dir.join("configs/text_encoder_2/config.json"))
        .expect("config.json");
    assert!(ckpt.inferred);
    assert_eq!(ckpt.config, given, "inferred from the shapes");
    if !have_gpu(test) {
        return;
    }
    let (ids, len) = fixture_ids();
    let got = encode(&ckpt, &ids, len, streamed);
    let reference = reference();
    let want = safetensors::get(&reference, "t5_last_hidden_state");
    assert_close_rel("t5_last_hidden_state", &got, &want.values, REL);
}

#[test]
fn t5_matches_diffusers_resident() {
    check_fixture("t5_matches_diffusers_resident", false);
}

#[test]
fn t5_matches_diffusers_streamed() {
    check_fixture("t5_matches_diffusers_streamed", true);
}

#[test]
fn t5_ignores_embed_tokens_and_runs_in_f16() {
    let test = "t5_ignores_embed_tokens_and_runs_in_f16";
    let dir = pipeline();
    let mut tensors = safetensors::read(&dir.join("t5xxl_fp16.safetensors"));
    // Files saved from a T5EncoderModel hold the tied table twice.
    let shared = tensors["shared.weight"].clone();
    tensors.insert("encoder.embed_tokens.weight".into(), shared);
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("t5.safetensors");
    safetensors::write(&path, tensors.iter().map(|(n, t)| (n.clone(), t)));
    let ckpt = T5Checkpoint::open(&path, None).expect("opens");
    assert_eq!(ckpt.names.embedding, "shared.weight");
    if test_gpu(test, needs_f16).is_none() {
        return;
    }
    let (ids, len) = fixture_ids();
    let (rt, model) = open(&ckpt.spec(2, len, ActDtype::F16), false);
    let mut t5 = T5Encoder::new(&rt, &ckpt, 2, len, ActDtype::F16).expect("runner");
    let out = t5.encode(&rt, &model, &ids).expect("encode");
    let reference = reference();
    let want = safetensors::get(&reference, "t5_last_hidden_state");
    let cos = cosine(&out.hidden, &want.values);
    assert!(cos >= 0.999, "cosine {cos}");
}

#[test]
fn t5_xxl_shapes_infer_back_and_stream_under_2_gib() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("t5xxl_fp16.safetensors");
    sparse_f16_file(&path, &synth::tensors(&T5Config::t5_xxl()));
    let ckpt = T5Checkpoint::open(&path, None).expect("opens");
    assert_eq!(ckpt.config, T5Config::t5_xxl());
    let spec = ckpt.spec(1, 512, ActDtype::F16);
    // 9.5 GB of weights (263 MB of them the host-read table, the rest
    // streamed by half blocks) under 2 GiB.
    let usable = 2 << 30;
    let (streamed, weights, taken) = plan_under(&spec, usable);
    eprintln!("T5-XXL under 2 GiB: {streamed} of {weights} B streamed, {taken} B taken");
    assert!(weights > 9_000_000_000, "{weights}");
    assert!(streamed * 4 > weights * 3, "{streamed} of {weights}");
    assert!(taken <= usable, "{taken}");
}

#[test]
fn t5_buckets_follow_hf() {
    let c = T5Config::t5_xxl();
    // (key − query, bucket): exact below 8 each way, log-spaced to 128.
    for (r, want) in [
        (0, 0),
        (-1, 1),
        (-7, 7),
        (1, 17),
        (7, 23),
        (8, 24),
        (-8, 8),
        (15, 25),
        (16, 26),
        (-16, 10),
        (32, 28),
        (64, 30),
        (127, 31),
        (128, 31),
        (-511, 15),
    ] {
        assert_eq!(c.bucket(r), want, "r = {r}");
    }
}

#[test]
fn t5_scaled_fp8_matches_f16() {
    let test = "t5_scaled_fp8_matches_f16";
    let dir = pipeline();
    let src = safetensors::read(&dir.join("t5xxl_fp16.safetensors"));
    // ComfyUI's scaled fp8 form: every linear e4m3fn with a per-tensor
    // `scale_weight`, the `scaled_fp8` marker; embeddings and norms kept.
    let mut out: HashMap<String, Tensor> = HashMap::new();
    // The same weights as f32 (codes × scale): what the fp8 kernels must
    // compute, to float rounding.
    let mut dequantized: HashMap<String, Tensor> = HashMap::new();
    for (name, t) in &src {
        let linear = name.contains(".SelfAttention.") && !name.contains("relative_attention_bias")
            || name.contains(".DenseReluDense.");
        if linear {
            let (codes, scale) = quantize_float8_e4m3fn_weight(&t.values);
            let values: Vec<f32> = codes.iter().map(|&b| e4m3fn_to_f32(b) * scale).collect();
            dequantized.insert(name.clone(), Tensor::from_f32(t.shape.clone(), &values));
            out.insert(
                name.clone(),
                Tensor::new(Dtype::F8_E4M3, t.shape.clone(), codes),
            );
            let layer = name.trim_end_matches(".weight");
            out.insert(
                format!("{layer}.scale_weight"),
                Tensor::from_f32(vec![], &[scale]),
            );
        } else {
            out.insert(name.clone(), t.clone());
            dequantized.insert(name.clone(), t.clone());
        }
    }
    out.insert(
        "scaled_fp8".into(),
        Tensor::new(Dtype::F8_E4M3, vec![0], vec![]),
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("t5xxl_fp8_e4m3fn_scaled.safetensors");
    safetensors::write(&path, out.iter().map(|(n, t)| (n.clone(), t)));
    let fp8 = T5Checkpoint::open(&path, None).expect("scaled fp8 opens");
    let deq_path = tmp.path().join("dequantized.safetensors");
    safetensors::write(&deq_path, dequantized.iter().map(|(n, t)| (n.clone(), t)));
    let deq = T5Checkpoint::open(&deq_path, None).expect("dequantized opens");
    if !have_gpu(test) {
        return;
    }
    let f16 = T5Checkpoint::open(&dir.join("t5xxl_fp16.safetensors"), None).expect("f16");
    let (ids, len) = fixture_ids();
    let got = encode(&fp8, &ids, len, true);
    assert_close_rel(
        "scaled fp8 vs its f32 weights",
        &got,
        &encode(&deq, &ids, len, false),
        REL,
    );
    // Against the f16 model: e4m3 keeps 3 mantissa bits (≤ 6.25 % per
    // weight), which two random layers of width 16 amplify to ~13 % of the
    // output's max (measured); the outputs still point the same way.
    let want = encode(&f16, &ids, len, false);
    let diff = got
        .iter()
        .zip(&want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    let cos = cosine(&got, &want);
    eprintln!(
        "{test}: max |fp8 − f16| = {diff} of max {}, cosine {cos}",
        max_abs(&want)
    );
    assert!(diff <= 0.2 * max_abs(&want), "max diff {diff}");
    assert!(cos >= 0.99, "cosine {cos}");
}

#[test]
fn t5_fp8_tables_cast_at_scale_one() {
    let test = "t5_fp8_tables_cast_at_scale_one";
    // The embedding and position tables cast to e4m3fn without scales
    // (ComfyUI multiplies by 1). Bare fp8 *linears* are refused at open:
    // the float kernels need a weight scale.
    let src = safetensors::read(&pipeline().join("t5xxl_fp16.safetensors"));
    let (mut fp8, mut cast) = (HashMap::new(), HashMap::new());
    for (name, t) in &src {
        if name == "shared.weight" || name.ends_with("relative_attention_bias.weight") {
            let codes: Vec<u8> = t.values.iter().map(|&v| f32_to_e4m3fn(v)).collect();
            let values: Vec<f32> = codes.iter().map(|&b| e4m3fn_to_f32(b)).collect();
            cast.insert(name.clone(), Tensor::from_f32(t.shape.clone(), &values));
            fp8.insert(
                name.clone(),
                Tensor::new(Dtype::F8_E4M3, t.shape.clone(), codes),
            );
        } else {
            cast.insert(name.clone(), t.clone());
            fp8.insert(name.clone(), t.clone());
        }
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let [fp8_path, cast_path] =
        ["fp8", "cast"].map(|n| tmp.path().join(format!("{n}.safetensors")));
    safetensors::write(&fp8_path, fp8.iter().map(|(n, t)| (n.clone(), t)));
    safetensors::write(&cast_path, cast.iter().map(|(n, t)| (n.clone(), t)));
    let fp8 = T5Checkpoint::open(&fp8_path, None).expect("fp8 opens");
    let cast = T5Checkpoint::open(&cast_path, None).expect("cast opens");
    let mut bare = HashMap::new();
    let q = "encoder.block.1.layer.0.SelfAttention.q.weight";
    for (name, t) in &src {
        let t = if name == q {
            let codes = t.values.iter().map(|&v| f32_to_e4m3fn(v)).collect();
            Tensor::new(Dtype::F8_E4M3, t.shape.clone(), codes)
        } else {
            t.clone()
        };
        bare.insert(name.clone(), t);
    }
    let bare_path = tmp.path().join("bare.safetensors");
    safetensors::write(&bare_path, bare.iter().map(|(n, t)| (n.clone(), t)));
    let err = T5Checkpoint::open(&bare_path, None).expect_err("bare fp8 linear");
    let msg = err.to_string();
    assert!(
        msg.contains("bare.safetensors")
            && msg.contains("SelfAttention.q")
            && msg.contains("without a scale"),
        "{msg}"
    );
    if !have_gpu(test) {
        return;
    }
    let (ids, len) = fixture_ids();
    let want = encode(&cast, &ids, len, false);
    assert_close_rel(
        "fp8 vs its values",
        &encode(&fp8, &ids, len, false),
        &want,
        REL,
    );
}

#[test]
fn t5_comfy_quant_layers_run() {
    let test = "t5_comfy_quant_layers_run";
    let dir = pipeline();
    let src = dir.join("t5xxl_fp16.safetensors");
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut quantized = Vec::new();
    for (name, target, min_cos) in [
        ("int8", TargetFormat::Int8Tensorwise, 0.995),
        // convrot_w4a4 needs in_features a multiple of 64: the fixture's
        // are 16 and 32.
        ("fp8", TargetFormat::Float8E4m3fn, 0.99),
    ] {
        let path = tmp.path().join(format!("t5_{name}.safetensors"));
        let opts =
            QuantizeOptions::new(target, Some(r"SelfAttention\.[qkvo]$|DenseReluDense"), None)
                .expect("options");
        let report = quantize_file(&src, &path, &opts, &mut |_, _, _| {}).expect("quantizes");
        assert_eq!(
            report.quantized.len(),
            14,
            "{name}: 7 linears per block: {:?}",
            report.skipped
        );
        let ckpt = T5Checkpoint::open(&path, None).expect("quantized T5 opens");
        quantized.push((name, ckpt, min_cos));
    }
    if !have_gpu(test) {
        return;
    }
    let f16 = T5Checkpoint::open(&src, None).expect("f16");
    let (ids, len) = fixture_ids();
    let want = encode(&f16, &ids, len, false);
    for (name, ckpt, min_cos) in &quantized {
        let got = encode(ckpt, &ids, len, true);
        let cos = cosine(&got, &want);
        eprintln!("{test}: {name} cosine {cos} to the f16 output");
        assert!(cos >= *min_cos, "{name}: cosine {cos}");
        assert_ne!(got, want, "{name}: quantized weights changed nothing");
    }
}

/// `x · Wᵀ` for `x` `[rows, k]` and `w` `[n, k]`, in f64.
fn matmul(x: &[f64], w: &[f32], k: usize) -> Vec<f64> {
    x.chunks(k)
        .flat_map(|row| {
            w.chunks(k)
                .map(move |wr| row.iter().zip(wr).map(|(a, &b)| a * f64::from(b)).sum())
        })
        .collect()
}

/// `x · 1/√(mean(x²) + eps) · w` per row, in f64.
fn rms(x: &[f64], w: &[f32], eps: f64) -> Vec<f64> {
    let d = w.len();
    x.chunks(d)
        .flat_map(|row| {
            let r = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / d as f64 + eps).sqrt();
            row.iter().zip(w).map(move |(v, &g)| v * r * f64::from(g))
        })
        .collect()
}

/// The T5 v1.1 encoder of HF's `modeling_t5`, in f64, over one prompt.
fn t5_reference(t: &HashMap<String, Tensor>, c: &T5Config, ids: &[u32]) -> Vec<f32> {
    let w = |n: &str| &safetensors::get(t, n).values;
    let (l, d, hd, nh, f) = (ids.len(), c.d_model, c.d_kv, c.num_heads, c.d_ff);
    let inner = nh * hd;
    let eps = f64::from(c.layer_norm_epsilon);
    let shared = w("shared.weight");
    let mut x: Vec<f64> = ids
        .iter()
        .flat_map(|&id| shared[id as usize * d..][..d].iter().map(|&v| f64::from(v)))
        .collect();
    let rab = w("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
    for b in 0..c.num_layers {
        let p = |rest: &str| format!("encoder.block.{b}.layer.{rest}");
        let h = rms(&x, w(&p("0.layer_norm.weight")), eps);
        let [q, k, v] =
            ["q", "k", "v"].map(|n| matmul(&h, w(&p(&format!("0.SelfAttention.{n}.weight"))), d));
        let mut attn = vec![0f64; l * inner];
        for head in 0..nh {
            for i in 0..l {
                let s: Vec<f64> = (0..l)
                    .map(|j| {
                        let dot: f64 = (0..hd)
                            .map(|e| q[i * inner + head * hd + e] * k[j * inner + head * hd + e])
                            .sum();
                        let bucket = c.bucket(j as i64 - i as i64) as usize;
                        dot + f64::from(rab[bucket * nh + head])
                    })
                    .collect();
                let m = s.iter().copied().fold(f64::MIN, f64::max);
                let e: Vec<f64> = s.iter().map(|v| (v - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for dd in 0..hd {
                    attn[i * inner + head * hd + dd] = (0..l)
                        .map(|j| e[j] * v[j * inner + head * hd + dd])
                        .sum::<f64>()
                        / z;
                }
            }
        }
        let o = matmul(&attn, w(&p("0.SelfAttention.o.weight")), inner);
        x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
        let h = rms(&x, w(&p("1.layer_norm.weight")), eps);
        let g = matmul(&h, w(&p("1.DenseReluDense.wi_0.weight")), d);
        let u = matmul(&h, w(&p("1.DenseReluDense.wi_1.weight")), d);
        let k0 = (2.0 / std::f64::consts::PI).sqrt();
        let gu: Vec<f64> = g
            .iter()
            .zip(&u)
            .map(|(&a, &b)| 0.5 * a * (1.0 + (k0 * (a + 0.044715 * a * a * a)).tanh()) * b)
            .collect();
        let o = matmul(&gu, w(&p("1.DenseReluDense.wo.weight")), f);
        x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
    }
    rms(&x, w("encoder.final_layer_norm.weight"), eps)
        .into_iter()
        .map(|v| v as f32)
        .collect()
}

#[test]
fn t5_matches_a_cpu_port_with_an_inner_width_unlike_d_model() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("t5.safetensors");
    let config = T5Config {
        d_model: 32,
        d_kv: 8,
        d_ff: 48,
        num_layers: 2,
        num_heads: 3,
        vocab_size: 32128,
        ..T5Config::t5_xxl()
    };
    synth::write(&path, &config, SynthDtype::Bf16, 3).expect("synth");
    let ckpt = T5Checkpoint::open(&path, None).expect("opens");
    assert_eq!(ckpt.config, config);
    let xxl = T5Config::t5_xxl();
    assert_eq!(
        (xxl.inner_dim(), xxl.d_model, xxl.num_layers),
        (4096, 4096, 24)
    );
    if !have_gpu("t5_matches_a_cpu_port_with_an_inner_width_unlike_d_model") {
        return;
    }
    // 150 tokens: relative positions past max_distance 128 share a bucket.
    let tok = T5Tokenizer::builtin().expect("tokenizer");
    let words = ["a red hat"; 60].join(" ");
    let tokens = tok.encode(&words, 150).expect("ids");
    assert!(tokens.truncated);
    let got = encode(&ckpt, &tokens.ids, 150, false);
    let want = t5_reference(&safetensors::read(&path), &config, &tokens.ids);
    assert_close_rel("T5 vs the CPU port", &got, &want, REL);
}

#[test]
fn t5_refuses_bad_checkpoints_and_ids() {
    let dir = pipeline();
    let err = T5Checkpoint::open(&dir.join("clip_l.safetensors"), None).expect_err("CLIP as T5");
    let msg = err.to_string();
    assert!(matches!(err, T5Error::Weights { .. }), "{msg}");
    assert!(
        msg.contains("clip_l.safetensors") && msg.contains("CLIP"),
        "{msg}"
    );
    let mut config =
        T5Config::from_hf_json(&dir.join("configs/text_encoder_2/config.json")).expect("config");
    config.num_heads = 4;
    let err =
        T5Checkpoint::open(&dir.join("t5xxl_fp16.safetensors"), Some(config)).expect_err("4 heads");
    let msg = err.to_string();
    assert!(
        msg.contains("relative_attention_bias") && msg.contains("[32, 4]"),
        "{msg}"
    );
    let err = T5Config::from_hf_json(&dir.join("configs/text_encoder/config.json"))
        .expect_err("CLIP config");
    let msg = err.to_string();
    assert!(
        msg.contains("text_encoder/config.json") && msg.contains("d_model"),
        "{msg}"
    );
    let path = dir.join("t5xxl_fp16.safetensors");
    let ckpt = T5Checkpoint::open(&path, None).expect("opens");
    if !have_gpu("t5_refuses_bad_checkpoints_and_ids") {
        return;
    }
    let (rt, model) = open(&ckpt.spec(1, 4, ActDtype::F32), false);
    let mut t5 = T5Encoder::new(&rt, &ckpt, 1, 4, ActDtype::F32).expect("runner");
    let err = t5.encode(&rt, &model, &[1, 0]).expect_err("2 ids");
    assert!(err.to_string().contains("prompts of 4"), "{err}");
    let err = t5
        .encode(&rt, &model, &[5, 40000, 1, 0])
        .expect_err("past the vocabulary");
    assert!(err.to_string().contains("40000"), "{err}");
}
