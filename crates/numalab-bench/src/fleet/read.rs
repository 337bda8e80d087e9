//! Reading a fleet's report files: the directories listed (bounded), each
//! file read (bounded) and parsed on a few threads into as much of the
//! report as the fleet compares; a file that is not a readable
//! `numalab.report` document is left out, with why.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use numalab::system::Environment;
use serde::{Deserialize, Serialize};

use super::{Cell, FleetError, Metric};
use crate::document::Schema;
use crate::fleet::{Fingerprint, TaskIdentity};
use crate::report::Report;
use crate::topo::TopoReport;

/// The most report files one merge reads: 1 000 000 (a file a host, far
/// past the largest clusters). More is refused before any is read.
pub const MAX_FILES: usize = 1_000_000;

/// The most directory entries looked at, `*.json` or not: 4 000 000.
pub const MAX_ENTRIES: usize = 4 * MAX_FILES;

/// The largest report file read: 64 MiB (a report of a 32-node machine is
/// a few MiB). A larger file is left out unread.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// The most threads reading files at once.
pub const MAX_THREADS: usize = 64;

/// One host's report, as much of it as the fleet compares.
///
/// ```
/// use numalab_bench::fleet::{Cell, HostResult, Metric};
///
/// let text = std::fs::read_to_string(concat!(
///     env!("CARGO_MANIFEST_DIR"),
///     "/../../tests/results/report-two-socket.json"
/// ))?;
/// let host = HostResult::parse(text.as_bytes(), "r/two.json".as_ref()).unwrap();
/// assert_eq!(host.host, "(none)", "the emulated guest has no host name");
/// assert_eq!(host.fingerprint.nodes.len(), 2);
/// // Latency and read, write and copy bandwidth, for 2 x 2 node pairs.
/// assert_eq!(host.figures.len(), 16);
/// let remote = Cell { metric: Metric::Latency, initiator: 0, target: 1 };
/// assert!(host.figure(remote).unwrap() > 0.0);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct HostResult {
    /// Host name: the report's `host`, else `matrix.environment`'s, else
    /// hwloc's.
    pub host: String,
    /// The file it was read from.
    pub file: PathBuf,
    /// When the report was written (RFC 3339), if it says so in a date
    /// that reads ([`seconds_since_epoch`](crate::document::seconds_since_epoch)).
    pub created: Option<String>,
    /// The machine's fingerprint, computed from the report's topology and
    /// environment (the same rule for files of every numalab version).
    pub fingerprint: Fingerprint,
    /// The task's identity (empty in reports written before it was saved).
    pub task: TaskIdentity,
    /// Each measured cell's median, sorted by cell.
    pub figures: Vec<(Cell, f64)>,
    /// Whether the report's matrix was stopped before its end.
    pub interrupted: bool,
}

/// A file or directory left out of the merge, and why.
///
/// ```
/// use numalab_bench::fleet::LeftOut;
/// let left = LeftOut { path: "results/n1.json".into(), reason: "truncated".into() };
/// assert_eq!(left.to_string(), "results/n1.json: truncated");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOut {
    /// The file or directory.
    pub path: String,
    /// Why, in one sentence.
    pub reason: String,
}

impl std::fmt::Display for LeftOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

impl LeftOut {
    fn new(path: &Path, reason: impl Into<String>) -> LeftOut {
        LeftOut {
            path: path.display().to_string(),
            reason: reason.into(),
        }
    }
}

/// The report files named: each directory's `*.json` files (its top level,
/// sorted by name), and files named directly. Symbolic links inside a
/// directory are not followed; an empty directory is left out, as is a
/// directory or file named twice. A path that does not exist, or more
/// than [`MAX_FILES`] files, is an error.
///
/// ```
/// use numalab_bench::fleet::read::list;
///
/// let dir = std::env::temp_dir().join(format!("numalab-doc-list-{}", std::process::id()));
/// std::fs::create_dir_all(dir.join("empty"))?;
/// std::fs::write(dir.join("b.json"), "{}")?;
/// std::fs::write(dir.join("a.json"), "{}")?;
/// std::fs::write(dir.join("notes.txt"), "")?;
/// let (files, left_out) = list(&[dir.clone(), dir.join("empty")])?;
/// assert_eq!(files, [dir.join("a.json"), dir.join("b.json")]);
/// assert_eq!(left_out[0].reason, "no *.json file in this directory");
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn list(paths: &[PathBuf]) -> Result<(Vec<PathBuf>, Vec<LeftOut>), FleetError> {
    let mut files = Vec::new();
    let mut left_out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut entries = 0usize;
    for path in paths {
        let metadata = std::fs::metadata(path).map_err(|source| FleetError::Unreadable {
            path: path.clone(),
            source,
        })?;
        if !seen.insert(std::fs::canonicalize(path).unwrap_or_else(|_| path.clone())) {
            left_out.push(LeftOut::new(path, "named twice: read once"));
            continue;
        }
        if !metadata.is_dir() {
            files.push(path.clone());
            continue;
        }
        let unreadable = |source| FleetError::Unreadable {
            path: path.clone(),
            source,
        };
        let mut found = Vec::new();
        for entry in std::fs::read_dir(path).map_err(unreadable)? {
            let entry = entry.map_err(unreadable)?;
            entries += 1;
            if entries > MAX_ENTRIES {
                return Err(FleetError::TooManyEntries { limit: MAX_ENTRIES });
            }
            let name = entry.file_name();
            if !name.as_encoded_bytes().ends_with(b".json") {
                continue;
            }
            let file = entry.path();
            let kind = entry.file_type().map_err(unreadable)?;
            if kind.is_file() {
                if files.len() + found.len() >= MAX_FILES {
                    return Err(FleetError::TooManyFiles { limit: MAX_FILES });
                }
                found.push(file);
            } else if kind.is_symlink() {
                left_out.push(LeftOut::new(
                    &file,
                    "a symbolic link: not followed inside a directory (name its target)",
                ));
            } else {
                left_out.push(LeftOut::new(&file, "not a regular file"));
            }
        }
        if found.is_empty() {
            left_out.push(LeftOut::new(path, "no *.json file in this directory"));
        }
        found.sort();
        files.append(&mut found);
    }
    Ok((files, left_out))
}

/// Reads and parses `files` on `threads` threads (1 to [`MAX_THREADS`]);
/// one answer per file, in order.
///
/// ```
/// use numalab_bench::fleet::read::read_all;
///
/// let saved = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/results/report-cxl.json");
/// let answers = read_all(&[saved.into(), "/nonexistent.json".into()], 2);
/// assert_eq!(answers[0].as_ref().unwrap().fingerprint.nodes.len(), 4);
/// let left = answers[1].as_ref().unwrap_err();
/// assert!(left.reason.starts_with("cannot be opened"), "{left}");
/// ```
pub fn read_all(files: &[PathBuf], threads: usize) -> Vec<Result<HostResult, LeftOut>> {
    let threads = threads.clamp(1, MAX_THREADS).min(files.len().max(1));
    let next = AtomicUsize::new(0);
    let mut answers: Vec<(usize, Result<HostResult, LeftOut>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        // Only hands out indices: no other memory is
                        // shared through it.
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(file) = files.get(i) else { break };
                        mine.push((i, read_one(file)));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a reader thread does not panic"))
            .collect()
    });
    answers.sort_by_key(|(i, _)| *i);
    answers.into_iter().map(|(_, answer)| answer).collect()
}

/// One file, read (at most [`MAX_FILE_BYTES`]) and parsed.
fn read_one(file: &Path) -> Result<HostResult, LeftOut> {
    use numalab::files::InputError;
    let bytes = numalab::files::read_input_limited(file, MAX_FILE_BYTES, "a report file").map_err(
        |err| {
            let reason = match &err {
                InputError::TooLarge { limit, .. } => format!(
                    "larger than {}, the limit for a report file: not read",
                    numalab::units::Size(*limit)
                ),
                InputError::Open { source, .. } => format!("cannot be opened: {source}"),
                InputError::Read { source, .. } => format!("reading failed: {source}"),
                InputError::NotAFile { kind, .. } => format!("a {kind}, not a report file"),
                _ => err.to_string(),
            };
            LeftOut::new(file, reason)
        },
    )?;
    HostResult::parse(&bytes, file).map_err(|reason| LeftOut::new(file, reason))
}

/// The parts of a `numalab.report` document the fleet reads; everything
/// else in the file is skipped unparsed.
#[derive(Deserialize)]
struct View {
    schema: Option<String>,
    schema_version: Option<u32>,
    created: Option<String>,
    host: Option<String>,
    #[serde(default)]
    task: TaskIdentity,
    topology: Option<TopoReport>,
    matrix: Option<MatrixView>,
}

#[derive(Deserialize)]
struct MatrixView {
    environment: Option<Environment>,
    settings: SettingsView,
    latency: Option<Cells<LatencyView>>,
    bandwidth: Option<Cells<BandwidthView>>,
    #[serde(default)]
    interrupted: bool,
}

#[derive(Deserialize)]
struct SettingsView {
    quick: bool,
}

#[derive(Deserialize)]
struct Cells<T> {
    cells: Vec<T>,
}

#[derive(Deserialize)]
struct LatencyView {
    initiator: u32,
    target: u32,
    latency_ns: FigureView,
}

#[derive(Deserialize)]
struct BandwidthView {
    initiator: u32,
    target: u32,
    read_gbps: Option<FigureView>,
    write_gbps: Option<FigureView>,
    copy_gbps: Option<FigureView>,
}

#[derive(Deserialize)]
struct FigureView {
    median: f64,
}

/// Only the envelope, to say what a file that did not parse is.
#[derive(Deserialize)]
struct Header {
    schema: Option<String>,
    schema_version: Option<serde_json::Value>,
}

impl HostResult {
    /// Reads a `numalab.report` document (any version this numalab reads:
    /// [`Report::VERSION`]); the error says in one sentence why `bytes`
    /// is not one: not JSON, cut short, another schema, another version.
    pub fn parse(bytes: &[u8], file: &Path) -> Result<HostResult, String> {
        let view: View = match serde_json::from_slice(bytes) {
            Ok(view) => view,
            Err(err) => return Err(why_not(bytes, &err)),
        };
        check_header(view.schema.as_deref(), view.schema_version)?;
        let (Some(topology), Some(matrix)) = (view.topology, view.matrix) else {
            return Err(format!(
                "not a valid {} document: it has no topology or no matrix",
                Report::NAME
            ));
        };
        let cells = [
            matrix.latency.as_ref().map_or(0, |m| m.cells.len()),
            matrix.bandwidth.as_ref().map_or(0, |m| m.cells.len()),
        ];
        crate::report::check_saved_sizes(
            topology.topology.nodes.len(),
            [0, 0],
            cells.into_iter().max().unwrap_or(0),
            0,
        )?;
        let environment = matrix.environment.as_ref();
        let host = view
            .host
            .or_else(|| environment.map(|e| e.host.hostname.clone()))
            .or_else(|| topology.topology.host.clone())
            .filter(|h| !h.is_empty())
            .ok_or_else(|| "the report names no host".to_owned())?;
        let fingerprint = Fingerprint::from_parts(&topology, environment, matrix.settings.quick);
        let mut figures = Vec::new();
        let mut add = |metric, initiator, target, figure: Option<&FigureView>| {
            if let Some(f) = figure.filter(|f| f.median.is_finite() && f.median > 0.0) {
                figures.push((
                    Cell {
                        metric,
                        initiator,
                        target,
                    },
                    f.median,
                ));
            }
        };
        for c in matrix.latency.iter().flat_map(|m| &m.cells) {
            add(Metric::Latency, c.initiator, c.target, Some(&c.latency_ns));
        }
        for c in matrix.bandwidth.iter().flat_map(|m| &m.cells) {
            add(Metric::Read, c.initiator, c.target, c.read_gbps.as_ref());
            add(Metric::Write, c.initiator, c.target, c.write_gbps.as_ref());
            add(Metric::Copy, c.initiator, c.target, c.copy_gbps.as_ref());
        }
        if let Some((cell, value)) = figures
            .iter()
            .find(|(cell, value)| !cell.metric.plausible().contains(value))
        {
            let range = cell.metric.plausible();
            return Err(format!(
                "{cell} is {value:e} {}: not a measurement (a figure is from {:e} to {:e} {})",
                cell.metric.unit(),
                range.start(),
                range.end(),
                cell.metric.unit()
            ));
        }
        figures.sort_by_key(|(cell, _)| *cell);
        figures.dedup_by_key(|(cell, _)| *cell);
        Ok(HostResult {
            host,
            file: file.to_owned(),
            // A date that does not read is no date: it can neither be shown
            // nor order two reports of a host.
            created: view
                .created
                .filter(|c| crate::document::seconds_since_epoch(c).is_some()),
            fingerprint,
            task: view.task,
            figures,
            interrupted: matrix.interrupted,
        })
    }

    /// The median measured for `cell`, if it was.
    pub fn figure(&self, cell: Cell) -> Option<f64> {
        self.figures
            .binary_search_by_key(&cell, |(c, _)| *c)
            .ok()
            .map(|i| self.figures[i].1)
    }
}

/// Refuses a document of another schema or version.
fn check_header(schema: Option<&str>, version: Option<u32>) -> Result<(), String> {
    match (schema, version) {
        (None, _) => Err("not a numalab document: it has no \"schema\" field".into()),
        (Some(schema), _) if schema != Report::NAME => {
            Err(format!("a {schema} document, not {}", Report::NAME))
        }
        (Some(_), Some(version)) if version != Report::VERSION => Err(format!(
            "{} version {version}; this numalab reads version {}",
            Report::NAME,
            Report::VERSION
        )),
        (Some(_), None) => Err(format!(
            "not a valid {} document: it has no \"schema_version\" field",
            Report::NAME
        )),
        _ => Ok(()),
    }
}

/// Why `bytes` did not parse as a report: said by the envelope when it
/// reads, by the JSON error otherwise.
fn why_not(bytes: &[u8], err: &serde_json::Error) -> String {
    use serde_json::error::Category;
    match err.classify() {
        Category::Eof => {
            return format!(
                "truncated: the JSON ends at line {} column {} before the document does",
                err.line(),
                err.column()
            )
        }
        Category::Syntax | Category::Io => return format!("not valid JSON: {err}"),
        Category::Data => {}
    }
    match serde_json::from_slice::<Header>(bytes) {
        Ok(header) => {
            let version = header.schema_version.as_ref().and_then(|v| v.as_u64());
            let version = version.map(|v| u32::try_from(v).unwrap_or(u32::MAX));
            match check_header(header.schema.as_deref(), version) {
                Err(reason) => reason,
                Ok(()) => format!("not a valid {} document: {err}", Report::NAME),
            }
        }
        Err(_) => format!("not a numalab document: {err}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_socket() -> String {
        std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/results/report-two-socket.json"
        ))
        .unwrap()
    }

    #[test]
    fn bad_files_say_what_they_are() {
        let text = two_socket();
        let file = Path::new("x.json");
        let cut = &text[..text.len() / 2];
        let why = HostResult::parse(cut.as_bytes(), file).unwrap_err();
        assert!(why.starts_with("truncated: the JSON ends at line"), "{why}");
        let why = HostResult::parse(b"{\"a\": [1, 2]}", file).unwrap_err();
        assert_eq!(why, "not a numalab document: it has no \"schema\" field");
        let why = HostResult::parse(b"[1, 2]", file).unwrap_err();
        assert!(why.starts_with("not a numalab document"), "{why}");
        let topo = text.replacen("numalab.report", "numalab.topo", 1);
        let why = HostResult::parse(topo.as_bytes(), file).unwrap_err();
        assert_eq!(why, "a numalab.topo document, not numalab.report");
        let edit = |change: &dyn Fn(&mut serde_json::Value)| {
            let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
            change(&mut doc);
            serde_json::to_vec(&doc).unwrap()
        };
        let future = edit(&|doc| doc["schema_version"] = 7.into());
        let why = HostResult::parse(&future, file).unwrap_err();
        assert_eq!(
            why,
            "numalab.report version 7; this numalab reads version 1"
        );
        // A future version whose fields no longer parse still names its version.
        let changed = edit(&|doc| {
            doc["schema_version"] = 7.into();
            doc["matrix"]["settings"] = 5.into();
        });
        let why = HostResult::parse(&changed, file).unwrap_err();
        assert_eq!(
            why,
            "numalab.report version 7; this numalab reads version 1"
        );
        let broken = edit(&|doc| doc["matrix"]["settings"] = 5.into());
        let why = HostResult::parse(&broken, file).unwrap_err();
        assert!(
            why.starts_with("not a valid numalab.report document: invalid type"),
            "{why}"
        );
        let why = HostResult::parse(b"\xff\xfe", file).unwrap_err();
        assert!(why.starts_with("not valid JSON"), "{why}");
    }

    #[test]
    fn a_report_reads_whole() {
        let host = HostResult::parse(two_socket().as_bytes(), Path::new("t.json")).unwrap();
        assert_eq!(host.fingerprint.kernel.as_deref(), Some("6.1.0-56-amd64"));
        assert_eq!(host.fingerprint.thp.as_deref(), Some("always"));
        assert!(host.fingerprint.quick && !host.fingerprint.hmat);
        assert!(host.task.is_empty());
        assert!(host.created.is_some());
    }

    fn edited(change: &dyn Fn(&mut serde_json::Value)) -> Vec<u8> {
        let mut doc: serde_json::Value = serde_json::from_str(&two_socket()).unwrap();
        change(&mut doc);
        serde_json::to_vec(&doc).unwrap()
    }

    #[test]
    fn a_figure_no_memory_gives_leaves_the_report_out() {
        let file = Path::new("x.json");
        let fast = edited(&|doc| {
            doc["matrix"]["bandwidth"]["cells"][0]["read_gbps"]["median"] = 1e308.into()
        });
        let why = HostResult::parse(&fast, file).unwrap_err();
        assert!(
            why.starts_with("read 0->0 is 1e308 GB/s: not a measurement"),
            "{why}"
        );
        let quick = edited(&|doc| {
            doc["matrix"]["latency"]["cells"][1]["latency_ns"]["median"] = 1e-9.into()
        });
        let why = HostResult::parse(&quick, file).unwrap_err();
        assert!(
            why.starts_with("latency 0->1 is 1e-9 ns: not a measurement"),
            "{why}"
        );
    }

    #[test]
    fn a_date_that_does_not_read_is_no_date() {
        let file = Path::new("x.json");
        for bad in ["9999-99-99T99:99:99Z", "zzz", "2026-11-27", ""] {
            let doc = edited(&|doc| doc["created"] = bad.into());
            let host = HostResult::parse(&doc, file).unwrap();
            assert_eq!(host.created, None, "{bad:?}");
        }
        let doc = edited(&|doc| doc["created"] = "2026-11-27T05:00:00+05:00".into());
        let host = HostResult::parse(&doc, file).unwrap();
        assert_eq!(host.created.as_deref(), Some("2026-11-27T05:00:00+05:00"));
    }
}
