//! The spread quantization of integer layers at decode sizes
//! (`linear_rotate_max.wgsl`, then the GEMV coding the rotated rows itself,
//! `SpreadQuant::InGemv`, or `linear_rotated_codes.wgsl` coding them once,
//! `SpreadQuant::CodeKernel`, or both in one launch whose last workgroup a
//! row codes it, `SpreadQuant::OneLaunch`; every check runs all three)
//! with the folds it
//! takes: the residual add in the GEMV's epilogue bit for
//! bit against the linear then the add (f32); the RMS norm in the rotation
//! launch against the norm kernel then the linears quantized apart (the
//! norm's sum of squares in another order moves a normalised value by an
//! ulp or so, which can move a code by one: most outputs equal, all close);
//! one rotation for linears that share an input and norm; rows longer than
//! a rotation chunk and not a multiple of it. The coding kernel's codes and
//! scales against the quantization launches' and the CPU reference's, bit
//! for bit, over M = 1..=8 and awkward K, with and without the norm fold;
//! the two modes' outputs against each other, bit for bit.

use crate::linear_common::{HostLayer, env};
use dynvram_gpu::device::SpreadQuant;
use dynvram_gpu::ops::elementwise::{record_add_inplace, record_swiglu};
use dynvram_gpu::ops::encoder::Encoder;
use dynvram_gpu::ops::host;
use dynvram_gpu::ops::linear::{
    Fold, Fusion, LinearWeights, NORM_FOLD_MAX_M, NormFold, RecordOptions, record_linear_folded,
    record_linear_with, record_linears_fused,
};
use dynvram_gpu::ops::norm::record_rms_norm;
use dynvram_gpu::{ActDtype, GpuTensor};
use dynvram_quant::reference::{Rotation, quantize_act_for, rotate};
use dynvram_quant::{ActArith, Format, KernelChoice, LinearDtype};
use dynvram_test_support::gpu::any_adapter;
use dynvram_test_support::random::{rng, uniform};
use dynvram_test_support::variants::rotation;

const EPS: f32 = 1e-5;

/// Integer formats, their activation arithmetic and a K (a multiple of 32
/// and of the group; 1088 spans two rotation chunks, the second partial).
fn cases() -> Vec<(Format, ActArith, usize)> {
    let w4 = |group| Format::ConvrotW4a4 {
        group,
        linear_dtype: LinearDtype::Int4,
    };
    vec![
        (w4(16), ActArith::Int4, 96),
        (w4(64), ActArith::Int4, 1088),
        (w4(64), ActArith::Int8, 256),
        (
            Format::Int8Tensorwise {
                convrot_group: Some(16),
            },
            ActArith::Int8,
            1088,
        ),
        (
            Format::Int8Tensorwise {
                convrot_group: None,
            },
            ActArith::Int8,
            160,
        ),
    ]
}

/// The spread modes, with the dispatches a linear takes in each (the
/// rotation, the coding kernel if any, the GEMV).
const MODES: [(SpreadQuant, u32); 3] = [
    (SpreadQuant::InGemv, 2),
    (SpreadQuant::CodeKernel, 3),
    (SpreadQuant::OneLaunch, 2),
];

fn mode(spread: SpreadQuant) -> RecordOptions {
    RecordOptions {
        spread_quant: Some(spread),
        ..RecordOptions::default()
    }
}

fn apart() -> RecordOptions {
    RecordOptions {
        quantize_apart: true,
        ..RecordOptions::default()
    }
}

#[test]
fn spread_residual_add_matches_linear_then_add() {
    let Some(mut env) = env("spread_residual_add_matches_linear_then_add", any_adapter) else {
        return;
    };
    let mut rng = rng(41);
    for (c, (format, act, k)) in cases().into_iter().enumerate() {
        for fast in env.fast_variants_for(c) {
            for (i, m) in [1usize, 3, 8].into_iter().enumerate() {
                let what = format!("{format:?} {act:?} fast={fast} M={m} K={k}");
                let n = [29, 64, 130][i];
                let hl = HostLayer::random(&mut rng, format, n, k, i % 2 == 1);
                let w = LinearWeights::upload(&env.gpu, &hl.meta, hl.bytes()).expect("up");
                let g = &env.gpu;
                let choice = KernelChoice::Integer { act, fast };
                let shape = |c: usize| vec![m as u64, c as u64];
                let x = uniform(&mut rng, m * k, 2.0);
                let x = host::upload(g, "x", &x, shape(k), ActDtype::F32).expect("x");
                let r0 = uniform(&mut rng, m * n, 8.0);
                let ra = host::upload(g, "resid", &r0, shape(n), ActDtype::F32).expect("r");
                let tmp = host::zeros(g, "tmp", shape(n), ActDtype::F32).expect("tmp");
                let mut enc = Encoder::new(&g.device, "test");
                record_linear_with(
                    g,
                    &env.cache,
                    &mut enc,
                    &w,
                    choice,
                    &x,
                    &tmp,
                    &mut env.scratch,
                    &apart(),
                )
                .expect("linear");
                record_add_inplace(g, &env.cache, &mut enc, &ra, &tmp).expect("add");
                let fold = Fold {
                    norm: None,
                    residual: true,
                };
                let mut rbs = Vec::new();
                for (spread, dispatches) in MODES {
                    let rb = host::upload(g, "resid", &r0, shape(n), ActDtype::F32).expect("r");
                    record_linear_folded(
                        g,
                        &env.cache,
                        &mut enc,
                        &w,
                        choice,
                        &x,
                        &rb,
                        &mut env.scratch,
                        &fold,
                        &mode(spread),
                    )
                    .expect("folded");
                    assert_eq!(
                        env.scratch.last_dispatches(),
                        dispatches,
                        "{what} {spread:?}: rotation, codes and GEMV"
                    );
                    rbs.push((spread, rb));
                }
                g.queue.submit([enc.finish()]);
                let bits = |t: &GpuTensor| {
                    let v = host::read(g, t).expect("read");
                    v.iter().map(|f| f.to_bits()).collect::<Vec<_>>()
                };
                for (spread, rb) in &rbs {
                    assert_eq!(bits(rb), bits(&ra), "{what} {spread:?}");
                }
            }
        }
    }
}

#[test]
fn spread_norm_matches_norm_then_linears() {
    let Some(mut env) = env("spread_norm_matches_norm_then_linears", any_adapter) else {
        return;
    };
    let mut rng = rng(42);
    for dtype in env.act_dtypes() {
        for (c, (format, act, k)) in cases().into_iter().enumerate() {
            for fast in env.fast_variants_for(c + dtype as usize) {
                for m in rotation(&[1usize, 4], c, 1) {
                    let what = format!("{format:?} {act:?} {dtype:?} fast={fast} M={m} K={k}");
                    let choice = KernelChoice::Integer { act, fast };
                    let hosts: Vec<HostLayer> = [13, 5, 67, 37, 37]
                        .iter()
                        .map(|&n| HostLayer::random(&mut rng, format, n, k, m == 1))
                        .collect();
                    let w: Vec<LinearWeights> = hosts
                        .iter()
                        .map(|h| LinearWeights::upload(&env.gpu, &h.meta, h.bytes()).expect("up"))
                        .collect();
                    let g = &env.gpu;
                    let mut xs = uniform(&mut rng, m * k, 3.0);
                    xs[k / 2] = 40.0;
                    let xs =
                        host::upload(g, "xs", &xs, vec![m as u64, k as u64], dtype).expect("x");
                    let nw = uniform(&mut rng, k, 1.5);
                    let nw = host::upload(g, "nw", &nw, vec![k as u64], ActDtype::F32).expect("w");
                    let h = host::zeros(g, "h", vec![m as u64, k as u64], dtype).expect("h");
                    let outs = || -> Vec<GpuTensor> {
                        w.iter()
                            .map(|w| host::zeros(g, "out", vec![m as u64, w.n], dtype).expect("o"))
                            .collect()
                    };
                    // Apart: the norm, the five linears, SwiGLU of 3 and 4.
                    let (sep, sep_glu) = (outs(), outs().swap_remove(3));
                    let mut enc = Encoder::new(&g.device, "test");
                    record_rms_norm(g, &env.cache, &mut enc, &xs, &nw, &h, EPS).expect("norm");
                    for (w, o) in w.iter().zip(&sep) {
                        record_linear_with(
                            g,
                            &env.cache,
                            &mut enc,
                            w,
                            choice,
                            &h,
                            o,
                            &mut env.scratch,
                            &apart(),
                        )
                        .expect("linear");
                    }
                    record_swiglu(g, &env.cache, &mut enc, &sep[3], &sep[4], &sep_glu)
                        .expect("swiglu");
                    // Spread: layer 0 alone, 1 with the rows 0 left, 1 and 2
                    // stacked, gate/up with SwiGLU, all on the residual stream;
                    // in each mode.
                    let fold = Fold {
                        norm: Some(NormFold {
                            weight: &nw,
                            eps: EPS,
                        }),
                        residual: false,
                    };
                    let mut runs = Vec::new();
                    for (spread, dispatches) in MODES {
                        let (fol, fol_glu) = (outs(), outs().swap_remove(3));
                        for (i, reuse) in [(0, false), (1, true)] {
                            record_linear_folded(
                                g,
                                &env.cache,
                                &mut enc,
                                &w[i],
                                choice,
                                &xs,
                                &fol[i],
                                &mut env.scratch,
                                &fold,
                                &RecordOptions {
                                    reuse_codes: reuse,
                                    ..mode(spread)
                                },
                            )
                            .expect("folded linear");
                            let want = if reuse { 1 } else { dispatches };
                            assert_eq!(
                                env.scratch.last_dispatches(),
                                want,
                                "{what} {spread:?}: layer {i}"
                            );
                        }
                        let stack_out = outs();
                        let stack = [(&w[1], &stack_out[1]), (&w[2], &stack_out[2])];
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
                                choice,
                                &xs,
                                &mut env.scratch,
                                &mode(spread),
                                &fold,
                            )
                            .expect("folded fused");
                            assert!(done, "{what} {spread:?}: not fused");
                        }
                        runs.push((spread, fol, fol_glu, stack_out));
                    }
                    g.queue.submit([enc.finish()]);
                    let read = |t: &GpuTensor| host::read(g, t).expect("read");
                    let bits = |v: Vec<f32>| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    let mut first: Option<Vec<Vec<u32>>> = None;
                    for (spread, fol, fol_glu, stack_out) in runs {
                        let pairs = [
                            ("layer 0", read(&fol[0]), read(&sep[0]), w[0].n),
                            ("layer 1", read(&fol[1]), read(&sep[1]), w[1].n),
                            ("stacked 1", read(&stack_out[1]), read(&sep[1]), w[1].n),
                            ("stacked 2", read(&stack_out[2]), read(&sep[2]), w[2].n),
                            ("SwiGLU", read(&fol_glu), read(&sep_glu), w[3].n),
                        ];
                        let mut got_bits = Vec::new();
                        for (name, got, want, n) in pairs {
                            close_but_for_a_code(
                                &format!("{what} {spread:?}: {name}"),
                                &got,
                                &want,
                                n as usize,
                                dtype,
                            );
                            got_bits.push(bits(got));
                        }
                        // The same rotation, the same codes: the modes agree
                        // bit for bit.
                        match &first {
                            None => first = Some(got_bits),
                            Some(f) => assert_eq!(&got_bits, f, "{what} {spread:?}: modes differ"),
                        }
                    }
                }
            }
        }
    }
}

/// Outputs equal (within f32 rounding of the same codes) but for a few
/// rows — a code moved by one moves its whole row — all within a tenth of
/// the largest output and finite. With f16 activations the norm's output
/// is rounded to f16 on both sides, so a value one f16 step apart flips
/// codes in most rows (int8 codes are 1/127 of the absmax, f16's step
/// 1/2048 of the value): there the mean difference is bounded instead, at
/// 2 % of the largest output — a flipped code moves every output of its
/// row by a weight column times the code step, so at M = 1 two flips fill
/// the 1 % this bound had (the H200, run P1: 0.0321 at max 3.195, K =
/// 1088), while wrong codes or scales move outputs by their own size.
fn close_but_for_a_code(what: &str, got: &[f32], want: &[f32], n: usize, dtype: ActDtype) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let max = want.iter().fold(0f32, |a, v| a.max(v.abs())).max(1e-6);
    let (mut rows_off, mut sum) = (0, 0f32);
    for (r, (a, b)) in got.chunks(n).zip(want.chunks(n)).enumerate() {
        let mut off = false;
        for (i, (a, b)) in a.iter().zip(b).enumerate() {
            assert!(a.is_finite(), "{what}: [{r}, {i}] = {a}");
            let d = (a - b).abs();
            assert!(
                d <= 0.1 * max,
                "{what}: [{r}, {i}] {a} vs {b} (max |out| {max})"
            );
            off |= d > 2e-3 * max;
            sum += d;
        }
        rows_off += usize::from(off);
    }
    let rows = got.len() / n;
    if dtype == ActDtype::F32 {
        assert!(
            rows_off <= (rows / 2).max(1),
            "{what}: {rows_off} of {rows} rows differ beyond rounding"
        );
    } else {
        let mean = sum / got.len() as f32;
        assert!(
            mean <= 2e-2 * max,
            "{what}: mean difference {mean} (max |out| {max})"
        );
    }
}

/// Formats, activation arithmetic and awkward K for the coding kernel: a
/// multiple of 16 (int8) or 32 (int4 weights) and of the group, not of a
/// rotation chunk (1024) nor of a coding workgroup's 256 values, some
/// shorter than one workgroup, some spanning several chunks.
fn awkward() -> Vec<(Format, ActArith, usize)> {
    let w4 = |group| Format::ConvrotW4a4 {
        group,
        linear_dtype: LinearDtype::Int4,
    };
    let i8 = |convrot_group| Format::Int8Tensorwise { convrot_group };
    vec![
        (w4(16), ActArith::Int4, 32),
        (w4(16), ActArith::Int8, 1056),
        (w4(64), ActArith::Int4, 3136),
        (w4(64), ActArith::Int8, 192),
        (w4(256), ActArith::Int4, 1280),
        (i8(Some(16)), ActArith::Int8, 1040),
        (i8(Some(64)), ActArith::Int8, 2112),
        (i8(None), ActArith::Int8, 16),
        (i8(None), ActArith::Int8, 1104),
    ]
}

#[test]
fn spread_codes_match_quantization_launches() {
    let Some(mut env) = env("spread_codes_match_quantization_launches", any_adapter) else {
        return;
    };
    let mut rng = rng(43);
    for (c, (format, act, k)) in awkward().into_iter().enumerate() {
        for fast in env.fast_variants_for(c) {
            // Four of the eight Ms a case, rotating (all over two cases).
            let ms: Vec<usize> = (1..=8).collect();
            for m in rotation(&ms, c, 4) {
                let what = format!("{format:?} {act:?} fast={fast} M={m} K={k}");
                let n = 24 + 8 * (m % 3);
                let hl = HostLayer::random(&mut rng, format, n, k, m % 2 == 0);
                let w = LinearWeights::upload(&env.gpu, &hl.meta, hl.bytes()).expect("up");
                let g = &env.gpu;
                let choice = KernelChoice::Integer { act, fast };
                let shape = |c: usize| vec![m as u64, c as u64];
                let mut xv = uniform(&mut rng, m * k, 2.0);
                // An outlier in some rows, a zero row in another.
                xv[(m / 2) * k + k / 3] = 30.0;
                if m > 2 {
                    xv[k..2 * k].fill(0.0);
                }
                let x = host::upload(g, "x", &xv, shape(k), ActDtype::F32).expect("x");
                let nw = uniform(&mut rng, k, 1.5);
                let nw = host::upload(g, "nw", &nw, vec![k as u64], ActDtype::F32).expect("w");
                let group = match format {
                    Format::ConvrotW4a4 { group, .. } => Some(group),
                    Format::Int8Tensorwise { convrot_group } => convrot_group,
                    _ => None,
                };
                let x_in = group.map_or_else(
                    || xv.clone(),
                    |gr| rotate(&xv, k, gr, Rotation::Fht).expect("rotate"),
                );
                let q = quantize_act_for(format, act, &x_in, k).expect("integer format");
                // Quantized apart (one fused launch, or rotation then
                // quantization), then coded by the kernel.
                let mut one = |opts: &RecordOptions, fold: Option<&Fold<'_>>, want: Option<u32>| {
                    one_linear(&mut env, &w, choice, &x, n, opts, fold, want, &what)
                };
                let (a_out, a_codes, a_scales, _) = one(&apart(), None, None);
                assert_eq!(a_codes, q.codes, "{what}: apart codes");
                assert_eq!(a_scales, q.scales, "{what}: apart scales");
                let code_kernel = mode(SpreadQuant::CodeKernel);
                let (c_out, c_codes, c_scales, c_rows) = one(&code_kernel, None, Some(3));
                assert_eq!(c_codes, q.codes, "{what}: code kernel codes");
                assert_eq!(c_scales, q.scales, "{what}: code kernel scales");
                assert_eq!(c_out, a_out, "{what}: code kernel outputs");
                if group.is_some() {
                    let rows = c_rows.expect("rotated rows");
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&rows), bits(&x_in), "{what}: rotated rows");
                }
                let one_launch = mode(SpreadQuant::OneLaunch);
                let (o_out, o_codes, o_scales, _) = one(&one_launch, None, Some(2));
                assert_eq!(o_codes, q.codes, "{what}: one-launch codes");
                assert_eq!(o_scales, q.scales, "{what}: one-launch scales");
                assert_eq!(o_out, a_out, "{what}: one-launch outputs");
                if m as u64 > NORM_FOLD_MAX_M {
                    continue;
                }
                // With the norm folded into the rotation: the codes of the
                // rotated rows it wrote, as the CPU reference makes them;
                // the GEMV coding them itself computes the same outputs.
                let fold = Fold {
                    norm: Some(NormFold {
                        weight: &nw,
                        eps: EPS,
                    }),
                    residual: false,
                };
                let (n_out, n_codes, n_scales, n_rows) = one(&code_kernel, Some(&fold), Some(3));
                let rows = n_rows.expect("rotated rows");
                let qn = quantize_act_for(format, act, &rows, k).expect("integer format");
                assert_eq!(n_codes, qn.codes, "{what}: normed code kernel codes");
                assert_eq!(n_scales, qn.scales, "{what}: normed code kernel scales");
                let (o_out, o_codes, o_scales, _) = one(&one_launch, Some(&fold), Some(2));
                assert_eq!(o_codes, qn.codes, "{what}: normed one-launch codes");
                assert_eq!(o_scales, qn.scales, "{what}: normed one-launch scales");
                assert_eq!(o_out, n_out, "{what}: normed outputs, one launch");
                let (g_out, ..) = one(&mode(SpreadQuant::InGemv), Some(&fold), Some(2));
                assert_eq!(
                    n_out, g_out,
                    "{what}: normed outputs, code kernel vs in GEMV"
                );
            }
        }
    }
}

/// What [`one_linear`] gives back: the output's bits, the codes and scales
/// in the scratch, the rotated rows in the scratch.
type LinearRun = (Vec<u32>, Vec<i8>, Vec<f32>, Option<Vec<f32>>);

/// One integer linear of `x` (f32 `[m, k]`) into a new `[m, n]` output,
/// `want` dispatches if given; its output's bits, the codes and scales the
/// scratch holds (stale where this linear made none) and its rotated rows.
#[allow(clippy::too_many_arguments)]
fn one_linear(
    env: &mut crate::linear_common::Env,
    w: &LinearWeights,
    choice: KernelChoice,
    x: &GpuTensor,
    n: usize,
    opts: &RecordOptions,
    fold: Option<&Fold<'_>>,
    want: Option<u32>,
    what: &str,
) -> LinearRun {
    let g = &env.gpu;
    let (m, k) = (x.shape[0], x.shape[1]);
    let out = host::zeros(g, "out", vec![m, n as u64], ActDtype::F32).expect("o");
    let mut enc = Encoder::new(&g.device, "test");
    match fold {
        Some(fold) => record_linear_folded(
            g,
            &env.cache,
            &mut enc,
            w,
            choice,
            x,
            &out,
            &mut env.scratch,
            fold,
            opts,
        ),
        None => record_linear_with(
            g,
            &env.cache,
            &mut enc,
            w,
            choice,
            x,
            &out,
            &mut env.scratch,
            opts,
        ),
    }
    .expect("linear");
    if let Some(want) = want {
        assert_eq!(env.scratch.last_dispatches(), want, "{what}: dispatches");
    }
    g.queue.submit([enc.finish()]);
    let out = host::read(g, &out).expect("read");
    let bits: Vec<u32> = out.iter().map(|f| f.to_bits()).collect();
    let (codes, scales) = env.act_codes_and_scales(w.format, m, k);
    let rows = env
        .scratch
        .rotated()
        .map(|b| env.gpu.read_f32(b, 0, m * k).expect("read rotated"));
    (bits, codes, scales, rows)
}
