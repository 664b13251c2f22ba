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
    generate_with(dtype, None)
}

/// [`generate`] with `DYNVRAM_CM2_BF16` set to `cm2_bf16`.
fn generate_with(dtype: &str, cm2_bf16: Option<&str>) -> Result<Vec<u64>, String> {
    let mut cmd = dynvram();
    if let Some(v) = cm2_bf16 {
        cmd.env("DYNVRAM_CM2_BF16", v);
    }
    let out = cmd
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

/// `DYNVRAM_CM2_BF16=f16-resident`: tiny-llama's resident bf16 linear
/// weights are converted to f16 in place as they load (the upload's scan,
/// the in-place kernel, the weights then read as f16 by every kernel), and
/// generation gives the greedy ids of a run that keeps them bf16
/// (`DYNVRAM_CM2_BF16=f16`: the default converts them too where the device
/// runs the SPIR-V GEMMs). f16 holds tiny-llama's bf16 values but those
/// below its normal range.
#[test]
fn resident_bf16_weights_as_f16_give_the_same_ids() {
    let test = "resident_bf16_weights_as_f16_give_the_same_ids";
    let plain = match generate_with("f32", Some("f16")) {
        Ok(ids) => ids,
        Err(e) if skip_without_adapter(test, &e) => return,
        Err(e) => panic!("{test}: run keeping bf16 failed: {e}"),
    };
    let converted = generate_with("f32", Some("f16-resident")).expect("f16-resident run");
    assert_eq!(converted, plain, "{test}: greedy ids");
}
