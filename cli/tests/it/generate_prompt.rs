//! `dynvram generate --prompt TEXT` end to end: a tiny synthetic checkpoint
//! with a synthetic tokenizer.json written by `dynvram synth --tokenizer`,
//! text in, text out, the same tokens as the equivalent `--prompt-ids`.

use crate::common;

use std::path::Path;

use crate::common::{dynvram, synth, synth_tiny};
use dynvram_models::llama::TextTokenizer;

/// `generate` with 5 new tokens unless `args` say otherwise.
fn generate(test: &str, dir: &Path, args: &[&str]) -> Option<std::process::Output> {
    let mut all = vec!["--max-new-tokens", "5"];
    all.extend_from_slice(args);
    common::generate(test, dir, &all)
}

#[test]
fn prompt_text_round_trips_and_generates() {
    let test = "prompt_text_round_trips_and_generates";
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    synth_tiny(dir);
    let tok = TextTokenizer::open(dir).expect("tokenizer");
    assert_eq!(tok.vocab_size(), 1024, "the tokenizer fills the tiny vocab");
    let text = "the quick brown fox jumps — déjà vu";
    let ids = tok.encode(text).expect("encode");
    assert_eq!(tok.decode(&ids).expect("decode"), text);

    let Some(out) = generate(test, dir, &["--json", "--prompt", text]) else {
        return;
    };
    let by_text: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    let prompt: Vec<u32> = serde_json::from_value(by_text["prompt"].clone()).expect("prompt ids");
    assert_eq!(prompt, ids, "the prompt is the tokenizer's encoding");
    assert_eq!(by_text["prompt_text"], text);
    let tokens: Vec<u32> = serde_json::from_value(by_text["tokens"].clone()).expect("tokens");
    assert_eq!(tokens.len(), 5);
    assert_eq!(
        by_text["text"],
        tok.decode(&tokens).expect("decode generated")
    );
    assert!(by_text["decode_tokens_per_second"].as_f64().unwrap_or(0.0) > 0.0);

    // The same ids given as numbers generate the same tokens.
    let id_list = ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let out = generate(test, dir, &["--json", "--prompt-ids", &id_list]).expect("ran above");
    let by_ids: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    assert_eq!(by_ids["tokens"], by_text["tokens"]);
    assert!(by_ids.get("text").is_none(), "no text for raw ids");

    // Text mode prints the decoded text as it comes, then the speeds.
    let out = generate(test, dir, &["--prompt", text]).expect("ran above");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let generated = tok.decode(&tokens).expect("decode generated");
    assert!(
        stdout.starts_with(&generated),
        "stdout {stdout:?} starts with the generated text {generated:?}"
    );
    assert!(stdout.contains("tokens/s"), "{stdout}");
}

#[test]
fn prompt_without_tokenizer_or_with_ids_is_an_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    synth_tiny(dir);
    let out = dynvram()
        .arg("generate")
        .arg(dir)
        .args(["--prompt", "hi", "--prompt-ids", "1,2"])
        .output()
        .expect("generate");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot be used with"), "{stderr}");

    std::fs::remove_file(dir.join("tokenizer.json")).expect("remove tokenizer");
    let out = dynvram()
        .arg("generate")
        .arg(dir)
        .args(["--prompt", "hi"])
        .output()
        .expect("generate");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let file = dir.join("tokenizer.json");
    assert!(
        stderr.contains(&file.display().to_string()),
        "the error names {}: {stderr}",
        file.display()
    );
}

/// `generate --profile`: a prefill and a decode step with every launch
/// listed (GPU times where the adapter has timestamps), in JSON and text.
#[test]
fn profile_lists_every_launch_of_a_step() {
    let test = "profile_lists_every_launch_of_a_step";
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    synth_tiny(dir);
    let args = ["--json", "--profile", "--prompt-ids", "5,6,7,8"];
    let Some(out) = generate(test, dir, &args) else {
        return;
    };
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    for phase in ["prefill", "decode"] {
        let p = &report["profile"][phase];
        let launches = p["launches"].as_u64().expect("launches");
        let rows = p["rows"].as_array().expect("rows");
        assert!(launches > 0 && !rows.is_empty(), "{phase}: {p}");
        let listed: u64 = rows
            .iter()
            .map(|r| r["launches"].as_u64().unwrap_or(0))
            .sum();
        assert_eq!(listed, launches, "{phase}: every launch is in a row");
        let linear = rows
            .iter()
            .find(|r| {
                r["label"]
                    .as_str()
                    .is_some_and(|l| l.starts_with("linear_"))
            })
            .expect("a linear row");
        assert!(
            linear["bytes"].as_u64().unwrap_or(0) > 0 && linear["flops"].as_u64().unwrap_or(0) > 0
        );
        assert!(p["cpu_record_us"].as_f64().unwrap_or(0.0) > 0.0);
        assert!(p["wall_us"].as_f64().unwrap_or(0.0) > 0.0);
        if p["timed"].as_bool() == Some(true) {
            assert!(
                p["gpu_busy_us"].as_f64().unwrap_or(0.0) > 0.0,
                "{phase}: {p}"
            );
            assert!(
                rows.iter().all(|r| r["gb_per_s"].is_number()),
                "{phase}: {p}"
            );
        } else {
            eprintln!("{test}: {phase}: no GPU timestamps on this adapter, CPU times only");
        }
    }
    let Some(out) = generate(test, dir, &["--profile", "--prompt-ids", "5,6,7,8"]) else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("profile    decode step"), "{text}");
    assert!(
        text.contains("GPU µs") && text.contains("linear_"),
        "{text}"
    );
}

/// A Llama 3-shaped checkpoint (vocabulary 128 256, GQA, theta 500 000 and
/// llama3 RoPE scaling) generates: the lm_head's 128 256 rows pass the
/// linear's index checks, and the scaled RoPE table is finite.
#[test]
fn llama3_vocabulary_and_rope_scaling_generate() {
    let test = "llama3_vocabulary_and_rope_scaling_generate";
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    synth(dir, &["--like", "llama3-tiny"]);
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).expect("config"))
            .expect("config json");
    assert_eq!(config["vocab_size"], 128_256);
    assert_eq!(config["rope_parameters"]["rope_type"], "llama3");
    let Some(out) = generate(test, dir, &["--json", "--prompt-ids", "1,128000,128255,7"]) else {
        return;
    };
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    let tokens: Vec<u32> = serde_json::from_value(report["tokens"].clone()).expect("tokens");
    assert_eq!(tokens.len(), 5);
    assert!(tokens.iter().all(|&t| t < 128_256), "{tokens:?}");
}
