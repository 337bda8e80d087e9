//! `numalab profile`: a program's memory by node over time, from `/proc`
//! ([`numalab::profile`]), for a command numalab runs or a process already
//! running, with what the kernel's own counters say beside it and what
//! the sampling cost.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io;
use std::time::Instant;

use numalab::launch::{Exit, Launch, LaunchError, Observation};
use numalab::locate::ProcessMemory;
use numalab::profile::{watch, ProfileOptions, ProfileSample, Timeline, WrittenPages};
use numalab::units::count;
use serde::{Deserialize, Serialize};

use crate::control::Control;
use crate::document::Schema;
use crate::experiment::counters::{ProcessCounters, MEMORY};

/// What `numalab profile` saw (`--json`).
///
/// ```
/// use numalab_bench::profile::{run, ProfileReport};
/// use numalab::profile::ProfileOptions;
/// let fixed = std::time::Duration::from_millis(20);
/// let options = ProfileOptions { interval: fixed, grow_to: fixed, duration: None, writes: false,
///     max_share: numalab::profile::MAX_SHARE };
/// let report = run(&["sleep".into(), "0.2".into()], options)?;
/// assert!(report.timeline.samples.len() >= 3);
/// assert_eq!(report.exit, Some(numalab::launch::Exit::Code(0)));
/// assert!(report.overhead_share() < 0.5);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileReport {
    /// The command run, or the process watched (its name).
    pub command: Vec<String>,
    /// Its process id.
    pub pid: i32,
    /// How the command ended; `None` for a process watched (`--pid`).
    pub exit: Option<Exit>,
    /// Whether a process watched ended while it was watched.
    pub ended: bool,
    /// Seconds from the first sample to the end.
    pub elapsed_s: f64,
    /// The samples.
    pub timeline: Timeline,
    /// A command's memory as each of its processes exited (read before
    /// the kernel freed it; `None` where tracing is not permitted, and for
    /// a process watched).
    pub at_exit: Option<ProcessMemory>,
    /// `kernel.numa_balancing` (0: off), when the kernel has it.
    pub numa_balancing: Option<u32>,
    /// The machine's NUMA-balancing counters over the profile (every
    /// process's, `/proc/vmstat`): hinting faults, local ones, pages moved.
    pub machine_hint_faults: Option<HintFaults>,
    /// The hardware memory events counted over the whole run by name
    /// ([`MEMORY`]: `loads`,
    /// `stores`, `node-loads`, `node-load-misses`, ...), every thread and
    /// process the program started included; empty where the machine has
    /// no PMU (most VMs), and `sources` says why.
    #[serde(default)]
    pub memory_events: BTreeMap<String, u64>,
    /// Which figures are exact, which estimated, which missing and why.
    pub sources: Vec<String>,
}

/// The most figures — samples × nodes — a saved profile may hold to be
/// read back (`numalab plot`, `numalab report --profile`): a day's profile
/// at the default interval (under [`numalab::profile::MAX_SAMPLES`]
/// samples) on a machine of 16 nodes is 1.6 million. A file with more was
/// not written by `numalab profile`, and drawing or tabulating it would
/// take memory and time in proportion.
pub const MAX_SAVED_PROFILE_FIGURES: usize = 2_000_000;

/// The share `part / (part + rest)`, `None` when both are 0 or missing.
fn share(events: &BTreeMap<String, u64>, part: &str, whole: &[&str]) -> Option<f64> {
    let part = *events.get(part)?;
    let mut total = 0u64;
    for name in whole {
        total += *events.get(*name)?;
    }
    (total > 0).then(|| part as f64 / total as f64)
}

/// NUMA balancing's counters over a span (`/proc/vmstat` differences).
///
/// ```
/// use numalab_bench::profile::HintFaults;
/// let faults = HintFaults { faults: 10, local: 7, pages_migrated: 2 };
/// assert_eq!(faults.remote(), 3);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HintFaults {
    /// `numa_hint_faults`: faults NUMA balancing set up to learn where a
    /// page is used.
    pub faults: u64,
    /// `numa_hint_faults_local`: those on the node the page is on.
    pub local: u64,
    /// `numa_pages_migrated`: pages it moved.
    pub pages_migrated: u64,
}

impl HintFaults {
    /// Hinting faults from another node than the page's.
    pub fn remote(&self) -> u64 {
        self.faults.saturating_sub(self.local)
    }

    fn now() -> Option<HintFaults> {
        let [faults, local, pages_migrated] = numalab::profile::balancing_counters()?;
        Some(HintFaults {
            faults,
            local,
            pages_migrated,
        })
    }

    fn since(self, before: HintFaults) -> HintFaults {
        HintFaults {
            faults: self.faults.saturating_sub(before.faults),
            local: self.local.saturating_sub(before.local),
            pages_migrated: self.pages_migrated.saturating_sub(before.pages_migrated),
        }
    }
}

impl Schema for ProfileReport {
    const NAME: &'static str = "numalab.profile";
    const VERSION: u32 = 1;
}

impl ProfileReport {
    /// The most memory each node held at any one sample (all kinds).
    pub fn peak_per_node(&self) -> BTreeMap<u32, u64> {
        let mut peak = BTreeMap::new();
        for sample in &self.timeline.samples {
            for (node, bytes) in sample.memory.per_node() {
                let most = peak.entry(node).or_insert(0);
                *most = bytes.max(*most);
            }
        }
        peak
    }

    /// The last sample, if any.
    pub fn last(&self) -> Option<&ProfileSample> {
        self.timeline.samples.last()
    }

    /// Of the private writable pages present at the samples, the share
    /// written since the sample before: over all samples together, and
    /// the median of the samples' shares (`None` without `writes`).
    ///
    /// ```
    /// use numalab::profile::{ProfileSample, WrittenPages};
    /// use numalab_bench::profile::ProfileReport;
    /// let at = |present, written| ProfileSample {
    ///     written: Some(WrittenPages { present, written }),
    ///     ..ProfileSample::default()
    /// };
    /// let mut report = ProfileReport::empty(vec!["app".into()], 42);
    /// report.timeline.samples = vec![ProfileSample::default(), at(100, 10), at(300, 30), at(100, 90)];
    /// let (all, median) = report.written_share().unwrap();
    /// assert_eq!((all, median), (0.26, 0.1));
    /// ```
    pub fn written_share(&self) -> Option<(f64, f64)> {
        let windows: Vec<WrittenPages> = self
            .timeline
            .samples
            .iter()
            .filter_map(|s| s.written)
            .collect();
        if windows.is_empty() {
            return None;
        }
        let present: u64 = windows.iter().map(|w| w.present).sum();
        let written: u64 = windows.iter().map(|w| w.written).sum();
        let shares: Vec<f64> = windows.iter().map(WrittenPages::share).collect();
        let all = if present == 0 {
            0.0
        } else {
            written as f64 / present as f64
        };
        Some((all, crate::stats::quantile(&shares, 0.5).unwrap_or(0.0)))
    }

    /// From the PMU's counts, where it gave them: stores as a share of
    /// loads and stores, and node misses (memory accesses served by
    /// another node) as a share of the node accesses, loads and stores
    /// together where both are counted.
    ///
    /// ```
    /// use numalab_bench::profile::ProfileReport;
    /// let mut report = ProfileReport::empty(vec!["app".into()], 42);
    /// assert_eq!(report.store_share(), None, "no PMU, no figure");
    /// report.memory_events = [("loads", 300), ("stores", 100), ("node-loads", 40), ("node-load-misses", 10)]
    ///     .into_iter()
    ///     .map(|(n, c)| (n.to_owned(), c))
    ///     .collect();
    /// assert_eq!(report.store_share(), Some(0.25));
    /// assert_eq!(report.remote_share(), Some(0.25));
    /// ```
    pub fn store_share(&self) -> Option<f64> {
        share(&self.memory_events, "stores", &["loads", "stores"])
    }

    /// See [`store_share`](Self::store_share).
    pub fn remote_share(&self) -> Option<f64> {
        let events = &self.memory_events;
        let both = || -> Option<f64> {
            let misses = events.get("node-load-misses")? + events.get("node-store-misses")?;
            let all = events.get("node-loads")? + events.get("node-stores")?;
            (all > 0).then(|| misses as f64 / all as f64)
        };
        both().or_else(|| share(events, "node-load-misses", &["node-loads"]))
    }

    /// A report of nothing yet: `command` (process `pid`), no samples.
    pub fn empty(command: Vec<String>, pid: i32) -> ProfileReport {
        ProfileReport {
            command,
            pid,
            exit: None,
            ended: false,
            elapsed_s: 0.0,
            timeline: Timeline::default(),
            at_exit: None,
            numa_balancing: None,
            machine_hint_faults: None,
            memory_events: BTreeMap::new(),
            sources: Vec::new(),
        }
    }

    /// Checks that a profile read back from a file is one numalab could
    /// have written, before anything is drawn from it: at most
    /// [`MAX_SAVED_NODES`](crate::report::MAX_SAVED_NODES) nodes (every
    /// node any sample or the memory at exit names) and at most
    /// [`MAX_SAVED_PROFILE_FIGURES`] samples × nodes. The error is one
    /// sentence naming the counts and the limit.
    ///
    /// ```
    /// use numalab_bench::profile::ProfileReport;
    /// let mut report = ProfileReport::empty(vec!["app".into()], 1);
    /// let mut wide = numalab::profile::ProfileSample::default();
    /// wide.threads_by_node = (0..1000).map(|node| (node, 1)).collect();
    /// report.timeline.samples = vec![Default::default(); 1999];
    /// report.timeline.samples.push(wide);
    /// assert!(report.check_saved_size().is_ok());
    /// report.timeline.samples.push(Default::default());
    /// let err = report.check_saved_size().unwrap_err();
    /// assert_eq!(err, "it holds 2001 samples of 1000 nodes, 2001000 figures, \
    ///     more than the 2000000 a saved profile may; not read");
    /// ```
    pub fn check_saved_size(&self) -> Result<(), String> {
        use crate::report::MAX_SAVED_NODES;
        let samples = &self.timeline.samples;
        let mut nodes = std::collections::BTreeSet::new();
        let memories = samples.iter().map(|s| &s.memory).chain(&self.at_exit);
        let named = memories.flat_map(|m| m.bytes.values().flat_map(|per_node| per_node.keys()));
        for node in named.chain(samples.iter().flat_map(|s| s.threads_by_node.keys())) {
            nodes.insert(*node);
            if nodes.len() > MAX_SAVED_NODES {
                return Err(format!(
                    "it names more than {MAX_SAVED_NODES} nodes, the most a saved profile may (Linux's own limit); not read"
                ));
            }
        }
        // A sample naming no node is still drawn: it counts as one.
        let figures = samples.len().saturating_mul(nodes.len().max(1));
        if figures > MAX_SAVED_PROFILE_FIGURES {
            return Err(format!(
                "it holds {} samples of {} nodes, {figures} figures, more than the {MAX_SAVED_PROFILE_FIGURES} a saved profile may; not read",
                samples.len(),
                nodes.len()
            ));
        }
        Ok(())
    }

    /// What drawing it costs: its samples times the nodes they name (a
    /// sample naming none counts as one), as [`check_saved_size`]
    /// bounds it for one profile and `numalab report` for all it draws.
    ///
    /// [`check_saved_size`]: ProfileReport::check_saved_size
    pub fn figures(&self) -> usize {
        let samples = &self.timeline.samples;
        let memories = samples.iter().map(|s| &s.memory).chain(&self.at_exit);
        let named = memories.flat_map(|m| m.bytes.values().flat_map(|per_node| per_node.keys()));
        let nodes: std::collections::BTreeSet<u32> = named
            .chain(samples.iter().flat_map(|s| s.threads_by_node.keys()))
            .copied()
            .collect();
        samples.len().saturating_mul(nodes.len().max(1))
    }

    /// The sampling's CPU time as a share of the time profiled.
    pub fn overhead_share(&self) -> f64 {
        if self.elapsed_s > 0.0 {
            self.timeline.sampling_cpu_s / self.elapsed_s
        } else {
            0.0
        }
    }
}

/// Runs `command` to its end, sampling it (and the processes it starts,
/// until it exits) every `options.interval`.
pub fn run(command: &[OsString], options: ProfileOptions) -> Result<ProfileReport, LaunchError> {
    let (program, args) = command.split_first().ok_or(LaunchError::Spawn {
        program: OsString::new(),
        source: io::Error::from(io::ErrorKind::NotFound),
    })?;
    let before = HintFaults::now();
    let mut launch = Launch::new(program, args)
        .timeline(options.interval, options.grow_to)
        .sampling_share(options.max_share);
    if options.writes {
        launch = launch.track_writes();
    }
    let mut counters = None;
    let run = launch.run_with(|pid| counters = Some(ProcessCounters::open(&[pid], &MEMORY)))?;
    let (memory_events, events_source) = memory_events(counters, "over the whole run");
    let timeline = run.timeline.clone().unwrap_or_default();
    Ok(ProfileReport {
        command: command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        pid: run.pid,
        exit: Some(run.exit),
        ended: true,
        elapsed_s: run.elapsed.as_secs_f64(),
        numa_balancing: numa_balancing(),
        machine_hint_faults: before.zip(HintFaults::now()).map(|(b, a)| a.since(b)),
        sources: sources(options.writes, events_source),
        memory_events,
        at_exit: (run.observation == Observation::AtExit).then(|| run.memory.clone()),
        timeline,
    })
}

/// Watches process `pid` until it ends, `options.duration` passes or
/// `control` is stopped (Ctrl-C); the samples so far are kept.
pub fn run_pid(pid: i32, options: ProfileOptions, control: &Control) -> io::Result<ProfileReport> {
    let name = numalab::profile::process_name(pid);
    let process = numalab::profile::Process::of(pid)?;
    let before = HintFaults::now();
    let start = Instant::now();
    let mut threads = numalab::profile::threads(pid);
    threads.truncate(MAX_THREADS);
    let counters = ProcessCounters::open(&threads, &MEMORY);
    let timeline = watch(pid, options, || control.is_stopped())?;
    let (memory_events, events_source) = memory_events(Some(counters), "while it was watched");
    let elapsed_s = start.elapsed().as_secs_f64();
    let ended = !process.running();
    Ok(ProfileReport {
        command: vec![name],
        pid,
        exit: None,
        ended,
        elapsed_s,
        numa_balancing: numa_balancing(),
        machine_hint_faults: before.zip(HintFaults::now()).map(|(b, a)| a.since(b)),
        sources: sources(options.writes, events_source),
        memory_events,
        at_exit: None,
        timeline,
    })
}

fn numa_balancing() -> Option<u32> {
    numalab::system::KernelSettings::current().numa_balancing
}

/// The most threads of a process watched (`--pid`) that get counters
/// of their own (each costs a file descriptor per event; threads they
/// start later are counted through their parent's).
pub const MAX_THREADS: usize = 128;

/// The counts, and the line saying what they rest on or why there are none.
fn memory_events(counters: Option<ProcessCounters>, span: &str) -> (BTreeMap<String, u64>, String) {
    const WHAT: &str = "loads, stores and node-local/remote memory accesses";
    let Some(mut counters) = counters else {
        return (
            BTreeMap::new(),
            format!("{WHAT}: not measured (the command did not start)"),
        );
    };
    let counts = counters.read();
    let failed: Vec<&str> = counters.failed().iter().map(|(name, _)| *name).collect();
    let source = if counts.is_empty() {
        let why = counters
            .failed()
            .first()
            .map(|(name, err)| format!("perf_event_open {name}: {err}"))
            .unwrap_or_default();
        if crate::experiment::counters::Available::probe().hardware() {
            format!("{WHAT}: not measured (not offered by this CPU or kernel as perf's generic events: {why})")
        } else {
            format!("{WHAT}: not measured (no hardware PMU here: {why})")
        }
    } else {
        format!(
            "{WHAT}: exact counts from the PMU {span}, every thread and process it started included (perf's generic events as this kernel maps them onto this CPU; a node miss is an access served by another node's memory){}",
            if failed.is_empty() {
                String::new()
            } else {
                format!("; not offered here: {}", failed.join(", "))
            }
        )
    };
    (counts, source)
}

/// What each figure rests on, and what is not measured here.
fn sources(writes: bool, memory_events: String) -> Vec<String> {
    let mut sources = vec![
        "memory per node and kind: exact at each sample (/proc/PID/numa_maps); memory allocated and freed between two samples is not seen".to_owned(),
        "page faults and CPU time: exact, the whole process with its exited threads (/proc/PID/stat)".to_owned(),
        "CPU migrations and NUMA-balancing migrations: exact for the threads alive at the sample (/proc/PID/task/TID/sched); an exited thread's are lost".to_owned(),
        "threads per node: where each thread last ran, at the sample".to_owned(),
    ];
    if writes {
        sources.push(if numalab::profile::WriteTracker::new().is_some() {
            "pages written: estimated, from soft-dirty bits (/proc/PID/pagemap, cleared at each sample through clear_refs): the share of the private writable pages present that were written (or mapped) since the sample before, however often; each page written after a sample cost the program one extra page fault".to_owned()
        } else {
            "pages written: not measured (this kernel keeps no soft-dirty bits: CONFIG_MEM_SOFT_DIRTY)".to_owned()
        });
    }
    sources.push(memory_events);
    sources
}

/// What [`ProfileReport::experiment`] knows of the machine: its nodes with
/// CPUs, and how many nodes have memory.
///
/// ```
/// use numalab_bench::profile::EmitMachine;
/// let topology = numalab::Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// let machine = EmitMachine {
///     cpu_nodes: topology.nodes_with_cpus(),
///     memory_nodes: topology.nodes_with_memory().len(),
///     date: "2026-11-25".into(),
/// };
/// assert_eq!((machine.cpu_nodes.len(), machine.memory_nodes), (2, 2));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmitMachine {
    /// Nodes with CPUs.
    pub cpu_nodes: numalab::NodeSet,
    /// Nodes with memory.
    pub memory_nodes: usize,
    /// When the profile was taken (for the description).
    pub date: String,
}

impl ProfileReport {
    /// An experiment file (TOML, for `numalab run` and `numalab sweep`)
    /// that mimics what this profile saw: as many threads (on the nodes
    /// they ran on), its peak private memory as the region, huge pages if
    /// most of it was, its write share as the read:write mix (when
    /// `--writes` measured it), its run time, and a `[sweep]` over the
    /// placements worth trying on `machine`. Every value says where it
    /// came from in a comment; what /proc cannot show (the access pattern,
    /// the op size) is said to be a guess.
    ///
    /// ```
    /// use numalab::profile::{ProfileSample, WrittenPages};
    /// use numalab::locate::MemoryKind;
    /// use numalab_bench::experiment::Experiment;
    /// use numalab_bench::profile::{EmitMachine, ProfileReport};
    /// let mut report = ProfileReport::empty(vec!["./app".into()], 42);
    /// report.elapsed_s = 12.4;
    /// let mut sample = ProfileSample { threads: 4, processes: 1, ..ProfileSample::default() };
    /// sample.memory.bytes.insert(MemoryKind::Heap, [(0, 600 << 20), (1, 200 << 20)].into());
    /// sample.threads_by_node = [(0, 2), (1, 2)].into();
    /// sample.written = Some(WrittenPages { present: 1000, written: 250 });
    /// report.timeline.samples = vec![ProfileSample::default(), sample];
    /// let machine = EmitMachine { cpu_nodes: "0-1".parse()?, memory_nodes: 2, date: "2026-11-25".into() };
    /// let text = report.experiment(&machine);
    /// let exp = Experiment::from_toml_str(&text, "app.toml")?;
    /// assert_eq!(exp.threads.count, 4);
    /// assert_eq!(exp.memory.size.0, 800 << 20);
    /// assert_eq!(exp.access.read_write.unwrap().to_string(), "3:1");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn experiment(&self, machine: &EmitMachine) -> String {
        let samples = &self.timeline.samples;
        let private = |s: &ProfileSample| s.memory.private_total();
        let peak = samples.iter().max_by_key(|s| private(s));
        let peak_private = peak.map_or(0, private);
        // Threads and processes at the peak: a short helper process at
        // the start (a shell, a launcher) is not the program.
        let threads = peak.map_or(1, |s| s.threads).max(1);
        let processes = peak.map_or(1, |s| s.processes).max(1);
        let ran_on: numalab::NodeSet = samples
            .iter()
            .flat_map(|s| s.threads_by_node.keys().copied())
            .collect();
        let program = self
            .command
            .first()
            .map(|c| c.rsplit('/').next().unwrap_or(c).to_owned())
            .unwrap_or_default();
        let name: String = program
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let toml_text = |text: &str| toml::Value::String(text.to_owned()).to_string();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# Made by `numalab profile --emit` from what it saw of a program;"
        );
        let _ = writeln!(
            out,
            "# every value says where it came from. Run it: numalab run FILE;"
        );
        let _ = writeln!(out, "# try every placement: numalab sweep FILE.");
        let _ = writeln!(out, "name = {}", toml_text(&format!("profile-{name}")));
        let _ = writeln!(
            out,
            "description = {}",
            toml_text(&format!(
                "mimics `{}` as numalab profile saw it on {}: {}, {} MiB private at its peak, {:.1} s",
                self.command.join(" "),
                machine.date,
                count(threads, "thread"),
                peak_private >> 20,
                self.elapsed_s
            ))
        );
        out.push_str("\n[threads]\n");
        let _ = writeln!(out, "count = {threads}  # its threads at its peak");
        let placement = if ran_on.is_empty() || ran_on == machine.cpu_nodes {
            "balanced".to_owned()
        } else {
            format!("nodes:{ran_on}")
        };
        let _ = writeln!(
            out,
            "placement = {}  # its threads ran on the CPUs of {} {}",
            toml_text(&placement),
            if ran_on.len() == 1 { "node" } else { "nodes" },
            if ran_on.is_empty() {
                "(not seen)".to_owned()
            } else {
                ran_on.to_string()
            }
        );
        out.push_str("\n[memory]\n");
        let (size, sharing, why) = if processes > 1 {
            (
                (peak_private / u64::from(processes)).max(4096),
                "per-thread",
                format!("{processes} processes: each its own memory, the peak split between them"),
            )
        } else {
            (
                peak_private.max(4096),
                "shared",
                "one process: its threads share its memory".to_owned(),
            )
        };
        let _ = writeln!(
            out,
            "size = {}  # private memory (heap, stack, anonymous, huge pages) at its peak",
            toml_text(&format!("{}KiB", size.div_ceil(1024)))
        );
        let _ = writeln!(out, "sharing = {}  # {why}", toml_text(sharing));
        let _ = writeln!(
            out,
            "policy = \"first-touch\"  # how it ran: the kernel's default"
        );
        let huge = peak.map_or(0, |s| s.memory.transparent_huge_bytes);
        let huge_pages = if peak_private > 0 && huge * 2 >= peak_private {
            "thp"
        } else {
            "none"
        };
        let _ = writeln!(
            out,
            "huge_pages = {}  # {} MiB of it in transparent huge pages at its peak",
            toml_text(huge_pages),
            huge >> 20
        );
        out.push_str("\n[access]\n");
        out.push_str("pattern = \"random\"  # a guess: /proc cannot show the order of accesses\n");
        out.push_str("op_size = 64  # a guess: one cache line per access\n");
        let written = self.written_share().map(|(share, _)| share);
        match (self.store_share(), written) {
            (Some(share), _) => {
                let _ = writeln!(
                    out,
                    "read_write = {}  # {:.0}% of its loads and stores were stores (counted by the PMU)",
                    toml_text(&read_write_of(share)),
                    share * 100.0
                );
            }
            (None, Some(share)) => {
                let _ = writeln!(
                    out,
                    "read_write = {}  # {:.0}% of its private pages were written between samples (soft-dirty bits): an estimate of the write share, not of the store count",
                    toml_text(&read_write_of(share)),
                    share * 100.0
                );
            }
            (None, None) => out.push_str("# read_write: not measured (profile --writes, on a kernel with soft-dirty bits, estimates it); the engine's default, reads only, applies\n"),
        }
        let seconds = self.elapsed_s.clamp(0.1, 24.0 * 3600.0);
        let _ = writeln!(
            out,
            "duration = {}  # how long it ran",
            toml_text(&format!("{}ms", (seconds * 1e3).round() as u64))
        );
        out.push_str("\n[run]\nrepeats = 5\nwarmup = 1\n");
        let mut policies = vec!["first-touch", "local", "interleave"];
        if machine.memory_nodes >= 2 {
            policies.push("remote");
        }
        let read_mostly = written.is_some_and(|share| share < 0.1);
        if read_mostly && machine.cpu_nodes.len() >= 2 {
            policies.push("replicate");
        }
        out.push_str("\n[sweep]  # numalab sweep tries each\n");
        let _ = writeln!(
            out,
            "\"memory.policy\" = [{}]{}",
            policies
                .iter()
                .map(|p| toml_text(p))
                .collect::<Vec<_>>()
                .join(", "),
            if read_mostly {
                "  # replicate: under 10% of its pages written (Carrefour's rule for read-mostly data)"
            } else {
                ""
            }
        );
        out
    }
}

/// The read:write mix of a write share `share` (0 to 1), in small whole
/// numbers: 0.25 is 3:1, 0.5 1:1, 0.8 1:4; at most 20 to 1 either way.
fn read_write_of(share: f64) -> String {
    if share <= 0.0 {
        return "1:0".into();
    }
    if share <= 0.5 {
        let reads = ((1.0 - share) / share).round().clamp(1.0, 20.0) as u32;
        format!("{reads}:1")
    } else {
        let writes = (share / (1.0 - share).max(1e-9)).round().clamp(1.0, 20.0) as u32;
        format!("1:{writes}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use numalab::profile::WrittenPages;

    #[test]
    fn emitted_read_write_prefers_counted_stores_to_soft_dirty_estimates() {
        let mut report = ProfileReport::empty(vec!["app".into()], 42);
        let sample = ProfileSample {
            written: Some(WrittenPages {
                present: 100,
                written: 90,
            }),
            ..ProfileSample::default()
        };
        report.timeline.samples = vec![ProfileSample::default(), sample];
        let machine = EmitMachine {
            cpu_nodes: "0".parse().unwrap(),
            memory_nodes: 1,
            date: "2026-11-25".into(),
        };
        let line = |text: &str| {
            text.lines()
                .find(|l| l.starts_with("read_write"))
                .unwrap()
                .to_owned()
        };
        assert!(line(&report.experiment(&machine)).contains("soft-dirty"));
        report.memory_events = [("loads".to_owned(), 750), ("stores".to_owned(), 250)].into();
        let counted = line(&report.experiment(&machine));
        assert!(counted.starts_with("read_write = \"3:1\""), "{counted}");
        assert!(counted.contains("counted by the PMU"), "{counted}");
    }
}
