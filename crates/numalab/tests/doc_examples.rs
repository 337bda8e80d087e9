//! Every public type of the library crates (`numalab`, `numalab-bench`) has
//! a rustdoc example: a code block in its doc comment, which `cargo test
//! --doc` compiles and runs. A newcomer reading `cargo doc` sees each type
//! used before reading its fields.
//!
//! This reads the sources as text: an item is `pub struct`, `pub enum`,
//! `pub trait`, `pub union` or `pub type` at any indentation, outside test
//! modules and outside `sys/` (crate-private: the syscall layer).

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "sys") {
                continue;
            }
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The public types in `text` whose doc comment has no code block.
fn without_examples(text: &str) -> Vec<(usize, String)> {
    const KINDS: [&str; 5] = ["struct ", "enum ", "trait ", "union ", "type "];
    let lines: Vec<&str> = text.lines().collect();
    let mut missing = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("mod tests") || trimmed.starts_with("mod models") {
            break; // test modules come last in a file, by the house style
        }
        let Some(rest) = trimmed.strip_prefix("pub ") else {
            continue;
        };
        let Some(kind) = KINDS.iter().find(|k| rest.starts_with(**k)) else {
            continue;
        };
        let name: String = rest[kind.len()..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue; // `pub struct $name` inside a macro: its uses are documented
        }
        // Walk back over attributes (one or several lines) to the doc comment.
        let mut j = i;
        let mut has_example = false;
        let mut in_attribute = false;
        while j > 0 {
            j -= 1;
            let above = lines[j].trim();
            if above.starts_with("///") {
                has_example |= above.contains("```");
            } else if above.starts_with("#[") {
                in_attribute = false;
            } else if above.ends_with(")]") || above.ends_with(',') || in_attribute {
                in_attribute = true; // inside a multi-line attribute
            } else {
                break;
            }
        }
        if !has_example {
            missing.push((i + 1, name));
        }
    }
    missing
}

#[test]
fn every_public_type_has_an_example() {
    let crates = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for name in ["numalab", "numalab-bench"] {
        sources(&crates.join(name).join("src"), &mut files);
    }
    files.sort();
    assert!(
        files.len() > 20,
        "sources not found under {}",
        crates.display()
    );
    let mut report = String::new();
    let mut types = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        types += text.matches("pub struct ").count() + text.matches("pub enum ").count();
        for (line, name) in without_examples(&text) {
            report.push_str(&format!("{}:{line}: {name}\n", file.display()));
        }
    }
    assert!(types > 100, "only {types} public types found");
    assert!(
        report.is_empty(),
        "public types without a rustdoc example:\n{report}"
    );
}

#[test]
fn the_check_sees_attributes_and_missing_examples() {
    let text = "/// A thing.\n///\n/// ```\n/// let _ = 1;\n/// ```\n#[derive(\n    Debug,\n    Clone,\n)]\npub struct Documented;\n\n/// No example.\n#[derive(Debug)]\npub enum Bare {}\n";
    assert_eq!(without_examples(text), vec![(14, "Bare".to_owned())]);
}
