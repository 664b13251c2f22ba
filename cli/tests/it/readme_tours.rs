//! Issue 31, class 7: every command of the README's tours ("A newcomer's
//! path", the "30-second tour" and "Prompt to image", whose `models/`
//! folder of links is made as its lines make it) runs as printed, against
//! the repository's fixtures. Placeholders (`FILE`, `DIR`, `IN OUT`) become the
//! tiny fixtures; paths are run in a temp folder so nothing is written into
//! the repository. Commands sized for a real GPU and disk (the benchmarks,
//! `synth` of real sizes) are listed with the reason they are not run here;
//! a command the table below does not know fails the test, so the README
//! and this test move together. The newcomer's `generate` commands decode
//! with llama3-tiny's 128k vocabulary (minutes on lavapipe): they run with
//! `DYNVRAM_THOROUGH=1`.

use std::path::Path;

use dynvram_test_support::fixtures;
use dynvram_test_support::skip::skip_without_adapter;

use crate::common::dynvram;

/// The `dynvram …` commands of the two tours, continuation lines joined
/// and comments dropped.
fn tour_commands(readme: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut section_ok = false;
    let mut in_block = false;
    let mut pending = String::new();
    for line in readme.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            section_ok = title.starts_with("A newcomer's path")
                || title.starts_with("30-second tour")
                || title.starts_with("Prompt to image");
        }
        if line.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !(section_ok && in_block) {
            continue;
        }
        let code = line.split(" #").next().unwrap_or("").trim();
        let code = code.strip_prefix('#').map_or(code, |_| "");
        if let Some(cont) = code.strip_suffix('\\') {
            pending.push_str(cont);
            pending.push(' ');
            continue;
        }
        pending.push_str(code);
        let cmd = std::mem::take(&mut pending);
        if let Some(args) = cmd.trim().strip_prefix("dynvram ") {
            out.push(args.trim().to_owned());
        }
    }
    out
}

/// Splits on spaces, keeping "double-quoted words" whole.
fn words(cmd: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in cmd.chars() {
        match c {
            '"' => quoted = !quoted,
            ' ' if !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Why a tour command is not run here, or `None` to run it.
fn not_run(cmd: &str, thorough: bool) -> Option<&'static str> {
    if cmd.starts_with("generate llama3-int4") && !thorough {
        return Some(
            "decoding with llama3-tiny's 128k vocabulary takes minutes on a software adapter \
             (DYNVRAM_THOROUGH=1 runs it); the tour's `generate DIR` runs on tiny-llama",
        );
    }
    if cmd.starts_with("bench ") {
        return Some("a benchmark, sized for a GPU (bench pass writes a 7 GiB model)");
    }
    if cmd.starts_with("synth DIR --like llama-7b") {
        return Some("writes 13 GB; the newcomer's path runs synth of llama3-tiny");
    }
    if cmd.starts_with("synth flux.safetensors") || cmd.starts_with("plan flux.safetensors") {
        return Some("FLUX.1-dev's 24 GB; `dit fixtures/tiny-flux` runs the tiny one");
    }
    None
}

#[test]
fn every_readme_tour_command_runs_as_printed() {
    let readme = std::fs::read_to_string(fixtures::root().join("../README.md")).expect("README");
    let cmds = tour_commands(&readme);
    let thorough = std::env::var_os("DYNVRAM_THOROUGH").is_some_and(|v| v == "1");
    assert!(cmds.len() >= 20, "tours found: {cmds:?}");
    let tmp = tempfile::tempdir().expect("tempdir");
    let work = tmp.path();
    // The fixtures by their README paths, from the temp folder.
    std::os::unix::fs::symlink(fixtures::root(), work.join("fixtures")).expect("symlink");
    // "Prompt to image"'s ComfyUI folder, as its `mkdir` and `ln` lines
    // make it.
    let pipeline = fixtures::tiny_flux_pipeline();
    for (dir, file) in [
        ("diffusion_models", "flux1-dev.safetensors"),
        ("text_encoders", "clip_l.safetensors"),
        ("text_encoders", "t5xxl_fp16.safetensors"),
        ("vae", "ae.safetensors"),
    ] {
        let d = work.join("models").join(dir);
        std::fs::create_dir_all(&d).expect("mkdir");
        std::os::unix::fs::symlink(pipeline.join(file), d.join(file)).expect("link");
    }
    let stack = fixtures::conformance().join("stack_mixed.safetensors");
    let llama = fixtures::tiny_llama();
    let mut ran = 0;
    for cmd in &cmds {
        if let Some(why) = not_run(cmd, thorough) {
            eprintln!("not run: dynvram {cmd}: {why}");
            continue;
        }
        let args: Vec<String> = words(cmd)
            .into_iter()
            .map(|w| match w.as_str() {
                "FILE" => stack.display().to_string(),
                "DIR" | "IN" => llama.display().to_string(),
                "OUT" => work.join("out-int4").display().to_string(),
                _ => w,
            })
            .collect();
        let known = [
            "probe",
            "run",
            "plan",
            "quantize",
            "conformance",
            "generate",
            "dit",
            "synth",
            "txt2img",
        ];
        // The subcommand: the first word that is no global flag (`--json`).
        let verb = args.iter().find(|a| !a.starts_with("--"));
        assert!(
            verb.is_some_and(|v| known.contains(&v.as_str())),
            "a tour command this test does not know: {cmd}"
        );
        let out = dynvram()
            .args(&args)
            .current_dir(work)
            .output()
            .expect("dynvram");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() && skip_without_adapter(cmd, &stderr) {
            continue;
        }
        assert!(
            out.status.success(),
            "dynvram {cmd} (as {args:?}) failed: {stderr}\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        ran += 1;
    }
    assert!(ran >= 10, "ran {ran} of {} tour commands", cmds.len());
    assert!(
        Path::new(&work.join("llama3-int4")).is_dir(),
        "the newcomer's path quantized"
    );
}

#[test]
fn tour_commands_are_found_with_their_continuations() {
    let md = "## A newcomer's path\n```sh\ndynvram a b   # c\n# dynvram no\ndynvram x \"y z\" \\\n    --w 1 # q\n```\n## Other\n```sh\ndynvram other\n```\n";
    let cmds = tour_commands(md);
    assert_eq!(cmds, vec!["a b", "x \"y z\"  --w 1"]);
    assert_eq!(words(&cmds[1]), vec!["x", "y z", "--w", "1"]);
}
