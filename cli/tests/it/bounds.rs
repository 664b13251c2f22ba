//! Issue 31, class 2: nothing runs without bound. Every numeric flag with
//! a documented range refuses a value outside it at parse time, naming the
//! flag and the range; values that mean nothing (0 passes, 0 repetitions,
//! 0 bytes) are refused, never reinterpreted.

use crate::common::dynvram;

#[test]
fn numeric_flags_out_of_range_are_refused_naming_flag_and_range() {
    let huge = "18446744073709551615";
    let cases: &[(&[&str], &str)] = &[
        (&["run", "--passes", "0"], "--passes"),
        (&["run", "--rows", huge], "--rows"),
        (&["bench", "upload", "--reps", "0"], "--reps"),
        (&["bench", "upload", "--size", "0"], "--size"),
        (&["bench", "upload", "--threads", "0"], "--threads"),
        (&["bench", "linear", "--reps", "0"], "--reps"),
        (&["bench", "pass", "--passes", "0"], "--passes"),
        (&["bench", "pass", "--ratio", "inf"], "--ratio"),
        (&["plan", "x", "--text-tokens", huge], "--text-tokens"),
        (&["plan", "x", "--image-tokens", huge], "--image-tokens"),
        (&["plan", "x", "--rows", "0"], "--rows"),
        (
            &["dit", "m", "--inputs", "i", "--out", "o", "--warmup", huge],
            "--warmup",
        ),
        (
            &["generate", "d", "--prompt-ids", "1", "--warmup", "1001"],
            "--warmup",
        ),
        (
            &["synth", "d", "--like", "tiny", "--shard-gib", "1e300"],
            "--shard-gib",
        ),
    ];
    for (args, flag) in cases {
        let out = dynvram().args(*args).output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(flag) && (stderr.contains("expected") || stderr.contains("range")),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// Issue 31, class 6: what would be ignored is refused, naming it: an
/// end-of-sequence id that can never occur, `--chat` beside `--prompt-ids`.
#[test]
fn unreachable_eos_ids_and_chat_without_text_are_refused() {
    let llama = dynvram_test_support::fixtures::tiny_llama();
    let out = dynvram()
        .arg("generate")
        .arg(&llama)
        .args(["--prompt-ids", "1,2", "--eos", "4000000000"])
        .output()
        .expect("generate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("end-of-sequence id 4000000000 is outside the vocabulary")
            && stderr.contains("--eos"),
        "{stderr}"
    );
    let out = dynvram()
        .arg("generate")
        .arg(&llama)
        .args(["--prompt-ids", "1,2", "--chat"])
        .output()
        .expect("generate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--chat"), "{stderr}");
}
