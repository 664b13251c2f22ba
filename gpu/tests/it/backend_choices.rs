//! The kernel choosers, fed each backend's capabilities as wgpu-hal 30
//! reports them (`metal/adapter.rs`, `dx12/adapter.rs`, `gles/adapter.rs`,
//! `vulkan/adapter.rs`), pick only modules that backend's translator takes
//! (`dynvram_shaders::backends`, which `shaders/tests/it/translate.rs`
//! keeps true). No GPU: plain data through `caps_of_report`.

use dynvram_gpu::ActDtype;
use dynvram_gpu::device::{AdapterReport, caps_of_report};
use dynvram_gpu::ops::attention::{default_flash_kernel, uses_subgroups};
use dynvram_gpu::ops::linear::{CoopShape, coop_unusable};
use dynvram_quant::{AdapterCaps, Format, KernelChoice, LinearDtype, LinearDtypeOverride, choose};
use dynvram_shaders::backends::{Backend, Need, refusal};
use wgpu::{CooperativeMatrixProperties, CooperativeScalarType, Features, Limits};

fn config(
    edge: u32,
    ab: CooperativeScalarType,
    cr: CooperativeScalarType,
) -> CooperativeMatrixProperties {
    CooperativeMatrixProperties {
        m_size: edge,
        n_size: edge,
        k_size: edge,
        ab_type: ab,
        cr_type: cr,
        saturating_accumulation: false,
    }
}

/// One backend's adapter as wgpu-hal describes its best case.
struct Described {
    backend: Backend,
    wgpu: wgpu::Backend,
    features: Features,
    subgroups: (u32, u32),
    coop: Vec<CooperativeMatrixProperties>,
    limits: Limits,
}

fn described() -> Vec<Described> {
    use CooperativeScalarType::{F16, F32};
    let limits = Limits {
        max_compute_workgroup_storage_size: 32 << 10,
        max_compute_invocations_per_workgroup: 1024,
        max_storage_buffer_binding_size: 1 << 30,
        max_buffer_size: 1 << 32,
        ..Limits::default()
    };
    vec![
        // An NVIDIA GPU on Vulkan: 16x16 f16 matrices with f32 sums.
        Described {
            backend: Backend::Vulkan,
            wgpu: wgpu::Backend::Vulkan,
            features: Features::SHADER_F16
                | Features::SUBGROUP
                | Features::SUBGROUP_BARRIER
                | Features::IMMEDIATES
                | Features::TIMESTAMP_QUERY
                | Features::EXPERIMENTAL_COOPERATIVE_MATRIX,
            subgroups: (32, 32),
            coop: vec![config(16, F16, F32), config(16, F16, F16)],
            limits: Limits {
                max_compute_workgroup_storage_size: 48 << 10,
                ..limits.clone()
            },
        },
        // Apple7+ on macOS 14: SHADER_F16 always, SUBGROUP with simd-scoped
        // operations, simdgroup matrices (8x8 only) from MSL 2.3;
        // subgroup sizes 4..64.
        Described {
            backend: Backend::Metal,
            wgpu: wgpu::Backend::Metal,
            features: Features::SHADER_F16
                | Features::SUBGROUP
                | Features::SUBGROUP_BARRIER
                | Features::IMMEDIATES
                | Features::TIMESTAMP_QUERY
                | Features::EXPERIMENTAL_COOPERATIVE_MATRIX,
            subgroups: (4, 64),
            coop: vec![
                config(8, F32, F32),
                config(8, F16, F16),
                config(8, F16, F32),
            ],
            limits: limits.clone(),
        },
        // Shader model 6.2+ with native 16-bit ops: SHADER_F16, wave ops as
        // SUBGROUP; no cooperative matrices.
        Described {
            backend: Backend::Dx12,
            wgpu: wgpu::Backend::Dx12,
            features: Features::SHADER_F16
                | Features::SUBGROUP
                | Features::IMMEDIATES
                | Features::TIMESTAMP_QUERY,
            subgroups: (32, 32),
            coop: Vec::new(),
            limits: limits.clone(),
        },
        // GL / GLES: immediates (as uniforms), nothing else we use.
        Described {
            backend: Backend::Gl,
            wgpu: wgpu::Backend::Gl,
            features: Features::IMMEDIATES,
            subgroups: (0, 0),
            coop: Vec::new(),
            limits,
        },
    ]
}

fn caps(d: &Described) -> AdapterCaps {
    caps_of_report(&AdapterReport {
        name: "described",
        backend: d.wgpu,
        subgroup_min_size: d.subgroups.0,
        subgroup_max_size: d.subgroups.1,
        features: d.features,
        limits: &d.limits,
        coop_configs: &d.coop,
    })
}

fn coop_need(edge: u32) -> Need {
    match edge {
        16 => Need::CoopMatrix16,
        _ => Need::CoopMatrix8,
    }
}

/// Every kernel family the choosers pick on `caps`, as the needs of its
/// modules (with the decision, for messages).
fn chosen_needs(caps: &AdapterCaps) -> Vec<(String, Vec<Need>)> {
    let mut out = Vec::new();
    // f16 activations: every module's f16 variant, built only with
    // SHADER_F16 (`GpuError::NoShaderF16` otherwise).
    if caps.shader_f16 {
        out.push(("f16 activations".into(), vec![Need::F16]));
    }
    // The row GEMVs' and the fused norm + quantization's subgroup variants
    // take `caps.subgroups` itself (their choosers need a device).
    if caps.subgroups {
        out.push((
            "subgroup GEMV rows, norm + quant".into(),
            vec![Need::Subgroups],
        ));
    }
    // Linear kernels for every format and override; the fast ones are the
    // subgroup modules.
    let formats = [
        Format::ConvrotW4a4 {
            group: 256,
            linear_dtype: LinearDtype::Int4,
        },
        Format::ConvrotW4a4 {
            group: 256,
            linear_dtype: LinearDtype::Int8,
        },
        Format::Int8Tensorwise {
            convrot_group: None,
        },
        Format::Float8E4m3fn,
        Format::Bf16,
    ];
    for format in formats {
        for ov in [
            LinearDtypeOverride::Auto,
            LinearDtypeOverride::Int4,
            LinearDtypeOverride::Int8,
        ] {
            let path = choose(format, caps, ov);
            if let KernelChoice::Integer { fast: true, .. } = path.kernel {
                out.push((
                    format!("{format:?} {ov:?}: {}", path.kernel),
                    vec![Need::Subgroups],
                ));
            }
        }
    }
    // Cooperative GEMMs.
    let shape = CoopShape::for_adapter(caps);
    if coop_unusable(caps, shape).is_none() {
        out.push((
            format!("cooperative GEMM {shape:?}"),
            vec![coop_need(caps.coop_matrix_edge), Need::F16, Need::Subgroups],
        ));
    }
    for hd in [64, 80, 128, 256] {
        // Decode attention's subgroup sums.
        if uses_subgroups(caps, hd) {
            out.push((
                format!("decode attention, head dim {hd}"),
                vec![Need::Subgroups],
            ));
        }
        // Flash attention (one-walk or two-walk): cooperative matrices.
        if let Some(kernel) = default_flash_kernel(caps, ActDtype::F16, hd) {
            out.push((
                format!("flash attention {kernel}, head dim {hd}"),
                vec![coop_need(caps.coop_matrix_edge), Need::F16, Need::Subgroups],
            ));
        }
    }
    out
}

/// On each backend, nothing chosen needs what its translator refuses.
#[test]
fn choosers_pick_only_translatable_modules_on_every_backend() {
    let mut failures = Vec::new();
    for d in described() {
        let caps = caps(&d);
        for (what, needs) in chosen_needs(&caps) {
            for need in needs {
                if let Some(why) = refusal(d.backend, need) {
                    failures.push(format!("{}: {what} needs {need}: {why}", d.backend));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The choices differ where the backends do: Vulkan takes 16x16
/// matrices, Metal's 8x8 ones are not offered (the kernels have not run
/// there), DX12 takes the subgroup kernels without matrices, and GL the
/// portable ones.
#[test]
fn backends_get_the_kernels_their_capabilities_allow() {
    let by = |b: Backend| {
        let d = described()
            .into_iter()
            .find(|d| d.backend == b)
            .expect("described");
        let caps = caps(&d);
        let needs: Vec<Need> = chosen_needs(&caps)
            .into_iter()
            .flat_map(|(_, n)| n)
            .collect();
        (caps, needs)
    };
    let (vk, vk_needs) = by(Backend::Vulkan);
    assert_eq!(vk.coop_matrix_edge, 16);
    assert!(vk_needs.contains(&Need::CoopMatrix16), "{vk_needs:?}");
    let (metal, metal_needs) = by(Backend::Metal);
    assert_eq!(
        metal.coop_matrix_edge, 0,
        "Metal lists 8x8 f16/f32 matrices"
    );
    assert!(metal_needs.contains(&Need::Subgroups) && metal_needs.contains(&Need::F16));
    let (dx12, dx12_needs) = by(Backend::Dx12);
    assert_eq!(dx12.coop_matrix_edge, 0);
    assert!(dx12_needs.contains(&Need::Subgroups) && dx12_needs.contains(&Need::F16));
    let (gl, gl_needs) = by(Backend::Gl);
    assert!(!gl.subgroups && !gl.shader_f16);
    assert!(gl_needs.is_empty(), "{gl_needs:?}");
    let portable = choose(
        Format::ConvrotW4a4 {
            group: 256,
            linear_dtype: LinearDtype::Int4,
        },
        &gl,
        LinearDtypeOverride::Auto,
    );
    assert!(
        matches!(portable.kernel, KernelChoice::Integer { fast: false, .. }),
        "{}",
        portable.reason
    );
}
