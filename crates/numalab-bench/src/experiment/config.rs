//! The experiment file: a TOML description of a workload, read strictly.
//!
//! Every key is listed once in [`KEYS`] with its default and meaning (the
//! reference in docs/experiment-file.md is that table); unknown keys are errors that name
//! the file, line and column and suggest the nearest valid key. `--set
//! key=value` overrides any key, type-checked like the file. A `[sweep]`
//! table of lists turns one experiment into a grid of them.

use std::fmt;
use std::path::Path;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::values::{
    ByteSize, IsaChoice, MinTime, Pattern, PolicySpec, ReadWrite, Replication, Seconds, Sharing,
    Sync, ThreadPlacement,
};
use crate::kernels::{Mix, Store};

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

/// One documented key of the experiment file.
///
/// ```
/// use numalab_bench::experiment::KEYS;
/// let key = KEYS.iter().find(|k| k.path == "memory.size").unwrap();
/// assert_eq!(key.default, "256MiB");
/// assert_eq!(key.meaning, "bytes per region");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// Dotted path, e.g. `memory.policy`.
    pub path: &'static str,
    /// Default, as written in a file (`-` when required or unset).
    pub default: &'static str,
    /// Values accepted.
    pub values: &'static str,
    /// What it does.
    pub meaning: &'static str,
}

/// Every key of the experiment file (docs/experiment-file.md is made from
/// this table; a test keeps it and the types in step).
pub const KEYS: &[Key] = &[
    Key { path: "name", default: "the file's name", values: "text", meaning: "short name, used in titles and file names" },
    Key { path: "description", default: "", values: "text", meaning: "what the experiment shows" },
    Key { path: "threads.count", default: "1", values: "1 to 4096", meaning: "worker threads" },
    Key { path: "threads.placement", default: "balanced", values: "balanced | ratio:3:1 | nodes:0,1 | cpus:0-5,12-17", meaning: "balanced: even split over the nodes with CPUs; ratio: split over those nodes in id order in this ratio (the deck's unbalanced runs); nodes: even split over these nodes; cpus: exactly these CPUs in order. Within a node, one CPU per core first, then SMT siblings" },
    Key { path: "threads.oversubscribe", default: "false", values: "bool", meaning: "allow more threads than CPUs (they share CPUs; otherwise such a plan is refused)" },
    Key { path: "memory.size", default: "256MiB", values: "150MiB, 1G, 64K, 4096 (binary units, as everywhere in numalab)", meaning: "bytes per region" },
    Key { path: "memory.policy", default: "local", values: "local | remote | first-touch | replicate[:NODES] | interleave[:NODES] | weighted-interleave:0=3,1=1 | bind:N | preferred:N | preferred-many:NODES | default", meaning: "local: each region bound to its threads' node; remote: to the nearest other node; first-touch: no policy, each thread faults in its own share; replicate: a copy of each region bound to every node with CPUs (or to NODES), each thread reading its own node's copy (or the nearest), every write going to all copies (see memory.replication); the rest are the kernel's policies as numactl spells them" },
    Key { path: "memory.sharing", default: "per-node", values: "shared | per-node | per-thread", meaning: "one region for all threads, one per node with threads (the deck's 2 x 150 MB), or one per thread" },
    Key { path: "memory.huge_pages", default: "none", values: "none | thp | 2M", meaning: "base pages, transparent huge pages (madvised, 2 MiB-aligned) or explicit 2 MiB pages from the hugetlb pool" },
    Key { path: "memory.replication", default: "copies", values: "copies | broadcast | log", meaning: "with replicate: copies: the engine stores every write to every copy, with sync = rwlock under the stripe's lock on every copy (taken in copy order, all held during the write; readers take only their own copy's lock: the deck's Experiment 2), with sync = none without locks; broadcast, log: every read and write goes through numalab::replicated::Replicated in that mode, whose own locks guard the copies (access.sync and lock_stripes do not apply). Ignored by the other policies" },
    Key { path: "access.pattern", default: "random", values: "random | sequential | strided:BYTES | copy", meaning: "random: uniform op-size-aligned offsets over the whole region; sequential/strided: each thread walks its own share; copy: each thread copies the first half of its share into the second (which starts half a page later, so no load and store are a multiple of 4 KiB apart)" },
    Key { path: "access.op_size", default: "64", values: "bytes, multiple of 8", meaning: "bytes per read or write (the deck's RW_SIZE)" },
    Key { path: "access.read_write", default: "1:0 (copy: 1:1)", values: "R:W", meaning: "reads to writes, interleaved exactly (2:1 is R R W R R W ...)" },
    Key { path: "access.ops", default: "10000000", values: "1 to 10^12; ops x op_size at most 2^60 bytes", meaning: "operations in total (reads plus writes; a copy counts one of each), split evenly across the threads; left out, numalab lengthens runs that fall under the machine's noise floor" },
    Key { path: "access.duration", default: "-", values: "10s, 500ms, 2m, at most 24h", meaning: "instead of ops: every thread runs this long" },
    Key { path: "access.sync", default: "none", values: "none | rwlock", meaning: "rwlock: a reader-writer lock per stripe of the region, shared for reads and exclusive for writes (the deck's Experiment 2)" },
    Key { path: "access.lock_stripes", default: "1024", values: "1 to 65536", meaning: "locks per region with sync = rwlock; each guards an equal stripe" },
    Key { path: "access.latency_sample", default: "1024", values: "0 or more", meaning: "time one operation in this many for the latency percentiles (0: none); moved up to the next number sharing no factor with reads + writes, so reads and writes are both timed. Each thread keeps a uniform sample of at most 65536 timings of each kind (1048576 per run over all threads, at least 256 a thread); the result says how many were kept (samples) of how many timed (timed)" },
    Key { path: "access.isa", default: "auto", values: "auto | avx512 | avx2 | scalar", meaning: "vector instructions for sequential and copy operations of 256 bytes or more" },
    Key { path: "access.stores", default: "cached", values: "cached | non_temporal", meaning: "stores through the caches, or streaming stores around them (sequential writes and copies)" },
    Key { path: "access.seed", default: "1", values: "integer", meaning: "seed of the per-thread random generators (thread i, repeat r get distinct streams)" },
    Key { path: "run.repeats", default: "5", values: "1 to 1000", meaning: "measured runs; figures are their median, with min, max and CV" },
    Key { path: "run.warmup", default: "1", values: "0 to 100", meaning: "unmeasured runs first" },
    Key { path: "run.min_time", default: "-", values: "a duration: 50ms, 1s; or off", meaning: "the shortest a run may be; left out, this machine's noise floor, measured before each run: runs numalab sizes (no access.ops or access.duration) are lengthened past it, others warned about" },
    Key { path: "run.counters", default: "true", values: "bool", meaning: "read perf counters per thread (hardware where the PMU allows, software events otherwise)" },
    Key { path: "run.control", default: "false", values: "bool", meaning: "numalab sweep (--control): run every local cell a second time, as an A/A control whose difference from local is the machine's noise floor (\"differences under 6% cannot be told apart here\"); needs local among memory.policy's values" },
    Key { path: "run.max_repeats", default: "run.repeats", values: "a multiple of run.repeats, at most 20 times it and 1000", meaning: "numalab sweep: while some difference of the sweep's table holds 0 (≈), run run.repeats more rounds, up to this many repeats, looking again after each; the intervals are then repeated intervals (Pocock's boundary over the looks), which hold at 95% wherever the sweep stopped, so looking more often does not find more differences that are not there" },
    Key { path: "run.order", default: "interleaved", values: "interleaved | grouped", meaning: "numalab sweep: interleaved runs every cell's first repeat, then every cell's second, and so on, each after the cell's own warm-ups and set-up, so a slow minute of the machine hits every cell alike; grouped runs each cell's repeats back to back (faster, but drift between cells then looks like a difference)" },
    Key { path: "sweep.\"KEY\"", default: "-", values: "list", meaning: "numalab sweep: runs every combination of the listed values of these keys, e.g. \"threads.count\" = [1, 2, 4]; at most 10000 combinations" },
];

/// The keys `--set` and `[sweep]` accept (every key but `sweep` itself).
pub fn settable_keys() -> impl Iterator<Item = &'static str> {
    KEYS.iter()
        .map(|k| k.path)
        .filter(|p| !p.starts_with("sweep."))
}

/// The nearest of `candidates` to `wrong`, if any is close enough to be a
/// plausible typo.
pub fn nearest<'a>(wrong: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(wrong, c), c))
        .filter(|(score, _)| *score >= 0.75)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// The `[sweep]` table: keys in the order written, each with its values.
///
/// ```
/// use numalab_bench::experiment::Experiment;
/// let exp = Experiment::from_toml_str(r#"
///     [sweep]
///     "threads.count" = [1, 2]
///     "memory.policy" = ["local", "remote", "interleave"]
/// "#, "x.toml")?;
/// let keys: Vec<&str> = exp.sweep.axes.iter().map(|(k, _)| k.as_str()).collect();
/// assert_eq!(keys, ["threads.count", "memory.policy"], "file order");
/// assert_eq!(exp.sweep.cells(), 6);
/// # Ok::<(), numalab_bench::experiment::ConfigError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sweep {
    /// Each swept key (`threads.count`) and its values, in file order.
    pub axes: Vec<(String, Vec<toml::Value>)>,
}

impl Sweep {
    /// Whether there is nothing to sweep.
    pub fn is_empty(&self) -> bool {
        self.axes.is_empty()
    }

    /// Number of cells in the grid (saturating at `usize::MAX`).
    pub fn cells(&self) -> usize {
        self.axes
            .iter()
            .map(|(_, v)| v.len())
            .try_fold(1usize, |n, k| n.checked_mul(k))
            .unwrap_or(usize::MAX)
    }

    /// Refuses a grid of more than [`MAX_SWEEP_CELLS`] cells, counted from
    /// the lists' lengths before any cell is made.
    ///
    /// ```
    /// use numalab_bench::experiment::config::{Sweep, MAX_SWEEP_CELLS};
    /// let list = |n: i64| (0..n).map(toml::Value::Integer).collect::<Vec<_>>();
    /// let grid = Sweep { axes: vec![("access.seed".into(), list(4000)), ("access.ops".into(), list(2000))] };
    /// let err = grid.check_size().unwrap_err();
    /// assert_eq!(err.message, format!(
    ///     "[sweep] has 4000 x 2000 = 8000000 cells, more than {MAX_SWEEP_CELLS}, the most a sweep runs"));
    /// ```
    pub fn check_size(&self) -> Result<(), ConfigError> {
        let cells = self.cells();
        if u64::try_from(cells).unwrap_or(u64::MAX) <= MAX_SWEEP_CELLS {
            return Ok(());
        }
        let lengths: Vec<String> = self.axes.iter().map(|(_, v)| v.len().to_string()).collect();
        let total = if cells == usize::MAX {
            "more than 2^64".to_owned()
        } else {
            cells.to_string()
        };
        Err(ConfigError {
            location: None,
            set_option: None,
            message: format!(
                "[sweep] has {} = {total} cells, more than {MAX_SWEEP_CELLS}, the most a sweep runs",
                lengths.join(" x ")
            ),
            hint: Some("sweep fewer values, or split the grid over several files".into()),
        })
    }
}

/// Whether a TOML text sets no key: empty, comments, or tables without
/// keys. (An empty experiment file is almost surely a mistake: the wrong
/// file, or one truncated.)
fn sets_no_key(text: &str) -> bool {
    fn empty(table: &toml::Table) -> bool {
        table.values().all(|v| match v {
            toml::Value::Table(inner) => empty(inner),
            _ => false,
        })
    }
    text.parse::<toml::Table>().is_ok_and(|t| empty(&t))
}

/// One axis of the `[sweep]` table as the file writes it.
#[derive(Debug)]
struct AxisSpan {
    /// The key (`threads.count`).
    key: String,
    /// Where the key is written.
    span: std::ops::Range<usize>,
    /// Why the value is not a list of values, when it is not.
    not_a_list: Option<String>,
}

/// The keys of the file's `[sweep]` table, with where they are written;
/// empty when there is none or the file is not TOML (serde then says
/// where).
fn sweep_axes(text: &str) -> Vec<AxisSpan> {
    use toml::de::{DeTable, DeValue};
    let Ok(document) = DeTable::parse(text) else {
        return Vec::new();
    };
    let Some(DeValue::Table(sweep)) = document
        .get_ref()
        .iter()
        .find(|(k, _)| k.get_ref().as_ref() == "sweep")
        .map(|(_, v)| v.get_ref())
    else {
        return Vec::new();
    };
    sweep
        .iter()
        .map(|(key, value)| {
            let name = key.get_ref().to_string();
            let not_a_list = match value.get_ref() {
                DeValue::Array(_) => None,
                // `memory.policy = [...]` without quotes: TOML reads a
                // table `memory` holding `policy`.
                DeValue::Table(inner) => {
                    let dotted: Vec<String> = inner
                        .iter()
                        .map(|(k, _)| format!("\"{name}.{}\"", k.get_ref()))
                        .collect();
                    Some(format!(
                        "sweep key {name}.{} is not quoted, so TOML reads it as a table `{name}`; quote each key: {} = [...]",
                        inner.iter().next().map(|(k, _)| k.get_ref().to_string()).unwrap_or_default(),
                        dotted.join(", ")
                    ))
                }
                _ => Some(format!(
                    "sweep \"{name}\" must be a list of values, as in \"{name}\" = [{}]",
                    text.get(value.span()).unwrap_or("...").trim()
                )),
            };
            AxisSpan {
                key: name,
                span: key.span(),
                not_a_list,
            }
        })
        .collect()
}

impl Serialize for Sweep {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.axes.len()))?;
        for (key, values) in &self.axes {
            map.serialize_entry(key, values)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Sweep {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SweepVisitor;
        impl<'de> Visitor<'de> for SweepVisitor {
            type Value = Sweep;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table of lists, e.g. \"threads.count\" = [1, 2, 4]")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Sweep, A::Error> {
                let mut axes = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    let values = match map.next_value::<toml::Value>()? {
                        toml::Value::Array(values) => values,
                        other => {
                            return Err(serde::de::Error::custom(format!(
                            "sweep \"{key}\" must be a list of values, as in \"{key}\" = [{other}]"
                        )))
                        }
                    };
                    axes.push((key, values));
                }
                Ok(Sweep { axes })
            }
        }
        deserializer.deserialize_map(SweepVisitor)
    }
}

/// One cell of a sweep grid: the settings that make it (key and value,
/// in axis order) and the experiment it is.
///
/// ```
/// use numalab_bench::experiment::config::Cell;
/// use numalab_bench::experiment::Experiment;
/// let exp = Experiment::from_toml_str("[sweep]\n\"threads.count\" = [1, 2]\n", "x.toml")?;
/// let cells: Vec<Cell> = exp.cells()?;
/// let (settings, last) = &cells[1];
/// assert_eq!(settings[0].0, "threads.count");
/// assert_eq!(settings[0].1.as_integer(), Some(2));
/// assert_eq!(last.threads.count, 2);
/// assert!(last.sweep.is_empty(), "a cell is one experiment");
/// # Ok::<(), numalab_bench::experiment::ConfigError>(())
/// ```
pub type Cell = (Vec<(String, toml::Value)>, Experiment);

/// Where a configuration error is.
///
/// ```
/// use numalab_bench::experiment::Experiment;
/// let err = Experiment::from_toml_str("name = \"x\"\n[memory]\nsise = \"1GiB\"\n", "exp.toml")
///     .unwrap_err();
/// let at = err.location.as_deref().unwrap();
/// assert_eq!((at.file.as_str(), at.line, at.column), ("exp.toml", 3, 1));
/// assert_eq!((at.text.as_str(), at.width), ("sise = \"1GiB\"", 4));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file.
    pub file: String,
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1 (in characters).
    pub column: usize,
    /// The line's text.
    pub text: String,
    /// Characters to underline from `column`.
    pub width: usize,
}

/// A configuration error: what is wrong and where.
///
/// ```
/// use numalab_bench::experiment::Experiment;
/// let exp = Experiment::from_toml_str("[threads]\ncount = 2\n", "exp.toml")?;
/// let err = exp.with_overrides(&["threads.cont=8".into()]).unwrap_err();
/// assert_eq!(err.set_option.as_deref(), Some("threads.cont=8"));
/// assert_eq!(err.hint.as_deref(), Some("did you mean `threads.count`?"));
/// assert_eq!(
///     err.to_string(),
///     "--set threads.cont=8: unknown key `threads.cont`; did you mean `threads.count`?"
/// );
/// # Ok::<(), numalab_bench::experiment::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// In the file (line and column).
    pub location: Option<Box<Location>>,
    /// Which `--set` option, when it came from one.
    pub set_option: Option<String>,
    /// What is wrong.
    pub message: String,
    /// The nearest valid key, or another hint.
    pub hint: Option<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(loc) = &self.location {
            write!(f, "{}:{}:{}: ", loc.file, loc.line, loc.column)?;
        }
        if let Some(set) = &self.set_option {
            write!(f, "--set {set}: ")?;
        }
        f.write_str(&self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, "; {hint}")?;
        }
        if let Some(loc) = &self.location {
            let number = loc.line.to_string();
            let pad = " ".repeat(number.len());
            write!(
                f,
                "\n{pad} |\n{number} | {}\n{pad} | {}{}",
                loc.text,
                " ".repeat(loc.column.saturating_sub(1)),
                "^".repeat(loc.width.max(1))
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    fn plain(message: impl Into<String>) -> ConfigError {
        ConfigError {
            location: None,
            set_option: None,
            message: message.into(),
            hint: None,
        }
    }
}

/// Line, column and text of byte offset `span` in `text`.
fn locate(file: &str, text: &str, span: std::ops::Range<usize>) -> Location {
    let start = span.start.min(text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let line_text = &text[line_start..line_end];
    let column = text[line_start..start].chars().count() + 1;
    let end = span.end.clamp(start, line_end);
    Location {
        file: file.to_owned(),
        line: text[..start].matches('\n').count() + 1,
        column,
        text: line_text.trim_end_matches('\r').to_owned(),
        width: text[start..end].chars().count(),
    }
}

/// The section (`memory`) whose fields a `deny_unknown_fields` message
/// lists, found from the expected names.
fn section_of(expected: &[&str]) -> Option<&'static str> {
    let first = expected.first()?;
    KEYS.iter().find_map(|k| match k.path.split_once('.') {
        Some((section, field)) if field == *first && !section.starts_with("sweep") => Some(section),
        _ => None,
    })
}

/// Turns serde's "unknown field `x`, expected one of `a`, `b`" into a
/// message naming the section and a hint with the nearest key.
fn explain_unknown(message: &str) -> Option<(String, Option<String>)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (field, rest) = rest.split_once('`')?;
    let expected: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    let section = section_of(&expected);
    let place = match section {
        Some(section) => format!(" in [{section}]"),
        None => " at the top level".to_owned(),
    };
    let message = format!("unknown key `{field}`{place}");
    // The nearest key of the same section, else a key of that name that
    // lives in another section.
    let hint = nearest(field, expected.iter().copied())
        .map(|near| format!("did you mean `{near}`?"))
        .or_else(|| {
            KEYS.iter()
                .find(|k| k.path.rsplit('.').next() == Some(field))
                .map(|k| {
                    let (section, _) = k.path.split_once('.').unwrap_or(("", k.path));
                    format!("`{field}` belongs in [{section}]")
                })
        })
        .or_else(|| Some(format!("valid keys here: {}", expected.join(", "))));
    Some((message, hint))
}

fn from_toml_error(err: &toml::de::Error, file: &str, text: &str) -> ConfigError {
    let raw = err.message().trim();
    let (message, hint) = explain_unknown(raw).unwrap_or_else(|| (raw.to_owned(), None::<String>));
    ConfigError {
        location: err.span().map(|span| Box::new(locate(file, text, span))),
        set_option: None,
        message,
        hint,
    }
}

impl Experiment {
    /// Reads an experiment file: a regular file (or a pipe) of at most
    /// 1 MiB, so `/dev/zero` or a huge file is refused, not read.
    pub fn from_file(path: &Path) -> Result<Experiment, ConfigError> {
        /// An experiment file is a few dozen lines; anything near this is
        /// not one.
        const MAX_EXPERIMENT_BYTES: u64 = 1 << 20;
        let text =
            numalab::files::read_text_limited(path, MAX_EXPERIMENT_BYTES, "experiment files")
                .map_err(|e| ConfigError::plain(format!("experiment file: {e}")))?;
        let mut exp = Self::from_toml_str(&text, &path.display().to_string())?;
        if exp.name == DEFAULT_NAME && !text.lines().any(|l| l.trim_start().starts_with("name")) {
            if let Some(stem) = path.file_stem() {
                exp.name = stem.to_string_lossy().into_owned();
            }
        }
        if sets_no_key(&text) {
            return Err(ConfigError::plain(format!(
                "{} sets no key (it is empty, or only comments and empty tables): an experiment file needs at least one, e.g. name = \"{}\" to run every default (docs/experiment-file.md lists the keys)",
                path.display(),
                exp.name
            )));
        }
        Ok(exp)
    }

    /// Parses an experiment from TOML text; `file` names it in errors.
    pub fn from_toml_str(text: &str, file: &str) -> Result<Experiment, ConfigError> {
        // The grid's keys where the file writes them: for its order (TOML
        // tables have none), its errors' locations, and its shape before
        // serde sees it.
        let axes = sweep_axes(text);
        for axis in &axes {
            if let Some(error) = &axis.not_a_list {
                return Err(ConfigError {
                    location: Some(Box::new(locate(file, text, axis.span.clone()))),
                    set_option: None,
                    message: error.clone(),
                    hint: None,
                });
            }
        }
        let at = |key: &str| {
            axes.iter()
                .find(|a| a.key == key)
                .map(|a| Box::new(locate(file, text, a.span.clone())))
        };
        let mut exp: Experiment =
            toml::from_str(text).map_err(|e| from_toml_error(&e, file, text))?;
        exp.sweep.axes.sort_by_key(|(key, _)| {
            axes.iter()
                .find(|a| &a.key == key)
                .map_or(usize::MAX, |a| a.span.start)
        });
        if exp.name.is_empty() {
            exp.name = DEFAULT_NAME.to_owned();
        }
        // The grid's size, counted before anything is made of it.
        exp.sweep.check_size().map_err(|mut e| {
            e.location = exp.sweep.axes.first().and_then(|(key, _)| at(key));
            e
        })?;
        exp.validate().map_err(|mut e| {
            e.location = key_location(file, text, &e.message).map(Box::new);
            e
        })?;
        for (key, values) in &exp.sweep.axes {
            if !settable_keys().any(|k| k == key) {
                return Err(ConfigError {
                    location: at(key),
                    set_option: None,
                    message: format!("sweep over unknown key \"{key}\""),
                    hint: nearest(key, settable_keys()).map(|k| format!("did you mean \"{k}\"?")),
                });
            }
            if values.is_empty() {
                return Err(ConfigError {
                    location: at(key),
                    set_option: None,
                    message: format!("sweep \"{key}\" lists no value"),
                    hint: None,
                });
            }
            // Each value must be valid for its key: its type, and its
            // range when the range is the key's own (combinations with
            // other axes are checked cell by cell).
            for value in values {
                let mut cell = exp.clone();
                cell.sweep = Sweep::default();
                let located = |mut e: ConfigError| {
                    e.set_option = None;
                    e.location = at(key);
                    e.message = format!("sweep \"{key}\" value {value}: {}", e.message);
                    e
                };
                cell.set_value(key, value.clone()).map_err(located)?;
                if let Err(e) = cell.validate() {
                    if e.message.split([':', ' ']).next() == Some(key.as_str()) {
                        return Err(located(e));
                    }
                }
            }
        }
        Ok(exp)
    }

    /// Checks what the types cannot: ranges and combinations.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, message: String| ConfigError {
            location: None,
            set_option: None,
            message: format!("{key}: {message}"),
            hint: None,
        };
        // Counts first: everything after may multiply them.
        if self.threads.count == 0 {
            return Err(bad("threads.count", "must be at least 1".into()));
        }
        // Each count against its limit, in this order.
        let counts: [(&str, u64, u64, &str); 6] = [
            (
                "threads.count",
                self.threads.count.into(),
                MAX_THREADS.into(),
                "the most threads numalab starts",
            ),
            (
                "run.repeats",
                self.run.repeats.into(),
                MAX_REPEATS.into(),
                "the most repeats numalab runs",
            ),
            (
                "run.max_repeats",
                self.run.max_repeats.unwrap_or(0).into(),
                MAX_REPEATS.into(),
                "the most repeats numalab runs",
            ),
            (
                "run.warmup",
                self.run.warmup.into(),
                MAX_WARMUP.into(),
                "the most warm-up runs numalab runs",
            ),
            (
                "access.ops",
                self.access.ops.unwrap_or(0),
                MAX_OPS,
                "the most operations numalab counts in one run",
            ),
            (
                "access.lock_stripes",
                self.access.lock_stripes.into(),
                MAX_LOCK_STRIPES.into(),
                "the most locks numalab puts over a region",
            ),
        ];
        for (key, value, limit, what) in counts {
            if value > limit {
                return Err(ConfigError {
                    location: None,
                    set_option: None,
                    message: format!("{key} = {value} is more than {limit}, {what}"),
                    hint: None,
                });
            }
        }
        let rows = self.result_rows();
        if rows > MAX_RESULT_ROWS {
            return Err(bad(
                "threads.count",
                format!(
                    "{} x ({} + {}) make {rows} per-thread rows, more than {MAX_RESULT_ROWS}, the most one result holds; lower threads.count, run.repeats or run.warmup",
                    numalab::units::count(self.threads.count, "thread"),
                    numalab::units::count(self.run.warmup, "warm-up"),
                    numalab::units::count(self.run.most_repeats(), "repeat")
                ),
            ));
        }
        if self.memory.size.0 == 0 {
            return Err(bad("memory.size", "must be at least one byte".into()));
        }
        let op = self.access.op_size.0;
        if op < 8 || !op.is_multiple_of(8) {
            return Err(bad(
                "access.op_size",
                format!(
                    "{op} bytes: an operation is a whole number of 8-byte words (8, 64, 128, ...)"
                ),
            ));
        }
        if op > self.memory.size.0 {
            return Err(bad(
                "access.op_size",
                format!(
                    "{} is larger than a region ({})",
                    self.access.op_size, self.memory.size
                ),
            ));
        }
        if self.access.ops.is_some() && self.access.duration.is_some() {
            return Err(bad("access.ops", "give ops or duration, not both".into()));
        }
        if self.access.ops == Some(0) {
            return Err(bad("access.ops", "must be at least 1".into()));
        }
        if let Some(ops) = self.access.total_ops() {
            let bytes = u128::from(ops) * u128::from(op);
            if bytes > u128::from(MAX_BYTES_PER_RUN) {
                return Err(bad(
                    "access.ops",
                    format!(
                        "{ops} operations of {} move {bytes} bytes a run, more than {MAX_BYTES_PER_RUN} (1 EiB), the most numalab counts; lower access.ops or access.op_size",
                        self.access.op_size
                    ),
                ));
            }
        }
        if let Pattern::Strided(stride) = self.access.pattern {
            if stride > self.memory.size.0 {
                return Err(bad(
                    "access.pattern",
                    format!(
                        "strided:{stride} steps further than a region ({}), so every operation would land at the start of the share; use a stride of at most memory.size",
                        self.memory.size
                    ),
                ));
            }
        }
        if self.access.pattern == Pattern::Copy {
            if let Some(rw) = self.access.read_write {
                if rw.0
                    != (Mix {
                        reads: 1,
                        writes: 1,
                    })
                {
                    return Err(bad(
                        "access.read_write",
                        format!("{rw} with pattern copy: a copy reads and writes every byte once, so the ratio is 1:1"),
                    ));
                }
            }
        }
        if self.access.lock_stripes == 0 {
            return Err(bad("access.lock_stripes", "must be at least 1".into()));
        }
        if self.run.repeats == 0 {
            return Err(bad("run.repeats", "must be at least 1".into()));
        }
        if let Some(most) = self.run.max_repeats {
            let each = self.run.repeats;
            if most < each {
                return Err(bad(
                    "run.max_repeats",
                    format!("{most} is fewer than run.repeats ({each}), the repeats every cell runs before the sweep first looks at its differences"),
                ));
            }
            if most % each != 0 {
                return Err(bad(
                    "run.max_repeats",
                    format!("{most} is not a multiple of run.repeats ({each}): the sweep looks at its differences after every {each} rounds, so it may stop at {each}, {}, {} …", 2 * each, 3 * each),
                ));
            }
            if most / each > crate::stats::MAX_LOOKS {
                return Err(bad(
                    "run.max_repeats",
                    format!("{most} is {} times run.repeats ({each}), more than {} looks at the differences; raise run.repeats", most / each, crate::stats::MAX_LOOKS),
                ));
            }
            if most > each && self.run.order == RunOrder::Grouped {
                return Err(bad(
                    "run.max_repeats",
                    "more repeats when the differences are not yet told apart needs run.order = \"interleaved\" (grouped runs each cell's repeats to the end before the next cell starts)".into(),
                ));
            }
        }
        Ok(())
    }

    /// Per-thread rows this experiment's result holds: threads × (warm-ups
    /// + repeats), bounded by [`MAX_RESULT_ROWS`].
    ///
    /// ```
    /// use numalab_bench::experiment::Experiment;
    /// let exp = Experiment::from_toml_str("[threads]\ncount = 4\n[run]\nrepeats = 5\nwarmup = 1\n", "x")?;
    /// assert_eq!(exp.result_rows(), 24);
    /// # Ok::<(), numalab_bench::experiment::ConfigError>(())
    /// ```
    pub fn result_rows(&self) -> u64 {
        u64::from(self.threads.count)
            * (u64::from(self.run.warmup) + u64::from(self.run.most_repeats()))
    }

    /// Applies `--set key=value` overrides: the value is read as TOML
    /// (`8`, `true`, `"text"`), or taken as text when it is not TOML
    /// (`interleave`, `150MiB`). A swept key that is set is no longer swept.
    pub fn with_overrides(&self, sets: &[String]) -> Result<Experiment, ConfigError> {
        let mut exp = self.clone();
        for set in sets {
            let (key, value) = set.split_once('=').ok_or_else(|| ConfigError {
                location: None,
                set_option: Some(set.clone()),
                message: "expected KEY=VALUE, e.g. threads.count=8".into(),
                hint: None,
            })?;
            let key = key.trim();
            exp.set_value(key, parse_value(value.trim()))
                .map_err(|mut e| {
                    e.set_option = Some(set.clone());
                    e
                })?;
            exp.sweep.axes.retain(|(k, _)| k != key);
        }
        exp.validate().map_err(|mut e| {
            e.set_option = Some(sets.join(" --set "));
            e
        })?;
        Ok(exp)
    }

    /// Sets one key (dotted path) to a TOML value, type-checked.
    pub fn set_value(&mut self, key: &str, value: toml::Value) -> Result<(), ConfigError> {
        if !settable_keys().any(|k| k == key) {
            return Err(ConfigError {
                location: None,
                set_option: None,
                message: if key.starts_with("sweep") {
                    "the sweep grid is set in the experiment file".into()
                } else {
                    format!("unknown key `{key}`")
                },
                hint: nearest(key, settable_keys()).map(|k| format!("did you mean `{k}`?")),
            });
        }
        let sweep = std::mem::take(&mut self.sweep);
        let mut table =
            toml::Table::try_from(&*self).map_err(|e| ConfigError::plain(e.to_string()))?;
        let (section, field) = match key.split_once('.') {
            Some((section, field)) => (Some(section), field),
            None => (None, key),
        };
        let target = match section {
            Some(section) => table
                .entry(section)
                .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                .as_table_mut()
                .ok_or_else(|| ConfigError::plain(format!("[{section}] is not a table")))?,
            None => &mut table,
        };
        target.insert(field.to_owned(), value.clone());
        let updated: Experiment =
            toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| ConfigError {
                    location: None,
                    set_option: None,
                    message: format!("{key} = {value}: {}", e.message().trim()),
                    hint: None,
                })?;
        *self = Experiment { sweep, ..updated };
        Ok(())
    }

    /// Every cell of the sweep grid: the settings that make it (key and
    /// value, in axis order) and the experiment it is. The first axis
    /// varies slowest. Without a `[sweep]`, the experiment itself.
    pub fn cells(&self) -> Result<Vec<Cell>, ConfigError> {
        // Counted before a single cell is made.
        self.sweep.check_size()?;
        let mut cells = vec![(
            Vec::new(),
            Experiment {
                sweep: Sweep::default(),
                ..self.clone()
            },
        )];
        for (key, values) in &self.sweep.axes {
            let mut next = Vec::with_capacity(cells.len() * values.len());
            for (settings, exp) in &cells {
                for value in values {
                    let mut exp = exp.clone();
                    exp.set_value(key, value.clone()).map_err(|mut e| {
                        e.message = format!("sweep \"{key}\": {}", e.message);
                        e
                    })?;
                    let mut settings = settings.clone();
                    settings.push((key.clone(), value.clone()));
                    next.push((settings, exp));
                }
            }
            cells = next;
        }
        for (settings, exp) in &cells {
            exp.validate().map_err(|mut e| {
                let cell: Vec<String> =
                    settings.iter().map(|(k, v)| format!("{k} = {v}")).collect();
                e.message = format!("sweep cell {}: {}", cell.join(", "), e.message);
                e
            })?;
        }
        let swept = |key: &str| self.sweep.axes.iter().any(|(k, _)| k == key);
        if self.run.looks() > 1 && (swept("run.repeats") || swept("run.max_repeats")) {
            return Err(ConfigError::plain(
                "run.max_repeats: the sweep looks at all its cells' differences together, after the same rounds, so run.repeats and run.max_repeats cannot be swept with it",
            ));
        }
        let rows: u64 = cells.iter().map(|(_, exp)| exp.result_rows()).sum();
        if cells.len() > 1 && rows > MAX_RESULT_ROWS {
            return Err(ConfigError::plain(format!(
                "the sweep's {} cells make {rows} per-thread rows (threads x runs, summed), more than {MAX_RESULT_ROWS}, the most one result holds; sweep fewer cells or lower run.repeats",
                cells.len()
            )));
        }
        Ok(cells)
    }
}

/// Reads an override's value: TOML when it parses as a TOML value, else
/// the text itself.
pub fn parse_value(text: &str) -> toml::Value {
    #[derive(Deserialize)]
    struct Probe {
        v: toml::Value,
    }
    toml::from_str::<Probe>(&format!("v = {text}"))
        .map(|p| p.v)
        .unwrap_or_else(|_| toml::Value::String(text.to_owned()))
}

/// The location of the key a validation message starts with
/// (`access.op_size: ...` or `threads.count = 9000 is ...`), found in the
/// file.
fn key_location(file: &str, text: &str, message: &str) -> Option<Location> {
    let key = message.split([':', ' ']).next()?;
    let (section, field) = key.split_once('.')?;
    let header = format!("[{section}]");
    let mut in_section = false;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            in_section = trimmed.starts_with(&header);
        } else if in_section
            && trimmed
                .strip_prefix(field)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        {
            let start = offset + (line.len() - trimmed.len());
            return Some(locate(file, text, start..start + field.len()));
        }
        offset += line.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Experiment, ConfigError> {
        Experiment::from_toml_str(text, "exp.toml")
    }

    #[test]
    fn design_example_parses() {
        let exp = parse(include_str!("../../../../examples/deck-exp1-cell.toml")).unwrap();
        assert_eq!(exp.name, "deck-exp1-cell");
        assert_eq!(exp.threads.count, 12);
        assert_eq!(exp.memory.size, ByteSize(150 << 20));
        assert_eq!(exp.memory.sharing, Sharing::PerNode);
        assert_eq!(exp.memory.huge_pages, numalab::HugePages::Transparent);
        assert_eq!(exp.access.op_size, ByteSize(128));
        assert_eq!(
            exp.access.mix(),
            Mix {
                reads: 2,
                writes: 1
            }
        );
        assert_eq!(exp.access.total_ops(), Some(100_000_000));
        assert_eq!(exp.run.repeats, 5);
        let keys: Vec<&str> = exp.sweep.axes.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["threads.count", "memory.policy"], "file order kept");
        assert_eq!(exp.sweep.cells(), 18);
    }

    #[test]
    fn defaults_fill_everything_but_the_name() {
        let exp = parse("").unwrap();
        assert_eq!(exp.name, "experiment");
        assert_eq!(exp.threads, Threads::default());
        assert_eq!(exp.memory, Memory::default());
        assert_eq!(exp.access, Access::default());
        assert_eq!(exp.run, RunSettings::default());
        assert_eq!(exp.access.total_ops(), Some(DEFAULT_OPS));
    }

    #[test]
    fn unknown_key_names_line_column_and_nearest() {
        let err = parse("name = \"x\"\n\n[memory]\nsise = \"1GiB\"\n").unwrap_err();
        let loc = err.location.clone().unwrap();
        assert_eq!(
            (loc.file.as_str(), loc.line, loc.column),
            ("exp.toml", 4, 1)
        );
        assert_eq!(err.message, "unknown key `sise` in [memory]");
        assert_eq!(err.hint.as_deref(), Some("did you mean `size`?"));
        let text = err.to_string();
        assert!(
            text.starts_with("exp.toml:4:1: unknown key `sise` in [memory]; did you mean `size`?"),
            "{text}"
        );
        assert!(text.contains("4 | sise = \"1GiB\"\n  | ^^^^"), "{text}");
    }

    #[test]
    fn key_in_the_wrong_section_says_where_it_belongs() {
        let err = parse("[memory]\nop_size = 64\n").unwrap_err();
        assert_eq!(err.hint.as_deref(), Some("`op_size` belongs in [access]"));
        let err = parse("[acess]\nop_size = 64\n").unwrap_err();
        assert_eq!(err.message, "unknown key `acess` at the top level");
        assert_eq!(err.hint.as_deref(), Some("did you mean `access`?"));
    }

    #[test]
    fn wrong_types_and_values_are_located() {
        let err = parse("[threads]\ncount = \"twelve\"\n").unwrap_err();
        assert_eq!(err.location.as_ref().unwrap().line, 2);
        assert!(err.message.contains("expected u32"), "{}", err.message);

        let err = parse("[memory]\npolicy = \"near\"\n").unwrap_err();
        let loc = err.location.as_ref().unwrap();
        assert_eq!((loc.line, loc.column), (2, 10));
        assert!(
            err.message.contains("unknown memory policy \"near\""),
            "{}",
            err.message
        );

        let err = parse("[memory]\nsize = \"12 parsecs\"\n").unwrap_err();
        assert!(err.message.contains("invalid size"), "{}", err.message);

        let exp = parse("[memory]\npolicy = \"replicate\"\nreplication = \"log\"\n").unwrap();
        assert_eq!(exp.memory.policy, PolicySpec::Replicate(None));
        assert_eq!(exp.memory.replication, Replication::Log);
        let err = parse("[memory]\nreplication = \"gossip\"\n").unwrap_err();
        assert_eq!(err.location.as_ref().unwrap().line, 2);
        assert!(
            err.message.contains("copies") && err.message.contains("log"),
            "{}",
            err.message
        );
    }

    #[test]
    fn impossible_values_are_refused() {
        let err = parse("[access]\nop_size = 100\n").unwrap_err();
        assert!(
            err.message.starts_with("access.op_size: 100 bytes"),
            "{err}"
        );
        assert_eq!(err.location.as_ref().map(|l| l.line), Some(2), "{err}");
        let err = parse("[access]\nops = 10\nduration = \"1s\"\n").unwrap_err();
        assert!(err.message.contains("not both"), "{err}");
        let err = parse("[access]\npattern = \"copy\"\nread_write = \"2:1\"\n").unwrap_err();
        assert!(err.message.contains("1:1"), "{err}");
        assert!(parse("[threads]\ncount = 0\n").is_err());
        assert!(parse("[run]\nrepeats = 0\n").is_err());
        assert!(parse("[memory]\nsize = \"1KiB\"\n[access]\nop_size = \"4KiB\"\n").is_err());
    }

    #[test]
    fn overrides_are_type_checked() {
        let exp = parse("[threads]\ncount = 2\n").unwrap();
        let set = |sets: &[&str]| {
            exp.with_overrides(&sets.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        let over = set(&[
            "threads.count=8",
            "access.op_size=128",
            "memory.policy=interleave:0",
        ])
        .unwrap();
        assert_eq!(over.threads.count, 8);
        assert_eq!(over.access.op_size, ByteSize(128));
        assert_eq!(
            over.memory.policy,
            PolicySpec::Kernel("interleave:0".into())
        );
        let over = set(&["memory.size=1GiB", "access.ops=1_000", "run.counters=false"]).unwrap();
        assert_eq!(over.memory.size, ByteSize(1 << 30));
        assert_eq!(over.access.ops, Some(1000));
        assert!(!over.run.counters);

        let err = set(&["threads.cont=8"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--set threads.cont=8: unknown key `threads.cont`; did you mean `threads.count`?"
        );
        let err = set(&["threads.count=eight"]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("--set threads.count=eight: threads.count = \"eight\": invalid type"),
            "{err}"
        );
        let err = set(&["threads.count"]).unwrap_err();
        assert!(err.to_string().contains("KEY=VALUE"), "{err}");
        let err = set(&["access.op_size=12"]).unwrap_err();
        assert!(err.to_string().contains("8-byte words"), "{err}");
    }

    #[test]
    fn sweep_cells_cover_the_grid_in_order() {
        let exp = parse(
            "[sweep]\n\"threads.count\" = [1, 2]\n\"memory.policy\" = [\"local\", \"remote\", \"interleave\"]\n",
        )
        .unwrap();
        let cells = exp.cells().unwrap();
        assert_eq!(cells.len(), 6);
        let names: Vec<(u32, String)> = cells
            .iter()
            .map(|(_, e)| (e.threads.count, e.memory.policy.to_string()))
            .collect();
        assert_eq!(names[0], (1, "local".into()));
        assert_eq!(names[2], (1, "interleave".into()));
        assert_eq!(names[3], (2, "local".into()));
        assert!(cells.iter().all(|(_, e)| e.sweep.is_empty()));
        // A key set on the command line is no longer swept.
        let fixed = exp.with_overrides(&["threads.count=4".into()]).unwrap();
        assert_eq!(fixed.cells().unwrap().len(), 3);
    }

    #[test]
    fn sweep_errors_point_at_the_axis() {
        let err = parse("[sweep]\n\"threads.cuont\" = [1, 2]\n").unwrap_err();
        assert_eq!(err.location.as_ref().unwrap().line, 2);
        assert_eq!(err.hint.as_deref(), Some("did you mean \"threads.count\"?"));
        let err = parse("\n[sweep]\n\"memory.policy\" = [\"local\", \"nowhere\"]\n").unwrap_err();
        assert_eq!(err.location.as_ref().unwrap().line, 3);
        assert!(err.message.contains("\"nowhere\""), "{err}");
        let err = parse("[sweep]\n\"threads.count\" = 4\n").unwrap_err();
        assert!(err.message.contains("must be a list"), "{err}");
        assert!(parse("[sweep]\n\"threads.count\" = []\n").is_err());
    }

    #[test]
    fn more_repeats_while_undecided_cannot_be_swept_with_the_repeats() {
        let exp =
            parse("[run]\nrepeats = 5\nmax_repeats = 20\n[sweep]\n\"run.repeats\" = [5, 10]\n")
                .unwrap();
        let err = exp.cells().unwrap_err();
        assert!(
            err.message
                .contains("run.repeats and run.max_repeats cannot be swept with it"),
            "{err}"
        );
        // One look (no max_repeats): the repeats may be swept.
        let exp = parse("[run]\nrepeats = 5\n[sweep]\n\"run.repeats\" = [5, 10]\n").unwrap();
        assert_eq!(exp.cells().unwrap().len(), 2);
    }

    #[test]
    fn counts_past_their_limits_are_refused_naming_key_value_and_limit() {
        for (text, message) in [
            (
                "[threads]\ncount = 2147483648\n",
                "threads.count = 2147483648 is more than 4096, the most threads numalab starts",
            ),
            (
                "[threads]\ncount = 100000\noversubscribe = true\n",
                "threads.count = 100000 is more than 4096",
            ),
            (
                "[run]\nrepeats = 4294967295\n",
                "run.repeats = 4294967295 is more than 1000, the most repeats numalab runs",
            ),
            (
                "[run]\nwarmup = 4294967295\n",
                "run.warmup = 4294967295 is more than 100",
            ),
            (
                "[run]\nmax_repeats = 4294967295\n",
                "run.max_repeats = 4294967295 is more than 1000, the most repeats numalab runs",
            ),
            (
                "[run]\nrepeats = 5\nmax_repeats = 3\n",
                "run.max_repeats: 3 is fewer than run.repeats (5)",
            ),
            (
                "[run]\nrepeats = 5\nmax_repeats = 12\n",
                "run.max_repeats: 12 is not a multiple of run.repeats (5): the sweep looks at its differences after every 5 rounds, so it may stop at 5, 10, 15",
            ),
            (
                "[run]\nrepeats = 2\nmax_repeats = 42\n",
                "run.max_repeats: 42 is 21 times run.repeats (2), more than 20 looks",
            ),
            (
                "[run]\nrepeats = 5\nmax_repeats = 10\norder = \"grouped\"\n",
                "run.max_repeats: more repeats when the differences are not yet told apart needs run.order = \"interleaved\"",
            ),
            (
                "[threads]\ncount = 100\n[run]\nrepeats = 10\nmax_repeats = 1000\n",
                "threads.count: 100 threads x (1 warm-up + 1000 repeats) make 100100 per-thread rows",
            ),
            (
                "[access]\nops = 100000000000000\n",
                "access.ops = 100000000000000 is more than 1000000000000, the most operations",
            ),
            (
                "[access]\nlock_stripes = 4294967295\n",
                "access.lock_stripes = 4294967295 is more than 65536",
            ),
            (
                "[threads]\ncount = 4096\noversubscribe = true\n[run]\nrepeats = 1000\n",
                "threads.count: 4096 threads x (1 warm-up + 1000 repeats) make 4100096 per-thread rows, more than 100000",
            ),
            (
                "[memory]\nsize = \"1TiB\"\n[access]\nops = 1000000000000\nop_size = \"4MiB\"\n",
                "access.ops: 1000000000000 operations of 4MiB move",
            ),
            (
                "[memory]\nsize = \"1MiB\"\n[access]\npattern = \"strided:16000000T\"\n",
                "access.pattern: strided:17592186044416000000 steps further than a region (1MiB)",
            ),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.message.starts_with(message), "{text}: {err}");
            let key = message.split([':', ' ']).next().unwrap();
            let line = err.location.as_ref().map(|l| l.text.clone()).unwrap_or_default();
            let field = key.rsplit('.').next().unwrap();
            assert!(line.starts_with(field), "{text}: pinned on {line:?}");
        }
        // The same through --set, before anything else happens.
        let exp = parse("[threads]\ncount = 2\n").unwrap();
        let err = exp
            .with_overrides(&["run.repeats=4294967295".into()])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "--set run.repeats=4294967295: run.repeats = 4294967295 is more than 1000, the most repeats numalab runs"
        );
        // At the limits, accepted.
        parse("[threads]\ncount = 4096\n[run]\nrepeats = 20\nwarmup = 1\n").unwrap();
        parse("[run]\nrepeats = 1000\nwarmup = 100\n[access]\nops = 1000000000000\nlock_stripes = 65536\n").unwrap();
    }

    #[test]
    fn durations_past_a_day_are_refused_without_a_panic() {
        for text in ["99999999999999999999s", "1e20s", "25h", "86401s"] {
            let err = parse(&format!("[access]\nduration = \"{text}\"\n")).unwrap_err();
            assert_eq!(err.location.as_ref().unwrap().line, 2, "{text}: {err}");
            assert!(!err.message.is_empty());
        }
        let err = parse("[access]\nduration = \"99999999999999999999s\"\n").unwrap_err();
        assert!(
            err.message
                .contains("longer than 24h, the longest numalab runs"),
            "{err}"
        );
        let exp = parse("[access]\nduration = \"24h\"\n").unwrap();
        assert_eq!(
            exp.access.duration.unwrap().0,
            super::super::values::MAX_DURATION
        );
        let err = exp
            .with_overrides(&["access.duration=1e300s".into()])
            .unwrap_err();
        assert!(err.to_string().contains("access.duration"), "{err}");
    }

    #[test]
    fn a_sweep_grid_is_counted_before_any_cell_is_made() {
        // 4000 x 2000 cells used to be made (and cloned) before a check.
        let seeds: Vec<String> = (0..4000).map(|i| i.to_string()).collect();
        let ops: Vec<String> = (1..=2000).map(|i| i.to_string()).collect();
        let text = format!(
            "[sweep]\n\"access.seed\" = [{}]\n\"access.ops\" = [{}]\n",
            seeds.join(", "),
            ops.join(", ")
        );
        let err = parse(&text).unwrap_err();
        assert_eq!(
            err.message,
            "[sweep] has 4000 x 2000 = 8000000 cells, more than 10000, the most a sweep runs"
        );
        assert_eq!(err.location.as_ref().unwrap().line, 2);
        // A grid built by hand is counted by cells() too.
        let mut exp = parse("").unwrap();
        exp.sweep.axes = vec![
            (
                "access.seed".into(),
                (0..4000).map(toml::Value::Integer).collect(),
            ),
            (
                "access.ops".into(),
                (1..=2000).map(toml::Value::Integer).collect(),
            ),
        ];
        assert!(exp.cells().unwrap_err().message.contains("8000000 cells"));
        // And the rows the cells' results would hold, summed.
        let exp = parse(
            "[threads]\ncount = 4000\noversubscribe = true\n[run]\nrepeats = 20\n[sweep]\n\"access.seed\" = [1, 2]\n",
        )
        .unwrap();
        let err = exp.cells().unwrap_err();
        assert!(err.message.contains("168000 per-thread rows"), "{err}");
    }

    #[test]
    fn sweep_errors_are_pinned_on_the_key_that_is_wrong() {
        // A comment naming the key came first: the error pointed at it.
        let err = parse(
            "# sweeps \"threads.count\"\n[sweep]\n\"memory.policy\" = [\"local\"]\n\"threads.count\" = [1, \"two\"]\n",
        )
        .unwrap_err();
        let at = err.location.as_ref().unwrap();
        assert_eq!((at.line, at.column), (4, 1), "{err}");
        // A value that is not a list: on its key, not on [sweep].
        let err =
            parse("[sweep]\n\"threads.count\" = [1]\n\"memory.policy\" = \"local\"\n").unwrap_err();
        assert_eq!(err.location.as_ref().unwrap().line, 3, "{err}");
        assert_eq!(
            err.message,
            "sweep \"memory.policy\" must be a list of values, as in \"memory.policy\" = [\"local\"]"
        );
        // A dotted key without quotes is a table `memory` to TOML.
        let err =
            parse("[sweep]\n\"threads.count\" = [1]\nmemory.policy = [\"local\"]\n").unwrap_err();
        assert_eq!(err.location.as_ref().unwrap().line, 3, "{err}");
        assert!(
            err.message
                .starts_with("sweep key memory.policy is not quoted"),
            "{err}"
        );
        assert!(err.message.contains("\"memory.policy\" = [...]"), "{err}");
        // A value out of its key's range, on that key's line.
        let err = parse("[sweep]\n\"memory.policy\" = [\"local\"]\n\"threads.count\" = [1, 0]\n")
            .unwrap_err();
        assert_eq!(err.location.as_ref().unwrap().line, 3, "{err}");
        assert_eq!(
            err.message,
            "sweep \"threads.count\" value 0: threads.count: must be at least 1"
        );
        // The axes keep the file's order, whatever a comment says first.
        let exp = parse(
            "# \"memory.policy\" then \"threads.count\"\n[sweep]\n\"threads.count\" = [1]\n\"memory.policy\" = [\"local\"]\n",
        )
        .unwrap();
        let keys: Vec<&str> = exp.sweep.axes.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["threads.count", "memory.policy"]);
    }

    #[test]
    fn an_experiment_file_that_sets_no_key_is_refused() {
        let dir = std::env::temp_dir().join(format!("numalab-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for text in ["", "# nothing yet\n\n", "[threads]\n[memory]\n"] {
            let path = dir.join("empty.toml");
            std::fs::write(&path, text).unwrap();
            let err = Experiment::from_file(&path).unwrap_err();
            assert!(
                err.message
                    .starts_with(&format!("{} sets no key", path.display())),
                "{text:?}: {err}"
            );
            assert!(err.message.contains("name = \"empty\""), "{err}");
        }
        let path = dir.join("named.toml");
        std::fs::write(&path, "name = \"defaults\"\n").unwrap();
        assert_eq!(Experiment::from_file(&path).unwrap().name, "defaults");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn docs_document_every_key() {
        let readme = include_str!("../../../../docs/experiment-file.md");
        for key in KEYS {
            assert!(
                readme.contains(&format!("| `{}` |", key.path)),
                "docs/experiment-file.md lacks {}",
                key.path
            );
        }
    }

    #[test]
    fn keys_table_matches_the_types() {
        // Every leaf of a fully written experiment is documented, and every
        // documented key can be set.
        let mut exp = Experiment::from_toml_str("", "x").unwrap();
        exp.access.read_write = Some("1:1".parse().unwrap());
        exp.access.ops = Some(1);
        exp.run.min_time = Some("50ms".parse().unwrap());
        exp.run.max_repeats = Some(10);
        let table = toml::Table::try_from(&exp).unwrap();
        let mut leaves = Vec::new();
        for (key, value) in &table {
            match value {
                toml::Value::Table(inner) => {
                    leaves.extend(inner.keys().map(|k| format!("{key}.{k}")))
                }
                _ => leaves.push(key.clone()),
            }
        }
        leaves.push("access.duration".into());
        leaves.push("description".into());
        leaves.sort();
        let mut documented: Vec<String> = settable_keys().map(str::to_owned).collect();
        documented.sort();
        assert_eq!(leaves, documented);
        for key in settable_keys() {
            let value = match key {
                "access.duration" => toml::Value::String("1s".into()),
                "run.min_time" => toml::Value::String("50ms".into()),
                _ => table
                    .get(key.split('.').next().unwrap())
                    .and_then(|t| match key.split_once('.') {
                        Some((_, f)) => t.get(f).cloned(),
                        None => Some(t.clone()),
                    })
                    .unwrap_or(toml::Value::String("x".into())),
            };
            let mut e = Experiment::from_toml_str("", "x").unwrap();
            e.set_value(key, value)
                .unwrap_or_else(|err| panic!("{key}: {err}"));
        }
    }
}
