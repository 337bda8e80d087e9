//! Every result numalab prints goes through one path: [`Render`].
//!
//! A result type (defined with its measurement in `numalab-bench`)
//! implements [`Render`] in `render/<name>.rs`: its tables for a terminal or
//! as Markdown, and its CSV. JSON is the same for every result: the type's
//! fields in numalab's envelope ([`numalab_bench::document`]). The command
//! calls [`emit`], which picks the format from the flags, writes to standard
//! output or atomically to `-o FILE`, and repeats the result's warnings on
//! standard error when standard output is not a table a person reads.

pub mod advise;
pub mod check;
pub mod exec;
pub mod experiment;
pub mod figures;
pub mod fill;
pub mod fincore;
pub mod fleet;
pub mod matrix;
pub mod page;
pub mod pagecache;
pub mod profile;
pub mod report;
pub mod ring;
pub mod svg;
pub mod topo;

use std::fmt::Write as _;

use anyhow::Result;
use comfy_table::Table;
use numalab_bench::document::{Document, Schema};
use serde::Serialize;

use crate::output::{self, Format, OutputArgs};

/// Text safe inside HTML and SVG, in text and in quoted attributes; a
/// control character is written as its `\xNN` escape, never raw.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// `kernel.numa_balancing` in words: off, on, or the memory-tiering mode
/// (2: hot pages on a slower tier promoted to a faster one).
pub fn numa_balancing(state: Option<u32>) -> String {
    use numalab_bench::host::fingerprint::balancing_word;
    // The word every command uses (fleet's column too), with what the
    // tiering modes do.
    match state {
        Some(2 | 3) => format!(
            "{} (hot pages promoted to faster memory tiers)",
            balancing_word(state)
        ),
        Some(0 | 1) => balancing_word(state).into_owned(),
        Some(v) => format!("mode {v}"),
        None => "not in this kernel".into(),
    }
}

/// Plain columns or Markdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Columns for a terminal or a pipe.
    Plain,
    /// GitHub Markdown.
    Markdown,
}

impl Style {
    /// A report's top-level section: `== title` in columns, `## title`
    /// in Markdown, a blank line before and after.
    pub fn section(self, title: &str) -> String {
        match self {
            Style::Plain => format!("\n== {title}\n\n"),
            Style::Markdown => format!("\n## {title}\n\n"),
        }
    }

    /// A table with `header` in this style.
    pub fn table(self, header: impl Into<comfy_table::Row>) -> Table {
        match self {
            Style::Plain => output::table(header),
            Style::Markdown => output::markdown_table(header),
        }
    }

    /// A table's lines, trailing spaces trimmed.
    pub fn render(self, table: &Table) -> String {
        output::render(table)
    }

    /// A warning line.
    pub fn warning(self, text: &str) -> String {
        match self {
            Style::Plain => format!("WARNING: {text}\n"),
            Style::Markdown => format!("> **Warning:** {text}\n\n"),
        }
    }

    /// A paragraph of one line.
    pub fn line(self, text: &str) -> String {
        match self {
            Style::Plain => format!("{text}\n"),
            Style::Markdown => format!("{text}\n\n"),
        }
    }

    /// A name from outside (a file's path, a host's name) as one table
    /// cell: control characters written as escapes (`\n`, `\x1b`), and
    /// in Markdown `\` and `|` escaped too, so a name cannot close its
    /// cell and forge the ones after it, and `<` written `&lt;`, so a
    /// name is never taken for HTML by a viewer that renders it.
    pub fn field(self, text: &str) -> String {
        let text = output::printable_field(text);
        match self {
            Style::Plain => text.into_owned(),
            Style::Markdown => text
                .replace('\\', "\\\\")
                .replace('|', "\\|")
                .replace('<', "&lt;"),
        }
    }

    /// A section heading.
    pub fn heading(self, text: &str) -> String {
        match self {
            Style::Plain => format!("{text}\n"),
            Style::Markdown => format!("### {text}\n\n"),
        }
    }
}

/// A result numalab prints. Its JSON is its fields in numalab's envelope,
/// under the schema the result names ([`Schema`]).
pub trait Render: Serialize + Schema {
    /// Tables and lines for people: plain columns or Markdown.
    fn text(&self, style: Style) -> String;

    /// CSV rows.
    fn csv(&self) -> String;

    /// The JSON document.
    fn json(&self) -> Result<String> {
        Ok(Document::new(self).to_json()?)
    }

    /// Warnings that every format must carry to a person: repeated on
    /// standard error when standard output is JSON or CSV.
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
}

/// `result` as text in `format`. Tables and Markdown are for people: any
/// control character a name carried is shown as an escape
/// ([`output::printable`]); JSON escapes them itself.
pub fn to_string<R: Render + ?Sized>(result: &R, format: Format) -> Result<String> {
    Ok(match format {
        Format::Json => result.json()?,
        Format::Csv => result.csv(),
        Format::Table => output::printable(&result.text(Style::Plain)).into_owned(),
        Format::Markdown => output::printable(&result.text(Style::Markdown)).into_owned(),
    })
}

/// Writes `result` as the output flags ask: to standard output or
/// atomically to a file, with its warnings on standard error when the
/// format is not a table.
pub fn emit<R: Render + ?Sized>(result: &R, out: &OutputArgs) -> Result<()> {
    let format = out.format();
    let text = to_string(result, format)?;
    if !out.table_on_stdout() {
        for warning in result.warnings() {
            eprintln!("numalab: warning: {}", output::printable(&warning));
        }
    }
    out.emit(&text)
}
