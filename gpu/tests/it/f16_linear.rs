//! The GPU linears with f16 activations (f16 `x` in, f16 `out` out) against
//! the quant crate's CPU references on the same input rounded to f16 first:
//! rotation + per-row activation quantization (codes and scales exactly),
//! integer GEMV/GEMM (int4 and int8 activations, portable and fast), float
//! GEMV/GEMM (f32, f16, bf16, fp8 weights), with and without bias, random
//! shapes on both sides of the GEMV/GEMM switch, and the float GEMM on
//! cooperative matrices where the adapter has them.
//!
//! Tolerance rule: the kernels compute in f32 (or exact i32) and round the
//! output to f16 once, so with `δ = rel·max|e|` the f32 tests' own bound
//! (1e-6 integer, 1e-5 float), `|y − e| ≤ 2⁻¹¹·(|e| + δ) + 2⁻²⁵ + δ`: half an
//! f16 ulp of the f32 result (relative for normal values, the subnormal
//! spacing's half below), plus the f32 deviation.

use crate::linear_common::{Env, HostLayer, env};

use dynvram_gpu::device::{SpirvGemm, SpreadQuant};
use dynvram_gpu::ops::encoder::Encoder;
use dynvram_gpu::ops::host::{self, round_to};
use dynvram_gpu::ops::linear::{
    CoopGemmKernel, CoopShape, GEMV_MAX_M, GemmKernel, LinearError, LinearScratch, LinearWeights,
    RecordOptions, coop_unusable, double_unusable, record_linear_with, rows_gemv_max_m,
};
use dynvram_gpu::{ActDtype, GpuTensor};
use dynvram_quant::reference::{
    Rotation, dequantize_float_weight, epilogue_convrot, epilogue_tensorwise, gemm_f32, int_gemm,
    quantize_act_for, rotate, unpack_int4,
};
use dynvram_quant::tensors::i8s;
use dynvram_quant::{ActArith, Format, KernelChoice, LinearDtype};
use dynvram_test_support::gpu::needs_f16;
use dynvram_test_support::random::activations;
use dynvram_test_support::skip::coop_skipped;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Output, activation codes (column order) and scales of one f16 run.
pub(crate) struct Run {
    pub(crate) out: Vec<f32>,
    codes: Vec<i8>,
    scales: Vec<f32>,
}

impl Env {
    fn run_f16(&mut self, h: &HostLayer, choice: KernelChoice, x: &[f32]) -> Run {
        self.run_f16_with(h, choice, x, &RecordOptions::default())
    }

    /// Uploads `h` and `x` (f16), records the linear into an f16 output and
    /// submits it: the output, or the recording's error.
    pub(crate) fn record_f16(
        &mut self,
        h: &HostLayer,
        choice: KernelChoice,
        x: &[f32],
        opts: &RecordOptions,
    ) -> Result<GpuTensor, LinearError> {
        let w = LinearWeights::upload(&self.gpu, &h.meta, h.bytes()).expect("upload");
        let (n, k) = (w.n, w.k);
        let m = x.len() as u64 / k;
        let xt = host::upload(&self.gpu, "x", x, vec![m, k], ActDtype::F16).expect("x");
        let out = host::zeros(&self.gpu, "out", vec![m, n], ActDtype::F16).expect("out");
        let mut enc = Encoder::new(&self.gpu.device, "test");
        record_linear_with(
            &self.gpu,
            &self.cache,
            &mut enc,
            &w,
            choice,
            &xt,
            &out,
            &mut self.scratch,
            opts,
        )?;
        self.gpu.queue.submit([enc.finish()]);
        Ok(out)
    }

    pub(crate) fn run_f16_with(
        &mut self,
        h: &HostLayer,
        choice: KernelChoice,
        x: &[f32],
        opts: &RecordOptions,
    ) -> Run {
        let out = self.record_f16(h, choice, x, opts).expect("record");
        let (m, k) = (out.shape[0], h.meta.k as u64);
        let y = host::read(&self.gpu, &out).expect("read out");
        // Only a quantization launch or the spread coding kernel leaves
        // codes (small M makes them in the GEMV unless asked otherwise).
        let codes_left = opts.quantize_apart || opts.spread_quant == Some(SpreadQuant::CodeKernel);
        let (codes, scales) = match choice {
            KernelChoice::Integer { .. } if codes_left => {
                self.act_codes_and_scales(h.meta.format, m, k)
            }
            _ => (Vec::new(), Vec::new()),
        };
        Run {
            out: y,
            codes,
            scales,
        }
    }
}

/// The module's tolerance rule.
pub(crate) fn assert_f16_close(what: &str, y: &[f32], e: &[f32], rel: f32) {
    assert_eq!(y.len(), e.len(), "{what}: lengths");
    let delta = rel * e.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let mut worst = 0.0f32;
    for (i, (&a, &b)) in y.iter().zip(e).enumerate() {
        let tol = 2f32.powi(-11) * (b.abs() + delta) + 2f32.powi(-25) + delta;
        let d = (a - b).abs();
        assert!(
            d <= tol,
            "{what}: element {i}: {a} vs reference {b} (|diff| {d:e} > {tol:e})"
        );
        worst = worst.max(d / tol);
    }
    eprintln!("{what}: worst |diff| / tolerance = {worst:.3}");
}

/// [`activations`] rounded to f16: the reference sees exactly what the GPU
/// holds.
pub(crate) fn random_x(rng: &mut ChaCha8Rng, m: usize, k: usize) -> Vec<f32> {
    let x = activations(rng, m, k);
    x.iter().map(|&v| round_to(v, ActDtype::F16)).collect()
}

#[test]
fn integer_paths_with_f16_activations_match_the_reference() {
    let Some(mut env) = env(
        "integer_paths_with_f16_activations_match_the_reference",
        needs_f16,
    ) else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    let convrot = |group| Format::ConvrotW4a4 {
        group,
        linear_dtype: LinearDtype::Int4,
    };
    // (format, K, activation arithmetics)
    let cases = [
        (convrot(16), 192, vec![ActArith::Int4, ActArith::Int8]),
        (convrot(64), 320, vec![ActArith::Int4]),
        (
            Format::Int8Tensorwise {
                convrot_group: None,
            },
            196,
            vec![ActArith::Int8],
        ),
        (
            Format::Int8Tensorwise {
                convrot_group: Some(64),
            },
            256,
            vec![ActArith::Int8],
        ),
    ];
    for (i, (format, k, acts)) in cases.into_iter().enumerate() {
        // Both sides of the GEMV/GEMM switch, random N.
        for (j, m) in [rng.random_range(1..=GEMV_MAX_M as usize), 9 + i * 13]
            .into_iter()
            .enumerate()
        {
            let n = rng.random_range(17..90);
            let h = HostLayer::random(&mut rng, format, n, k, m % 2 == 0);
            let x = random_x(&mut rng, m, k);
            let group = match format {
                Format::ConvrotW4a4 { group, .. } => Some(group),
                Format::Int8Tensorwise { convrot_group } => convrot_group,
                _ => None,
            };
            let x_in = group.map_or_else(
                || x.clone(),
                |g| rotate(&x, k, g, Rotation::Fht).expect("rotate"),
            );
            let wq = match format {
                Format::ConvrotW4a4 { .. } => unpack_int4(&h.weight),
                _ => i8s(&h.weight),
            };
            let s_w: Vec<f32> = bytemuck::pod_collect_to_vec(&h.scale);
            for (a, &act) in acts.iter().enumerate() {
                let q = quantize_act_for(format, act, &x_in, k).expect("integer format");
                let acc = int_gemm(&q.codes, &wq, k);
                let e = match format {
                    Format::ConvrotW4a4 { .. } => {
                        epilogue_convrot(&acc, &q.scales, &s_w, h.bias_f32().as_deref())
                    }
                    _ => epilogue_tensorwise(&acc, &q.scales, &s_w, n, h.bias_f32().as_deref()),
                };
                for fast in env.fast_variants_for(i + j + a) {
                    let what = format!("{format:?} {act:?} fast={fast} M={m} N={n} K={k}");
                    let choice = KernelChoice::Integer { act, fast };
                    let apart = RecordOptions {
                        quantize_apart: true,
                        ..RecordOptions::default()
                    };
                    let r = env.run_f16_with(&h, choice, &x, &apart);
                    assert_eq!(r.codes, q.codes, "{what}: activation codes");
                    assert_eq!(r.scales, q.scales, "{what}: activation scales");
                    assert_f16_close(&what, &r.out, &e, 1e-6);
                    let spread = env.run_f16(&h, choice, &x);
                    assert_f16_close(&format!("{what} spread"), &spread.out, &e, 1e-6);
                    // The spread rows coded once by their own kernel: the
                    // same codes and scales, so the same outputs bit for bit.
                    let coded = RecordOptions {
                        spread_quant: Some(SpreadQuant::CodeKernel),
                        ..RecordOptions::default()
                    };
                    let c = env.run_f16_with(&h, choice, &x, &coded);
                    assert_eq!(c.codes, q.codes, "{what}: code kernel activation codes");
                    assert_eq!(c.scales, q.scales, "{what}: code kernel activation scales");
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&c.out), bits(&r.out), "{what}: code kernel outputs");
                }
            }
        }
    }
}

#[test]
fn float_paths_with_f16_activations_match_the_reference() {
    let Some(mut env) = env(
        "float_paths_with_f16_activations_match_the_reference",
        needs_f16,
    ) else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(18);
    let formats = [
        Format::F32,
        Format::F16,
        Format::Bf16,
        Format::Float8E4m3fn,
        Format::Float8E5m2,
    ];
    for (i, format) in formats.into_iter().enumerate() {
        for m in [rng.random_range(1..=GEMV_MAX_M as usize), 33 + i] {
            let (n, k) = (rng.random_range(17..90), 4 * rng.random_range(16..70));
            let h = HostLayer::random(&mut rng, format, n, k, (m + i) % 2 == 0);
            let x = random_x(&mut rng, m, k);
            let wf = dequantize_float_weight(&h.meta, h.bytes()).expect("dequantize");
            let e = gemm_f32(&x, &wf, k, h.bias_f32().as_deref());
            let y = env.run_f16(&h, KernelChoice::Float, &x).out;
            assert_f16_close(&format!("{format:?} M={m} N={n} K={k}"), &y, &e, 1e-5);
        }
    }
}

/// The float GEMM on cooperative matrices (f16 activations; f16, bf16 and
/// fp8 weights, which stage exactly) against the reference under the
/// module's tolerance, on tiles left partial in M, N and K; f32 weights are
/// refused when forced. `DYNVRAM_REQUIRE_COOP=1` turns the skip into a
/// failure.
#[test]
fn float_coop_gemm_matches_the_reference() {
    let Some(mut env) = env("float_coop_gemm_matches_the_reference", needs_f16) else {
        return;
    };
    if let Some(why) = coop_unusable(&env.gpu.caps, CoopShape::default()) {
        let msg = format!("float_coop_gemm_matches_the_reference: skipped: {why}");
        coop_skipped(&msg);
        return;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(19);
    // The WGSL kernels, also where the SPIR-V ones would run.
    let coop = RecordOptions {
        gemm: GemmKernel::Coop,
        spirv_gemm: Some(SpirvGemm::Off),
        ..Default::default()
    };
    let formats = [
        Format::F16,
        Format::Bf16,
        Format::Float8E4m3fn,
        Format::Float8E5m2,
    ];
    for (i, format) in formats.into_iter().enumerate() {
        for (m, n, k) in [(9, 17, 36), (70, 130, 300), (33 + i, 64, 1028)] {
            let h = HostLayer::random(&mut rng, format, n, k, (m + i) % 2 == 0);
            let x = random_x(&mut rng, m, k);
            let wf = dequantize_float_weight(&h.meta, h.bytes()).expect("dequantize");
            let e = gemm_f32(&x, &wf, k, h.bias_f32().as_deref());
            // Besides the adapter's shape, odd accumulator counts and
            // staging slots that do not divide among the invocations.
            let shapes = [None, Some("1x2x16x3x1"), Some("2x1x48x1x4")];
            for shape in shapes.map(|s| s.map(|s| s.parse::<CoopShape>().expect("shape"))) {
                if shape.is_some_and(|s| coop_unusable(&env.gpu.caps, s).is_some()) {
                    eprintln!("coop {shape:?}: skipped: beyond the adapter's limits");
                    continue;
                }
                let opts = RecordOptions {
                    coop: shape,
                    ..coop
                };
                let y = env.run_f16_with(&h, KernelChoice::Float, &x, &opts).out;
                assert!(env.scratch.last_used_coop(), "{format:?}: ran tiled");
                let what = format!("coop {shape:?} {format:?} M={m} N={n} K={k}");
                assert_f16_close(&what, &y, &e, 1e-5);
            }
        }
    }
    // f32 weights would round: refused when forced, tiled when automatic.
    let h = HostLayer::random(&mut rng, Format::F32, 20, 64, false);
    let x = random_x(&mut rng, 40, 64);
    env.run_f16(&h, KernelChoice::Float, &x);
    assert!(
        !env.scratch.last_used_coop(),
        "f32 weights took the coop GEMM"
    );
    let err = env
        .record_f16(&h, KernelChoice::Float, &x, &coop)
        .expect_err("forced coop on f32 weights");
    assert!(err.to_string().contains("f32 weights"), "{err}");
}

/// The double-buffered cooperative GEMM (`linear_gemm_coop_db.wgsl`,
/// 16-byte loads, bf16 → f16 in its load stage) against the reference under
/// the module's tolerance, f16 and bf16 weights, on M, N and K that leave
/// partial tiles and a partial last K step, with its default shape and
/// others (odd accumulator counts, slots that do not divide among the
/// invocations, deep K steps); layers it does not fit (K not a multiple of
/// 8, fp8 weights) run the single-stage kernel. `DYNVRAM_REQUIRE_COOP=1`
/// turns the skip into a failure.
#[test]
fn float_coop_double_gemm_matches_the_reference() {
    let test = "float_coop_double_gemm_matches_the_reference";
    let Some(mut env) = env(test, needs_f16) else {
        return;
    };
    if let Some(why) = coop_unusable(&env.gpu.caps, CoopShape::default()) {
        coop_skipped(&format!("{test}: skipped: {why}"));
        return;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(43);
    let double = RecordOptions {
        gemm: GemmKernel::Coop,
        coop_gemm: Some(CoopGemmKernel::Double),
        spirv_gemm: Some(SpirvGemm::Off),
        ..Default::default()
    };
    let shapes = [
        None,
        Some("1x2x32x3x1"),
        Some("2x1x48x1x4"),
        Some("1x1x64x2x2"),
    ];
    // The smallest M above what the multi-row GEMV takes (which the forced
    // GEMM does not override): 9 on a CPU adapter, 17 on a GPU.
    let small_m = rows_gemv_max_m(&env.gpu) as usize + 1;
    let thorough = std::env::var("DYNVRAM_THOROUGH").is_ok();
    for (i, format) in [Format::F16, Format::Bf16].into_iter().enumerate() {
        let mut cases = vec![(small_m, 17, 40), (70, 130, 296), (33 + i, 64, 1032)];
        if thorough {
            cases.extend([(257, 1, 8), (128, 128, 512), (100, 300, 24)]);
        }
        for (m, n, k) in cases {
            let h = HostLayer::random(&mut rng, format, n, k, (m + i) % 2 == 0);
            let x = random_x(&mut rng, m, k);
            let wf = dequantize_float_weight(&h.meta, h.bytes()).expect("dequantize");
            let e = gemm_f32(&x, &wf, k, h.bias_f32().as_deref());
            for shape in shapes.map(|s| s.map(|s| s.parse::<CoopShape>().expect("shape"))) {
                let caps = &env.gpu.caps;
                let used = shape.unwrap_or_else(|| CoopShape::for_double(caps));
                if let Some(why) = double_unusable(caps, used, k as u64, Some(format), false) {
                    eprintln!("double {used}: skipped: {why}");
                    continue;
                }
                let opts = RecordOptions {
                    coop: shape,
                    ..double
                };
                let y = env.run_f16_with(&h, KernelChoice::Float, &x, &opts).out;
                let what = format!("double {used} {format:?} M={m} N={n} K={k}");
                assert_eq!(
                    env.scratch.last_coop_kernel(),
                    Some(CoopGemmKernel::Double),
                    "{what}"
                );
                assert_eq!(env.scratch.last_coop_shape(), Some(used), "{what}");
                assert_f16_close(&what, &y, &e, 1e-5);
            }
        }
    }
    // Layers the double-buffered kernel does not fit: the single-stage one.
    for (format, k) in [(Format::Bf16, 36), (Format::Float8E4m3fn, 64)] {
        let h = HostLayer::random(&mut rng, format, 20, k, true);
        let x = random_x(&mut rng, 40, k);
        let wf = dequantize_float_weight(&h.meta, h.bytes()).expect("dequantize");
        let e = gemm_f32(&x, &wf, k, h.bias_f32().as_deref());
        let y = env.run_f16_with(&h, KernelChoice::Float, &x, &double).out;
        let what = format!("{format:?} K={k}");
        assert_eq!(
            env.scratch.last_coop_kernel(),
            Some(CoopGemmKernel::Single),
            "{what}"
        );
        assert_f16_close(&what, &y, &e, 1e-5);
    }
}

#[test]
fn f16_operands_that_do_not_fit_are_errors() {
    let Some(env) = env("f16_operands_that_do_not_fit_are_errors", needs_f16) else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(19);
    let h = HostLayer::random(&mut rng, Format::F16, 8, 16, false);
    let w = LinearWeights::upload(&env.gpu, &h.meta, h.bytes()).expect("upload");
    let x16 = host::zeros(&env.gpu, "x", vec![2, 16], ActDtype::F16).expect("x");
    let out32 = host::zeros(&env.gpu, "out", vec![2, 8], ActDtype::F32).expect("out");
    let out16 = host::zeros(&env.gpu, "out", vec![2, 8], ActDtype::F16).expect("out");
    let mut scratch = LinearScratch::new();
    let mut enc = Encoder::new(&env.gpu.device, "test");
    let mut rec = |out, opts: RecordOptions, choice| {
        record_linear_with(
            &env.gpu,
            &env.cache,
            &mut enc,
            &w,
            choice,
            &x16,
            out,
            &mut scratch,
            &opts,
        )
    };
    let e = rec(&out32, RecordOptions::default(), KernelChoice::Float).expect_err("mixed");
    assert!(matches!(e, LinearError::ActDtype { .. }), "{e}");
    let raw = RecordOptions {
        raw_accumulator: true,
        ..RecordOptions::default()
    };
    let e = rec(&out16, raw, KernelChoice::Float).expect_err("raw f16");
    assert!(matches!(e, LinearError::ActDtype { .. }), "{e}");
}
