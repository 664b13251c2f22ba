//! WGSL kernels of dynvram, one `.wgsl` file per kernel family under `wgsl/`,
//! exposed as string constants. Specialisation is by WGSL `override`
//! constants set at pipeline creation, with one exception: the activation
//! element type.
//!
//! **Activation type.** Every module starts with [`ACT_ALIAS_F32`]
//! (`alias act = f32;`) and declares activation buffers as `array<act>`
//! (loads convert to f32, stores convert back, sums stay f32). The f16
//! variant of a module is [`with_f16_activations`]: the alias becomes
//! `f16` and `enable f16;` goes first. A module that needs a WGSL extension
//! starts with its `enable` directives, then the alias. `override` constants cannot change a
//! type, so this one substitution replaces a copy of every file.
//!
//! Owns: the shader sources, their validation (see `tests/it/validate.rs`,
//! which parses and validates every file with naga, in both activation
//! types) and what each wgpu backend's translator can take of them
//! ([`backends`], kept true by `tests/it/translate.rs`). Knows nothing
//! else.

/// A complete module: `enable` directives if any (`wgsl!(enable "f16"; ..)`),
/// the activation alias, then the listed files of `wgsl/` concatenated
/// (fragments first).
macro_rules! wgsl {
    (enable $($ext:literal),+; $($file:literal),+) => {
        concat!(
            $("enable ", $ext, ";\n",)+
            "alias act = f32;\n",
            $(include_str!(concat!("../wgsl/", $file))),+
        )
    };
    ($($file:literal),+) => {
        concat!("alias act = f32;\n", $(include_str!(concat!("../wgsl/", $file))),+)
    };
}

pub mod backends;
pub mod bench;
pub mod flash;
pub mod linear;
pub mod spirv;
pub mod transformer;
pub mod vae;

/// The first line of every module: activations are f32 by default.
pub const ACT_ALIAS_F32: &str = "alias act = f32;\n";

/// `source` with f16 activations: `enable f16;` first and `act` = `f16`
/// (the device needs `SHADER_F16`); the module's other directives follow.
/// A source without [`ACT_ALIAS_F32`] gets the directive and the alias
/// prepended all the same.
pub fn with_f16_activations(source: &str) -> String {
    let (directives, rest) = split_directives(source);
    let body = rest.strip_prefix(ACT_ALIAS_F32).unwrap_or(rest);
    let others: String = directives
        .lines()
        .filter(|l| l.trim() != "enable f16;")
        .map(|l| format!("{l}\n"))
        .collect();
    format!("enable f16;\n{others}alias act = f16;\n{body}")
}

/// `source` with each `const NAME: u32 = DEFAULT;` line of `consts`
/// (name, default, value) rewritten to `value`: the one specialisation by
/// text besides the activation type, for the sizes of workgroup arrays
/// (array sizes cannot be `override` expressions through naga 30's
/// constant processing). Panics when a line is missing: a module and its
/// caller that disagree are a programming error, caught by the tests that
/// build every variant.
pub fn with_consts(source: &str, consts: &[(&str, u32, u32)]) -> String {
    let mut out = source.to_owned();
    for (name, default, value) in consts {
        let line = format!("const {name}: u32 = {default}u;");
        assert!(out.contains(&line), "the module has no `{line}`");
        out = out.replacen(&line, &format!("const {name}: u32 = {value}u;"), 1);
    }
    out
}

/// The f16 decoders every module reading f16 words includes
/// (`f16_words.wgsl`: integer arithmetic, valid everywhere).
pub const F16_WORDS: &str = include_str!("../wgsl/f16_words.wgsl");

/// The same decoders through `unpack2x16float` (`f16_words_unpack.wgsl`),
/// which needs wgpu's `DownlevelFlags::SHADER_F16_IN_F32`.
pub const F16_WORDS_UNPACK: &str = include_str!("../wgsl/f16_words_unpack.wgsl");

/// `source` with its f16 decoders ([`F16_WORDS`]) replaced by the
/// hardware's conversion ([`F16_WORDS_UNPACK`]), for an adapter that grants
/// `SHADER_F16_IN_F32`; `None` when the module decodes no f16.
pub fn with_f16_unpack(source: &str) -> Option<String> {
    source
        .contains(F16_WORDS)
        .then(|| source.replacen(F16_WORDS, F16_WORDS_UNPACK, 1))
}

/// The leading `enable ...;` lines of a module, and the rest.
pub fn split_directives(source: &str) -> (&str, &str) {
    let mut end = 0;
    for line in source.split_inclusive('\n') {
        if !line.starts_with("enable ") {
            break;
        }
        end += line.len();
    }
    source.split_at(end)
}

/// Every shader file, as (file name, source), for validation and tooling.
pub fn all() -> Vec<(&'static str, &'static str)> {
    let mut v = linear::ALL.to_vec();
    v.extend_from_slice(transformer::ALL);
    v.extend_from_slice(bench::ALL);
    v.extend_from_slice(vae::ALL);
    v
}
