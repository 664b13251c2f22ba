//! The built-in CLIP and T5 tokenizers against diffusers' ids for the
//! fixture's prompts (`fixtures/tiny-flux-pipeline`), their padding and
//! truncation at the edges, and the embedded files against the fixture's
//! manifest.

use std::path::PathBuf;

use dynvram_models::tokenize::{
    CLIP_BOS, CLIP_EOS, CLIP_MAX_LEN, CLIP_TOKENIZER_JSON, ClipTokenizer, T5_EOS, T5_PAD,
    T5_TOKENIZER_JSON, T5Tokenizer,
};
use dynvram_test_support::fixtures;
use dynvram_test_support::safetensors;
use sha2::{Digest, Sha256};

fn pipeline() -> PathBuf {
    fixtures::dir(
        "tiny-flux-pipeline",
        &["spec.json", "manifest.json", "reference.safetensors"],
    )
}

/// The prompts of `spec.json`'s pipeline call.
fn prompts() -> Vec<String> {
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(pipeline().join("spec.json")).expect("spec.json"))
            .expect("spec.json parses");
    let prompts = spec["variants"][0]["run"]["prompts"]
        .as_array()
        .expect("spec.json lists the prompts");
    prompts
        .iter()
        .map(|p| p.as_str().expect("a prompt is a string").to_owned())
        .collect()
}

/// `[B, L]` ids of `name` in the reference, one Vec per prompt.
fn reference_ids(name: &str) -> Vec<Vec<u32>> {
    let reference = safetensors::read(&pipeline().join("reference.safetensors"));
    let t = safetensors::get(&reference, name);
    t.ids_u32()
        .chunks(t.shape[1])
        .map(<[u32]>::to_vec)
        .collect()
}

#[test]
fn clip_ids_equal_diffusers() {
    let tok = ClipTokenizer::builtin().expect("built-in CLIP tokenizer");
    let want = reference_ids("clip_input_ids");
    let prompts = prompts();
    assert_eq!(prompts.len(), want.len());
    for (p, w) in prompts.iter().zip(&want) {
        let got = tok.encode(p).expect("encodes");
        assert_eq!(&got.ids, w, "{p:?}");
        assert!(!got.truncated);
    }
}

#[test]
fn t5_ids_equal_diffusers() {
    let tok = T5Tokenizer::builtin().expect("built-in T5 tokenizer");
    let want = reference_ids("t5_input_ids");
    for (p, w) in prompts().iter().zip(&want) {
        let got = tok.encode(p, w.len()).expect("encodes");
        assert_eq!(&got.ids, w, "{p:?}");
        assert!(!got.truncated);
    }
}

#[test]
fn clip_pads_and_truncates_at_the_edges() {
    let tok = ClipTokenizer::builtin().expect("tokenizer");
    let empty = tok.encode("").expect("empty prompt");
    assert_eq!(empty.ids.len(), CLIP_MAX_LEN);
    assert_eq!(empty.ids[..2], [CLIP_BOS, CLIP_EOS]);
    assert!(empty.ids[2..].iter().all(|&i| i == CLIP_EOS));
    assert!(!empty.truncated);
    // "cat" is one token: 75 of them fill the 77 exactly with BOS and EOS.
    let one = tok.encode("cat").expect("one word");
    assert_eq!(
        one.ids[2],
        CLIP_EOS,
        "`cat` is one token: {:?}",
        &one.ids[..4]
    );
    let cat = one.ids[1];
    let exact = tok.encode(&["cat"; 75].join(" ")).expect("exact");
    assert!(!exact.truncated);
    assert_eq!(exact.ids[0], CLIP_BOS);
    assert!(exact.ids[1..76].iter().all(|&i| i == cat));
    assert_eq!(exact.ids[76], CLIP_EOS);
    let longer = tok.encode(&["cat"; 76].join(" ")).expect("longer");
    assert!(longer.truncated);
    assert_eq!(longer.ids, exact.ids, "cut to 77 keeping EOS last");
}

#[test]
fn t5_pads_and_truncates_at_the_edges() {
    let tok = T5Tokenizer::builtin().expect("tokenizer");
    let empty = tok.encode("", 8).expect("empty prompt");
    assert_eq!(empty.ids, [T5_EOS, 0, 0, 0, 0, 0, 0, 0]);
    assert!(!empty.truncated);
    let one = tok.encode("cat", 8).expect("one word");
    let cat = one.ids[0];
    assert_eq!(one.ids[1], T5_EOS, "`cat` is one token: {:?}", one.ids);
    let exact = tok.encode(&["cat"; 7].join(" "), 8).expect("exact");
    assert!(!exact.truncated);
    assert_eq!(exact.ids, [cat, cat, cat, cat, cat, cat, cat, T5_EOS]);
    let longer = tok.encode(&["cat"; 8].join(" "), 8).expect("longer");
    assert!(longer.truncated);
    assert_eq!(longer.ids, exact.ids, "cut to 8 keeping EOS last");
    let just_eos = tok.encode("cat", 1).expect("max_len 1");
    assert_eq!(just_eos.ids, [T5_EOS]);
    assert!(just_eos.truncated);
    assert!(tok.encode("cat", 0).is_err(), "max_len 0");
    assert!(one.ids[2..].iter().all(|&i| i == T5_PAD));
}

#[test]
fn embedded_tokenizers_are_the_fixtures() {
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(pipeline().join("manifest.json")).expect("manifest.json"),
    )
    .expect("manifest parses");
    for (file, bytes) in [
        ("tokenizer/tokenizer.json", CLIP_TOKENIZER_JSON),
        ("tokenizer_2/tokenizer.json", T5_TOKENIZER_JSON),
    ] {
        let want = manifest["files"][file]["sha256"]
            .as_str()
            .unwrap_or_else(|| panic!("manifest has no sha256 of {file}"));
        let got: String = Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(got, want, "{file}");
    }
}
