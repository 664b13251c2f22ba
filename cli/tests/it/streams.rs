//! Issue 31, classes 3 and 4: output-stream faults end with a message and
//! a non-zero status, never a panic; `synth` builds its folder whole under
//! every signal, and a folder left by SIGKILL goes at the next run.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dynvram_test_support::fixtures;

fn bin() -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin("dynvram"));
    c.env("DYNVRAM_CACHE", fixtures::test_cache());
    c.env_remove("RUST_LOG");
    c
}

/// `plan` of the tiny Llama: needs no GPU and prints a report.
fn plan() -> Command {
    let mut c = bin();
    c.arg("plan")
        .arg(fixtures::tiny_llama())
        .args(["--vram-budget", "1", "--tensors"]);
    c
}

#[cfg(target_os = "linux")]
#[test]
fn a_full_stdout_or_stderr_is_an_error_not_a_panic() {
    let full = || {
        std::fs::File::options()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full")
    };
    let out = plan()
        .stdout(full())
        .stderr(Stdio::piped())
        .output()
        .expect("plan");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("error: writing to stdout") && !stderr.contains("panicked"),
        "{stderr}"
    );
    // An error to report on a full stderr: the status says it.
    let out = bin()
        .args(["plan", "/no/such/model"])
        .stderr(full())
        .output()
        .expect("plan");
    assert_eq!(out.status.code(), Some(2), "was 101, a panic");
}

#[cfg(unix)]
#[test]
fn a_closed_stdout_is_refused_up_front() {
    use std::os::unix::process::CommandExt;
    let mut c = plan();
    // SAFETY: close is async-signal-safe; the child has only this thread.
    unsafe {
        c.pre_exec(|| {
            libc::close(1);
            Ok(())
        });
    }
    let out = c.stderr(Stdio::piped()).output().expect("plan");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "was 0 with the output lost: {stderr}"
    );
    assert!(stderr.contains("stdout is closed"), "{stderr}");
}

/// Names in `dir` that look like temp files or folders.
fn temps(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect()
}

/// Starts `synth` of ~300 MB into `dir/model` and waits until its temp
/// folder exists (the handler is installed and the work begun).
fn synth_started(dir: &Path) -> std::process::Child {
    let mut child = bin()
        .args(["synth", "--like", "qwen2-0.5b", "--layers", "1"])
        .arg(dir.join("model"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("synth");
    let start = Instant::now();
    while temps(dir).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no temp folder appeared"
        );
        assert!(
            child.try_wait().expect("wait").is_none(),
            "synth ended early"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(50));
    child
}

#[cfg(unix)]
#[test]
fn synth_is_whole_or_nothing_under_every_signal() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        let dir = tempfile::tempdir().expect("tempdir");
        let child = synth_started(dir.path());
        // SAFETY: kill only sends a signal to our own child.
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(128 + signal),
            "signal {signal}: {stderr}"
        );
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("ls").collect();
        assert!(left.is_empty(), "signal {signal} left {left:?}");
    }
    // SIGKILL: nothing can run; the next synth there removes the temp folder.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = synth_started(dir.path());
    child.kill().expect("kill");
    child.wait().expect("wait");
    assert_eq!(temps(dir.path()).len(), 1, "SIGKILL leaves its temp folder");
    assert!(
        !dir.path().join("model").exists(),
        "never a partial folder at the name"
    );
    let out = bin()
        .args(["synth", "--like", "tiny", "--layers", "1"])
        .arg(dir.path().join("model"))
        .output()
        .expect("synth");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        temps(dir.path()),
        Vec::<String>::new(),
        "the killed run's folder went"
    );
}
