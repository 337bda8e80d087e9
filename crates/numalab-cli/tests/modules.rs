//! The house rule on imports, checked on the source: no module of the
//! library, the engines or the CLI imports one that imports it back, and
//! no `cmd/` file imports another (what two commands share lives in a named
//! module beside `cmd/`). See docs/architecture.md.
//!
//! Each source file is a module; a path the code names (`crate::a::b`,
//! `super::c`, a `use` group) points at the deepest module it reaches.
//! Between a module and its own children nothing is checked (a folder's
//! `mod.rs` re-exports what its files define). Every other reference is
//! lifted to the two siblings under the modules' common parent, and the
//! siblings of each parent must form no cycle. Test code (`#[cfg(test)]`
//! modules) is left out: tests may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

type ModPath = Vec<String>;

/// One reference from a file to a module, with where it was written.
struct Edge {
    from: ModPath,
    to: ModPath,
    at: String,
}

/// The `.rs` files of one crate under `src`, as module paths, leaving out
/// files declared by a `#[cfg(test)] mod name;`.
fn modules(src: &Path) -> BTreeMap<ModPath, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("a readable source directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).expect("below src");
            let mut segments: ModPath = relative
                .with_extension("")
                .iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect();
            let last = segments.last().cloned().unwrap_or_default();
            if matches!(last.as_str(), "mod" | "lib" | "main") {
                segments.pop();
            }
            // Only the crate root may be lib.rs / main.rs; bin/ targets
            // are crates of their own and are not walked.
            if segments.first().is_some_and(|s| s == "bin") {
                continue;
            }
            out.insert(segments, path);
        }
    }
    let test_only: Vec<ModPath> = out
        .iter()
        .flat_map(|(module, path)| {
            let text = fs::read_to_string(path).expect("a readable source file");
            test_only_children(&text)
                .into_iter()
                .map(|child| {
                    let mut m = module.clone();
                    m.push(child);
                    m
                })
                .collect::<Vec<_>>()
        })
        .collect();
    out.retain(|module, _| !test_only.iter().any(|t| module.starts_with(t)));
    out
}

/// Children declared `#[cfg(test)] mod name;` (their files are test code).
fn test_only_children(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut out = Vec::new();
    for pair in lines.windows(2) {
        if pair[0] == "#[cfg(test)]" {
            let decl = pair[1]
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            if let Some(name) = decl.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
                out.push(name.to_string());
            }
        }
    }
    out
}

/// The file's production code: comments removed, and everything from a
/// top-level `#[cfg(test)]` inline module on dropped.
fn production_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((n, line)) = lines.next() {
        if line == "#[cfg(test)]" {
            if let Some((_, next)) = lines.peek() {
                if next.starts_with("mod ") && next.ends_with('{') {
                    break;
                }
            }
        }
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        out.push((n + 1, code.to_string()));
    }
    out
}

/// Every path starting at `crate::`, `super::` or `self::` in `code`,
/// with `use` groups expanded (`crate::a::{b, c::d}` is `crate::a::b` and
/// `crate::a::c::d`), as segment lists.
fn named_paths(code: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        let rest: String = chars[i..].iter().take(7).collect();
        if starts_word
            && (rest.starts_with("crate::")
                || rest.starts_with("super::")
                || rest.starts_with("self::"))
        {
            let (paths, end) = path_tree(&chars, i);
            out.extend(paths);
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// The paths written from `start` (a path, possibly ending in a `{…}`
/// group), and where they end.
fn path_tree(chars: &[char], start: usize) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    let mut i = start;
    loop {
        let word_start = i;
        while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
            i += 1;
        }
        if i > word_start {
            prefix.push(chars[word_start..i].iter().collect::<String>());
        }
        if i + 1 < chars.len() && chars[i] == ':' && chars[i + 1] == ':' {
            i += 2;
            if i < chars.len() && chars[i] == '{' {
                let mut paths = Vec::new();
                i += 1;
                loop {
                    while i < chars.len() && (chars[i] == ' ' || chars[i] == ',') {
                        i += 1;
                    }
                    if i >= chars.len() || chars[i] == '}' {
                        break;
                    }
                    let (inner, end) = path_tree(chars, i);
                    if inner.is_empty() {
                        paths.push(prefix.clone());
                    }
                    for p in inner {
                        let mut full = prefix.clone();
                        full.extend(p);
                        paths.push(full);
                    }
                    // `self`, `*` or ` as name` end a member: skip to the
                    // next separator.
                    i = end.max(i + 1);
                    while i < chars.len() && chars[i] != ',' && chars[i] != '}' {
                        i += 1;
                    }
                }
                return (paths, i + 1);
            }
            continue;
        }
        return (vec![prefix], i);
    }
}

/// `path` as written in `module`, made absolute (`super` and `self`
/// resolved), or None when it leaves the crate.
fn absolute(module: &ModPath, path: &[String]) -> Option<ModPath> {
    let mut out = module.clone();
    let mut segments = path.iter().peekable();
    match segments.peek().map(|s| s.as_str()) {
        Some("crate") => {
            out.clear();
            segments.next();
        }
        Some("self") => {
            segments.next();
        }
        _ => {}
    }
    while segments.peek().is_some_and(|s| *s == "super") {
        segments.next();
        out.pop()?;
    }
    out.extend(segments.filter(|s| *s != "self").cloned());
    Some(out)
}

/// The references between modules of the crate under `src`.
fn edges(src: &Path) -> Vec<Edge> {
    let modules = modules(src);
    let mut out = Vec::new();
    for (module, path) in &modules {
        let text = fs::read_to_string(path).expect("a readable source file");
        let display = path
            .strip_prefix(src.parent().unwrap())
            .unwrap()
            .display()
            .to_string();
        for (line, code) in production_lines(&text) {
            for named in named_paths(&code) {
                let Some(target) = absolute(module, &named) else {
                    continue;
                };
                let to = (0..=target.len())
                    .rev()
                    .map(|n| target[..n].to_vec())
                    .find(|m| modules.contains_key(m))
                    .unwrap_or_default();
                if &to != module {
                    out.push(Edge {
                        from: module.clone(),
                        to,
                        at: format!("{display}:{line}"),
                    });
                }
            }
        }
    }
    out
}

/// The reference lifted to the siblings under the common parent, or None
/// between a module and one of its ancestors.
fn siblings(edge: &Edge) -> Option<(ModPath, String, String)> {
    let common = edge
        .from
        .iter()
        .zip(&edge.to)
        .take_while(|(a, b)| a == b)
        .count();
    if common == edge.from.len() || common == edge.to.len() {
        return None;
    }
    Some((
        edge.from[..common].to_vec(),
        edge.from[common].clone(),
        edge.to[common].clone(),
    ))
}

/// The cycles among the siblings of each parent, each named with the
/// references that make it.
fn cycles(edges: &[Edge]) -> Vec<String> {
    let mut graph: BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for edge in edges {
        if let Some((parent, a, b)) = siblings(edge) {
            graph
                .entry(parent)
                .or_default()
                .entry(a)
                .or_default()
                .insert(b);
        }
    }
    let mut out = Vec::new();
    for (parent, nodes) in &graph {
        let reach = |from: &str| {
            let mut seen = BTreeSet::new();
            let mut todo = vec![from.to_string()];
            while let Some(n) = todo.pop() {
                for next in nodes.get(&n).into_iter().flatten() {
                    if seen.insert(next.clone()) {
                        todo.push(next.clone());
                    }
                }
            }
            seen
        };
        let mut reported = BTreeSet::new();
        for a in nodes.keys() {
            let from_a = reach(a);
            if !from_a.contains(a) || reported.contains(a) {
                continue;
            }
            let circle: BTreeSet<String> = from_a
                .iter()
                .filter(|b| reach(b).contains(a))
                .cloned()
                .collect();
            reported.extend(circle.iter().cloned());
            let mut text = format!(
                "{} ↔ {}:",
                if parent.is_empty() {
                    "crate".to_string()
                } else {
                    parent.join("::")
                },
                circle.iter().cloned().collect::<Vec<_>>().join(" ↔ ")
            );
            let mut lines = BTreeSet::new();
            for edge in edges {
                if let Some((p, x, y)) = siblings(edge) {
                    if &p == parent && circle.contains(&x) && circle.contains(&y) {
                        lines.insert(format!("{} uses {}", edge.at, edge.to.join("::")));
                    }
                }
            }
            for line in lines {
                let _ = write!(text, "\n    {line}");
            }
            out.push(text);
        }
    }
    out
}

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src")
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let mut found = Vec::new();
    for name in ["numalab", "numalab-bench", "numalab-cli"] {
        for cycle in cycles(&edges(&crate_src(name))) {
            found.push(format!("{name}: {cycle}"));
        }
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn no_command_imports_another() {
    let found: Vec<String> = edges(&crate_src("numalab-cli"))
        .iter()
        .filter_map(|edge| {
            let (parent, a, b) = siblings(edge)?;
            (parent == ["cmd"]).then(|| format!("{}: cmd::{a} uses cmd::{b}", edge.at))
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(
        found.is_empty(),
        "cmd/ files import each other (move what they share beside cmd/):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_reader_sees_paths_and_groups() {
    let paths = named_paths("use crate::a::{b, c::{d, e as f}, self}; let x = super::g::h(1);");
    let written: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        written,
        [
            "crate::a::b",
            "crate::a::c::d",
            "crate::a::c::e",
            "crate::a::self",
            "super::g::h"
        ]
    );
    let module: ModPath = vec!["x".into(), "y".into()];
    let up = absolute(&module, &["super".into(), "z".into()]).unwrap();
    assert_eq!(up, ["x", "z"]);
    // A made-up circle is found, with the references that make it.
    let edge = |from: &[&str], to: &[&str], at: &str| Edge {
        from: from.iter().map(|s| s.to_string()).collect(),
        to: to.iter().map(|s| s.to_string()).collect(),
        at: at.into(),
    };
    let found = cycles(&[
        edge(&["p", "a"], &["p", "b", "inner"], "a.rs:1"),
        edge(&["p", "b", "inner"], &["p", "a"], "b/inner.rs:2"),
        edge(&["p", "b"], &["p", "b", "inner"], "b/mod.rs:3"),
    ]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("p ↔ a ↔ b:"), "{}", found[0]);
    assert!(found[0].contains("a.rs:1") && found[0].contains("b/inner.rs:2"));
    assert!(!found[0].contains("b/mod.rs:3"));
}
