//! The `dynvram` binary as a user runs it (in this package, where Cargo
//! sets `CARGO_BIN_EXE_dynvram`).

use assert_cmd::Command;
use dynvram_test_support::skip::skip_without_adapter;

use crate::common::dynvram;

/// The command's successful output; None (and a `skipped:` line) where no
/// GPU adapter is found and none is required.
fn output_or_skip(name: &str, cmd: &mut Command) -> Option<std::process::Output> {
    let out = cmd.output().expect("spawn dynvram");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && skip_without_adapter(name, &stderr) {
        return None;
    }
    assert!(out.status.success(), "{name}: dynvram failed: {stderr}");
    Some(out)
}

/// `run` on the built-in model streams, verifies and, with `--profile`,
/// lists the last pass's launches.
#[test]
fn run_builtin_passes_and_reports_json() {
    let name = "run_builtin_passes_and_reports_json";
    let args = ["--json", "run", "--passes", "1", "--profile"];
    let Some(out) = output_or_skip(name, dynvram().args(args)) else {
        return;
    };
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    eprintln!(
        "run_builtin_passes_and_reports_json: running on {}",
        report["adapter"]
    );
    assert_eq!(report["check"]["pass"], true);
    let m = &report["model"];
    let (res, st, total) = (
        m["resident_bytes"].as_u64(),
        m["streamed_bytes"].as_u64(),
        m["model_bytes"].as_u64(),
    );
    assert!(st.unwrap_or(0) > 0, "the default budget streams");
    assert_eq!(res.zip(st).map(|(a, b)| a + b), total);
    // --profile: the streamed pass's launches, each in a row.
    let p = &report["profile"];
    let launches = p["launches"].as_u64().unwrap_or(0);
    let rows = p["rows"].as_array().expect("profile rows");
    let listed: u64 = rows
        .iter()
        .map(|r| r["launches"].as_u64().unwrap_or(0))
        .sum();
    assert!(launches > 0 && listed == launches, "{p}");
    assert!(p["cpu_submit_us"].as_f64().unwrap_or(0.0) > 0.0, "{p}");
}

#[test]
fn plan_needs_a_budget_and_reports_the_split() {
    let run = dynvram()
        .args(["--json", "run", "--passes", "1", "--backend", "nonsense"])
        .output()
        .expect("run");
    assert!(!run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("unknown backend"));
    let file = dynvram_models::mlp_stack::builtin::ensure_cached_in(
        &std::env::temp_dir().join("dynvram-test-cache"),
    )
    .expect("model");
    let out = dynvram().args(["plan"]).arg(&file).output().expect("plan");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--vram-budget"));
    let out = dynvram()
        .args([
            "--json",
            "plan",
            "--vram-budget",
            "0.02",
            "--reserve-vram",
            "0",
        ])
        .arg(&file)
        .output()
        .expect("plan");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(report["streamed_bytes_per_pass"].as_u64().unwrap_or(0) > 0);
}

#[test]
fn missing_file_is_a_clear_error() {
    let out = dynvram()
        .args(["run", "/nonexistent/model.safetensors"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("/nonexistent/model.safetensors"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn bench_pass_writes_its_model_and_streams_bit_identically() {
    let name = "bench_pass_writes_its_model_and_streams_bit_identically";
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("pass.safetensors");
    let mut cmd = dynvram();
    cmd.args(["--json", "bench", "pass", "--file"])
        .arg(&file)
        .args(["--blocks", "16", "--hidden", "128", "--ffn", "256"])
        .args(["--rows", "2", "--passes", "1", "--profile"]);
    let Some(out) = output_or_skip(name, &mut cmd) else {
        return;
    };
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    eprintln!("{name}: running on {}", r["adapter"]);
    // --profile: the streamed pass's launches, with its staging time.
    let p = &r["figures"][0]["profile"];
    assert!(p["launches"].as_u64().unwrap_or(0) > 0, "{p}");
    assert!(p["cpu_submit_us"].as_f64().unwrap_or(0.0) > 0.0, "{p}");
    let model = r["model_bytes"].as_u64().expect("model bytes");
    // 16 blocks of two f16 linears 128×256 and their f16 biases.
    assert_eq!(model, 16 * (2 * 128 * 256 + 128 + 256) * 2);
    let usable = r["usable_budget"].as_u64().expect("usable");
    assert!(
        usable < model / 2,
        "the model is ~4× the budget: {usable} of {model}"
    );
    let f = &r["figures"][0];
    assert_eq!(f["identical"], true, "{f}");
    assert!(f["streamed_bytes"].as_u64().unwrap_or(0) > 0, "{f}");
    for k in [
        "streamed_seconds",
        "upload_only_seconds",
        "compute_only_seconds",
    ] {
        assert!(f[k].as_f64().unwrap_or(0.0) > 0.0, "{k}: {f}");
    }
}

/// A stack of three small blocks: each block is more than model / 4, so
/// `--ratio 4`'s budget could not hold two arenas and the bench failed its
/// own budget check; the budget is raised to the least that streams. Two
/// blocks cannot stream at all (two arenas hold the whole model): refused
/// up front, naming `--blocks`.
#[test]
fn bench_pass_with_few_small_blocks_streams() {
    let name = "bench_pass_with_few_small_blocks_streams";
    let dir = tempfile::tempdir().expect("tempdir");
    let bench = |blocks: &str| {
        let mut cmd = dynvram();
        cmd.args(["--json", "bench", "pass", "--file"])
            .arg(dir.path().join(format!("small{blocks}.safetensors")))
            .args(["--blocks", blocks, "--hidden", "64", "--ffn", "128"])
            .args(["--rows", "1", "--passes", "1"]);
        cmd
    };
    let Some(out) = output_or_skip(name, &mut bench("3")) else {
        return;
    };
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    let f = &r["figures"][0];
    assert_eq!(f["identical"], true, "{f}");
    assert!(f["streamed_bytes"].as_u64().unwrap_or(0) > 0, "{f}");
    let out = bench("2").output().expect("bench pass");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--blocks"), "{stderr}");
}

/// `bench dispatch` times its three pass layouts and refuses a zero count.
#[test]
fn bench_dispatch_reports_each_layout() {
    let name = "bench_dispatch_reports_each_layout";
    let args = [
        "--json",
        "bench",
        "dispatch",
        "--launches",
        "16",
        "--reps",
        "1",
    ];
    let Some(out) = output_or_skip(name, dynvram().args(args)) else {
        return;
    };
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    let layouts = report["layouts"].as_array().expect("layouts");
    assert_eq!(layouts.len(), 3);
    for l in layouts {
        let total = l["total_us"].as_f64().expect("total");
        let parts: f64 = ["record_us", "finish_us", "submit_us", "gpu_wait_us"]
            .iter()
            .map(|k| l[k].as_f64().expect("part"))
            .sum();
        assert!(
            total > 0.0 && (total - parts).abs() < 1e-6 * total.max(1.0),
            "{l}"
        );
    }
    let zero = dynvram()
        .args(["bench", "dispatch", "--launches", "0"])
        .output()
        .expect("bench dispatch 0");
    assert!(!zero.status.success());
    assert!(String::from_utf8_lossy(&zero.stderr).contains("--launches"));
}

/// `bench attention` times a tiny decode attention per tuning (the
/// default policy, one forced split, several with a merge of two, whole
/// kv-head groups) with its splits, workgroups and launches, and refuses a
/// bad tuning as a flag error.
#[test]
fn bench_attention_reports_each_tuning() {
    let name = "bench_attention_reports_each_tuning";
    let args = [
        "--json",
        "bench",
        "attention",
        "--keys",
        "40",
        "--heads",
        "4",
        "--kv-heads",
        "2",
        "--head-dim",
        "32",
        "--f32",
        "--tunings",
        "128x264,64s1,128s3m2,128x264h2",
        "--reps",
        "1",
    ];
    let Some(out) = output_or_skip(name, dynvram().args(args)) else {
        return;
    };
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    assert_eq!(report["rope"], true, "{report}");
    let figures = report["figures"].as_array().expect("figures");
    let skipped = report["skipped"].as_array().expect("skipped");
    assert!(skipped.is_empty(), "{report}");
    let got: Vec<(&str, u64, u64, u64)> = figures
        .iter()
        .map(|f| {
            assert_eq!(f["kernel"], "decode", "{f}");
            assert!(f["us"].as_f64().is_some_and(|us| us > 0.0), "{f}");
            assert!(f["kv_gb_per_s"].as_f64().is_some_and(|g| g > 0.0), "{f}");
            (
                f["tuning"].as_str().expect("tuning"),
                f["splits"].as_u64().expect("splits"),
                f["workgroups"].as_u64().expect("workgroups"),
                f["launches"].as_u64().expect("launches"),
            )
        })
        .collect();
    // 40 keys: the policy's 2 splits of 32 keys; forced 1; forced 3 of 16.
    // One query head a workgroup (4 a split; RoPE a launch of its own, then
    // the decode kernel and the combine where there are splits), or both
    // heads of a kv head (`h2`: 2 a split, RoPE fused).
    assert_eq!(
        got,
        [
            ("128x264", 2, 8, 3),
            ("64s1", 1, 4, 2),
            ("128s3m2", 3, 12, 3),
            ("128x264h2", 2, 4, 2)
        ],
        "{report}"
    );
    let bad = dynvram()
        .args(["bench", "attention", "--tunings", "128x264,100s1"])
        .output()
        .expect("bench attention");
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("power of two"), "{stderr}");
}

/// A closed stdout ends the program by SIGPIPE, as command-line tools do
/// (it panicked at `println!`), and an absurd `--max-new-tokens` is a flag
/// error, not an overflow.
#[test]
fn closed_stdout_and_absurd_counts_end_cleanly() {
    let file = dynvram_models::mlp_stack::builtin::ensure_cached_in(
        &std::env::temp_dir().join("dynvram-test-cache"),
    )
    .expect("model");
    let bin = assert_cmd::cargo::cargo_bin("dynvram");
    let mut child = std::process::Command::new(&bin)
        .args(["plan", "--vram-budget", "1", "--tensors"])
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("plan");
    // The read end closes before anything is written.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert!(
            out.status.success() || out.status.signal() == Some(libc::SIGPIPE),
            "{:?}: {stderr}",
            out.status
        );
    }
    let out = dynvram()
        .args(["generate", "/nonexistent", "--prompt-ids", "1"])
        .args(["--max-new-tokens", "18446744073709551615"])
        .output()
        .expect("generate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && !stderr.contains("panicked"),
        "{stderr}"
    );
    assert!(stderr.contains("--max-new-tokens"), "{stderr}");
}
