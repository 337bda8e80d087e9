//! `numalab pagecache bench`: the cluster mailing-list post's experiment,
//! generalised. A file's page cache is placed on one node; 1…N readers,
//! each pinned to a CPU of that node or of another, read the whole file
//! (`read(2)` at a block size, as `dd bs=8192` did, or through `mmap`),
//! started in groups with an offset; the figure is the time until the
//! last reader finished, beside each reader's and the readers' combined
//! GB/s, the remote/local ratio beside SLIT/10 and the measured read
//! bandwidth's ratio, and where the cache was before and after each cell.
//!
//! The run is planned first ([`plan`]): every count, size, node and CPU
//! is checked, and each cell either has its CPUs or a reason it cannot
//! run here, before a byte is written or read. A file numalab creates is
//! unnamed ([`numalab::files::scratch_file`]): nothing is left behind,
//! however the run ends.
//!
//! ```
//! use numalab::Topology;
//! use numalab_bench::pagecache::{plan, run, BenchConfig, FileSource};
//! use std::sync::atomic::AtomicBool;
//!
//! let topology = Topology::system()?;
//! let config = BenchConfig {
//!     file: FileSource::Create { dir: std::env::temp_dir(), size: 8 << 20 },
//!     repeats: 1,
//!     compare_matrix: false,
//!     ..BenchConfig::default()
//! };
//! let plan = plan(&config, &topology)?;
//! let report = run(&plan, &topology, &mut |_| {}, &AtomicBool::new(false))?;
//! let cell = &report.cells[0];
//! assert_eq!(cell.repeats[0].readers[0].bytes, 8 << 20);
//! assert!(cell.time_to_last_s.unwrap() > 0.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use numalab::pagecache::{self as cache, BusErrorExit, FileCache, MappedFile, PageCacheError};
use numalab::replicated::{
    FileCopyError, FileCopyOptions, FileReader, NodeCopyStats, ReplicatedFile,
};
use numalab::system::Environment;
use numalab::units::count;
use numalab::{HugePages, NodeInventory, Topology};
use serde::{Deserialize, Serialize};

use crate::document::Schema;
use crate::matrix::bandwidth::{self, Kernel, StreamTiming};
use crate::matrix::shape::spread_cpus;
use crate::ring::CellStatus;
use crate::stats::Summary;
use crate::workers::{run_pinned, WorkerError};

/// The most readers in one cell.
pub const MAX_READERS: usize = 1024;
/// The largest block one `read(2)` asks for: 1 GiB.
pub const MAX_BLOCK: u64 = 1 << 30;
/// The most repeats of a cell.
pub const MAX_REPEATS: usize = 100;
/// The longest offset between two groups of readers.
pub const MAX_STAGGER: Duration = Duration::from_secs(60);
/// The largest file numalab creates: 1 TiB.
pub const MAX_SIZE: u64 = 1 << 40;
/// The most time all the staggered starts of a run may add up to (every
/// cell, every repeat): readers waiting for their group's turn.
pub const MAX_TOTAL_STAGGER: Duration = Duration::from_secs(3600);

/// How readers read the file.
///
/// ```
/// use numalab_bench::pagecache::Method;
/// assert_eq!(Method::Read.to_string(), "read(2)");
/// assert_eq!(serde_json::to_value(Method::Mmap)?, "mmap");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// `pread(2)` of one block at a time into the reader's own buffer, as
    /// `dd` does.
    #[default]
    Read,
    /// The file mapped shared and read-only by each reader, copied out a
    /// block at a time (pages are mapped on first touch).
    Mmap,
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Method::Read => "read(2)",
            Method::Mmap => "mmap",
        })
    }
}

/// Where a cell's readers run, relative to the cache's node.
///
/// ```
/// use numalab_bench::pagecache::ReaderPlace;
/// assert_eq!("other".parse::<ReaderPlace>(), Ok(ReaderPlace::Other));
/// assert_eq!("3".parse::<ReaderPlace>(), Ok(ReaderPlace::Node(3)));
/// assert!("far".parse::<ReaderPlace>().unwrap_err().contains("same, other or a node"));
/// assert_eq!(ReaderPlace::Same.to_string(), "same");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReaderPlace {
    /// CPUs of the node holding the cache.
    Same,
    /// CPUs of the nearest other node that has CPUs (by SLIT).
    Other,
    /// CPUs of this node.
    Node(u32),
}

impl fmt::Display for ReaderPlace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReaderPlace::Same => f.write_str("same"),
            ReaderPlace::Other => f.write_str("other"),
            ReaderPlace::Node(n) => write!(f, "node {n}"),
        }
    }
}

impl std::str::FromStr for ReaderPlace {
    type Err = String;
    fn from_str(text: &str) -> Result<ReaderPlace, String> {
        match text.trim() {
            "same" => Ok(ReaderPlace::Same),
            "other" => Ok(ReaderPlace::Other),
            node => node.parse().map(ReaderPlace::Node).map_err(|_| {
                format!("invalid reader node {text:?}: expected same, other or a node number")
            }),
        }
    }
}

/// The file the readers read.
///
/// ```
/// use numalab_bench::pagecache::FileSource;
/// let made = FileSource::Create { dir: "/var/tmp".into(), size: 1 << 30 };
/// let yours = FileSource::Given("/data/table.bin".into());
/// assert_ne!(made, yours);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileSource {
    /// A new unnamed file of `size` bytes in `dir`, written on the
    /// cache's node (and flushed, so its pages are clean).
    Create {
        /// Where to make it (its file system decides what "cached" is:
        /// on tmpfs the file's memory is the cache and cannot be dropped).
        dir: PathBuf,
        /// Its size.
        size: u64,
    },
    /// The user's file, read and never written.
    Given(PathBuf),
}

/// Reading through per-node copies of the file ([`ReplicatedFile`]), as
/// a second variant of every cell.
///
/// ```
/// use std::time::Duration;
/// use numalab_bench::pagecache::CopyConfig;
/// let copies = CopyConfig { write_every: Some(Duration::from_millis(10)), ..CopyConfig::default() };
/// assert_eq!(copies.chunk_size, 64 << 10);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct CopyConfig {
    /// Bytes per copy.
    pub chunk_size: u64,
    /// Most bytes of copies per node (default none).
    pub budget_per_node: Option<u64>,
    /// A writer changes one block of the file this often while the
    /// readers read (only a file numalab made).
    pub write_every: Option<Duration>,
}

impl Default for CopyConfig {
    fn default() -> CopyConfig {
        CopyConfig {
            chunk_size: 64 << 10,
            budget_per_node: None,
            write_every: None,
        }
    }
}

/// What to run.
///
/// ```
/// use std::time::Duration;
/// use numalab_bench::pagecache::{BenchConfig, ReaderPlace};
/// // 1 and 5 readers on the cache's node and on another, groups of
/// // five started 1 s apart, 8 KiB reads (the defaults' block size).
/// let config = BenchConfig {
///     readers: vec![1, 5],
///     places: vec![ReaderPlace::Same, ReaderPlace::Other],
///     stagger: Duration::from_secs(1),
///     group: 5,
///     ..BenchConfig::default()
/// };
/// assert_eq!(config.block_size, 8192);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct BenchConfig {
    /// The file.
    pub file: FileSource,
    /// The node to cache it on (default: the first node with memory and
    /// CPUs this process may use).
    pub cache_node: Option<u32>,
    /// Reader counts, one row each.
    pub readers: Vec<usize>,
    /// Reader placements, one column each (default: `same`, and `other`
    /// where the machine has another node with CPUs).
    pub places: Vec<ReaderPlace>,
    /// Between the starts of two groups of readers.
    pub stagger: Duration,
    /// Readers per group.
    pub group: usize,
    /// Bytes per read.
    pub block_size: u64,
    /// `read(2)` or `mmap`.
    pub method: Method,
    /// Timed runs per cell (the figures are medians).
    pub repeats: usize,
    /// Allow more readers than the node has CPUs (they share CPUs).
    pub oversubscribe: bool,
    /// A cell this machine cannot run is kept, with why, instead of
    /// refusing the whole run (`--layout post`).
    pub skip_impossible: bool,
    /// Measure single-thread read bandwidth from each reader node to the
    /// cache's node, for the remote/local ratio of plain memory.
    pub compare_matrix: bool,
    /// Also run every cell reading through per-node copies.
    pub copies: Option<CopyConfig>,
}

impl Default for BenchConfig {
    fn default() -> BenchConfig {
        BenchConfig {
            file: FileSource::Create {
                dir: std::env::temp_dir(),
                size: 1 << 30,
            },
            cache_node: None,
            readers: vec![1],
            places: Vec::new(),
            stagger: Duration::ZERO,
            group: 1,
            block_size: 8192,
            method: Method::Read,
            repeats: 3,
            oversubscribe: false,
            skip_impossible: false,
            compare_matrix: true,
            copies: None,
        }
    }
}

impl BenchConfig {
    /// The post's table: 1, 5, 10, 15 and 30 readers on the cache's node
    /// and on another, `dd bs=8192`, groups of five started 1 s apart;
    /// cells the machine cannot run are kept with why.
    ///
    /// ```
    /// use numalab_bench::pagecache::BenchConfig;
    /// let post = BenchConfig::post(BenchConfig::default());
    /// assert_eq!(post.readers, [1, 5, 10, 15, 30]);
    /// assert_eq!(post.block_size, 8192);
    /// assert!(post.skip_impossible);
    /// ```
    pub fn post(base: BenchConfig) -> BenchConfig {
        BenchConfig {
            readers: vec![1, 5, 10, 15, 30],
            places: vec![ReaderPlace::Same, ReaderPlace::Other],
            stagger: Duration::from_secs(1),
            group: 5,
            block_size: 8192,
            method: Method::Read,
            skip_impossible: true,
            ..base
        }
    }
}

/// Why the bench cannot run, said before anything is written or read.
///
/// ```
/// use numalab_bench::pagecache::{plan, BenchConfig, BenchError};
/// let topology = numalab::Topology::system()?;
/// let config = BenchConfig { block_size: 0, ..BenchConfig::default() };
/// let err = plan(&config, &topology).unwrap_err();
/// assert!(matches!(err, BenchError::Invalid(_)));
/// assert!(err.to_string().contains("--block-size"), "{err}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// A setting is out of range or impossible on this machine.
    #[error("{0}")]
    Invalid(String),
    /// The file cannot be read, made or placed.
    #[error("{path}: {source}")]
    File {
        /// The file (or the directory a new one goes in).
        path: String,
        /// What went wrong.
        source: PageCacheError,
    },
    /// The readers could not be started.
    #[error(transparent)]
    Workers(#[from] WorkerError),
    /// A reader got less than the whole file: it shrank while being read.
    #[error(
        "{path} was truncated while being read: a reader on CPU {cpu} got {got} of {size} bytes"
    )]
    Truncated {
        /// The file.
        path: String,
        /// The reader's CPU.
        cpu: u32,
        /// Bytes it got.
        got: u64,
        /// Bytes the file had.
        size: u64,
    },
}

/// One cell of the plan: its readers' CPUs, or why it cannot run.
///
/// ```
/// use numalab_bench::pagecache::{plan, BenchConfig, FileSource, ReaderPlace};
/// let topology = numalab::Topology::system()?;
/// let config = BenchConfig {
///     file: FileSource::Create { dir: std::env::temp_dir(), size: 1 << 20 },
///     readers: vec![1, 1024],
///     places: vec![ReaderPlace::Same],
///     skip_impossible: true,
///     ..BenchConfig::default()
/// };
/// let plan = plan(&config, &topology)?;
/// assert_eq!(plan.cells[0].cpus.len(), 1);
/// assert!(plan.cells[1].skip.as_deref().unwrap().contains("--oversubscribe"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedCell {
    /// Readers.
    pub readers: usize,
    /// Where they were asked to run.
    pub place: ReaderPlace,
    /// The node that means here.
    pub reader_node: Option<u32>,
    /// One CPU per reader (repeated when oversubscribed).
    pub cpus: Vec<u32>,
    /// The readers read through per-node copies.
    pub copies: bool,
    /// Why it cannot run here.
    pub skip: Option<String>,
}

/// A checked configuration ([`plan`]).
///
/// ```
/// use numalab_bench::pagecache::{plan, BenchConfig, FileSource};
/// let topology = numalab::Topology::system()?;
/// let config = BenchConfig {
///     file: FileSource::Create { dir: std::env::temp_dir(), size: 1 << 20 },
///     ..BenchConfig::default()
/// };
/// let plan = plan(&config, &topology)?;
/// assert_eq!(plan.size, 1 << 20);
/// assert!(plan.given.is_none(), "run makes the file");
/// assert!(!plan.config.places.is_empty(), "the default placements, resolved");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Plan {
    /// What was asked.
    pub config: BenchConfig,
    /// The node the cache goes on.
    pub cache_node: u32,
    /// The user's file, opened; `None`: [`run`] makes one as
    /// [`BenchConfig::file`] says.
    pub given: Option<(PathBuf, File)>,
    /// Its size, or the size to create.
    pub size: u64,
    /// The cells, readers-major.
    pub cells: Vec<PlannedCell>,
}

/// Checks `config` against the machine and names each cell's CPUs;
/// nothing is written or read.
pub fn plan(config: &BenchConfig, topology: &Topology) -> Result<Plan, BenchError> {
    let invalid = |text: String| Err(BenchError::Invalid(text));
    if config.block_size == 0 || config.block_size > MAX_BLOCK {
        return invalid(format!(
            "--block-size must be 1 byte to 1 GiB, not {}",
            config.block_size
        ));
    }
    if config.repeats == 0 || config.repeats > MAX_REPEATS {
        return invalid(format!(
            "--repeats must be 1 to {MAX_REPEATS}, not {}",
            config.repeats
        ));
    }
    if config.group == 0 || config.group > MAX_READERS {
        return invalid(format!(
            "--group must be 1 to {MAX_READERS} readers, not {}",
            config.group
        ));
    }
    if config.stagger > MAX_STAGGER {
        return invalid(format!(
            "--stagger must be at most {}s, not {:?}",
            MAX_STAGGER.as_secs(),
            config.stagger
        ));
    }
    if config.readers.is_empty() || config.readers.len() > 64 {
        return invalid("--readers takes 1 to 64 counts".into());
    }
    if let Some(&bad) = config.readers.iter().find(|&&n| n == 0 || n > MAX_READERS) {
        return invalid(format!(
            "--readers: each count must be 1 to {MAX_READERS}, not {bad}"
        ));
    }
    if config.places.len() > 64 {
        return invalid("--reader-node takes at most 64 placements".into());
    }
    if let Some(copies) = &config.copies {
        let page = numalab::system::page_size() as u64;
        if !copies.chunk_size.is_power_of_two()
            || copies.chunk_size < page
            || copies.chunk_size > 1 << 30
        {
            return invalid(format!(
                "--copy-chunk must be a power of two from {page} bytes to 1 GiB, not {}",
                copies.chunk_size
            ));
        }
        if config.method == Method::Mmap {
            return invalid(
                "--replicate reads through copies a block at a time, as read(2) does; it cannot be combined with --mmap".into(),
            );
        }
        if let Some(every) = copies.write_every {
            if matches!(config.file, FileSource::Given(_)) {
                return invalid(
                    "--write-every writes to the file: only to one numalab makes, never to the FILE given".into(),
                );
            }
            if every < Duration::from_micros(100) || every > MAX_STAGGER {
                return invalid(format!(
                    "--write-every must be 100us to {}s, not {every:?}",
                    MAX_STAGGER.as_secs()
                ));
            }
        }
    }
    let inventory = NodeInventory::live();
    let with_cpus: Vec<u32> = topology
        .nodes
        .iter()
        .map(|n| n.id)
        .filter(|&n| !spread_cpus(topology, n, 1).is_empty())
        .collect();
    let cache_node = match config.cache_node {
        Some(node) => node,
        None => match with_cpus
            .iter()
            .copied()
            .find(|&n| inventory.with_memory.contains(n))
            .or_else(|| inventory.with_memory.iter().next())
        {
            Some(node) => node,
            None => return invalid("this machine reports no node with memory".into()),
        },
    };
    // A node typed on the command line is judged as every command judges
    // one: "node 7 does not exist; this machine has nodes 0-1".
    let typed = |flag: &str, node: u32, role: numalab::Role| {
        let checked = numalab::NodeSet::try_single(node)
            .map_err(|e| e.to_string())
            .and_then(|set| {
                match role {
                    numalab::Role::Cpus => inventory.check_cpu_nodes(&set),
                    _ => inventory.check_memory_nodes(&set),
                }
                .map_err(|e| e.to_string())
            });
        checked.map_err(|why| format!("{flag} {node}: {why}"))
    };
    if let Err(why) = typed("--cache-node", cache_node, numalab::Role::Memory) {
        return invalid(why);
    }
    if !config.skip_impossible {
        for place in &config.places {
            if let ReaderPlace::Node(node) = place {
                if let Err(why) = typed("--reader-node", *node, numalab::Role::Cpus) {
                    return invalid(why);
                }
            }
        }
    }
    let (given, size) = match &config.file {
        FileSource::Given(path) => {
            let (file, size) = open_given(path)?;
            if size == 0 {
                return invalid(format!(
                    "{} is empty: there is nothing to read",
                    path.display()
                ));
            }
            // Its cache is to be all on the cache node, read in again
            // there when it is not: a file the node cannot hold (a sparse
            // one of terabytes among them) is refused unread.
            let memory =
                numalab::system::NodeMemory::read(cache_node).map_err(|e| BenchError::File {
                    path: path.display().to_string(),
                    source: PageCacheError::Os(e),
                })?;
            if size > memory.total_bytes {
                return invalid(format!(
                    "{} is {}, more than node {cache_node}'s {} of memory: its cache cannot all be there (nothing read)",
                    path.display(),
                    numalab::units::format_size(size),
                    numalab::units::format_size(memory.total_bytes)
                ));
            }
            (Some((path.clone(), file)), size)
        }
        FileSource::Create { dir, size } => {
            check_new_file(dir, *size, cache_node)?;
            (None, *size)
        }
    };
    let other = other_node(cache_node, &with_cpus, |n| topology.distance(cache_node, n));
    let places = if config.places.is_empty() {
        let mut places = vec![ReaderPlace::Same];
        if other.is_some() {
            places.push(ReaderPlace::Other);
        }
        places
    } else {
        config.places.clone()
    };
    let mut cells = Vec::new();
    for &readers in &config.readers {
        for &place in &places {
            let reader_node = match place {
                ReaderPlace::Same => Some(cache_node),
                ReaderPlace::Other => other,
                ReaderPlace::Node(n) => Some(n),
            };
            let (cpus, skip) = match reader_node {
                None => (
                    Vec::new(),
                    Some(format!(
                        "this machine has no node with CPUs other than node {cache_node}"
                    )),
                ),
                Some(node) => reader_cpus(topology, node, readers, config.oversubscribe),
            };
            if let (Some(why), false) = (&skip, config.skip_impossible) {
                return invalid(format!("{} on {place}: {why}", count(readers, "reader")));
            }
            // A memory-less node's readers read the copies on the nearest
            // node with memory, as its CPUs' other memory comes from there.
            let copies_skip = match (&skip, reader_node) {
                (Some(why), _) => Some(why.clone()),
                (None, Some(node)) if topology.local_memory_node(node).is_none() => {
                    Some(format!("no node has memory for node {node}'s copies"))
                }
                _ => None,
            };
            let copies = config.copies.is_some().then(|| PlannedCell {
                readers,
                place,
                reader_node,
                cpus: if copies_skip.is_some() {
                    Vec::new()
                } else {
                    cpus.clone()
                },
                copies: true,
                skip: copies_skip,
            });
            cells.push(PlannedCell {
                readers,
                place,
                reader_node,
                cpus,
                copies: false,
                skip,
            });
            cells.extend(copies);
        }
    }
    check_totals(config, &cells, size, cache_node, given.is_none(), topology)?;
    Ok(Plan {
        config: BenchConfig {
            places,
            ..config.clone()
        },
        cache_node,
        given,
        size,
        cells,
    })
}

/// The bytes each reader's buffer takes: a block, or the whole file when
/// that is smaller (a read never asks for more than is left).
fn buffer_bytes(config: &BenchConfig, size: u64) -> u64 {
    config.block_size.min(size)
}

/// What the cells take together, checked before anything is made: each
/// cell's reader buffers must fit in the free memory of the node they
/// are placed on (less the file's cache when numalab is to cache a new
/// file there), and the staggered starts of every cell and repeat must
/// add up to at most [`MAX_TOTAL_STAGGER`].
/// `--reader-node other`: of the nodes with CPUs (`with_cpus`) other than
/// `cache_node`, the nearest by the firmware's distance from it
/// (`distance`), the lowest id among equals and after those with a
/// distance. Whether that node has memory does not matter: the question
/// is what reading the cache from the next CPUs costs, and a memory-less
/// node's readers keep their buffers on its nearest memory, as its CPUs'
/// memory is.
///
/// ```
/// use numalab_bench::pagecache::other_node;
/// // The memless preset: node 2 (CPUs, no memory) is 12 from node 0,
/// // node 1 (CPUs and memory) 21.
/// let slit = |n| [None, Some(21), Some(12)][n as usize];
/// assert_eq!(other_node(0, &[0, 1, 2], slit), Some(2));
/// assert_eq!(other_node(0, &[0], slit), None);
/// assert_eq!(other_node(0, &[0, 1, 2], |_| None), Some(1), "no distances: the lowest id");
/// ```
pub fn other_node(
    cache_node: u32,
    with_cpus: &[u32],
    distance: impl Fn(u32) -> Option<u64>,
) -> Option<u32> {
    with_cpus
        .iter()
        .copied()
        .filter(|&n| n != cache_node)
        .min_by_key(|&n| (distance(n).unwrap_or(u64::MAX), n))
}

fn check_totals(
    config: &BenchConfig,
    cells: &[PlannedCell],
    size: u64,
    cache_node: u32,
    created: bool,
    topology: &Topology,
) -> Result<(), BenchError> {
    let format = numalab::units::format_size;
    let hours = |d: Duration| format!("{:.1} hours", d.as_secs_f64() / 3600.0);
    let buffer = buffer_bytes(config, size);
    let mut waits = Duration::ZERO;
    for cell in cells.iter().filter(|c| c.skip.is_none()) {
        let groups = cell.readers.div_ceil(config.group) as u32;
        waits = waits.saturating_add(
            config
                .stagger
                .saturating_mul(groups.saturating_sub(1))
                .saturating_mul(config.repeats as u32),
        );
        let Some(reader_node) = cell.reader_node else {
            continue;
        };
        // First touch on the readers' CPUs: their node's memory, or for a
        // memory-less node the nearest node's.
        let node = topology
            .local_memory_node(reader_node)
            .unwrap_or(reader_node);
        let need = buffer.saturating_mul(cell.readers as u64);
        let Ok(memory) = numalab::system::NodeMemory::read(node) else {
            continue;
        };
        let cached_here = if created && node == cache_node {
            size
        } else {
            0
        };
        // Free memory and the page cache reclaim can give back, as the
        // check of a created file's size counts it.
        let available = memory.free_bytes.saturating_add(memory.file_lru_bytes) / 10 * 9;
        let room = available.saturating_sub(cached_here);
        if need > room && need <= available {
            return Err(BenchError::Invalid(format!(
                "the {} file to cache on node {node} leaves {} of its {} free or reclaimable for {}'{} {} of buffers: give a smaller --size",
                format(size),
                format(room),
                format(available),
                count(cell.readers, "reader"),
                if cell.readers == 1 { "s" } else { "" },
                format(need)
            )));
        }
        if need > room {
            return Err(BenchError::Invalid(format!(
                "{} x --block-size {} {} {} of buffers on node {node}, which has {} free or reclaimable: give fewer --readers or a smaller --block-size",
                count(cell.readers, "reader"),
                format(buffer),
                if cell.readers == 1 { "needs" } else { "need" },
                format(need),
                format(available)
            )));
        }
    }
    if waits > MAX_TOTAL_STAGGER {
        return Err(BenchError::Invalid(format!(
            "--stagger {:?} between groups of --group {} readers, over every cell and --repeats {}, adds up to {} of waiting; at most {} is allowed: give a shorter --stagger, larger groups or fewer repeats",
            config.stagger,
            config.group,
            config.repeats,
            hours(waits),
            hours(MAX_TOTAL_STAGGER),
        )));
    }
    Ok(())
}

/// Opens the user's file, which must be a regular file numalab may
/// read, and says its size.
fn open_given(path: &std::path::Path) -> Result<(File, u64), BenchError> {
    let wrap = |source| BenchError::File {
        path: path.display().to_string(),
        source,
    };
    let file = cache::open_for_cache(path, true).map_err(wrap)?;
    let size = cache::file_size(&file).map_err(wrap)?;
    Ok((file, size))
}

/// A new file of `size` bytes must fit on its file system and in the
/// cache node's memory (or its cache would spill to other nodes).
fn check_new_file(dir: &std::path::Path, size: u64, node: u32) -> Result<(), BenchError> {
    let wrap = |source| BenchError::File {
        path: dir.display().to_string(),
        source,
    };
    if size == 0 || size > MAX_SIZE {
        return Err(BenchError::Invalid(format!(
            "--size must be 1 byte to 1 TiB, not {}",
            numalab::units::format_size(size)
        )));
    }
    let meta = std::fs::metadata(dir).map_err(|e| wrap(PageCacheError::Os(e)))?;
    if !meta.is_dir() {
        return Err(BenchError::Invalid(format!(
            "--dir {}: not a directory",
            dir.display()
        )));
    }
    let available =
        numalab::files::available_bytes(dir).map_err(|e| wrap(PageCacheError::Os(e)))?;
    if size > available {
        return Err(BenchError::Invalid(format!(
            "--size {}: {} has only {} free",
            numalab::units::format_size(size),
            dir.display(),
            numalab::units::format_size(available)
        )));
    }
    let memory =
        numalab::system::NodeMemory::read(node).map_err(|e| wrap(PageCacheError::Os(e)))?;
    // Free memory and the page cache reclaim can give back.
    let room = memory.free_bytes + memory.file_lru_bytes;
    if size > room / 10 * 9 {
        return Err(BenchError::Invalid(format!(
            "--size {}: node {node} has {} free or reclaimable; a file that large cannot be cached on it (give a smaller --size or another --cache-node)",
            numalab::units::format_size(size),
            numalab::units::format_size(room)
        )));
    }
    Ok(())
}

/// `count` CPUs of `node` (cycled when oversubscribed), or why not.
fn reader_cpus(
    topology: &Topology,
    node: u32,
    count: usize,
    oversubscribe: bool,
) -> (Vec<u32>, Option<String>) {
    if topology.node(node).is_none() {
        return (Vec::new(), Some(format!("this machine has no node {node}")));
    }
    let cpus = spread_cpus(topology, node, usize::MAX);
    if cpus.is_empty() {
        return (
            Vec::new(),
            Some(format!("node {node} has no CPUs this process may use")),
        );
    }
    if count > cpus.len() && !oversubscribe {
        return (
            Vec::new(),
            Some(format!(
                "more readers than node {node}'s {} this process may use (--oversubscribe lets readers share CPUs)",
                numalab::units::count(cpus.len(), "CPU")
            )),
        );
    }
    (cpus.iter().copied().cycle().take(count).collect(), None)
}

/// The settings every cell shared.
///
/// ```
/// use numalab_bench::pagecache::{BenchSettings, Method};
/// let settings = BenchSettings { file: "(created)".into(), created: true, size: 1 << 30,
///     block_size: 8192, method: Method::Read, stagger_s: 1.0, group: 5, repeats: 3,
///     cache_node: 0, copies: None };
/// assert_eq!(serde_json::to_value(&settings)?["method"], "read");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchSettings {
    /// The file's path, or where an unnamed one was made.
    pub file: String,
    /// numalab made it (and it is gone now).
    pub created: bool,
    /// Its size in bytes.
    pub size: u64,
    /// Bytes per read.
    pub block_size: u64,
    /// How readers read.
    pub method: Method,
    /// Seconds between the starts of two groups.
    pub stagger_s: f64,
    /// Readers per group.
    pub group: usize,
    /// Timed runs per cell.
    pub repeats: usize,
    /// Where the cache was placed.
    pub cache_node: u32,
    /// How copies were made, when cells also read through them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copies: Option<CopySettings>,
}

/// How the copies of `--replicate` were made.
///
/// ```
/// use numalab_bench::pagecache::CopySettings;
/// let copies = CopySettings { chunk_size: 65536, budget_per_node: None, write_every_s: Some(0.01) };
/// assert_eq!(serde_json::to_value(&copies)?["write_every_s"], 0.01);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CopySettings {
    /// Bytes per copy.
    pub chunk_size: u64,
    /// Most bytes of copies per node.
    pub budget_per_node: Option<u64>,
    /// Seconds between two writes to the file while readers read.
    pub write_every_s: Option<f64>,
}

/// One reader of one repeat.
///
/// ```
/// use numalab_bench::pagecache::ReaderRun;
/// let reader = ReaderRun { cpu: 1, node: 0, started_s: 1.0, read_s: 0.5, bytes: 1 << 30,
///     from_copies: 0, copies_made: 0 };
/// assert!((reader.gbps() - 2.147).abs() < 0.001);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReaderRun {
    /// Its CPU.
    pub cpu: u32,
    /// The node it ran on, as the kernel said after it read.
    pub node: u32,
    /// Seconds from the common start to its first read (its group's
    /// offset).
    pub started_s: f64,
    /// Seconds it took to read the file.
    pub read_s: f64,
    /// Bytes it read.
    pub bytes: u64,
    /// Of them, bytes served from its node's copies.
    #[serde(default)]
    pub from_copies: u64,
    /// Copies it made.
    #[serde(default)]
    pub copies_made: u64,
}

impl ReaderRun {
    /// Its read rate, GB/s (10^9 bytes).
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 / self.read_s.max(1e-9) / 1e9
    }
}

/// One timed run of a cell.
///
/// ```
/// use numalab_bench::pagecache::{BenchRepeat, ReaderRun};
/// let reader = |cpu, started_s| ReaderRun { cpu, node: 0, started_s, read_s: 0.2,
///     bytes: 1 << 30, from_copies: 0, copies_made: 0 };
/// let repeat = BenchRepeat { time_to_last_s: 1.2, readers: vec![reader(0, 0.0), reader(1, 1.0)],
///     writes: 0 };
/// let json = serde_json::to_value(&repeat)?;
/// assert_eq!(json["readers"][1]["started_s"], 1.0);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchRepeat {
    /// Seconds from the common start until the last reader finished.
    pub time_to_last_s: f64,
    /// Each reader.
    pub readers: Vec<ReaderRun>,
    /// Writes to the file while they read (`--write-every`).
    #[serde(default)]
    pub writes: u64,
}

/// One cell: a reader count at a placement.
///
/// ```
/// use std::collections::BTreeMap;
/// use numalab::pagecache::FileCache;
/// use numalab_bench::pagecache::{BenchCell, ReaderPlace};
/// use numalab_bench::ring::CellStatus;
/// let on = |node: u32, pages| FileCache { pages: 100, cached: 100,
///     per_node: BTreeMap::from([(node, pages)]), ..FileCache::default() };
/// let cell = BenchCell { readers: 1, place: ReaderPlace::Other, reader_node: Some(1),
///     cpus: vec![2], copies: false, copy_audit: None, status: CellStatus::Ran, reason: None,
///     placed: false,
///     cache_before: Some(on(0, 100)), cache_after: Some(on(0, 90)), repeats: vec![],
///     time_to_last_s: None, reader_gbps: None, aggregate_gbps: None };
/// assert_eq!(cell.moved_pages(0), 10, "10 pages left node 0 while it ran");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchCell {
    /// Readers.
    pub readers: usize,
    /// Where they were asked to run.
    pub place: ReaderPlace,
    /// The node that meant.
    pub reader_node: Option<u32>,
    /// Their CPUs.
    pub cpus: Vec<u32>,
    /// They read through per-node copies.
    #[serde(default)]
    pub copies: bool,
    /// The readers' node's copies after the cell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_audit: Option<CopyAudit>,
    /// Whether it ran.
    pub status: CellStatus,
    /// Why it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The cache was (re)placed on the cache node before this cell.
    pub placed: bool,
    /// Where the file's cached pages were before the first repeat.
    pub cache_before: Option<FileCache>,
    /// And after the last.
    pub cache_after: Option<FileCache>,
    /// Each repeat.
    pub repeats: Vec<BenchRepeat>,
    /// Median time to the last reader, seconds (through copies: of the
    /// repeats after the first, which made them, when there are others).
    pub time_to_last_s: Option<f64>,
    /// Median of every reader's GB/s over the repeats.
    pub reader_gbps: Option<f64>,
    /// Median over the repeats of all bytes read / time to the last reader.
    pub aggregate_gbps: Option<f64>,
}

impl BenchCell {
    /// Cached pages that moved off the cache's node while the cell ran.
    pub fn moved_pages(&self, cache_node: u32) -> u64 {
        let on = |c: &Option<FileCache>| c.as_ref().map_or(0, |c| c.on_node(cache_node));
        on(&self.cache_before).saturating_sub(on(&self.cache_after))
    }
}

/// The copies on the readers' node after a cell read through them.
///
/// ```
/// use std::collections::BTreeMap;
/// use numalab::replicated::NodeCopyStats;
/// use numalab_bench::pagecache::CopyAudit;
/// let audit = CopyAudit {
///     stats: NodeCopyStats { node: 1, resident_bytes: 1 << 30, copies_made: 16384,
///         given_back: 0, refused: 0, under_pressure: false },
///     pages: BTreeMap::from([(1, 262144)]),
/// };
/// assert_eq!(audit.pages[&1] * 4096, audit.stats.resident_bytes);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CopyAudit {
    /// Counts from the copies' segment.
    pub stats: NodeCopyStats,
    /// Pages of those copies per node, as the kernel says.
    pub pages: BTreeMap<u32, u64>,
}

/// Reading through per-node copies against reading the shared cache, for
/// one reader count and node.
///
/// ```
/// use numalab_bench::pagecache::CopiesGain;
/// let gain = CopiesGain { readers: 5, reader_node: 1, shared_s: 1.4, copies_s: 1.0,
///     first_s: 1.6, local_shared_s: Some(1.0), memory_bytes: 1 << 30, copies_made: 16384 };
/// assert!((gain.gain() - 1.4).abs() < 1e-9);
/// assert_eq!(gain.vs_local(), Some(1.0), "copies took the remote penalty away");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CopiesGain {
    /// Readers.
    pub readers: usize,
    /// Their node.
    pub reader_node: u32,
    /// Median time to the last reader reading the shared cache, seconds.
    pub shared_s: f64,
    /// The same through copies: the median of the repeats after the
    /// first, which made the copies (the first alone when there is no
    /// other).
    pub copies_s: f64,
    /// The first repeat through copies, which made them.
    pub first_s: f64,
    /// The same readers reading the shared cache on its own node.
    pub local_shared_s: Option<f64>,
    /// Memory the node's copies took (as the kernel counts their pages).
    pub memory_bytes: u64,
    /// Copies made over the cell.
    pub copies_made: u64,
}

impl CopiesGain {
    /// Shared time / copies time: above 1, the copies were faster.
    pub fn gain(&self) -> f64 {
        self.shared_s / self.copies_s.max(1e-12)
    }

    /// Copies time / the shared cache's time on its own node: 1 or
    /// below, reading remotely through copies costs no more than reading
    /// the cache locally.
    pub fn vs_local(&self) -> Option<f64> {
        self.local_shared_s
            .map(|local| self.copies_s / local.max(1e-12))
    }
}

/// Reading remotely against reading on the cache's node, for one reader
/// count: the measured ratio beside what SLIT and plain memory predict.
///
/// ```
/// use numalab_bench::pagecache::RemoteRatio;
/// // The post: SLIT said 2x, reading measured about 1.4x.
/// let ratio = RemoteRatio { readers: 5, reader_node: 1, time_ratio: 1.4,
///     reader_ratio: 1.45, slit_ratio: Some(2.0), matrix_ratio: Some(1.6) };
/// assert!(ratio.time_ratio < ratio.slit_ratio.unwrap());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemoteRatio {
    /// Readers.
    pub readers: usize,
    /// The remote readers' node.
    pub reader_node: u32,
    /// Time to the last reader, remote / local.
    pub time_ratio: f64,
    /// Median reader's read time, remote / local.
    pub reader_ratio: f64,
    /// SLIT distance(reader node, cache node) / distance(cache node, itself).
    pub slit_ratio: Option<f64>,
    /// Single-thread read bandwidth of the cache node's memory, local /
    /// from the reader node (numalab matrix's read kernel).
    pub matrix_ratio: Option<f64>,
}

/// The whole result (schema `numalab.pagecache-bench`).
///
/// ```
/// use numalab_bench::document::Document;
/// use numalab_bench::pagecache::{plan, run, BenchConfig, FileSource, PagecacheBench};
/// use std::sync::atomic::AtomicBool;
/// let topology = numalab::Topology::system()?;
/// let config = BenchConfig {
///     file: FileSource::Create { dir: std::env::temp_dir(), size: 1 << 20 },
///     repeats: 1,
///     compare_matrix: false,
///     ..BenchConfig::default()
/// };
/// let report = run(&plan(&config, &topology)?, &topology, &mut |_| {}, &AtomicBool::new(false))?;
/// let text = Document::new(&report).to_json()?;
/// let back: PagecacheBench = Document::parse(&text)?;
/// assert_eq!(back.settings.size, 1 << 20);
/// assert!(back.settings.created);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PagecacheBench {
    /// Where it was measured.
    pub environment: Environment,
    /// What every cell shared.
    pub settings: BenchSettings,
    /// Readers-major, placements in the order given.
    pub cells: Vec<BenchCell>,
    /// Remote against local, per reader count that ran both.
    pub ratios: Vec<RemoteRatio>,
    /// Copies against the shared cache, per cell that ran both ways.
    #[serde(default)]
    pub gains: Vec<CopiesGain>,
    /// A signal stopped the run.
    #[serde(default)]
    pub interrupted: bool,
}

impl Schema for PagecacheBench {
    const NAME: &'static str = "numalab.pagecache-bench";
    const VERSION: u32 = 1;
}

/// Runs the plan: makes (or places) the file's cache, then each cell's
/// repeats; `stop` (Ctrl-C) ends the run at the next block, the
/// unfinished cells marked interrupted.
pub fn run(
    plan: &Plan,
    topology: &Topology,
    progress: &mut dyn FnMut(&str),
    stop: &AtomicBool,
) -> Result<PagecacheBench, BenchError> {
    let config = &plan.config;
    let (label, file, created) = match (&plan.given, &config.file) {
        (Some((path, file)), _) => {
            let file = file.try_clone().map_err(|e| BenchError::File {
                path: path.display().to_string(),
                source: PageCacheError::Os(e),
            })?;
            (path.display().to_string(), file, false)
        }
        (None, FileSource::Create { dir, size }) => {
            progress(&format!(
                "writing {} to an unnamed file in {} on node {}",
                numalab::units::format_size(*size),
                dir.display(),
                plan.cache_node
            ));
            // Ctrl-C while writing it: every cell is marked interrupted.
            let file = make_file(dir, *size, plan.cache_node, stop)?;
            (format!("{} (unnamed)", dir.display()), file, true)
        }
        (None, FileSource::Given(path)) => (path.display().to_string(), open_given(path)?.0, false),
    };
    let wrap = |source| BenchError::File {
        path: label.clone(),
        source,
    };
    // Mapped readers of a file truncated meanwhile get SIGBUS: said in a
    // sentence, for the whole run.
    let _bus = match config.method {
        Method::Mmap => Some(
            BusErrorExit::install(&format!(
                "numalab: {label} was truncated while readers had it mapped (SIGBUS); stopped\n"
            ))
            .map_err(|e| wrap(PageCacheError::Os(e)))?,
        ),
        Method::Read => None,
    };
    let copies = make_copies(plan, &file).map_err(|e| match e {
        FileCopyError::File(source) => wrap(source),
        other => wrap(PageCacheError::Os(std::io::Error::other(other.to_string()))),
    })?;
    let mut cells = Vec::new();
    let mut interrupted = false;
    for planned in &plan.cells {
        let mut cell = BenchCell {
            readers: planned.readers,
            place: planned.place,
            reader_node: planned.reader_node,
            cpus: planned.cpus.clone(),
            copies: planned.copies,
            copy_audit: None,
            status: CellStatus::Skipped,
            reason: planned.skip.clone(),
            placed: false,
            cache_before: None,
            cache_after: None,
            repeats: Vec::new(),
            time_to_last_s: None,
            reader_gbps: None,
            aggregate_gbps: None,
        };
        if planned.skip.is_some() {
            cells.push(cell);
            continue;
        }
        if interrupted || stop.load(Ordering::SeqCst) {
            interrupted = true;
            cell.status = CellStatus::Interrupted;
            cells.push(cell);
            continue;
        }
        progress(&format!(
            "{} on {} (node {}){}",
            count(planned.readers, "reader"),
            planned.place,
            planned.reader_node.unwrap_or(0),
            if planned.copies {
                ", through copies"
            } else {
                ""
            }
        ));
        let mut before = cache::file_cache(&file).map_err(wrap)?;
        if before.on_node(plan.cache_node) < before.pages {
            cache::drop_cache(&file).map_err(wrap)?;
            cache::load_on_until(&file, plan.cache_node, stop).map_err(wrap)?;
            if stop.load(Ordering::SeqCst) {
                // Ctrl-C while reading it in: this cell and the rest are
                // interrupted, not measured on a cache half placed.
                interrupted = true;
                cell.status = CellStatus::Interrupted;
                cells.push(cell);
                continue;
            }
            before = cache::file_cache(&file).map_err(wrap)?;
            cell.placed = true;
        }
        cell.cache_before = Some(before);
        // Copies made by an earlier cell would hide the first repeat's
        // cost of making them.
        let through = copies.as_ref().filter(|_| planned.copies);
        if let Some(copies) = through {
            copies.drop_copies();
        }
        let readers = Readers {
            cpus: &planned.cpus,
            copy_node: numalab::system::local_memory_node(planned.reader_node.unwrap_or_default()),
            copies: through,
        };
        for _ in 0..config.repeats {
            match one_repeat(plan, &file, &label, &readers, stop)? {
                Some(repeat) => cell.repeats.push(repeat),
                None => {
                    interrupted = true;
                    break;
                }
            }
        }
        cell.cache_after = Some(cache::file_cache(&file).map_err(wrap)?);
        if let Some(copies) = through {
            cell.copy_audit = copy_audit(copies, readers.copy_node).map_err(wrap)?;
        }
        cell.status = if interrupted {
            CellStatus::Interrupted
        } else {
            CellStatus::Ran
        };
        summarise(&mut cell, plan.size);
        cells.push(cell);
    }
    let ratios = ratios(plan, topology, &cells);
    let gains = gains(&cells, plan.cache_node);
    Ok(PagecacheBench {
        environment: Environment::current(topology),
        settings: BenchSettings {
            file: label,
            created,
            size: plan.size,
            block_size: config.block_size,
            method: config.method,
            stagger_s: config.stagger.as_secs_f64(),
            group: config.group,
            repeats: config.repeats,
            cache_node: plan.cache_node,
            copies: config.copies.as_ref().map(|c| CopySettings {
                chunk_size: c.chunk_size,
                budget_per_node: c.budget_per_node,
                write_every_s: c.write_every.map(|d| d.as_secs_f64()),
            }),
        },
        cells,
        ratios,
        gains,
        interrupted,
    })
}

/// An unnamed file of `size` bytes in `dir`, written on `node`.
fn make_file(
    dir: &std::path::Path,
    size: u64,
    node: u32,
    stop: &AtomicBool,
) -> Result<File, BenchError> {
    let wrap = |source| BenchError::File {
        path: dir.display().to_string(),
        source,
    };
    let file = numalab::files::scratch_file(dir).map_err(|e| wrap(PageCacheError::Os(e)))?;
    cache::fill_on_until(&file, size, node, stop).map_err(wrap)?;
    Ok(file)
}

/// Per-node copies of the file, for the cells that read through them:
/// on every node such a cell reads from (for a memory-less node, the
/// nearest node with memory).
fn make_copies(plan: &Plan, file: &File) -> Result<Option<ReplicatedFile>, FileCopyError> {
    let Some(config) = &plan.config.copies else {
        return Ok(None);
    };
    let readers: numalab::NodeSet = plan
        .cells
        .iter()
        .filter(|c| c.copies && c.skip.is_none())
        .filter_map(|c| c.reader_node)
        .collect();
    let nodes = numalab::system::local_memory_nodes(&readers);
    if nodes.is_empty() {
        return Ok(None);
    }
    let options = FileCopyOptions::default()
        .chunk_size(config.chunk_size)
        .budget_per_node(config.budget_per_node)
        .nodes(Some(nodes));
    ReplicatedFile::new(file.try_clone()?, options).map(Some)
}

/// `node`'s copies: the segment's counts and the kernel's pages.
fn copy_audit(copies: &ReplicatedFile, node: u32) -> Result<Option<CopyAudit>, PageCacheError> {
    let Some(stats) = copies.stats().into_iter().find(|s| s.node == node) else {
        return Ok(None);
    };
    let pages = copies
        .copy_pages()?
        .into_iter()
        .find(|(n, _)| *n == node)
        .map(|(_, cache)| cache.per_node)
        .unwrap_or_default();
    Ok(Some(CopyAudit { stats, pages }))
}

/// A cell's readers: their CPUs, the node of the copies they read (their
/// own, or the nearest with memory for a memory-less node), and the
/// copies they read through (`None`: the file).
struct Readers<'a> {
    cpus: &'a [u32],
    copy_node: u32,
    copies: Option<&'a ReplicatedFile>,
}

/// A reader's state, made on its CPU: its buffer (first touched there)
/// and, for `mmap`, its own mapping of the file, or its reader of the
/// copies.
struct Reader<'a> {
    buffer: Vec<u8>,
    mapping: Option<MappedFile>,
    copies: Option<FileReader<'a>>,
}

/// What a reader's work returns.
struct Outcome {
    read: Duration,
    bytes: u64,
    stopped: bool,
    from_copies: u64,
    copies_made: u64,
}

/// One timed run of the cell's readers; `None` when `stop` ended it.
fn one_repeat(
    plan: &Plan,
    file: &File,
    label: &str,
    readers: &Readers<'_>,
    stop: &AtomicBool,
) -> Result<Option<BenchRepeat>, BenchError> {
    let config = &plan.config;
    let block = config.block_size as usize;
    let size = plan.size;
    let mapping_failed = AtomicBool::new(false);
    let finished = AtomicBool::new(false);
    let write_every = config.copies.as_ref().and_then(|c| c.write_every);
    let (run, writes) = std::thread::scope(|scope| {
        let writer = match (readers.copies, write_every) {
            (Some(copies), Some(every)) => {
                let finished = &finished;
                let (began, first) = std::sync::mpsc::sync_channel(1);
                let writer =
                    scope.spawn(move || write_while(copies, block, every, began, finished, stop));
                // The readers start once the writer has written (or
                // failed): every repeat has a write to read through,
                // however late a busy machine starts the writer.
                let _ = first.recv();
                Some(writer)
            }
            _ => None,
        };
        let run = run_pinned(
            readers.cpus,
            |_| {
                let mut buffer = vec![0u8; buffer_bytes(config, size) as usize];
                // First touch on the reader's CPU puts the buffer on its node.
                buffer.iter_mut().step_by(4096).for_each(|b| *b = 1);
                let mapping = match config.method {
                    Method::Mmap => MappedFile::map(file)
                        .map_err(|_| mapping_failed.store(true, Ordering::SeqCst))
                        .ok(),
                    Method::Read => None,
                };
                Reader {
                    buffer,
                    mapping,
                    copies: readers.copies.map(|c| c.reader(readers.copy_node)),
                }
            },
            |i, reader| {
                let group = (i / config.group) as u32;
                let offset = config.stagger * group;
                if !offset.is_zero() {
                    wait(offset, stop);
                }
                let start = Instant::now();
                let mut done = 0u64;
                let mut stopped = false;
                while done < size {
                    if stop.load(Ordering::Relaxed) {
                        stopped = true;
                        break;
                    }
                    let want = (size - done).min(block as u64) as usize;
                    let buffer = &mut reader.buffer[..want];
                    let n = match (&reader.mapping, &mut reader.copies) {
                        (Some(mapping), _) => {
                            let n = mapping.copy_to(done as usize, buffer);
                            std::hint::black_box(&buffer);
                            n
                        }
                        (None, _) if config.method == Method::Mmap => 0,
                        (None, Some(copies)) => copies.read_at(buffer, done).unwrap_or(0),
                        (None, None) => file.read_at(buffer, done).unwrap_or(0),
                    };
                    if n == 0 {
                        break;
                    }
                    done += n as u64;
                }
                let (from_copies, copies_made) = reader
                    .copies
                    .as_ref()
                    .map_or((0, 0), |c| (c.from_copies, c.copied));
                Outcome {
                    read: start.elapsed(),
                    bytes: done,
                    stopped,
                    from_copies,
                    copies_made,
                }
            },
        );
        finished.store(true, Ordering::SeqCst);
        let writes = writer.map_or(Ok(0), |w| w.join().unwrap_or(Ok(0)));
        (run, writes)
    });
    let run = run?;
    let writes = writes.map_err(|e| BenchError::File {
        path: label.to_string(),
        source: PageCacheError::Os(std::io::Error::other(format!(
            "the writer could not write: {e}"
        ))),
    })?;
    if mapping_failed.load(Ordering::SeqCst) {
        return Err(BenchError::File {
            path: label.to_string(),
            source: PageCacheError::Os(std::io::Error::other("a reader could not map the file")),
        });
    }
    if run.workers.iter().any(|w| w.output.stopped) {
        return Ok(None);
    }
    if let Some(short) = run.workers.iter().find(|w| w.output.bytes < size) {
        return Err(BenchError::Truncated {
            path: label.to_string(),
            cpu: short.cpu,
            got: short.output.bytes,
            size,
        });
    }
    Ok(Some(BenchRepeat {
        time_to_last_s: run.wall.as_secs_f64(),
        readers: run
            .workers
            .iter()
            .map(|w| ReaderRun {
                cpu: w.cpu,
                node: w.node,
                started_s: w.busy.saturating_sub(w.output.read).as_secs_f64(),
                read_s: w.output.read.as_secs_f64(),
                bytes: w.output.bytes,
                from_copies: w.output.from_copies,
                copies_made: w.output.copies_made,
            })
            .collect(),
        writes,
    }))
}

/// Writes one block of the file through `copies` every `every` until the
/// readers are `finished`: each write makes the copies of its chunk
/// stale, as a writer process changing a read-mostly file would. Says on
/// `began` when the first write is made (dropping it on an error says so
/// too). Returns how many it made.
fn write_while(
    copies: &ReplicatedFile,
    block: usize,
    every: Duration,
    began: std::sync::mpsc::SyncSender<()>,
    finished: &AtomicBool,
    stop: &AtomicBool,
) -> Result<u64, FileCopyError> {
    let len = copies.len();
    let block = (block as u64).min(len) as usize;
    let mut data = vec![0u8; block];
    let mut writes = 0u64;
    // A fixed-seed walk over the file: different chunks, no clustering.
    let mut at = 0x9E37_79B9_7F4A_7C15u64;
    let mut began = Some(began);
    while !finished.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
        at = at
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let offset = (at >> 16) % (len - block as u64 + 1);
        data.fill(writes as u8);
        copies.write_at(&data, offset)?;
        writes += 1;
        if let Some(began) = began.take() {
            let _ = began.send(());
        }
        wait(every, finished);
    }
    Ok(writes)
}

/// Sleeps `span`, waking early when `stop` is set.
fn wait(span: Duration, stop: &AtomicBool) {
    let end = Instant::now() + span;
    while !stop.load(Ordering::Relaxed) {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(Duration::from_millis(20)));
    }
}

fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let values: Vec<f64> = values.into_iter().collect();
    Summary::of(&values).map(|s| s.median)
}

/// The cell's medians from its repeats.
/// A cell through copies leaves out its first repeat, which made them,
/// when it has others.
fn summarise(cell: &mut BenchCell, size: u64) {
    let skip = usize::from(cell.copies && cell.repeats.len() > 1);
    let repeats = &cell.repeats[skip..];
    cell.time_to_last_s = median(repeats.iter().map(|r| r.time_to_last_s));
    cell.reader_gbps = median(
        repeats
            .iter()
            .flat_map(|r| r.readers.iter().map(ReaderRun::gbps)),
    );
    cell.aggregate_gbps = median(
        repeats
            .iter()
            .map(|r| (size * r.readers.len() as u64) as f64 / r.time_to_last_s.max(1e-9) / 1e9),
    );
}

/// Copies against the shared cache, for each cell that ran both ways.
fn gains(cells: &[BenchCell], cache_node: u32) -> Vec<CopiesGain> {
    let ran = |c: &&BenchCell| c.status == CellStatus::Ran;
    let mut out = Vec::new();
    for through in cells.iter().filter(ran).filter(|c| c.copies) {
        let Some(shared) = cells.iter().filter(ran).find(|c| {
            !c.copies && c.readers == through.readers && c.reader_node == through.reader_node
        }) else {
            continue;
        };
        let (Some(shared_s), Some(copies_s), Some(first)) = (
            shared.time_to_last_s,
            through.time_to_last_s,
            through.repeats.first(),
        ) else {
            continue;
        };
        let node = through.reader_node.unwrap_or_default();
        let page = numalab::system::page_size() as u64;
        out.push(CopiesGain {
            readers: through.readers,
            reader_node: node,
            shared_s,
            copies_s,
            first_s: first.time_to_last_s,
            local_shared_s: cells
                .iter()
                .filter(ran)
                .find(|c| {
                    !c.copies && c.readers == through.readers && c.reader_node == Some(cache_node)
                })
                .and_then(|c| c.time_to_last_s),
            memory_bytes: through
                .copy_audit
                .as_ref()
                .map_or(0, |a| a.pages.values().sum::<u64>() * page),
            copies_made: through
                .repeats
                .iter()
                .flat_map(|r| r.readers.iter().map(|x| x.copies_made))
                .sum(),
        });
    }
    out
}

/// Remote against local for each reader count that ran on both the
/// cache's node and another.
fn ratios(plan: &Plan, topology: &Topology, cells: &[BenchCell]) -> Vec<RemoteRatio> {
    let ran = |c: &&BenchCell| c.status == CellStatus::Ran;
    // One CPU's read bandwidth of the cache node's memory, from each node
    // asked (the cache node's own once, however many remote nodes).
    let mut measured: Vec<(u32, Option<f64>)> = Vec::new();
    let mut read_gbps = |from: u32| match measured.iter().find(|(n, _)| *n == from) {
        Some(&(_, gbps)) => gbps,
        None => {
            let gbps = read_from(topology, plan.cache_node, from);
            measured.push((from, gbps));
            gbps
        }
    };
    let mut out = Vec::new();
    for local in cells
        .iter()
        .filter(ran)
        .filter(|c| c.reader_node == Some(plan.cache_node))
    {
        for remote in cells.iter().filter(ran).filter(|c| {
            c.readers == local.readers && c.reader_node.is_some_and(|n| n != plan.cache_node)
        }) {
            let node = remote.reader_node.unwrap_or_default();
            let reader_time = |c: &BenchCell| {
                median(
                    c.repeats
                        .iter()
                        .flat_map(|r| r.readers.iter().map(|x| x.read_s)),
                )
            };
            let (Some(lt), Some(rt), Some(lr), Some(rr)) = (
                local.time_to_last_s,
                remote.time_to_last_s,
                reader_time(local),
                reader_time(remote),
            ) else {
                continue;
            };
            let matrix_ratio = if plan.config.compare_matrix {
                read_gbps(plan.cache_node)
                    .zip(read_gbps(node))
                    .map(|(local, remote)| local / remote)
            } else {
                None
            };
            let slit = |from| topology.distance(from, plan.cache_node);
            out.push(RemoteRatio {
                readers: local.readers,
                reader_node: node,
                time_ratio: rt / lt,
                reader_ratio: rr / lr,
                slit_ratio: match (slit(node), slit(plan.cache_node)) {
                    (Some(far), Some(near)) if near > 0 => Some(far as f64 / near as f64),
                    _ => None,
                },
                matrix_ratio,
            });
        }
    }
    out
}

/// Single-thread read bandwidth (GB/s, median of three samples) of
/// `memory`'s memory from a CPU of `from`.
fn read_from(topology: &Topology, memory: u32, from: u32) -> Option<f64> {
    let timing = StreamTiming {
        repeats: 3,
        sample: Duration::from_millis(100),
    };
    let cpu = *spread_cpus(topology, from, 1).first()?;
    let run = bandwidth::measure(
        &[cpu],
        memory,
        256 << 20,
        HugePages::None,
        &[Kernel::Read],
        timing,
    )
    .ok()?;
    median(run.samples.first()?.1.iter().copied())
}
