//! Every WGSL file parses and validates with naga, with the capabilities the
//! runtime really asks for (f16, subgroups and cooperative matrices where the
//! adapter has them), and
//! every file in `wgsl/` is registered in the crate.

use naga::valid::{Capabilities, ValidationFlags, Validator};

fn validate(name: &str, source: &str) -> Result<(), String> {
    let module = naga::front::wgsl::parse_str(source)
        .map_err(|e| format!("{name}: parse error\n{}", e.emit_to_string(source)))?;
    let caps = Capabilities::SHADER_FLOAT16
        | Capabilities::SUBGROUP
        | Capabilities::COOPERATIVE_MATRIX
        | Capabilities::IMMEDIATES;
    Validator::new(ValidationFlags::all(), caps)
        .validate(&module)
        .map_err(|e| format!("{name}: validation error\n{}", e.emit_to_string(source)))?;
    Ok(())
}

#[test]
fn every_shader_validates() {
    let failures: Vec<String> = dynvram_shaders::all()
        .iter()
        .filter_map(|(name, src)| validate(name, src).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_shader_validates_with_f16_activations() {
    let failures: Vec<String> = dynvram_shaders::all()
        .iter()
        .filter_map(|(name, src)| {
            let (_, rest) = dynvram_shaders::split_directives(src);
            assert!(
                rest.starts_with(dynvram_shaders::ACT_ALIAS_F32),
                "{name} does not start with the activation alias after its directives"
            );
            let f16 = dynvram_shaders::with_f16_activations(src);
            assert!(f16.starts_with("enable f16;"), "{name}: {f16:.40}");
            validate(&format!("{name} [f16]"), &f16).err()
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The f16 variant really stores f16: a module whose activations stayed f32
/// would validate too, so every module that declares `act` buffers must have
/// an array of f16 (scalars or vectors) in its f16 variant.
#[test]
fn f16_variant_declares_f16_activation_buffers() {
    let half = |s: &naga::Scalar| s.kind == naga::ScalarKind::Float && s.width == 2;
    for (name, src) in dynvram_shaders::all() {
        if !src.contains("<act>") {
            continue;
        }
        let f16 = dynvram_shaders::with_f16_activations(src);
        let module = naga::front::wgsl::parse_str(&f16).expect("parses");
        let has_f16_array = module.types.iter().any(|(_, t)| match t.inner {
            naga::TypeInner::Array { base, .. } => match &module.types[base].inner {
                naga::TypeInner::Scalar(s) | naga::TypeInner::Vector { scalar: s, .. } => half(s),
                _ => false,
            },
            _ => false,
        });
        assert!(has_f16_array, "{name}: no f16 activation array");
    }
}

#[test]
fn every_file_in_the_folder_is_registered() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/wgsl");
    let registered: Vec<&str> = dynvram_shaders::all().iter().map(|(n, _)| *n).collect();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(dir).expect("wgsl folder") {
        let name = entry
            .expect("dir entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".wgsl") && !registered.contains(&name.as_str()) {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "not registered in shaders/src: {missing:?}"
    );
}

/// The cooperative GEMM's `main` in its file is the generator's for the
/// file's own shape, and the generated modules of other shapes validate.
#[test]
fn coop_gemm_shapes_generate_and_validate() {
    use dynvram_shaders::linear::{self, CoopGemmShape};
    let file = linear::FLOAT_GEMM_COOP16;
    assert_eq!(linear::coop_gemm(file, 16, CoopGemmShape::FILE), file);
    let mut failures = Vec::new();
    for (name, src, edge) in [
        ("int coop16", linear::INT_GEMM_COOP16, 16),
        ("float coop16", linear::FLOAT_GEMM_COOP16, 16),
        ("int coop8", linear::INT_GEMM_COOP8, 8),
        ("float coop8", linear::FLOAT_GEMM_COOP8, 8),
    ] {
        for (sg, sg_m, sg_n, wm, wn, bk) in [
            (32, 4, 4, 2, 2, 32),
            (32, 2, 4, 4, 2, 64),
            (32, 2, 2, 4, 4, 32),
            (8, 1, 3, 3, 1, 16),
            (16, 2, 1, 1, 4, 48),
        ] {
            let shape = CoopGemmShape {
                sg,
                sg_m,
                sg_n,
                wm,
                wn,
                bk,
            };
            let text = dynvram_shaders::with_f16_activations(&linear::coop_gemm(src, edge, shape));
            if let Err(e) = validate(&format!("{name} {shape:?}"), &text) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Decode attention modules with their workgroup sizes written in validate
/// for every module variant (sums on subgroups or workgroup memory, RoPE
/// fused or not), workgroups of 32 to 1024 invocations and merges of one
/// key group to all.
#[test]
fn decode_attention_shapes_generate_and_validate() {
    use dynvram_shaders::transformer::{DecodeShape, attention_decode, with_decode_shape};
    let mut failures = Vec::new();
    for (subgroups, rope) in [(false, false), (true, false), (false, true), (true, true)] {
        let src = attention_decode(subgroups, rope);
        for (wg, lpk, merge, queries, head_dim) in [
            (128u32, 32u32, 1u32, 1u32, 128u32),
            (32, 32, 1, 8, 256),
            (256, 16, 4, 4, 64),
            (512, 32, 16, 2, 128),
            (1024, 32, 32, 1, 128),
            (1024, 8, 1, 8, 32),
        ] {
            let shape = DecodeShape {
                wg,
                key_groups: wg / lpk,
                merge,
                queries,
                head_dim,
            };
            let text = with_decode_shape(src, subgroups, shape);
            for text in [text.clone(), dynvram_shaders::with_f16_activations(&text)] {
                let name = format!("attention_decode {subgroups} {rope} {shape:?}");
                if let Err(e) = validate(&name, &text) {
                    failures.push(e);
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
