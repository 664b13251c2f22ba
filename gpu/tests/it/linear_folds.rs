//! The RMS norm and the residual add folded into float multi-row GEMVs
//! (`Fold`) against the same ops as separate launches: the residual add
//! bit for bit in f32 and within one rounding in f16 (Mesa 26's compiler
//! may skip the f16 round trip of the linear's output before the add); the
//! folded norm within the rounding of the norm's output (the folded GEMV
//! scales its dot products by the norm factor instead of reading rounded
//! normalised values, and sums the squares in its own order), for one
//! layer, q/k/v stacked and gate/up with SwiGLU, f32 and f16 activations,
//! weights f32/f16/bf16; and what cannot fold is refused before anything
//! is recorded.

use crate::linear_common::{HostLayer, env};
use dynvram_gpu::ops::elementwise::{record_add_inplace, record_swiglu};
use dynvram_gpu::ops::encoder::Encoder;
use dynvram_gpu::ops::host;
use dynvram_gpu::ops::linear::{
    Fold, Fusion, LinearWeights, NormFold, RecordOptions, fold_unusable, record_linear_folded,
    record_linear_with, record_linears_fused, rows_gemv_max_m,
};
use dynvram_gpu::ops::norm::record_rms_norm;
use dynvram_gpu::{ActDtype, Gpu, GpuTensor};
use dynvram_quant::{ActArith, Format, KernelChoice, LinearDtype};
use dynvram_test_support::gpu::any_adapter;
use dynvram_test_support::random::{rng, uniform};
use dynvram_test_support::tolerance::assert_close_rel;
use dynvram_test_support::variants::rotation;

const EPS: f32 = 1e-5;

#[test]
fn folded_norm_matches_norm_then_linears() {
    let Some(mut env) = env("folded_norm_matches_norm_then_linears", any_adapter) else {
        return;
    };
    let mut rng = rng(31);
    for dtype in env.act_dtypes() {
        // The norm's output is rounded to `dtype`; one ulp of it moves a
        // K-long dot product by about that much relative to its scale.
        let rel = match dtype {
            ActDtype::F32 => 1e-5,
            ActDtype::F16 => 4e-3,
        };
        let formats = [(Format::F32, 36), (Format::F16, 72), (Format::Bf16, 520)];
        for (f, (format, k)) in formats.into_iter().enumerate() {
            // Two of the Ms a format, rotating.
            let ms = rotation(&[1usize, 2, 3, 4], f + dtype as usize, 2);
            for (i, m) in ms.into_iter().enumerate() {
                let what = format!("{format:?} {dtype:?} M={m} K={k}");
                let bias = i % 2 == 0;
                let hosts: Vec<HostLayer> = [13, 5, 67, 37, 37]
                    .iter()
                    .map(|&n| HostLayer::random(&mut rng, format, n, k, bias))
                    .collect();
                let w: Vec<LinearWeights> = hosts
                    .iter()
                    .map(|h| LinearWeights::upload(&env.gpu, &h.meta, h.bytes()).expect("up"))
                    .collect();
                let g = &env.gpu;
                let mut xs = uniform(&mut rng, m * k, 3.0);
                xs[k / 2] = 50.0;
                let xs = host::upload(g, "xs", &xs, vec![m as u64, k as u64], dtype).expect("x");
                let nw = uniform(&mut rng, k, 1.5);
                let nw = host::upload(g, "nw", &nw, vec![k as u64], ActDtype::F32).expect("w");
                let h = host::zeros(g, "h", vec![m as u64, k as u64], dtype).expect("h");
                let outs = |g: &Gpu| -> Vec<GpuTensor> {
                    w.iter()
                        .map(|w| host::zeros(g, "out", vec![m as u64, w.n], dtype).expect("o"))
                        .collect()
                };
                // Separate: the norm, the five linears, SwiGLU of 3 and 4.
                let (sep, sep_glu) = (outs(g), outs(g).swap_remove(3));
                let mut enc = Encoder::new(&g.device, "test");
                record_rms_norm(g, &env.cache, &mut enc, &xs, &nw, &h, EPS).expect("norm");
                for (w, o) in w.iter().zip(&sep) {
                    record_linear_with(
                        g,
                        &env.cache,
                        &mut enc,
                        w,
                        KernelChoice::Float,
                        &h,
                        o,
                        &mut env.scratch,
                        &RecordOptions::default(),
                    )
                    .expect("linear");
                }
                record_swiglu(g, &env.cache, &mut enc, &sep[3], &sep[4], &sep_glu).expect("swiglu");
                g.queue.submit([enc.finish()]);
                // Folded: layer 0 alone, 1 and 2 stacked, gate/up (3, 4) with
                // SwiGLU, all reading the residual stream itself.
                let (fol, fol_glu) = (outs(g), outs(g).swap_remove(3));
                let fold = Fold {
                    norm: Some(NormFold {
                        weight: &nw,
                        eps: EPS,
                    }),
                    residual: false,
                };
                let mut enc = Encoder::new(&g.device, "test");
                record_linear_folded(
                    g,
                    &env.cache,
                    &mut enc,
                    &w[0],
                    KernelChoice::Float,
                    &xs,
                    &fol[0],
                    &mut env.scratch,
                    &fold,
                    &RecordOptions::default(),
                )
                .expect("folded linear");
                assert_eq!(env.scratch.last_dispatches(), 1, "{what}: one launch");
                let stack = [(&w[1], &fol[1]), (&w[2], &fol[2])];
                let glu = Fusion::Glu {
                    gate: &w[3],
                    up: &w[4],
                    out: &fol_glu,
                };
                for fusion in [Fusion::Stack(&stack), glu] {
                    let done = record_linears_fused(
                        g,
                        &env.cache,
                        &mut enc,
                        fusion,
                        KernelChoice::Float,
                        &xs,
                        &mut env.scratch,
                        &RecordOptions::default(),
                        &fold,
                    )
                    .expect("folded fused");
                    assert!(done, "{what}: not fused");
                }
                g.queue.submit([enc.finish()]);
                let read = |t: &GpuTensor| host::read(g, t).expect("read");
                for i in 0..3 {
                    assert_close_rel(
                        &format!("{what}: layer {i}"),
                        &read(&fol[i]),
                        &read(&sep[i]),
                        rel,
                    );
                }
                assert_close_rel(
                    &format!("{what}: SwiGLU"),
                    &read(&fol_glu),
                    &read(&sep_glu),
                    2.0 * rel,
                );
            }
        }
    }
}

#[test]
fn folded_residual_add_matches_linear_then_add() {
    let Some(mut env) = env("folded_residual_add_matches_linear_then_add", any_adapter) else {
        return;
    };
    let mut rng = rng(32);
    for dtype in env.act_dtypes() {
        for (format, k) in [(Format::F32, 36), (Format::F16, 72), (Format::Bf16, 520)] {
            // The largest M the rows GEMV takes here (32; 8 on CPU adapters).
            let big = rows_gemv_max_m(&env.gpu) as usize;
            for (i, m) in [1usize, 2, 8, big].into_iter().enumerate() {
                let what = format!("{format:?} {dtype:?} M={m} K={k}");
                let n = [29, 64, 3, 130][i];
                let hl = HostLayer::random(&mut rng, format, n, k, i % 2 == 1);
                let w = LinearWeights::upload(&env.gpu, &hl.meta, hl.bytes()).expect("up");
                let g = &env.gpu;
                let shape = |c: usize| vec![m as u64, c as u64];
                let x = uniform(&mut rng, m * k, 2.0);
                let x = host::upload(g, "x", &x, shape(k), dtype).expect("x");
                let r0 = uniform(&mut rng, m * n, 8.0);
                let (ra, rb) = (
                    host::upload(g, "resid", &r0, shape(n), dtype).expect("r"),
                    host::upload(g, "resid", &r0, shape(n), dtype).expect("r"),
                );
                let tmp = host::zeros(g, "tmp", shape(n), dtype).expect("tmp");
                let mut enc = Encoder::new(&g.device, "test");
                record_linear_with(
                    g,
                    &env.cache,
                    &mut enc,
                    &w,
                    KernelChoice::Float,
                    &x,
                    &tmp,
                    &mut env.scratch,
                    &RecordOptions::default(),
                )
                .expect("linear");
                record_add_inplace(g, &env.cache, &mut enc, &ra, &tmp).expect("add");
                let fold = Fold {
                    norm: None,
                    residual: true,
                };
                record_linear_folded(
                    g,
                    &env.cache,
                    &mut enc,
                    &w,
                    KernelChoice::Float,
                    &x,
                    &rb,
                    &mut env.scratch,
                    &fold,
                    &RecordOptions::default(),
                )
                .expect("folded");
                g.queue.submit([enc.finish()]);
                let (got, want) = (
                    host::read(g, &rb).expect("r"),
                    host::read(g, &ra).expect("r"),
                );
                if dtype == ActDtype::F32 {
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&want), "{what}");
                } else {
                    // The linear's output and the sum each rounded to f16
                    // once: within an ulp of each (the output is about
                    // |sum - resid|).
                    for ((a, b), r) in got.iter().zip(&want).zip(&r0) {
                        let tol = (b.abs() + (b - r).abs()) * 2f32.powi(-10) + 1e-6;
                        assert!((a - b).abs() <= tol, "{what}: {a} vs {b}");
                    }
                }
            }
        }
    }
}

#[test]
fn what_cannot_fold_is_refused() {
    let Some(mut env) = env("what_cannot_fold_is_refused", any_adapter) else {
        return;
    };
    let mut rng = rng(33);
    let g = &env.gpu;
    let (k, n) = (64usize, 16usize);
    let mut up = |format| {
        let h = HostLayer::random(&mut rng, format, n, k, false);
        LinearWeights::upload(g, &h.meta, h.bytes()).expect("up")
    };
    let bf16 = up(Format::Bf16);
    let w4 = up(Format::ConvrotW4a4 {
        group: 16,
        linear_dtype: LinearDtype::Int4,
    });
    let nw = host::upload(g, "nw", &vec![1.0; k], vec![k as u64], ActDtype::F32).expect("w");
    let short = host::upload(g, "nw", &[1.0; 8], vec![8], ActDtype::F32).expect("w");
    let norm = |weight| Fold {
        norm: Some(NormFold { weight, eps: EPS }),
        residual: false,
    };
    let resid = Fold {
        norm: None,
        residual: true,
    };
    let int4 = KernelChoice::Integer {
        act: ActArith::Int4,
        fast: false,
    };
    let float = KernelChoice::Float;
    assert_eq!(fold_unusable(g, &bf16, float, 1, &norm(&nw)), None);
    assert_eq!(
        fold_unusable(g, &bf16, float, rows_gemv_max_m(g), &resid),
        None
    );
    assert_eq!(fold_unusable(g, &bf16, float, 40, &Fold::default()), None);
    // Integer layers fold through the spread quantization (M <= 8).
    assert_eq!(fold_unusable(g, &w4, int4, 1, &norm(&nw)), None);
    assert_eq!(fold_unusable(g, &w4, int4, 8, &resid), None);
    for (w, choice, m, fold) in [
        (&w4, int4, 9, resid),
        (&bf16, float, 33, resid),
        (&bf16, float, 5, norm(&nw)),
        (&bf16, float, 1, norm(&short)),
    ] {
        let why = fold_unusable(g, w, choice, m, &fold).expect("refused");
        let x = host::zeros(g, "x", vec![m, k as u64], ActDtype::F32).expect("x");
        let out = host::zeros(g, "out", vec![m, n as u64], ActDtype::F32).expect("o");
        let mut enc = Encoder::new(&g.device, "test");
        let err = record_linear_folded(
            g,
            &env.cache,
            &mut enc,
            w,
            choice,
            &x,
            &out,
            &mut env.scratch,
            &fold,
            &RecordOptions::default(),
        )
        .expect_err("folded where it cannot");
        assert!(err.to_string().contains(why), "{err} / {why}");
    }
    // A residual add is one layer's: fused linears refuse it (nothing
    // recorded, the caller records them one by one).
    let x = host::zeros(g, "x", vec![1, k as u64], ActDtype::F32).expect("x");
    let outs: Vec<GpuTensor> = (0..2)
        .map(|_| host::zeros(g, "o", vec![1, n as u64], ActDtype::F32).expect("o"))
        .collect();
    let stack = [(&bf16, &outs[0]), (&bf16, &outs[1])];
    let mut enc = Encoder::new(&g.device, "test");
    let done = record_linears_fused(
        g,
        &env.cache,
        &mut enc,
        Fusion::Stack(&stack),
        float,
        &x,
        &mut env.scratch,
        &RecordOptions::default(),
        &resid,
    )
    .expect("refusal is not an error");
    assert!(!done, "a residual add was folded into fused linears");
}
