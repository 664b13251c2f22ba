//! A small Qwen2-style checkpoint made with the synth writer (q/k/v bias,
//! tied embeddings, f16 weights, the transformers 4 `rope_theta` key), run
//! on the GPU and checked against a plain f32 CPU forward written here.

use crate::llama_common::open;
use dynvram_models::llama::synth;
use dynvram_models::llama::{Checkpoint, Limits, LlamaConfig, argmax};
use dynvram_models::synth::{SynthDtype, SynthOptions};
use dynvram_test_support::gpu::{have_gpu, runtime};
use dynvram_test_support::safetensors::{self, Tensor, get};
use dynvram_test_support::tolerance::assert_close_rel;
use serde_json::json;

const REL: f32 = 1e-3;

pub(crate) fn config() -> serde_json::Value {
    json!({
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_act": "silu",
        "hidden_size": 64,
        "intermediate_size": 160,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 96,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000.0,
        "rope_scaling": null,
        "max_position_embeddings": 64,
        "tie_word_embeddings": true,
        "use_sliding_window": false,
        "sliding_window": 32,
        "torch_dtype": "float16"
    })
}

/// The plain f32 forward of transformers' Qwen2/Llama, no cache: logits `[seq, vocab]`.
struct Cpu<'a> {
    c: &'a LlamaConfig,
    w: &'a std::collections::HashMap<String, Tensor>,
}

impl Cpu<'_> {
    fn t(&self, name: &str) -> &[f32] {
        &get(self.w, name).values
    }

    /// `x [rows, k] · W[n, k]ᵀ + b`.
    fn linear(&self, layer: &str, x: &[f32], k: usize) -> Vec<f32> {
        let w = self.t(&format!("{layer}.weight"));
        let n = w.len() / k;
        let bias = self.w.get(&format!("{layer}.bias")).map(|b| &b.values);
        x.chunks(k)
            .flat_map(|row| {
                (0..n).map(move |j| {
                    let dot: f32 = row
                        .iter()
                        .zip(&w[j * k..(j + 1) * k])
                        .map(|(a, b)| a * b)
                        .sum();
                    dot + bias.map_or(0.0, |b| b[j])
                })
            })
            .collect()
    }

    fn rms_norm(&self, x: &[f32], w: &str) -> Vec<f32> {
        let w = self.t(w);
        x.chunks(w.len())
            .flat_map(|row| {
                let ms = row.iter().map(|v| v * v).sum::<f32>() / row.len() as f32;
                let r = 1.0 / (ms + self.c.rms_norm_eps).sqrt();
                row.iter()
                    .zip(w)
                    .map(move |(v, g)| g * (v * r))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// rotate_half RoPE on `[seq, heads · head_dim]`, in f64 angles.
    fn rope(&self, x: &mut [f32], heads: usize) {
        let d = self.c.head_dim;
        for (pos, row) in x.chunks_mut(heads * d).enumerate() {
            for head in row.chunks_mut(d) {
                for i in 0..d / 2 {
                    let f = 1.0 / f64::from(self.c.rope_theta).powf((2 * i) as f64 / d as f64);
                    let (s, c) = (pos as f64 * f).sin_cos();
                    let (a, b) = (f64::from(head[i]), f64::from(head[i + d / 2]));
                    head[i] = (a * c - b * s) as f32;
                    head[i + d / 2] = (b * c + a * s) as f32;
                }
            }
        }
    }

    fn forward(&self, ids: &[u32]) -> Vec<f32> {
        let c = self.c;
        let (h, d, nh, nkv) = (
            c.hidden_size,
            c.head_dim,
            c.num_attention_heads,
            c.num_key_value_heads,
        );
        let seq = ids.len();
        let emb = self.t("model.embed_tokens.weight");
        let mut x: Vec<f32> = ids
            .iter()
            .flat_map(|&i| emb[i as usize * h..(i as usize + 1) * h].to_vec())
            .collect();
        for l in 0..c.num_hidden_layers {
            let p = |s: &str| format!("model.layers.{l}.{s}");
            let n1 = self.rms_norm(&x, &p("input_layernorm.weight"));
            let mut q = self.linear(&p("self_attn.q_proj"), &n1, h);
            let mut k = self.linear(&p("self_attn.k_proj"), &n1, h);
            let v = self.linear(&p("self_attn.v_proj"), &n1, h);
            self.rope(&mut q, nh);
            self.rope(&mut k, nkv);
            let mut attn = vec![0f32; seq * nh * d];
            for hq in 0..nh {
                let hk = hq / (nh / nkv);
                for i in 0..seq {
                    let qi = &q[i * nh * d + hq * d..][..d];
                    let scores: Vec<f32> = (0..=i)
                        .map(|j| {
                            qi.iter()
                                .zip(&k[j * nkv * d + hk * d..][..d])
                                .map(|(a, b)| a * b)
                                .sum::<f32>()
                                / (d as f32).sqrt()
                        })
                        .collect();
                    let m = scores.iter().fold(f32::MIN, |a, &b| a.max(b));
                    let e: Vec<f32> = scores.iter().map(|s| (s - m).exp()).collect();
                    let z: f32 = e.iter().sum();
                    for (j, ej) in e.iter().enumerate() {
                        for t in 0..d {
                            attn[i * nh * d + hq * d + t] += ej / z * v[j * nkv * d + hk * d + t];
                        }
                    }
                }
            }
            let o = self.linear(&p("self_attn.o_proj"), &attn, nh * d);
            x.iter_mut().zip(o).for_each(|(a, b)| *a += b);
            let n2 = self.rms_norm(&x, &p("post_attention_layernorm.weight"));
            let g = self.linear(&p("mlp.gate_proj"), &n2, h);
            let u = self.linear(&p("mlp.up_proj"), &n2, h);
            let a: Vec<f32> = g
                .iter()
                .zip(&u)
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            let down = self.linear(&p("mlp.down_proj"), &a, c.intermediate_size);
            x.iter_mut().zip(down).for_each(|(a, b)| *a += b);
        }
        let n = self.rms_norm(&x, "model.norm.weight");
        self.linear("model.embed_tokens", &n, h)
    }
}

#[test]
fn qwen2_style_synth_matches_cpu_reference() {
    let test = "qwen2_style_synth_matches_cpu_reference";
    if !have_gpu(test) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = SynthOptions {
        dtype: SynthDtype::F16,
        seed: 42,
        ..SynthOptions::default()
    };
    let report =
        synth::write_checkpoint(dir.path(), &config(), opts, &mut |_, _| {}).expect("synth");
    assert_eq!(
        report.files.len(),
        3,
        "one safetensors file, config.json and generation_config.json: {:?}",
        report.files
    );
    let ckpt = Checkpoint::open(dir.path()).expect("opens");
    let weights = safetensors::read(&dir.path().join("model.safetensors"));
    matches_cpu(&ckpt, &weights);
}

/// `head_dim` given explicitly and different from hidden / heads (q and o
/// are 128 wide on a 64-wide residual, as Gemma-style and Qwen3 configs
/// have), read from shards through their index: the same logits as the CPU.
#[test]
fn explicit_head_dim_from_shards_matches_cpu_reference() {
    let test = "explicit_head_dim_from_shards_matches_cpu_reference";
    if !have_gpu(test) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = config();
    config["head_dim"] = json!(32);
    let opts = SynthOptions {
        dtype: SynthDtype::F16,
        seed: 43,
        layers: None,
        shard_bytes: 32 << 10,
    };
    synth::write_checkpoint(dir.path(), &config, opts, &mut |_, _| {}).expect("synth");
    assert!(dir.path().join("model.safetensors.index.json").is_file());
    let ckpt = Checkpoint::open(dir.path()).expect("opens");
    assert_eq!((ckpt.config.head_dim, ckpt.config.q_width()), (32, 128));
    let mut weights = std::collections::HashMap::new();
    for f in ckpt.files().files() {
        weights.extend(safetensors::read(f.path()));
    }
    assert_eq!(
        weights["model.layers.0.self_attn.q_proj.weight"].shape,
        [128, 64]
    );
    matches_cpu(&ckpt, &weights);
}

/// Prompt logits and six greedy steps of `ckpt` on the GPU against [`Cpu`].
fn matches_cpu(ckpt: &Checkpoint, weights: &std::collections::HashMap<String, Tensor>) {
    let c = &ckpt.config;
    assert!(c.tie_word_embeddings && c.qkv_bias && !c.o_bias, "{c:?}");
    assert_eq!(c.rope_theta, 1000.0);
    assert_eq!(c.sliding_window, None, "use_sliding_window is false");
    assert!(weights.contains_key("model.layers.1.self_attn.v_proj.bias"));
    assert!(
        !weights.contains_key("lm_head.weight")
            && !weights.contains_key("model.layers.0.self_attn.o_proj.bias")
    );
    let cpu = Cpu { c, w: weights };

    let prompt = [5u32, 17, 90, 3, 44, 61, 8];
    let new = 6;
    let limits = Limits {
        max_seq: prompt.len() + new,
        max_rows: prompt.len(),
    };
    let rt = runtime(None);
    let (model, mut llama) = open(&rt, ckpt, limits);
    let f = llama.forward(&rt, &model, &prompt, 0).expect("forward");
    assert_close_rel("qwen2 prompt logits", &f.logits, &cpu.forward(&prompt), REL);

    let g = llama
        .generate(&rt, &model, &prompt, new, &[], false, &mut |_| {})
        .expect("generate");
    let mut seq = prompt.to_vec();
    let vocab = c.vocab_size;
    for (s, (&token, logits)) in g.tokens.iter().zip(&g.step_logits).enumerate() {
        let cpu_logits = cpu.forward(&seq);
        let last = &cpu_logits[(seq.len() - 1) * vocab..];
        assert_close_rel(&format!("qwen2 step {s}"), logits, last, REL);
        assert_eq!(token, argmax(last), "greedy token {s}");
        seq.push(token);
    }
}

#[test]
fn synth_shards_with_an_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = SynthOptions {
        dtype: SynthDtype::Bf16,
        seed: 1,
        layers: Some(3),
        shard_bytes: 64 << 10,
    };
    let report =
        synth::write_checkpoint(dir.path(), &config(), opts, &mut |_, _| {}).expect("synth");
    assert!(dir.path().join("model.safetensors.index.json").is_file());
    assert!(report.files.len() > 3, "several shards: {:?}", report.files);
    let ckpt = Checkpoint::open(dir.path()).expect("sharded checkpoint opens");
    assert_eq!(ckpt.config.num_hidden_layers, 3);
    assert_eq!(ckpt.weight_bytes(), report.bytes);
    // Same seed, same values whatever the sharding.
    let single = tempfile::tempdir().expect("tempdir");
    let opts1 = SynthOptions {
        shard_bytes: u64::MAX,
        ..opts
    };
    synth::write_checkpoint(single.path(), &config(), opts1, &mut |_, _| {}).expect("synth");
    let a = safetensors::read(&single.path().join("model.safetensors"));
    let name = "model.layers.2.mlp.down_proj.weight";
    let shard = ckpt
        .files()
        .path_of(name)
        .map(|p| p.to_owned())
        .expect("in a shard");
    let b = safetensors::read(&shard);
    assert_eq!(a[name].values, b[name].values);
}

#[test]
fn config_spellings_and_unsupported_scaling() {
    let mut v = config();
    v["rope_theta"] = json!(null);
    v["rope_parameters"] = json!({"rope_theta": 500000.0, "rope_type": "default"});
    assert_eq!(
        LlamaConfig::from_json(&v).expect("new spelling").rope_theta,
        500_000.0
    );
    v["rope_parameters"] = json!({"rope_theta": 500000.0, "rope_type": "yarn", "factor": 4.0});
    let e = LlamaConfig::from_json(&v).expect_err("yarn is not implemented");
    assert!(e.contains("yarn"), "{e}");
    v["rope_parameters"] = json!(null);
    v["rope_theta"] = json!(10000.0);
    v["rope_scaling"] = json!({"type": "linear", "factor": 2.0});
    let c = LlamaConfig::from_json(&v).expect("linear scaling");
    let base = dynvram_runtime::ops::rope::inv_freq(10000.0, c.head_dim);
    assert_eq!(c.inv_freq()[3], base[3] / 2.0);
    v["rope_scaling"] = json!(null);
    for bad in [json!(0.0), json!(-10000.0), json!(1e300)] {
        v["rope_theta"] = bad.clone();
        let e = LlamaConfig::from_json(&v).expect_err("bad rope_theta");
        assert!(e.contains("rope_theta"), "{bad}: {e}");
    }
    v["rope_theta"] = json!(10000.0);
    v["model_type"] = json!("gemma");
    assert!(
        LlamaConfig::from_json(&v)
            .expect_err("gemma")
            .contains("gemma")
    );
}
