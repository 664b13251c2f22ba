//! The cooperative-matrix GEMMs (single-stage and double-buffered) equal
//! the dot4 GEMM bit for bit where the adapter has them, and refuse depths
//! whose f32 sums would not be exact.

use super::{bits, check_integer};
use crate::linear_common::{HostLayer, env};

use dynvram_gpu::ops::encoder::Encoder;
use dynvram_gpu::ops::linear::conformance::upload_f32;
use dynvram_gpu::ops::linear::{
    CoopGemmKernel, CoopShape, GemmKernel, LinearWeights, RecordOptions, coop_gemm_unusable,
    double_unusable, record_linear_with, rows_gemv_max_m,
};
use dynvram_quant::{ActArith, Format, KernelChoice, LinearDtype};
use dynvram_test_support::gpu::any_adapter;
use dynvram_test_support::random::activations;
use dynvram_test_support::skip::coop_skipped;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The cooperative-matrix GEMM against the reference (codes, scales and
/// accumulators exactly) and against the dot4 GEMM (outputs bit for bit),
/// on shapes that leave partial 64-row, 64-column and 32-deep tiles and
/// rows not on 16 bytes (so small M reaches the GEMM too).
/// `DYNVRAM_REQUIRE_COOP=1` turns the skip into a failure (CI's run on a
/// lavapipe with cooperative matrices).
#[test]
fn coop_gemm_matches_dot4_exactly() {
    let Some(mut env) = env("coop_gemm_matches_dot4_exactly", any_adapter) else {
        return;
    };
    if let Some(why) = coop_gemm_unusable(&env.gpu.caps, 64, false, false, CoopShape::default()) {
        let msg = format!("coop_gemm_matches_dot4_exactly: skipped: {why}");
        coop_skipped(&msg);
        return;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let w4 = |group| Format::ConvrotW4a4 {
        group,
        linear_dtype: LinearDtype::Int4,
    };
    // (format, K, activation arithmetic): K % 32 != 0, rows off 16 bytes.
    let cases = [
        (w4(16), 208, ActArith::Int4),
        (w4(16), 208, ActArith::Int8),
        (w4(16), 1040, ActArith::Int4),
        (w4(16), 1008, ActArith::Int8),
        (
            Format::Int8Tensorwise {
                convrot_group: None,
            },
            196,
            ActArith::Int8,
        ),
        (
            Format::Int8Tensorwise {
                convrot_group: Some(4),
            },
            1000,
            ActArith::Int8,
        ),
    ];
    let ms = [9usize, 33, 64, 100, 257];
    let ns = [17usize, 100, 130, 64, 1];
    for (i, &(format, k, act)) in cases.iter().enumerate() {
        for (j, m) in ms.into_iter().enumerate() {
            let n = ns[(i + j) % ns.len()];
            let h = HostLayer::random(&mut rng, format, n, k, j % 2 == 0);
            let x = activations(&mut rng, m, k);
            let what = format!("{format:?} {act:?} M={m} N={n} K={k}");
            let coop = RecordOptions {
                gemm: GemmKernel::Coop,
                ..Default::default()
            };
            check_integer(&mut env, &h, act, false, &x, coop);
            assert!(env.scratch.last_used_coop(), "{what}: ran on dot4");
            let w = LinearWeights::upload(&env.gpu, &h.meta, h.bytes()).expect("upload");
            let choice = KernelChoice::Integer { act, fast: false };
            let y_coop = env.run(&w, choice, &x, coop).out;
            let dot4 = RecordOptions {
                gemm: GemmKernel::Tiled,
                ..Default::default()
            };
            let y_dot4 = env.run(&w, choice, &x, dot4).out;
            assert!(!env.scratch.last_used_coop(), "{what}: dot4 ran on coop");
            assert_eq!(bits(&y_coop), bits(&y_dot4), "{what}: coop vs dot4");
        }
    }
    // Other workgroup shapes (for tuning) give the same bits.
    // (subgroups, staged columns, accumulators per subgroup: odd counts,
    // more staging slots than invocations and fewer).
    let shapes = [
        "1x2x64x3x1",
        "4x1x16x1x4",
        "3x2x32",
        "2x2x32x4x4",
        "1x1x48x2x3",
    ]
    .map(|s| s.parse::<CoopShape>().expect("shape"));
    let (format, k, act) = cases[1];
    let h = HostLayer::random(&mut rng, format, 130, k, true);
    let x = activations(&mut rng, 100, k);
    let w = LinearWeights::upload(&env.gpu, &h.meta, h.bytes()).expect("upload");
    let choice = KernelChoice::Integer { act, fast: false };
    let dot4 = RecordOptions {
        gemm: GemmKernel::Tiled,
        ..Default::default()
    };
    let y_dot4 = env.run(&w, choice, &x, dot4).out;
    for shape in shapes {
        if let Some(why) = coop_gemm_unusable(&env.gpu.caps, k as u64, false, true, shape) {
            eprintln!("coop shape {shape:?}: skipped: {why}");
            continue;
        }
        let opts = RecordOptions {
            gemm: GemmKernel::Coop,
            coop: Some(shape),
            ..Default::default()
        };
        let y = env.run(&w, choice, &x, opts).out;
        assert!(env.scratch.last_used_coop());
        assert_eq!(bits(&y), bits(&y_dot4), "{shape:?}: coop vs dot4");
    }
}

/// The double-buffered cooperative GEMM (`linear_gemm_coop_db.wgsl`: two
/// stages, 16-byte loads, int4 and int8 → f16 in its load stage) against
/// the reference (codes, scales and accumulators exactly) and the dot4 GEMM
/// (outputs bit for bit), on M and N that leave partial tiles, K that
/// leaves a partial last K step (and half an int8 weight slot), with its
/// default shape and others; a layer it does not fit (int4 weights with K
/// not a multiple of 32) runs the single-stage kernel, with the same bits.
/// `DYNVRAM_REQUIRE_COOP=1` turns the skip into a failure.
#[test]
fn coop_double_gemm_matches_dot4_exactly() {
    let test = "coop_double_gemm_matches_dot4_exactly";
    let Some(mut env) = env(test, any_adapter) else {
        return;
    };
    if let Some(why) = coop_gemm_unusable(&env.gpu.caps, 64, false, false, CoopShape::default()) {
        coop_skipped(&format!("{test}: skipped: {why}"));
        return;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(53);
    let w4 = |group| Format::ConvrotW4a4 {
        group,
        linear_dtype: LinearDtype::Int4,
    };
    let int8 = |convrot_group| Format::Int8Tensorwise { convrot_group };
    // (format, K, activation arithmetic, shape or the default): K % 64 != 0
    // (a partial K step at BK = 64), int8 K % 32 != 0 (half a slot).
    let cases = [
        (w4(16), 96, ActArith::Int4, None),
        (w4(16), 1056, ActArith::Int8, None),
        (int8(None), 208, ActArith::Int8, None),
        (w4(16), 160, ActArith::Int4, Some("2x2x64x2x2")),
        (int8(Some(4)), 1008, ActArith::Int8, Some("1x2x32x3x1")),
        (w4(16), 224, ActArith::Int8, Some("2x1x96x1x4")),
    ];
    // The smallest M above what the multi-row GEMV takes (which the
    // forced GEMM does not override): 9 on a CPU adapter, 17 on a GPU.
    let small_m = rows_gemv_max_m(&env.gpu) as usize + 1;
    let (ms, ns) = ([small_m, 100, 257], [17usize, 130, 1, 64]);
    let dot4 = RecordOptions {
        gemm: GemmKernel::Tiled,
        ..Default::default()
    };
    for (i, &(format, k, act, shape)) in cases.iter().enumerate() {
        let shape = shape.map(|s| s.parse::<CoopShape>().expect("shape"));
        let caps = &env.gpu.caps;
        let used = shape.unwrap_or_else(|| CoopShape::for_double(caps));
        let w4 = matches!(format, Format::ConvrotW4a4 { .. });
        if let Some(why) = double_unusable(caps, used, k as u64, None, w4) {
            eprintln!("double {used}: skipped: {why}");
            continue;
        }
        let double = RecordOptions {
            gemm: GemmKernel::Coop,
            coop_gemm: Some(CoopGemmKernel::Double),
            coop: shape,
            ..Default::default()
        };
        for (j, m) in ms.into_iter().enumerate() {
            let n = ns[(i + j) % ns.len()];
            let h = HostLayer::random(&mut rng, format, n, k, j % 2 == 0);
            let x = activations(&mut rng, m, k);
            let what = format!("double {used} {format:?} {act:?} M={m} N={n} K={k}");
            check_integer(&mut env, &h, act, false, &x, double);
            assert_eq!(
                env.scratch.last_coop_kernel(),
                Some(CoopGemmKernel::Double),
                "{what}"
            );
            let w = LinearWeights::upload(&env.gpu, &h.meta, h.bytes()).expect("upload");
            let choice = KernelChoice::Integer { act, fast: false };
            let y_double = env.run(&w, choice, &x, double).out;
            let y_dot4 = env.run(&w, choice, &x, dot4).out;
            assert_eq!(bits(&y_double), bits(&y_dot4), "{what}: double vs dot4");
        }
    }
    // int4 weights with K % 32 != 0: the single-stage kernel, same bits.
    let h = HostLayer::random(&mut rng, w4(16), 40, 80, true);
    let x = activations(&mut rng, 33, 80);
    let double = RecordOptions {
        gemm: GemmKernel::Coop,
        coop_gemm: Some(CoopGemmKernel::Double),
        ..Default::default()
    };
    check_integer(&mut env, &h, ActArith::Int4, false, &x, double);
    assert_eq!(env.scratch.last_coop_kernel(), Some(CoopGemmKernel::Single));
}

/// Past 2^24 the f32 sums could round: the cooperative GEMM is refused when
/// forced and not chosen automatically.
#[test]
fn coop_gemm_refuses_inexact_depths() {
    let Some(mut env) = env("coop_gemm_refuses_inexact_depths", any_adapter) else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    // 128 · 128 · 1028 > 2^24.
    let format = Format::Int8Tensorwise {
        convrot_group: None,
    };
    let h = HostLayer::random(&mut rng, format, 20, 1028, false);
    let x = activations(&mut rng, 40, 1028);
    check_integer(
        &mut env,
        &h,
        ActArith::Int8,
        false,
        &x,
        RecordOptions::default(),
    );
    assert!(
        !env.scratch.last_used_coop(),
        "auto chose an inexact coop GEMM"
    );
    let why = coop_gemm_unusable(&env.gpu.caps, 1028, false, false, CoopShape::default())
        .expect("refused");
    if env.gpu.caps.coop_matrix_edge != 0 {
        assert!(why.contains("K = 1028"), "{why}");
    }
    let w = LinearWeights::upload(&env.gpu, &h.meta, h.bytes()).expect("upload");
    let xt = upload_f32(&env.gpu, "x", &x, vec![40, 1028]).expect("x");
    let out = upload_f32(&env.gpu, "out", &vec![0.0; 40 * 20], vec![40, 20]).expect("out");
    let mut enc = Encoder::new(&env.gpu.device, "test");
    let forced = record_linear_with(
        &env.gpu,
        &env.cache,
        &mut enc,
        &w,
        KernelChoice::Integer {
            act: ActArith::Int8,
            fast: false,
        },
        &xt,
        &out,
        &mut env.scratch,
        &RecordOptions {
            gemm: GemmKernel::Coop,
            ..Default::default()
        },
    );
    let err = forced.expect_err("forced coop GEMM past 2^24").to_string();
    assert!(err.contains("cooperative-matrix GEMM"), "{err}");
}
