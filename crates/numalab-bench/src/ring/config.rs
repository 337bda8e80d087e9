//! What `numalab ring` measures, as the command line gives it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use numalab::ring::{Backpressure, RingOptions};
use numalab::HugePages;
use serde::{Deserialize, Serialize};

/// Preset tables.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::ring::{plan, Layout, RingConfig};
///
/// let mut config = RingConfig::new("numalab");
/// config.layout = Some(Layout::Blog);
/// let topology = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// // Eight single-stream cells and four two-stream cells.
/// assert_eq!(plan::cells(&config, &topology)?.len(), 12);
/// assert_eq!(serde_json::to_string(&Layout::Blog)?, r#""blog""#);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// The radio-astronomy blog's single- and two-stream tables.
    Blog,
}

/// How data goes in and out of the ring.
///
/// ```
/// use numalab_bench::ring::Mode;
/// assert_eq!(Mode::InPlace.as_str(), "in-place");
/// assert_eq!("copy".parse::<Mode>(), Ok(Mode::Copy));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// memcpy in, memcpy out.
    Copy,
    /// Filled and read in place.
    InPlace,
}

impl Mode {
    /// The mode as `--mode` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Copy => "copy",
            Mode::InPlace => "in-place",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "copy" => Ok(Mode::Copy),
            "in-place" => Ok(Mode::InPlace),
            other => Err(format!("unknown mode {other:?}; expected copy or in-place")),
        }
    }
}

/// Everything `numalab ring` measures with. Node and CPU choices are kept
/// as the command line spells them (`0,1`; `0-3/4-7`: one value for every
/// stream, or one per stream); [`plan`](super::plan) resolves them against
/// the machine, and its errors name the option (`--memory-node=…`).
///
/// ```
/// use numalab_bench::ring::{Mode, RingConfig};
///
/// let config = RingConfig::new("/usr/bin/numalab");
/// assert_eq!((config.volume, config.block_size, config.blocks), (20 << 30, 4 << 20, 8));
/// assert_eq!(config.mode, Mode::Copy);
/// let options = config.ring_options("run-1-0", 0);
/// assert_eq!(options.blocks(), 8);
/// assert!(options.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RingConfig {
    /// A preset table instead of one custom cell.
    pub layout: Option<Layout>,
    /// Parallel streams of the custom cell.
    pub streams: usize,
    /// Node of each stream's ring memory (`--memory-node`).
    pub memory_node: Option<String>,
    /// Node of each stream's writer (`--writer-node`).
    pub writer_node: Option<String>,
    /// Node of each stream's readers (`--reader-node`).
    pub reader_node: Option<String>,
    /// CPUs of each stream's writer (`--writer-cpus`).
    pub writer_cpus: Option<String>,
    /// CPUs of each stream's readers (`--reader-cpus`).
    pub reader_cpus: Option<String>,
    /// Readers per stream (each reads everything).
    pub readers: usize,
    /// Bytes each stream moves.
    pub volume: u64,
    /// Bytes per ring block.
    pub block_size: u64,
    /// Blocks per ring.
    pub blocks: u64,
    /// How data goes in and out.
    pub mode: Mode,
    /// Ring pages.
    pub huge_pages: HugePages,
    /// Lock the ring's pages in memory.
    pub mlock: bool,
    /// How long any process may wait for the other side.
    pub timeout: Duration,
    /// Sequence-numbered words that readers check.
    pub verify: bool,
    /// The program started as writer and readers: it must run
    /// [`worker::run`](super::worker::run) when given `ring-worker` and
    /// the worker's options (the `numalab` binary does).
    pub worker_exe: PathBuf,
}

impl RingConfig {
    /// `numalab ring`'s defaults: one stream on the first node with
    /// memory, 20 GiB in 8 blocks of 4 MiB, copied, one reader.
    pub fn new(worker_exe: impl Into<PathBuf>) -> RingConfig {
        RingConfig {
            layout: None,
            streams: 1,
            memory_node: None,
            writer_node: None,
            reader_node: None,
            writer_cpus: None,
            reader_cpus: None,
            readers: 1,
            volume: 20 << 30,
            block_size: 4 << 20,
            blocks: 8,
            mode: Mode::Copy,
            huge_pages: HugePages::None,
            mlock: false,
            timeout: Duration::from_secs(30),
            verify: false,
            worker_exe: worker_exe.into(),
        }
    }

    /// The options of each stream's ring, `name` on `node`; check them
    /// with [`RingOptions::validate`] before running.
    pub fn ring_options(&self, name: &str, node: u32) -> RingOptions {
        let size = self.block_size.saturating_mul(self.blocks);
        RingOptions::new(
            name,
            usize::try_from(size).unwrap_or(usize::MAX),
            usize::try_from(self.block_size).unwrap_or(usize::MAX),
        )
        .node(node)
        .huge_pages(self.huge_pages)
        .lock(self.mlock)
        .backpressure(Backpressure::Block)
        .max_readers(u32::try_from(self.readers).unwrap_or(u32::MAX))
    }
}
