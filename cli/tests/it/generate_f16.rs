//! `dynvram generate --compute-dtype f16` on tiny-llama: the same greedy ids
//! as the default f32 run where the adapter has SHADER_F16 (the logits
//! tolerance and the ids against transformers are checked in
//! `models/tests/it/llama_f16.rs`), and a clear error naming SHADER_F16 where
//! it has not.

use dynvram_test_support::fixtures;
use dynvram_test_support::skip::skip_without_adapter;

use crate::common::dynvram;

/// `input_ids_p0` of tiny-llama's reference.safetensors.
const PROMPT: &str = "37,235,908,72,767,905,715";

/// Greedy ids of `generate --json` with `dtype`, or the failure's stderr.
fn generate(dtype: &str) -> Result<Vec<u64>, String> {
    let out = dynvram()
        .arg("--json")
        .arg("generate")
        .arg(fixtures::tiny_llama())
        .args(["--prompt-ids", PROMPT, "--max-new-tokens", "16"])
        .args(["--compute-dtype", dtype])
        .output()
        .expect("runs");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    Ok(report["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t.as_u64().expect("id"))
        .collect())
}

#[test]
fn generate_f16_matches_f32_or_names_shader_f16() {
    let test = "generate_f16_matches_f32_or_names_shader_f16";
    let f32_ids = match generate("f32") {
        Ok(ids) => ids,
        Err(e) if skip_without_adapter(test, &e) => return,
        Err(e) => panic!("{test}: f32 run failed: {e}"),
    };
    assert_eq!(f32_ids.len(), 16);
    match generate("f16") {
        Ok(f16_ids) => assert_eq!(f16_ids, f32_ids, "f16 vs f32 greedy ids"),
        Err(e) => {
            assert!(
                e.contains("SHADER_F16"),
                "{test}: f16 failed otherwise: {e}"
            );
            eprintln!("{test}: f16 refused as expected: {}", e.trim());
        }
    }
}
