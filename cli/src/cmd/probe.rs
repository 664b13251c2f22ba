//! `dynvram probe`: every adapter, what it offers, and which kernel path each
//! weight format gets there.

use std::process::ExitCode;

use dynvram_quant::{Format, KernelPath, LinearDtype, LinearDtypeOverride, kernel_path};
use dynvram_runtime::ActDtype;
use dynvram_runtime::device::{
    AdapterSummary, Cm2Bf16, Cm2Caps, Cm2Int4, Cm2Split, Cm2Stack, SpirvGemm, enumerate_adapters,
};
use dynvram_runtime::ops::attention::{FlashGrid, default_flash_kernel, preferred_cm2_flash};
use dynvram_runtime::ops::linear::{
    Cm2Kernel, CoopGemmKernel, CoopShape, GROUPED_MIN_COLUMN_TILES, cm2_gemm, cm2_grouped,
    cm2_int_gemm, cm2_small_grid, cm2_split_gemm, cm2_stack_gemm, coop_unusable, double_unusable,
};
use dynvram_shaders::spirv::CM2_FLASH_LARGE_WAVES;
use serde::Serialize;

use crate::output::{print_json, size};

/// Arguments of `dynvram probe`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only adapters of these backends (vulkan, gl, metal, dx12). Default: `WGPU_BACKEND` or all.
    #[arg(long)]
    backend: Option<String>,
    /// Force the activation arithmetic of int4 layers, as `run --linear-dtype` would.
    #[arg(long, value_enum, default_value = "auto")]
    linear_dtype: crate::cmd::run::LinearDtypeArg,
}

#[derive(Debug, Serialize)]
struct Probed {
    #[serde(flatten)]
    adapter: AdapterSummary,
    kernel_paths: Vec<(String, KernelPath)>,
}

/// The formats a probe reports, with their display names.
fn formats() -> Vec<(&'static str, Format)> {
    vec![
        (
            "convrot_w4a4",
            Format::ConvrotW4a4 {
                group: 256,
                linear_dtype: LinearDtype::Int4,
            },
        ),
        (
            "convrot_w4a4 (linear_dtype int8)",
            Format::ConvrotW4a4 {
                group: 256,
                linear_dtype: LinearDtype::Int8,
            },
        ),
        (
            "int8_tensorwise",
            Format::Int8Tensorwise {
                convrot_group: None,
            },
        ),
        ("float8_e4m3fn", Format::Float8E4m3fn),
        ("float8_e5m2", Format::Float8E5m2),
        ("f16", Format::F16),
        ("bf16", Format::Bf16),
        ("f32", Format::F32),
    ]
}

/// Runs the subcommand.
pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let over: LinearDtypeOverride = args.linear_dtype.into();
    let adapters = enumerate_adapters(&dynvram_runtime::AdapterChoice {
        backend: args.backend.clone(),
        options: crate::cmd::adapter_args::gpu_options(),
        ..Default::default()
    })?;
    let probed: Vec<Probed> = adapters
        .into_iter()
        .map(|adapter| {
            let kernel_paths = formats()
                .into_iter()
                .map(|(name, f)| (name.to_owned(), kernel_path::choose(f, &adapter.caps, over)))
                .collect();
            Probed {
                adapter,
                kernel_paths,
            }
        })
        .collect();
    if json {
        print_json(&probed)?;
        return Ok(ExitCode::SUCCESS);
    }
    if probed.is_empty() {
        println!(
            "no GPU adapters found (for a software Vulkan adapter: apt-get install mesa-vulkan-drivers)"
        );
        return Ok(ExitCode::from(1));
    }
    for p in &probed {
        let a = &p.adapter;
        let c = &a.caps;
        let yn = |b: bool| if b { "yes" } else { "no" };
        println!(
            "{} [{}] — {}, driver {}",
            a.name, a.backend, a.device_type, a.driver
        );
        println!(
            "  f16 {}  subgroups {} ({}..{})  timestamps {}  cooperative matrix {}",
            yn(c.shader_f16),
            yn(c.subgroups),
            c.subgroup_min_size,
            c.subgroup_max_size,
            yn(c.timestamps),
            match c.coop_matrix_edge {
                0 => "no".to_owned(),
                e => format!("{e}x{e}x{e} f16"),
            }
        );
        let coop_shape = CoopShape::for_adapter(c);
        println!(
            "  GEMM past the GEMVs: {}",
            match coop_unusable(c, coop_shape) {
                None => format!(
                    "cooperative matrices {e}x{e}x{e}, shape {coop_shape} (SG_MxSG_NxBKxWMxWN, as --coop-shapes takes it; integer layers within 2^24, exact; float layers with f16 activations)",
                    e = c.coop_matrix_edge
                ),
                Some(why) => format!("tiled (dot4 for integer layers): {why}"),
            }
        );
        if coop_unusable(c, coop_shape).is_none() {
            println!("  cooperative GEMM kernel: {}", coop_kernel_line(c));
        }
        println!(
            "  f16 weights decoded by: {}",
            if a.f16_unpack {
                "unpack2x16float (SHADER_F16_IN_F32; DYNVRAM_F16_UNPACK=off decodes in integer arithmetic)"
            } else {
                "integer arithmetic (no SHADER_F16_IN_F32 here, or DYNVRAM_F16_UNPACK=off)"
            }
        );
        // bf16 layers take the f16 kernels (converted a piece at a time)
        // unless DYNVRAM_CM2_BF16=staged asks for the bf16 ones; int4
        // layers the int8 kernels (widened) unless DYNVRAM_CM2_INT4=staged.
        let opts = crate::cmd::adapter_args::gpu_options();
        let via_f16 = opts.cm2_bf16.via_f16();
        for (name, format) in [("f16", Format::F16), ("bf16", Format::Bf16)] {
            let converted = (via_f16 && format == Format::Bf16).then_some(match opts.cm2_bf16 {
                Cm2Bf16::ViaF16 => "converted to f16 a piece at a time every pass; DYNVRAM_CM2_BF16=auto converts resident weights once as they load, =staged takes the bf16 kernels",
                _ => "resident weights converted to f16 once as they load, streamed ones a piece at a time; DYNVRAM_CM2_BF16=f16 converts every pass, =staged takes the bf16 kernels",
            });
            let read_as = if converted.is_some() {
                Format::F16
            } else {
                format
            };
            println!(
                "  float GEMM of {name} weights (f16 activations): {}",
                spirv_gemm_line(a, false, converted, |c| {
                    cm2_gemm(c, read_as, ActDtype::F16, None)
                })
            );
        }
        println!(
            "  f16 linears of one input past the GEMVs (q/k/v, gate/up): {}",
            stack_line(a, &opts)
        );
        let via_int8 = opts.cm2_int4 == Cm2Int4::ViaInt8;
        for (name, w4) in [("int4", true), ("int8", false)] {
            let widened = (via_int8 && w4).then_some(
                "widened to int8 a piece at a time; DYNVRAM_CM2_INT4=staged takes the int4 kernels",
            );
            println!(
                "  integer GEMM of {name} weights (f16 outputs): {}",
                spirv_gemm_line(a, true, widened, |c| {
                    cm2_int_gemm(c, w4 && widened.is_none(), ActDtype::F16, false, None)
                })
            );
        }
        println!("  flash attention (f16, head_dim 128): {}", flash_line(a));
        println!(
            "  max buffer {}  max storage binding {}  workgroup memory {}",
            size(c.max_buffer_size),
            size(c.max_storage_binding),
            size(u64::from(c.max_workgroup_storage))
        );
        match &a.vram {
            Some(v) => println!(
                "  VRAM {} (source: {}){}",
                size(v.capacity),
                v.source,
                v.usage
                    .map(|u| format!(", in use {}", size(u)))
                    .unwrap_or_default()
            ),
            None => println!(
                "  VRAM unknown on this backend: set --vram-budget (the ledger is the only guard)"
            ),
        }
        match &a.staging_memory {
            Some(m) => println!("  staging memory: {m}"),
            None => println!(
                "  staging memory: mapped wgpu buffers (placement unknown on this backend)"
            ),
        }
        println!(
            "  host-memory import (VK_EXT_external_memory_host): {}",
            if a.host_import {
                "yes: pins and --staging-memory host use host RAM"
            } else {
                "no: pins and staging use mapped buffers"
            }
        );
        match a.copy_queue_family {
            Some(0) => println!(
                "  copy queue: a second queue of wgpu's family (DYNVRAM_COPY_QUEUE=family0)"
            ),
            Some(f) => println!(
                "  copy queue: transfer-only family {f} (copy engines): streamed copies overlap kernels"
            ),
            None => {
                println!("  copy queue: none: streamed copies share wgpu's queue with the kernels")
            }
        }
        println!("  kernel paths:");
        for (name, plan) in &p.kernel_paths {
            println!("    {name:<34} {}: {}", plan.kernel, plan.reason);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether the GEMMs `pick` chooses for (of `integer` weights or float
/// ones) take a SPIR-V cooperative-matrix-2 kernel on adapter `a` (under
/// `DYNVRAM_SPIRV_GEMM` and `DYNVRAM_COOP_MATRIX`) or the WGSL ones, and
/// why.
fn spirv_gemm_line(
    a: &AdapterSummary,
    integer: bool,
    converted: Option<&str>,
    pick: impl FnOnce(Option<&Cm2Caps>) -> Result<Cm2Kernel, String>,
) -> String {
    let opts = crate::cmd::adapter_args::gpu_options();
    if opts.spirv_gemm == SpirvGemm::Off {
        return "wgsl: SPIR-V GEMMs off (DYNVRAM_SPIRV_GEMM=off)".into();
    }
    if !opts.spirv_gemm.allows(integer) {
        return "wgsl: integer SPIR-V GEMMs off (DYNVRAM_SPIRV_GEMM=float)".into();
    }
    if !opts.coop_matrix || a.caps.coop_matrix_edge == 0 {
        return "wgsl: no KHR cooperative matrices on this device".into();
    }
    let Some(cm2) = &a.cm2 else {
        return "wgsl coop: VK_NV_cooperative_matrix2 missing".into();
    };
    match pick(Some(cm2)) {
        Ok(k) => {
            let split = (opts.cm2_split != Cm2Split::Off && cm2.sm_count > 0)
                .then(|| cm2_split_gemm(cm2, k.gemm))
                .flatten();
            let small = cm2_small_grid(cm2, k.gemm.weights, converted.is_some())
                .filter(|s| s.name != k.gemm.name);
            let sms = cm2.sm_count;
            let small_grids = match (split, small) {
                (Some(s), small) => format!(
                    "; where those tiles fill at most half the {sms} multiprocessors, K split over workgroups ({}, K of {} or more; else, and with DYNVRAM_CM2_SPLIT=off, {}); also where their last wave is at most half full (not with DYNVRAM_CM2_SPLIT=auto), its row tiles split K in the places the whole tiles leave",
                    s.name,
                    dynvram_runtime::device::SPLIT_MIN_K,
                    small.map_or("unsplit".into(), |s| format!(
                        "{} ({}x{})",
                        s.name, s.tile_m, s.tile_n
                    )),
                ),
                (None, Some(s)) => format!(
                    "; {} ({}x{}) where those tiles fill at most half the {sms} multiprocessors",
                    s.name, s.tile_m, s.tile_n
                ),
                (None, None) => String::new(),
            };
            let grouped = cm2_grouped(cm2, k.gemm).map_or(String::new(), |g| {
                format!(
                    "; {} (tiles in groups of {} row tiles) on grids of {} column tiles or more",
                    g.name, g.group_m, GROUPED_MIN_COLUMN_TILES
                )
            });
            format!(
                "spirv-cm2 {} ({}x{} tiles): VK_NV_cooperative_matrix2 present with every feature{}{grouped}{small_grids}",
                k.gemm.name,
                k.gemm.tile_m,
                k.gemm.tile_n,
                converted.map_or(String::new(), |how| format!(" ({how})")),
            )
        }
        Err(why) => format!("wgsl coop: {why}"),
    }
}

/// Whether f16 linears of one input share one SPIR-V GEMM launch past the
/// GEMVs on adapter `a` under `opts`, and why not.
fn stack_line(a: &AdapterSummary, opts: &dynvram_runtime::device::GpuOptions) -> String {
    let kernel = cm2_stack_gemm(a.cm2.as_ref(), opts.cm2_stack == Cm2Stack::Grouped);
    if !opts.spirv_gemm.allows(false) {
        "one launch each (SPIR-V GEMMs off)".into()
    } else if opts.cm2_stack == Cm2Stack::Off {
        "one launch each (DYNVRAM_CM2_STACK=off)".into()
    } else if !opts.coop_matrix || a.caps.coop_matrix_edge == 0 || a.cm2.is_none() {
        "one launch each (no VK_NV_cooperative_matrix2)".into()
    } else if let Some(k) = kernel {
        format!(
            "one launch, {} ({}x{} tiles), {}",
            k.gemm.name,
            k.gemm.tile_m,
            k.gemm.tile_n,
            if opts.cm2_stack == Cm2Stack::Always {
                "wherever it can (DYNVRAM_CM2_STACK=always)"
            } else if opts.cm2_stack == Cm2Stack::Grouped {
                "where a layer alone fills at most half the multiprocessors, or the stack fills their waves better, its tiles in groups of row tiles (DYNVRAM_CM2_STACK=grouped)"
            } else {
                "where a layer alone fills at most half the multiprocessors, or the stack fills their waves better (DYNVRAM_CM2_STACK=off: one launch each)"
            }
        )
    } else {
        "one launch each (no stacked SPIR-V GEMM fits this device)".into()
    }
}

/// Which kernel flash attention takes on adapter `a` by default at head
/// dim 128 with f16 activations (FLUX.1's and Llama's), and why.
fn flash_line(a: &AdapterSummary) -> String {
    let opts = crate::cmd::adapter_args::gpu_options();
    let wgsl = match default_flash_kernel(&a.caps, ActDtype::F16, 128) {
        Some(k) => format!("wgsl {k}"),
        None => "scalar kernels (no flash kernel fits)".into(),
    };
    if opts.spirv_gemm == SpirvGemm::Off {
        return format!("{wgsl}: SPIR-V kernels off (DYNVRAM_SPIRV_GEMM=off)");
    }
    let Some(cm2) = &a.cm2 else {
        return format!("{wgsl}: VK_NV_cooperative_matrix2 missing");
    };
    match preferred_cm2_flash(Some(cm2), ActDtype::F16, 128, None) {
        Some(k) => {
            // What a grid of many waves takes.
            let many = FlashGrid {
                heads: u64::from(u32::MAX),
                rows: 4608,
            };
            let large = preferred_cm2_flash(Some(cm2), ActDtype::F16, 128, Some(many))
                .filter(|l| *l != k)
                .map_or(String::new(), |l| {
                    format!(
                        "; {l} where its workgroups fill {CM2_FLASH_LARGE_WAVES} waves of the {} multiprocessors",
                        cm2.sm_count
                    )
                });
            format!("spirv-cm2 {k}{large}: VK_NV_cooperative_matrix2 present with every feature")
        }
        None => {
            let missing = cm2.flash_missing_features();
            if missing.is_empty() {
                format!("{wgsl}: the driver lists none of the SPIR-V flash kernels' matrix shapes")
            } else {
                format!(
                    "{wgsl}: VK_NV_cooperative_matrix2 lacks {}",
                    missing.join(", ")
                )
            }
        }
    }
}

/// Which cooperative GEMM kernel the layers take on adapter `c` under
/// `DYNVRAM_COOP_GEMM`, and why.
fn coop_kernel_line(c: &dynvram_quant::AdapterCaps) -> String {
    match crate::cmd::adapter_args::gpu_options().coop_gemm {
        CoopGemmKernel::Single => "single-stage (linear_gemm_coop.wgsl, the default; DYNVRAM_COOP_GEMM=double for the double-buffered one)".into(),
        CoopGemmKernel::Double => {
            let shape = CoopShape::for_double(c);
            // Depth 1024 fits every slot: what is left is the adapter's.
            match double_unusable(c, shape, 1024, None, true) {
                None => format!(
                    "double-buffered (linear_gemm_coop_db.wgsl, DYNVRAM_COOP_GEMM=double), shape {shape}, for layers with K a multiple of its 16-byte slots (32 for int4 weights, 16 for int8, 8 for f16/bf16; fp8 and other K: single-stage)"
                ),
                Some(why) => format!("single-stage: the double-buffered kernel was asked for but {why}"),
            }
        }
    }
}
