//! What a run produces: one serde type, [`RunReport`], read by every
//! exporter (table, JSON, CSV, Markdown, plots) and by `numalab plot` from
//! a saved file. Raw figures of every repeat and thread are kept; the
//! summaries are computed from them.

use std::collections::BTreeMap;

use numalab::audit::PlacementAudit;
use numalab::system::Environment;
use numalab::MemPolicy;
use serde::{Deserialize, Serialize};

use super::config::Experiment;
use super::floor::{Lengthened, NoiseFloor};
use super::plan::Plan;
// Warnings are shared with the plan, which makes them first.
use super::values::PolicySpec;
pub use super::warning::{Cause, Warning, WarningKind};
use crate::stats::{difference, quantile, repeated_confidence, Difference, Summary};

/// `schema` of a run's JSON document.
pub const RUN_SCHEMA: &str = "numalab.run";
/// `schema` of a sweep's JSON document.
pub const SWEEP_SCHEMA: &str = "numalab.sweep";
/// Version of both schemas; bumped on incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

/// Latency percentiles of the sampled operations, in nanoseconds (the
/// clock's own cost subtracted).
///
/// Memory for timings is bounded: each thread keeps at most a fixed
/// number of them (a uniform random sample of all it timed, see
/// `access.latency_sample` in docs/experiment-file.md), so `samples` (the
/// timings the percentiles are of) may be fewer than `timed` (the
/// operations timed).
///
/// ```
/// use numalab_bench::experiment::result::Percentiles;
/// let samples: Vec<f64> = (1..=1000).map(f64::from).collect();
/// let p = Percentiles::of(&samples).unwrap();
/// assert_eq!((p.samples, p.timed, p.max), (1000, 1000, 1000.0));
/// assert!(p.p50 < p.p90 && p.p90 < p.p99 && p.p99 <= p.p999);
/// assert!(Percentiles::of(&[]).is_none());
/// // 1000 kept of 50 000 timed.
/// assert_eq!(Percentiles::sampled(&samples, 50_000).unwrap().timed, 50_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Timings kept, which the percentiles are of.
    pub samples: u64,
    /// Operations timed (0 in results written before numalab bounded
    /// the samples, when every timing was kept).
    #[serde(default)]
    pub timed: u64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Slowest kept.
    pub max: f64,
}

impl Percentiles {
    /// From every timing, in nanoseconds; `None` when there are none.
    pub fn of(samples: &[f64]) -> Option<Percentiles> {
        Self::sampled(samples, samples.len() as u64)
    }

    /// From `samples` kept of `timed` timings (a uniform sample of them).
    pub fn sampled(samples: &[f64], timed: u64) -> Option<Percentiles> {
        Some(Percentiles {
            samples: samples.len() as u64,
            timed: timed.max(samples.len() as u64),
            p50: quantile(samples, 0.5)?,
            p90: quantile(samples, 0.9)?,
            p99: quantile(samples, 0.99)?,
            p999: quantile(samples, 0.999)?,
            max: samples.iter().copied().fold(f64::MIN, f64::max),
        })
    }

    /// From several threads' samples, each `(kept, timed)`: a thread that
    /// kept one timing in ten counts each ten times, so every thread
    /// weighs by what it timed, not by what it kept.
    ///
    /// ```
    /// use numalab_bench::experiment::result::Percentiles;
    /// // A thread that kept 100 fast timings of 100, another that kept 100
    /// // slow ones of 900: nine in ten operations were slow.
    /// let fast = (vec![10.0; 100], 100);
    /// let slow = (vec![50.0; 100], 900);
    /// let p = Percentiles::merged(&[fast, slow]).unwrap();
    /// assert_eq!((p.samples, p.timed), (200, 1000));
    /// assert_eq!((p.p50, p.p90), (50.0, 50.0));
    /// ```
    pub fn merged(parts: &[(Vec<f64>, u64)]) -> Option<Percentiles> {
        let timed: u64 = parts
            .iter()
            .map(|(kept, seen)| (*seen).max(kept.len() as u64))
            .sum();
        if parts.iter().all(|(kept, seen)| kept.len() as u64 >= *seen) {
            // Every timing kept: the plain percentiles.
            let all: Vec<f64> = parts
                .iter()
                .flat_map(|(kept, _)| kept.iter().copied())
                .collect();
            return Self::sampled(&all, timed);
        }
        let mut weighted: Vec<(f64, f64)> = parts
            .iter()
            .filter(|(kept, _)| !kept.is_empty())
            .flat_map(|(kept, seen)| {
                let weight = *seen as f64 / kept.len() as f64;
                kept.iter().map(move |&ns| (ns, weight))
            })
            .collect();
        if weighted.is_empty() {
            return None;
        }
        weighted.sort_by(|a, b| a.0.total_cmp(&b.0));
        let total: f64 = weighted.iter().map(|(_, w)| w).sum();
        let at = |q: f64| {
            let target = q * total;
            let mut sum = 0.0;
            for &(ns, w) in &weighted {
                sum += w;
                if sum >= target {
                    return ns;
                }
            }
            weighted[weighted.len() - 1].0
        };
        Some(Percentiles {
            samples: weighted.len() as u64,
            timed,
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            p999: at(0.999),
            max: weighted[weighted.len() - 1].0,
        })
    }
}

/// One thread in one repeat: the raw figures.
///
/// ```
/// # use numalab::Topology;
/// # use numalab_bench::control::Control;
/// # use numalab_bench::experiment::{run, Experiment};
/// # let exp = Experiment::from_toml_str(
/// #     "[memory]\nsize = \"1MiB\"\n[access]\nread_write = \"2:1\"\nops = 30_000\n[run]\nrepeats = 2\nwarmup = 0\ncounters = false",
/// #     "x")?;
/// // One thread, 1 MiB, 30 000 operations at 2:1, two repeats.
/// let result = run(&exp, &Topology::system()?, &Control::default())?;
/// let thread = &result.repeats[0].threads[0];
/// assert_eq!((thread.reads, thread.writes), (20_000, 10_000));
/// assert_eq!(thread.bytes, thread.ops * 64, "64-byte operations by default");
/// assert_eq!(thread.cpu, result.plan.threads[0].cpu, "pinned where planned");
/// assert!(thread.read_latency_ns.is_some_and(|p| p.samples > 0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadRun {
    /// Thread number.
    pub thread: usize,
    /// CPU it was pinned to.
    pub cpu: u32,
    /// Node it was on when it finished (the kernel's answer).
    pub node: u32,
    /// Operations done (reads + writes).
    pub ops: u64,
    /// Reads done.
    pub reads: u64,
    /// Writes done.
    pub writes: u64,
    /// Bytes read and written: operations × op size.
    pub bytes: u64,
    /// From the common start until it finished, in seconds.
    pub busy_s: f64,
    /// Its sampled read latencies.
    pub read_latency_ns: Option<Percentiles>,
    /// Its sampled write latencies.
    pub write_latency_ns: Option<Percentiles>,
    /// Performance counters over its work (name → count).
    pub counters: BTreeMap<String, u64>,
}

/// One run (a repeat or a warm-up).
///
/// ```
/// # use numalab::Topology;
/// # use numalab_bench::control::Control;
/// # use numalab_bench::experiment::{run, Experiment};
/// # let exp = Experiment::from_toml_str(
/// #     "[memory]\nsize = \"1MiB\"\n[access]\nread_write = \"2:1\"\nops = 30_000\n[run]\nrepeats = 2\nwarmup = 0\ncounters = false",
/// #     "x")?;
/// // One thread, 1 MiB, 30 000 operations at 2:1, two repeats.
/// let result = run(&exp, &Topology::system()?, &Control::default())?;
/// assert_eq!(result.repeats.len(), 2);
/// let first = &result.repeats[0];
/// assert_eq!((first.index, first.ops), (0, 30_000));
/// assert!(!first.interrupted);
/// let gb_per_s = first.bytes as f64 / first.time_to_last_s / 1e9;
/// assert!((first.gb_per_s - gb_per_s).abs() <= 1e-9 * gb_per_s);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Repeat {
    /// Number, from 0, among the repeats (or among the warm-ups).
    pub index: usize,
    /// Whether Ctrl-C stopped it before the end.
    pub interrupted: bool,
    /// From the common start until the last thread finished, in seconds
    /// (the deck's figure of merit).
    pub time_to_last_s: f64,
    /// Operations of all threads.
    pub ops: u64,
    /// Reads of all threads.
    pub reads: u64,
    /// Writes of all threads.
    pub writes: u64,
    /// Bytes of all threads.
    pub bytes: u64,
    /// bytes / time to last thread, in GB/s (10⁹ bytes per second).
    pub gb_per_s: f64,
    /// ops / time to last thread, in millions per second.
    pub mops_per_s: f64,
    /// Sampled read latencies of all threads together.
    pub read_latency_ns: Option<Percentiles>,
    /// Sampled write latencies of all threads together.
    pub write_latency_ns: Option<Percentiles>,
    /// Counters summed over the threads.
    pub counters: BTreeMap<String, u64>,
    /// Each thread.
    pub threads: Vec<ThreadRun>,
}

/// The figures of a run over its repeats: median, min, max, CV.
///
/// ```
/// # use numalab::Topology;
/// # use numalab_bench::control::Control;
/// # use numalab_bench::experiment::{run, Experiment};
/// # let exp = Experiment::from_toml_str(
/// #     "[memory]\nsize = \"1MiB\"\n[access]\nread_write = \"2:1\"\nops = 30_000\n[run]\nrepeats = 2\nwarmup = 0\ncounters = false",
/// #     "x")?;
/// // One thread, 1 MiB, 30 000 operations at 2:1, two repeats.
/// let result = run(&exp, &Topology::system()?, &Control::default())?;
/// let figures = result.figures.as_ref().unwrap();
/// let time = &figures.time_to_last_s;
/// assert_eq!(time.n, 2, "one sample per repeat");
/// assert!(time.min <= time.median && time.median <= time.max);
/// assert_eq!(result.time_to_last(), Some(time.median));
/// assert!(figures.write_p50_ns.is_some(), "writes are sampled too");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// Time to the last thread, seconds.
    pub time_to_last_s: Summary,
    /// GB/s.
    pub gb_per_s: Summary,
    /// Millions of operations per second.
    pub mops_per_s: Summary,
    /// Median read latency, ns.
    pub read_p50_ns: Option<Summary>,
    /// 99th-percentile read latency, ns.
    pub read_p99_ns: Option<Summary>,
    /// Median write latency, ns.
    pub write_p50_ns: Option<Summary>,
    /// 99th-percentile write latency, ns.
    pub write_p99_ns: Option<Summary>,
    /// Each counter (summed over threads) over the repeats.
    pub counters: BTreeMap<String, Summary>,
}

/// One thread over the repeats.
///
/// ```
/// # use numalab::Topology;
/// # use numalab_bench::control::Control;
/// # use numalab_bench::experiment::{run, Experiment};
/// # let exp = Experiment::from_toml_str(
/// #     "[memory]\nsize = \"1MiB\"\n[access]\nread_write = \"2:1\"\nops = 30_000\n[run]\nrepeats = 2\nwarmup = 0\ncounters = false",
/// #     "x")?;
/// // One thread, 1 MiB, 30 000 operations at 2:1, two repeats.
/// let result = run(&exp, &Topology::system()?, &Control::default())?;
/// let thread = &result.threads[0];
/// assert_eq!((thread.thread, thread.region), (0, 0));
/// assert_eq!(thread.ops, 30_000.0);
/// assert_eq!(thread.busy_s.n, 2);
/// assert!(thread.mops_per_s > 0.0 && thread.gb_per_s > 0.0);
/// // Where its region's pages were found, e.g. "0".
/// assert!(!thread.memory_nodes.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadFigures {
    /// Thread number.
    pub thread: usize,
    /// CPU.
    pub cpu: u32,
    /// Node it ran on (the kernel's answer, in the last repeat).
    pub node: u32,
    /// The region it used.
    pub region: usize,
    /// The node or nodes holding that region's pages.
    pub memory_nodes: String,
    /// Operations per repeat (median).
    pub ops: f64,
    /// Busy time over the repeats, seconds.
    pub busy_s: Summary,
    /// Its operations per second, millions (median over repeats).
    pub mops_per_s: f64,
    /// Its GB/s (median over repeats).
    pub gb_per_s: f64,
    /// Median of its per-repeat median read latency, ns.
    pub read_p50_ns: Option<f64>,
    /// Median of its per-repeat 99th-percentile read latency, ns.
    pub read_p99_ns: Option<f64>,
}

/// The placement check of one region.
///
/// ```
/// # use numalab::Topology;
/// # use numalab_bench::control::Control;
/// # use numalab_bench::experiment::{run, Experiment};
/// # let exp = Experiment::from_toml_str(
/// #     "[memory]\nsize = \"1MiB\"\n[access]\nread_write = \"2:1\"\nops = 30_000\n[run]\nrepeats = 2\nwarmup = 0\ncounters = false",
/// #     "x")?;
/// // One thread, 1 MiB, 30 000 operations at 2:1, two repeats.
/// let result = run(&exp, &Topology::system()?, &Control::default())?;
/// let check = &result.regions[0];
/// assert_eq!(check.requested.to_string(), "local");
/// assert_eq!(check.audit.found.present(), (1 << 20) / 4096, "every page prefaulted");
/// assert!(check.as_requested, "{}", check.note);
/// assert!(check.replicas.is_empty(), "not replicated");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegionCheck {
    /// Region number.
    pub region: usize,
    /// Bytes.
    pub bytes: u64,
    /// The policy asked for (`remote`; written as that text).
    pub requested: PolicySpec,
    /// The kernel policy used (written in numactl's spelling).
    pub policy: MemPolicy,
    /// Nodes of the threads that use it.
    pub thread_nodes: numalab::NodeSet,
    /// Pages found against the kernel policy.
    pub audit: PlacementAudit,
    /// Whether the pages are what was *asked* for: the audit matches, and
    /// `local` pages are on their threads' node, `remote` pages on another,
    /// every copy of a replicated region on its own node.
    pub as_requested: bool,
    /// One line for tables.
    pub note: String,
    /// With `replicate`: each copy's check, in copy order (the region's
    /// `audit` is then of all copies' pages together).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<ReplicaCheck>,
    /// With `memory.huge_pages` asked for: bytes of the region the kernel
    /// backs with huge pages (`AnonHugePages` in `/proc/self/smaps`; all
    /// of it for explicit 2 MiB pages), read after the first touch.
    /// `None` without huge pages, for replicated regions (each copy is
    /// audited for its node only), or when the kernel does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub huge_page_bytes: Option<u64>,
}

/// The placement check of one copy of a replicated region.
///
/// ```
/// # use numalab::Topology;
/// # use numalab_bench::control::Control;
/// # use numalab_bench::experiment::{run, Experiment};
/// let exp = Experiment::from_toml_str(r#"
///     [memory]
///     size = "2MiB"
///     policy = "replicate"
///     sharing = "shared"
///     [access]
///     ops = 10_000
///     [run]
///     repeats = 1
///     warmup = 0
///     counters = false
/// "#, "x")?;
/// let result = run(&exp, &Topology::system()?, &Control::default())?;
/// // One copy per node with CPUs and memory: one on a one-node machine.
/// for (copy, &node) in result.regions[0].replicas.iter().zip(&result.plan.regions[0].replicas) {
///     assert_eq!(copy.node, node);
///     assert_eq!(copy.audit.found.on_node(node), 512, "its 2 MiB on its node");
///     assert!(copy.as_requested, "{}", copy.note);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicaCheck {
    /// Copy number, from 0 (ascending node ids).
    pub replica: usize,
    /// The node it is bound to.
    pub node: u32,
    /// Nodes of the threads that read it.
    pub thread_nodes: numalab::NodeSet,
    /// Its pages against `bind` to its node.
    pub audit: PlacementAudit,
    /// Whether every page is on its node.
    pub as_requested: bool,
    /// One line for tables.
    pub note: String,
}

/// The engine's own cost, measured so it can be seen to be negligible.
///
/// ```
/// # use numalab::Topology;
/// # use numalab_bench::control::Control;
/// # use numalab_bench::experiment::{run, Experiment};
/// # let exp = Experiment::from_toml_str(
/// #     "[memory]\nsize = \"1MiB\"\n[access]\nread_write = \"2:1\"\nops = 30_000\n[run]\nrepeats = 2\nwarmup = 0\ncounters = false",
/// #     "x")?;
/// // One thread, 1 MiB, 30 000 operations at 2:1, two repeats.
/// let result = run(&exp, &Topology::system()?, &Control::default())?;
/// let engine = &result.engine;
/// assert_eq!(engine.sample_every, 1024, "access.latency_sample's default");
/// assert!(["tsc", "instant"].contains(&engine.clock.as_str()));
/// assert!(engine.clock_overhead_ns >= 0.0);
/// assert!(engine.share.is_none_or(|share| (0.0..=1.0).contains(&share)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineCost {
    /// The clock used to time sampled operations (`tsc` or `instant`).
    pub clock: String,
    /// Cost of reading it twice back to back, ns (subtracted from each
    /// sample).
    pub clock_overhead_ns: f64,
    /// One operation in this many is timed (0: none).
    pub sample_every: u32,
    /// The access loop's time per operation on a buffer that fits in the
    /// L1 cache, ns: its cost without memory stalls (`None` when the
    /// operations are too large to measure that way).
    pub loop_ns_per_op: Option<f64>,
    /// That cost over the measured time per operation per thread: an
    /// upper bound of the engine's share of the figures.
    pub share: Option<f64>,
}

/// Which performance counters were read.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::control::Control;
/// use numalab_bench::experiment::{run, Experiment};
/// let exp = Experiment::from_toml_str(
///     "[memory]\nsize = \"1MiB\"\n[access]\nops = 10_000\n[run]\nrepeats = 1\nwarmup = 0", "x")?;
/// let result = run(&exp, &Topology::system()?, &Control::default())?;
/// let info = &result.counters;
/// // What could be read, and a note on anything that could not (e.g. in a VM).
/// assert!(!info.events.is_empty() || info.note.is_some());
/// let counted = &result.repeats[0].counters;
/// assert!(counted.keys().all(|name| info.events.contains(name)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CounterInfo {
    /// Counter names read.
    pub events: Vec<String>,
    /// Why some were not (one line), e.g. no hardware PMU.
    pub note: Option<String>,
}

/// Everything one experiment run produced (`numalab run --json`).
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::control::Control;
/// use numalab_bench::experiment::{run, Experiment, RunReport};
/// let exp = Experiment::from_toml_str(
///     "[memory]\nsize = \"1MiB\"\n[access]\nops = 10_000\n[run]\nrepeats = 2\ncounters = false",
///     "x")?;
/// let result = run(&exp, &Topology::system()?, &Control::default())?;
/// assert_eq!((result.schema.as_str(), result.warmups.len(), result.repeats.len()), ("numalab.run", 1, 2));
/// assert!(result.time_to_last().is_some_and(|s| s > 0.0));
/// assert!(result.placement_as_requested(), "local pages on a thread's own node");
/// // Every exporter, and `numalab plot`, reads it back from JSON.
/// let back: RunReport = serde_json::from_str(&serde_json::to_string(&result)?)?;
/// assert_eq!((back.experiment, back.plan), (result.experiment, result.plan));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// `numalab.run`.
    pub schema: String,
    /// Version of the schema.
    pub schema_version: u32,
    /// The numalab version that measured it.
    pub numalab_version: String,
    /// When it was written (UTC, RFC 3339; filled in by the writer).
    pub created: String,
    /// The experiment, after `--set` overrides.
    pub experiment: Experiment,
    /// Host, kernel, CPU, topology summary, numa_balancing, THP.
    pub environment: Environment,
    /// Each thread's CPU and node, each region's policy.
    pub plan: Plan,
    /// Where each region's pages were, against the request.
    pub regions: Vec<RegionCheck>,
    /// The unmeasured warm-up runs.
    pub warmups: Vec<Repeat>,
    /// The measured runs: every raw figure.
    pub repeats: Vec<Repeat>,
    /// Median, min, max and CV of each figure over the repeats (`None`
    /// when no repeat completed).
    pub figures: Option<Figures>,
    /// Each thread over the repeats.
    pub threads: Vec<ThreadFigures>,
    /// Which counters were read.
    pub counters: CounterInfo,
    /// The engine's own cost.
    pub engine: EngineCost,
    /// What every output shows: placement mismatches, noise, no PMU.
    pub warnings: Vec<Warning>,
    /// Whether Ctrl-C stopped the run: what was measured is kept.
    pub interrupted: bool,
    /// The shortest run this machine times well, measured before the run
    /// ([`NoiseFloor`]); `None` in results of older numalab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise_floor: Option<NoiseFloor>,
    /// How the runs were lengthened to clear the noise floor, when
    /// `access.ops` was left to numalab and a run fell under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lengthened: Option<Lengthened>,
}

impl RunReport {
    /// Median time to the last thread, seconds (the deck's figure).
    pub fn time_to_last(&self) -> Option<f64> {
        self.figures.as_ref().map(|f| f.time_to_last_s.median)
    }

    /// Whether the threads and every region's pages were where they were
    /// asked to be (no region check failed, no placement warning).
    pub fn placement_as_requested(&self) -> bool {
        self.regions.iter().all(|r| r.as_requested)
            && !self
                .warnings
                .iter()
                .any(|w| w.kind == WarningKind::Placement)
    }
}

/// Summaries of the completed repeats' figures.
pub fn figures(repeats: &[Repeat]) -> Option<Figures> {
    let done: Vec<&Repeat> = repeats.iter().filter(|r| !r.interrupted).collect();
    let of =
        |f: &dyn Fn(&Repeat) -> f64| Summary::of(&done.iter().map(|r| f(r)).collect::<Vec<_>>());
    let of_opt = |f: &dyn Fn(&Repeat) -> Option<f64>| {
        let values: Vec<f64> = done.iter().filter_map(|r| f(r)).collect();
        if values.len() == done.len() {
            Summary::of(&values)
        } else {
            None
        }
    };
    let mut counters = BTreeMap::new();
    if let Some(first) = done.first() {
        for name in first.counters.keys() {
            let values: Vec<f64> = done
                .iter()
                .filter_map(|r| r.counters.get(name).map(|&c| c as f64))
                .collect();
            if let Some(summary) = Summary::of(&values) {
                counters.insert(name.clone(), summary);
            }
        }
    }
    Some(Figures {
        time_to_last_s: of(&|r| r.time_to_last_s)?,
        gb_per_s: of(&|r| r.gb_per_s)?,
        mops_per_s: of(&|r| r.mops_per_s)?,
        read_p50_ns: of_opt(&|r| r.read_latency_ns.map(|p| p.p50)),
        read_p99_ns: of_opt(&|r| r.read_latency_ns.map(|p| p.p99)),
        write_p50_ns: of_opt(&|r| r.write_latency_ns.map(|p| p.p50)),
        write_p99_ns: of_opt(&|r| r.write_latency_ns.map(|p| p.p99)),
        counters,
    })
}

fn median(values: &[f64]) -> Option<f64> {
    quantile(values, 0.5)
}

/// Each thread's figures over the completed repeats.
pub fn thread_figures(
    plan: &Plan,
    regions: &[RegionCheck],
    repeats: &[Repeat],
) -> Vec<ThreadFigures> {
    let done: Vec<&Repeat> = repeats.iter().filter(|r| !r.interrupted).collect();
    plan.threads
        .iter()
        .filter_map(|t| {
            let runs: Vec<&ThreadRun> = done
                .iter()
                .filter_map(|r| r.threads.iter().find(|x| x.thread == t.thread))
                .collect();
            let busy: Vec<f64> = runs.iter().map(|r| r.busy_s).collect();
            let per = |f: &dyn Fn(&ThreadRun) -> f64| {
                median(&runs.iter().map(|r| f(r)).collect::<Vec<_>>())
            };
            let lat = |f: &dyn Fn(&ThreadRun) -> Option<f64>| {
                median(&runs.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
            };
            Some(ThreadFigures {
                thread: t.thread,
                cpu: t.cpu,
                node: runs.last().map_or(t.node, |r| r.node),
                region: t.region,
                memory_nodes: regions
                    .get(t.region)
                    .map(|r| {
                        // A replicated region: the copy the thread read.
                        let found = match t.replica.and_then(|i| r.replicas.get(i)) {
                            Some(copy) => &copy.audit.found,
                            None => &r.audit.found,
                        };
                        let nodes = found.nodes();
                        if nodes.is_empty() {
                            "-".to_owned()
                        } else {
                            nodes.to_string()
                        }
                    })
                    .unwrap_or_default(),
                ops: per(&|r| r.ops as f64)?,
                busy_s: Summary::of(&busy)?,
                mops_per_s: per(&|r| {
                    if r.busy_s > 0.0 {
                        r.ops as f64 / r.busy_s / 1e6
                    } else {
                        0.0
                    }
                })?,
                gb_per_s: per(&|r| {
                    if r.busy_s > 0.0 {
                        r.bytes as f64 / r.busy_s / 1e9
                    } else {
                        0.0
                    }
                })?,
                read_p50_ns: lat(&|r| r.read_latency_ns.map(|p| p.p50)),
                read_p99_ns: lat(&|r| r.read_latency_ns.map(|p| p.p99)),
            })
        })
        .collect()
}

/// One cell of a sweep.
///
/// ```
/// # use numalab::Topology;
/// # use numalab_bench::control::Control;
/// # use numalab_bench::experiment::{run_sweep, Experiment};
/// # let exp = Experiment::from_toml_str(r#"
/// #     [memory]
/// #     size = "1MiB"
/// #     [access]
/// #     ops = 10_000
/// #     [run]
/// #     repeats = 1
/// #     warmup = 0
/// #     counters = false
/// #     [sweep]
/// #     "memory.policy" = ["local", "interleave"]
/// # "#, "x")?;
/// // A tiny sweep of `memory.policy` over local and interleave.
/// let sweep = run_sweep(&exp, &Topology::system()?, &Control::default())?;
/// let cell = &sweep.cells[1];
/// assert_eq!(cell.setting("memory.policy"), Some("interleave"));
/// assert!(cell.error.is_none());
/// let result = cell.result.as_ref().unwrap();
/// assert_eq!(result.experiment.memory.policy.to_string(), "interleave");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepCell {
    /// The values that make this cell, in axis order (key, value; text
    /// without TOML quotes).
    pub settings: Vec<(String, String)>,
    /// Its result (`None` when Ctrl-C stopped the sweep before it, or
    /// when it failed).
    pub result: Option<RunReport>,
    /// Why it failed while running (the sweep went on with the next cell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A second run of the `local` cell before it, as an A/A control
    /// (`run.control`, `numalab sweep --control`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub control: bool,
}

impl SweepCell {
    /// The value of `key` in this cell.
    pub fn setting(&self, key: &str) -> Option<&str> {
        self.settings
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// One line of the comparison against `local`: a policy's time to the
/// last thread beside local's in the same cell of the other axes.
///
/// ```
/// # use numalab::Topology;
/// # use numalab_bench::control::Control;
/// # use numalab_bench::experiment::{run_sweep, Experiment};
/// # let exp = Experiment::from_toml_str(r#"
/// #     [memory]
/// #     size = "1MiB"
/// #     [access]
/// #     ops = 10_000
/// #     [run]
/// #     repeats = 1
/// #     warmup = 0
/// #     counters = false
/// #     [sweep]
/// #     "memory.policy" = ["local", "interleave"]
/// # "#, "x")?;
/// // A tiny sweep of `memory.policy` over local and interleave.
/// let sweep = run_sweep(&exp, &Topology::system()?, &Control::default())?;
/// let line = &sweep.comparison[0];
/// assert_eq!(line.policy.to_string(), "interleave");
/// assert!(line.settings.is_empty(), "no other axis");
/// let percent = (line.time_s / line.local_s - 1.0) * 100.0;
/// assert!((line.vs_local_percent - percent).abs() < 1e-9);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The other axes' values (e.g. `threads.count = 8`).
    pub settings: Vec<(String, String)>,
    /// The policy (written as its text, `interleave:0,1`).
    pub policy: PolicySpec,
    /// Its median of the compared figure ([`Comparison::compared`]),
    /// seconds: to the last thread, or per million operations.
    pub time_s: f64,
    /// `local`'s, seconds.
    pub local_s: f64,
    /// What `time_s` and `local_s` are (absent from files written before
    /// fixed-duration runs were compared by their throughput).
    #[serde(default)]
    pub compared: Compared,
    /// (time / local − 1) × 100: +69 means 69% slower than local.
    pub vs_local_percent: f64,
    /// The time's difference from local's with its 95% interval and
    /// verdict, from the two cells' repeats ([`difference`], Welch's
    /// interval on the repeats' logarithms: of the geometric means, so
    /// `relative` may differ slightly from `vs_local_percent`, which is of
    /// the medians). `None` when either cell has fewer than two completed
    /// repeats: one repeat has no spread to judge by.
    #[serde(default)]
    pub difference: Option<Difference>,
    /// `local` against itself: the A/A control's line (its difference is
    /// the machine's noise).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub control: bool,
}

/// Confidence of the intervals numalab reports: of a whole table of
/// differences together (see [`compare_with_local`]).
pub const CONFIDENCE: f64 = 0.95;

/// Everything a sweep produced (`numalab sweep --json`).
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::control::Control;
/// use numalab_bench::experiment::{run_sweep, Experiment};
/// let exp = Experiment::from_toml_str(r#"
///     [memory]
///     size = "1MiB"
///     [access]
///     ops = 10_000
///     [run]
///     repeats = 1
///     warmup = 0
///     counters = false
///     [sweep]
///     "memory.policy" = ["local", "interleave"]
/// "#, "x")?;
/// let sweep = run_sweep(&exp, &Topology::system()?, &Control::default())?;
/// assert_eq!(sweep.schema, "numalab.sweep");
/// assert_eq!(sweep.axes, [("memory.policy".to_owned(), vec!["local".to_owned(), "interleave".to_owned()])]);
/// assert_eq!(sweep.cells.len(), 2);
/// assert_eq!(sweep.comparison.len(), 1, "interleave against local");
/// assert!(!sweep.interrupted);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepReport {
    /// `numalab.sweep`.
    pub schema: String,
    /// Version of the schema.
    pub schema_version: u32,
    /// The numalab version that measured it.
    pub numalab_version: String,
    /// When it was written (UTC, RFC 3339; filled in by the writer).
    pub created: String,
    /// The experiment with its `[sweep]` grid, after `--set` overrides.
    pub experiment: Experiment,
    /// Host, kernel, CPU, topology summary, numa_balancing, THP.
    pub environment: Environment,
    /// The swept keys, in file order, with their values.
    pub axes: Vec<(String, Vec<String>)>,
    /// Each cell, first axis varying slowest.
    pub cells: Vec<SweepCell>,
    /// Each policy against `local` (empty when `memory.policy` is not
    /// swept or `local` is not among its values).
    pub comparison: Vec<Comparison>,
    /// When there is no comparison against `local`: each value of the
    /// first swept axis against its first value ([`compare_with_first`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub differences: Vec<AxisDifference>,
    /// How often the sweep looked at its differences, where it could
    /// look more than once (`run.max_repeats`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub looks: Option<Looks>,
    /// Warnings of the sweep as a whole (each cell keeps its own).
    pub warnings: Vec<Warning>,
    /// Whether Ctrl-C stopped the sweep.
    pub interrupted: bool,
}

/// What a sweep's tables compare between two cells.
///
/// Runs of a fixed number of operations compare their time to the last
/// thread. Runs of a fixed duration (`access.duration`, as `numalab
/// profile --emit` writes them) all take that long by construction, so
/// their time says nothing: they compare the time per million operations
/// instead (the inverse of throughput; lower is faster in both).
///
/// ```
/// use numalab_bench::experiment::result::Compared;
/// assert_eq!(Compared::TimeToLast.what(), "time to last thread");
/// assert_eq!(Compared::TimePerMillionOps.what(), "time per million operations");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compared {
    /// Seconds from the start to the last thread's end (fixed work).
    #[default]
    TimeToLast,
    /// Seconds to the last thread's end per million operations done
    /// (fixed duration).
    TimePerMillionOps,
}

impl Compared {
    /// What the figure is, in words for a table's heading.
    pub fn what(self) -> &'static str {
        match self {
            Compared::TimeToLast => "time to last thread",
            Compared::TimePerMillionOps => "time per million operations",
        }
    }

    /// What the cells of a sweep compare: the time per million
    /// operations when any of them ran for a fixed duration.
    pub fn of_cells(cells: &[SweepCell]) -> Compared {
        let timed = cells
            .iter()
            .filter_map(|c| c.result.as_ref())
            .any(|r| r.experiment.access.duration.is_some());
        if timed {
            Compared::TimePerMillionOps
        } else {
            Compared::TimeToLast
        }
    }

    /// A completed repeat's figure; `None` for a fixed-duration repeat
    /// that did no operation.
    fn of_repeat(self, repeat: &Repeat) -> Option<f64> {
        match self {
            Compared::TimeToLast => Some(repeat.time_to_last_s),
            Compared::TimePerMillionOps => {
                (repeat.ops > 0).then(|| repeat.time_to_last_s * 1e6 / repeat.ops as f64)
            }
        }
    }

    /// The figures of a run's completed repeats.
    pub fn of_run(self, run: &RunReport) -> Vec<f64> {
        run.repeats
            .iter()
            .filter(|r| !r.interrupted)
            .filter_map(|r| self.of_repeat(r))
            .collect()
    }

    /// A cell's median figure.
    pub fn median_of(self, cell: &SweepCell) -> Option<f64> {
        match self {
            Compared::TimeToLast => cell.result.as_ref().and_then(RunReport::time_to_last),
            Compared::TimePerMillionOps => median(&self.of_run(cell.result.as_ref()?)),
        }
    }
}

/// Each policy's time against `local`'s in the same cell of the other
/// axes.
///
/// The intervals hold together with [`CONFIDENCE`]: with k differences
/// in the table each interval is at 1 − 0.05 / k (Bonferroni), so a
/// table of twelve differences between identical memories shows a
/// difference that is not there in about one sweep in twenty, not in
/// almost half of them.
///
/// A sweep that may look at its differences `looks` times
/// (`run.max_repeats`) makes each interval a repeated one
/// ([`repeated_confidence`]), so that it holds wherever the sweep stopped.
pub fn compare_with_local(cells: &[SweepCell], looks: u32) -> Vec<Comparison> {
    const POLICY: &str = "memory.policy";
    let others = |cell: &SweepCell| settings_but(cell, POLICY);
    let compared = Compared::of_cells(cells);
    let time_of = |cell: &SweepCell| compared.median_of(cell);
    let mut out = Vec::new();
    let mut samples = Vec::new();
    for cell in cells {
        let Some(policy) = cell
            .setting(POLICY)
            .and_then(|p| p.parse::<PolicySpec>().ok())
        else {
            continue;
        };
        if policy == PolicySpec::Local && !cell.control {
            continue;
        }
        let key = others(cell);
        let local = cells.iter().find(|c| {
            !c.control
                && c.setting(POLICY).and_then(|p| p.parse().ok()) == Some(PolicySpec::Local)
                && others(c) == key
        });
        if let (Some(t), Some(local_t)) = (time_of(cell), local.and_then(time_of)) {
            if local_t > 0.0 {
                samples.push(repeats_of(compared, local, cell));
                out.push(Comparison {
                    settings: key,
                    policy,
                    time_s: t,
                    local_s: local_t,
                    compared,
                    vs_local_percent: (t / local_t - 1.0) * 100.0,
                    difference: None,
                    control: cell.control,
                });
            }
        }
    }
    for (line, interval) in out.iter_mut().zip(intervals(samples, looks)) {
        line.difference = interval;
    }
    out
}

/// A cell's settings but `key`'s.
fn settings_but(cell: &SweepCell, key: &str) -> Vec<(String, String)> {
    cell.settings
        .iter()
        .filter(|(k, _)| k != key)
        .cloned()
        .collect()
}

/// The completed repeats' figures of a baseline cell and of the cell
/// compared with it, where both ran.
fn repeats_of(
    compared: Compared,
    baseline: Option<&SweepCell>,
    cell: &SweepCell,
) -> Option<(Vec<f64>, Vec<f64>)> {
    let of = |run: &RunReport| compared.of_run(run);
    let baseline = baseline.and_then(|b| b.result.as_ref()).map(of);
    baseline.zip(cell.result.as_ref().map(of))
}

/// The intervals of one table's differences, one per pair of repeats
/// (baseline, other), holding together at [`CONFIDENCE`]: each at
/// 1 − 0.05 / k for k differences (Bonferroni), made for `looks` looks
/// ([`repeated_confidence`]). `None` where a side has fewer than two
/// repeats.
fn intervals(
    samples: Vec<Option<(Vec<f64>, Vec<f64>)>>,
    looks: u32,
) -> impl Iterator<Item = Option<Difference>> {
    let each = repeated_confidence(
        looks,
        1.0 - (1.0 - CONFIDENCE) / samples.len().max(1) as f64,
    );
    samples
        .into_iter()
        .map(move |pair| pair.and_then(|(base, other)| difference(&base, &other, each)))
}

/// A sweep that runs more rounds while its differences are not all told
/// apart (`run.max_repeats`): how far it went.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::experiment::result::Stopped;
/// use numalab_bench::control::Control;
/// use numalab_bench::experiment::{run_sweep, Experiment};
/// // Identical cells (both policies are local on a one-node machine,
/// // and a sweep of one repeat a look has no interval to decide by):
/// // every look is taken.
/// let exp = Experiment::from_toml_str(r#"
///     [memory]
///     size = "1MiB"
///     [access]
///     ops = 10_000
///     [run]
///     repeats = 1
///     max_repeats = 2
///     warmup = 0
///     counters = false
///     [sweep]
///     "memory.policy" = ["local", "interleave"]
/// "#, "x")?;
/// let sweep = run_sweep(&exp, &Topology::system()?, &Control::default())?;
/// let looks = sweep.looks.expect("up to two looks");
/// assert_eq!((looks.planned, looks.every), (2, 1));
/// assert_eq!((looks.taken, looks.stopped), (2, Stopped::MostRepeats));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Looks {
    /// The most looks it could take (`run.max_repeats / run.repeats`);
    /// every interval is made for that many ([`repeated_confidence`]).
    pub planned: u32,
    /// The looks it took.
    pub taken: u32,
    /// Rounds between looks (`run.repeats`).
    pub every: u32,
    /// Why it stopped.
    pub stopped: Stopped,
}

/// Why a sweep stopped looking ([`Looks`]).
///
/// ```
/// use numalab_bench::experiment::result::Stopped;
/// assert_eq!(serde_json::to_string(&Stopped::MostRepeats)?, "\"most_repeats\"");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stopped {
    /// Every difference was told apart (or there was none to tell).
    Decided,
    /// It ran `run.max_repeats` with some still "≈".
    MostRepeats,
    /// Ctrl-C, or a cell failed.
    Interrupted,
}

/// One value of a swept axis against the axis's first value, in the same
/// cell of the other axes: the differences a sweep reports when it does
/// not compare policies with `local` (4 KiB pages against huge pages, one
/// thread against two).
///
/// ```
/// use numalab_bench::experiment::result::{compare_with_first, SweepCell};
/// let axes = vec![("memory.huge_pages".to_owned(), vec!["none".to_owned(), "thp".to_owned()])];
/// let cells: Vec<SweepCell> = vec![]; // as a sweep made them
/// assert!(compare_with_first(&axes, &cells, 1).is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AxisDifference {
    /// The axis (the sweep's first with two values or more).
    pub axis: String,
    /// Its value in this cell.
    pub value: String,
    /// Its first value, the one every other is compared with.
    pub baseline: String,
    /// The other axes' values.
    pub settings: Vec<(String, String)>,
    /// This cell's median of the compared figure, seconds (as
    /// [`Comparison::time_s`]).
    pub time_s: f64,
    /// The baseline cell's, seconds.
    pub baseline_s: f64,
    /// What `time_s` and `baseline_s` are.
    #[serde(default)]
    pub compared: Compared,
    /// (time / baseline − 1) × 100: +10 means 10% slower than the
    /// baseline.
    pub percent: f64,
    /// The time's difference from the baseline's with its interval and
    /// verdict, as [`Comparison::difference`] (Bonferroni over the
    /// table); `None` when either cell has fewer than two completed
    /// repeats.
    #[serde(default)]
    pub difference: Option<Difference>,
}

/// Each value of the sweep's first axis that has two values or more
/// against that axis's first value, in the same cell of the other axes,
/// the intervals holding together at [`CONFIDENCE`] as in
/// [`compare_with_local`]. Empty when no axis has two values. A/A control
/// cells are left out (they repeat `local`, which
/// [`compare_with_local`] compares). `looks` as there.
pub fn compare_with_first(
    axes: &[(String, Vec<String>)],
    cells: &[SweepCell],
    looks: u32,
) -> Vec<AxisDifference> {
    let Some((axis, values)) = axes.iter().find(|(_, v)| v.len() > 1) else {
        return Vec::new();
    };
    let baseline = &values[0];
    let others = |cell: &SweepCell| settings_but(cell, axis);
    let compared = Compared::of_cells(cells);
    let time_of = |cell: &SweepCell| compared.median_of(cell);
    let mut out = Vec::new();
    let mut samples = Vec::new();
    for cell in cells.iter().filter(|c| !c.control) {
        let Some(value) = cell.setting(axis) else {
            continue;
        };
        if value == baseline {
            continue;
        }
        let key = others(cell);
        let base = cells
            .iter()
            .find(|c| !c.control && c.setting(axis) == Some(baseline) && others(c) == key);
        let (Some(t), Some(base_t)) = (time_of(cell), base.and_then(time_of)) else {
            continue;
        };
        if base_t <= 0.0 {
            continue;
        }
        samples.push(repeats_of(compared, base, cell));
        out.push(AxisDifference {
            axis: axis.clone(),
            value: value.to_owned(),
            baseline: baseline.clone(),
            settings: key,
            time_s: t,
            baseline_s: base_t,
            compared,
            percent: (t / base_t - 1.0) * 100.0,
            difference: None,
        });
    }
    for (line, interval) in out.iter_mut().zip(intervals(samples, looks)) {
        line.difference = interval;
    }
    out
}

/// A sweep's two tables of differences from its cells: each policy
/// against `local` ([`compare_with_local`]) or, where that is empty, each
/// value of the first axis against its first ([`compare_with_first`]).
pub fn compare(
    axes: &[(String, Vec<String>)],
    cells: &[SweepCell],
    looks: u32,
) -> (Vec<Comparison>, Vec<AxisDifference>) {
    let against_local = compare_with_local(cells, looks);
    let against_first = if against_local.is_empty() {
        compare_with_first(axes, cells, looks)
    } else {
        Vec::new()
    };
    (against_local, against_first)
}

/// A run result carries its envelope's fields itself (`schema`,
/// `schema_version`, ...), so that each cell of a sweep is a whole run
/// document; it is written as it is, not wrapped again, and read back with
/// `serde_json::from_str` (not `Document::parse`, which strips the
/// envelope's fields).
impl crate::document::Schema for RunReport {
    const NAME: &'static str = RUN_SCHEMA;
    const VERSION: u32 = SCHEMA_VERSION;
}

/// As for [`RunReport`]: the envelope's fields are the result's own.
impl crate::document::Schema for SweepReport {
    const NAME: &'static str = SWEEP_SCHEMA;
    const VERSION: u32 = SCHEMA_VERSION;
}
