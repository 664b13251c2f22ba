//! The quantizer: bit-exact against kitchen's quantized weights in the conformance
//! files, and files it writes load back and validate.

use std::collections::HashMap;

use dynvram_quant::quantize::{
    quantize_convrot_w4a4_weight, quantize_float8_e4m3fn_weight, quantize_int8_tensorwise_weight,
};
use dynvram_quant::tensors::{Dtype, f32_bytes, f32s};
use dynvram_quant::{
    Format, LayerBytes, LinearDtype, QuantizeOptions, SafeFile, TargetFormat, TensorList,
    discover_layers, quantize_file, reference_linear,
};
use dynvram_test_support::fixtures;

#[test]
fn quantizer_reproduces_kitchen_weights_bit_exactly() {
    let dir = fixtures::conformance();
    let text = std::fs::read_to_string(dir.join("manifest.json")).expect("manifest");
    let man: serde_json::Value = serde_json::from_str(&text).expect("json");
    let mut checked = 0;
    for case in man["cases"].as_array().expect("cases") {
        if case["has_original_weight"] != true {
            continue;
        }
        let name = case["file"].as_str().expect("file");
        let buf = std::fs::read(dir.join(name)).expect("read");
        let file = SafeFile::parse(&buf).expect("parse");
        let l = &discover_layers(&file).expect("layers")[0];
        let w = f32s(file.data("original_weight").expect("original_weight"));
        let weight = file.data("layer.weight").expect("weight");
        let scale = f32s(file.data("layer.weight_scale").expect("scale"));
        let (qw, qs): (Vec<u8>, Vec<f32>) = match l.format {
            Format::ConvrotW4a4 { group, .. } => {
                quantize_convrot_w4a4_weight(&w, l.k, group).expect("fits")
            }
            Format::Int8Tensorwise {
                convrot_group: None,
            } => {
                let (q, s) = quantize_int8_tensorwise_weight(&w);
                (q.iter().map(|&v| v as u8).collect(), vec![s])
            }
            Format::Float8E4m3fn => {
                let (q, s) = quantize_float8_e4m3fn_weight(&w);
                (q, vec![s])
            }
            other => panic!("{name}: unexpected format {other:?}"),
        };
        let diff = qw.iter().zip(weight).filter(|(a, b)| a != b).count();
        assert_eq!(diff, 0, "{name}: {diff} weight bytes differ");
        assert_eq!(qs, scale, "{name}: scales differ");
        println!("{name}: weight and scale bit-exact");
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} cases had original_weight");
}

/// A small f32 model: three linears (one whose K does not fit convrot), a norm, a bias.
fn write_model(path: &std::path::Path) -> HashMap<String, Vec<f32>> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let mut v = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect() };
    let specs: [(&str, Vec<usize>); 6] = [
        ("a.weight", vec![32, 256]),
        ("a.bias", vec![32]),
        ("b.weight", vec![16, 512]),
        ("odd.weight", vec![8, 96]),
        ("norm.weight", vec![256]),
        ("skipme.weight", vec![8, 256]),
    ];
    let data: HashMap<String, Vec<f32>> = specs
        .iter()
        .map(|(n, s)| (n.to_string(), v(s.iter().product())))
        .collect();
    let bytes: HashMap<String, Vec<u8>> = data
        .iter()
        .map(|(k, x)| (k.clone(), f32_bytes(x)))
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = specs
        .iter()
        .map(|(n, s)| {
            let t = safetensors::tensor::TensorView::new(Dtype::F32, s.clone(), &bytes[*n])
                .expect("view");
            (n.to_string(), t)
        })
        .collect();
    let meta = HashMap::from([("hello".to_owned(), "world".to_owned())]);
    safetensors::serialize_to_file(views, Some(meta), path).expect("write model");
    data
}

#[test]
fn quantized_files_load_back_and_validate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("model.safetensors");
    let data = write_model(&input);
    let targets = [
        (
            TargetFormat::ConvrotW4a4 {
                group: 256,
                linear_dtype: LinearDtype::Int4,
            },
            r#"{"format": "convrot_w4a4", "convrot_groupsize": 256}"#,
        ),
        (
            TargetFormat::ConvrotW4a4 {
                group: 64,
                linear_dtype: LinearDtype::Int8,
            },
            r#"{"format": "convrot_w4a4", "convrot_groupsize": 64, "linear_dtype": "int8"}"#,
        ),
        (
            TargetFormat::Int8Tensorwise,
            r#"{"format": "int8_tensorwise"}"#,
        ),
        (TargetFormat::Float8E4m3fn, r#"{"format": "float8_e4m3fn"}"#),
    ];
    let skip = regex::Regex::new("^skip").expect("regex");
    for (target, json) in targets {
        let output = dir.path().join("out.safetensors");
        let opts = QuantizeOptions {
            target,
            keep: None,
            only: None,
            skip: Some(skip.clone()),
            allow_nonfinite: false,
            force: false,
        };
        let mut calls = Vec::new();
        let report = quantize_file(&input, &output, &opts, &mut |d, t, l| {
            calls.push((d, t, l.to_owned()))
        })
        .expect("quantize");
        assert_eq!(calls.last().map(|c| (c.0, c.1)), Some((4, 4)), "{calls:?}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&output)
                .expect("stat")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o644, "the written file is readable by all");
        }
        let convrot = matches!(target, TargetFormat::ConvrotW4a4 { .. });
        let mut want: Vec<&str> = if convrot {
            vec!["a", "b"]
        } else {
            vec!["a", "b", "odd"]
        };
        want.sort();
        assert_eq!(report.quantized, want, "{target:?}");
        assert!(report.skipped.iter().any(|s| s.layer == "skipme"));
        if convrot {
            let odd = report
                .skipped
                .iter()
                .find(|s| s.layer == "odd")
                .expect("odd skipped");
            assert!(odd.reason.contains("96"), "{}", odd.reason);
        }
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .expect("ls")
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "temp files left: {leftovers:?}");

        let buf = std::fs::read(&output).expect("read back");
        let file = SafeFile::parse(&buf).expect("parses");
        assert_eq!(
            file.header_metadata()
                .and_then(|m| m.get("hello"))
                .map(String::as_str),
            Some("world")
        );
        assert_eq!(file.data("a.comfy_quant").expect("json"), json.as_bytes());
        assert_eq!(
            file.data("norm.weight").expect("norm"),
            f32_bytes(&data["norm.weight"]).as_slice()
        );
        if let TargetFormat::ConvrotW4a4 { group, .. } = target {
            for l in ["a", "b"] {
                let w = &data[&format!("{l}.weight")];
                let k = w.len() / if l == "a" { 32 } else { 16 };
                let (packed, scales) = quantize_convrot_w4a4_weight(w, k, group).expect("fits");
                let got = file.data(&format!("{l}.weight")).expect("weight");
                assert_eq!(got, packed.as_slice(), "{l} {target:?}");
                let got = file.data(&format!("{l}.weight_scale")).expect("scale");
                assert_eq!(got, f32_bytes(&scales).as_slice(), "{l} {target:?}");
            }
        }
        let layers = discover_layers(&file).expect("written file validates");
        for l in &layers {
            // Quantized output close to the float product (quantization error only).
            let x: Vec<f32> = (0..l.k)
                .map(|i| ((i * 7 % 13) as f32 - 6.0) / 6.0)
                .collect();
            let bytes = LayerBytes {
                weight: file.data(&l.weight).expect("w"),
                scale: l.scale.as_deref().and_then(|s| file.data(s)),
                bias: l.bias.as_deref().and_then(|s| file.data(s)),
            };
            let y = reference_linear(l, bytes, &x, None).expect("runs").out;
            let w = &data[&format!("{}.weight", l.name)];
            let b = data.get(&format!("{}.bias", l.name));
            let exact = dynvram_quant::reference::gemm_f32(&x, w, l.k, b.map(Vec::as_slice));
            let scale = exact.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let err = y
                .iter()
                .zip(&exact)
                .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(
                err <= 0.35 * scale,
                "{target:?} {}: error {err} vs max {scale}",
                l.name
            );
        }
    }
}

#[test]
fn bad_group_size_and_missing_input_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("model.safetensors");
    write_model(&input);
    let out = dir.path().join("o.safetensors");
    let opts = |g| QuantizeOptions {
        target: TargetFormat::ConvrotW4a4 {
            group: g,
            linear_dtype: LinearDtype::Int4,
        },
        keep: None,
        only: None,
        skip: None,
        allow_nonfinite: false,
        force: false,
    };
    let e = quantize_file(&input, &out, &opts(128), &mut |_, _, _| {})
        .expect_err("128 is not a power of 4");
    assert!(e.to_string().contains("128"), "{e}");
    let e = quantize_file(
        &dir.path().join("nope"),
        &out,
        &opts(256),
        &mut |_, _, _| {},
    )
    .expect_err("missing");
    assert!(e.to_string().contains("nope"), "{e}");
    std::fs::write(&input, b"garbage").expect("write");
    let e =
        quantize_file(&input, &out, &opts(256), &mut |_, _, _| {}).expect_err("not safetensors");
    assert!(e.to_string().contains("model.safetensors"), "{e}");
    assert!(!out.exists());
}

fn int8_options() -> QuantizeOptions {
    QuantizeOptions::new(TargetFormat::Int8Tensorwise, None, None).expect("options")
}

/// Names in `dir` that look like temp files (the atomic writer's `.NAME.tmp-…`).
fn temp_files(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect()
}

/// The input shrinks while the quantizer runs (here: right after its first
/// layer): an error naming the file and a tensor, never SIGBUS (the input was
/// memory-mapped, and touching a page past the new end killed the process).
#[test]
fn input_truncated_while_quantizing_is_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("model.safetensors");
    write_model(&input);
    let out = dir.path().join("o.safetensors");
    let len = std::fs::metadata(&input).expect("stat").len();
    let mut calls = 0;
    let e = quantize_file(&input, &out, &int8_options(), &mut |_, _, _| {
        calls += 1;
        if calls == 1 {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&input)
                .and_then(|f| f.set_len(len / 4))
                .expect("truncate");
        }
    })
    .expect_err("the input shrank");
    let msg = e.to_string();
    assert!(msg.contains("model.safetensors"), "{msg}");
    assert!(msg.contains("tensor"), "{msg}");
    assert!(!out.exists());
    assert_eq!(temp_files(dir.path()), Vec::<String>::new());
}

/// NaN or ±inf in a weight: refused with the tensor and the first bad index;
/// `allow_nonfinite` quantizes it anyway.
#[test]
fn non_finite_weights_are_refused_with_tensor_and_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("model.safetensors");
    let out = dir.path().join("o.safetensors");
    for (bad, index) in [
        (f32::NAN, 37usize),
        (f32::INFINITY, 0),
        (f32::NEG_INFINITY, 1023),
    ] {
        let mut w = vec![0.5f32; 4 * 256];
        w[index] = bad;
        w[1023.min(index + 5)] = f32::NAN;
        let bytes = f32_bytes(&w);
        let view =
            safetensors::tensor::TensorView::new(Dtype::F32, vec![4, 256], &bytes).expect("view");
        safetensors::serialize_to_file([("l.weight", view)], None, &input).expect("write");
        let e = quantize_file(&input, &out, &int8_options(), &mut |_, _, _| {})
            .expect_err("non-finite weight");
        let msg = e.to_string();
        assert!(msg.contains("l.weight"), "{msg}");
        assert!(msg.contains(&format!("element {index} ")), "{msg}");
        assert!(!out.exists());
        let mut opts = int8_options();
        opts.allow_nonfinite = true;
        quantize_file(&input, &out, &opts, &mut |_, _, _| {}).expect("allowed");
        std::fs::remove_file(&out).expect("rm");
    }
}

/// Unchanged tensors are copied through, and the header metadata kept.
#[test]
fn copied_tensors_and_metadata_survive() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("model.safetensors");
    let data = write_model(&input);
    let out = dir.path().join("o.safetensors");
    let report = quantize_file(&input, &out, &int8_options(), &mut |_, _, _| {}).expect("q");
    assert!(report.copied >= 2, "{report:?}");
    let bytes = std::fs::read(&out).expect("read");
    let file = SafeFile::parse(&bytes).expect("parse");
    assert_eq!(
        file.header_metadata()
            .and_then(|m| m.get("hello"))
            .map(String::as_str),
        Some("world")
    );
    for name in ["a.bias", "norm.weight"] {
        assert_eq!(f32s(file.data(name).expect(name)), data[name], "{name}");
    }
    assert_eq!(report.bytes_out, bytes.len() as u64);
}

/// A FIFO as the input: refused at once (opening it waited for a writer).
#[cfg(unix)]
#[test]
fn a_fifo_input_is_refused_without_blocking() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("pipe.safetensors");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("skipped: mkfifo unavailable");
        return;
    }
    let out = dir.path().join("o.safetensors");
    let e = quantize_file(&fifo, &out, &int8_options(), &mut |_, _, _| {}).expect_err("fifo");
    assert!(e.to_string().contains("is a FIFO"), "{e}");
    assert!(!out.exists());
}

/// A file with a `{}` header has nothing to quantize: an error, no output
/// (issue 31: it became an empty file at exit 0).
#[test]
fn an_empty_header_is_refused_with_no_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("empty.safetensors");
    let mut bytes = 8u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}      ");
    std::fs::write(&input, bytes).expect("write");
    let out = dir.path().join("o.safetensors");
    let e = quantize_file(&input, &out, &int8_options(), &mut |_, _, _| {}).expect_err("empty");
    assert!(e.to_string().contains("holds no tensor"), "{e}");
    assert!(!out.exists());
}
