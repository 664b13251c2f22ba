//! Every WGSL file parses and validates with naga, with the capabilities the
//! runtime really asks for (f16, subgroups and cooperative matrices where the
//! adapter has them), and
//! every file in `wgsl/` is registered in the crate.

use naga::valid::{Capabilities, ValidationFlags, Validator};

use crate::variants;

fn validate(name: &str, source: &str) -> Result<(), String> {
    let module = naga::front::wgsl::parse_str(source)
        .map_err(|e| format!("{name}: parse error\n{}", e.emit_to_string(source)))?;
    let mut caps = Capabilities::SHADER_FLOAT16
        | Capabilities::SUBGROUP
        | Capabilities::COOPERATIVE_MATRIX
        | Capabilities::IMMEDIATES;
    // `unpack2x16float` only where the runtime puts it in: every other
    // module must validate on adapters without SHADER_F16_IN_F32.
    if source.contains(dynvram_shaders::F16_WORDS_UNPACK) {
        caps |= Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    }
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

/// Every module that decodes f16 words validates with the hardware's
/// conversion in place of the integer one, in both activation types, and
/// the integer one is what the files hold.
#[test]
fn f16_word_decoders_swap_for_unpack() {
    let mut swapped = 0;
    let mut failures = Vec::new();
    for (name, src) in dynvram_shaders::all() {
        assert!(
            !src.contains("unpack2x16float(") || src.contains(dynvram_shaders::F16_WORDS_UNPACK),
            "{name} calls unpack2x16float outside f16_words_unpack.wgsl"
        );
        for (variant, text) in [
            ("f32", src.to_owned()),
            ("f16", dynvram_shaders::with_f16_activations(src)),
        ] {
            let Some(unpack) = dynvram_shaders::with_f16_unpack(&text) else {
                continue;
            };
            assert!(!unpack.contains(dynvram_shaders::F16_WORDS), "{name}");
            swapped += 1;
            if let Err(e) = validate(&format!("{name} [{variant}, unpack]"), &unpack) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // The float linears (GEMV, GEMM, cooperative), embed and conv2d.
    assert!(swapped >= 20, "only {swapped} modules decode f16 words");
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

/// The cooperative GEMMs' `main` in their files is the generator's for the
/// files' own shape (the double-buffered file's with the float staging's
/// slots), and the generated modules of other shapes validate, for both
/// kernels.
#[test]
fn coop_gemm_shapes_generate_and_validate() {
    use dynvram_shaders::linear::{self, CoopGemmKernel, CoopGemmShape};
    let (single, double) = (CoopGemmKernel::Single, CoopGemmKernel::Double);
    let file = linear::FLOAT_GEMM_COOP16;
    assert_eq!(
        linear::coop_gemm(file, 16, CoopGemmShape::FILE, single, true),
        file
    );
    let file = linear::FLOAT_GEMM_COOP16_DB;
    let own = linear::coop_gemm(file, 16, CoopGemmShape::FILE, double, true);
    if std::env::var("DYNVRAM_BLESS_WGSL").is_ok() && own != file {
        // The generated main into the file (`DYNVRAM_BLESS_WGSL=1`).
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/wgsl/linear_gemm_coop_db.wgsl");
        let text = std::fs::read_to_string(path).expect("read");
        let main = |t: &str| {
            let begin = t.find("// BEGIN main").expect("begin");
            (begin, t.find("// END main").expect("end"))
        };
        let ((b, e), (ob, oe)) = (main(&text), main(&own));
        std::fs::write(
            path,
            format!("{}{}{}", &text[..b], &own[ob..oe], &text[e..]),
        )
        .expect("write");
    } else {
        assert!(
            own == file,
            "linear_gemm_coop_db.wgsl's main is stale: DYNVRAM_BLESS_WGSL=1 rewrites it"
        );
    }
    validate_all(&variants::coop_gemms());
}

/// Decode attention modules with their workgroup sizes written in validate
/// ([`variants::decode_attention`]).
#[test]
fn decode_attention_shapes_generate_and_validate() {
    validate_all(&variants::decode_attention());
}

/// Two-walk flash attention modules with their shapes written in validate
/// ([`variants::two_walks`]).
#[test]
fn two_walk_shapes_generate_and_validate() {
    let modules = variants::two_walks();
    assert!(modules.len() >= 8, "only {} modules", modules.len());
    validate_all(&modules);
}

fn validate_all(modules: &[variants::Variant]) {
    let failures: Vec<String> = modules
        .iter()
        .filter_map(|v| validate(&v.name, &v.source).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Why a module that uses cooperative matrices could load or store one
/// misaligned: a workgroup variable whose size is not a multiple of 16
/// bytes. Cooperative loads and stores need 16-byte aligned pointers, and
/// a driver may place workgroup variables in any order (NVIDIA's compiler
/// does not keep the declared one), so only sizes that are all multiples
/// of 16 keep every array aligned. Also returns the module's workgroup
/// bytes.
fn workgroup_sizes(name: &str, source: &str) -> Result<u32, String> {
    let module = naga::front::wgsl::parse_str(source)
        .map_err(|e| format!("{name}: parse error\n{}", e.emit_to_string(source)))?;
    let mut layouter = naga::proc::Layouter::default();
    layouter
        .update(module.to_ctx())
        .map_err(|e| format!("{name}: layout: {e}"))?;
    let mut total = 0;
    for (_, var) in module.global_variables.iter() {
        if var.space != naga::AddressSpace::WorkGroup {
            continue;
        }
        let size = layouter[var.ty].size;
        if size % 16 != 0 {
            return Err(format!(
                "{name}: workgroup variable `{}` takes {size} bytes, not a multiple of 16",
                var.name.as_deref().unwrap_or("?")
            ));
        }
        total += size;
    }
    Ok(total)
}

/// Every module with cooperative matrices keeps its workgroup arrays
/// 16-byte aligned in any placement ([`workgroup_sizes`]).
#[test]
fn cooperative_modules_keep_workgroup_memory_aligned() {
    let mut count = 0;
    let failures: Vec<String> = dynvram_shaders::all()
        .iter()
        .filter(|(_, src)| src.contains("coopLoad") || src.contains("coopStore"))
        .filter_map(|(name, src)| {
            count += 1;
            workgroup_sizes(name, &dynvram_shaders::with_f16_activations(src)).err()
        })
        .collect();
    assert!(count > 2, "only {count} cooperative modules");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Flash attention's generated region in its file is the generator's for
/// `FlashTuning::FILE` (`DYNVRAM_BLESS_WGSL=1` rewrites it), and the
/// modules of other tunings — every staging, grids of rows and columns,
/// prefetch, both matrix edges, awkward head dims — validate, in f16.
#[test]
fn flash_attention_tunings_generate_and_validate() {
    use dynvram_shaders::flash::{FlashTuning, flash_attention};
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/wgsl/flash_attention.wgsl");
    let file = std::fs::read_to_string(path).expect("read");
    let own = flash_attention(&file, 16, 32, 128, FlashTuning::FILE).expect("the file's tuning");
    if std::env::var("DYNVRAM_BLESS_WGSL").is_ok() {
        std::fs::write(path, &own).expect("write");
    } else {
        assert!(
            own == file,
            "flash_attention.wgsl's generated region is stale: DYNVRAM_BLESS_WGSL=1 rewrites it"
        );
    }
    let mut failures = Vec::new();
    let modules = variants::flash_attentions();
    let count = modules.len();
    for variants::FlashVariant {
        variant: variants::Variant { name, source: text },
        tuning,
        edge,
        sg,
        hd,
    } in modules
    {
        if let Err(e) = validate(&name, &text) {
            failures.push(e);
        }
        // The geometry's account of workgroup memory is the
        // module's, in sizes that keep every array aligned.
        match workgroup_sizes(&name, &text) {
            Ok(bytes) => {
                let g = tuning.geometry(edge, sg, hd).expect("geometry");
                if bytes != g.workgroup_bytes() {
                    failures.push(format!(
                        "{name}: {bytes} bytes of workgroup memory, the geometry says {}",
                        g.workgroup_bytes()
                    ));
                }
            }
            Err(e) => failures.push(e),
        }
    }
    assert!(count > 40, "only {count} modules generated");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The text form of a flash tuning reads back, and bad forms say why.
#[test]
fn flash_tuning_text_round_trips() {
    use dynvram_shaders::flash::{FlashTuning, KvStaging};
    for text in [
        "64x64w4c2",
        "128x32w8k2c2pr",
        "64x64w4g",
        "32x16w1",
        "64x64w4r",
        "64x64w4c2t",
        "64x32w8prt",
        "64x64w4c2m",
        "128x32w8c2gtm",
        "128x32w8c2drt",
    ] {
        let t: FlashTuning = text.parse().expect(text);
        assert_eq!(t.to_string(), text);
    }
    for text in ["two-walk", "64x64w4c2", "64x64w4c2tm"] {
        let t: dynvram_shaders::flash::FlashKernel = text.parse().expect(text);
        assert_eq!(t.to_string(), text);
    }
    let t: FlashTuning = "64x32".parse().expect("defaults");
    assert_eq!((t.subgroups, t.key_groups, t.col_groups), (4, 1, 1));
    assert_eq!((t.staging, t.prefetch), (KvStaging::Serial, false));
    assert!(!t.column_major);
    assert_eq!("64x32w4s".parse::<FlashTuning>(), Ok(t));
    // Double staging stores from the prefetch registers: `r` is needed.
    let d: FlashTuning = "64x64w4d".parse().expect("parses");
    assert_eq!(d.staging, KvStaging::Double);
    let why = d
        .geometry(16, 32, 128)
        .expect_err("no registers to store from");
    assert!(why.contains("`r`"), "{why}");
    for bad in [
        "",
        "64",
        "64x",
        "x64",
        "64x0",
        "64x32c2w4",
        "64x32q",
        "64x32pp",
        "64x32w",
        "64x32tr",
        "64x32mt",
    ] {
        let err = bad.parse::<FlashTuning>().expect_err(bad);
        assert!(err.contains("bad flash tuning"), "{err}");
    }
    assert!(FlashTuning::FILE.geometry(16, 32, 128).is_ok());
    let g: FlashTuning = "64x64w4g".parse().expect("global");
    assert!(g.geometry(16, 32, 128).is_ok());
    let gk: FlashTuning = "64x64w4k2g".parse().expect("global, key groups");
    assert!(gk.geometry(16, 32, 128).is_err());
    let hd80: FlashTuning = "64x64w4c2".parse().expect("c2");
    assert!(
        hd80.geometry(16, 32, 80).is_err(),
        "5 column tiles in 2 groups"
    );
}
