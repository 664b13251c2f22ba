//! The tiny-llama checkpoint with its `*_proj` layers quantized by the quant
//! crate (int8_tensorwise, convrot_w4a4): it runs, and its logits stay close
//! to the f32 reference. Prints cosine similarity and top-1 agreement.

use crate::llama_common::open;
use dynvram_models::llama::{Checkpoint, Limits, argmax};
use dynvram_runtime::device::SpreadQuant;
use dynvram_runtime::quant::LinearDtype;
use dynvram_runtime::quant::quantize::{QuantizeOptions, TargetFormat, quantize_file};
use dynvram_test_support::fixtures;
use dynvram_test_support::gpu::{have_gpu, runtime};
use dynvram_test_support::safetensors::{self, get};
use dynvram_test_support::tolerance::cosine;

/// The tiny-llama checkpoint with its projections quantized to `target`,
/// in a temporary directory.
fn quantized(target: TargetFormat) -> tempfile::TempDir {
    let dir = fixtures::tiny_llama();
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("model.safetensors");
    let opts = QuantizeOptions::new(target, Some(r"_proj$"), None).expect("options");
    let report = quantize_file(
        &dir.join("model.safetensors"),
        &out,
        &opts,
        &mut |_, _, _| {},
    )
    .expect("quantize");
    assert_eq!(
        report.quantized.len(),
        4 * 7,
        "every projection quantized; skipped: {:?}",
        report.skipped
    );
    std::fs::copy(dir.join("config.json"), tmp.path().join("config.json")).expect("config copy");
    tmp
}

/// (cosine, top-1 agreement) of the prompts' logits against `logits_f32_*`.
fn quantized_agreement(test: &str, target: TargetFormat) -> Option<(f64, f64)> {
    let dir = fixtures::tiny_llama();
    if !have_gpu(test) {
        return None;
    }
    let tmp = quantized(target);
    let reference = safetensors::read(&dir.join("reference.safetensors"));
    let prompts = [
        get(&reference, "input_ids_p0").ids_u32(),
        get(&reference, "input_ids_p1").ids_u32(),
    ];
    let ckpt = Checkpoint::open(tmp.path()).expect("quantized checkpoint opens");
    let limits = Limits {
        max_seq: 32,
        max_rows: 19,
    };
    let rt = runtime(None);
    let (model, mut llama) = open(&rt, &ckpt, limits);
    let vocab = ckpt.config.vocab_size;
    let (mut got_all, mut want_all, mut agree, mut rows) = (vec![], vec![], 0, 0);
    for (p, prompt) in prompts.iter().enumerate() {
        let f = llama.forward(&rt, &model, prompt, 0).expect("forward");
        let want = &get(&reference, &format!("logits_f32_p{p}")).values;
        for (g, w) in f.logits.chunks(vocab).zip(want.chunks(vocab)) {
            agree += usize::from(argmax(g) == argmax(w));
            rows += 1;
        }
        got_all.extend_from_slice(&f.logits);
        want_all.extend_from_slice(want);
    }
    let cos = cosine(&got_all, &want_all);
    let top1 = agree as f64 / rows as f64;
    eprintln!(
        "{test}: {target:?}: logits cosine {cos:.5}, top-1 agreement {agree}/{rows} = {top1:.3}"
    );
    Some((cos, top1))
}

#[test]
fn tiny_llama_int8_tensorwise_stays_close() {
    if let Some((cos, top1)) = quantized_agreement(
        "tiny_llama_int8_tensorwise_stays_close",
        TargetFormat::Int8Tensorwise,
    ) {
        assert!(
            cos > 0.99 && top1 >= 0.8,
            "int8: cosine {cos}, top-1 {top1}"
        );
    }
}

#[test]
fn tiny_llama_convrot_w4a4_stays_close() {
    let target = TargetFormat::ConvrotW4a4 {
        group: 64,
        linear_dtype: LinearDtype::Int4,
    };
    if let Some((cos, top1)) = quantized_agreement("tiny_llama_convrot_w4a4_stays_close", target) {
        assert!(
            cos > 0.8 && top1 >= 0.1,
            "convrot_w4a4: cosine {cos}, top-1 {top1}"
        );
    }
}

/// Decode steps (M = 1) of the int4 model with the spread quantization in
/// both modes (the norm folded into the rotation launch, the residual add
/// into the GEMV; the GEMV coding the rotated rows, or a kernel coding them
/// once) and with the quantization launches: the same codes but where the
/// norm's sum of squares, taken in another order, moves one by a step. The
/// two spread modes make the same codes from the same rotation: the same
/// logits bit for bit.
#[test]
fn int4_decode_spread_matches_quantization_launches() {
    let test = "int4_decode_spread_matches_quantization_launches";
    if !have_gpu(test) {
        return;
    }
    let tmp = quantized(TargetFormat::ConvrotW4a4 {
        group: 64,
        linear_dtype: LinearDtype::Int4,
    });
    let ckpt = Checkpoint::open(tmp.path()).expect("quantized checkpoint opens");
    let reference = safetensors::read(&fixtures::tiny_llama().join("reference.safetensors"));
    let prompt = get(&reference, "input_ids_p0").ids_u32();
    let limits = Limits {
        max_seq: 32,
        max_rows: 19,
    };
    let steps = |spread: SpreadQuant| {
        let mut config = dynvram_runtime::RuntimeConfig::default();
        config.adapter.options.spread_quant = spread;
        let rt = dynvram_runtime::Runtime::new(config).expect("runtime opens");
        let (model, mut llama) = open(&rt, &ckpt, limits);
        let g = llama
            .generate_with(
                &rt,
                &model,
                &prompt,
                6,
                &[],
                true,
                &mut |r| argmax(r),
                &mut |_| {},
            )
            .expect("generate");
        (g.tokens, g.step_logits)
    };
    let launches = steps(SpreadQuant::Off);
    let in_gemv = steps(SpreadQuant::InGemv);
    let code_kernel = steps(SpreadQuant::CodeKernel);
    let one_launch = steps(SpreadQuant::OneLaunch);
    for (mode, spread) in [
        ("in GEMV", &in_gemv),
        ("code kernel", &code_kernel),
        ("one launch", &one_launch),
    ] {
        assert_eq!(spread.1.len(), launches.1.len(), "{mode}: steps");
        for (i, (a, b)) in spread.1.iter().zip(&launches.1).enumerate() {
            let cos = cosine(a, b);
            assert!(cos > 0.999, "{mode}: step {i}: logits cosine {cos}");
        }
        assert_eq!(spread.0[0], launches.0[0], "{mode}: first token");
    }
    for other in [&code_kernel, &one_launch] {
        assert_eq!(other.0, in_gemv.0, "the spread modes' tokens");
        for (i, (a, b)) in other.1.iter().zip(&in_gemv.1).enumerate() {
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(a), bits(b), "step {i}: the spread modes' logits");
        }
    }
}
