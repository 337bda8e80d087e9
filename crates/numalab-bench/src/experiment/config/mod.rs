//! The experiment file: a TOML description of a workload, read strictly.
//!
//! Every key is listed once in [`KEYS`] with its default and meaning (the
//! reference in docs/experiment-file.md is that table); unknown keys are errors that name
//! the file, line and column and suggest the nearest valid key. `--set
//! key=value` overrides any key, type-checked like the file. A `[sweep]`
//! table of lists turns one experiment into a grid of them.
//!
//! This file is the file's shape (the tables and their defaults); beside
//! it, `keys.rs` documents every key, `sweep.rs` reads `[sweep]`,
//! `error.rs` says where an error is, `load.rs` reads, overrides and
//! checks an experiment, and `tests.rs` tests them together.

use serde::{Deserialize, Serialize};

use super::values::{
    ByteSize, IsaChoice, MinTime, Pattern, PolicySpec, ReadWrite, Replication, Seconds, Sharing,
    Sync, ThreadPlacement,
};
use crate::kernels::{Mix, Store};

mod error;
mod keys;
mod load;
mod sweep;
#[cfg(test)]
mod tests;

pub use error::{ConfigError, Location};
pub use keys::{nearest, settable_keys, Key, KEYS};
pub use load::parse_value;
pub use sweep::{Cell, Sweep};

/// An experiment: threads, memory, how the threads access it, how often
/// to measure, and optionally a grid of variations.
///
/// ```
/// use numalab_bench::experiment::Experiment;
/// let exp = Experiment::from_toml_str(r#"
///     name = "deck-exp1"
///     [threads]
///     count = 2
///     [memory]
///     size = "8MiB"
///     policy = "remote"
///     [access]
///     read_write = "2:1"
///     op_size = 128
/// "#, "deck.toml")?;
/// assert_eq!(exp.threads.count, 2);
/// assert_eq!(exp.memory.size.0, 8 << 20);
/// assert_eq!(exp.access.mix().to_string(), "2:1");
/// # Ok::<(), numalab_bench::experiment::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// Short name, used in titles and file names (the file's name when
    /// not given).
    #[serde(default)]
    pub name: String,
    /// One line on what the experiment shows.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The threads.
    #[serde(default)]
    pub threads: Threads,
    /// The memory they use.
    #[serde(default)]
    pub memory: Memory,
    /// What they do to it.
    #[serde(default)]
    pub access: Access,
    /// Repeats and warm-up.
    #[serde(default)]
    pub run: RunSettings,
    /// For `numalab sweep`: the grid.
    #[serde(default, skip_serializing_if = "Sweep::is_empty")]
    pub sweep: Sweep,
}

/// The name of an experiment given none (and not read from a file).
pub const DEFAULT_NAME: &str = "experiment";

/// `[threads]`.
///
/// ```
/// use numalab_bench::experiment::{Experiment, ThreadPlacement};
/// let exp = Experiment::from_toml_str(r#"
///     [threads]
///     count = 4
///     placement = "ratio:3:1"
/// "#, "x.toml")?;
/// assert_eq!(exp.threads.count, 4);
/// assert_eq!(exp.threads.placement, ThreadPlacement::Ratio(vec![3, 1]));
/// assert!(!exp.threads.oversubscribe, "refused unless asked");
/// # Ok::<(), numalab_bench::experiment::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Threads {
    /// Number of worker threads.
    #[serde(default = "one")]
    pub count: u32,
    /// Which CPUs they run on.
    #[serde(default)]
    pub placement: ThreadPlacement,
    /// Allow more threads than CPUs (they then share CPUs).
    #[serde(default)]
    pub oversubscribe: bool,
}

fn one() -> u32 {
    1
}

impl Default for Threads {
    fn default() -> Self {
        Threads {
            count: 1,
            placement: ThreadPlacement::Balanced,
            oversubscribe: false,
        }
    }
}

/// `[memory]`.
///
/// ```
/// use numalab_bench::experiment::config::Memory;
/// use numalab_bench::experiment::{Experiment, PolicySpec, Sharing};
/// let exp = Experiment::from_toml_str(r#"
///     [memory]
///     size = "64MiB"
///     sharing = "shared"
/// "#, "x.toml")?;
/// assert_eq!(exp.memory.size.0, 64 << 20);
/// assert_eq!(exp.memory.sharing, Sharing::Shared);
/// assert_eq!(exp.memory.policy, PolicySpec::Local, "the default");
/// assert_eq!(Memory::default().size.to_string(), "256MiB");
/// # Ok::<(), numalab_bench::experiment::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    /// Bytes per region.
    #[serde(default = "default_size")]
    pub size: ByteSize,
    /// Where each region's pages go.
    #[serde(default)]
    pub policy: PolicySpec,
    /// How many regions, and who uses each.
    #[serde(default)]
    pub sharing: Sharing,
    /// Page size backing the regions.
    #[serde(default)]
    pub huge_pages: numalab::HugePages,
    /// With `policy = "replicate"`: how writes keep the copies identical.
    #[serde(default)]
    pub replication: Replication,
}

fn default_size() -> ByteSize {
    ByteSize(256 << 20)
}

impl Default for Memory {
    fn default() -> Self {
        Memory {
            size: default_size(),
            policy: PolicySpec::Local,
            sharing: Sharing::PerNode,
            huge_pages: numalab::HugePages::None,
            replication: Replication::Copies,
        }
    }
}

/// `[access]`.
///
/// ```
/// use numalab_bench::experiment::{Experiment, Pattern};
/// let exp = Experiment::from_toml_str(r#"
///     [access]
///     pattern = "copy"
///     duration = "2s"
/// "#, "x.toml")?;
/// assert_eq!(exp.access.pattern, Pattern::Copy);
/// assert_eq!(exp.access.mix().to_string(), "1:1", "a copy reads and writes");
/// assert_eq!(exp.access.total_ops(), None, "timed, not counted");
/// # Ok::<(), numalab_bench::experiment::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Access {
    /// Order of the operations.
    #[serde(default)]
    pub pattern: Pattern,
    /// Bytes per read or write (the deck's RW_SIZE).
    #[serde(default = "default_op_size")]
    pub op_size: ByteSize,
    /// Reads to writes; unset means reads only (`1:0`), and `1:1` for copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_write: Option<ReadWrite>,
    /// Operations in total, split across the threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops: Option<u64>,
    /// Or: how long each thread runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<Seconds>,
    /// What guards the memory.
    #[serde(default)]
    pub sync: Sync,
    /// Reader-writer locks over each region with `sync = "rwlock"`.
    #[serde(default = "default_stripes")]
    pub lock_stripes: u32,
    /// Time one operation in this many (0: none).
    #[serde(default = "default_sample")]
    pub latency_sample: u32,
    /// Vector instructions for sequential and copy operations.
    #[serde(default)]
    pub isa: IsaChoice,
    /// Cached or non-temporal stores for sequential writes and copies.
    #[serde(default)]
    pub stores: Store,
    /// Seed of the per-thread generators.
    #[serde(default = "default_seed")]
    pub seed: u64,
}

fn default_op_size() -> ByteSize {
    ByteSize(64)
}
fn default_stripes() -> u32 {
    1024
}
fn default_sample() -> u32 {
    1024
}
fn default_seed() -> u64 {
    1
}

/// Operations when neither `ops` nor `duration` is given.
pub const DEFAULT_OPS: u64 = 10_000_000;

/// The most worker threads an experiment starts (`threads.count`).
///
/// Each thread is a pinned OS thread with its own stack, counters and
/// latency reservoir. 4096 is more than the CPUs of the servers numalab
/// measures (the big ones have a few hundred) and lets such a machine be
/// oversubscribed several times over, while a typo such as `2147483648`
/// is refused before a single per-thread table is made.
pub const MAX_THREADS: u32 = 4096;

/// The most operations one run counts (`access.ops`): 10¹².
///
/// At a hundred million random operations a second (a busy two-socket
/// server) that is near three hours per run; more is almost surely a
/// slip of the keyboard, and it keeps the progress counters (operations
/// of every run) far inside 64 bits.
pub const MAX_OPS: u64 = 1_000_000_000_000;

/// The most bytes one run moves: `access.ops` × `access.op_size`, 2⁶⁰
/// bytes (1 EiB).
///
/// Byte counts are 64-bit and summed over threads; below 2⁶⁰ they cannot
/// wrap, and an exbibyte is months of traffic at any bandwidth a machine
/// has.
pub const MAX_BYTES_PER_RUN: u64 = 1 << 60;

/// The most measured runs (`run.repeats`).
///
/// The figures are medians over the repeats, which a thousand pin down
/// well past the machine's noise; every repeat keeps a row per thread in
/// the result, so the count is bounded with the rows ([`MAX_RESULT_ROWS`]).
pub const MAX_REPEATS: u32 = 1000;

/// The most unmeasured runs before the repeats (`run.warmup`): a hundred
/// warm-ups settle any cache, TLB or frequency state one can.
pub const MAX_WARMUP: u32 = 100;

/// The most reader-writer locks per region (`access.lock_stripes`): 2¹⁶.
///
/// Each lock is a 64-byte line on the region's node (4 MiB per region
/// copy at this limit); more stripes than that no longer lower contention
/// measurably, and an array sized by a typo would take the node's memory.
pub const MAX_LOCK_STRIPES: u32 = 1 << 16;

/// The most per-thread rows a result holds: threads × (warm-ups +
/// repeats), summed over a sweep's cells.
///
/// Each row (a thread in one run, with its counters and latency
/// percentiles) takes near a kilobyte in memory and in the JSON file;
/// 100 000 rows keep a result under about a hundred megabytes (e.g. 4096
/// threads × 24 runs, or 64 threads × 1500 runs).
pub const MAX_RESULT_ROWS: u64 = 100_000;

/// The most latency samples one thread keeps of each kind (reads,
/// writes) in one run: 2¹⁶, half a megabyte of ticks.
///
/// Past that a thread keeps a uniform random sample of everything it
/// timed (a reservoir), so memory does not grow with `access.ops` or
/// `access.duration` and the percentiles stay those of the whole run.
pub const SAMPLES_PER_THREAD: usize = 1 << 16;

/// The most latency samples one run keeps of each kind over all its
/// threads: 2²⁰ (8 MiB of ticks). Each thread keeps this share of it,
/// between [`MIN_SAMPLES_PER_THREAD`] and [`SAMPLES_PER_THREAD`].
pub const SAMPLES_PER_RUN: usize = 1 << 20;

/// The fewest latency samples a thread keeps of each kind however many
/// threads share [`SAMPLES_PER_RUN`]: 256, enough for its median and p90
/// (its p99.9 is the run's, from all threads together).
pub const MIN_SAMPLES_PER_THREAD: usize = 256;

/// The most cells a `[sweep]` grid may have (the product of its lists'
/// lengths, counted before any cell is made).
///
/// Every cell is a whole experiment, planned before the first runs:
/// 10 000 cells of even one second each are near three hours, and each
/// planned cell is kept in memory until its turn.
pub const MAX_SWEEP_CELLS: u64 = 10_000;

impl Default for Access {
    fn default() -> Self {
        Access {
            pattern: Pattern::Random,
            op_size: default_op_size(),
            read_write: None,
            ops: None,
            duration: None,
            sync: Sync::None,
            lock_stripes: default_stripes(),
            latency_sample: default_sample(),
            isa: IsaChoice::Auto,
            stores: Store::Cached,
            seed: default_seed(),
        }
    }
}

impl Access {
    /// The read:write schedule: as written, else reads only (`1:1` for a
    /// copy, which reads and writes every byte).
    pub fn mix(&self) -> Mix {
        match (self.read_write, self.pattern) {
            (Some(rw), _) => rw.0,
            (None, Pattern::Copy) => Mix {
                reads: 1,
                writes: 1,
            },
            (None, _) => Mix {
                reads: 1,
                writes: 0,
            },
        }
    }

    /// Total operations when the run is counted in operations (not time).
    pub fn total_ops(&self) -> Option<u64> {
        match (self.ops, self.duration) {
            (Some(ops), _) => Some(ops),
            (None, Some(_)) => None,
            (None, None) => Some(DEFAULT_OPS),
        }
    }
}

/// `[run]`.
///
/// ```
/// use numalab_bench::experiment::config::RunSettings;
/// use numalab_bench::experiment::Experiment;
/// let exp = Experiment::from_toml_str("[run]\nrepeats = 3\ncounters = false\n", "x.toml")?;
/// assert_eq!((exp.run.repeats, exp.run.warmup), (3, 1));
/// assert!(!exp.run.counters);
/// assert_eq!(RunSettings::default().repeats, 5);
/// # Ok::<(), numalab_bench::experiment::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSettings {
    /// Measured runs.
    #[serde(default = "default_repeats")]
    pub repeats: u32,
    /// Unmeasured runs first.
    #[serde(default = "one")]
    pub warmup: u32,
    /// Read performance counters.
    #[serde(default = "yes")]
    pub counters: bool,
    /// The order of a sweep's runs.
    #[serde(default)]
    pub order: RunOrder,
    /// A sweep runs every `local` cell twice, the second as an A/A
    /// control: its difference from the first is this machine's noise.
    #[serde(default)]
    pub control: bool,
    /// The shortest a run may be: runs numalab sizes are lengthened past
    /// it, others warned about. `None`: this machine's measured noise
    /// floor ([`NoiseFloor`](super::floor::NoiseFloor)); `off` turns both
    /// off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_time: Option<MinTime>,
    /// A sweep whose differences are not all told apart after `repeats`
    /// rounds runs `repeats` more, and so on up to this many, looking at
    /// its differences after each step; its intervals are then repeated
    /// intervals that hold at 95% wherever it stopped
    /// ([`repeated_confidence`](crate::stats::repeated_confidence)).
    /// `None`: `repeats`, one look.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_repeats: Option<u32>,
}

impl RunSettings {
    /// The most repeats a cell may run: `max_repeats`, or `repeats`.
    pub fn most_repeats(&self) -> u32 {
        self.max_repeats.unwrap_or(self.repeats).max(self.repeats)
    }

    /// How many times a sweep may look at its differences: once per
    /// `repeats` rounds up to [`most_repeats`](Self::most_repeats).
    ///
    /// ```
    /// use numalab_bench::experiment::Experiment;
    /// let exp = Experiment::from_toml_str("[run]\nrepeats = 5\nmax_repeats = 20\n", "x")?;
    /// assert_eq!(exp.run.looks(), 4);
    /// assert_eq!(numalab_bench::experiment::config::RunSettings::default().looks(), 1);
    /// # Ok::<(), numalab_bench::experiment::ConfigError>(())
    /// ```
    pub fn looks(&self) -> u32 {
        self.most_repeats() / self.repeats.max(1)
    }
}

/// The order in which `numalab sweep` runs its cells' repeats
/// (`run.order`).
///
/// ```
/// use numalab_bench::experiment::config::RunOrder;
/// use numalab_bench::experiment::Experiment;
/// let exp = Experiment::from_toml_str("[run]\norder = \"grouped\"\n", "x.toml")?;
/// assert_eq!(exp.run.order, RunOrder::Grouped);
/// assert_eq!(RunOrder::default(), RunOrder::Interleaved);
/// # Ok::<(), numalab_bench::experiment::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOrder {
    /// Round by round: the first repeat of every cell, then the second
    /// of every cell, and so on, each after the cell's own warm-ups, so
    /// that a slow minute of the machine falls on every cell alike and
    /// shows in each cell's spread instead of in one cell's figure.
    #[default]
    Interleaved,
    /// Cell by cell: every repeat of a cell back to back (one warm-up
    /// and one set-up per cell; faster, but drift between cells looks
    /// like a difference).
    Grouped,
}

fn default_repeats() -> u32 {
    5
}
fn yes() -> bool {
    true
}

impl Default for RunSettings {
    fn default() -> Self {
        RunSettings {
            repeats: default_repeats(),
            warmup: 1,
            counters: true,
            order: RunOrder::Interleaved,
            control: false,
            min_time: None,
            max_repeats: None,
        }
    }
}
