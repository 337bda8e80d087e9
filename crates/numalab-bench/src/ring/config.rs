//! What `numalab ring` measures, as the command line gives it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use numalab::ring::{Backpressure, RingOptions, MAX_BLOCKS, MAX_READERS};
use numalab::HugePages;

use crate::message::Message;
use serde::{Deserialize, Serialize};

/// Most streams `numalab ring` runs at once (`--streams`).
pub const MAX_STREAMS: usize = 256;
/// Most writer and reader processes `numalab ring` starts for one cell
/// (streams × (readers + 1)).
pub const MAX_WORKERS: usize = 1024;
/// Largest ring block (`--block-size`), 1 TiB.
pub const MAX_BLOCK_SIZE: u64 = 1 << 40;
/// Longest a process waits for the other side (`--timeout`): a day.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);
/// Transfer-header room of each block in `numalab ring`'s rings: the
/// smallest there is, as its writer sends empty transfer headers. (The
/// library's default, 4 KiB a block, would make a ring of small blocks
/// mostly header room.)
pub const HEADER_ROOM: usize = 64;

/// A count, size or duration of a [`RingConfig`] outside its limit. Each
/// names the setting by its field in [`RingConfig`]; [`ConfigError::message`]
/// lets a caller spell it its own way (`numalab ring` shows `--streams`).
///
/// ```
/// use numalab_bench::ring::{ConfigError, RingConfig};
///
/// let mut config = RingConfig::new("numalab");
/// config.streams = 0;
/// let err = config.check().unwrap_err();
/// assert!(matches!(err, ConfigError::NoStreams));
/// assert_eq!(err.to_string(), "streams=0: at least one stream is needed");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// No stream.
    #[error("{}", self.message())]
    NoStreams,
    /// A count, size or duration outside its limit
    /// ([`RingConfig::check`]).
    #[error("{}", self.message())]
    OutOfRange {
        /// The setting: its field in [`RingConfig`].
        setting: &'static str,
        /// Its value.
        value: String,
        /// The rule it breaks, with the limit.
        rule: String,
    },
    /// Sizes the ring itself refuses.
    #[error("{}", self.message())]
    Ring {
        /// Why.
        #[source]
        source: numalab::ring::RingError,
    },
}

impl ConfigError {
    /// What went wrong, its settings named `«field»` for the caller to
    /// spell ([`Message::spelt`]).
    pub fn message(&self) -> Message {
        match self {
            ConfigError::NoStreams => Message::new("«streams»=0: at least one stream is needed"),
            ConfigError::OutOfRange {
                setting,
                value,
                rule,
            } => Message::new(format!("«{setting}»={value} {rule}")),
            ConfigError::Ring { .. } => Message::new("«block_size», «blocks»"),
        }
    }
}

/// `timeout` in seconds as a duration: more than 0, at most
/// [`MAX_TIMEOUT`] (checked before the conversion, which cannot hold
/// every number).
///
/// ```
/// use std::time::Duration;
/// use numalab_bench::ring::config::timeout_from_secs;
///
/// assert_eq!(timeout_from_secs(2.5)?, Duration::from_millis(2500));
/// let err = timeout_from_secs(1e20).unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "timeout=100000000000000000000 is more than 86400, the most seconds a \
///      numalab ring process waits for the other side"
/// );
/// assert!(timeout_from_secs(0.0).is_err() && timeout_from_secs(f64::NAN).is_err());
/// # Ok::<(), numalab_bench::ring::ConfigError>(())
/// ```
pub fn timeout_from_secs(secs: f64) -> Result<Duration, ConfigError> {
    let out = |rule: String| ConfigError::OutOfRange {
        setting: "timeout",
        value: secs.to_string(),
        rule,
    };
    if secs.is_nan() || secs <= 0.0 {
        return Err(out("must be a positive number of seconds".into()));
    }
    if secs > MAX_TIMEOUT.as_secs_f64() {
        return Err(out(format!(
            "is more than {}, the most seconds a numalab ring process waits for the other side",
            MAX_TIMEOUT.as_secs()
        )));
    }
    // In range, so the conversion cannot fail; a zero from a subnormal
    // number is refused as zero.
    match Duration::try_from_secs_f64(secs) {
        Ok(duration) if !duration.is_zero() => Ok(duration),
        _ => Err(out("must be a positive number of seconds".into())),
    }
}

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
/// the machine, and its errors name the setting (`memory_node=…`).
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
    /// Bytes each stream moves, timed.
    pub volume: u64,
    /// Bytes each stream moves first, untimed (`--ramp`), rounded up to
    /// whole blocks: the run's figures are of the volume after it, as
    /// `fio`'s `ramp_time` leaves a workload's start out.
    pub ramp: u64,
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
            ramp: 0,
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
        .header_size(HEADER_ROOM)
    }

    /// The ramp as moved: `ramp` rounded up to whole blocks (saturating).
    ///
    /// ```
    /// use numalab_bench::ring::RingConfig;
    /// let mut config = RingConfig::new("numalab");
    /// config.block_size = 1 << 20;
    /// config.ramp = (3 << 20) + 1;
    /// assert_eq!(config.ramp_bytes(), 4 << 20);
    /// ```
    pub fn ramp_bytes(&self) -> u64 {
        self.ramp
            .div_ceil(self.block_size.max(1))
            .saturating_mul(self.block_size)
    }

    /// Streams of the largest cell: `--streams`, or 2 for the blog's
    /// tables.
    pub fn max_streams(&self) -> usize {
        match self.layout {
            Some(Layout::Blog) => 2,
            None => self.streams,
        }
    }

    /// Checks every count, size and duration against its limit, before
    /// anything is planned, made or started; the error names the setting,
    /// its value and the limit.
    ///
    /// ```
    /// use numalab_bench::ring::{ConfigError, RingConfig};
    ///
    /// let mut config = RingConfig::new("numalab");
    /// assert!(config.check().is_ok());
    /// config.streams = 100_000;
    /// assert_eq!(
    ///     config.check().unwrap_err().to_string(),
    ///     "streams=100000 is more than 256, the most streams numalab ring runs at once"
    /// );
    /// config.streams = 1;
    /// config.timeout = std::time::Duration::from_secs(1 << 40);
    /// assert!(matches!(config.check(), Err(ConfigError::OutOfRange { setting: "timeout", .. })));
    /// ```
    pub fn check(&self) -> Result<(), ConfigError> {
        let out = |setting: &'static str, value: String, rule: String| {
            Err(ConfigError::OutOfRange {
                setting,
                value,
                rule,
            })
        };
        if self.layout.is_none() {
            if self.streams == 0 {
                return Err(ConfigError::NoStreams);
            }
            if self.streams > MAX_STREAMS {
                return out(
                    "streams",
                    self.streams.to_string(),
                    format!(
                        "is more than {MAX_STREAMS}, the most streams numalab ring runs at once"
                    ),
                );
            }
        }
        if !(1..=MAX_READERS as usize).contains(&self.readers) {
            return out(
                "readers",
                self.readers.to_string(),
                format!("is not from 1 to {MAX_READERS}, the readers a ring can have"),
            );
        }
        let workers = self.max_streams().saturating_mul(self.readers + 1);
        if workers > MAX_WORKERS {
            return out(
                "readers",
                self.readers.to_string(),
                format!(
                    "with {} starts {workers} writer and reader processes, more than \
                     {MAX_WORKERS}, the most numalab ring starts at once",
                    numalab::units::count(self.max_streams(), "stream")
                ),
            );
        }
        if self.block_size < 64 || !self.block_size.is_multiple_of(64) {
            return out(
                "block_size",
                self.block_size.to_string(),
                "is not a multiple of 64 bytes".into(),
            );
        }
        if self.block_size > MAX_BLOCK_SIZE {
            return out(
                "block_size",
                self.block_size.to_string(),
                format!(
                    "is more than {MAX_BLOCK_SIZE} (1 TiB), the largest block numalab ring makes"
                ),
            );
        }
        if !(2..=MAX_BLOCKS).contains(&self.blocks) {
            return out(
                "blocks",
                self.blocks.to_string(),
                format!("is not from 2 to {MAX_BLOCKS}, the blocks a ring can have"),
            );
        }
        if self.volume < self.block_size {
            return out(
                "volume",
                self.volume.to_string(),
                format!("is less than one block ({} bytes)", self.block_size),
            );
        }
        if self.ramp_bytes().checked_add(self.volume).is_none() {
            return out(
                "ramp",
                self.ramp.to_string(),
                format!(
                    "and the volume ({} bytes) are more than 2^64 bytes together",
                    self.volume
                ),
            );
        }
        timeout_from_secs(self.timeout.as_secs_f64())?;
        // Whatever else the ring itself refuses (a segment larger than an
        // address can describe).
        self.ring_options("check", 0)
            .validate()
            .map_err(|source| ConfigError::Ring { source })
    }
}
