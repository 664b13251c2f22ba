//! The GPU linears against the CPU reference on random inputs: activation
//! codes, scales and integer accumulators exactly, outputs to float rounding,
//! over M = 1, 2, 7, 64, 257, K a multiple of the group size but not of the
//! kernels' tiles, every format and kernel variant, and weights split across
//! bindings (a forced small binding, and one weight above 128 MiB). The
//! cooperative-matrix GEMMs are `coop.rs`'s, linears recorded together
//! (reused codes, fused launches) `fused.rs`'s.

mod coop;
mod fused;

use crate::linear_common::{Env, HostLayer, env, env_with};
use dynvram_test_support::variants::rotation;

use std::sync::Arc;

use dynvram_gpu::device::{AdapterChoice, GpuOptions, SpreadQuant};
use dynvram_gpu::ops::encoder::Encoder;
use dynvram_gpu::ops::linear::conformance::upload_f32;
use dynvram_gpu::ops::linear::{
    GEMV_MAX_M, GemvShape, INTEGER_CHUNK_ROWS, LinearWeights, RecordOptions, record_linear_with,
};
use dynvram_gpu::{ActDtype, GpuTensor};
use dynvram_quant::reference::{
    ActQuant, Rotation, dequantize_float_weight, epilogue_convrot, epilogue_tensorwise, gemm_f32,
    int_gemm, quantize_act_for, rotate, unpack_int4,
};
use dynvram_quant::tensors::i8s;
use dynvram_quant::{ActArith, Format, KernelChoice, LinearDtype};
use dynvram_test_support::gpu::any_adapter;
use dynvram_test_support::random::activations;
use dynvram_test_support::tolerance::assert_close_rel;
use rand::SeedableRng;
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
        // Longer inputs go through in chunks: the scratch holds the last.
        let whole = m <= INTEGER_CHUNK_ROWS;
        if let (KernelChoice::Integer { .. }, Some(_), true) = (choice, group, whole) {
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
    let IntReference {
        group,
        x_in,
        q,
        acc,
        out: e,
    } = IntReference::of(h, act, x);
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
    assert_close_rel(&what, &y, &e, 1e-6);
}

/// The CPU reference of an integer layer on `x`: its rotation group, the
/// rotated input, the activation codes and scales, the exact accumulators
/// and the output.
struct IntReference {
    group: Option<u32>,
    x_in: Vec<f32>,
    q: ActQuant,
    acc: Vec<i32>,
    out: Vec<f32>,
}

impl IntReference {
    fn of(h: &HostLayer, act: ActArith, x: &[f32]) -> Self {
        let (n, k) = (h.meta.n, h.meta.k);
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
        let s_w: Vec<f32> = bytemuck::pod_collect_to_vec(&h.scale);
        let bias: Option<Vec<f32>> = h.bias.as_ref().map(|b| bytemuck::pod_collect_to_vec(b));
        let out = match h.meta.format {
            Format::ConvrotW4a4 { .. } => epilogue_convrot(&acc, &q.scales, &s_w, bias.as_deref()),
            _ => epilogue_tensorwise(&acc, &q.scales, &s_w, n, bias.as_deref()),
        };
        Self {
            group,
            x_in,
            q,
            acc,
            out,
        }
    }
}

/// An input longer than `INTEGER_CHUNK_ROWS` goes through an integer layer
/// in row chunks (FLUX.1's 4,608 tokens at a 1 GiB budget): the exact
/// accumulators and the outputs equal the reference's over every row,
/// with a partial last chunk, rotated and not, while the scratch holds one
/// chunk's rotated input — and all at once where the pass's room beyond
/// its plan holds the whole input's scratch (a tracked scratch with room),
/// the same accumulators and outputs.
#[test]
fn long_inputs_go_through_in_row_chunks() {
    let Some(mut env) = env("long_inputs_go_through_in_row_chunks", any_adapter) else {
        return;
    };
    for room in [None, Some(0), Some(1 << 30)] {
        if let Some(room) = room {
            env.track_scratch(room);
        }
        long_inputs_with(&mut env, room.is_some_and(|r| r > 0));
    }
}

/// [`long_inputs_go_through_in_row_chunks`] with the env's scratch:
/// `whole`, all rows at once (else in chunks).
fn long_inputs_with(env: &mut Env, whole: bool) {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let m = 2 * INTEGER_CHUNK_ROWS as usize + 77;
    let cases = [
        (
            Format::ConvrotW4a4 {
                group: 16,
                linear_dtype: LinearDtype::Int4,
            },
            64,
            ActArith::Int4,
        ),
        (
            Format::Int8Tensorwise {
                convrot_group: None,
            },
            96,
            ActArith::Int8,
        ),
    ];
    for (format, k, act) in cases {
        let h = HostLayer::random(&mut rng, format, 24, k, true);
        let x = activations(&mut rng, m, k);
        let r = IntReference::of(&h, act, &x);
        let w = LinearWeights::upload(&env.gpu, &h.meta, h.bytes()).expect("upload");
        let choice = KernelChoice::Integer { act, fast: false };
        let what = format!("{format:?} {act:?} M={m} K={k}");
        let raw = env.run(
            &w,
            choice,
            &x,
            RecordOptions {
                raw_accumulator: true,
                ..Default::default()
            },
        );
        let gpu_acc: Vec<i32> = raw.out.iter().map(|v| v.to_bits() as i32).collect();
        assert_eq!(gpu_acc, r.acc, "{what}: accumulators");
        let y = env.run(&w, choice, &x, RecordOptions::default()).out;
        assert_close_rel(&what, &y, &r.out, 1e-6);
        if r.group.is_some() {
            let rotated = env.scratch.rotated().expect("rotated input").size();
            let all = (m * k * 4) as u64;
            assert_eq!(
                rotated >= all,
                whole,
                "{what}: the scratch holds {rotated} B of rotated input, all {m} rows {all} B"
            );
        }
    }
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

fn bits(y: &[f32]) -> Vec<u32> {
    y.iter().map(|v| v.to_bits()).collect()
}
