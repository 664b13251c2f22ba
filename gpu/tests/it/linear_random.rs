//! The GPU linears against the CPU reference on random inputs: activation
//! codes, scales and integer accumulators exactly, outputs to float rounding,
//! over M = 1, 2, 7, 64, 257, K a multiple of the group size but not of the
//! kernels' tiles, every format and kernel variant, and weights split across
//! bindings (a forced small binding, and one weight above 128 MiB). The
//! cooperative-matrix GEMM, where the adapter has it, equals the dot4 GEMM
//! bit for bit.

use crate::linear_common::{Env, HostLayer, env, env_with};
use dynvram_test_support::variants::rotation;

use std::sync::Arc;

use dynvram_gpu::device::{AdapterChoice, GpuOptions, SpreadQuant};
use dynvram_gpu::ops::elementwise::record_swiglu;
use dynvram_gpu::ops::encoder::Encoder;
use dynvram_gpu::ops::host;
use dynvram_gpu::ops::linear::conformance::upload_f32;
use dynvram_gpu::ops::linear::{
    AddNorm, CoopGemmKernel, CoopShape, Fold, Fusion, GEMV_MAX_M, GemmKernel, GemvShape,
    LinearWeights, RecordOptions, coop_gemm_unusable, double_unusable, record_add_norm_quant,
    record_linear_with, record_linears_fused, rows_gemv_max_m,
};
use dynvram_gpu::ops::norm::record_add_rms_norm;
use dynvram_gpu::{ActDtype, Gpu, GpuTensor};
use dynvram_quant::reference::{
    Rotation, dequantize_float_weight, epilogue_convrot, epilogue_tensorwise, gemm_f32, int_gemm,
    quantize_act_for, rotate, unpack_int4,
};
use dynvram_quant::tensors::i8s;
use dynvram_quant::{ActArith, Format, KernelChoice, LinearDtype};
use dynvram_test_support::gpu::any_adapter;
use dynvram_test_support::random::activations;
use dynvram_test_support::skip::coop_skipped;
use dynvram_test_support::tolerance::assert_close_rel;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const MS: [usize; 5] = [1, 2, 7, 64, 257];

struct Run {
    out: Vec<f32>,
    codes: Vec<i8>,
    scales: Vec<f32>,
    /// The rotated input's bits (rotated layers).
    rotated: Vec<u32>,
}

impl Env {
    fn run(
        &mut self,
        w: &LinearWeights,
        choice: KernelChoice,
        x: &[f32],
        opts: RecordOptions,
    ) -> Run {
        let (n, k) = (w.n, w.k);
        let m = x.len() as u64 / k;
        let xt = upload_f32(&self.gpu, "x", x, vec![m, k]).expect("x");
        let out = GpuTensor {
            buffer: Arc::new(
                self.gpu
                    .create_buffer(
                        "out",
                        m * n * 4,
                        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
                    )
                    .expect("out"),
            ),
            offset: 0,
            shape: vec![m, n],
            dtype: ActDtype::F32,
        };
        let mut enc = Encoder::new(&self.gpu.device, "test");
        record_linear_with(
            &self.gpu,
            &self.cache,
            &mut enc,
            w,
            choice,
            &xt,
            &out,
            &mut self.scratch,
            &opts,
        )
        .expect("record");
        self.gpu.queue.submit([enc.finish()]);
        let out = self.gpu.read_f32(&out.buffer, 0, m * n).expect("read out");
        let (mut codes, mut scales, mut rotated) = (Vec::new(), Vec::new(), Vec::new());
        let group = match w.format {
            Format::ConvrotW4a4 { group, .. } => Some(group),
            Format::Int8Tensorwise { convrot_group } => convrot_group,
            _ => None,
        };
        if let (KernelChoice::Integer { .. }, Some(_)) = (choice, group) {
            let buf = self.scratch.rotated().expect("rotated input");
            let r = self.gpu.read_f32(buf, 0, m * k).expect("read rotated");
            rotated = r.iter().map(|v| v.to_bits()).collect();
        }
        // Only a quantization launch or the spread coding kernel leaves
        // codes (small M makes them in the GEMV unless asked otherwise).
        let codes_left = opts.quantize_apart || opts.spread_quant == Some(SpreadQuant::CodeKernel);
        if let (KernelChoice::Integer { .. }, true) = (choice, codes_left) {
            (codes, scales) = self.act_codes_and_scales(w.format, m, k);
        }
        Run {
            out,
            codes,
            scales,
            rotated,
        }
    }
}

/// Checks one integer layer on one input: codes, scales, accumulator, output.
fn check_integer(
    env: &mut Env,
    h: &HostLayer,
    act: ActArith,
    fast: bool,
    x: &[f32],
    opts: RecordOptions,
) {
    let w = LinearWeights::upload(&env.gpu, &h.meta, h.bytes()).expect("upload");
    let (n, k) = (h.meta.n, h.meta.k);
    let choice = KernelChoice::Integer { act, fast };
    let what = format!(
        "{:?} {act:?} fast={fast} M={} N={n} K={k}",
        h.meta.format,
        x.len() / k
    );
    let group = match h.meta.format {
        Format::ConvrotW4a4 { group, .. } => Some(group),
        Format::Int8Tensorwise { convrot_group } => convrot_group,
        _ => None,
    };
    let x_in = group.map_or_else(
        || x.to_vec(),
        |g| rotate(x, k, g, Rotation::Fht).expect("rotate"),
    );
    let q = quantize_act_for(h.meta.format, act, &x_in, k).expect("integer format");
    let wq = match h.meta.format {
        Format::ConvrotW4a4 { .. } => unpack_int4(&h.weight),
        _ => i8s(&h.weight),
    };
    let acc = int_gemm(&q.codes, &wq, k);
    let raw = env.run(
        &w,
        choice,
        x,
        RecordOptions {
            raw_accumulator: true,
            quantize_apart: true,
            ..opts
        },
    );
    let e_rot: Vec<u32> = x_in.iter().map(|v| v.to_bits()).collect();
    if group.is_some() {
        assert_eq!(raw.rotated, e_rot, "{what}: rotated input");
    }
    assert_eq!(raw.codes, q.codes, "{what}: activation codes");
    assert_eq!(raw.scales, q.scales, "{what}: activation scales");
    let gpu_acc: Vec<i32> = raw.out.iter().map(|v| v.to_bits() as i32).collect();
    assert_eq!(gpu_acc, acc, "{what}: accumulators");
    // Small M codes the spread-rotated rows in the GEMV: the same
    // rotation and accumulators bit for bit.
    let spread = env.run(
        &w,
        choice,
        x,
        RecordOptions {
            raw_accumulator: true,
            ..opts
        },
    );
    if group.is_some() {
        assert_eq!(spread.rotated, e_rot, "{what}: spread rotated input");
    }
    let gpu_acc: Vec<i32> = spread.out.iter().map(|v| v.to_bits() as i32).collect();
    assert_eq!(gpu_acc, acc, "{what}: spread accumulators");
    // Or codes them once in a kernel of their own: the same rotation,
    // codes, scales and accumulators bit for bit.
    let coded = env.run(
        &w,
        choice,
        x,
        RecordOptions {
            raw_accumulator: true,
            spread_quant: Some(SpreadQuant::CodeKernel),
            ..opts
        },
    );
    if group.is_some() {
        assert_eq!(coded.rotated, e_rot, "{what}: code kernel rotated input");
    }
    assert_eq!(coded.codes, q.codes, "{what}: code kernel activation codes");
    assert_eq!(
        coded.scales, q.scales,
        "{what}: code kernel activation scales"
    );
    let gpu_acc: Vec<i32> = coded.out.iter().map(|v| v.to_bits() as i32).collect();
    assert_eq!(gpu_acc, acc, "{what}: code kernel accumulators");
    let y = env.run(&w, choice, x, opts).out;
    let s_w: Vec<f32> = bytemuck::pod_collect_to_vec(&h.scale);
    let bias: Option<Vec<f32>> = h.bias.as_ref().map(|b| bytemuck::pod_collect_to_vec(b));
    let e = match h.meta.format {
        Format::ConvrotW4a4 { .. } => epilogue_convrot(&acc, &q.scales, &s_w, bias.as_deref()),
        _ => epilogue_tensorwise(&acc, &q.scales, &s_w, n, bias.as_deref()),
    };
    assert_close_rel(&what, &y, &e, 1e-6);
}

fn check_float(env: &mut Env, h: &HostLayer, x: &[f32], opts: RecordOptions) {
    let w = LinearWeights::upload(&env.gpu, &h.meta, h.bytes()).expect("upload");
    let wf = dequantize_float_weight(&h.meta, h.bytes()).expect("dequantize");
    let bias: Option<Vec<f32>> = h.bias.as_ref().map(|b| bytemuck::pod_collect_to_vec(b));
    let e = gemm_f32(x, &wf, h.meta.k, bias.as_deref());
    let y = env.run(&w, KernelChoice::Float, x, opts).out;
    let what = format!(
        "{:?} M={} N={} K={}",
        h.meta.format,
        x.len() / h.meta.k,
        h.meta.n,
        h.meta.k
    );
    assert_close_rel(&what, &y, &e, 1e-5);
}

/// [`env`] with the fast fused rotate/quantize kernels asked for at
/// `quant_wgs` invocations (by default they run only past K = 4096).
fn env_with_quant_wgs(test: &str, quant_wgs: u32) -> Option<Env> {
    let choice = AdapterChoice {
        options: GpuOptions {
            quant_wgs: Some(quant_wgs),
            ..GpuOptions::default()
        },
        ..AdapterChoice::default()
    };
    env_with(test, &choice, any_adapter)
}

#[test]
fn integer_paths_match_the_reference() {
    let Some(mut env) = env("integer_paths_match_the_reference", any_adapter) else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let convrot = |group, linear_dtype| Format::ConvrotW4a4 {
        group,
        linear_dtype,
    };
    // (format, K, activation arithmetics)
    let cases = [
        (
            convrot(16, LinearDtype::Int4),
            192,
            vec![ActArith::Int4, ActArith::Int8],
        ),
        (
            convrot(64, LinearDtype::Int4),
            320,
            vec![ActArith::Int4, ActArith::Int8],
        ),
        (
            convrot(256, LinearDtype::Int8),
            768,
            vec![ActArith::Int4, ActArith::Int8],
        ),
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
            320,
            vec![ActArith::Int8],
        ),
    ];
    let ns = [33, 100, 65];
    for (i, (format, k, acts)) in cases.into_iter().enumerate() {
        for (j, m) in MS.into_iter().enumerate() {
            let h = HostLayer::random(&mut rng, format, ns[(i + j) % 3], k, j % 2 == 0);
            let x = activations(&mut rng, m, k);
            for (a, &act) in acts.iter().enumerate() {
                for fast in env.fast_variants_for(i + j + a) {
                    check_integer(&mut env, &h, act, fast, &x, RecordOptions::default());
                }
            }
        }
    }
}

/// The fast fused rotate/quantize kernel (subgroups, M <= 8) at every
/// workgroup size it takes, on rows of one to four 16-value blocks per
/// invocation, K a power of two or not (11008 = 43 groups of 256, the
/// Llama-7B down projection's): rotated input, codes, scales and outputs
/// equal the reference's bit for bit (as check_integer checks), so the
/// portable kernel's too.
#[test]
fn fast_rotate_quant_matches_the_reference_at_every_workgroup_size() {
    let Some(mut env) = env(
        "fast_rotate_quant_matches_the_reference_at_every_workgroup_size",
        any_adapter,
    ) else {
        return;
    };
    if !env.gpu.caps.subgroups {
        eprintln!("no subgroups: nothing to check");
        return;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(31);
    let w4 = |group| Format::ConvrotW4a4 {
        group,
        linear_dtype: LinearDtype::Int4,
    };
    let limits = env.gpu.device.limits();
    let max = limits.max_compute_invocations_per_workgroup;
    // The kernel holds the row, one pad word per 16 values, in workgroup memory.
    let fits =
        |k: usize| 4 * (k + k / 16 + 2) <= limits.max_compute_workgroup_storage_size as usize;
    // (format, K, workgroup sizes)
    let cases = [
        (w4(256), 11008, vec![256, 512, 1024]),
        (w4(256), 4096, vec![64, 128, 256, 1024]),
        (w4(64), 2368, vec![64, 256]),
        (w4(16), 1040, vec![64]),
    ];
    for (format, k, sizes) in cases {
        if !fits(k) {
            eprintln!("K = {k}: the row does not fit the workgroup memory");
            continue;
        }
        for (j, m) in [1usize, 3].into_iter().enumerate() {
            let h = HostLayer::random(&mut rng, format, 9, k, j == 0);
            let x = activations(&mut rng, m, k);
            for &wgs in sizes.iter().filter(|&&w| w <= max) {
                let opts = RecordOptions {
                    quant_wgs: Some(wgs),
                    ..RecordOptions::default()
                };
                for act in [ActArith::Int4, ActArith::Int8] {
                    check_integer(&mut env, &h, act, true, &x, opts);
                }
            }
        }
    }
}

/// Activations whose quotients by their scale sit within an ulp or two of
/// half-integers, where a division a few ulp off (Vulkan allows 2.5; the
/// H200's is) rounds a code the other way: codes and scales must still
/// equal the CPU reference's. Rows of int8_tensorwise hold (j - 126.5) · c
/// beside an absmax of 127 · c; the convrot rows hold the inverse rotation
/// of (j - 6.5) · c beside 7 · c, so the kernel's rotation lands next to
/// the ties.
#[test]
fn near_tie_activations_round_like_the_reference() {
    let Some(mut env) = env("near_tie_activations_round_like_the_reference", any_adapter) else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let (m, k) = (6, 256);
    let ties = |lim: f32, period: usize| -> Vec<f32> {
        let mut x = Vec::with_capacity(m * k);
        for row in 0..m {
            let c = 0.1 + 0.37 * row as f32;
            x.push(lim * c);
            x.extend((1..k).map(|j| ((j % period) as f32 - (period as f32 - 1.0) / 2.0) * c));
        }
        x
    };
    let int8 = Format::Int8Tensorwise {
        convrot_group: None,
    };
    let h = HostLayer::random(&mut rng, int8, 24, k, false);
    let x = ties(127.0, 254);
    for fast in env.fast_variants() {
        check_integer(
            &mut env,
            &h,
            ActArith::Int8,
            fast,
            &x,
            RecordOptions::default(),
        );
    }
    let g = 64;
    let convrot = Format::ConvrotW4a4 {
        group: g,
        linear_dtype: LinearDtype::Int4,
    };
    let h = HostLayer::random(&mut rng, convrot, 24, k, false);
    let x = rotate(&ties(7.0, 14), k, g, Rotation::Fht).expect("rotate");
    for fast in env.fast_variants() {
        check_integer(
            &mut env,
            &h,
            ActArith::Int4,
            fast,
            &x,
            RecordOptions::default(),
        );
    }
}

#[test]
fn float_paths_match_the_reference() {
    let Some(mut env) = env("float_paths_match_the_reference", any_adapter) else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let formats = [
        Format::F32,
        Format::F16,
        Format::Bf16,
        Format::Float8E4m3fn,
        Format::Float8E5m2,
    ];
    for (i, format) in formats.into_iter().enumerate() {
        for (j, m) in MS.into_iter().enumerate() {
            let k = 196;
            let h = HostLayer::random(&mut rng, format, [33, 100, 65][(i + j) % 3], k, j % 2 == 1);
            let x = activations(&mut rng, m, k);
            check_float(&mut env, &h, &x, RecordOptions::default());
        }
    }
}

#[test]
fn small_bindings_split_the_weight_rows() {
    let Some(mut env) = env("small_bindings_split_the_weight_rows", any_adapter) else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    // 2 KiB per binding: 10+ chunks, each at an aligned offset.
    let opts = RecordOptions {
        max_binding: Some(2048),
        ..Default::default()
    };
    for m in [2, 64] {
        let format = Format::ConvrotW4a4 {
            group: 64,
            linear_dtype: LinearDtype::Int4,
        };
        let h = HostLayer::random(&mut rng, format, 97, 128, true);
        let x = activations(&mut rng, m, 128);
        check_integer(&mut env, &h, ActArith::Int4, false, &x, opts);
        let h = HostLayer::random(
            &mut rng,
            Format::Int8Tensorwise {
                convrot_group: None,
            },
            97,
            68,
            true,
        );
        let x = activations(&mut rng, m, 68);
        check_integer(&mut env, &h, ActArith::Int8, false, &x, opts);
        let h = HostLayer::random(&mut rng, Format::F16, 97, 64, true);
        let x = activations(&mut rng, m, 64);
        check_float(&mut env, &h, &x, opts);
    }
}

#[test]
fn weight_larger_than_one_binding() {
    let Some(mut env) = env("weight_larger_than_one_binding", any_adapter) else {
        return;
    };
    let limit = env.gpu.caps.max_storage_binding;
    if limit > 256 << 20 {
        eprintln!(
            "weight_larger_than_one_binding: skipped: binding limit {limit} is too large for a quick test"
        );
        return;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(10);
    let k = 8192;
    let n = (limit as usize / (k / 2)) + 100;
    let format = Format::ConvrotW4a4 {
        group: 256,
        linear_dtype: LinearDtype::Int4,
    };
    let h = HostLayer::random(&mut rng, format, n, k, true);
    assert!(h.weight.len() as u64 > limit);
    let x = activations(&mut rng, 1, k);
    check_integer(
        &mut env,
        &h,
        ActArith::Int8,
        false,
        &x,
        RecordOptions::default(),
    );
}

/// The multi-row GEMV (rows start on 16 bytes, M <= 8) for every format, on
/// awkward shapes: N not a multiple of the rows per workgroup, K not a
/// multiple of the workgroup's 16-byte tile (and longer than one tile, so
/// the quad loop wraps), and forced shapes besides the adapter's default.
#[test]
fn gemv_rows_match_the_reference() {
    let Some(mut env) = env("gemv_rows_match_the_reference", any_adapter) else {
        return;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let shapes = [
        None,
        Some(GemvShape { rows: 3, wgs: 64 }),
        Some(GemvShape { rows: 1, wgs: 128 }),
    ];
    let w4 = Format::ConvrotW4a4 {
        group: 16,
        linear_dtype: LinearDtype::Int4,
    };
    let w8 = Format::Int8Tensorwise {
        convrot_group: None,
    };
    // (format, K): int4 K % 32 == 0, int8 K % 16 == 0, fp8 K % 16 == 0,
    // f16/bf16 K % 8 == 0; 2080 int4 columns = 65 quads > one 64-wide tile.
    let int_cases = [(w4, 2080), (w4, 96), (w8, 1040), (w8, 48)];
    let float_cases = [
        (Format::F32, 1028),
        (Format::F16, 72),
        (Format::Bf16, 520),
        (Format::Float8E4m3fn, 1040),
        (Format::Float8E5m2, 48),
    ];
    for (i, shape) in shapes.into_iter().enumerate() {
        let opts = RecordOptions {
            gemv: shape,
            ..Default::default()
        };
        // 16 and 32: past the fused quantization, still the rows kernel.
        for (j, m) in [1usize, 3, 8, 16, 32].into_iter().enumerate() {
            let n = [13, 1, 67][(i + j) % 3];
            let fused = m <= GEMV_MAX_M as usize;
            if shape.is_some_and(|s| s.rows as usize * m > 64) {
                continue; // more accumulators than the kernels hold
            }
            // Two of the integer and two of the float cases an M, rotating.
            for (format, k) in rotation(&int_cases, i + j, 2) {
                let h = HostLayer::random(&mut rng, format, n, k, j != 1);
                let x = activations(&mut rng, m, k);
                let acts = if format == w4 {
                    vec![ActArith::Int4, ActArith::Int8]
                } else {
                    vec![ActArith::Int8]
                };
                for (a, act) in acts.into_iter().enumerate() {
                    for fast in env.fast_variants_for(i + j + a) {
                        check_integer(&mut env, &h, act, fast, &x, opts);
                        // (Rotation +) quantization, GEMV.
                        if fused {
                            assert_eq!(env.scratch.last_dispatches(), 2, "{format:?} M={m}");
                        }
                    }
                }
            }
            for (format, k) in rotation(&float_cases, i + j, 2) {
                let h = HostLayer::random(&mut rng, format, n, k, j == 1);
                let x = activations(&mut rng, m, k);
                check_float(&mut env, &h, &x, opts);
                assert_eq!(env.scratch.last_dispatches(), 1, "{format:?} M={m}");
            }
        }
    }
}

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
    let (ms, ns) = ([9usize, 100, 257], [17usize, 130, 1, 64]);
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

fn bits(y: &[f32]) -> Vec<u32> {
    y.iter().map(|v| v.to_bits()).collect()
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
