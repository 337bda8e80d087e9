//! Reading a fleet's report files: the directories listed (bounded), each
//! file read (bounded) and parsed on a few threads into as much of the
//! report as the fleet compares; a file that is not a readable
//! `numalab.report` document is left out, with why.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use numalab::files::{InputFile, TreeDir};
use numalab::system::Environment;
use serde::{Deserialize, Serialize};

use super::{Cell, FleetError, Metric};
use crate::document::Schema;
use crate::host::{Fingerprint, TaskIdentity};
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

/// The most figures one merge keeps, all hosts together: 2^25
/// (33,554,432). Each is 24 bytes kept for the whole merge and about as
/// much again while it is grouped, so this bounds a merge to about 2 GB
/// whatever the files say (a report may name up to 1024 × 1024 cells of
/// four figures each: about 32 such reports). A fleet of two-socket hosts
/// (16 figures each) reaches it past two million hosts, one of 8-node
/// hosts (256 each) past 130,000. More is refused: merge in parts.
pub const MAX_TOTAL_FIGURES: usize = 1 << 25;

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
    /// The numalab build that wrote the report (`numalab_version`, with
    /// the commit as build metadata since builds carry it); `None` when
    /// missing or not a version (letters, digits, `.+-`, at most 80).
    pub numalab_version: Option<String>,
    /// Each measured cell's median, sorted by cell.
    pub figures: Vec<(Cell, f64)>,
    /// Whether the report's matrix was stopped before its end.
    pub interrupted: bool,
    /// The file as it was read, to read it again for its page
    /// ([`Source::read_again`]); `None` when parsed from bytes.
    pub source: Option<Source>,
}

/// A report file to read: one named by the user (a link there followed,
/// as `find -H` does), or an entry of a directory named, opened from the
/// descriptor of the directory held, a link there never followed, so that
/// an entry swapped for a link meanwhile cannot lead the read out of the
/// directory.
///
/// ```
/// use numalab_bench::fleet::read::ReportFile;
/// let file = ReportFile::named("results/n1.json");
/// assert_eq!(file.path(), std::path::Path::new("results/n1.json"));
/// ```
#[derive(Debug, Clone)]
pub struct ReportFile {
    /// The directory held, for an entry of one.
    dir: Option<Arc<TreeDir>>,
    /// The entry's name in `dir`, or the path named.
    name: PathBuf,
    /// The path it is shown as.
    path: PathBuf,
}

impl ReportFile {
    /// A file named by the user.
    pub fn named(path: impl Into<PathBuf>) -> ReportFile {
        let path = path.into();
        ReportFile {
            dir: None,
            name: path.clone(),
            path,
        }
    }

    /// The path it is shown as.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its bytes (at most [`MAX_FILE_BYTES`]) and identity; why not, in
    /// one sentence.
    fn read(&self) -> Result<InputFile, String> {
        use numalab::files::InputError;
        numalab::files::read_input_at(
            self.dir.as_deref(),
            &self.name,
            MAX_FILE_BYTES,
            "a report file",
        )
        .map_err(|err| match &err {
            InputError::TooLarge { limit, .. } => format!(
                "larger than {}, the limit for a report file: not read",
                numalab::units::Size(*limit)
            ),
            InputError::Open { source, .. } => format!("cannot be opened: {source}"),
            InputError::Read { source, .. } => format!("reading failed: {source}"),
            InputError::NotAFile {
                kind: "symbolic link",
                ..
            } if self.dir.is_some() => LINK_IN_DIRECTORY.to_owned(),
            InputError::NotAFile { kind, .. } if self.dir.is_some() => {
                format!("not a regular file (a {kind})")
            }
            InputError::NotAFile { kind, .. } => format!("a {kind}, not a report file"),
            _ => err.to_string(),
        })
    }
}

impl PartialEq for ReportFile {
    fn eq(&self, other: &ReportFile) -> bool {
        self.path == other.path
            && self.name == other.name
            && self.dir.as_ref().map(|d| d.id()) == other.dir.as_ref().map(|d| d.id())
    }
}

/// Why a link inside a directory is left out.
const LINK_IN_DIRECTORY: &str =
    "a symbolic link: not followed inside a directory (name its target)";

/// A report file as it was read: which file, and a digest of its bytes.
/// Its page is made from the very bytes merged, read again
/// ([`read_again`](Self::read_again)) rather than kept: a fleet keeps
/// only each host's figures in memory, never its whole report.
///
/// ```
/// use numalab_bench::fleet::read::{list, read_all};
/// let dir = std::env::temp_dir().join(format!("numalab-doc-source-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let saved = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/results/report-cxl.json");
/// std::fs::copy(saved, dir.join("cxl.json"))?;
/// let (files, _) = list(&[dir.clone()])?;
/// let host = read_all(&files, 1)?.remove(0).map_err(|l| l.to_string())?;
/// let source = host.source.expect("read from a directory");
/// assert_eq!(source.read_again()?, std::fs::read(saved)?);
/// // Changed since: not read again.
/// std::fs::write(dir.join("cxl.json"), b"{}")?;
/// assert!(source.read_again().unwrap_err().contains("changed since it was merged"));
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Source {
    file: ReportFile,
    id: (u64, u64),
    digest: u64,
}

impl PartialEq for Source {
    fn eq(&self, other: &Source) -> bool {
        (&self.file, self.id, self.digest) == (&other.file, other.id, other.digest)
    }
}

impl Source {
    /// The bytes that were merged, read again as they were first read
    /// (from the directory held, a link not followed); refused when the
    /// file there is no longer the one read, or its bytes are not.
    pub fn read_again(&self) -> Result<Vec<u8>, String> {
        let input = self.file.read()?;
        if input.id != self.id || digest(&input.bytes) != self.digest {
            return Err(format!(
                "{} changed since it was merged: not read again",
                self.file.path.display()
            ));
        }
        Ok(input.bytes)
    }

    /// The device and inode of the file read.
    pub fn id(&self) -> (u64, u64) {
        self.id
    }

    /// The path it is shown as.
    pub fn path(&self) -> &Path {
        &self.file.path
    }
}

/// A digest of `bytes` under a key drawn once per process (SipHash): a
/// file rewritten to collide with one read cannot be made without the key.
fn digest(bytes: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    static KEY: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    KEY.get_or_init(Default::default).hash_one(bytes)
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
/// sorted by name), and files named directly. Each directory is held open
/// and its files are later opened from it ([`ReportFile`]): symbolic links
/// inside a directory are not followed, neither when listed nor if one is
/// swapped in before the file is read. An empty directory is left out, as
/// is a directory or file named twice. A path that does not exist, or
/// more than [`MAX_FILES`] files, is an error.
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
/// let paths: Vec<_> = files.iter().map(|f| f.path()).collect();
/// assert_eq!(paths, [dir.join("a.json"), dir.join("b.json")]);
/// assert_eq!(left_out[0].reason, "no *.json file in this directory");
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn list(paths: &[PathBuf]) -> Result<(Vec<ReportFile>, Vec<LeftOut>), FleetError> {
    use std::os::unix::fs::MetadataExt;
    let mut files = Vec::new();
    let mut left_out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut entries = 0usize;
    for path in paths {
        let unreadable = |source| FleetError::Unreadable {
            path: path.clone(),
            source,
        };
        // A directory is held from here on; anything else is a file
        // named directly (a link there followed, as the user named it).
        let dir = match TreeDir::open(path) {
            Ok(dir) => Arc::new(dir),
            Err(err) if err.kind() == std::io::ErrorKind::NotADirectory => {
                let metadata = std::fs::metadata(path).map_err(unreadable)?;
                if !seen.insert((metadata.dev(), metadata.ino())) {
                    left_out.push(LeftOut::new(path, "named twice: read once"));
                } else if files.len() >= MAX_FILES {
                    return Err(FleetError::TooManyFiles { limit: MAX_FILES });
                } else {
                    files.push(ReportFile::named(path.clone()));
                }
                continue;
            }
            Err(err) => return Err(unreadable(err)),
        };
        if !seen.insert(dir.id()) {
            left_out.push(LeftOut::new(path, "named twice: read once"));
            continue;
        }
        let mut found = Vec::new();
        for entry in dir.entries().map_err(unreadable)? {
            let entry = entry.map_err(unreadable)?;
            entries += 1;
            if entries > MAX_ENTRIES {
                return Err(FleetError::TooManyEntries { limit: MAX_ENTRIES });
            }
            let name = entry.file_name();
            if !name.as_encoded_bytes().ends_with(b".json") {
                continue;
            }
            let file = path.join(&name);
            // The listing's word on the kind is only a first sort: the
            // file is checked again on the descriptor it is read from.
            let kind = entry.file_type().map_err(unreadable)?;
            if kind.is_file() {
                if files.len() + found.len() >= MAX_FILES {
                    return Err(FleetError::TooManyFiles { limit: MAX_FILES });
                }
                found.push(ReportFile {
                    dir: Some(Arc::clone(&dir)),
                    name: name.into(),
                    path: file,
                });
            } else if kind.is_symlink() {
                left_out.push(LeftOut::new(&file, LINK_IN_DIRECTORY));
            } else {
                left_out.push(LeftOut::new(&file, "not a regular file"));
            }
        }
        if found.is_empty() {
            left_out.push(LeftOut::new(path, "no *.json file in this directory"));
        }
        found.sort_by(|a, b| a.path.cmp(&b.path));
        files.append(&mut found);
    }
    Ok((files, left_out))
}

/// What reading one file came to.
enum Answer {
    Host(Box<HostResult>),
    Left(LeftOut),
    /// The file of this identity was read under an earlier name.
    Again((u64, u64)),
}

/// Reads and parses `files` on `threads` threads (1 to [`MAX_THREADS`]);
/// one answer per file, in order. A file read under two names (hard
/// links) is merged once, under the first; more than
/// [`MAX_TOTAL_FIGURES`] figures in all is an error.
///
/// ```
/// use numalab_bench::fleet::read::{read_all, ReportFile};
///
/// let saved = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/results/report-cxl.json");
/// let files = [ReportFile::named(saved), ReportFile::named("/nonexistent.json")];
/// let answers = read_all(&files, 2)?;
/// assert_eq!(answers[0].as_ref().unwrap().fingerprint.nodes.len(), 4);
/// let left = answers[1].as_ref().unwrap_err();
/// assert!(left.reason.starts_with("cannot be opened"), "{left}");
/// # Ok::<(), numalab_bench::fleet::FleetError>(())
/// ```
pub fn read_all(
    files: &[ReportFile],
    threads: usize,
) -> Result<Vec<Result<HostResult, LeftOut>>, FleetError> {
    read_all_within(files, threads, MAX_TOTAL_FIGURES)
}

/// [`read_all`] with at most `limit` figures in all.
fn read_all_within(
    files: &[ReportFile],
    threads: usize,
    limit: usize,
) -> Result<Vec<Result<HostResult, LeftOut>>, FleetError> {
    let threads = threads.clamp(1, MAX_THREADS).min(files.len().max(1));
    let next = AtomicUsize::new(0);
    let figures = AtomicUsize::new(0);
    let too_many = AtomicBool::new(false);
    // Each file's identity, with the earliest index it was read under.
    let first: Mutex<HashMap<(u64, u64), usize>> = Mutex::new(HashMap::new());
    let read = |i: usize, file: &ReportFile| -> Answer {
        let left = |why| Answer::Left(LeftOut::new(&file.path, why));
        let input = match file.read() {
            Ok(input) => input,
            Err(why) => return left(why),
        };
        {
            let mut first = first.lock().unwrap_or_else(|e| e.into_inner());
            let at = first.entry(input.id).or_insert(i);
            if *at < i {
                return Answer::Again(input.id);
            }
            *at = i;
        }
        let mut host = match HostResult::parse(&input.bytes, &file.path) {
            Ok(host) => host,
            Err(why) => return left(why),
        };
        // Only counts: no other memory is shared through it.
        let total = figures.fetch_add(host.figures.len(), Ordering::Relaxed) + host.figures.len();
        if total > limit {
            too_many.store(true, Ordering::Relaxed);
        }
        host.source = Some(Source {
            file: file.clone(),
            id: input.id,
            digest: digest(&input.bytes),
        });
        Answer::Host(Box::new(host))
    };
    let mut answers: Vec<(usize, Answer)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    while !too_many.load(Ordering::Relaxed) {
                        // Only hands out indices: no other memory is
                        // shared through it.
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(file) = files.get(i) else { break };
                        mine.push((i, read(i, file)));
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
    if too_many.load(Ordering::Relaxed) {
        return Err(FleetError::TooManyFigures {
            count: figures.load(Ordering::Relaxed),
            limit,
        });
    }
    answers.sort_by_key(|(i, _)| *i);
    let first = first.into_inner().unwrap_or_else(|e| e.into_inner());
    let again = |i: usize, id| {
        Err(LeftOut::new(
            &files[i].path,
            format!(
                "the same file as {}: read once",
                files[first[&id]].path.display()
            ),
        ))
    };
    Ok(answers
        .into_iter()
        .map(|(i, answer)| match answer {
            Answer::Host(host) => match host.source.as_ref().map(|s| s.id) {
                // Read here before an earlier name of it was.
                Some(id) if first[&id] != i => again(i, id),
                _ => Ok(*host),
            },
            Answer::Left(left) => Err(left),
            Answer::Again(id) => again(i, id),
        })
        .collect())
}

/// The parts of a `numalab.report` document the fleet reads; everything
/// else in the file is skipped unparsed.
#[derive(Deserialize)]
struct View {
    schema: Option<String>,
    #[serde(default, deserialize_with = "present")]
    schema_version: Option<serde_json::Value>,
    created: Option<String>,
    numalab_version: Option<String>,
    host: Option<String>,
    #[serde(default)]
    task: TaskIdentity,
    topology: Option<TopoReport>,
    matrix: Option<MatrixView>,
}

#[derive(Deserialize)]
struct MatrixView {
    environment: Option<Environment>,
    shape: ShapeView,
    settings: SettingsView,
    latency: Option<Cells<LatencyView>>,
    bandwidth: Option<Cells<BandwidthView>>,
    #[serde(default)]
    interrupted: bool,
}

#[derive(Deserialize)]
struct ShapeView {
    initiators: Vec<u32>,
    targets: Vec<u32>,
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

/// Whether `text` reads as a numalab version (`0.1.0+3f2c1a9b7d4e`):
/// what the fleet prints of it can hold nothing else.
fn version_like(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 80
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".+-".contains(&b))
}

/// Whether `created` is a date a report can have: an RFC 3339 time, and
/// not more than a day ahead of this machine's clock (a report from the
/// future would win over every real one of its host).
fn dated(created: &str) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    crate::document::seconds_since_epoch(created).is_some_and(|t| t <= now + 86_400)
}

/// Only the envelope, to say what a file that did not parse is.
#[derive(Deserialize)]
struct Header {
    schema: Option<String>,
    #[serde(default, deserialize_with = "present")]
    schema_version: Option<serde_json::Value>,
}

/// A field that is there, whatever it holds (`null` too): `None` only
/// when it is missing.
fn present<'de, D: serde::Deserializer<'de>>(
    field: D,
) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(field).map(Some)
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
        check_header(view.schema.as_deref(), view.schema_version.as_ref())?;
        let (Some(topology), Some(matrix)) = (view.topology, view.matrix) else {
            return Err(format!(
                "not a valid {} document: it has no topology or no matrix",
                Report::NAME
            ));
        };
        // The checks `report --from` makes, before any figure is kept.
        let machine = &topology.topology;
        let cells = |m: Option<usize>| m.unwrap_or(0);
        crate::report::check_saved_sizes(&crate::report::SavedSizes {
            nodes: machine.nodes.len(),
            cpus: machine.cpus.len(),
            caches: machine.last_level_caches.len(),
            devices: machine.devices.len(),
            initiators: matrix.shape.initiators.len(),
            targets: matrix.shape.targets.len(),
            matrices: vec![
                (
                    "latency",
                    cells(matrix.latency.as_ref().map(|m| m.cells.len())),
                ),
                (
                    "bandwidth",
                    cells(matrix.bandwidth.as_ref().map(|m| m.cells.len())),
                ),
            ],
            sweep_cells: 0,
        })?;
        let nodes = crate::report::saved_nodes(machine);
        let shape = &matrix.shape;
        crate::report::check_shape_nodes(&nodes, &shape.initiators, &shape.targets)?;
        let latency = matrix.latency.iter().flat_map(|m| &m.cells);
        crate::report::check_cell_nodes(
            &nodes,
            "latency",
            latency.map(|c| (c.initiator, c.target)),
        )?;
        let bandwidth = matrix.bandwidth.iter().flat_map(|m| &m.cells);
        crate::report::check_cell_nodes(
            &nodes,
            "bandwidth",
            bandwidth.map(|c| (c.initiator, c.target)),
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
            // A median of 0 is a figure of no samples: not measured. Any
            // other is kept, and checked below.
            if let Some(f) = figure.filter(|f| f.median != 0.0) {
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
        if let Some(why) = figures
            .iter()
            .find_map(|&(cell, value)| Metric::implausible(cell, value))
        {
            return Err(why);
        }
        figures.sort_by_key(|(cell, _)| *cell);
        figures.dedup_by_key(|(cell, _)| *cell);
        Ok(HostResult {
            host,
            file: file.to_owned(),
            // A date that does not read is no date: it can neither be shown
            // nor order two reports of a host.
            created: view.created.filter(|c| dated(c)),
            fingerprint,
            task: view.task,
            numalab_version: view.numalab_version.filter(|v| version_like(v)),
            figures,
            interrupted: matrix.interrupted,
            source: None,
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

/// Refuses a document of another schema or version; `version` is the
/// `schema_version` field as it is in the file.
fn check_header(schema: Option<&str>, version: Option<&serde_json::Value>) -> Result<(), String> {
    match (schema, version) {
        (None, _) => Err("not a numalab document: it has no \"schema\" field".into()),
        (Some(schema), _) if schema != Report::NAME => {
            Err(format!("a {schema} document, not {}", Report::NAME))
        }
        (Some(_), None) => Err(format!(
            "not a valid {} document: it has no \"schema_version\" field",
            Report::NAME
        )),
        (Some(_), Some(version)) => match version.as_u64() {
            Some(version) if version == u64::from(Report::VERSION) => Ok(()),
            Some(version) => Err(format!(
                "{} version {version}; this numalab reads version {}",
                Report::NAME,
                Report::VERSION
            )),
            None => {
                let mut held = version.to_string();
                if held.len() > 40 {
                    let cut = (0..=40).rev().find(|&i| held.is_char_boundary(i));
                    held.truncate(cut.unwrap_or(0));
                    held.push('…');
                }
                Err(format!(
                    "not a valid {} document: its \"schema_version\" is {held}, not a version number",
                    Report::NAME
                ))
            }
        },
    }
}

/// Why `bytes` did not parse as a report: said by the envelope when it
/// reads, by the JSON error otherwise.
fn why_not(bytes: &[u8], err: &serde_json::Error) -> String {
    use serde_json::error::Category;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return "empty: no JSON in the file".into();
    }
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
            match check_header(header.schema.as_deref(), header.schema_version.as_ref()) {
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
    fn a_schema_version_that_is_no_number_is_named() {
        let file = Path::new("x.json");
        for (version, held) in [
            (serde_json::json!(-1), "-1"),
            (serde_json::json!("1"), "\"1\""),
            (serde_json::Value::Null, "null"),
            (serde_json::json!(1.5), "1.5"),
        ] {
            let doc = edited(&|doc| doc["schema_version"] = version.clone());
            assert_eq!(
                HostResult::parse(&doc, file).unwrap_err(),
                format!("not a valid numalab.report document: its \"schema_version\" is {held}, not a version number")
            );
        }
        let doc = edited(&|doc| {
            doc.as_object_mut().unwrap().remove("schema_version");
        });
        assert_eq!(
            HostResult::parse(&doc, file).unwrap_err(),
            "not a valid numalab.report document: it has no \"schema_version\" field"
        );
        let doc = edited(&|doc| doc["schema_version"] = (1u64 << 40).into());
        assert_eq!(
            HostResult::parse(&doc, file).unwrap_err(),
            "numalab.report version 1099511627776; this numalab reads version 1"
        );
    }

    #[test]
    fn an_empty_file_is_called_empty() {
        for empty in [&b""[..], b"  \n"] {
            assert_eq!(
                HostResult::parse(empty, Path::new("x.json")).unwrap_err(),
                "empty: no JSON in the file"
            );
        }
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
        let negative = edited(&|doc| {
            doc["matrix"]["latency"]["cells"][1]["latency_ns"]["median"] = (-1e308).into()
        });
        let why = HostResult::parse(&negative, file).unwrap_err();
        assert!(
            why.starts_with("latency 0->1 is -1e308 ns: not a measurement"),
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

    /// A scratch directory for one test.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("numalab-read-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn an_entry_that_is_a_link_when_opened_is_left_out_as_one() {
        let dir = scratch("link-at-open");
        let secret = dir.join("secret");
        std::fs::write(&secret, edited(&|doc| doc["host"] = "secret".into())).unwrap();
        let results = dir.join("results");
        std::fs::create_dir(&results).unwrap();
        std::fs::write(results.join("zz.json"), two_socket()).unwrap();
        let (files, left_out) = list(std::slice::from_ref(&results)).unwrap();
        assert!(left_out.is_empty() && files.len() == 1);
        // Listed as a file, a link by the time it is opened.
        std::fs::remove_file(results.join("zz.json")).unwrap();
        std::os::unix::fs::symlink(&secret, results.join("zz.json")).unwrap();
        let answers = read_all(&files, 1).unwrap();
        let left = answers[0].as_ref().unwrap_err();
        assert_eq!(left.reason, LINK_IN_DIRECTORY);
        assert_eq!(left.path, results.join("zz.json").display().to_string());
        // A file named directly is still followed, as the user named it.
        let named = [ReportFile::named(results.join("zz.json"))];
        let host = read_all(&named, 1).unwrap().remove(0).unwrap();
        assert_eq!(host.host, "secret");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_page_is_made_from_the_bytes_merged_or_not_at_all() {
        let dir = scratch("read-again");
        let file = dir.join("a.json");
        std::fs::write(&file, two_socket()).unwrap();
        let (files, _) = list(std::slice::from_ref(&dir)).unwrap();
        let host = read_all(&files, 1).unwrap().remove(0).unwrap();
        let source = host.source.unwrap();
        assert_eq!(source.read_again().unwrap(), two_socket().as_bytes());
        // The same name, other bytes: refused.
        std::fs::write(&file, edited(&|doc| doc["host"] = "other".into())).unwrap();
        let why = source.read_again().unwrap_err();
        assert!(
            why.ends_with("changed since it was merged: not read again"),
            "{why}"
        );
        // A link at the name by then: not followed.
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(dir.join("elsewhere"), &file).unwrap();
        assert_eq!(source.read_again().unwrap_err(), LINK_IN_DIRECTORY);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_under_two_names_is_merged_once() {
        let dir = scratch("hard-links");
        std::fs::write(dir.join("a.json"), two_socket()).unwrap();
        for name in ["b.json", "c.json"] {
            std::fs::hard_link(dir.join("a.json"), dir.join(name)).unwrap();
        }
        let (files, _) = list(std::slice::from_ref(&dir)).unwrap();
        for threads in [1, 3] {
            let answers = read_all(&files, threads).unwrap();
            assert!(answers[0].is_ok());
            for answer in &answers[1..] {
                let left = answer.as_ref().unwrap_err();
                assert_eq!(
                    left.reason,
                    format!(
                        "the same file as {}: read once",
                        dir.join("a.json").display()
                    )
                );
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_figures_of_all_reports_together_are_bounded() {
        let dir = scratch("total");
        for name in ["a.json", "b.json", "c.json"] {
            std::fs::write(dir.join(name), edited(&|doc| doc["host"] = name.into())).unwrap();
        }
        let (files, _) = list(std::slice::from_ref(&dir)).unwrap();
        // 16 figures a report: two fit in 40, three do not.
        assert_eq!(read_all_within(&files[..2], 2, 40).unwrap().len(), 2);
        let err = read_all_within(&files, 1, 40).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the reports read hold 48 figures, more than the 40 one merge keeps: merge the directories in parts"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_date_that_does_not_read_is_no_date() {
        let file = Path::new("x.json");
        for bad in [
            "9999-99-99T99:99:99Z",
            "zzz",
            "2026-11-27",
            "",
            "9999-12-31T23:59:59Z",
        ] {
            let doc = edited(&|doc| doc["created"] = bad.into());
            let host = HostResult::parse(&doc, file).unwrap();
            assert_eq!(host.created, None, "{bad:?}");
        }
        let doc = edited(&|doc| doc["created"] = "2026-11-27T05:00:00+05:00".into());
        let host = HostResult::parse(&doc, file).unwrap();
        assert_eq!(host.created.as_deref(), Some("2026-11-27T05:00:00+05:00"));
    }
}
