//! What `numalab pagecache bench` measures, as the command line gives it,
//! and the limits every count, size and duration is checked against.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use numalab::pagecache::PageCacheError;
use serde::{Deserialize, Serialize};

use crate::message::Message;
use crate::workers::WorkerError;

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

/// Reading through per-node copies of the file ([`ReplicatedFile`](numalab::replicated::ReplicatedFile)), as
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
/// // The engine names its settings; `numalab pagecache bench` shows flags.
/// assert!(err.to_string().starts_with("block_size must be 1 byte"), "{err}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// A setting is out of range or impossible on this machine; the
    /// message names settings for the caller to spell (`numalab` as its
    /// flags).
    #[error("{0}")]
    Invalid(Message),
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

impl BenchError {
    /// What went wrong, its settings named `«field»` for the caller to
    /// spell ([`Message::spelt`]), where the error names settings.
    pub fn message(&self) -> Option<Message> {
        match self {
            BenchError::Invalid(message) => Some(message.clone()),
            _ => None,
        }
    }
}
