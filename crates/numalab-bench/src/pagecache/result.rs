//! The `numalab.pagecache-bench` document: every cell's repeats and
//! readers, where the cache was, the copies' gain and the remote/local
//! ratios.

use std::collections::BTreeMap;

use numalab::pagecache::FileCache;
use numalab::replicated::NodeCopyStats;
use numalab::system::Environment;
use serde::{Deserialize, Serialize};

use super::config::{Method, ReaderPlace};
use crate::document::Schema;
use crate::ring::CellStatus;

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
/// use numalab_bench::control::Control;
/// use numalab_bench::pagecache::{plan, run, BenchConfig, FileSource, PagecacheReport};
/// let topology = numalab::Topology::system()?;
/// let config = BenchConfig {
///     file: FileSource::Create { dir: std::env::temp_dir(), size: 1 << 20 },
///     repeats: 1,
///     compare_matrix: false,
///     ..BenchConfig::default()
/// };
/// let report = run(&plan(&config, &topology)?, &topology, &Control::new())?;
/// let text = Document::new(&report).to_json()?;
/// let back: PagecacheReport = Document::parse(&text)?;
/// assert_eq!(back.settings.size, 1 << 20);
/// assert!(back.settings.created);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PagecacheReport {
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

impl Schema for PagecacheReport {
    const NAME: &'static str = "numalab.pagecache-bench";
    const VERSION: u32 = 1;
}
