//! Every WGSL file says, in its leading comment, which names it uses from
//! the other files of its module (`// needs: …`) and which of its own the
//! others use (`// provides: …`), so a fragment can be read on its own. The
//! lists are computed from the sources (identifiers used but not defined in
//! a file, that some other file defines); this test fails when a file's
//! header disagrees, printing the lines it should have. With
//! `DYNVRAM_BLESS_WGSL=1` it rewrites the headers instead.

use std::collections::{BTreeMap, BTreeSet};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/wgsl");

/// A WGSL source's identifiers, by a token-level reading: comments and
/// attributes dropped, member accesses skipped; a name is defined after
/// `fn`, `let`, `var`, `const`, `override`, `alias` or `struct`, or when a
/// `:` follows it (parameters, struct members).
#[derive(Debug, Default)]
struct Names {
    /// Defined at module scope.
    globals: BTreeSet<String>,
    /// Defined inside a function, a parameter list or a struct.
    locals: BTreeSet<String>,
    /// Everything else.
    used: BTreeSet<String>,
}

impl Names {
    /// Used but defined nowhere in the file.
    fn free(&self) -> BTreeSet<String> {
        self.used
            .iter()
            .filter(|n| !self.globals.contains(*n) && !self.locals.contains(*n))
            .cloned()
            .collect()
    }
}

fn names(src: &str) -> Names {
    let code: String = src
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let chars: Vec<char> = code.chars().collect();
    let mut n = Names::default();
    let (mut braces, mut parens) = (0i32, 0i32);
    // The last token: a word, or one symbol.
    let mut prev = String::new();
    let mut i = 0;
    let next_char = |from: usize| {
        chars[from..]
            .iter()
            .position(|c| !c.is_whitespace())
            .map(|k| from + k)
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '@' {
            // An attribute and its arguments.
            i += 1;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            if next_char(i).is_some_and(|k| chars[k] == '(') {
                while i < chars.len() && chars[i] != ')' {
                    i += 1;
                }
                i += 1;
            }
            continue;
        }
        if c.is_ascii_digit() {
            // A number with its suffix (0x7FC00000u, 1e-10f: the sign is a symbol).
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            prev = "0".into();
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = next_char(i);
            let colon = next.is_some_and(|k| chars[k] == ':' && chars.get(k + 1) != Some(&':'));
            let decl = matches!(
                prev.as_str(),
                "fn" | "let" | "var" | "const" | "override" | "alias" | "struct"
            );
            if prev == "." {
                // a member or a swizzle
            } else if decl || colon {
                if braces == 0 && parens == 0 {
                    n.globals.insert(word.clone());
                } else {
                    n.locals.insert(word.clone());
                }
            } else {
                n.used.insert(word.clone());
            }
            if word == "var" && next.is_some_and(|k| chars[k] == '<') {
                // `var<storage, read> name`: the name follows the brackets.
                while i < chars.len() && chars[i] != '>' {
                    i += 1;
                }
                i += 1;
            }
            prev = word;
            continue;
        }
        match c {
            '{' => braces += 1,
            '}' => braces -= 1,
            '(' => parens += 1,
            ')' => parens -= 1,
            _ => {}
        }
        if !c.is_whitespace() {
            prev = c.to_string();
        }
        i += 1;
    }
    n
}

/// The files of each module, as `wgsl!(…)` lists them in shaders/src.
fn modules() -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for f in [
        "lib.rs",
        "linear.rs",
        "transformer.rs",
        "bench.rs",
        "vae.rs",
    ] {
        let src = std::fs::read_to_string(format!("{}/src/{f}", env!("CARGO_MANIFEST_DIR")))
            .expect("read");
        for call in src.split("wgsl!(").skip(1) {
            let body = call.split(')').next().unwrap_or("");
            let files: Vec<String> = body
                .split('"')
                .filter(|t| t.ends_with(".wgsl"))
                .map(str::to_owned)
                .collect();
            if !files.is_empty() {
                out.push(files);
            }
        }
    }
    out
}

/// Every file's (needs, provides): names it uses that the other files of
/// its modules define at module scope, and the reverse.
fn headers() -> BTreeMap<String, (Vec<String>, Vec<String>)> {
    let read = |name: &str| std::fs::read_to_string(format!("{DIR}/{name}")).expect("read");
    let modules = modules();
    let mut files: BTreeSet<String> = std::fs::read_dir(DIR)
        .expect("wgsl folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".wgsl"))
        .collect();
    files.extend(modules.iter().flatten().cloned());
    let parsed: BTreeMap<String, Names> =
        files.iter().map(|f| (f.clone(), names(&read(f)))).collect();
    // Each file's free names, computed once (every partner's are asked for
    // each of its names).
    let free: BTreeMap<&String, BTreeSet<String>> =
        parsed.iter().map(|(f, n)| (f, n.free())).collect();
    files
        .iter()
        .map(|f| {
            let partners: BTreeSet<&String> = modules
                .iter()
                .filter(|m| m.contains(f))
                .flatten()
                .filter(|g| *g != f)
                .collect();
            let needs = free[f]
                .iter()
                .filter(|x| partners.iter().any(|g| parsed[*g].globals.contains(*x)))
                .cloned()
                .collect();
            let provides = parsed[f]
                .globals
                .iter()
                .filter(|x| partners.iter().any(|g| free[*g].contains(*x)))
                .cloned()
                .collect();
            (f.clone(), (needs, provides))
        })
        .collect()
}

/// `// needs: a, b` lines, wrapped at 79 columns (none for an empty list).
fn lines(label: &str, list: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in list {
        match out.last_mut() {
            Some(l) if l.len() + name.len() + 2 <= 79 => {
                l.push_str(", ");
                l.push_str(name);
            }
            _ => out.push(format!("// {label}: {name}")),
        }
    }
    out
}

#[test]
fn every_fragment_declares_what_it_needs_and_provides() {
    let bless = std::env::var("DYNVRAM_BLESS_WGSL").is_ok();
    let mut wrong = Vec::new();
    for (name, (needs, provides)) in headers() {
        let path = format!("{DIR}/{name}");
        let src = std::fs::read_to_string(&path).expect("read");
        let want: Vec<String> = [lines("needs", &needs), lines("provides", &provides)].concat();
        let has: Vec<String> = src
            .lines()
            .filter(|l| l.starts_with("// needs: ") || l.starts_with("// provides: "))
            .map(str::to_owned)
            .collect();
        if has == want {
            continue;
        }
        if bless {
            // After the leading comment block, replacing the old lines.
            let body: Vec<&str> = src
                .lines()
                .filter(|l| !(l.starts_with("// needs: ") || l.starts_with("// provides: ")))
                .collect();
            let mut lead = body.iter().take_while(|l| l.starts_with("//")).count();
            // The old headers' separator line stays the separator.
            while lead > 0 && body[lead - 1] == "//" {
                lead -= 1;
            }
            let mut out: Vec<String> = body[..lead].iter().map(|s| s.to_string()).collect();
            if lead > 0 && !want.is_empty() {
                out.push("//".into());
            }
            out.extend(want.iter().cloned());
            out.extend(body[lead..].iter().map(|s| s.to_string()));
            std::fs::write(&path, out.join("\n") + "\n").expect("write");
        } else {
            wrong.push(format!("{name} should say:\n{}", want.join("\n")));
        }
    }
    assert!(
        wrong.is_empty(),
        "headers out of date (DYNVRAM_BLESS_WGSL=1 rewrites them):\n\n{}",
        wrong.join("\n\n")
    );
}

#[test]
fn the_reading_finds_definitions_and_uses() {
    let n = names(
        "struct P { m: u32 }\nvar<storage, read> w: array<u32>;\n@compute @workgroup_size(WGS)\nfn f(a: u32) -> u32 { let b = a + p.m + g(w[0]); return b; }",
    );
    for x in ["P", "w", "f"] {
        assert!(n.globals.contains(x), "{x} global: {n:?}");
    }
    for x in ["m", "a", "b"] {
        assert!(n.locals.contains(x), "{x} local: {n:?}");
    }
    for x in ["p", "g", "u32", "array"] {
        assert!(n.free().contains(x), "{x} free: {n:?}");
    }
    assert!(
        !n.used.contains("WGS") && !n.used.contains("compute"),
        "{n:?}"
    );
}
