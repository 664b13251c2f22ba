//! Every kernel's immediates are one `#[repr(C)]` struct per WGSL struct
//! (issue 32): a Rust struct in `gpu/src` whose doc says it is
//! "`file.wgsl`'s `Name`, field for field" must have that WGSL struct's
//! fields in its order, with its names and types (padding counted, not
//! named; a nested struct of the same file expanded in place). Text only:
//! no GPU, no naga.

use std::fs;
use std::path::{Path, PathBuf};

/// Fields allowed to differ in name: (Rust struct, Rust field, the WGSL
/// names it stands for, why).
const RENAMED: &[(&str, &str, &[&str], &str)] = &[
    (
        "GemmParams",
        "last_bits",
        &["one_bits", "eps_bits"],
        "one struct fills two WGSL structs whose last word means 1.0 in the integer kernels \
         and the folded norm's eps in the float ones",
    ),
    (
        "OneWalkParams",
        "scale",
        &["scale2"],
        "the flash kernels share their first eight words (FlashParams); the one-walk kernel's \
         factor is the scale times log2(e), its softmax running on exp2",
    ),
];

/// One field as the kernel sees it: its name (`None` for padding) and its
/// scalar type.
type Field = (Option<String>, String);

#[test]
fn rust_immediates_mirror_their_wgsl_structs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let wgsl_dir = root.join("shaders/wgsl");
    let mut checked = 0;
    let mut failures = Vec::new();
    for file in rust_files(&root.join("gpu/src")) {
        let src = fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = src.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(name) = struct_name(line) else {
                continue;
            };
            let doc = doc_above(&lines, i);
            if !doc.contains("field for field") {
                continue;
            }
            let Some(rust) = rust_fields(&lines, i, &src) else {
                failures.push(format!("{}: cannot read struct {name}", file.display()));
                continue;
            };
            for (wgsl_file, wgsl_name) in mirrored(&doc) {
                checked += 1;
                let path = wgsl_dir.join(&wgsl_file);
                let Some(wgsl) = fs::read_to_string(&path)
                    .ok()
                    .and_then(|text| wgsl_fields(&text, &wgsl_name))
                else {
                    failures.push(format!(
                        "{}: {name} names {wgsl_file}'s {wgsl_name}, which does not exist",
                        file.display()
                    ));
                    continue;
                };
                if let Some(why) = differs(&name, &rust, &wgsl) {
                    failures.push(format!(
                        "{}: {name} is not {wgsl_file}'s {wgsl_name}: {why}",
                        file.display()
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // norm, rope, argmax, embed, elementwise, attention, dit (4), the
    // linear kernels (5), flash (2), conv2d, group_norm, spatial attention.
    assert!(checked >= 19, "only {checked} mirrored structs found");
}

/// The test's own parsers see what they must: a mismatch is reported.
#[test]
fn a_drifted_mirror_is_reported() {
    let wgsl = "struct P {\n    rows: u32,\n    // why\n    eps: f32,\n    _pad0: u32,\n    _pad1: u32,\n}\n";
    let want = wgsl_fields(wgsl, "P").unwrap();
    let rust = |body: &str| {
        let src = format!("struct Q {{\n{body}}}\n");
        let lines: Vec<&str> = src.lines().collect();
        rust_fields(&lines, 0, &src).unwrap()
    };
    let same = rust("    pub rows: u32,\n    eps: f32,\n    _pad: [u32; 2],\n");
    assert_eq!(differs("Q", &same, &want), None);
    let renamed = rust("    rows: u32,\n    epsilon: f32,\n    _pad: [u32; 2],\n");
    assert!(differs("Q", &renamed, &want).is_some());
    let retyped = rust("    rows: u32,\n    eps: u32,\n    _pad: [u32; 2],\n");
    assert!(differs("Q", &retyped, &want).is_some());
    let short = rust("    rows: u32,\n    eps: f32,\n    _pad: [u32; 1],\n");
    assert!(differs("Q", &short, &want).is_some());
    assert_eq!(
        mirrored("/// `a.wgsl`'s `P` and `b.wgsl`'s `R`, field for field; `c.wgsl`'s."),
        vec![("a.wgsl".into(), "P".into()), ("b.wgsl".into(), "R".into())]
    );
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// `Name` of a line `[pub(..)] struct Name {`.
fn struct_name(line: &str) -> Option<String> {
    let rest = line.trim_start();
    let rest = rest
        .strip_prefix("pub(super) ")
        .or_else(|| rest.strip_prefix("pub(crate) "))
        .or_else(|| rest.strip_prefix("pub "))
        .unwrap_or(rest);
    let name = rest.strip_prefix("struct ")?.strip_suffix(" {")?;
    name.chars()
        .all(|c| c.is_alphanumeric() || c == '_')
        .then(|| name.to_string())
}

/// The doc comment (and attributes) right above line `i`, as one string.
fn doc_above(lines: &[&str], i: usize) -> String {
    let mut doc = Vec::new();
    for line in lines[..i].iter().rev() {
        let t = line.trim_start();
        if t.starts_with("///") || t.starts_with("#[") {
            doc.push(t.trim_start_matches('/').trim());
        } else {
            break;
        }
    }
    doc.reverse();
    doc.join(" ")
}

/// Each "`file.wgsl`'s `Name`" a doc names.
fn mirrored(doc: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = doc;
    while let Some(at) = rest.find(".wgsl`'s `") {
        let start = rest[..at].rfind('`').map_or(0, |s| s + 1);
        let file = format!("{}.wgsl", &rest[start..at]);
        let after = &rest[at + ".wgsl`'s `".len()..];
        let Some(end) = after.find('`') else {
            break;
        };
        out.push((file, after[..end].to_string()));
        rest = &after[end..];
    }
    out
}

/// The fields of the Rust struct whose `struct` line is line `i`, padding
/// arrays as that many unnamed words, a field of another struct of `src`
/// expanded in place.
fn rust_fields(lines: &[&str], i: usize, src: &str) -> Option<Vec<Field>> {
    let mut out = Vec::new();
    for line in &lines[i + 1..] {
        let t = line.trim();
        if t == "}" {
            return Some(out);
        }
        if t.is_empty() || t.starts_with("//") {
            continue;
        }
        let t = t
            .strip_prefix("pub(super) ")
            .or_else(|| t.strip_prefix("pub "))
            .unwrap_or(t);
        let (name, ty) = t.strip_suffix(',')?.split_once(": ")?;
        let padding = name.starts_with('_') || name.starts_with("pad");
        if let Some(array) = ty.strip_prefix('[').and_then(|a| a.strip_suffix(']')) {
            let (elem, n) = array.split_once("; ")?;
            for _ in 0..n.parse::<usize>().ok()? {
                out.push(((!padding).then(|| name.to_string()), elem.to_string()));
            }
        } else if matches!(ty, "u32" | "f32" | "i32") {
            out.push(((!padding).then(|| name.to_string()), ty.to_string()));
        } else {
            // A struct of the same file, expanded in place.
            let lines: Vec<&str> = src.lines().collect();
            let at = lines
                .iter()
                .position(|l| struct_name(l).as_deref() == Some(ty))?;
            out.extend(rust_fields(&lines, at, src)?);
        }
    }
    None
}

/// The fields of WGSL struct `name` in `text`.
fn wgsl_fields(text: &str, name: &str) -> Option<Vec<Field>> {
    let head = format!("struct {name} {{");
    let start = text.lines().position(|l| l.trim() == head)?;
    let mut out = Vec::new();
    for line in text.lines().skip(start + 1) {
        let t = line.split("//").next().unwrap_or("").trim();
        if t == "}" || t == "};" {
            return Some(out);
        }
        if t.is_empty() {
            continue;
        }
        let (field, ty) = t.trim_end_matches(',').split_once(':')?;
        let (field, ty) = (field.trim(), ty.trim());
        let padding = field.starts_with('_') || field.starts_with("pad");
        out.push(((!padding).then(|| field.to_string()), ty.to_string()));
    }
    None
}

/// Why the Rust fields are not the WGSL ones, if they are not.
fn differs(rust_struct: &str, rust: &[Field], wgsl: &[Field]) -> Option<String> {
    if rust.len() != wgsl.len() {
        return Some(format!(
            "{} words against {} (padding included)",
            rust.len(),
            wgsl.len()
        ));
    }
    for (i, ((rn, rt), (wn, wt))) in rust.iter().zip(wgsl).enumerate() {
        let renamed = |r: &str, w: &str| {
            RENAMED
                .iter()
                .any(|(s, f, ws, _)| *s == rust_struct && *f == r && ws.contains(&w))
        };
        let same_name = match (rn, wn) {
            (None, None) => true,
            (Some(r), Some(w)) => r == w || renamed(r, w),
            _ => false,
        };
        if !same_name || rt != wt {
            return Some(format!(
                "word {i} is {rn:?}: {rt} in Rust, {wn:?}: {wt} in WGSL"
            ));
        }
    }
    None
}
