//! Faults met from outside the process: signals during a write, NaN weights,
//! MLP-stack files with a gap or a bad input. None needs a GPU.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dynvram_test_support::safetensors::write_f32;

fn bin() -> Command {
    Command::new(assert_cmd::cargo::cargo_bin("dynvram"))
}

/// Names in `dir` that look like temp files.
fn temp_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect()
}

/// SIGINT or SIGTERM while `quantize` works: the process exits with the
/// shell's status for the signal (130, 143) and leaves no `.OUT.tmp-…` file
/// (it left one per interrupted run) and no output.
#[cfg(unix)]
#[test]
fn interrupted_quantize_leaves_no_temp_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("model");
    // ~300 MB of bf16: the embedding alone takes the quantizer a while.
    let synth = bin()
        .args([
            "synth",
            "--like",
            "qwen2-0.5b",
            "--layers",
            "1",
            "--dtype",
            "bf16",
        ])
        .arg(&model)
        .output()
        .expect("synth");
    assert!(
        synth.status.success(),
        "{}",
        String::from_utf8_lossy(&synth.stderr)
    );
    assert_eq!(temp_files(&model), Vec::<String>::new());
    let input = model.join("model.safetensors");
    for (signal, status) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
        let out_dir = tempfile::tempdir().expect("tempdir");
        let output = out_dir.path().join("q.safetensors");
        let mut child = bin()
            .args(["quantize", "--format", "int8_tensorwise"])
            .arg(&input)
            .arg(&output)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("quantize");
        // Wait for the temp file: the handler is installed and the work begun.
        let start = Instant::now();
        while temp_files(out_dir.path()).is_empty() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "no temp file appeared"
            );
            assert!(
                child.try_wait().expect("wait").is_none(),
                "quantize ended early"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(50));
        // SAFETY: kill only sends a signal to our own child.
        let rc = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        assert_eq!(rc, 0);
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(status), "signal {signal}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(
            temp_files(out_dir.path()),
            Vec::<String>::new(),
            "signal {signal}"
        );
        assert!(!output.exists(), "no output from an interrupted run");
    }
}

/// SIGINT or SIGTERM during `quantize MODEL_DIR OUT_DIR` (several shards):
/// the temp folder with the shards written so far is removed, no output
/// folder appears, and the exit status is the signal's.
#[test]
fn interrupted_model_quantize_leaves_no_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("model");
    let synth = bin()
        .args([
            "synth",
            "--like",
            "llama-7b",
            "--layers",
            "1",
            "--shard-gib",
            "0.1",
        ])
        .arg(&model)
        .output()
        .expect("synth");
    assert!(
        synth.status.success(),
        "{}",
        String::from_utf8_lossy(&synth.stderr)
    );
    for (signal, status) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
        let out_dir = tempfile::tempdir().expect("tempdir");
        let output = out_dir.path().join("quantized");
        let mut child = bin()
            .args(["quantize", "--format", "convrot_w4a4"])
            .arg(&model)
            .arg(&output)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("quantize");
        // Wait for the temp folder to hold a finished shard: work is under way.
        let start = Instant::now();
        loop {
            let tmp = temp_files(out_dir.path());
            let shards = tmp.first().map_or(0, |t| {
                std::fs::read_dir(out_dir.path().join(t))
                    .map(|d| {
                        d.filter_map(|e| e.ok())
                            .filter(|e| e.file_name().to_string_lossy().starts_with("model-"))
                            .count()
                    })
                    .unwrap_or(0)
            });
            if shards > 0 {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "no shard appeared"
            );
            assert!(
                child.try_wait().expect("wait").is_none(),
                "quantize ended early"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: kill only sends a signal to our own child.
        let rc = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        assert_eq!(rc, 0);
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(status), "signal {signal}: {stderr}");
        let left: Vec<_> = std::fs::read_dir(out_dir.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert!(left.is_empty(), "signal {signal}: {left:?} left behind");
    }
}

/// NaN in a weight: `quantize` names the tensor and the element; with
/// `--allow-nonfinite` it quantizes anyway.
#[test]
fn quantize_refuses_nonfinite_weights_unless_allowed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("nan.safetensors");
    let output = dir.path().join("q.safetensors");
    let mut w = vec![0.5f32; 4 * 64];
    w[70] = f32::NAN;
    write_f32(&input, &[("lin.weight", vec![4, 64], w)]);
    let run = |extra: &[&str]| {
        bin()
            .args(["quantize", "--format", "float8_e4m3fn"])
            .args(extra)
            .arg(&input)
            .arg(&output)
            .output()
            .expect("quantize")
    };
    let out = run(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("lin.weight") && stderr.contains("element 70 "),
        "{stderr}"
    );
    assert!(!output.exists());
    let out = run(&["--allow-nonfinite"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(output.exists());
    assert_eq!(temp_files(dir.path()), Vec::<String>::new());
}

/// `run` on a stack with blocks 0 and 2 (no 1), or with an `input` of the
/// wrong shape: an error before any GPU work, not a shorter model or random
/// input rows that pass.
#[test]
fn run_refuses_a_gapped_stack_or_a_misshapen_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("stack.safetensors");
    let (h, f) = (8, 16);
    let block = |i: usize| {
        [
            (format!("blocks.{i}.mlp.fc1.weight"), vec![f, h]),
            (format!("blocks.{i}.mlp.fc2.weight"), vec![h, f]),
        ]
    };
    let write = |names: Vec<(String, Vec<usize>)>| {
        let t: Vec<(&str, Vec<usize>, Vec<f32>)> = names
            .iter()
            .map(|(n, s)| (n.as_str(), s.clone(), vec![0.1; s.iter().product()]))
            .collect();
        write_f32(&path, &t);
    };
    let run = || bin().arg("run").arg(&path).output().expect("run");
    write(block(0).into_iter().chain(block(2)).collect());
    let out = run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("block 1 is missing"), "{stderr}");
    let mut names: Vec<_> = block(0).into_iter().collect();
    names.push(("input".into(), vec![2, h + 1]));
    write(names);
    let out = run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("tensor `input`"), "{stderr}");
}
