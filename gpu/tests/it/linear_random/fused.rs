//! Linears recorded together equal the one-by-one launches bit for bit:
//! activation codes reused by the next linear of the same input, q/k/v and
//! gate/up in one launch, and the add/norm/quantize launch before them.

use super::env_with_quant_wgs;
use crate::linear_common::{Env, HostLayer, env};
use dynvram_test_support::variants::rotation;

use dynvram_gpu::ops::elementwise::record_swiglu;
use dynvram_gpu::ops::encoder::Encoder;
use dynvram_gpu::ops::host;
use dynvram_gpu::ops::linear::conformance::upload_f32;
use dynvram_gpu::ops::linear::{
    AddNorm, Fold, Fusion, LinearWeights, RecordOptions, record_add_norm_quant, record_linear_with,
    record_linears_fused, rows_gemv_max_m,
};
use dynvram_gpu::ops::norm::record_add_rms_norm;
use dynvram_gpu::{ActDtype, Gpu, GpuTensor};
use dynvram_quant::{ActArith, Format, KernelChoice, LinearDtype};
use dynvram_test_support::gpu::any_adapter;
use dynvram_test_support::random::activations;
use dynvram_test_support::tolerance::assert_close_rel;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Linears of one input recorded back to back with `reuse_codes` quantize
/// it once where the quantization is the same (the outputs equal separate
/// recordings bit for bit, with fewer launches), and quantize again where it
/// is not (int8 activations after int4 ones).
#[test]
fn reused_activation_codes_give_the_same_outputs() {
    let Some(mut env) = env("reused_activation_codes_give_the_same_outputs", any_adapter) else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(77);
    let k = 512;
    let convrot = Format::ConvrotW4a4 {
        group: 256,
        linear_dtype: LinearDtype::Int4,
    };
    let int8 = Format::Int8Tensorwise {
        convrot_group: None,
    };
    let int4 = KernelChoice::Integer {
        act: ActArith::Int4,
        fast: false,
    };
    let int8_choice = KernelChoice::Integer {
        act: ActArith::Int8,
        fast: false,
    };
    let layers = [
        (HostLayer::random(&mut rng, convrot, 24, k, false), int4),
        (HostLayer::random(&mut rng, convrot, 40, k, true), int4),
        (HostLayer::random(&mut rng, int8, 16, k, false), int8_choice),
    ];
    let weights: Vec<LinearWeights> = layers
        .iter()
        .map(|(h, _)| LinearWeights::upload(&env.gpu, &h.meta, h.bytes()).expect("upload"))
        .collect();
    for m in [1usize, 7, 64] {
        let x = activations(&mut rng, m, k);
        let xt = upload_f32(&env.gpu, "x", &x, vec![m as u64, k as u64]).expect("x");
        let record = |env: &mut Env, reuse: bool| -> (Vec<Vec<f32>>, Vec<u32>) {
            let outs: Vec<GpuTensor> = weights
                .iter()
                .map(|w| {
                    let zeros = vec![0.0; m * w.n as usize];
                    upload_f32(&env.gpu, "out", &zeros, vec![m as u64, w.n]).expect("out")
                })
                .collect();
            let mut enc = Encoder::new(&env.gpu.device, "test");
            let mut launches = Vec::new();
            for (i, ((w, out), (_, choice))) in weights.iter().zip(&outs).zip(&layers).enumerate() {
                let opts = RecordOptions {
                    reuse_codes: reuse && i > 0,
                    ..RecordOptions::default()
                };
                record_linear_with(
                    &env.gpu,
                    &env.cache,
                    &mut enc,
                    w,
                    *choice,
                    &xt,
                    out,
                    &mut env.scratch,
                    &opts,
                )
                .expect("record");
                launches.push(env.scratch.last_dispatches());
            }
            env.gpu.queue.submit([enc.finish()]);
            let read = |o: &GpuTensor| env.gpu.read_f32(&o.buffer, 0, o.numel()).expect("read");
            (outs.iter().map(read).collect(), launches)
        };
        let (separate, separate_launches) = record(&mut env, false);
        let (reused, reused_launches) = record(&mut env, true);
        let bits = |v: &Vec<f32>| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        for (i, (a, b)) in separate.iter().zip(&reused).enumerate() {
            assert_eq!(bits(a), bits(b), "layer {i}, M = {m}");
        }
        assert!(
            reused_launches[1] < separate_launches[1],
            "M = {m}: the second int4 layer quantized again ({reused_launches:?} vs {separate_launches:?})"
        );
        assert_eq!(
            reused_launches[2], separate_launches[2],
            "M = {m}: int8 activations must be quantized anew"
        );
    }
}

/// q/k/v and gate/up as one launch ([`record_linears_fused`]) give the same
/// bits as the layers recorded one by one (and the SwiGLU kernel after
/// gate/up), for every format the fused GEMV takes, M from 1 to past the
/// fused quantization, with and without biases, N not a multiple of the
/// rows per workgroup; fp8 (one scalar scale per weight) is refused, and
/// recorded one by one by the caller.
#[test]
fn fused_linears_match_separate_ones() {
    let Some(mut env) = env("fused_linears_match_separate_ones", any_adapter) else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let w4 = Format::ConvrotW4a4 {
        group: 16,
        linear_dtype: LinearDtype::Int4,
    };
    let int = |act| KernelChoice::Integer { act, fast: false };
    let mut cases = vec![
        (w4, int(ActArith::Int4), 96),
        (w4, int(ActArith::Int8), 64),
        (
            Format::Int8Tensorwise {
                convrot_group: None,
            },
            int(ActArith::Int8),
            48,
        ),
        (Format::F32, KernelChoice::Float, 36),
        (Format::F16, KernelChoice::Float, 72),
        (Format::Bf16, KernelChoice::Float, 520),
    ];
    if env.gpu.caps.subgroups {
        cases.push((
            w4,
            KernelChoice::Integer {
                act: ActArith::Int4,
                fast: true,
            },
            96,
        ));
    }
    // 20: above the GEMVs, still the rows GEMV (not on CPU adapters).
    let big = 20.min(rows_gemv_max_m(&env.gpu) as usize);
    for (c, (format, choice, k)) in cases.into_iter().enumerate() {
        // Two of the Ms a case, rotating (every M over two cases).
        for (i, m) in rotation(&[1usize, 3, 8, big], c, 2).into_iter().enumerate() {
            let bias = i % 2 == 1;
            let hosts: Vec<HostLayer> = [13, 5, 67, 37, 37]
                .iter()
                .map(|&n| HostLayer::random(&mut rng, format, n, k, bias))
                .collect();
            let w: Vec<LinearWeights> = hosts
                .iter()
                .map(|h| LinearWeights::upload(&env.gpu, &h.meta, h.bytes()).expect("upload"))
                .collect();
            let x = activations(&mut rng, m, k);
            let xt = upload_f32(&env.gpu, "x", &x, vec![m as u64, k as u64]).expect("x");
            let what = format!("{format:?} {choice:?} M={m} K={k} bias={bias}");
            let outs = |env: &Env| -> Vec<GpuTensor> {
                w.iter()
                    .map(|w| {
                        let zeros = vec![0.0; m * w.n as usize];
                        upload_f32(&env.gpu, "out", &zeros, vec![m as u64, w.n]).expect("out")
                    })
                    .collect()
            };
            let read = |env: &Env, o: &GpuTensor| -> Vec<u32> {
                let v = env.gpu.read_f32(&o.buffer, 0, o.numel()).expect("read");
                v.iter().map(|f| f.to_bits()).collect()
            };
            // One by one: q/k/v (0..3), gate/up (3, 4) and the SwiGLU into
            // a sixth output shaped like gate's.
            let separate = outs(&env);
            let glu_separate = outs(&env).swap_remove(3);
            let mut enc = Encoder::new(&env.gpu.device, "test");
            let mut one_layer = 0;
            for (w, o) in w.iter().zip(&separate) {
                record_linear_with(
                    &env.gpu,
                    &env.cache,
                    &mut enc,
                    w,
                    choice,
                    &xt,
                    o,
                    &mut env.scratch,
                    &RecordOptions::default(),
                )
                .expect("record");
                one_layer = env.scratch.last_dispatches();
            }
            record_swiglu(
                &env.gpu,
                &env.cache,
                &mut enc,
                &separate[3],
                &separate[4],
                &glu_separate,
            )
            .expect("swiglu");
            env.gpu.queue.submit([enc.finish()]);
            // Fused: q/k/v as one launch (and two of them), gate/up + SwiGLU.
            let fused = outs(&env);
            let glu_fused = outs(&env).swap_remove(3);
            let mut enc = Encoder::new(&env.gpu.device, "test");
            let record = |fusion: Fusion<'_>, env: &mut Env, enc: &mut Encoder| {
                let done = record_linears_fused(
                    &env.gpu,
                    &env.cache,
                    enc,
                    fusion,
                    choice,
                    &xt,
                    &mut env.scratch,
                    &RecordOptions::default(),
                    &Fold::default(),
                )
                .expect("record fused");
                assert!(done, "{what}: not fused");
                // As many as one layer alone: (rotation, quantization,) GEMV.
                let launches = env.scratch.last_dispatches();
                assert_eq!(launches, one_layer, "{what}: launches");
            };
            let stack3 = [(&w[0], &fused[0]), (&w[1], &fused[1]), (&w[2], &fused[2])];
            record(Fusion::Stack(&stack3), &mut env, &mut enc);
            let stack2 = [(&w[3], &fused[3]), (&w[4], &fused[4])];
            record(Fusion::Stack(&stack2), &mut env, &mut enc);
            let glu = Fusion::Glu {
                gate: &w[3],
                up: &w[4],
                out: &glu_fused,
            };
            record(glu, &mut env, &mut enc);
            env.gpu.queue.submit([enc.finish()]);
            for (i, (a, b)) in separate.iter().zip(&fused).enumerate() {
                assert_eq!(read(&env, a), read(&env, b), "{what}: layer {i}");
            }
            assert_eq!(
                read(&env, &glu_separate),
                read(&env, &glu_fused),
                "{what}: SwiGLU"
            );
        }
    }
    // fp8: refused, nothing recorded.
    let h: Vec<HostLayer> = (0..2)
        .map(|_| HostLayer::random(&mut rng, Format::Float8E4m3fn, 16, 32, false))
        .collect();
    let w: Vec<LinearWeights> = h
        .iter()
        .map(|h| LinearWeights::upload(&env.gpu, &h.meta, h.bytes()).expect("upload"))
        .collect();
    let xt = upload_f32(&env.gpu, "x", &[0.5; 32], vec![1, 32]).expect("x");
    let out = upload_f32(&env.gpu, "out", &[0.0; 16], vec![1, 16]).expect("out");
    let mut enc = Encoder::new(&env.gpu.device, "test");
    let fusion = Fusion::Glu {
        gate: &w[0],
        up: &w[1],
        out: &out,
    };
    let done = record_linears_fused(
        &env.gpu,
        &env.cache,
        &mut enc,
        fusion,
        KernelChoice::Float,
        &xt,
        &mut env.scratch,
        &RecordOptions::default(),
        &Fold::default(),
    )
    .expect("fp8");
    assert!(!done, "fp8 weights were fused");
}

/// The residual add and RMS norm fused with the next integer linear's
/// rotation and quantization ([`record_add_norm_quant`]) against the norm
/// and the linear recorded separately, for rotated and unrotated formats,
/// both activation widths, f32 and f16 activations, K from one group to
/// past lavapipe's one-chunk rotation: the updated residual bit for bit;
/// in f32 the norm's output, the codes and the linear's output (against
/// the separate linear on the fused norm's output) bit for bit; in f16 the
/// norm's output within one ulp and the linear's output within f16
/// rounding (NVIDIA's and Mesa 26 lavapipe's compilers round some f16
/// values of the two kernels differently; Mesa 22's agree).
#[test]
fn add_norm_quant_matches_norm_then_linear() {
    let Some(mut env) = env_with_quant_wgs("add_norm_quant_matches_norm_then_linear", 256) else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let w4 = |group| Format::ConvrotW4a4 {
        group,
        linear_dtype: LinearDtype::Int4,
    };
    let int = |act| KernelChoice::Integer { act, fast: false };
    let cases = [
        (w4(16), int(ActArith::Int4), 96),
        (w4(256), int(ActArith::Int8), 4096),
        (w4(64), int(ActArith::Int4), 2816),
        (
            Format::Int8Tensorwise {
                convrot_group: None,
            },
            int(ActArith::Int8),
            48,
        ),
    ];
    let mut dtypes = vec![ActDtype::F32];
    if env.gpu.caps.shader_f16 {
        dtypes.push(ActDtype::F16);
    }
    let read_bits = |env: &Env, t: &GpuTensor| -> Vec<u32> {
        let v = host::read(&env.gpu, t).expect("read");
        v.iter().map(|f| f.to_bits()).collect()
    };
    let up = |gpu: &Gpu, d: &[f32], s: &[u64], dt| {
        host::upload(gpu, "t", d, s.to_vec(), dt).expect("upload")
    };
    // The fused norm's kernel: portable, and (subgroups) fast; the
    // separate linear always the portable one.
    let fused_choices = |choice: KernelChoice| {
        let KernelChoice::Integer { act, .. } = choice else {
            unreachable!()
        };
        env.fast_variants()
            .into_iter()
            .map(move |fast| KernelChoice::Integer { act, fast })
            .collect::<Vec<_>>()
    };
    let cases: Vec<_> = cases
        .into_iter()
        .flat_map(|(format, choice, k)| {
            fused_choices(choice)
                .into_iter()
                .map(move |fused| (format, choice, fused, k))
        })
        .collect();
    for (format, choice, fused_choice, k) in cases {
        for &dtype in &dtypes {
            for m in [1usize, 3] {
                let what = format!("{format:?} {fused_choice:?} {dtype:?} M={m} K={k}");
                let h = HostLayer::random(&mut rng, format, 24, k, m == 3);
                let w = LinearWeights::upload(&env.gpu, &h.meta, h.bytes()).expect("upload");
                let xs0 = activations(&mut rng, m, k);
                let delta = activations(&mut rng, m, k);
                let nw: Vec<f32> = (0..k).map(|_| rng.random_range(0.5..1.5)).collect();
                let shape = vec![m as u64, k as u64];
                let nwt = up(&env.gpu, &nw, &[k as u64], ActDtype::F32);
                let delta_t = up(&env.gpu, &delta, &shape, dtype);
                let tensors = |env: &Env| {
                    (
                        up(&env.gpu, &xs0, &shape, dtype),
                        host::zeros(&env.gpu, "h", shape.clone(), dtype).expect("h"),
                        host::zeros(&env.gpu, "out", vec![m as u64, 24], dtype).expect("out"),
                    )
                };
                // The linear on `x`, quantizing it itself or taking the
                // codes the fused norm left; then its codes and output.
                let linear =
                    |env: &mut Env, enc: &mut Encoder, x: &GpuTensor, out: &GpuTensor, reuse| {
                        let choice = if reuse { fused_choice } else { choice };
                        // Quantized apart: the codes are compared.
                        let opts = RecordOptions {
                            reuse_codes: reuse,
                            quantize_apart: true,
                            ..RecordOptions::default()
                        };
                        record_linear_with(
                            &env.gpu,
                            &env.cache,
                            enc,
                            &w,
                            choice,
                            x,
                            out,
                            &mut env.scratch,
                            &opts,
                        )
                        .expect("linear");
                    };
                let codes = |env: &Env| {
                    env.gpu
                        .read_back(env.scratch.act_codes().expect("codes"), 0, (m * k) as u64)
                        .expect("codes")
                };
                // Fused.
                let (xs_f, h_f, out_f) = tensors(&env);
                let mut enc = Encoder::new(&env.gpu.device, "test");
                let norm = AddNorm {
                    xs: &xs_f,
                    delta: &delta_t,
                    weight: &nwt,
                    eps: 1e-5,
                    out: &h_f,
                };
                let took = record_add_norm_quant(
                    &env.gpu,
                    &env.cache,
                    &mut enc,
                    &norm,
                    &w,
                    fused_choice,
                    &mut env.scratch,
                )
                .expect("fused norm");
                assert!(took, "{what}: not fused");
                linear(&mut env, &mut enc, &h_f, &out_f, true);
                assert_eq!(env.scratch.last_dispatches(), 1, "{what}: quantized again");
                env.gpu.queue.submit([enc.finish()]);
                let codes_f = codes(&env);
                let rotated = |env: &Env| {
                    let buf = env.scratch.rotated().expect("rotated");
                    let r = env.gpu.read_f32(buf, 0, (m * k) as u64).expect("read");
                    r.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
                };
                let rot_f = rotated(&env);
                // The norm alone, and the linear alone on the fused norm's output.
                let (xs_s, h_s, out_s) = tensors(&env);
                let mut enc = Encoder::new(&env.gpu.device, "test");
                record_add_rms_norm(
                    &env.gpu, &env.cache, &mut enc, &xs_s, &delta_t, &nwt, &h_s, 1e-5,
                )
                .expect("norm");
                linear(&mut env, &mut enc, &h_f, &out_s, false);
                env.gpu.queue.submit([enc.finish()]);
                assert_eq!(
                    read_bits(&env, &xs_s),
                    read_bits(&env, &xs_f),
                    "{what}: residual"
                );
                let (a, b) = (read_bits(&env, &h_s), read_bits(&env, &h_f));
                if dtype == ActDtype::F32 {
                    assert_eq!(a, b, "{what}: norm output");
                    assert_eq!(codes(&env), codes_f, "{what}: codes");
                    assert_eq!(rotated(&env), rot_f, "{what}: rotated input");
                    let (y, e) = (read_bits(&env, &out_f), read_bits(&env, &out_s));
                    assert_eq!(y, e, "{what}: linear output");
                } else {
                    // Adjacent f16 values (read back as f32).
                    let ulp = 1 << 13;
                    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                        assert!(
                            x.abs_diff(*y) <= ulp,
                            "{what}: norm output {i}: {x:#x} vs {y:#x}"
                        );
                    }
                    // The fused kernel quantizes its f32 norm output, the
                    // separate linear the f16-rounded one: a value within
                    // f16 rounding of a code boundary may take the next
                    // code (the H200: 1 of 2 816 int4 codes, 64 of 12 288
                    // int8 codes — f16's 2^-11 is a sixteenth of an int8
                    // step near the absmax). Each one step, at most a
                    // sixteenth of them; where all agree, the outputs
                    // within f16 rounding.
                    let (cs, cf) = (codes(&env), codes_f.clone());
                    let off: Vec<usize> = (0..cs.len()).filter(|&i| cs[i] != cf[i]).collect();
                    assert!(
                        off.len() <= (m * k).div_ceil(16),
                        "{what}: {} codes differ",
                        off.len()
                    );
                    for &i in &off {
                        let (a, b) = (cs[i] as i8, cf[i] as i8);
                        assert!(
                            (a as i32 - b as i32).abs() <= 1,
                            "{what}: code {i}: {a} vs {b}"
                        );
                    }
                    if off.is_empty() {
                        let y = host::read(&env.gpu, &out_f).expect("read");
                        let e = host::read(&env.gpu, &out_s).expect("read");
                        assert_close_rel(&what, &y, &e, 4e-3);
                    }
                }
            }
        }
    }
}
