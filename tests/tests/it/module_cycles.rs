//! No import cycles between the modules of a crate (issue 16), nor between
//! its files (issue 32).
//!
//! Top-level granularity: the **top-level modules** of each workspace crate, i.e.
//! `src/x.rs` or everything under `src/x/`. The crate root (`lib.rs`,
//! `main.rs`) is not a node: it only declares modules and re-exports them.
//! There is an edge `a → b` when some file of `a` names module `b`:
//!
//! * a `crate::b…` path, in a `use` line or in code, grouped imports
//!   (`crate::{b::X, c}`) included;
//! * a `crate::X` path where `X` is an item the crate root re-exports from `b`
//!   (`pub use b::X` in `lib.rs`);
//! * a `super::…` path that climbs out of `a` to the crate root and on into `b`.
//!
//! Comments, string literals and `#[cfg(test)]` items are skipped: unit tests
//! may reach anywhere. Any strongly connected component of more than one
//! module is a cycle, reported with the files behind each of its edges.
//!
//! File granularity: every file but the crate root is a node. There is an
//! edge `a.rs → b.rs` when `a.rs` names an item that `b.rs` defines, by a
//! path from `crate::`, `super::`, `self::` or a child module's name, in a
//! `use` or in code; a name some file imports (`use x::Item`, `pub use
//! x::Item`) is followed to the file that defines it, and a re-export
//! itself is no edge (it passes names through: `mod.rs` re-exporting its
//! children's items is not a use of them).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Cycles accepted for now: (crate folder, its modules sorted, why).
const ALLOWED: &[(&str, &[&str], &str)] = &[];

/// File-level cycles accepted for now: (crate folder, its files' module
/// paths sorted, why); the lead removes each entry once its reason is gone.
const ALLOWED_FILES: &[(&str, &[&str], &str)] = &[];

#[test]
fn no_file_cycles() {
    let report = cycle_report(file_graph, ALLOWED_FILES, "cycle between files");
    assert!(report.is_empty(), "file cycles:\n{report}");
}

/// The file allow-list names real cycles only.
#[test]
fn file_allow_list_is_current() {
    assert_allow_list_current(file_graph, ALLOWED_FILES, "ALLOWED_FILES");
}

/// Every cycle of `graph_of` in each workspace member's `src/` that
/// `allowed` does not list: a line per cycle (`what`, its nodes), then each
/// edge inside it with the lines or files behind it; empty when none.
fn cycle_report(
    graph_of: fn(&Path) -> Graph,
    allowed: &[(&str, &[&str], &str)],
    what: &str,
) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut report = String::new();
    for krate in workspace_members(root) {
        let src = root.join(&krate).join("src");
        if !src.is_dir() {
            continue;
        }
        let graph = graph_of(&src);
        for scc in cycles(&graph) {
            if allowed
                .iter()
                .any(|(c, m, _)| *c == krate && *m == scc.as_slice())
            {
                continue;
            }
            report += &format!("{krate}: {what} {}\n", scc.join(", "));
            for a in &scc {
                for (b, why) in &graph[a] {
                    if scc.contains(b) {
                        report += &format!("  {a} → {b}: {}\n", why.join(", "));
                    }
                }
            }
        }
    }
    report
}

/// Each entry of `allowed` (named `list` in the message) is a cycle
/// `graph_of` still finds: a stale entry is an error too.
fn assert_allow_list_current(
    graph_of: fn(&Path) -> Graph,
    allowed: &[(&str, &[&str], &str)],
    list: &str,
) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    for (krate, nodes, _) in allowed {
        let found = cycles(&graph_of(&root.join(krate).join("src")));
        assert!(
            found.iter().any(|c| c.as_slice() == *nodes),
            "{krate}: allowed cycle {nodes:?} is gone; remove it from {list}"
        );
    }
}

/// The file graph on a small made-up crate: paths through `crate::`,
/// `super::`, `self::` and child names, grouped and nested imports,
/// re-exports and private imports followed to the defining file,
/// re-exports themselves no edge, and test items skipped.
#[test]
fn file_graph_follows_uses_and_reexports() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |p: &str, s: &str| {
        let p = src.join(p);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, s).unwrap();
    };
    write("lib.rs", "mod ops; mod util;\npub use util::Helper;");
    write(
        "ops/mod.rs",
        "mod cache; mod launch; mod profile;\npub use launch::{launch, Launch as L};\nuse launch::launch as go;\nfn f() { cache::clear(); }",
    );
    write(
        "ops/cache.rs",
        "use super::L;\nuse crate::{Helper, ops::{profile::{self, Profile}}};\npub fn clear() {}",
    );
    write(
        "ops/launch.rs",
        "pub struct Launch; pub fn launch() {}\n// super::cache::clear()",
    );
    write(
        "ops/profile.rs",
        "pub struct Profile;\nfn g() { self::h(); super::super::ops::cache::clear(); super::go(); }\nfn h() {}\n#[cfg(test)]\nmod tests { use crate::util::x; }",
    );
    write(
        "util.rs",
        "pub struct Helper;\nmod inner { fn k() { super::super::ops::L; } }",
    );
    let g = file_graph(src);
    let targets = |m: &str| g[m].keys().cloned().collect::<Vec<_>>();
    assert_eq!(targets("ops"), ["ops::cache", "ops::launch"]);
    assert_eq!(
        targets("ops::cache"),
        ["ops::launch", "ops::profile", "util"]
    );
    assert!(targets("ops::launch").is_empty());
    assert_eq!(targets("ops::profile"), ["ops::cache", "ops::launch"]);
    assert_eq!(targets("util"), ["ops::launch"]);
    assert_eq!(cycles(&g), [["ops::cache", "ops::profile"]]);
}

#[test]
fn no_module_cycles() {
    let report = cycle_report(crate_graph, ALLOWED, "cycle between");
    assert!(report.is_empty(), "module cycles:\n{report}");
}

/// The allow-list names real cycles only: a stale entry is an error too.
#[test]
fn allow_list_is_current() {
    assert_allow_list_current(crate_graph, ALLOWED, "ALLOWED");
}

/// The parser on a small made-up crate: grouped imports, re-exports through
/// the root, `super` paths, inline modules, comments and test items.
#[test]
fn parser_sees_every_kind_of_path() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |p: &str, s: &str| {
        let p = src.join(p);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, s).unwrap();
    };
    write(
        "lib.rs",
        "mod a; mod b; mod c; mod d; mod e;\npub use d::{Thing, Other as Renamed};",
    );
    write(
        "a.rs",
        "use crate::{b::X, c};\n// crate::e in a comment\nconst S: &str = \"crate::e\";",
    );
    write("b/mod.rs", "mod inner;");
    write("b/inner.rs", "fn f() -> super::super::Thing { todo!() }");
    write(
        "c.rs",
        concat!(
            "mod m { fn g() { super::super::Renamed::new(); } }\n",
            "#[cfg(test)]\nmod tests { use crate::e; }",
        ),
    );
    write(
        "d.rs",
        "pub struct Thing; pub struct Other; fn h() { crate::a::f(); }",
    );
    write("e.rs", "macro_rules! m { () => { $crate::a::f() } }");
    let g = crate_graph(src);
    let targets = |m: &str| g[m].keys().cloned().collect::<Vec<_>>();
    assert_eq!(targets("a"), ["b", "c"]);
    assert_eq!(targets("b"), ["d"]);
    assert_eq!(targets("c"), ["d"]);
    assert_eq!(targets("d"), ["a"]);
    assert!(targets("e").is_empty());
    assert_eq!(cycles(&g), [["a", "b", "c", "d"]]);
}

/// Module → (module it names → files naming it).
type Graph = BTreeMap<String, BTreeMap<String, Vec<String>>>;

fn workspace_members(root: &Path) -> Vec<String> {
    let toml = fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let list = toml.split("members").nth(1).expect("workspace members");
    let list = &list[list.find('[').unwrap() + 1..list.find(']').unwrap()];
    list.split(',')
        .map(|s| s.trim().trim_matches('"').to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `src/a/b.rs` → `[a, b]`, `src/a/mod.rs` → `[a]`, `src/lib.rs` → `[]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main")
        || parts.last().unwrap() == "mod"
    {
        parts.pop();
    }
    parts
}

fn crate_graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rs_files(src, &mut files);
    files.sort();
    let parsed: Vec<(PathBuf, Vec<String>, Vec<u8>)> = files
        .into_iter()
        .map(|f| {
            let code = strip_tests(&strip_comments_and_strings(&fs::read(&f).unwrap()));
            let m = module_path(src, &f);
            (f, m, code)
        })
        .collect();
    let modules: BTreeSet<String> = parsed
        .iter()
        .filter_map(|(_, m, _)| m.first().cloned())
        .collect();
    // Items the root re-exports: `pub use m::{A, B as C}` makes `crate::C` mean `m`.
    let mut reexports = BTreeMap::new();
    for (_, _, code) in parsed.iter().filter(|(_, m, _)| m.is_empty()) {
        for (at, _) in find_word(code, b"use") {
            let end = at + code[at..].iter().position(|&c| c == b';').unwrap_or(0);
            let text = String::from_utf8_lossy(&code[at + 3..end]).into_owned();
            let text = text.trim().trim_start_matches("crate::");
            let Some((first, rest)) = text.split_once("::") else {
                continue;
            };
            if !modules.contains(first.trim()) {
                continue;
            }
            for name in rest.trim().trim_matches(['{', '}']).split(',') {
                if let Some(last) = name.split_whitespace().last() {
                    let last = last.rsplit("::").next().unwrap().trim_matches(['{', '}']);
                    reexports.insert(last.to_string(), first.trim().to_string());
                }
            }
        }
    }
    let resolve = |name: &str| -> Option<String> {
        if modules.contains(name) {
            Some(name.to_string())
        } else {
            reexports.get(name).cloned()
        }
    };
    let mut graph: Graph = modules
        .iter()
        .map(|m| (m.clone(), BTreeMap::new()))
        .collect();
    for (file, m, code) in &parsed {
        let Some(from) = m.first() else { continue };
        let inline = inline_modules(code);
        let rel = file
            .strip_prefix(src.parent().unwrap())
            .unwrap()
            .display()
            .to_string();
        let mut add = |to: Option<String>| {
            if let Some(to) = to.filter(|t| t != from) {
                let files = graph.get_mut(from).unwrap().entry(to).or_default();
                if !files.contains(&rel) {
                    files.push(rel.clone());
                }
            }
        };
        for (at, end) in find_word(code, b"crate") {
            if at > 0 && code[at - 1] == b'$' {
                continue;
            }
            for first in first_segments(code, end) {
                add(resolve(&first));
            }
        }
        for (at, mut end) in find_word(code, b"super") {
            if at >= 2 && &code[at - 2..at] == b"::" {
                continue; // counted from the first `super` of the chain
            }
            let mut up = 1;
            loop {
                let next = skip_ws(code, end);
                if !code[next..].starts_with(b"::") {
                    break;
                }
                let after = skip_ws(code, next + 2);
                match word_at(code, after) {
                    Some((w, e)) if w == "super" => {
                        up += 1;
                        end = e;
                    }
                    _ => break,
                }
            }
            let depth = m.len()
                + inline
                    .iter()
                    .filter(|(s, e)| (*s..*e).contains(&at))
                    .count();
            if up < depth {
                continue; // still inside this top-level module
            }
            for first in first_segments(code, end) {
                add(resolve(&first));
            }
        }
    }
    graph
}

/// A `use` tree or path expanded: (segments, alias), one per leaf of its
/// `{…}` groups; `self` in a group names the group's own path.
fn expand_tree(code: &[u8], mut i: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    loop {
        i = skip_ws(code, i);
        if code.get(i) == Some(&b'{') {
            let close = matching(code, i);
            let mut j = i + 1;
            while j < close {
                j = expand_tree(code, j, &path, out);
                j = skip_ws(code, j);
                if code.get(j) == Some(&b',') {
                    j += 1;
                }
                if j <= i {
                    break;
                }
            }
            return close + 1;
        }
        if code.get(i) == Some(&b'*') {
            out.push(path);
            return i + 1;
        }
        let Some((w, e)) = word_at(code, i) else {
            out.push(path);
            return i;
        };
        if w != "self" || path.is_empty() {
            path.push(w);
        }
        i = skip_ws(code, e);
        if code[i..].starts_with(b"::") {
            i += 2;
            continue;
        }
        if let Some((w, e)) = word_at(code, i)
            && w == "as"
        {
            // The alias: recorded after the path, behind a marker.
            if let Some((alias, e2)) = word_at(code, skip_ws(code, e)) {
                path.push(format!("as {alias}"));
                out.push(path);
                return e2;
            }
        }
        out.push(path);
        return i;
    }
}

/// One file's module path and code, comments, strings and test items
/// blanked.
struct SourceFile {
    module: Vec<String>,
    rel: String,
    code: Vec<u8>,
}

/// Where a path met in `file` at byte `at` starts, as an absolute module
/// path and the segments after it, or `None` for a path that is not ours
/// (an external crate, a local name) or stays inside the file.
fn absolute(
    file: &SourceFile,
    inline: &[(usize, usize)],
    children: &BTreeSet<String>,
    at: usize,
    segs: &[String],
) -> Option<Vec<String>> {
    let first = segs.first()?;
    let depth = inline
        .iter()
        .filter(|(s, e)| (*s..*e).contains(&at))
        .count();
    match first.as_str() {
        "crate" => Some(segs[1..].to_vec()),
        "super" => {
            let up = segs.iter().take_while(|s| *s == "super").count();
            if up <= depth {
                return None;
            }
            let up = up - depth;
            let keep = file.module.len().checked_sub(up)?;
            let mut out = file.module[..keep].to_vec();
            out.extend_from_slice(&segs[up + depth..]);
            Some(out)
        }
        "self" if depth == 0 => {
            let mut out = file.module.clone();
            out.extend_from_slice(&segs[1..]);
            Some(out)
        }
        name if depth == 0 && children.contains(name) => {
            let mut out = file.module.clone();
            out.extend_from_slice(segs);
            Some(out)
        }
        _ => None,
    }
}

/// A path's segments and the byte where it starts.
type PathAt = (usize, Vec<String>);

/// Every path that starts at `crate`, `super`, `self` or a child module's
/// name in `code`, as (start, segments), and the names its `use`
/// statements bind (each leaf with its alias), public or not.
fn paths(code: &[u8], children: &BTreeSet<String>) -> (Vec<PathAt>, Vec<PathAt>) {
    let (mut uses, mut reexports) = (Vec::new(), Vec::new());
    let mut in_use = Vec::new();
    for (at, e) in find_word(code, b"use") {
        let before = String::from_utf8_lossy(
            &code[code[..at]
                .iter()
                .rposition(|&c| c == b';' || c == b'}' || c == b'{')
                .map_or(0, |p| p + 1)..at],
        )
        .into_owned();
        let public = before.split_whitespace().any(|w| w.starts_with("pub"));
        let mut leaves = Vec::new();
        let end = expand_tree(code, e, &[], &mut leaves);
        in_use.push((at, end));
        for leaf in leaves {
            // A private `use` binds the name for the file's descendants
            // too (`super::name`), so it is followed like a re-export.
            if !public {
                uses.push((
                    at,
                    leaf.iter()
                        .filter(|s| !s.starts_with("as "))
                        .cloned()
                        .collect(),
                ));
            }
            reexports.push((at, leaf));
        }
    }
    let inside_use = |p: usize| in_use.iter().any(|(s, e)| (*s..*e).contains(&p));
    let mut starts: Vec<(usize, usize)> = find_word(code, b"crate");
    starts.extend(find_word(code, b"super"));
    starts.extend(find_word(code, b"self"));
    for c in children {
        starts.extend(find_word(code, c.as_bytes()));
    }
    for (at, _) in starts {
        if inside_use(at) || (at > 0 && code[at - 1] == b'$') {
            continue;
        }
        let prev = code[..at].iter().rposition(|c| !c.is_ascii_whitespace());
        if prev.is_some_and(|p| p >= 1 && &code[p - 1..=p] == b"::") {
            continue; // inside a longer path
        }
        let mut segs = Vec::new();
        expand_tree_code(code, at, &mut segs);
        if segs.len() >= 2 {
            uses.push((at, segs));
        }
    }
    (uses, reexports)
}

/// A path in code (no groups): its `::`-joined words from `at`.
fn expand_tree_code(code: &[u8], mut i: usize, out: &mut Vec<String>) {
    while let Some((w, e)) = word_at(code, i) {
        out.push(w);
        let n = skip_ws(code, e);
        if !code[n..].starts_with(b"::") {
            return;
        }
        i = skip_ws(code, n + 2);
    }
}

/// The file graph of a crate: module path (`ops::cache`) → module paths of
/// the files it names → the files and lines that name them.
fn file_graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rs_files(src, &mut files);
    files.sort();
    let files: Vec<SourceFile> = files
        .into_iter()
        .map(|f| SourceFile {
            module: module_path(src, &f),
            rel: f
                .strip_prefix(src.parent().unwrap())
                .unwrap()
                .display()
                .to_string(),
            code: strip_tests(&strip_comments_and_strings(&fs::read(&f).unwrap())),
        })
        .collect();
    let index: BTreeMap<Vec<String>, usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.module.clone(), i))
        .collect();
    let children = |m: &[String]| -> BTreeSet<String> {
        index
            .keys()
            .filter(|k| k.len() == m.len() + 1 && k.starts_with(m))
            .map(|k| k.last().unwrap().clone())
            .collect()
    };
    // Per file: its uses, and its re-exports as name → absolute path.
    let mut uses = Vec::new();
    let mut reexports: Vec<BTreeMap<String, Vec<String>>> = Vec::new();
    for f in &files {
        let kids = children(&f.module);
        let inline = inline_modules(&f.code);
        let (u, r) = paths(&f.code, &kids);
        let line = |at: usize| f.code[..at].iter().filter(|&&c| c == b'\n').count() + 1;
        uses.push(
            u.into_iter()
                .filter_map(|(at, segs)| Some((line(at), absolute(f, &inline, &kids, at, &segs)?)))
                .collect::<Vec<_>>(),
        );
        let mut names = BTreeMap::new();
        for (at, mut leaf) in r {
            let alias = match leaf.last() {
                Some(l) if l.starts_with("as ") => Some(leaf.pop().unwrap()[3..].to_string()),
                _ => None,
            };
            let Some(name) = alias.or_else(|| leaf.last().cloned()) else {
                continue;
            };
            if let Some(abs) = absolute(f, &inline, &kids, at, &leaf) {
                names.insert(name, abs);
            }
        }
        reexports.push(names);
    }
    // The file defining what an absolute path names.
    let resolve = |path: &[String]| -> Option<usize> {
        let mut path = path.to_vec();
        for _ in 0..16 {
            let (len, &file) = (0..=path.len())
                .rev()
                .find_map(|n| index.get(&path[..n]).map(|f| (n, f)))?;
            let Some(item) = path.get(len) else {
                return Some(file);
            };
            match reexports[file].get(item) {
                Some(target) if target.as_slice() != &path[..=len] => {
                    let mut next = target.clone();
                    next.extend_from_slice(&path[len + 1..]);
                    path = next;
                }
                _ => return Some(file),
            }
        }
        None
    };
    let name = |i: usize| files[i].module.join("::");
    let mut graph: Graph = files
        .iter()
        .filter(|f| !f.module.is_empty())
        .map(|f| (f.module.join("::"), BTreeMap::new()))
        .collect();
    for (i, f) in files.iter().enumerate() {
        if f.module.is_empty() {
            continue;
        }
        for (line, path) in &uses[i] {
            let Some(to) = resolve(path).filter(|&t| t != i && !files[t].module.is_empty()) else {
                continue;
            };
            let at = format!("{}:{line}", f.rel);
            let lines = graph
                .get_mut(&name(i))
                .unwrap()
                .entry(name(to))
                .or_default();
            if !lines.contains(&at) {
                lines.push(at);
            }
        }
    }
    graph
}

/// After a path prefix ending at `end` (`crate`, or the last `super`): the
/// first segment(s) that follow `::`, one per item of a `{…}` group.
fn first_segments(code: &[u8], end: usize) -> Vec<String> {
    let i = skip_ws(code, end);
    if !code[i..].starts_with(b"::") {
        return Vec::new();
    }
    let i = skip_ws(code, i + 2);
    if code.get(i) == Some(&b'{') {
        let close = matching(code, i);
        let mut out = Vec::new();
        let (mut depth, mut start) = (0, i + 1);
        for j in i + 1..=close {
            match code[j] {
                b'{' => depth += 1,
                b'}' if depth > 0 => depth -= 1,
                b',' | b'}' if depth == 0 => {
                    if let Some((w, _)) = word_at(code, skip_ws(code, start)) {
                        out.push(w);
                    }
                    start = j + 1;
                }
                _ => {}
            }
        }
        out
    } else {
        word_at(code, i).map(|(w, _)| vec![w]).unwrap_or_default()
    }
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn skip_ws(code: &[u8], mut i: usize) -> usize {
    while code.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
        i += 1;
    }
    i
}

fn word_at(code: &[u8], i: usize) -> Option<(String, usize)> {
    let len = code[i.min(code.len())..]
        .iter()
        .take_while(|&&c| is_ident(c))
        .count();
    (len > 0).then(|| {
        (
            String::from_utf8_lossy(&code[i..i + len]).into_owned(),
            i + len,
        )
    })
}

/// Every occurrence of `word` as a whole identifier: (start, end).
fn find_word(code: &[u8], word: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(p) = code[i..].windows(word.len()).position(|w| w == word) {
        let (s, e) = (i + p, i + p + word.len());
        if (s == 0 || !is_ident(code[s - 1])) && code.get(e).is_none_or(|&c| !is_ident(c)) {
            out.push((s, e));
        }
        i = e;
    }
    out
}

/// Index of the brace closing the one at `open` (or the end of the code).
fn matching(code: &[u8], open: usize) -> usize {
    let mut depth = 0;
    for (j, &c) in code.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
    }
    code.len() - 1
}

/// Byte ranges of the `mod name { … }` blocks in a file.
fn inline_modules(code: &[u8]) -> Vec<(usize, usize)> {
    find_word(code, b"mod")
        .into_iter()
        .filter_map(|(_, e)| {
            let (_, e) = word_at(code, skip_ws(code, e))?;
            let open = skip_ws(code, e);
            (code.get(open) == Some(&b'{')).then(|| (open, matching(code, open)))
        })
        .collect()
}

/// Blanks out every item marked `#[cfg(test)]` (up to its `;` or its braces).
fn strip_tests(code: &[u8]) -> Vec<u8> {
    let mut code = code.to_vec();
    let attr = b"#[cfg(test)]";
    while let Some(s) = code.windows(attr.len()).position(|w| w == attr) {
        let body = s + attr.len();
        let semi = code[body..]
            .iter()
            .position(|&c| c == b';')
            .map(|p| body + p);
        let brace = code[body..]
            .iter()
            .position(|&c| c == b'{')
            .map(|p| body + p);
        let end = match (semi, brace) {
            (Some(a), Some(b)) if a < b => a,
            (_, Some(b)) => matching(&code, b),
            (Some(a), None) => a,
            (None, None) => code.len() - 1,
        };
        code[s..=end]
            .iter_mut()
            .for_each(|c| *c = if *c == b'\n' { b'\n' } else { b' ' });
    }
    code
}

/// Blanks out comments, string and char literals, keeping line breaks.
fn strip_comments_and_strings(src: &[u8]) -> Vec<u8> {
    let mut out = src.to_vec();
    let blank = |out: &mut [u8], s: usize, e: usize| {
        out[s..e].iter_mut().for_each(|c| {
            if *c != b'\n' {
                *c = b' '
            }
        })
    };
    let mut i = 0;
    while i < src.len() {
        let rest = &src[i..];
        if rest.starts_with(b"//") {
            let e = rest
                .iter()
                .position(|&c| c == b'\n')
                .map_or(src.len(), |p| i + p);
            blank(&mut out, i, e);
            i = e;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0, i);
            while j < src.len() {
                if src[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if src[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if (rest.starts_with(b"r\"") || rest.starts_with(b"r#") || rest.starts_with(b"br"))
            && (i == 0 || !is_ident(src[i - 1]))
        {
            let start = i + if rest[0] == b'b' { 2 } else { 1 };
            let hashes = src[start..].iter().take_while(|&&c| c == b'#').count();
            if src.get(start + hashes) != Some(&b'"') {
                i += 1;
                continue;
            }
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let body = start + hashes + 1;
            let e = src[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(src.len(), |p| body + p + close.len());
            blank(&mut out, i, e);
            i = e;
        } else if rest[0] == b'"' {
            let mut j = i + 1;
            while j < src.len() && src[j] != b'"' {
                j += if src[j] == b'\\' { 2 } else { 1 };
            }
            let e = (j + 1).min(src.len());
            blank(&mut out, i, e);
            i = e;
        } else if rest[0] == b'\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            let e = if rest.get(1) == Some(&b'\\') {
                rest[2..]
                    .iter()
                    .position(|&c| c == b'\'')
                    .map(|p| i + 2 + p + 1)
            } else {
                let ch = std::str::from_utf8(&rest[1..rest.len().min(5)])
                    .ok()
                    .or_else(|| std::str::from_utf8(&rest[1..rest.len().min(2)]).ok())
                    .and_then(|s| s.chars().next())
                    .map_or(1, char::len_utf8);
                (rest.get(1 + ch) == Some(&b'\'')).then_some(i + ch + 2)
            };
            match e {
                Some(e) => {
                    blank(&mut out, i, e);
                    i = e;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Strongly connected components of more than one module, each sorted.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    // Tarjan's algorithm, recursive: graphs here have a few dozen nodes.
    struct State<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph[v].keys() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                scc.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                s.out.push(scc);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out.sort();
    s.out
}
