//! Issue 31, class 1: no writer can destroy an input. Every command that
//! writes is pointed at what it reads (directly, through `..`, a symlink,
//! a hard link, or a folder holding it) and must refuse before any work,
//! naming both paths, with the input unchanged. None needs a GPU: the rule
//! runs before the device opens.

use std::path::{Path, PathBuf};

use dynvram_test_support::fixtures;

use crate::common::dynvram;

/// A copy of `files` of fixture `name` in a fresh temp folder.
fn copy_fixture(name: &str, files: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join(name);
    std::fs::create_dir(&dir).expect("mkdir");
    for f in files {
        std::fs::copy(fixtures::root().join(name).join(f), dir.join(f)).expect("copy");
    }
    (tmp, dir)
}

/// Runs `dynvram ARGS`, which must fail naming `output` and "reads", with
/// `guarded` unchanged afterwards.
#[track_caller]
fn refused(args: &[&std::ffi::OsStr], output: &Path, guarded: &Path) {
    let before = std::fs::read(guarded).expect("read the input");
    let out = dynvram().args(args).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded: {stderr}");
    let name = output.file_name().expect("name").to_string_lossy();
    assert!(
        stderr.contains("which this command reads") && stderr.contains(&*name),
        "{args:?}: {stderr}"
    );
    assert_eq!(
        std::fs::read(guarded).expect("read the input"),
        before,
        "{args:?} changed {}",
        guarded.display()
    );
}

fn os(s: &str) -> &std::ffi::OsStr {
    s.as_ref()
}

#[test]
fn run_refuses_a_timeline_trace_or_cache_over_its_model() {
    let (tmp, dir) = copy_fixture("conformance", &["stack_mixed.safetensors"]);
    let model = dir.join("stack_mixed.safetensors");
    let dotdot = dir
        .join("..")
        .join("conformance")
        .join("stack_mixed.safetensors");
    for flag in ["--timeline", "--trace"] {
        refused(
            &[os("run"), model.as_os_str(), os(flag), dotdot.as_os_str()],
            &dotdot,
            &model,
        );
    }
    #[cfg(unix)]
    {
        let hard = tmp.path().join("hard.svg");
        std::fs::hard_link(&model, &hard).expect("link");
        refused(
            &[
                os("run"),
                model.as_os_str(),
                os("--timeline"),
                hard.as_os_str(),
            ],
            &hard,
            &model,
        );
    }
    refused(
        &[
            os("run"),
            model.as_os_str(),
            os("--pipeline-cache"),
            model.as_os_str(),
        ],
        &model,
        &model,
    );
}

#[test]
fn dit_refuses_an_out_over_its_model_or_inputs() {
    let (tmp, dir) = copy_fixture(
        "tiny-flux",
        &["model.safetensors", "config.json", "inputs.safetensors"],
    );
    let model = dir.join("model.safetensors");
    let inputs = dir.join("inputs.safetensors");
    let base = [
        os("dit"),
        dir.as_os_str(),
        os("--inputs"),
        inputs.as_os_str(),
    ];
    fn with<'a>(
        base: &[&'a std::ffi::OsStr],
        extra: &[&'a std::ffi::OsStr],
    ) -> Vec<&'a std::ffi::OsStr> {
        base.iter().chain(extra).copied().collect()
    }
    refused(
        &with(&base, &[os("--out"), model.as_os_str()]),
        &model,
        &model,
    );
    refused(
        &with(&base, &[os("--out"), inputs.as_os_str()]),
        &inputs,
        &inputs,
    );
    #[cfg(unix)]
    {
        let link = tmp.path().join("out.safetensors");
        std::os::unix::fs::symlink(&inputs, &link).expect("symlink");
        refused(
            &with(&base, &[os("--out"), link.as_os_str()]),
            &link,
            &inputs,
        );
    }
    let out = tmp.path().join("new.safetensors");
    refused(
        &with(
            &base,
            &[
                os("--out"),
                out.as_os_str(),
                os("--trace"),
                model.as_os_str(),
            ],
        ),
        &model,
        &model,
    );
}

#[test]
fn generate_refuses_logits_over_its_weights() {
    let (tmp, dir) = copy_fixture(
        "tiny-llama",
        &["model.safetensors", "config.json", "generation_config.json"],
    );
    let model = dir.join("model.safetensors");
    let gen_args = |out: &Path| {
        vec![
            os("generate").to_owned(),
            dir.clone().into_os_string(),
            os("--prompt-ids").to_owned(),
            os("1,2").to_owned(),
            os("--logits-out").to_owned(),
            out.as_os_str().to_owned(),
        ]
    };
    let args = gen_args(&model);
    let args: Vec<_> = args.iter().map(|a| a.as_os_str()).collect();
    refused(&args, &model, &model);
    // --weights elsewhere is read too.
    let weights = tmp.path().join("w.safetensors");
    std::fs::copy(&model, &weights).expect("copy");
    let mut args = gen_args(&weights);
    args.extend([os("--weights").to_owned(), weights.clone().into_os_string()]);
    let args: Vec<_> = args.iter().map(|a| a.as_os_str()).collect();
    refused(&args, &weights, &weights);
}

#[test]
fn quantize_refuses_its_input_by_any_path_and_a_full_folder_without_force() {
    let (tmp, dir) = copy_fixture("tiny-llama", &["model.safetensors", "config.json"]);
    let model = dir.join("model.safetensors");
    let dotdot = dir.join("..").join("tiny-llama").join("model.safetensors");
    let q = |input: &Path, output: &Path| {
        vec![
            os("quantize").to_owned(),
            os("--format").to_owned(),
            os("int8_tensorwise").to_owned(),
            input.as_os_str().to_owned(),
            output.as_os_str().to_owned(),
        ]
    };
    let run = |v: Vec<std::ffi::OsString>, output: &Path, guarded: &Path| {
        let args: Vec<_> = v.iter().map(|a| a.as_os_str()).collect();
        refused(&args, output, guarded);
    };
    run(q(&model, &dotdot), &dotdot, &model);
    run(q(&dir, &dir), &dir, &model);
    run(q(&dir, tmp.path()), tmp.path(), &model);
    #[cfg(unix)]
    {
        let hard = tmp.path().join("hard.safetensors");
        std::fs::hard_link(&model, &hard).expect("link");
        run(q(&model, &hard), &hard, &model);
    }
    // A folder with files in it: refused, then replaced whole with --force.
    let full = tmp.path().join("full");
    std::fs::create_dir(&full).expect("mkdir");
    std::fs::write(full.join("keep.txt"), b"x").expect("write");
    let out = dynvram().args(q(&dir, &full)).output().expect("quantize");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("--force"),
        "{stderr}"
    );
    assert!(full.join("keep.txt").is_file());
    let out = dynvram()
        .args(q(&dir, &full))
        .arg("--force")
        .output()
        .expect("quantize");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!full.join("keep.txt").exists() && full.join("model.safetensors").is_file());
}

#[test]
fn synth_refuses_a_full_folder_without_force_and_builds_it_whole() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("model");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("model.safetensors"), b"precious").expect("write");
    let synth = || {
        let mut c = dynvram();
        c.args(["synth", "--like", "tiny", "--layers", "1"])
            .arg(&dir);
        c
    };
    let out = synth().output().expect("synth");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(dir.join("model.safetensors")).expect("read"),
        b"precious"
    );
    let out = synth().arg("--force").output().expect("synth");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains(".tmp-"),
        "reports the final paths: {stdout}"
    );
    assert!(
        std::fs::metadata(dir.join("model.safetensors"))
            .expect("stat")
            .len()
            > 1000
    );
    let names: Vec<_> = std::fs::read_dir(tmp.path())
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(
        names,
        vec![std::ffi::OsString::from("model")],
        "no temp left"
    );
}
