//! `numalab profile`: a program's memory by node over time, from `/proc`
//! ([`numalab::profile`]), for a command numalab runs or a process already
//! running, with what the kernel's own counters say beside it and what
//! the sampling cost.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::time::Instant;

use numalab::launch::{Exit, Launch, LaunchError, Observation};
use numalab::locate::ProcessMemory;
use numalab::profile::{watch, ProfileOptions, ProfileSample, Timeline, WrittenPages};
use serde::{Deserialize, Serialize};

use crate::document::Schema;

/// What `numalab profile` saw (`--json`).
///
/// ```
/// use numalab_bench::profile::{profile_command, ProfileReport};
/// use numalab::profile::ProfileOptions;
/// let fixed = std::time::Duration::from_millis(20);
/// let options = ProfileOptions { interval: fixed, grow_to: fixed, duration: None, writes: false };
/// let report = profile_command(&["sleep".into(), "0.2".into()], options)?;
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
    /// Which figures are exact, which estimated, which missing and why.
    pub sources: Vec<String>,
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
        let text = std::fs::read_to_string("/proc/vmstat").ok()?;
        let value = |name: &str| {
            text.lines().find_map(|l| {
                let (key, value) = l.split_once(' ')?;
                (key == name).then(|| value.trim().parse::<u64>().ok())?
            })
        };
        Some(HintFaults {
            faults: value("numa_hint_faults")?,
            local: value("numa_hint_faults_local")?,
            pages_migrated: value("numa_pages_migrated")?,
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
            sources: Vec::new(),
        }
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
pub fn profile_command(
    command: &[OsString],
    options: ProfileOptions,
) -> Result<ProfileReport, LaunchError> {
    let (program, args) = command.split_first().ok_or(LaunchError::Spawn {
        program: OsString::new(),
        source: io::Error::from(io::ErrorKind::NotFound),
    })?;
    let before = HintFaults::now();
    let mut launch = Launch::new(program, args).timeline(options.interval, options.grow_to);
    if options.writes {
        launch = launch.track_writes();
    }
    let run = launch.run()?;
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
        sources: sources(options.writes),
        at_exit: (run.observation == Observation::AtExit).then(|| run.memory.clone()),
        timeline,
    })
}

/// Watches process `pid` until it ends, `options.duration` passes or
/// `stop()` says so.
pub fn profile_pid(
    pid: i32,
    options: ProfileOptions,
    stop: impl Fn() -> bool,
) -> io::Result<ProfileReport> {
    let name = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|n| n.trim().to_owned())
        .unwrap_or_default();
    let before = HintFaults::now();
    let start = Instant::now();
    let timeline = watch(pid, options, stop)?;
    let elapsed_s = start.elapsed().as_secs_f64();
    let ended = !numalab::profile::running(pid);
    Ok(ProfileReport {
        command: vec![name],
        pid,
        exit: None,
        ended,
        elapsed_s,
        numa_balancing: numa_balancing(),
        machine_hint_faults: before.zip(HintFaults::now()).map(|(b, a)| a.since(b)),
        sources: sources(options.writes),
        at_exit: None,
        timeline,
    })
}

fn numa_balancing() -> Option<u32> {
    numalab::system::KernelSettings::current().numa_balancing
}

/// What each figure rests on, and what is not measured here.
fn sources(writes: bool) -> Vec<String> {
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
    let available = crate::experiment::counters::Available::probe();
    match available.note {
        Some(note) if !available.hardware() => sources.push(format!(
            "loads, stores and local/remote DRAM accesses: not measured ({note})"
        )),
        _ => sources.push(
            "loads, stores and local/remote DRAM accesses: not measured yet (numalab profile reads /proc only)"
                .to_owned(),
        ),
    }
    sources
}
