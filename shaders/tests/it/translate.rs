//! Every module the runtime can create (`variants.rs`) through every
//! backend's translator, as wgpu 30 hands it over: validated with the
//! naga capabilities of the features the backend's adapters offer (as
//! wgpu-naga-bridge 30's `features_to_naga_capabilities` maps them: f16,
//! subgroups, cooperative matrices, immediates), its overrides processed for each
//! entry point, then written by naga as SPIR-V, MSL, HLSL and GLSL with the
//! options wgpu-hal 30 builds (`vulkan/adapter.rs`, `metal/device.rs`,
//! `dx12/device.rs`, `gles/device.rs`) and the pipeline layout wgpu derives
//! (group 0's storage buffers, writable ones with dynamic offsets as
//! gpu's `dynamic_layout` makes them, the params as immediates).
//!
//! A module either translates for a backend or needs something
//! [`dynvram_shaders::backends::REFUSALS`] lists for it, with the reason.

use dynvram_shaders::backends::{self, Backend, Need};
use naga::back::{glsl, hlsl, msl, spv};
use naga::valid::{Capabilities as Caps, ModuleInfo, ValidationFlags, Validator};
use naga::{AddressSpace, Module, ResourceBinding, ShaderStage, StorageAccess};

use crate::variants::{self, Variant};

/// What the runtime asks of any adapter, beyond which everything is a
/// [`Need`]: params as immediates.
/// `unpack2x16float` (`f16_words_unpack.wgsl`) is only put in where the
/// adapter grants it (`dynvram_shaders::with_f16_unpack`), which every
/// backend does but Mesa's Vulkan without f16; `validate.rs` keeps it out of
/// every other module.
const BASE: Caps = Caps::IMMEDIATES.union(Caps::SHADER_FLOAT16_IN_FLOAT32);

fn caps_of(need: Need) -> Caps {
    match need {
        Need::F16 => Caps::SHADER_FLOAT16,
        // wgpu sets SUBGROUP_BARRIER with SUBGROUP on every backend that
        // has subgroups (Vulkan, Metal; DX12 has no barrier feature but
        // our modules use none).
        Need::Subgroups => Caps::SUBGROUP,
        Need::CoopMatrix8 | Need::CoopMatrix16 => Caps::COOPERATIVE_MATRIX,
    }
}

/// One translation target: a backend at one language level.
#[derive(Debug, Clone, Copy)]
enum Writer {
    /// SPIR-V 1.6 (Vulkan 1.3 devices: lavapipe, NVIDIA).
    Spv,
    /// MSL 2.4 (macOS 12, the oldest with simdgroup matrices and every
    /// other feature the kernels ask for).
    Msl,
    /// HLSL at a shader model (wgpu exposes DX12 adapters from 6.0; f16
    /// from 6.2; `dot4add_i8packed` from 6.4, a polyfill below).
    Hlsl(hlsl::ShaderModel),
    /// GLSL at a version (desktop 4.50: wgpu caps llvmpipe's and every
    /// newer one there; GLES 3.10: the least that has compute).
    Glsl(glsl::Version),
}

struct Target {
    backend: Backend,
    writer: Writer,
    /// What this language level lacks besides the backend's
    /// [`backends::REFUSALS`]: f16 below HLSL shader model 6.2 (wgpu-hal's
    /// DX12 adapter offers `SHADER_F16` from there; the runtime refuses f16
    /// activations without it).
    lacks: &'static [Need],
}

const TARGETS: &[Target] = &[
    Target {
        backend: Backend::Vulkan,
        writer: Writer::Spv,
        lacks: &[],
    },
    Target {
        backend: Backend::Metal,
        writer: Writer::Msl,
        lacks: &[],
    },
    Target {
        backend: Backend::Dx12,
        writer: Writer::Hlsl(hlsl::ShaderModel::V6_0),
        lacks: &[Need::F16],
    },
    Target {
        backend: Backend::Dx12,
        writer: Writer::Hlsl(hlsl::ShaderModel::V6_6),
        lacks: &[],
    },
    Target {
        backend: Backend::Gl,
        writer: Writer::Glsl(glsl::Version::Desktop(450)),
        lacks: &[],
    },
    Target {
        backend: Backend::Gl,
        writer: Writer::Glsl(glsl::Version::Embedded {
            version: 310,
            is_webgl: false,
        }),
        lacks: &[],
    },
];

fn validate(module: &Module, caps: Caps) -> Result<ModuleInfo, String> {
    Validator::new(ValidationFlags::all(), caps)
        .validate(module)
        .map_err(|e| format!("{e:?}"))
}

/// What `module` needs: each capability without which it does not
/// validate, cooperative matrices by their size.
fn needs(module: &Module) -> Vec<Need> {
    let all = Need::ALL.iter().fold(BASE, |c, &n| c | caps_of(n));
    let lacks = |caps: Caps| validate(module, all - caps).is_err();
    let mut out = Vec::new();
    if lacks(Caps::SHADER_FLOAT16) {
        out.push(Need::F16);
    }
    if lacks(Caps::SUBGROUP) {
        out.push(Need::Subgroups);
    }
    if lacks(Caps::COOPERATIVE_MATRIX) {
        for (_, ty) in module.types.iter() {
            if let naga::TypeInner::CooperativeMatrix { rows, .. } = ty.inner {
                let need = match rows {
                    naga::CooperativeSize::Eight => Need::CoopMatrix8,
                    naga::CooperativeSize::Sixteen => Need::CoopMatrix16,
                };
                if !out.contains(&need) {
                    out.push(need);
                }
            }
        }
    }
    out
}

/// A storage buffer of the entry point's derived layout.
struct Binding {
    binding: ResourceBinding,
    writable: bool,
}

/// The bindings and immediates the entry point uses, in binding order, as
/// wgpu derives its layout.
fn layout(module: &Module, info: &ModuleInfo, entry: usize) -> (Vec<Binding>, bool) {
    let uses = info.get_entry_point(entry);
    let mut bindings = Vec::new();
    let mut immediates = false;
    for (handle, var) in module.global_variables.iter() {
        if uses[handle].is_empty() {
            continue;
        }
        match (var.space, &var.binding) {
            (AddressSpace::Storage { access }, Some(binding)) => bindings.push(Binding {
                binding: *binding,
                writable: access.contains(StorageAccess::STORE),
            }),
            (AddressSpace::Immediate, _) => immediates = true,
            _ => {}
        }
    }
    bindings.sort_by_key(|b| (b.binding.group, b.binding.binding));
    (bindings, immediates)
}

/// The entry point `name` of `module` (overrides at their defaults,
/// compacted to that entry point, as wgpu does at pipeline creation)
/// written for `writer`.
fn write(writer: Writer, module: &Module, info: &ModuleInfo, name: &str) -> Result<(), String> {
    let (module, info) = naga::back::pipeline_constants::process_overrides(
        module,
        info,
        Some((ShaderStage::Compute, name)),
        &naga::back::PipelineConstants::default(),
    )
    .map_err(|e| format!("overrides: {e:?}"))?;
    let entry = module
        .entry_points
        .iter()
        .position(|e| e.name == name)
        .ok_or("entry point lost")?;
    let (bindings, immediates) = layout(&module, &info, entry);
    // The runtime compiles without loop counters, with bounds checks
    // (gpu's `create_pipeline_in`, `ShaderChecks::NoLoopBound`), and
    // without zeroing workgroup memory.
    let restrict = naga::proc::BoundsCheckPolicies {
        index: naga::proc::BoundsCheckPolicy::Restrict,
        buffer: naga::proc::BoundsCheckPolicy::Restrict,
        image_load: naga::proc::BoundsCheckPolicy::Restrict,
        binding_array: naga::proc::BoundsCheckPolicy::Unchecked,
    };
    match writer {
        Writer::Spv => {
            // vulkan/device.rs: each binding of the layout, as declared.
            let binding_map = bindings
                .iter()
                .map(|b| {
                    let info = spv::BindingInfo {
                        descriptor_set: b.binding.group,
                        binding: b.binding.binding,
                        binding_array_size: None,
                    };
                    (b.binding, info)
                })
                .collect();
            let options = spv::Options {
                binding_map,
                lang_version: (1, 6),
                flags: spv::WriterFlags::FORCE_POINT_SIZE,
                fake_missing_bindings: false,
                bounds_check_policies: restrict,
                zero_initialize_workgroup_memory: spv::ZeroInitializeWorkgroupMemoryMode::None,
                force_loop_bounding: false,
                ..spv::Options::default()
            };
            let pipeline = spv::PipelineOptions {
                shader_stage: ShaderStage::Compute,
                entry_point: name.to_owned(),
            };
            spv::write_vec(&module, &info, &options, Some(&pipeline))
                .map(drop)
                .map_err(|e| format!("{e:?}"))
        }
        Writer::Msl => {
            // metal/device.rs: the immediates buffer first, then each
            // binding in order, then the sizes buffer runtime arrays need.
            let mut slot = u8::from(immediates);
            let mut resources = msl::BindingMap::default();
            for b in &bindings {
                let target = msl::BindTarget {
                    buffer: Some(slot),
                    mutable: b.writable,
                    ..msl::BindTarget::default()
                };
                resources.insert(b.binding, target);
                slot += 1;
            }
            let resources = msl::EntryPointResources {
                resources,
                immediates_buffer: immediates.then_some(0),
                sizes_buffer: (!bindings.is_empty()).then_some(slot),
            };
            let options = msl::Options {
                lang_version: (2, 4),
                per_entry_point_map: [(name.to_owned(), resources)].into(),
                fake_missing_bindings: false,
                bounds_check_policies: restrict,
                zero_initialize_workgroup_memory: false,
                force_loop_bounding: false,
                ..msl::Options::default()
            };
            let pipeline = msl::PipelineOptions {
                entry_point: Some((ShaderStage::Compute, name.to_owned())),
                ..msl::PipelineOptions::default()
            };
            msl::write_string(&module, &info, &options, &pipeline)
                .map(drop)
                .map_err(|e| format!("{e:?}"))
        }
        Writer::Hlsl(shader_model) => {
            // dx12/device.rs: immediates as root constants in space 0,
            // the other registers from space 1; read-only storage buffers
            // are SRVs, writable ones UAVs (with dynamic offsets: root
            // constants after them); the special constants
            // (`num_workgroups`) last.
            let mut cbv = hlsl::BindTarget::default();
            let immediates_target = immediates.then(|| {
                let t = cbv;
                cbv.register += 1;
                cbv.space += 1;
                t
            });
            let (mut srv, mut uav) = (cbv, cbv);
            srv.register = 0;
            uav.register = 0;
            let mut binding_map = hlsl::BindingMap::default();
            let mut dynamic = 0;
            for b in &bindings {
                let target = if b.writable { &mut uav } else { &mut srv };
                let dynamic_index = (b.writable && dynamic < 8).then(|| {
                    dynamic += 1;
                    dynamic - 1
                });
                binding_map.insert(
                    b.binding,
                    hlsl::BindTarget {
                        dynamic_storage_buffer_offsets_index: dynamic_index,
                        ..*target
                    },
                );
                target.register += 1;
            }
            let mut offsets = std::collections::BTreeMap::new();
            if dynamic > 0 {
                offsets.insert(
                    0,
                    hlsl::OffsetsBindTarget {
                        space: cbv.space,
                        register: cbv.register,
                        size: dynamic,
                    },
                );
                cbv.register += 1;
            }
            let options = hlsl::Options {
                shader_model,
                binding_map,
                fake_missing_bindings: false,
                special_constants_binding: Some(cbv),
                immediates_target,
                dynamic_storage_buffer_offsets_targets: offsets,
                zero_initialize_workgroup_memory: false,
                restrict_indexing: true,
                force_loop_bounding: false,
                ..hlsl::Options::default()
            };
            let pipeline = hlsl::PipelineOptions {
                entry_point: Some((ShaderStage::Compute, name.to_owned())),
            };
            let mut out = String::new();
            hlsl::Writer::new(&mut out, &options, &pipeline)
                .write(&module, &info, None)
                .map(drop)
                .map_err(|e| format!("{e:?}"))
        }
        Writer::Glsl(version) => {
            // gles/device.rs: storage buffers numbered in order.
            let binding_map = bindings
                .iter()
                .enumerate()
                .map(|(i, b)| (b.binding, i as u8))
                .collect();
            let options = glsl::Options {
                version,
                writer_flags: glsl::WriterFlags::ADJUST_COORDINATE_SPACE
                    | glsl::WriterFlags::FORCE_POINT_SIZE,
                binding_map,
                zero_initialize_workgroup_memory: false,
            };
            let pipeline = glsl::PipelineOptions {
                shader_stage: ShaderStage::Compute,
                entry_point: name.to_owned(),
                multiview: None,
            };
            let mut out = String::new();
            glsl::Writer::new(&mut out, &module, &info, &options, &pipeline, restrict)
                .and_then(|mut w| w.write())
                .map(drop)
                .map_err(|e| format!("{e:?}"))
        }
    }
}

/// How many modules each target translated, how many each refusal with
/// `writer_fails` was seen to fail, and the needs seen.
#[derive(Debug, Default)]
struct Tally {
    translated: Vec<usize>,
    refused_by_writer: Vec<usize>,
    needs: Vec<Need>,
}

/// Translates `v` for every target, counting into `tally`; returns what
/// failed.
fn translate(v: &Variant, tally: &mut Tally) -> Vec<String> {
    let module = match naga::front::wgsl::parse_str(&v.source) {
        Ok(m) => m,
        Err(e) => {
            return vec![format!(
                "{}: parse error\n{}",
                v.name,
                e.emit_to_string(&v.source)
            )];
        }
    };
    let needs = needs(&module);
    tally.needs.extend(&needs);
    let mut failures = Vec::new();
    for (t, target) in TARGETS.iter().enumerate() {
        let label = format!("{} ({:?})", target.backend, target.writer);
        let refused: Vec<_> = needs
            .iter()
            .filter_map(|&n| backends::find(target.backend, n))
            .collect();
        if needs.iter().any(|n| target.lacks.contains(n)) {
            continue;
        }
        let caps = needs.iter().fold(BASE, |c, &n| c | caps_of(n));
        if !refused.is_empty() {
            // One refusal that names naga's writer: count the modules it
            // really fails on (an entry point may not use the feature).
            if let [r] = refused[..]
                && r.writer_fails
                && let Ok(info) = validate(&module, caps)
                && module
                    .entry_points
                    .iter()
                    .any(|ep| write(target.writer, &module, &info, &ep.name).is_err())
            {
                let row = backends::REFUSALS.iter().position(|x| x == r);
                tally.refused_by_writer[row.expect("a row")] += 1;
            }
            continue;
        }
        let info = match validate(&module, caps) {
            Ok(info) => info,
            Err(e) => {
                failures.push(format!("{} on {label}: validation: {e}", v.name));
                continue;
            }
        };
        for ep in &module.entry_points {
            if let Err(e) = write(target.writer, &module, &info, &ep.name) {
                failures.push(format!("{} `{}` on {label}: {e}", v.name, ep.name));
            }
        }
        tally.translated[t] += 1;
    }
    failures
}

/// Translates every module of `modules`; fails on any failure, on a target
/// that translated nothing, and on a refusal naming naga's writer that no
/// module showed failing.
fn translate_all(modules: &[Variant]) {
    let mut tally = Tally {
        translated: vec![0; TARGETS.len()],
        refused_by_writer: vec![0; backends::REFUSALS.len()],
        needs: Vec::new(),
    };
    let mut failures: Vec<String> = modules
        .iter()
        .flat_map(|v| translate(v, &mut tally))
        .collect();
    for (t, target) in TARGETS.iter().enumerate() {
        if tally.translated[t] == 0 {
            failures.push(format!(
                "{} ({:?}) translated nothing",
                target.backend, target.writer
            ));
        }
    }
    for (r, seen) in backends::REFUSALS.iter().zip(&tally.refused_by_writer) {
        if r.writer_fails && *seen == 0 && tally.needs.contains(&r.need) {
            failures.push(format!(
                "no module needing {} failed {}'s writer: is the refusal stale? {}",
                r.need, r.backend, r.reason
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Each file of `wgsl/`, in both activation types.
#[test]
fn every_file_translates_for_every_backend() {
    translate_all(&variants::files());
}

/// The generated modules: cooperative GEMM, decode attention, flash and
/// two-walk attention shapes. Flash tunings at head dim 128 only by
/// default (a head dim changes constants, a tuning the code);
/// `DYNVRAM_THOROUGH=1` translates every head dim too.
#[test]
fn every_generated_module_translates_for_every_backend() {
    let thorough = std::env::var("DYNVRAM_THOROUGH").is_ok_and(|v| v == "1");
    let mut modules = variants::coop_gemms();
    modules.extend(variants::decode_attention());
    modules.extend(variants::two_walks());
    modules.extend(
        variants::flash_attentions()
            .into_iter()
            .filter(|f| thorough || f.hd == 128)
            .map(|f| f.variant),
    );
    translate_all(&modules);
}

/// Every row of the refusal table is about a need some module has (no
/// stale rows hiding nothing): the files in both activation types use
/// every need the generated modules do.
#[test]
fn every_refusal_is_needed_by_some_module() {
    let mut used = Vec::new();
    for v in variants::files() {
        let module = naga::front::wgsl::parse_str(&v.source).expect("parses");
        used.extend(needs(&module));
    }
    for r in dynvram_shaders::backends::REFUSALS {
        assert!(
            used.contains(&r.need),
            "{} refuses {}, which no module needs",
            r.backend,
            r.need
        );
    }
}
