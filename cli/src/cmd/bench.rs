//! `dynvram bench …`: throughput measured by the program itself, printed
//! beside the limits it can measure on the same machine in the same run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use dynvram_loader::{DEFAULT_SLOT_SIZE, DEFAULT_SLOTS};
use dynvram_quant::{AdapterCaps, Format, LinearDtype, LinearDtypeOverride, choose};
use dynvram_runtime::device::RingConfig;
use dynvram_runtime::device::host_memory::mapped_staging_memory;
use dynvram_runtime::device::upload_bench::{UploadBenchOptions, run_upload};
use dynvram_runtime::ops::cache::PipelineCache;
use dynvram_runtime::ops::linear::{
    Cm2Gemm, Cm2Weights, CoopGemmKernel, CoopShape, Fold, Fusion, GemmKernel, GemvShape,
    LinearScratch, LinearWeights, RecordOptions, Region, WeightPart, cm2_gemms, cm2_named,
    cm2_weights_of, record_linear_with, record_linears_fused, row_bytes,
};
use dynvram_runtime::{ActDtype, Gpu, GpuTensor};
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::cmd::adapter_args::AdapterArgs;
use crate::cmd::budget_args::StagingMemoryArg;
use crate::cmd::gpu_timing::{
    activation, copy_baseline, median_seconds, shader_baselines, submit_timed,
};
use crate::cmd::ranges;
use crate::output::{print_json, size};

/// What to measure.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// File → VRAM upload throughput (warm and cold page cache; ring in mapped
    /// buffers and in imported host RAM; pins; the file's own map imported),
    /// beside memcpy and raw-read baselines.
    Upload(UploadArgs),
    /// Linear-kernel throughput per weight format, in weight bytes/s and FLOP/s.
    Linear(LinearArgs),
    /// Target S1: a streamed pass over a model 4× the budget against its
    /// upload-only and compute-only times.
    Pass(crate::cmd::bench_pass::PassArgs),
    /// What one kernel launch costs the CPU and the GPU, a pass per launch
    /// against one pass for all.
    Dispatch(crate::cmd::bench_dispatch::DispatchArgs),
    /// The cooperative matrices' own rate (the tensor-core ceiling of the
    /// GEMM and flash-attention kernels), operands in registers and fed
    /// from workgroup memory.
    Coop(crate::cmd::bench_coop::CoopArgs),
    /// Decode attention (one query row over a KV cache, RoPE fused) per
    /// decode tuning: workgroup size, split policy or forced splits, merge;
    /// with `--queries`, prefill (flash) attention per flash tuning.
    Attention(crate::cmd::bench_attention::AttentionArgs),
}

/// Arguments of `dynvram bench upload`.
#[derive(Debug, clap::Args)]
pub struct UploadArgs {
    /// File to stream (created with `--size` bytes if absent).
    #[arg(long, default_value = "dynvram-bench-upload.bin")]
    file: PathBuf,
    /// Size of the test file to create, e.g. 1GiB (1 B to 1 TiB).
    #[arg(long, default_value = "256MiB", value_parser = ranges::bytes::<1, { 1 << 40 }>)]
    size: bytesize::ByteSize,
    /// Reader threads (1 to 256).
    #[arg(long, default_value_t = 8, value_parser = ranges::int::<usize, 1, 256>)]
    threads: usize,
    /// Staging ring slots (1 to 64).
    #[arg(long, default_value_t = DEFAULT_SLOTS, value_parser = ranges::int::<usize, 1, 64>)]
    slots: usize,
    /// Bytes per ring slot, e.g. 64MiB (4 KiB to 4 GiB).
    #[arg(long, default_value_t = bytesize::ByteSize::b(DEFAULT_SLOT_SIZE),
          value_parser = ranges::bytes::<4096, { 4 << 30 }>)]
    slot_size: bytesize::ByteSize,
    /// Ring slot memories to measure, comma separated: `mapped` (ordinary
    /// `MAP_WRITE` buffers: BAR on resizable-BAR GPUs) and/or `host`
    /// (imported host RAM, VK_EXT_external_memory_host).
    #[arg(long, default_value = "mapped,host", value_delimiter = ',')]
    ring_memory: Vec<StagingMemoryArg>,
    /// Skip the zero-copy import of the file's own map.
    #[arg(long)]
    no_file_import: bool,
    /// Repetitions per figure (the median is reported; 1 to 10 000).
    #[arg(long, default_value_t = 3, value_parser = ranges::int::<usize, 1, 10_000>)]
    reps: usize,
    #[command(flatten)]
    adapter: AdapterArgs,
}

/// Arguments of `dynvram bench linear`.
#[derive(Debug, clap::Args)]
pub struct LinearArgs {
    /// Shapes as `MxNxK` (rows × out_features × in_features), comma separated.
    #[arg(long, default_value = "1x4096x4096,16x4096x4096,256x4096x4096")]
    shapes: String,
    /// Formats: w4a4, w4a8, w8a8, fp8, f16, bf16, f32 (comma separated).
    #[arg(long, default_value = "w4a4,w4a8,w8a8,fp8,f16")]
    formats: String,
    /// Timed repetitions per case (after a warm-up; 1 to 100 000).
    #[arg(long, default_value_t = 20, value_parser = ranges::int::<usize, 1, 100_000>)]
    reps: usize,
    /// Output rows per workgroup of the small-M GEMV (default: per adapter
    /// and M, see `GemvShape::default_for`; 1 to 1024); for tuning.
    #[arg(long, value_parser = ranges::int::<u32, 1, 1024>)]
    gemv_rows: Option<u32>,
    /// Invocations per workgroup of the small-M GEMV (with --gemv-rows;
    /// 1 to 1024).
    #[arg(long, default_value_t = 256, value_parser = ranges::int::<u32, 1, 1024>)]
    gemv_wgs: u32,
    /// Invocations per workgroup of the fast fused rotate/quantize kernel
    /// (M <= 8, integer formats; default: per K, or `DYNVRAM_QUANT_WGS`);
    /// 1 to 1024; for tuning.
    #[arg(long, value_parser = ranges::int::<u32, 1, 1024>)]
    quant_wgs: Option<u32>,
    /// Time several weights of the shape as one launch: `stack` three (like
    /// q/k/v), `glu` two with SwiGLU (like gate/up); figures count all their
    /// bytes. Needs a shape the fused GEMV takes (M <= 32, not fp8).
    #[arg(long, value_enum, default_value = "none")]
    fuse: FuseArg,
    /// GEMM kernel past the GEMVs: `both` times the tiled GEMM and, where the
    /// adapter has them, cooperative matrices side by side.
    #[arg(long, value_enum, default_value = "both")]
    gemm: GemmArg,
    /// Cooperative-matrix GEMM shapes to time, `SG_MxSG_NxBK[xWMxWN]`
    /// (subgroups along M and N, staged K columns, accumulators per
    /// subgroup along M and N, 2 × 2 if left out), comma separated; for
    /// tuning.
    #[arg(long, value_delimiter = ',', value_parser = str::parse::<CoopShape>)]
    coop_shapes: Vec<CoopShape>,
    /// SPIR-V cooperative-matrix-2 GEMMs to time besides the runtime's
    /// choice, by name (`gemm_cm2_*`, as `probe` and the kernel column name
    /// them), comma separated, each on the formats whose weights it reads
    /// or takes converted (bf16 on the f16 kernels, int4 on the int8 ones);
    /// for tuning on NVIDIA.
    #[arg(long, value_delimiter = ',', value_parser = cm2_kernel)]
    cm2_kernels: Vec<&'static Cm2Gemm>,
    /// f16 activations (needs SHADER_F16; the float formats' cooperative
    /// GEMM takes only these).
    #[arg(long)]
    f16: bool,
    /// Bytes of the copy and streaming baselines (0: skip them; at most 64 GiB).
    #[arg(long, default_value = "512MiB", value_parser = ranges::bytes::<0, { 64 << 30 }>)]
    copy_size: bytesize::ByteSize,
    #[command(flatten)]
    adapter: AdapterArgs,
}

/// A SPIR-V GEMM of `--cm2-kernels`, by name.
fn cm2_kernel(name: &str) -> Result<&'static Cm2Gemm, String> {
    cm2_named(name).ok_or_else(|| {
        let names: Vec<_> = cm2_gemms().iter().map(|g| g.name).collect();
        format!(
            "no SPIR-V GEMM named `{name}` (want one of {})",
            names.join(", ")
        )
    })
}

/// `--gemm` of `bench linear`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GemmArg {
    /// The runtime's choice.
    Auto,
    /// The tiled GEMM (dot4 for integer formats).
    Tiled,
    /// Cooperative matrices (an error where they cannot run).
    Coop,
    /// The tiled GEMM, then cooperative matrices where the runtime would use
    /// them.
    Both,
}

impl GemmArg {
    /// The kernels to time, in order.
    fn kernels(self) -> &'static [GemmKernel] {
        match self {
            Self::Auto => &[GemmKernel::Auto],
            Self::Tiled => &[GemmKernel::Tiled],
            Self::Coop => &[GemmKernel::Coop],
            Self::Both => &[GemmKernel::Tiled, GemmKernel::Auto],
        }
    }
}

/// `--fuse` of `bench linear`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum FuseArg {
    /// One weight per launch.
    None,
    /// Three weights, each to its own output (q/k/v).
    Stack,
    /// Two weights, `silu(x·W0ᵀ) · (x·W1ᵀ)` (gate/up).
    Glu,
}

impl FuseArg {
    /// Weights per timed launch.
    fn weights(self) -> u64 {
        match self {
            Self::None => 1,
            Self::Stack => 3,
            Self::Glu => 2,
        }
    }
}

/// Runs the chosen benchmark.
pub fn run(cmd: BenchCommand, json: bool) -> anyhow::Result<ExitCode> {
    match cmd {
        BenchCommand::Upload(a) => upload(a, json),
        BenchCommand::Linear(a) => linear(a, json),
        BenchCommand::Pass(a) => crate::cmd::bench_pass::run(a, json),
        BenchCommand::Dispatch(a) => crate::cmd::bench_dispatch::run(a, json),
        BenchCommand::Coop(a) => crate::cmd::bench_coop::run(a, json),
        BenchCommand::Attention(a) => crate::cmd::bench_attention::run(a, json),
    }
}

#[derive(Debug, Serialize)]
struct UploadJson {
    figures: Vec<UploadFigure>,
    staging_memory: Option<dynvram_runtime::device::host_memory::StagingPlacement>,
    host_import: bool,
    notes: Vec<String>,
}

#[derive(Debug, Serialize)]
struct UploadFigure {
    name: String,
    bytes: u64,
    seconds: f64,
    gb_per_s: f64,
}

fn upload(a: UploadArgs, json: bool) -> anyhow::Result<ExitCode> {
    let gpu = Gpu::open(&a.adapter.choice())?;
    let report = run_upload(
        &gpu.device,
        &gpu.queue,
        &UploadBenchOptions {
            file: a.file.clone(),
            create_size: Some(a.size.as_u64()),
            threads: a.threads,
            ring: RingConfig {
                slots: a.slots,
                slot_size: a.slot_size.as_u64(),
                ..RingConfig::default()
            },
            ring_memories: a.ring_memory.iter().map(|&m| m.into()).collect(),
            file_import: !a.no_file_import,
            reps: a.reps,
            copy_probe: (gpu.caps.backend == "vulkan").then(|| gpu.caps.name.clone()),
        },
    )?;
    let staging = mapped_staging_memory(&gpu.adapter);
    let figures: Vec<UploadFigure> = report
        .figures
        .iter()
        .map(|f| UploadFigure {
            name: f.name.clone(),
            bytes: f.bytes,
            seconds: f.seconds,
            gb_per_s: f.gb_per_s(),
        })
        .collect();
    if json {
        print_json(&UploadJson {
            figures,
            staging_memory: staging,
            host_import: gpu.host_import,
            notes: report.notes.clone(),
        })?;
    } else {
        println!(
            "adapter {} [{}], file {}",
            gpu.info.name,
            gpu.caps.backend,
            a.file.display()
        );
        match &staging {
            Some(m) => println!("staging memory (mapped buffers): {m}"),
            None => println!("staging memory (mapped buffers): placement unknown on this backend"),
        }
        println!(
            "host-memory import (VK_EXT_external_memory_host): {}",
            if gpu.host_import {
                "enabled"
            } else {
                "unavailable"
            }
        );
        for f in &report.figures {
            println!("{f}");
        }
        for (name, c) in &report.warm_counters {
            println!(
                "ring counters ({name}): {} staged, {} slots used, {} stalls, {} flushes",
                size(c.bytes_staged),
                c.slots_used,
                c.stalls,
                c.flushes
            );
        }
        for n in &report.notes {
            println!("note: {n}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Serialize)]
struct LinearFigure {
    format: String,
    m: u64,
    n: u64,
    k: u64,
    kernel: String,
    /// The GEMM ran on cooperative matrices (WGSL, or the SPIR-V
    /// cooperative-matrix-2 kernels).
    coop: bool,
    /// Compute dispatches one linear records.
    dispatches: u32,
    ms: f64,
    weight_gb_per_s: f64,
    /// `weight_gb_per_s` over the copy baseline of the same run.
    of_copy: Option<f64>,
    tflops: f64,
}

fn parse_format(name: &str) -> anyhow::Result<(Format, LinearDtypeOverride)> {
    let w4 = |ld| Format::ConvrotW4a4 {
        group: 256,
        linear_dtype: ld,
    };
    Ok(match name {
        "w4a4" => (w4(LinearDtype::Int4), LinearDtypeOverride::Int4),
        "w4a8" => (w4(LinearDtype::Int8), LinearDtypeOverride::Int8),
        "w8a8" => (
            Format::Int8Tensorwise {
                convrot_group: None,
            },
            LinearDtypeOverride::Auto,
        ),
        "fp8" => (Format::Float8E4m3fn, LinearDtypeOverride::Auto),
        "f16" => (Format::F16, LinearDtypeOverride::Auto),
        "bf16" => (Format::Bf16, LinearDtypeOverride::Auto),
        "f32" => (Format::F32, LinearDtypeOverride::Auto),
        other => {
            anyhow::bail!("unknown format `{other}` (w4a4, w4a8, w8a8, fp8, f16, bf16, f32)")
        }
    })
}

fn parse_shape(s: &str) -> anyhow::Result<(u64, u64, u64)> {
    let v: Vec<u64> = s
        .split('x')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("bad shape `{s}` (want MxNxK): {e}"))?;
    match v[..] {
        [m, n, k] if m > 0 && n > 0 && k > 0 && k % 256 == 0 => Ok((m, n, k)),
        _ => anyhow::bail!("bad shape `{s}`: want MxNxK, all > 0, K a multiple of 256"),
    }
}

/// Random weight bytes of `format` (valid codes: finite fp8, small scales).
fn random_weights(
    gpu: &Gpu,
    format: Format,
    n: u64,
    k: u64,
    seed: u64,
) -> anyhow::Result<LinearWeights> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let bytes = n * row_bytes(format, k);
    let mut w = vec![0u8; bytes as usize];
    match format {
        Format::F32 => w
            .chunks_exact_mut(4)
            .for_each(|c| c.copy_from_slice(&(rng.random::<f32>() - 0.5).to_le_bytes())),
        Format::F16 => w.chunks_exact_mut(2).for_each(|c| {
            c.copy_from_slice(&half::f16::from_f32(rng.random::<f32>() - 0.5).to_le_bytes())
        }),
        // fp8 e4m3fn: keep exponents small so every code is finite.
        Format::Float8E4m3fn => w.iter_mut().for_each(|b| *b = rng.random::<u8>() & 0xB7),
        _ => rng.fill(&mut w[..]),
    }
    let buffer = |label: &str, data: &[u8]| -> anyhow::Result<Region> {
        let b = gpu.create_buffer(
            label,
            data.len().max(4).next_multiple_of(4) as u64,
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
        )?;
        gpu.queue.write_buffer(&b, 0, data);
        Ok(Region::whole(Arc::new(b)))
    };
    let scale_count = match format {
        Format::ConvrotW4a4 { .. } => n as usize,
        Format::F32 | Format::F16 | Format::Bf16 => 0,
        _ => 1,
    };
    let scales: Vec<f32> = (0..scale_count)
        .map(|_| 1e-3 * (1.0 + rng.random::<f32>()))
        .collect();
    Ok(LinearWeights {
        format,
        n,
        k,
        parts: [WeightPart {
            region: buffer("bench.weight", &w)?,
            rows: n,
        }]
        .into(),
        scale: (scale_count > 0)
            .then(|| buffer("bench.scale", bytemuck::cast_slice(&scales)))
            .transpose()?,
        bias: None,
    })
}

#[allow(clippy::too_many_arguments)]
fn time_case(
    gpu: &Gpu,
    caps: &AdapterCaps,
    name: &str,
    shape: (u64, u64, u64),
    reps: usize,
    opts: &RecordOptions,
    act: ActDtype,
    fuse: FuseArg,
) -> anyhow::Result<LinearFigure> {
    let (m, n, k) = shape;
    let (format, over) = parse_format(name)?;
    let plan = choose(format, caps, over);
    let weights: Vec<LinearWeights> = (1..=fuse.weights())
        .map(|seed| random_weights(gpu, format, n, k, seed))
        .collect::<Result<_, _>>()?;
    let x = activation(gpu, "bench.x", m, k, act, 0)?;
    let outs: Vec<GpuTensor> = weights
        .iter()
        .map(|_| activation(gpu, "bench.out", m, n, act, 0))
        .collect::<Result<_, _>>()?;
    let cache = PipelineCache::default();
    let mut scratch = LinearScratch::new();
    // Converted pieces (bf16 as f16, int4 as int8) as a resident pass
    // takes them: the whole layer where the room allows.
    scratch.set_piece_room(u64::MAX);
    let mut run = |times: usize| {
        submit_timed(gpu, |enc| {
            for _ in 0..times {
                if fuse == FuseArg::None {
                    record_linear_with(
                        gpu,
                        &cache,
                        enc,
                        &weights[0],
                        plan.kernel,
                        &x,
                        &outs[0],
                        &mut scratch,
                        opts,
                    )?;
                    continue;
                }
                let stack: Vec<_> = weights.iter().zip(&outs).collect();
                let fusion = match fuse {
                    FuseArg::Glu => Fusion::Glu {
                        gate: &weights[0],
                        up: &weights[1],
                        out: &outs[0],
                    },
                    _ => Fusion::Stack(&stack),
                };
                let fused = record_linears_fused(
                    gpu,
                    &cache,
                    enc,
                    fusion,
                    plan.kernel,
                    &x,
                    &mut scratch,
                    opts,
                    &Fold::default(),
                )?;
                anyhow::ensure!(
                    fused,
                    "{name} {m}x{n}x{k}: the fused GEMV does not take this case"
                );
            }
            Ok(())
        })
    };
    run(2)?; // compile pipelines, warm caches
    // Measured until two measurements agree within 3 % (at most 5): on the
    // H100 a kernel's first hundreds of launches in a process ran at a
    // fraction of its rate, a whole median of five submits long
    // (2026-12-06).
    let mut per = median_seconds(reps, &mut run)?;
    for _ in 0..4 {
        let again = median_seconds(reps, &mut run)?;
        let settled = (again - per).abs() <= 0.03 * per;
        per = again;
        if settled {
            break;
        }
    }
    let wbytes = fuse.weights() * n * row_bytes(format, k);
    Ok(LinearFigure {
        format: match fuse {
            FuseArg::None => name.to_owned(),
            FuseArg::Stack => format!("{name}×3"),
            FuseArg::Glu => format!("{name}-glu"),
        },
        m,
        n,
        k,
        kernel: match (scratch.last_coop_shape(), scratch.last_coop_kernel()) {
            _ if let Some(spirv) = scratch.last_spirv_gemm() => {
                format!("{} spirv-cm2 {spirv}", plan.kernel)
            }
            (Some(shape), Some(CoopGemmKernel::Double)) => {
                format!("{} coop-matrix {shape} double", plan.kernel)
            }
            (Some(shape), _) => format!("{} coop-matrix {shape}", plan.kernel),
            _ => plan.kernel.to_string(),
        },
        coop: scratch.last_used_coop(),
        dispatches: scratch.last_dispatches(),
        ms: per * 1e3,
        weight_gb_per_s: wbytes as f64 / per / 1e9,
        of_copy: None,
        tflops: 2.0 * (fuse.weights() * m * n * k) as f64 / per / 1e12,
    })
}

fn linear(a: LinearArgs, json: bool) -> anyhow::Result<ExitCode> {
    let gpu = Gpu::open(&a.adapter.choice())?;
    let shapes: Vec<_> = a
        .shapes
        .split(',')
        .map(parse_shape)
        .collect::<Result<_, _>>()?;
    let opts = RecordOptions {
        gemv: a.gemv_rows.map(|rows| GemvShape {
            rows,
            wgs: a.gemv_wgs,
        }),
        quant_wgs: a.quant_wgs,
        ..Default::default()
    };
    // (copy engine, shader copy, shader read-only) GB/s.
    let baselines = (a.copy_size.as_u64() > 0)
        .then(|| -> anyhow::Result<_> {
            let bytes = a.copy_size.as_u64();
            let engine = copy_baseline(&gpu, bytes, a.reps)?;
            let (shader, read) = shader_baselines(&gpu, bytes, a.reps)?;
            Ok((engine, shader, read))
        })
        .transpose()?;
    // The limit "of copy" is measured against: the faster of the two copies.
    let copy = baselines.map(|(engine, shader, _)| engine.max(shader));
    let mut figures = Vec::new();
    if !json {
        println!("adapter {} [{}]", gpu.info.name, gpu.caps.backend);
        let stamps = gpu
            .device
            .features()
            .contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS);
        println!(
            "timing: {}",
            if stamps {
                "GPU timestamps around each submit's repetitions"
            } else {
                "wall time from submit to idle (no timestamps inside encoders)"
            }
        );
        if let Some((e, c, r)) = baselines {
            println!(
                "device copy (read + write): copy_buffer_to_buffer {e:.1} GB/s, shader {c:.1} GB/s; shader read-only {r:.1} GB/s"
            );
        }
        println!(
            "{:<6} {:>6} {:>6} {:>6}  {:>10} {:>11} {:>7} {:>8} {:>4}  kernel",
            "format", "M", "N", "K", "ms", "weight GB/s", "of copy", "TFLOP/s", "disp"
        );
    }
    let coop_shapes: Vec<Option<CoopShape>> = if a.coop_shapes.is_empty() {
        vec![None]
    } else {
        a.coop_shapes.iter().copied().map(Some).collect()
    };
    let act = if a.f16 { ActDtype::F16 } else { ActDtype::F32 };
    for &shape in &shapes {
        let runs = a.formats.split(',').flat_map(|f| {
            let base = a.gemm.kernels().iter().flat_map({
                let coop_shapes = &coop_shapes;
                move |&g| {
                    // The tiled GEMM once; the others once per coop shape.
                    let shapes = if g == GemmKernel::Tiled {
                        &coop_shapes[..1]
                    } else {
                        &coop_shapes[..]
                    };
                    shapes.iter().map(move |&c| (f, g, c, None))
                }
            });
            // Each SPIR-V GEMM asked for that reads this format's weights,
            // or takes them converted (bf16 through the f16 kernels, int4
            // through the int8 ones, as by default).
            let weights = parse_format(f.trim())
                .ok()
                .and_then(|(w, _)| cm2_weights_of(w));
            let named = a
                .cm2_kernels
                .iter()
                .filter(move |g| {
                    Some(g.weights) == weights
                        || matches!(
                            (weights, g.weights),
                            (Some(Cm2Weights::Bf16), Cm2Weights::F16)
                                | (Some(Cm2Weights::Int4), Cm2Weights::Int8)
                        )
                })
                .map(move |g| (f, GemmKernel::Auto, None, Some(g.name)));
            base.chain(named)
        });
        for (f, gemm, coop, cm2_kernel) in runs {
            let opts = RecordOptions {
                gemm,
                coop,
                cm2_kernel,
                ..opts
            };
            let mut fig =
                match time_case(&gpu, &gpu.caps, f.trim(), shape, a.reps, &opts, act, a.fuse) {
                    Ok(fig) => fig,
                    // A shape sweep goes on past shapes this adapter cannot run.
                    Err(e) if coop.is_some() && gemm == GemmKernel::Coop => {
                        eprintln!("{f} {shape:?} {coop:?}: skipped: {e:#}");
                        continue;
                    }
                    // And past kernels named that this adapter cannot run.
                    Err(e) if cm2_kernel.is_some() => {
                        eprintln!("{f} {shape:?} {}: skipped: {e:#}", cm2_kernel.unwrap_or(""));
                        continue;
                    }
                    Err(e) => return Err(e),
                };
            // `both`: the second run is only news where it took the
            // cooperative matrices.
            if a.gemm == GemmArg::Both && gemm == GemmKernel::Auto && !fig.coop {
                continue;
            }
            fig.of_copy = copy.map(|c| fig.weight_gb_per_s / c);
            if !json {
                println!(
                    "{:<6} {:>6} {:>6} {:>6}  {:>10.4} {:>11.1} {:>7} {:>8.2} {:>4}  {}",
                    fig.format,
                    fig.m,
                    fig.n,
                    fig.k,
                    fig.ms,
                    fig.weight_gb_per_s,
                    fig.of_copy.map_or("-".into(), |r| format!("{r:.3}")),
                    fig.tflops,
                    fig.dispatches,
                    fig.kernel
                );
            }
            figures.push(fig);
        }
    }
    if json {
        print_json(&figures)?;
    }
    Ok(ExitCode::SUCCESS)
}
