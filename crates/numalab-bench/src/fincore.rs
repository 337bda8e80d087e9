//! `numalab fincore`: util-linux `fincore`'s question — how much of each
//! file is in the page cache — with a column per node, over files and
//! whole directory trees, and each node's page cache beside it. Nothing
//! is read from the files ([`numalab::pagecache`]).

use std::collections::HashSet;
use std::fs::{self, File};
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use numalab::files::TreeDir;
use numalab::pagecache::{file_cache_threads, open_for_cache_at, FileCache, FileCacheBatch};
use numalab::system::NodeMemory;
use serde::{Deserialize, Serialize};

use crate::document::Schema;

/// The most files one `numalab fincore` counts: each keeps a row of the
/// result, and its table or JSON is written from that (measured: 200,000
/// files took 84 MiB at most for the table, 105 MiB for `--json`, about
/// half a kilobyte a file), so ten million bound it to about 5 GB.
pub const MAX_FILES: usize = 10_000_000;

/// The most bytes of paths one run holds (the files counted and the ones
/// that failed): 512 MiB, ten million paths of 50 bytes. Paths of deep
/// trees of long names (15 KB each) would otherwise take gigabytes long
/// before [`MAX_FILES`].
pub const MAX_PATH_BYTES: usize = 512 << 20;

/// Everything `numalab fincore` found (`--json`).
///
/// ```
/// use numalab_bench::fincore;
/// let dir = std::env::temp_dir().join(format!("numalab-fincore-doc-{}", std::process::id()));
/// std::fs::create_dir_all(dir.join("sub"))?;
/// std::fs::write(dir.join("a"), vec![1u8; 8192])?;
/// std::fs::write(dir.join("sub/b"), vec![2u8; 4096])?;
/// let report = fincore::run(&[dir.clone()]);
/// std::fs::remove_dir_all(&dir)?;
/// let report = report?;
/// assert_eq!(report.files.len(), 2, "directories are walked");
/// assert_eq!(report.total.size, 8192 + 4096);
/// assert!(report.failed.is_empty());
/// // What --json writes reads back as it was.
/// let json = numalab_bench::document::Document::new(&report).to_json()?;
/// let back = numalab_bench::document::Document::<numalab_bench::fincore::FincoreReport>::from_value(
///     serde_json::from_str(&json)?,
/// )?;
/// assert_eq!(back, report);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FincoreReport {
    /// Each regular file, in the order given (a directory's files sorted
    /// by name, depth first).
    pub files: Vec<CachedFile>,
    /// All of them together.
    pub total: FileCache,
    /// Each node's memory now: its whole page cache (`file_bytes`,
    /// `FilePages`), the part reclaim can free (`file_lru_bytes`), free.
    pub nodes: Vec<NodeMemory>,
    /// Files that could not be counted, with why.
    pub failed: Vec<Unreadable>,
    /// Entries of the directories walked that were not counted:
    /// symbolic links (never followed inside a directory, so a link
    /// cannot lead the walk in a loop or count a file twice) and other
    /// special files (FIFOs, devices, sockets).
    pub skipped: Skipped,
}

/// One file's cache.
///
/// ```
/// use numalab_bench::fincore::CachedFile;
/// let file = CachedFile { path: "/data/a".into(), cache: Default::default(), files: 1 };
/// assert_eq!(file.cache.cached, 0);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedFile {
    /// As given, or under the directory given.
    pub path: String,
    /// Its pages in the cache, per node. (Not flattened into the file's
    /// object: serde cannot read a flattened map with number keys back.)
    pub cache: FileCache,
    /// How many files the row stands for: 1, or a path's files added up
    /// ([`FincoreOptions::summarize`]).
    #[serde(default = "one_file")]
    pub files: u64,
}

/// A row of a report written before rows could add files up is one file.
fn one_file() -> u64 {
    1
}

/// A path that could not be counted.
///
/// ```
/// use numalab_bench::fincore;
/// let report = fincore::run(&["/no/such/file".into()])?;
/// assert_eq!(report.failed[0].path, "/no/such/file");
/// assert!(report.failed[0].error.contains("No such file"), "{}", report.failed[0].error);
/// # Ok::<(), numalab_bench::fincore::FincoreError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unreadable {
    /// The path.
    pub path: String,
    /// Why, in one sentence.
    pub error: String,
}

/// What a directory walk passed over ([`FincoreReport::skipped`]).
///
/// ```
/// use numalab_bench::fincore::Skipped;
/// assert_eq!(Skipped::default().links, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// Symbolic links.
    pub links: u64,
    /// FIFOs, devices and sockets.
    pub special: u64,
}

impl Schema for FincoreReport {
    const NAME: &'static str = "numalab.fincore";
    const VERSION: u32 = 1;
}

/// Why `numalab fincore` stopped before counting everything.
///
/// ```
/// use numalab_bench::fincore::FincoreError;
/// let err = FincoreError::TooManyFiles;
/// assert!(err.to_string().contains("10000000"));
/// ```
#[derive(Debug, thiserror::Error)]
pub enum FincoreError {
    /// A thread count of 0 or over [`MAX_THREADS`].
    #[error("threads = {0}: give 1 to {MAX_THREADS} threads")]
    Threads(usize),
    /// More files than [`MAX_FILES`].
    #[error("more than {MAX_FILES} files under the paths given, the most numalab fincore counts in one run; name fewer or deeper directories")]
    TooManyFiles,
    /// Paths of more than [`MAX_PATH_BYTES`] in all.
    #[error("the paths of the files under the paths given take more than {} MiB, the most numalab fincore holds in one run; name fewer or shallower directories", MAX_PATH_BYTES >> 20)]
    TooMuchPath,
    /// A node's memory could not be read.
    #[error("reading node {node}'s memory: {source}")]
    Node {
        /// The node.
        node: u32,
        /// Why.
        source: io::Error,
    },
}

/// Counts the cached pages of every regular file named in `paths` or
/// found under a directory named there, with [`FincoreOptions::default`].
/// A path that cannot be counted (missing, unreadable, a FIFO or device
/// named directly) is kept in [`FincoreReport::failed`] and the rest go
/// on, as util-linux `fincore` does; only more than [`MAX_FILES`] files
/// stops it.
pub fn run(paths: &[PathBuf]) -> Result<FincoreReport, FincoreError> {
    run_with(paths, FincoreOptions::default())
}

/// How [`run_with`] counts.
///
/// ```
/// use numalab_bench::fincore::{run_with, FincoreOptions};
/// let path = std::env::temp_dir().join(format!("numalab-fincore-threads-{}", std::process::id()));
/// std::fs::write(&path, vec![1u8; 8192])?;
/// let report = run_with(&[path.clone()], FincoreOptions { threads: 1, summarize: false });
/// std::fs::remove_file(&path)?;
/// assert_eq!(report?.total.pages, 2);
///
/// // A directory summarised: one row, its files together (as du -s).
/// let dir = std::env::temp_dir().join(format!("numalab-fincore-summary-{}", std::process::id()));
/// std::fs::create_dir_all(dir.join("sub"))?;
/// std::fs::write(dir.join("a"), vec![1u8; 8192])?;
/// std::fs::write(dir.join("sub/b"), vec![2u8; 4096])?;
/// let options = FincoreOptions { summarize: true, ..FincoreOptions::default() };
/// let report = run_with(&[dir.clone()], options);
/// std::fs::remove_dir_all(&dir)?;
/// let report = report?;
/// assert_eq!(report.files.len(), 1);
/// assert_eq!(report.files[0].path, dir.display().to_string());
/// assert_eq!((report.files[0].cache.pages, report.files[0].files), (3, 2));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FincoreOptions {
    /// Threads counting at once (files, or parts of a large file): the
    /// node of each cached page is found by mapping it, which costs
    /// several times what `mincore` does, and the threads share that.
    pub threads: usize,
    /// One row per path given, its files' caches added up (`du -s`'s
    /// summary for the page cache), instead of one per file.
    pub summarize: bool,
}

impl Default for FincoreOptions {
    /// The CPUs this process may run on, at most [`DEFAULT_THREADS`]; a
    /// row per file.
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        FincoreOptions {
            threads: cpus.min(DEFAULT_THREADS),
            summarize: false,
        }
    }
}

/// The most threads [`FincoreOptions::default`] takes: beyond that,
/// creating and tearing down the mappings (one lock per process) stops
/// getting faster.
pub const DEFAULT_THREADS: usize = 8;

/// The most threads [`run_with`] accepts.
pub const MAX_THREADS: usize = 1024;

/// Files counted together, by [`FincoreOptions::threads`] threads; the
/// walk goes on after each batch, so a large tree is never all held
/// twice.
const BATCH: usize = 1024;

/// [`run`] counted as `options` say; the same report whatever the
/// thread count.
pub fn run_with(paths: &[PathBuf], options: FincoreOptions) -> Result<FincoreReport, FincoreError> {
    if !(1..=MAX_THREADS).contains(&options.threads) {
        return Err(FincoreError::Threads(options.threads));
    }
    let mut counter = Counter::new(options.threads);
    // Directories already walked, by device and inode: a bind mount of a
    // directory inside itself cannot loop.
    let mut walked = HashSet::new();
    for path in paths {
        let first = counter.report.files.len();
        match fs::metadata(path) {
            Ok(meta) if meta.is_dir() => walk(path, &mut walked, &mut counter)?,
            Ok(_) => counter.push(Job::Count(Target {
                at: None,
                name: path.clone(),
                shown: path.clone(),
            }))?,
            Err(err) => counter.push(Job::Failed(Unreadable::new(path, err.to_string())))?,
        }
        if options.summarize {
            // The path's files are all counted before they are added up.
            counter.flush();
            let mut summary = CachedFile {
                path: path.display().to_string(),
                cache: FileCache::default(),
                files: 0,
            };
            for file in counter.report.files.drain(first..) {
                summary.cache.add(&file.cache);
                summary.files += file.files;
            }
            if summary.files > 0 {
                counter.report.files.push(summary);
            }
        }
    }
    counter.flush();
    let mut report = counter.report;
    report.nodes = node_memory(&numalab::NodeInventory::live().with_memory)?;
    Ok(report)
}

/// Each node's memory now, for the table beside the files.
pub(crate) fn node_memory(nodes: &numalab::NodeSet) -> Result<Vec<NodeMemory>, FincoreError> {
    nodes
        .iter()
        .map(|node| NodeMemory::read(node).map_err(|source| FincoreError::Node { node, source }))
        .collect()
}

/// `path: why`, as util-linux tools name a file they could not use.
impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.error)
    }
}

impl Unreadable {
    pub(crate) fn new(path: &Path, error: String) -> Unreadable {
        Unreadable {
            path: path.display().to_string(),
            error,
        }
    }
}

/// A file to count, or a path already known not to be countable, kept in
/// walk order.
enum Job {
    Count(Target),
    Failed(Unreadable),
}

/// A file to count or a directory to list: named by the user (`at`
/// none, a link followed), or found in a walk (`name` inside the
/// directory `at` holds, a link at `name` not followed), with the path it
/// is shown as.
struct Target {
    at: Option<Arc<TreeDir>>,
    name: PathBuf,
    shown: PathBuf,
}

impl Target {
    /// Opens the file, once it is known to be a regular file
    /// ([`open_for_cache_at`]).
    fn open(&self) -> Result<File, String> {
        let at = self.at.as_ref().map(|fd| fd.as_fd());
        open_for_cache_at(at, &self.name, self.at.is_none()).map_err(|err| err.to_string())
    }
}

/// The report so far and the batch of files not yet counted.
struct Counter {
    report: FincoreReport,
    jobs: Vec<Job>,
    threads: usize,
    /// Bytes of the paths pushed so far.
    path_bytes: usize,
}

impl Counter {
    /// An empty report, counted by `threads` threads.
    fn new(threads: usize) -> Counter {
        Counter {
            report: FincoreReport {
                files: Vec::new(),
                total: FileCache::default(),
                nodes: Vec::new(),
                failed: Vec::new(),
                skipped: Skipped::default(),
            },
            jobs: Vec::new(),
            threads,
            path_bytes: 0,
        }
    }

    fn push(&mut self, job: Job) -> Result<(), FincoreError> {
        if matches!(job, Job::Count(..)) && self.report.files.len() + self.jobs.len() >= MAX_FILES {
            return Err(FincoreError::TooManyFiles);
        }
        self.path_bytes += match &job {
            Job::Count(target) => target.shown.as_os_str().len(),
            Job::Failed(failed) => failed.path.len() + failed.error.len(),
        };
        if self.path_bytes > MAX_PATH_BYTES {
            return Err(FincoreError::TooMuchPath);
        }
        self.jobs.push(job);
        if self.jobs.len() >= BATCH {
            self.flush();
        }
        Ok(())
    }

    /// Counts the batch, its files shared among the threads (a thread
    /// takes the next file when done with one; a lone file is shared out
    /// in parts), and adds it in walk order.
    fn flush(&mut self) {
        let jobs = std::mem::take(&mut self.jobs);
        let files = jobs
            .iter()
            .filter(|job| matches!(job, Job::Count(..)))
            .count();
        let counted: Vec<Option<Result<FileCache, String>>> = if files == 1 {
            let threads = self.threads;
            jobs.iter()
                .map(|job| match job {
                    Job::Count(target) => Some(target.open().and_then(|file| {
                        file_cache_threads(&file, threads).map_err(|err| err.to_string())
                    })),
                    Job::Failed(_) => None,
                })
                .collect()
        } else {
            let next = AtomicUsize::new(0);
            // Each thread counts through its own batch (its own mappings,
            // so no thread's unmapping interrupts another's CPU).
            let count = || {
                let mut batch = FileCacheBatch::new();
                let mut mine = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    if let Job::Count(target) = job {
                        match target.open() {
                            Ok(file) => mine.push((i, Ok(batch.add(&file)))),
                            Err(err) => mine.push((i, Err(err))),
                        }
                    }
                }
                let mut caches: Vec<Option<Result<FileCache, String>>> = batch
                    .finish()
                    .into_iter()
                    .map(|cache| Some(cache.map_err(|err| err.to_string())))
                    .collect();
                mine.into_iter()
                    .map(|(i, added)| match added {
                        Ok(at) => (i, caches[at].take().expect("one count per file")),
                        Err(err) => (i, Err(err)),
                    })
                    .collect::<Vec<_>>()
            };
            let threads = self.threads.min(files);
            let mut counted: Vec<(usize, Result<FileCache, String>)> = if threads <= 1 {
                count()
            } else {
                std::thread::scope(|scope| {
                    let running: Vec<_> = (0..threads).map(|_| scope.spawn(count)).collect();
                    running
                        .into_iter()
                        .flat_map(|thread| {
                            thread
                                .join()
                                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                        })
                        .collect()
                })
            };
            counted.sort_unstable_by_key(|&(i, _)| i);
            let mut counted = counted.into_iter().peekable();
            (0..jobs.len())
                .map(|i| {
                    counted
                        .next_if(|&(at, _)| at == i)
                        .map(|(_, result)| result)
                })
                .collect()
        };
        for (job, result) in jobs.into_iter().zip(counted) {
            match (job, result) {
                (Job::Count(target), Some(Ok(cache))) => {
                    self.report.total.add(&cache);
                    self.report.files.push(CachedFile {
                        path: target.shown.display().to_string(),
                        cache,
                        files: 1,
                    });
                }
                (Job::Count(target), Some(Err(error))) => {
                    self.report
                        .failed
                        .push(Unreadable::new(&target.shown, error));
                }
                (Job::Failed(failed), _) => self.report.failed.push(failed),
                (Job::Count(..), None) => unreachable!("every file is counted"),
            }
        }
    }
}

/// Every regular file under `root`, depth first, entries sorted by name.
///
/// Each directory is opened from the descriptor of the one above it, a
/// link never followed (`O_NOFOLLOW | O_DIRECTORY`), and each file from
/// its directory's descriptor: whatever another user renames or swaps
/// for a link during the walk, it never leaves the tree it began in.
/// Only `root` itself is opened as named (a link there followed).
fn walk(
    root: &Path,
    walked: &mut HashSet<(u64, u64)>,
    counter: &mut Counter,
) -> Result<(), FincoreError> {
    let mut stack = vec![Target {
        at: None,
        name: root.to_path_buf(),
        shown: root.to_path_buf(),
    }];
    while let Some(dir) = stack.pop() {
        let failed = |err: io::Error| Job::Failed(Unreadable::new(&dir.shown, err.to_string()));
        let opened = match &dir.at {
            None => TreeDir::open(&dir.name).map(Some),
            Some(parent) => parent.open_child(&dir.name),
        };
        let fd = match opened {
            Ok(Some(fd)) => Arc::new(fd),
            // Swapped for a link since its directory was listed.
            Ok(None) => {
                counter.report.skipped.links += 1;
                continue;
            }
            Err(err) => {
                counter.push(failed(err))?;
                continue;
            }
        };
        if !walked.insert(fd.id()) {
            continue;
        }
        let entries = match fd.entries() {
            Ok(entries) => entries,
            Err(err) => {
                counter.push(failed(err))?;
                continue;
            }
        };
        let mut names: Vec<(std::ffi::OsString, fs::FileType)> = Vec::new();
        for entry in entries {
            match entry.and_then(|e| Ok((e.file_name(), e.file_type()?))) {
                Ok(named) => names.push(named),
                Err(err) => counter.push(failed(err))?,
            }
            if names.len() > MAX_FILES {
                return Err(FincoreError::TooManyFiles);
            }
        }
        // Names in one directory: byte order, as the paths' order.
        names.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut subdirs = Vec::new();
        for (name, kind) in names {
            let shown = dir.shown.join(&name);
            let at = Some(Arc::clone(&fd));
            let name = PathBuf::from(name);
            if kind.is_dir() {
                subdirs.push(Target { at, name, shown });
            } else if kind.is_file() {
                counter.push(Job::Count(Target { at, name, shown }))?;
            } else if kind.is_symlink() {
                counter.report.skipped.links += 1;
            } else {
                counter.report.skipped.special += 1;
            }
        }
        // Depth first, in name order.
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paths_held_are_bounded_in_bytes_not_only_in_files() {
        let mut counter = Counter::new(1);
        // As after 100,000 paths of 5 KiB each, less 10 bytes.
        counter.path_bytes = MAX_PATH_BYTES - 10;
        let failed = |path: &str| Job::Failed(Unreadable::new(Path::new(path), String::new()));
        assert!(counter.push(failed("/a")).is_ok());
        let err = counter.push(failed("/a-longer-path")).unwrap_err();
        assert!(matches!(err, FincoreError::TooMuchPath), "{err}");
        assert!(err.to_string().contains("more than 512 MiB"), "{err}");
    }
}
