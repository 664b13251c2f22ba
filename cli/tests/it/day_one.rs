//! The flows a new user runs on day one (issue 17), end to end through the
//! binary on synthesized checkpoints: sampling with a seed, `--chat`, EOS
//! from generation_config.json, the context check, quiet colourless logs,
//! `quantize DIR OUT` then `generate OUT`, and `plan DIR` with no GPU.

use std::path::Path;

use crate::common::{dynvram, generate, synth, synth_tiny};
use dynvram_models::llama::{ChatTemplate, Message, TextTokenizer};

fn report(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).expect("json report")
}

fn tokens(r: &serde_json::Value) -> Vec<u32> {
    serde_json::from_value(r["tokens"].clone()).expect("tokens")
}

/// Greedy is the default and repeats (pipelined, or with `--sync-decode`
/// not: the same tokens); `--temperature` samples on the CPU, the same
/// tokens for the same `--seed`, others for another seed.
#[test]
fn sampling_is_seeded_and_greedy_stays_default() {
    let test = "sampling_is_seeded_and_greedy_stays_default";
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    synth_tiny(dir);
    let base = [
        "--json",
        "--prompt-ids",
        "5,6,7",
        "--max-new-tokens",
        "12",
        "--ignore-eos",
    ];
    let Some(out) = generate(test, dir, &base) else {
        return;
    };
    let greedy = report(&out);
    assert_eq!(greedy["sampling"]["temperature"], 0.0);
    assert_eq!(greedy["decode_loop"], "pipelined", "resident greedy");
    let again = report(&generate(test, dir, &base).expect("ran"));
    assert_eq!(tokens(&greedy), tokens(&again));
    let sync = [&base[..], &["--sync-decode"]].concat();
    let sync = report(&generate(test, dir, &sync).expect("ran"));
    assert_eq!(sync["decode_loop"], "sync");
    assert_eq!(tokens(&sync), tokens(&greedy), "--sync-decode, same tokens");
    assert_eq!(sync["decode"]["passes"], greedy["decode"]["passes"]);
    let sampled = |seed: &str| {
        let mut args = base.to_vec();
        args.extend(["--temperature", "5", "--top-k", "500", "--seed", seed]);
        tokens(&report(&generate(test, dir, &args).expect("ran")))
    };
    let (a, b, c) = (sampled("1"), sampled("1"), sampled("2"));
    assert_eq!(a, b, "same seed, same tokens");
    assert_ne!(a, c, "another seed, other tokens");
    assert_ne!(a, tokens(&greedy), "a hot temperature leaves argmax");
}

/// Sampling flags are checked before any work, naming the flag.
#[test]
fn bad_sampling_flags_are_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for (args, want) in [
        (vec!["--top-p", "1.5", "--temperature", "1"], "--top-p 1.5"),
        (vec!["--temperature=-1"], "--temperature -1"),
        (vec!["--top-k", "5"], "--temperature above 0"),
    ] {
        let out = dynvram()
            .arg("generate")
            .arg(tmp.path())
            .args(["--prompt-ids", "1"])
            .args(&args)
            .output()
            .expect("generate");
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}

/// `--chat` renders the prompt as one user turn of tokenizer_config.json's
/// template (with the assistant header) and feeds exactly those ids.
#[test]
fn chat_wraps_the_prompt_in_the_template() {
    let test = "chat_wraps_the_prompt_in_the_template";
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    synth_tiny(dir);
    let rendered = ChatTemplate::open(dir)
        .expect("template")
        .render(&[Message::user("hello there")], true)
        .expect("render");
    assert_eq!(rendered, "<s><|user|>\nhello there</s>\n<|assistant|>\n");
    let tok = TextTokenizer::open(dir).expect("tokenizer");
    let want = tok.encode_plain(&rendered).expect("encode");
    assert_eq!(want[0], 1, "the template's <s> is the BOS id, once");
    assert_eq!(want.iter().filter(|&&i| i == 1).count(), 1, "{want:?}");
    let args = [
        "--json",
        "--chat",
        "--prompt",
        "hello there",
        "--max-new-tokens",
        "3",
    ];
    let Some(out) = generate(test, dir, &args) else {
        return;
    };
    let r = report(&out);
    let prompt: Vec<u32> = serde_json::from_value(r["prompt"].clone()).expect("prompt");
    assert_eq!(prompt, want);
    assert_eq!(r["chat"], true);
    let eos: Vec<u32> = serde_json::from_value(r["eos"].clone()).expect("eos");
    assert_eq!(eos, [2], "generation_config's id, and </s> is the same id");
}

/// generation_config.json's `eos_token_id` (here a list) ends generation by
/// default; `--eos` overrides it and `--ignore-eos` turns it off.
#[test]
fn eos_from_generation_config_stops_and_eos_flag_overrides() {
    let test = "eos_from_generation_config_stops_and_eos_flag_overrides";
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    synth_tiny(dir);
    let base = ["--json", "--prompt-ids", "9,10,11", "--max-new-tokens", "6"];
    let mut free = base.to_vec();
    free.push("--ignore-eos");
    let Some(out) = generate(test, dir, &free) else {
        return;
    };
    let all = tokens(&report(&out));
    assert_eq!(all.len(), 6);
    let stop = all[2];
    let first = all.iter().position(|&t| t == stop).expect("there");
    std::fs::write(
        dir.join("generation_config.json"),
        format!("{{\"eos_token_id\": [1023, {stop}]}}"),
    )
    .expect("write generation_config");
    let r = report(&generate(test, dir, &base).expect("ran"));
    assert_eq!(tokens(&r), all[..=first], "stops after the first EOS id");
    assert_eq!(r["stopped_at_eos"], true);
    let mut explicit = base.to_vec();
    explicit.extend(["--eos", "1023"]);
    let r = report(&generate(test, dir, &explicit).expect("ran"));
    if !all.contains(&1023) {
        assert_eq!(tokens(&r), all, "--eos replaces the config's ids");
        assert_eq!(r["stopped_at_eos"], false);
    }
}

/// Prompt + --max-new-tokens past max_position_embeddings is refused up
/// front, naming both numbers (no GPU needed to see it).
#[test]
fn context_overflow_names_both_numbers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    synth_tiny(dir);
    let out = dynvram()
        .arg("generate")
        .arg(dir)
        .args(["--prompt-ids", "1,2,3", "--max-new-tokens", "510"])
        .output()
        .expect("generate");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("513")
            && stderr.contains("512")
            && stderr.contains("max_position_embeddings"),
        "{stderr}"
    );
}

/// Generated text alone on stdout's first line; no INFO lines and no ANSI
/// colours on a piped stderr by default; `-v` brings the INFO lines back.
#[test]
fn logs_stay_quiet_and_colourless_in_pipes() {
    let test = "logs_stay_quiet_and_colourless_in_pipes";
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    synth_tiny(dir);
    let args = ["--prompt", "once upon a time", "--max-new-tokens", "4"];
    let Some(out) = generate(test, dir, &args) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("INFO"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("generated"))
        .expect("a summary line");
    assert!(
        summary.contains("prefill") && summary.contains("decode") && summary.contains("tokens/s"),
        "{summary}"
    );
    let mut verbose = vec!["-v"];
    verbose.extend(args);
    let out = generate(test, dir, &verbose).expect("ran");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("INFO"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}

/// The names and dtypes of a safetensors file's tensors.
fn header(path: &Path) -> serde_json::Map<String, serde_json::Value> {
    let bytes = std::fs::read(path).expect("read");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let v: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    v.as_object().expect("object").clone()
}

/// A sharded model folder quantized into a folder (shards, index, config
/// and tokenizer files copied, embeddings and norms kept in high
/// precision), which `generate` then runs.
#[test]
fn quantize_a_sharded_model_dir_then_generate() {
    let test = "quantize_a_sharded_model_dir_then_generate";
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("model");
    let out_dir = tmp.path().join("quantized");
    synth(
        &dir,
        &[
            "--like",
            "tiny",
            "--layers",
            "2",
            "--tokenizer",
            "--shard-gib",
            "0.0005",
        ],
    );
    assert!(dir.join("model.safetensors.index.json").is_file());
    let out = dynvram()
        .args(["--json", "quantize"])
        .arg(&dir)
        .arg(&out_dir)
        .args(["--format", "int8_tensorwise"])
        .output()
        .expect("quantize");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(r["quantized"], 14, "7 linears in each of 2 layers: {r}");
    let shards = r["shards"].as_array().expect("shards").len();
    assert!(shards > 1, "{r}");
    for f in [
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "model.safetensors.index.json",
    ] {
        assert!(out_dir.join(f).is_file(), "{f} in the output");
    }
    let index: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out_dir.join("model.safetensors.index.json")).expect("index"),
    )
    .expect("index json");
    let map = index["weight_map"].as_object().expect("weight_map");
    let shard_of = |name: &str| {
        let file = map[name].as_str().expect("a shard name");
        header(&out_dir.join(file))
    };
    let q = "model.layers.1.mlp.down_proj.weight";
    assert_eq!(shard_of(q)[q]["dtype"], "I8");
    assert!(map.contains_key("model.layers.1.mlp.down_proj.comfy_quant"));
    for kept in [
        "model.embed_tokens.weight",
        "lm_head.weight",
        "model.norm.weight",
        "model.layers.0.input_layernorm.weight",
    ] {
        assert_eq!(shard_of(kept)[kept]["dtype"], "BF16", "{kept} stays bf16");
    }
    // No temp folder left beside the output.
    let names: Vec<String> = std::fs::read_dir(tmp.path())
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");

    let args = [
        "--json",
        "--prompt",
        "the quick brown fox",
        "--max-new-tokens",
        "3",
    ];
    let Some(out) = generate(test, &out_dir, &args) else {
        return;
    };
    let g = report(&out);
    assert_eq!(tokens(&g).len(), 3, "{g}");
    assert!(g["text"].is_string());
}

/// A quantize that fails part-way (a NaN in the last shard's weights)
/// leaves neither the output folder nor a temp folder behind.
#[test]
fn a_failed_model_quantize_leaves_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("model");
    let out_dir = tmp.path().join("quantized");
    synth(
        &dir,
        &[
            "--like",
            "tiny",
            "--layers",
            "2",
            "--shard-gib",
            "0.0005",
            "--dtype",
            "f32",
        ],
    );
    // The last shard holding a *_proj weight: a NaN in its first element.
    let index: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join("model.safetensors.index.json")).expect("index"),
    )
    .expect("json");
    let (name, shard) = index["weight_map"]
        .as_object()
        .expect("map")
        .iter()
        .filter(|(n, _)| n.ends_with("_proj.weight"))
        .max_by_key(|(_, s)| s.as_str().unwrap_or("").to_owned())
        .map(|(n, s)| (n.clone(), s.as_str().expect("str").to_owned()))
        .expect("a proj weight");
    let path = dir.join(&shard);
    let h = header(&path);
    let n = u64::from_le_bytes(
        std::fs::read(&path).expect("read")[..8]
            .try_into()
            .expect("8"),
    ) as usize;
    let at = 8 + n + h[&name]["data_offsets"][0].as_u64().expect("offset") as usize;
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    std::fs::write(&path, bytes).expect("write");
    let out = dynvram()
        .arg("quantize")
        .arg(&dir)
        .arg(&out_dir)
        .args(["--format", "float8_e4m3fn"])
        .output()
        .expect("quantize");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&name) && stderr.contains("NaN"), "{stderr}");
    let names: Vec<String> = std::fs::read_dir(tmp.path())
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["model"], "nothing but the input is left");
}

/// `plan DIR --vram-budget` on a model folder, and on its index, with no
/// GPU adapter reachable at all: resident and streamed weights, bytes per
/// token and a predicted speed; an explicit budget loses no reserve.
#[test]
fn plan_a_model_dir_without_any_gpu() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    synth(dir, &["--like", "tiny", "--shard-gib", "0.002"]);
    let plan = |args: &[&str]| {
        dynvram()
            // Nothing to find: a backend this machine has no driver for,
            // and no Vulkan ICDs.
            .env("WGPU_BACKEND", "dx12")
            .env("VK_ICD_FILENAMES", "/nonexistent.json")
            .env("VK_DRIVER_FILES", "/nonexistent.json")
            .arg("plan")
            .args(args)
            .output()
            .expect("plan")
    };
    let d = dir.to_str().expect("utf-8 path");
    let out = plan(&["--json", d, "--vram-budget", "0.008"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(r["kind"], "llama checkpoint");
    assert_eq!(r["unit"], "token");
    assert_eq!(r["reserve"], 0, "an explicit budget is the budget");
    assert_eq!(r["usable"], r["capacity"]);
    let streamed = r["streamed_bytes_per_pass"].as_u64().expect("streamed");
    let resident = r["resident_bytes"].as_u64().expect("resident");
    assert!(streamed > 0 && resident > 0, "{r}");
    assert!(
        r["predicted_per_second"].as_f64().unwrap_or(0.0) > 0.0,
        "{r}"
    );
    // A checkpoint's FLOPs: a decode token, and a prefill of --rows tokens.
    assert!(r["flops_per_pass"].as_u64().unwrap_or(0) > 0, "{r}");
    assert_eq!(r["prefill"]["tokens"], 128, "{r}");
    assert!(
        r["prefill"]["flops"].as_u64() > r["flops_per_pass"].as_u64(),
        "{r}"
    );
    // Twice the PCIe rate: the transfer time halves, and a prediction
    // bound by PCIe in every block doubles.
    let fast = plan(&["--json", d, "--vram-budget", "0.008", "--pcie-gbps", "50"]);
    let f: serde_json::Value = serde_json::from_slice(&fast.stdout).expect("json");
    let transfer = |v: &serde_json::Value| v["transfer_seconds"].as_f64().unwrap_or(0.0);
    assert!(
        (2.0 * transfer(&f) - transfer(&r)).abs() <= 1e-9 * transfer(&r),
        "{f}"
    );
    let all_pcie = |v: &serde_json::Value| {
        v["blocks"]
            .as_array()
            .is_some_and(|b| b.iter().all(|b| b["bound"] == "pcie"))
    };
    if all_pcie(&r) && all_pcie(&f) {
        let ratio = f["predicted_per_second"].as_f64().unwrap_or(0.0)
            / r["predicted_per_second"].as_f64().unwrap_or(1.0);
        assert!((ratio - 2.0).abs() < 1e-6, "{ratio}");
    }
    // The index json works too, and the text names sizes in binary units.
    let index = dir.join("model.safetensors.index.json");
    let out = plan(&[index.to_str().expect("utf-8"), "--vram-budget", "0.008"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("tokens/s") && text.contains("MiB"), "{text}");
    assert!(
        text.contains("resident") && text.contains("streamed"),
        "{text}"
    );
    // A budget below what any plan needs is refused in words.
    let out = plan(&[d, "--vram-budget", "0.0001"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("KiB") || stderr.contains("MiB"), "{stderr}");
}

/// `quantize` of a checkpoint's single file with no flags, then `generate
/// --weights` on the result: the embedding table stays float by default
/// (it used to be quantized too, and generate refused the result).
#[test]
fn quantize_a_file_with_defaults_then_generate() {
    let test = "quantize_a_file_with_defaults_then_generate";
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    synth_tiny(dir);
    let q = dir.join("q.safetensors");
    let out = dynvram()
        .arg("quantize")
        .arg(dir.join("model.safetensors"))
        .arg(&q)
        .args(["--format", "float8_e4m3fn"])
        .output()
        .expect("quantize");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let h = header(&q);
    assert_eq!(h["model.embed_tokens.weight"]["dtype"], "BF16");
    assert_eq!(
        h["model.layers.0.self_attn.q_proj.weight"]["dtype"],
        "F8_E4M3"
    );
    let args = [
        "--json",
        "--prompt-ids",
        "3,4,5",
        "--max-new-tokens",
        "2",
        "--weights",
    ];
    let mut args = args.to_vec();
    args.push(q.to_str().expect("utf-8"));
    let Some(out) = generate(test, dir, &args) else {
        return;
    };
    assert_eq!(tokens(&report(&out)).len(), 2);
}

/// `--logits-out` writes the prompt's and every step's logits (kept only
/// when asked); each greedy token is its step row's argmax.
#[test]
fn logits_out_holds_every_step() {
    let test = "logits_out_holds_every_step";
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    synth_tiny(dir);
    let file = dir.join("logits.safetensors");
    let args = [
        "--json",
        "--prompt-ids",
        "4,5,6,7",
        "--max-new-tokens",
        "3",
        "--ignore-eos",
        "--logits-out",
        file.to_str().expect("utf-8"),
    ];
    let Some(out) = generate(test, dir, &args) else {
        return;
    };
    let toks = tokens(&report(&out));
    let bytes = std::fs::read(&file).expect("logits file");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let steps = st.tensor("step_logits").expect("step_logits");
    assert_eq!(steps.shape(), [3, 1024]);
    assert_eq!(
        st.tensor("prompt_logits").expect("prompt").shape(),
        [4, 1024]
    );
    let rows: Vec<f32> = steps
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    for (i, row) in rows.chunks(1024).enumerate() {
        assert_eq!(dynvram_models::llama::argmax(row), toks[i], "step {i}");
    }
}
