//! Issue 31, class 5: poisoned quantization scales are refused when a
//! model opens, naming the tensor and the row (they gave NaN logits, or
//! finite garbage, at exit 0). `plan` opens the model as `run` does, with
//! no GPU.

use safetensors::tensor::TensorView;

use crate::common::dynvram;

const K: usize = 64;
const N: usize = 32;

/// A one-block MLP stack whose fc1 is `format` with `scale` values; fc2 f32.
fn write_stack(
    path: &std::path::Path,
    format: &str,
    weight_dtype: safetensors::Dtype,
    scale: &[f32],
) {
    let cq = format!("{{\"format\": \"{format}\"}}").into_bytes();
    // int4: two codes a byte.
    let cols = if format.starts_with("convrot_w4a4") {
        K / 2
    } else {
        K
    };
    let w1 = vec![1u8; N * cols];
    let s1: Vec<u8> = scale.iter().flat_map(|v| v.to_le_bytes()).collect();
    let w2: Vec<u8> = (0..K * N)
        .flat_map(|i| (i as f32 * 1e-3).to_le_bytes())
        .collect();
    let scale_shape = if scale.len() == 1 {
        vec![]
    } else {
        vec![scale.len()]
    };
    let views = vec![
        (
            "blocks.0.mlp.fc1.weight",
            TensorView::new(weight_dtype, vec![N, cols], &w1).expect("view"),
        ),
        (
            "blocks.0.mlp.fc1.weight_scale",
            TensorView::new(safetensors::Dtype::F32, scale_shape, &s1).expect("view"),
        ),
        (
            "blocks.0.mlp.fc1.comfy_quant",
            TensorView::new(safetensors::Dtype::U8, vec![cq.len()], &cq).expect("view"),
        ),
        (
            "blocks.0.mlp.fc2.weight",
            TensorView::new(safetensors::Dtype::F32, vec![K, N], &w2).expect("view"),
        ),
    ];
    safetensors::serialize_to_file(views, None, path).expect("write");
}

#[test]
fn zero_negative_or_nonfinite_scales_are_refused_naming_tensor_and_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("stack.safetensors");
    let plan = || {
        dynvram()
            .args(["plan"])
            .arg(&path)
            .args(["--vram-budget", "1"])
            .output()
            .expect("plan")
    };
    write_stack(&path, "int8_tensorwise", safetensors::Dtype::I8, &[0.5]);
    let out = plan();
    assert!(
        out.status.success(),
        "a good scale: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (format, dtype) in [
        ("int8_tensorwise", safetensors::Dtype::I8),
        ("float8_e4m3fn", safetensors::Dtype::F8_E4M3),
    ] {
        for bad in [0.0, -0.5, f32::NAN, f32::INFINITY] {
            write_stack(&path, format, dtype, &[bad]);
            let out = plan();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{format} {bad}: {stderr}");
            assert!(
                stderr.contains("blocks.0.mlp.fc1.weight_scale")
                    && stderr.contains("positive and finite"),
                "{format} {bad}: {stderr}"
            );
        }
    }
    // Per-row int4 scales: the row is named.
    let cq = "convrot_w4a4\", \"convrot_groupsize\": 64, \"x\": \"";
    let mut scales = vec![0.25f32; N];
    scales[7] = f32::NAN;
    write_stack(&path, cq, safetensors::Dtype::I8, &scales);
    let stderr = String::from_utf8_lossy(&plan().stderr).into_owned();
    assert!(stderr.contains("element 7 (row 7)"), "{stderr}");
}

/// A copy of the tiny Llama in a temporary folder whose `model.norm.weight`
/// (bf16) is overwritten with `values` (bf16 bits), repeated over it.
fn tiny_llama_with_norm(values: &[u16]) -> tempfile::TempDir {
    use std::io::{Seek, SeekFrom, Write};
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dynvram_test_support::fixtures::tiny_llama();
    for f in ["model.safetensors", "config.json", "generation_config.json"] {
        std::fs::copy(src.join(f), dir.path().join(f)).expect("copy");
    }
    let weights = dir.path().join("model.safetensors");
    let range = dynvram_loader::SafetensorsFile::open(&weights)
        .expect("open")
        .tensors()
        .iter()
        .find(|t| t.name == "model.norm.weight")
        .expect("norm")
        .range
        .clone();
    let bytes: Vec<u8> = values
        .iter()
        .cycle()
        .take((range.end - range.start) as usize / 2)
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let mut f = std::fs::File::options()
        .write(true)
        .open(&weights)
        .expect("open");
    f.seek(SeekFrom::Start(range.start)).expect("seek");
    f.write_all(&bytes).expect("norm");
    dir
}

fn generate(dir: &std::path::Path) -> std::process::Output {
    dynvram()
        .arg("generate")
        .arg(dir)
        .args([
            "--prompt-ids",
            "1,2",
            "--max-new-tokens",
            "2",
            "--compute-dtype",
            "f32",
        ])
        .output()
        .expect("generate")
}

/// Finite weights that overflow (the final norm at ±bf16's largest value:
/// the hidden state holds +inf and -inf, so every logit is NaN) stop
/// `generate` naming the op and the step, instead of printing tokens picked
/// from NaN logits at exit 0.
#[test]
fn nan_logits_stop_generate_naming_op_and_step() {
    let dir = tiny_llama_with_norm(&[0x7f7f, 0xff7f]);
    let out = generate(dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success()
        && dynvram_test_support::skip::skip_without_adapter("nan_logits_stop_generate", &stderr)
    {
        return;
    }
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("lm_head's logits at the prompt is NaN"),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "no token printed: {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A NaN in a bf16 weight is refused before it is computed on, naming the
/// file, tensor and element: `generate` prints no token.
#[test]
fn nan_weight_stops_generate_naming_the_tensor() {
    let dir = tiny_llama_with_norm(&[0x3f80, 0x3f80, 0x7fc0]);
    let out = generate(dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success()
        && dynvram_test_support::skip::skip_without_adapter("nan_weight_stops_generate", &stderr)
    {
        return;
    }
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("model.safetensors: tensor `model.norm.weight` holds NaN at element 2")
            && stderr.contains("must be finite"),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "no token printed: {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// `run` on an MLP stack with +inf in row 9 of an f32 weight exits non-zero
/// naming it, without PASS; the clean file passes.
#[test]
fn run_refuses_an_infinite_weight_without_pass() {
    use std::io::{Seek, SeekFrom, Write};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("stack.safetensors");
    write_stack(&path, "int8_tensorwise", safetensors::Dtype::I8, &[0.5]);
    let run = || dynvram().arg("run").arg(&path).output().expect("run");
    let out = run();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success()
        && dynvram_test_support::skip::skip_without_adapter(
            "run_refuses_an_infinite_weight",
            &stderr,
        )
    {
        return;
    }
    assert!(
        out.status.success() && stdout.contains("PASS"),
        "clean: {stdout}{stderr}"
    );
    let at = dynvram_loader::SafetensorsFile::open(&path)
        .expect("open")
        .tensor("blocks.0.mlp.fc2.weight")
        .expect("fc2")
        .range
        .start;
    // fc2 is [K, N] f32: element 9 * N + 1 is in row 9.
    let mut f = std::fs::File::options()
        .write(true)
        .open(&path)
        .expect("open");
    f.seek(SeekFrom::Start(at + 4 * (9 * N + 1) as u64))
        .expect("seek");
    f.write_all(&f32::INFINITY.to_le_bytes()).expect("poison");
    drop(f);
    let out = run();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(!stdout.contains("PASS"), "{stdout}");
    let element = 9 * N + 1;
    assert!(
        stderr.contains(&format!(
            "tensor `blocks.0.mlp.fc2.weight` holds inf at element {element} (row 9)"
        )),
        "{stderr}"
    );
}
