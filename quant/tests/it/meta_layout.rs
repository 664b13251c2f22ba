//! Metadata in its three forms and layout validation, including the errors a broken
//! or mislabelled file must produce (each naming the layer).

use std::collections::HashMap;

use dynvram_quant::layer::validate_layer;
use dynvram_quant::meta::{MetaSource, layer_meta, parse_comfy_quant};
use dynvram_quant::tensors::{Dtype, TensorTable};
use dynvram_quant::{Format, LinearDtype, discover_layers};

fn cq(t: &mut TensorTable, layer: &str, json: &str) {
    t.push_data(
        &format!("{layer}.comfy_quant"),
        Dtype::U8,
        &[json.len()],
        json.as_bytes().to_vec(),
    );
}

fn w4a4(t: &mut TensorTable, layer: &str, n: usize, k: usize) {
    t.push(&format!("{layer}.weight"), Dtype::I8, &[n, k / 2]);
    t.push(&format!("{layer}.weight_scale"), Dtype::F32, &[n]);
}

#[test]
fn per_layer_tensor_with_defaults_and_nested_params() {
    let m = parse_comfy_quant("l", br#"{"format": "convrot_w4a4"}"#).expect("parses");
    assert_eq!(
        m.format,
        Format::ConvrotW4a4 {
            group: 256,
            linear_dtype: LinearDtype::Int4
        }
    );
    assert_eq!(m.source, MetaSource::Tensor);
    let m = parse_comfy_quant("l", br#"{"format": "convrot_w4a4", "params": {"convrot_groupsize": 64, "linear_dtype": "int8"}}"#)
        .expect("parses");
    assert_eq!(
        m.format,
        Format::ConvrotW4a4 {
            group: 64,
            linear_dtype: LinearDtype::Int8
        }
    );
    // Top level wins over params.
    let m = parse_comfy_quant(
        "l",
        br#"{"format": "convrot_w4a4", "convrot_groupsize": 16, "params": {"convrot_groupsize": 64, "format": "int8_tensorwise"}}"#,
    )
    .expect("parses");
    assert_eq!(
        m.format,
        Format::ConvrotW4a4 {
            group: 16,
            linear_dtype: LinearDtype::Int4
        }
    );
    // Format only in params.
    let m = parse_comfy_quant(
        "l",
        br#"{"params": {"format": "float8_e4m3fn", "full_precision_matrix_mult": true}}"#,
    )
    .expect("parses");
    assert_eq!(m.format, Format::Float8E4m3fn);
    assert!(m.full_precision_matrix_mult);
    let m = parse_comfy_quant("l", br#"{"format": "int8_tensorwise", "convrot": true}"#)
        .expect("parses");
    assert_eq!(
        m.format,
        Format::Int8Tensorwise {
            convrot_group: Some(256)
        }
    );
}

#[test]
fn bad_metadata_errors_name_the_layer_and_value() {
    let cases: [(&[u8], &str); 7] = [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (br#"{"convrot_groupsize": 64}"#, "no \"format\""),
        (br#"{"format": "nvfp4"}"#, "nvfp4"),
        (
            br#"{"format": "convrot_w4a4", "convrot_groupsize": 128}"#,
            "128",
        ),
        (
            br#"{"format": "convrot_w4a4", "convrot_groupsize": 1}"#,
            "convrot_groupsize 1",
        ),
        (
            br#"{"format": "convrot_w4a4", "linear_dtype": "fp16"}"#,
            "fp16",
        ),
    ];
    for (json, needle) in cases {
        let e = parse_comfy_quant("blocks.3.attn.qkv", json).expect_err("must fail");
        let msg = e.to_string();
        assert!(
            msg.contains("blocks.3.attn.qkv") && msg.contains(needle),
            "{msg}"
        );
    }
}

#[test]
fn header_metadata_form() {
    let mut t = TensorTable::default();
    w4a4(&mut t, "a", 8, 256);
    t.push("b.weight", Dtype::I8, &[8, 256]);
    t.push("b.weight_scale", Dtype::F32, &[]);
    t.push("c.weight", Dtype::BF16, &[8, 256]);
    let header = r#"{"format_version":"1.0","layers":{"a":{"format":"convrot_w4a4","convrot_groupsize":64},"b":{"params":{"format":"int8_tensorwise"}}}}"#;
    t.metadata = Some(HashMap::from([(
        "_quantization_metadata".to_owned(),
        header.to_owned(),
    )]));
    let layers = discover_layers(&t).expect("valid");
    let f: Vec<_> = layers
        .iter()
        .map(|l| (l.name.as_str(), l.format, l.source))
        .collect();
    assert_eq!(
        f,
        [
            (
                "a",
                Format::ConvrotW4a4 {
                    group: 64,
                    linear_dtype: LinearDtype::Int4
                },
                Some(MetaSource::Header)
            ),
            (
                "b",
                Format::Int8Tensorwise {
                    convrot_group: None
                },
                Some(MetaSource::Header)
            ),
            ("c", Format::Bf16, None),
        ]
    );
    // The per-layer tensor takes precedence over the header.
    cq(
        &mut t,
        "a",
        r#"{"format": "convrot_w4a4", "convrot_groupsize": 16}"#,
    );
    let m = layer_meta(&t, "a").expect("ok").expect("quantized");
    assert_eq!(m.source, MetaSource::Tensor);
    assert_eq!(
        m.format,
        Format::ConvrotW4a4 {
            group: 16,
            linear_dtype: LinearDtype::Int4
        }
    );
    t.metadata = Some(HashMap::from([(
        "_quantization_metadata".to_owned(),
        "{oops".to_owned(),
    )]));
    let e = discover_layers(&t).expect_err("bad header");
    assert!(e.to_string().contains("_quantization_metadata"), "{e}");
}

#[test]
fn scaled_fp8_marker_form() {
    let mut t = TensorTable::default();
    t.push("scaled_fp8", Dtype::F8_E4M3, &[0]);
    t.push("x.weight", Dtype::F8_E4M3, &[16, 32]);
    t.push("x.scale_weight", Dtype::F32, &[]);
    t.push("x.scale_input", Dtype::F32, &[]);
    t.push("y.weight", Dtype::F8_E5M2, &[16, 32]);
    t.push("y.scale_weight", Dtype::F32, &[1]);
    t.push("y.bias", Dtype::F16, &[16]);
    t.push("z.weight", Dtype::F16, &[16, 32]);
    let layers = discover_layers(&t).expect("valid");
    assert_eq!(layers[0].format, Format::Float8E4m3fn);
    assert_eq!(layers[0].scale.as_deref(), Some("x.scale_weight"));
    assert_eq!(layers[0].input_scale.as_deref(), Some("x.scale_input"));
    assert_eq!(layers[0].source, Some(MetaSource::ScaledFp8));
    assert_eq!(layers[1].format, Format::Float8E5m2);
    assert_eq!(layers[1].bias_dtype, Some(Dtype::F16));
    assert_eq!(layers[2].format, Format::F16);
    // A scaled_fp8 layer whose scale is missing is an error naming layer and tensor.
    let mut t2 = TensorTable::default();
    t2.push("scaled_fp8", Dtype::F8_E4M3, &[0]);
    t2.push("x.weight", Dtype::F8_E4M3, &[16, 32]);
    let e = validate_layer(&t2, "x").expect_err("missing scale");
    assert!(e.to_string().contains("x.scale_weight"), "{e}");
}

fn expect_layout_error(t: &TensorTable, layer: &str, needles: &[&str]) {
    let e = validate_layer(t, layer).expect_err("must fail");
    let msg = e.to_string();
    assert!(msg.contains(&format!("layer {layer}")), "{msg}");
    for n in needles {
        assert!(msg.contains(n), "{msg} lacks {n}");
    }
}

#[test]
fn layout_errors_name_layer_tensor_expected_and_found() {
    let j4 = r#"{"format": "convrot_w4a4", "convrot_groupsize": 256}"#;
    // Wrong weight dtype.
    let mut t = TensorTable::default();
    t.push("l.weight", Dtype::U8, &[8, 128]);
    t.push("l.weight_scale", Dtype::F32, &[8]);
    cq(&mut t, "l", j4);
    expect_layout_error(&t, "l", &["l.weight", "U8", "I8"]);
    // Wrong scale shape.
    let mut t = TensorTable::default();
    t.push("l.weight", Dtype::I8, &[8, 128]);
    t.push("l.weight_scale", Dtype::F32, &[]);
    cq(&mut t, "l", j4);
    expect_layout_error(&t, "l", &["l.weight_scale", "[8]", "[]"]);
    // Missing scale.
    let mut t = TensorTable::default();
    t.push("l.weight", Dtype::I8, &[8, 128]);
    cq(&mut t, "l", j4);
    expect_layout_error(&t, "l", &["missing tensor l.weight_scale"]);
    // K not a multiple of G.
    let mut t = TensorTable::default();
    w4a4(&mut t, "l", 8, 384);
    cq(&mut t, "l", j4);
    expect_layout_error(&t, "l", &["K = 384", "256"]);
    let mut t = TensorTable::default();
    w4a4(&mut t, "l", 8, 512);
    cq(
        &mut t,
        "l",
        r#"{"format": "convrot_w4a4", "convrot_groupsize": 1024}"#,
    );
    expect_layout_error(&t, "l", &["K = 512", "1024"]);
    // K % 64 with G = 16.
    let mut t = TensorTable::default();
    w4a4(&mut t, "l", 8, 48);
    cq(
        &mut t,
        "l",
        r#"{"format": "convrot_w4a4", "convrot_groupsize": 16}"#,
    );
    expect_layout_error(&t, "l", &["K = 48", "64"]);
    // int8_tensorwise with convrot needs [N, 1].
    let mut t = TensorTable::default();
    t.push("l.weight", Dtype::I8, &[8, 256]);
    t.push("l.weight_scale", Dtype::F32, &[]);
    cq(
        &mut t,
        "l",
        r#"{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}"#,
    );
    expect_layout_error(&t, "l", &["[8, 1]"]);
    // Mislabelled: fp8 JSON on an int8 weight.
    let mut t = TensorTable::default();
    t.push("l.weight", Dtype::I8, &[8, 256]);
    t.push("l.weight_scale", Dtype::F32, &[]);
    cq(&mut t, "l", r#"{"format": "float8_e4m3fn"}"#);
    expect_layout_error(&t, "l", &["F8_E4M3", "I8"]);
    // Bias of the wrong length.
    let mut t = TensorTable::default();
    t.push("l.weight", Dtype::F32, &[8, 16]);
    t.push("l.bias", Dtype::F32, &[9]);
    expect_layout_error(&t, "l", &["l.bias", "[9]", "[8]"]);
    // Integer weight without metadata.
    let mut t = TensorTable::default();
    t.push("l.weight", Dtype::I8, &[8, 16]);
    expect_layout_error(&t, "l", &["no comfy_quant"]);
    // comfy_quant that is not 1-D U8.
    let mut t = TensorTable::default();
    t.push("l.weight", Dtype::F32, &[8, 16]);
    t.push_data("l.comfy_quant", Dtype::I32, &[4], vec![0; 16]);
    expect_layout_error(&t, "l", &["l.comfy_quant", "I32"]);
}
