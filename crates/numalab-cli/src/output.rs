//! How numalab prints: tables for people on a terminal, JSON and CSV for
//! programs, files written atomically, nothing decorative on a pipe.

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use comfy_table::{presets, ContentArrangement, Table};

/// Output options shared by every command.
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// Print JSON (a versioned schema, for scripts and for merging results
    /// from many machines) instead of tables
    #[arg(long, conflicts_with_all = ["csv", "markdown"])]
    pub json: bool,

    /// Print CSV instead of tables
    #[arg(long, conflicts_with = "markdown")]
    pub csv: bool,

    /// Print Markdown tables
    #[arg(long)]
    pub markdown: bool,

    /// Write the result to FILE (a regular file, replaced whole: never a
    /// link, device or FIFO; an existing file keeps its mode) instead of
    /// standard output (`-`: standard output, where a command would
    /// otherwise report on standard error); the format follows
    /// --json/--csv/--markdown, else the extension (.json, .csv, .md),
    /// else JSON
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// The format chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Human tables.
    Table,
    /// JSON document.
    Json,
    /// CSV rows.
    Csv,
    /// Markdown tables.
    Markdown,
}

impl OutputArgs {
    /// The format to produce.
    pub fn format(&self) -> Format {
        if self.json {
            Format::Json
        } else if self.csv {
            Format::Csv
        } else if self.markdown {
            Format::Markdown
        } else if let Some(path) = &self.output {
            match path.extension().and_then(|e| e.to_str()) {
                Some("csv") => Format::Csv,
                Some("md") => Format::Markdown,
                Some("txt") => Format::Table,
                _ => Format::Json,
            }
        } else {
            Format::Table
        }
    }

    /// The file `-o` names; `None` for none, or for `-o -` (standard
    /// output).
    pub fn file(&self) -> Option<&Path> {
        self.output
            .as_deref()
            .filter(|path| path.as_os_str() != "-")
    }

    /// Whether `-o -` asked for standard output.
    pub fn stdout_asked(&self) -> bool {
        self.output.is_some() && self.file().is_none()
    }

    /// Whether the result is a table for a person on standard output
    /// (no `-o`, no other format): the one output that does not repeat
    /// failures and warnings on standard error itself.
    pub fn table_on_stdout(&self) -> bool {
        self.format() == Format::Table && self.output.is_none()
    }

    /// Refuses an output file that could not be written (its directory
    /// missing, a link or a device there), before anything is measured.
    pub fn check(&self) -> Result<()> {
        match self.file() {
            Some(path) => check_target(path),
            None => Ok(()),
        }
    }

    /// Writes a report that goes to standard error unless `-o` says
    /// otherwise (exec's and profile's: the command owns standard
    /// output): to the file, to standard output for `-o -`.
    pub fn emit_report(&self, text: &str) -> Result<()> {
        match self.file() {
            Some(path) => write_atomically(path, text.as_bytes()),
            None if self.stdout_asked() => print_stdout(text),
            None => {
                eprint!("{text}");
                Ok(())
            }
        }
    }

    /// Writes `text` to the output file, or to standard output.
    pub fn emit(&self, text: &str) -> Result<()> {
        match self.file() {
            Some(path) => {
                write_atomically(path, text.as_bytes())?;
                if io::stderr().is_terminal() {
                    eprintln!("wrote {}", printable_field(&path.display().to_string()));
                }
                Ok(())
            }
            None => print_stdout(text),
        }
    }
}

/// `text` safe to show on a terminal: every control character but newline
/// and tab (ESC, carriage return, backspace, C1 codes such as CSI) written
/// as a visible escape, `\x1b`, so a name from an experiment file or a
/// saved result cannot clear the screen, move the cursor or retitle the
/// terminal. Tables, Markdown, warnings and errors go through it.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    escape_controls(text, true)
}

/// One field of a table or one name in a line (a file's path, a host's
/// name) safe to show: [`printable`], and newlines and tabs too (`\n`,
/// `\t`), so a file named `x\ny` cannot forge a row or a line of its own.
pub fn printable_field(text: &str) -> std::borrow::Cow<'_, str> {
    escape_controls(text, false)
}

/// Unicode's bidirectional controls (embeddings, overrides, isolates,
/// marks): printed, they reorder what follows (`bidi\u{202e}txt.exe`
/// shows as `bidiexe.txt`), so a name could pass for another.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with its control characters written as visible escapes (a
/// bidirectional control as `\u{202e}`); newlines and tabs kept as they
/// are when `keep_layout`.
fn escape_controls(text: &str, keep_layout: bool) -> std::borrow::Cow<'_, str> {
    let kept = |c: char| {
        (!c.is_control() && !is_bidi_control(c)) || (keep_layout && matches!(c, '\n' | '\t'))
    };
    if text.chars().all(kept) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if kept(c) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if is_bidi_control(c) => {
                let _ = std::fmt::Write::write_fmt(&mut out, format_args!("\\u{{{:x}}}", c as u32));
            }
            c => {
                let _ = std::fmt::Write::write_fmt(&mut out, format_args!("\\x{:02x}", c as u32));
            }
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Prints to stdout; a closed pipe (`numalab topo | head`) is not an error.
pub fn print_stdout(text: &str) -> Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing to standard output"),
    }
}

/// Refuses `path` as an output file unless [`write_atomically`] could
/// write it: its directory exists, and nothing but a regular file is there.
pub fn check_target(path: &Path) -> Result<()> {
    numalab::files::check_output(path)
        .map(|_| ())
        .map_err(output_error)
}

/// Refuses an `--html` page that [`check_target`] would, and `-`: the
/// page is a file of its own (with a directory of host pages beside it
/// for `fleet`), never standard output, where `-o -` sends the result.
pub fn check_page_target(path: &Path) -> Result<()> {
    if path == Path::new("-") {
        anyhow::bail!(
            "--html -: the page is written to a file; name one (-o - prints the result itself)"
        );
    }
    check_target(path)
}

/// Refuses two outputs of one command that name the same file: the
/// later write would silently replace the earlier (`profile --emit X -o
/// X`). The same file: the same path, or, where both exist, the same
/// device and inode (a hard link, `./x` and `x`), or where one does not
/// exist yet, the same name in the same directory.
pub fn distinct_targets(targets: &[(&str, &Path)]) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let identity = |path: &Path| -> Option<(u64, u64, Option<std::ffi::OsString>)> {
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            return Some((meta.dev(), meta.ino(), None));
        }
        let name = path.file_name()?.to_owned();
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let meta = std::fs::metadata(parent).ok()?;
        Some((meta.dev(), meta.ino(), Some(name)))
    };
    for (i, (flag, path)) in targets.iter().enumerate() {
        for (other_flag, other) in &targets[..i] {
            let same =
                path == other || identity(path).is_some_and(|id| identity(other) == Some(id));
            if same {
                anyhow::bail!(
                    "{other_flag} {} and {flag} {} are the same file: the second would replace the first; give each its own",
                    other.display(),
                    path.display()
                );
            }
        }
    }
    Ok(())
}

/// A command's result file (`-o`) and HTML page (`--html`), each named
/// by its flag, for [`distinct_targets`] and [`not_an_input`].
pub fn file_and_page<'a>(
    file: Option<&'a Path>,
    page: Option<&'a Path>,
) -> Vec<(&'static str, &'a Path)> {
    let file = file.map(|path| ("--output", path));
    file.into_iter()
        .chain(page.map(|page| ("--html", page)))
        .collect()
}

/// The device and inode of the file at `path` (not following a link),
/// if there is one.
pub fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|meta| (meta.dev(), meta.ino()))
}

/// An input as [`not_an_input`] knows it: what to call it (`what` and the
/// path) and the device and inode of the file read, a link followed as
/// reading it follows one; `None` when there is none.
pub fn input(what: &str, path: &Path) -> Option<(String, (u64, u64))> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    let shown = printable_field(&path.display().to_string()).into_owned();
    Some((
        format!("{what} {shown}").trim_start().to_owned(),
        (meta.dev(), meta.ino()),
    ))
}

/// Refuses `-o` naming the one file a command reads (`what`: how to call
/// it): `run e.toml -o e.toml` would replace its experiment.
pub fn not_over_input(output: Option<&Path>, what: &str, path: &Path) -> Result<()> {
    let read: Vec<_> = input(what, path).into_iter().collect();
    not_an_input(&file_and_page(output, None), &read)
}

/// Refuses `-o` naming one of the `paths` a command was given, or (when
/// it exists) a file inside a directory it was given: `fincore data -o
/// data` or `pagecache load f -o f` would replace the file they were
/// asked about.
pub fn not_over_paths(output: Option<&Path>, paths: &[PathBuf]) -> Result<()> {
    let Some(out) = output else {
        return Ok(());
    };
    let inputs: Vec<_> = paths.iter().filter_map(|p| input("", p)).collect();
    not_an_input(&[("--output", out)], &inputs)?;
    let Ok(real) = std::fs::canonicalize(out) else {
        return Ok(());
    };
    for dir in paths.iter().filter(|p| p.is_dir()) {
        if std::fs::canonicalize(dir).is_ok_and(|dir| real.starts_with(dir)) {
            anyhow::bail!(
                "--output {} is inside {}, which this command reads: writing it would replace a file it looks at; name a file elsewhere",
                printable_field(&out.display().to_string()),
                printable_field(&dir.display().to_string())
            );
        }
    }
    Ok(())
}

/// Refuses an output that is one of the files the command reads (each
/// input: what to call it, and its device and inode): writing it would
/// replace what was read (`report --from r.json --html r.json`, `fleet
/// DIR -o DIR/host.json`), and a saved measurement cannot be made again
/// from a page.
pub fn not_an_input(outputs: &[(&str, &Path)], inputs: &[(String, (u64, u64))]) -> Result<()> {
    for (flag, path) in outputs {
        let Some(id) = file_id(path) else {
            continue;
        };
        if let Some((input, _)) = inputs.iter().find(|(_, read)| *read == id) {
            anyhow::bail!(
                "{flag} {} is {input}, which this command reads: writing it would replace it; name another file",
                printable(&path.display().to_string())
            );
        }
    }
    Ok(())
}

/// Replaces the file at `path` with `bytes`, atomically (a reader sees the
/// old file or the new one), keeping an existing file's mode; a link, a
/// device or a FIFO there is refused, and a failure leaves nothing behind.
/// See [`numalab::files::write_output`].
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    numalab::files::write_output(path, bytes).map_err(output_error)
}

/// The library's error, with what to do instead.
fn output_error(err: numalab::files::OutputError) -> anyhow::Error {
    use numalab::files::OutputError;
    let hint = match &err {
        OutputError::NotAFile {
            kind: "directory", ..
        } => "; name a file in it",
        OutputError::NotAFile {
            kind: "symbolic link",
            ..
        } => "; name the file it points to, or leave out -o to print the result",
        OutputError::NotAFile { .. } => {
            "; leave out -o to print the result (and redirect it where it should go)"
        }
        OutputError::NoDirectory { .. } => "; create it first",
        _ => "",
    };
    anyhow::anyhow!("{err}{hint}")
}

/// A table in numalab's style: light rules on a terminal, plain columns on
/// a pipe or in a file.
pub fn table(header: impl Into<comfy_table::Row>) -> Table {
    let mut table = Table::new();
    table.load_style(presets::NOTHING);
    table.set_content_arrangement(ContentArrangement::Disabled);
    table.set_header(header);
    table
}

/// The lines [`table`] and [`render`] make of `header` and `rows`, without
/// holding the rows as cells: `rows` is called twice, once to measure
/// each column and once to write the lines, so a table of a million rows
/// (`numalab fincore` of a large tree) costs its text and no more.
pub fn plain_table<I>(header: &[String], rows: impl Fn() -> I) -> String
where
    I: Iterator<Item = Vec<String>>,
{
    let width = |cell: &str| cell.chars().count();
    let mut widths: Vec<usize> = header.iter().map(|h| width(h)).collect();
    for row in rows() {
        for (w, cell) in widths.iter_mut().zip(&row) {
            *w = (*w).max(width(cell));
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[String]| {
        let start = out.len();
        for (cell, w) in cells.iter().zip(&widths) {
            out.push(' ');
            out.push_str(cell);
            out.extend(std::iter::repeat_n(' ', w - width(cell) + 1));
        }
        out.truncate(out[start..].trim_end().len() + start);
        out.push('\n');
    };
    line(header);
    for row in rows() {
        line(&row);
    }
    out
}

/// A Markdown table.
pub fn markdown_table(header: impl Into<comfy_table::Row>) -> Table {
    let mut table = Table::new();
    table.load_style(presets::ASCII_MARKDOWN);
    table.set_header(header);
    table
}

/// Renders a table's lines with trailing spaces trimmed.
pub fn render(table: &Table) -> String {
    let mut out = String::new();
    for line in table.lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// CSV writer for flat rows: quotes fields that need it.
#[derive(Debug, Default)]
pub struct Csv {
    out: String,
}

impl Csv {
    /// A CSV document starting with `header`.
    pub fn new(header: &[&str]) -> Csv {
        let mut csv = Csv::default();
        csv.row(header.iter().map(|s| s.to_string()));
        csv
    }

    /// Appends a row.
    pub fn row(&mut self, fields: impl IntoIterator<Item = String>) {
        let mut first = true;
        for field in fields {
            if !first {
                self.out.push(',');
            }
            first = false;
            if field.contains([',', '"', '\n']) {
                self.out.push('"');
                self.out.push_str(&field.replace('"', "\"\""));
                self.out.push('"');
            } else {
                self.out.push_str(&field);
            }
        }
        self.out.push('\n');
    }

    /// The document.
    pub fn finish(self) -> String {
        self.out
    }
}

/// Bytes as MiB with one decimal, the number alone: a cell of a column
/// headed MiB ([`numalab::units::mib`] writes the unit, for messages).
pub fn mib_figure(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 20) as f64)
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_plain_table_streamed_reads_as_one_made_whole() {
        let header: Vec<String> = ["RES", "PAGES", "FILE"].map(String::from).to_vec();
        let rows = || {
            [["4 KiB", "1", "a"], ["12 MiB", "3072", "long/name"]]
                .into_iter()
                .map(|r| r.map(String::from).to_vec())
        };
        let mut whole = table(header.clone());
        for row in rows() {
            whole.add_row(row);
        }
        assert_eq!(plain_table(&header, rows), render(&whole));
    }

    #[test]
    fn a_name_with_a_newline_stays_on_its_line() {
        assert_eq!(printable_field("plain name"), "plain name");
        assert_eq!(printable_field("x\ny\tz\x1b[2J"), "x\\ny\\tz\\x1b[2J");
        // A right-to-left override would show `bidi\u{202e}txt.exe` as
        // `bidiexe.txt`.
        assert_eq!(
            printable_field("bidi\u{202e}txt.exe"),
            "bidi\\u{202e}txt.exe"
        );
        assert_eq!(printable("a\u{2066}b\u{200f}"), "a\\u{2066}b\\u{200f}");
    }

    #[test]
    fn two_outputs_naming_one_file_are_refused() {
        let dir = std::env::temp_dir().join(format!("numalab-distinct-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a.json"), dir.join("b.json"));
        let dotted = dir.join(".").join("a.json");
        // Not there yet: the same name in the same directory.
        assert!(distinct_targets(&[("-o", &a), ("--emit", &dotted)]).is_err());
        assert!(distinct_targets(&[("-o", &a), ("--emit", &b)]).is_ok());
        // There: the same file by another name (a hard link).
        std::fs::write(&a, "{}").unwrap();
        std::fs::hard_link(&a, &b).unwrap();
        let err = distinct_targets(&[("-o", &a), ("--html", &b)]).unwrap_err();
        assert!(err.to_string().contains("are the same file"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
    use super::*;

    #[test]
    fn csv_quotes_when_needed() {
        let mut csv = Csv::new(&["a", "b"]);
        csv.row(["1".to_string(), "x,y".to_string()]);
        csv.row(["say \"hi\"".to_string(), String::new()]);
        assert_eq!(csv.finish(), "a,b\n1,\"x,y\"\n\"say \"\"hi\"\"\",\n");
    }

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        assert_eq!(printable("plain\tline\n"), "plain\tline\n");
        assert_eq!(
            printable("a\x1b[2Jb\r\u{9b}c\x7f"),
            "a\\x1b[2Jb\\x0d\\x9bc\\x7f"
        );
    }

    use std::fs;

    #[test]
    fn atomic_write_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("numalab-out-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.json");
        write_atomically(&path, b"{}").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"{}");
        let leftovers: Vec<_> = fs::read_dir(&dir).unwrap().collect();
        assert_eq!(leftovers.len(), 1);
        assert!(write_atomically(&dir.join("missing/r.json"), b"{}").is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_symlink_planted_at_the_old_temporary_name_is_not_followed() {
        // Before, the temporary was `.NAME.tmp-PID`, opened with truncate:
        // a link planted there made numalab overwrite the link's target.
        let dir = std::env::temp_dir().join(format!("numalab-out-planted-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        fs::write(&victim, "precious").unwrap();
        let planted = dir.join(format!(".r.json.tmp-{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        write_atomically(&dir.join("r.json"), b"{}").unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        assert!(fs::symlink_metadata(&planted)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(dir.join("r.json")).unwrap(), b"{}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refused_targets_say_what_to_do_instead() {
        let err = check_target(Path::new("/dev/null"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "/dev/null is a character device: numalab writes only regular files; \
             leave out -o to print the result (and redirect it where it should go)"
        );
        let err = check_target(Path::new("/dev/stdout"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("symbolic link") && err.contains("leave out -o"),
            "{err}"
        );
    }
}
