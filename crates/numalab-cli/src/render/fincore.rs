//! `numalab fincore` for people: `fincore`'s columns (RES, PAGES, SIZE,
//! FILE) with the cached pages of each node between them, a total, and
//! each node's page cache.

use numalab::units::{count, Size};
use numalab_bench::fincore::{FincoreReport, Unreadable};

use super::{Render, Style};
use crate::output::{self, Csv, OutputArgs};

impl Render for FincoreReport {
    fn text(&self, style: Style) -> String {
        human(self, style)
    }

    fn csv(&self) -> String {
        csv(self)
    }

    fn warnings(&self) -> Vec<String> {
        self.failed.iter().map(unreadable_line).collect()
    }
}

/// `path: why` of a file that could not be counted or changed, as
/// util-linux tools name one, the path escaped as one field (a newline in
/// a name cannot start a line of its own).
pub(crate) fn unreadable_line(failed: &Unreadable) -> String {
    format!(
        "{}: {}",
        output::printable_field(&failed.path),
        output::printable(&failed.error)
    )
}

/// The nodes with a column: every node with memory, and any node a page
/// was found on.
fn node_columns(report: &FincoreReport) -> Vec<u32> {
    let mut nodes: Vec<u32> = report.nodes.iter().map(|n| n.node).collect();
    for &node in report.total.per_node.keys() {
        if !nodes.contains(&node) {
            nodes.push(node);
        }
    }
    nodes.sort_unstable();
    nodes
}

fn human(report: &FincoreReport, style: Style) -> String {
    let nodes = node_columns(report);
    let mut header: Vec<String> = vec!["RES".into(), "PAGES".into(), "SIZE".into()];
    header.extend(nodes.iter().map(|n| format!("node{n}")));
    let unknown = report.total.unknown > 0;
    if unknown {
        header.push("unknown".into());
    }
    header.push("FILE".into());
    let row = |cache: &numalab::pagecache::FileCache, name: &str| {
        let mut row = vec![
            Size(cache.cached_bytes()).to_string(),
            cache.cached.to_string(),
            Size(cache.size).to_string(),
        ];
        row.extend(
            nodes
                .iter()
                .map(|n| cache.per_node.get(n).copied().unwrap_or(0).to_string()),
        );
        if unknown {
            row.push(cache.unknown.to_string());
        }
        row.push(name.to_owned());
        row
    };
    let files: u64 = report.files.iter().map(|f| f.files).sum();
    let total = (report.files.len() > 1)
        .then(|| row(&report.total, &format!("total of {}", count(files, "file"))));
    // A row that adds up a path's files (--summarize) says how many.
    let name = |file: &numalab_bench::fincore::CachedFile| {
        let path = style.field(&file.path);
        if file.files == 1 {
            path
        } else {
            format!("{path} ({})", count(file.files, "file"))
        }
    };
    let rows = || {
        report
            .files
            .iter()
            .map(|file| row(&file.cache, &name(file)))
            .chain(total.clone())
    };
    // A row a file: for a tree of millions of files, the plain table is
    // written without holding its cells (about 1.6 KB a file as a table).
    let mut out = match style {
        Style::Plain => output::plain_table(&header, rows),
        Style::Markdown => {
            let mut table = style.table(header);
            for row in rows() {
                table.add_row(row);
            }
            style.render(&table)
        }
    };
    out.push('\n');
    let skipped = report.skipped;
    if skipped.links + skipped.special > 0 {
        out.push_str(&style.line(&format!(
            "not counted in the directories: {} (not followed), {}, {} or {}",
            count(skipped.links, "symbolic link"),
            count(skipped.special, "FIFO"),
            if skipped.special == 1 {
                "device"
            } else {
                "devices"
            },
            if skipped.special == 1 {
                "socket"
            } else {
                "sockets"
            }
        )));
    }
    out.push_str(&style.line(
        "page cache per node now (page cache: FilePages, with tmpfs and shared memory; reclaimable: Active(file) + Inactive(file)):",
    ));
    let mut nodes_table = style.table(vec![
        "node".to_string(),
        "page cache".into(),
        "reclaimable".into(),
        "free".into(),
        "memory".into(),
    ]);
    for node in &report.nodes {
        nodes_table.add_row(vec![
            node.node.to_string(),
            Size(node.file_bytes).to_string(),
            Size(node.file_lru_bytes).to_string(),
            Size(node.free_bytes).to_string(),
            Size(node.total_bytes).to_string(),
        ]);
    }
    out.push_str(&style.render(&nodes_table));
    out
}

fn csv(report: &FincoreReport) -> String {
    let nodes = node_columns(report);
    let node_names: Vec<String> = nodes.iter().map(|n| format!("node{n}_pages")).collect();
    let mut header = vec![
        "file",
        "size_bytes",
        "pages",
        "cached_pages",
        "cached_bytes",
    ];
    header.extend(node_names.iter().map(String::as_str));
    header.push("unknown_pages");
    header.push("files");
    let mut csv = Csv::new(&header);
    for file in &report.files {
        let c = &file.cache;
        let mut row = vec![
            file.path.clone(),
            c.size.to_string(),
            c.pages.to_string(),
            c.cached.to_string(),
            c.cached_bytes().to_string(),
        ];
        row.extend(
            nodes
                .iter()
                .map(|n| c.per_node.get(n).copied().unwrap_or(0).to_string()),
        );
        row.push(c.unknown.to_string());
        row.push(file.files.to_string());
        csv.row(row);
    }
    csv.finish()
}
/// Whether every path given failed and the result is a table on the
/// terminal: then only the errors are said, as util-linux fincore does,
/// not an empty table above them. JSON, CSV and `-o` still get the
/// document, which names the failures.
pub fn nothing_counted(output: &OutputArgs, no_files: bool, failed: &[Unreadable]) -> bool {
    no_files && !failed.is_empty() && output.table_on_stdout()
}

/// Paths that could not be counted or changed, on standard error, as
/// fincore's; `emit` already repeats them there for every output but a
/// table on standard output.
pub fn say_failures(output: &OutputArgs, failed: &[Unreadable]) {
    if output.table_on_stdout() {
        for failed in failed {
            eprintln!("numalab: {}", unreadable_line(failed));
        }
    }
}
