//! `numalab fleet`: many hosts' reports merged, as a cluster's node health
//! check does.
//!
//! numalab starts nothing across hosts: the scheduler does (`srun
//! --ntasks-per-node=1 numalab report --json --out-dir results/`), and each
//! task writes one self-describing `numalab.report` per host, carrying its
//! host name, its machine's [`Fingerprint`] and the task's
//! [`TaskIdentity`]. [`fleet`] reads a directory of them ([`read`]),
//! groups the hosts by fingerprint — hosts with a DIMM missing, another
//! sub-NUMA mode, THP off or another kernel form groups of their own, with
//! what differs from the nearest larger group said (in a cluster of one
//! kind of node, the largest) — and within each group flags
//! the hosts whose figures fall outside the group's.
//!
//! # The rule
//!
//! Intel Cluster Checker's, on the group's median: in a group of at least
//! [`MIN_HOSTS`] hosts, for every cell of the matrix (idle latency, and
//! read, write and copy bandwidth, from each CPU node to each memory
//! node), with `t` the threshold (0.9 by default) and `m` the median over
//! the group's hosts of that cell's figure (each host's figure is itself
//! the median of its repeats):
//!
//! - a bandwidth below `t × m` is flagged (below 90% of the median);
//! - a latency above `m / t` is flagged (above 111% of the median).
//!
//! The median, not the mean or the best host, is the reference, so a few
//! bad hosts cannot move it; a group of one or two hosts has no majority
//! to compare with and is not judged. The box-plot numbers of every cell
//! (min, quartiles, median, max; quartiles by linear interpolation between
//! order statistics, Hyndman and Fan's type 7, as R and NumPy by default)
//! come with the result.

pub mod baseline;
pub mod check;
pub mod hostlist;
pub mod read;

use std::collections::HashMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::document::Schema;
use crate::host::{Fingerprint, TaskIdentity};

pub use crate::report::{Cell, Metric};

pub use read::{HostResult, LeftOut, Source, MAX_FILES, MAX_FILE_BYTES, MAX_TOTAL_FIGURES};

/// The threshold unless one is given: Cluster Checker's 90%.
pub const DEFAULT_THRESHOLD: f64 = 0.9;

/// The fewest hosts a group needs for its figures to be judged: 3.
pub const MIN_HOSTS: usize = 3;

/// How a merge is done.
///
/// ```
/// use numalab_bench::fleet::FleetOptions;
/// let options = FleetOptions::default();
/// assert_eq!(options.threshold, 0.9);
/// assert!(options.threads >= 1);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct FleetOptions {
    /// The threshold `t` of the rule: above 0, at most 1.
    pub threshold: f64,
    /// Threads reading files (1 to [`read::MAX_THREADS`]).
    pub threads: usize,
}

impl Default for FleetOptions {
    fn default() -> FleetOptions {
        FleetOptions {
            threshold: DEFAULT_THRESHOLD,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get().min(8)),
        }
    }
}

/// The `numalab.fleet` document: the hosts merged, their groups, the
/// figures flagged, and the files left out.
///
/// ```
/// use numalab_bench::fleet::{merge, HostResult};
///
/// let text = std::fs::read_to_string(concat!(
///     env!("CARGO_MANIFEST_DIR"),
///     "/../../tests/results/report-two-socket.json"
/// ))?;
/// let mut hosts = Vec::new();
/// for i in 0..4 {
///     let mut host = HostResult::parse(text.as_bytes(), "r.json".as_ref()).unwrap();
///     host.host = format!("n{i}");
///     if i == 3 {
///         for (cell, value) in &mut host.figures {
///             if cell.metric.higher_is_better() { *value *= 0.7 }
///         }
///     }
///     hosts.push(host);
/// }
/// let fleet = merge(hosts, Vec::new(), 0.9)?;
/// assert_eq!(fleet.groups.len(), 1);
/// assert!(fleet.outliers.iter().all(|o| o.host == "n3"));
/// assert_eq!(fleet.outliers.len(), 12, "read, write and copy of 4 node pairs");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetReport {
    /// The threshold `t` of the rule.
    pub threshold: f64,
    /// The rule in words.
    pub rule: String,
    /// Report files read (merged or not).
    pub files: usize,
    /// Groups of hosts of one fingerprint, largest first; ids from 1.
    pub groups: Vec<Group>,
    /// Figures outside their group's range, by group, host and cell.
    pub outliers: Vec<Outlier>,
    /// Every host merged, by group then name.
    pub hosts: Vec<HostEntry>,
    /// Files and directories left out, and why.
    pub left_out: Vec<LeftOut>,
    /// How many hosts were expected (`numalab fleet --expect`), when the
    /// merge was told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<usize>,
    /// The hosts expected that sent no report, as the host list names
    /// them ([`FleetReport::expect`]).
    #[serde(default)]
    pub missing: Vec<String>,
}

impl Schema for FleetReport {
    const NAME: &'static str = "numalab.fleet";
    const VERSION: u32 = 1;
}

impl FleetReport {
    /// The hosts that stand out: a figure of theirs flagged, or, when
    /// there is more than one group, in a group too small to judge (one or
    /// two hosts unlike the rest). Flagged hosts first, then by group.
    pub fn standing_out(&self) -> Vec<&HostEntry> {
        let unjudged = |group: usize| {
            self.groups.len() > 1 && self.groups.iter().any(|g| g.id == group && !g.judged)
        };
        let mut hosts: Vec<&HostEntry> = self
            .hosts
            .iter()
            .filter(|h| h.outliers > 0 || unjudged(h.group))
            .collect();
        hosts.sort_by_key(|h| (h.outliers == 0, h.group));
        hosts
    }

    /// Names, in [`FleetReport::missing`], each host of `expected` that
    /// no report merged answers to ([`HostEntry::answers_to`]): the nodes
    /// of a job that wrote nothing.
    ///
    /// ```
    /// # use numalab_bench::fleet::{merge, HostResult};
    /// # let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"),
    /// #     "/../../tests/results/report-two-socket.json"))?;
    /// # let mut host = HostResult::parse(text.as_bytes(), "r.json".as_ref()).unwrap();
    /// host.host = "n2.cluster.example".into();
    /// let mut fleet = merge(vec![host], Vec::new(), 0.9)?;
    /// let expected = numalab_bench::fleet::hostlist::expand("n[1-3]")?;
    /// fleet.expect(&expected);
    /// assert_eq!(fleet.missing, ["n1", "n3"]);
    /// assert_eq!(fleet.expected, Some(3));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn expect(&mut self, expected: &[String]) {
        let answering: std::collections::HashSet<&str> =
            self.hosts.iter().flat_map(HostEntry::names).collect();
        self.missing = expected
            .iter()
            .filter(|name| !answering.contains(name.as_str()))
            .cloned()
            .collect();
        self.expected = Some(expected.len());
    }
}

/// Hosts of one fingerprint.
///
/// ```
/// # use numalab_bench::fleet::{merge, HostResult};
/// # let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"),
/// #     "/../../tests/results/report-two-socket.json"))?;
/// # let host = HostResult::parse(text.as_bytes(), "r.json".as_ref()).unwrap();
/// let fleet = merge(vec![host], Vec::new(), 0.9)?;
/// let group = &fleet.groups[0];
/// assert_eq!((group.id, group.hosts), (1, 1));
/// assert!(!group.judged, "one host has nothing to be compared with");
/// assert_eq!(group.cells.len(), 16);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    /// 1 for the largest group, then by size.
    pub id: usize,
    /// How many hosts.
    pub hosts: usize,
    /// The fingerprint of its most common configuration.
    pub fingerprint: Fingerprint,
    /// The larger group whose fingerprint is nearest (the fewest
    /// differences; the larger of two as near); `None` for group 1.
    pub compared_with: Option<usize>,
    /// What differs from that group's fingerprint, one phrase each (empty
    /// for group 1).
    pub differences: Vec<String>,
    /// Whether it has [`MIN_HOSTS`] hosts or more, so its figures were
    /// judged.
    pub judged: bool,
    /// Each cell's figures across the group's hosts.
    pub cells: Vec<CellSummary>,
}

/// One cell's figures across a group's hosts: the numbers of a box plot,
/// and the limit past which a host is flagged.
///
/// ```
/// use numalab_bench::fleet::{Cell, CellSummary, Metric};
/// let cell = Cell { metric: Metric::Read, initiator: 0, target: 0 };
/// let summary = CellSummary::of(cell, &[10.0, 11.0, 12.0, 13.0, 4.0], 0.9).unwrap();
/// assert_eq!((summary.min, summary.q1, summary.median, summary.q3, summary.max),
///            (4.0, 10.0, 11.0, 12.0, 13.0));
/// assert_eq!(summary.limit.map(|l| (l * 100.0).round()), Some(990.0)); // 0.9 x 11
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellSummary {
    /// The cell.
    pub cell: Cell,
    /// Unit of the figures.
    pub unit: String,
    /// Hosts that measured it.
    pub hosts: usize,
    /// Smallest.
    pub min: f64,
    /// First quartile.
    pub q1: f64,
    /// Median.
    pub median: f64,
    /// Third quartile.
    pub q3: f64,
    /// Largest.
    pub max: f64,
    /// A bandwidth below, or a latency above, this is flagged; `None` when
    /// fewer than [`MIN_HOSTS`] hosts measured the cell.
    pub limit: Option<f64>,
}

impl CellSummary {
    /// The summary of `values` (any order); `None` when there are none.
    pub fn of(cell: Cell, values: &[f64], threshold: f64) -> Option<CellSummary> {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let quantile = |q: f64| {
            let pos = q * (sorted.len() - 1) as f64;
            let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
            sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
        };
        let (first, last) = (*sorted.first()?, *sorted.last()?);
        let median = quantile(0.5);
        let limit = (sorted.len() >= MIN_HOSTS).then(|| {
            if cell.metric.higher_is_better() {
                threshold * median
            } else {
                median / threshold
            }
        });
        Some(CellSummary {
            cell,
            unit: cell.metric.unit().to_owned(),
            hosts: sorted.len(),
            min: first,
            q1: quantile(0.25),
            median,
            q3: quantile(0.75),
            max: last,
            limit,
        })
    }

    /// Whether `value` is past the limit.
    pub fn flags(&self, value: f64) -> bool {
        self.limit
            .is_some_and(|limit| self.cell.metric.past_limit(value, limit))
    }
}

/// A figure outside its group's range.
///
/// ```
/// use numalab_bench::fleet::{merge, Cell, HostResult, Metric};
///
/// let text = std::fs::read_to_string(concat!(
///     env!("CARGO_MANIFEST_DIR"),
///     "/../../tests/results/report-two-socket.json"
/// ))?;
/// let remote = Cell { metric: Metric::Latency, initiator: 0, target: 1 };
/// let hosts = (0..5).map(|i| {
///     let mut host = HostResult::parse(text.as_bytes(), "r.json".as_ref()).unwrap();
///     host.host = format!("n{i}");
///     for (cell, value) in &mut host.figures {
///         if i == 2 && *cell == remote { *value *= 1.3 } // 30% slower
///     }
///     host
/// });
/// let fleet = merge(hosts.collect(), Vec::new(), 0.9)?;
/// let outlier = &fleet.outliers[0];
/// assert_eq!((outlier.host.as_str(), outlier.cell), ("n2", remote));
/// assert!((outlier.ratio - 1.3).abs() < 1e-9);
/// assert!(outlier.value > outlier.limit && outlier.limit > outlier.median);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outlier {
    /// The host.
    pub host: String,
    /// Its group.
    pub group: usize,
    /// The cell.
    pub cell: Cell,
    /// The host's figure.
    pub value: f64,
    /// The group's median for the cell.
    pub median: f64,
    /// `value / median`.
    pub ratio: f64,
    /// The limit it is past.
    pub limit: f64,
}

/// A host merged.
///
/// ```
/// use numalab_bench::fleet::{merge, HostResult};
///
/// let text = std::fs::read_to_string(concat!(
///     env!("CARGO_MANIFEST_DIR"),
///     "/../../tests/results/report-lopsided.json"
/// ))?;
/// let host = HostResult::parse(text.as_bytes(), "results/a.json".as_ref()).unwrap();
/// let fleet = merge(vec![host], Vec::new(), 0.9)?;
/// let entry = &fleet.hosts[0];
/// assert_eq!((entry.file.as_str(), entry.group, entry.outliers), ("results/a.json", 1, 0));
/// assert!(entry.task.is_empty(), "measured outside any job");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostEntry {
    /// Host name.
    pub host: String,
    /// The report file.
    pub file: String,
    /// Its group.
    pub group: usize,
    /// When the report was written.
    pub created: Option<String>,
    /// The task that wrote it.
    pub task: TaskIdentity,
    /// The numalab build that measured it, when its report says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numalab_version: Option<String>,
    /// How many of its figures are flagged.
    pub outliers: usize,
    /// Whether its matrix was stopped before the end (cells missing).
    pub interrupted: bool,
    /// Its file as read, to make its page from the bytes merged (not
    /// saved: `None` in a fleet read back).
    #[serde(skip)]
    pub source: Option<Source>,
}

impl HostEntry {
    /// Whether `name` names this host: its Slurm node name
    /// (`SLURMD_NODENAME`, when a Slurm task wrote the report), its host
    /// name, or its host name up to the first dot.
    ///
    /// ```
    /// # use numalab_bench::fleet::{merge, HostResult};
    /// # let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"),
    /// #     "/../../tests/results/report-two-socket.json"))?;
    /// # let mut host = HostResult::parse(text.as_bytes(), "r.json".as_ref()).unwrap();
    /// host.host = "c017.cluster.example".into();
    /// host.task.slurm.insert("SLURMD_NODENAME".into(), "compute17".into());
    /// let fleet = merge(vec![host], Vec::new(), 0.9)?;
    /// let entry = &fleet.hosts[0];
    /// assert!(entry.answers_to("compute17") && entry.answers_to("c017"));
    /// assert!(entry.answers_to("c017.cluster.example") && !entry.answers_to("c01"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn answers_to(&self, name: &str) -> bool {
        self.names().any(|n| n == name)
    }

    /// The names this host answers to.
    fn names(&self) -> impl Iterator<Item = &str> {
        let short = self.host.split('.').next().filter(|s| *s != self.host);
        let node = self.task.slurm.get("SLURMD_NODENAME").map(String::as_str);
        std::iter::once(self.host.as_str()).chain(short).chain(node)
    }
}

/// Why a fleet could not be merged at all.
///
/// ```
/// use numalab_bench::fleet::{fleet, FleetError, FleetOptions};
/// let err = fleet(&["/nonexistent/results".into()], &FleetOptions::default()).unwrap_err();
/// assert!(matches!(err, FleetError::Unreadable { .. }));
/// assert!(err.to_string().starts_with("cannot read /nonexistent/results: "), "{err}");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    /// A path named cannot be read (missing, not permitted).
    #[error("cannot read {}: {source}", path.display())]
    Unreadable {
        /// The path.
        path: PathBuf,
        /// What the kernel said.
        source: std::io::Error,
    },
    /// More report files than [`MAX_FILES`].
    #[error("more than {limit} report files: merge the directories in parts")]
    TooManyFiles {
        /// The limit.
        limit: usize,
    },
    /// More directory entries than [`read::MAX_ENTRIES`].
    #[error("more than {limit} directory entries: name the directories of reports only")]
    TooManyEntries {
        /// The limit.
        limit: usize,
    },
    /// The reports hold more figures together than [`MAX_TOTAL_FIGURES`].
    #[error("the reports read hold {count} figures, more than the {limit} one merge keeps: merge the directories in parts")]
    TooManyFigures {
        /// The figures counted when reading stopped.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// The threshold is not in (0, 1].
    #[error("threshold {0} is not above 0 and at most 1 (0.9 flags a bandwidth below 90% of its group's median)")]
    Threshold(f64),
    /// Not one report could be read.
    #[error(
        "no report to merge: {} or {} left out",
        numalab::units::count(left_out.len(), "file"),
        if left_out.len() == 1 { "directory" } else { "directories" }
    )]
    NoReports {
        /// The files and directories left out, and why.
        left_out: Vec<LeftOut>,
    },
}

/// Reads the reports in `paths` (directories, or files) and merges them:
/// [`read::list`], [`read::read_all`], then [`merge`].
///
/// ```
/// use numalab_bench::fleet::{fleet, FleetOptions};
///
/// let dir = std::env::temp_dir().join(format!("numalab-doc-fleet-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let saved = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/results/");
/// for name in ["report-two-socket.json", "report-lopsided.json"] {
///     std::fs::copy(format!("{saved}{name}"), dir.join(name))?;
/// }
/// std::fs::write(dir.join("half.json"), "{\"schema\": \"numalab.re")?;
/// let report = fleet(&[dir.clone()], &FleetOptions::default())?;
/// // Both emulated guests are called "(none)": one is left out, as is the cut file.
/// assert_eq!((report.files, report.hosts.len(), report.left_out.len()), (3, 1, 2));
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn fleet(paths: &[PathBuf], options: &FleetOptions) -> Result<FleetReport, FleetError> {
    check_threshold(options.threshold)?;
    let (files, mut left_out) = read::list(paths)?;
    let mut hosts = Vec::with_capacity(files.len());
    for answer in read::read_all(&files, options.threads)? {
        match answer {
            Ok(host) => hosts.push(host),
            Err(left) => left_out.push(left),
        }
    }
    let mut report = merge(hosts, left_out, options.threshold)?;
    report.files = files.len();
    Ok(report)
}

fn check_threshold(threshold: f64) -> Result<(), FleetError> {
    if threshold > 0.0 && threshold <= 1.0 {
        Ok(())
    } else {
        Err(FleetError::Threshold(threshold))
    }
}

/// Merges hosts' results: one per host (of two reports of a host the one
/// written later is kept, else the one listed first; the other is left
/// out), grouped by fingerprint, each group's figures judged by the rule
/// (see the [module](self)).
pub fn merge(
    hosts: Vec<HostResult>,
    mut left_out: Vec<LeftOut>,
    threshold: f64,
) -> Result<FleetReport, FleetError> {
    check_threshold(threshold)?;
    let files = hosts.len();
    let hosts = one_per_host(hosts, &mut left_out);
    if hosts.is_empty() {
        return Err(FleetError::NoReports { left_out });
    }
    let members = group(&hosts);

    let mut groups = Vec::with_capacity(members.len());
    let mut outliers = Vec::new();
    let mut entries = Vec::with_capacity(hosts.len());
    for (index, member) in members.iter().enumerate() {
        let id = index + 1;
        let fingerprint = hosts[member[0]].fingerprint.clone();
        // The nearest larger group: the fewest differences, the larger
        // on a tie.
        let nearest = members[..index]
            .iter()
            .enumerate()
            .map(|(j, other)| (j + 1, fingerprint.differences(&hosts[other[0]].fingerprint)))
            .min_by_key(|(j, differences)| (differences.len(), *j));
        let mut by_cell: HashMap<Cell, Vec<f64>> = HashMap::new();
        for &h in member {
            for &(cell, value) in &hosts[h].figures {
                by_cell.entry(cell).or_default().push(value);
            }
        }
        let mut cells: Vec<CellSummary> = by_cell
            .iter()
            .filter_map(|(&cell, values)| CellSummary::of(cell, values, threshold))
            .collect();
        cells.sort_by_key(|c| c.cell);
        let mut names: Vec<usize> = member.clone();
        names.sort_by(|&a, &b| hosts[a].host.cmp(&hosts[b].host));
        for h in names {
            let host = &hosts[h];
            let before = outliers.len();
            for summary in &cells {
                let Some(value) = host.figure(summary.cell) else {
                    continue;
                };
                if summary.flags(value) {
                    outliers.push(Outlier {
                        host: host.host.clone(),
                        group: id,
                        cell: summary.cell,
                        value,
                        median: summary.median,
                        ratio: value / summary.median,
                        limit: summary.limit.unwrap_or(f64::NAN),
                    });
                }
            }
            entries.push(HostEntry {
                host: host.host.clone(),
                file: host.file.display().to_string(),
                group: id,
                created: host.created.clone(),
                task: host.task.clone(),
                numalab_version: host.numalab_version.clone(),
                outliers: outliers.len() - before,
                interrupted: host.interrupted,
                source: host.source.clone(),
            });
        }
        let (compared_with, differences) = nearest.unzip();
        groups.push(Group {
            id,
            hosts: member.len(),
            compared_with,
            differences: differences.unwrap_or_default(),
            fingerprint,
            judged: member.len() >= MIN_HOSTS,
            cells,
        });
    }
    let percent = threshold * 100.0;
    Ok(FleetReport {
        threshold,
        rule: format!(
            "in each group of {MIN_HOSTS} or more hosts of one fingerprint, a bandwidth below \
             {percent:.0}% of the group's median for its cell, or a latency above the median / {threshold}, is flagged"
        ),
        files,
        groups,
        outliers,
        hosts: entries,
        left_out,
        expected: None,
        missing: Vec::new(),
    })
}

/// One result per host name: the one written later (RFC 3339 times sort
/// as text), else the one listed first; the others are left out.
fn one_per_host(hosts: Vec<HostResult>, left_out: &mut Vec<LeftOut>) -> Vec<HostResult> {
    let mut kept: Vec<HostResult> = Vec::with_capacity(hosts.len());
    let mut index: HashMap<String, usize> = HashMap::new();
    for host in hosts {
        let Some(&at) = index.get(&host.host) else {
            index.insert(host.host.clone(), kept.len());
            kept.push(host);
            continue;
        };
        let newer = written(&host) > written(&kept[at]);
        let dropped = if newer {
            std::mem::replace(&mut kept[at], host)
        } else {
            host
        };
        left_out.push(LeftOut {
            path: dropped.file.display().to_string(),
            reason: format!(
                "a second report of host {}: kept {}, {}",
                dropped.host,
                kept[at].file.display(),
                if written(&kept[at]) > written(&dropped) {
                    "written later"
                } else {
                    "written at the same time and listed first"
                }
            ),
        });
    }
    kept
}

/// When a report was written, in seconds: `None` (an undated report)
/// before every date.
fn written(host: &HostResult) -> Option<i64> {
    host.created
        .as_deref()
        .and_then(crate::document::seconds_since_epoch)
}

/// The hosts' indices, grouped: fingerprints that are identical are taken
/// most common first, each joining the first group whose founding
/// fingerprint it [matches](Fingerprint::matches) (memory within the
/// tolerance), else founding a group; groups are returned largest first
/// (ties: in order of founding). The founder of a group is its first
/// member.
fn group(hosts: &[HostResult]) -> Vec<Vec<usize>> {
    let mut exact: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, host) in hosts.iter().enumerate() {
        let key = serde_json::to_string(&host.fingerprint).unwrap_or_default();
        exact.entry(key).or_default().push(i);
    }
    let mut kinds: Vec<Vec<usize>> = exact.into_values().collect();
    kinds.sort_by(|a, b| b.len().cmp(&a.len()).then(a[0].cmp(&b[0])));
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for kind in kinds {
        let fingerprint = &hosts[kind[0]].fingerprint;
        match groups
            .iter_mut()
            .find(|g| fingerprint.matches(&hosts[g[0]].fingerprint))
        {
            Some(group) => group.extend(kind),
            None => groups.push(kind),
        }
    }
    groups.sort_by_key(|g| std::cmp::Reverse(g.len()));
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(n: usize) -> Vec<HostResult> {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/results/report-cxl.json"
        ))
        .unwrap();
        let host = HostResult::parse(text.as_bytes(), "cxl.json".as_ref()).unwrap();
        (0..n)
            .map(|i| {
                let mut h = host.clone();
                h.host = format!("n{i:03}");
                h.file = format!("r/n{i:03}.json").into();
                // A spread of +-4%: inside the 10% band.
                let wobble = 1.0 + 0.04 * ((i % 5) as f64 - 2.0) / 2.0;
                for (_, v) in &mut h.figures {
                    *v *= wobble;
                }
                h
            })
            .collect()
    }

    #[test]
    fn planted_outliers_are_found_and_nothing_else() {
        let mut fleet = hosts(20);
        let slow = Cell {
            metric: Metric::Latency,
            initiator: 1,
            target: 3,
        };
        for (cell, v) in &mut fleet[4].figures {
            if *cell == slow {
                *v *= 1.3;
            }
        }
        fleet[9].figures[20].1 *= 0.7;
        let weak = fleet[9].figures[20].0;
        assert!(weak.metric.higher_is_better());
        fleet[12].fingerprint.nodes[2].memory_bytes -= 128 << 20; // 1/3 of the node
        fleet[13].fingerprint.nodes[2].memory_bytes -= 1 << 20; // 0.3%: the same
        let report = merge(fleet, Vec::new(), 0.9).unwrap();
        let found: Vec<(&str, Cell)> = report
            .outliers
            .iter()
            .map(|o| (o.host.as_str(), o.cell))
            .collect();
        assert_eq!(found, [("n004", slow), ("n009", weak)]);
        assert_eq!(report.groups.len(), 2);
        assert_eq!(report.groups[1].hosts, 1);
        assert!(report.groups[1].differences[0].starts_with("node 2: memory"));
        let odd: Vec<&str> = report
            .hosts
            .iter()
            .filter(|h| h.group == 2)
            .map(|h| h.host.as_str())
            .collect();
        assert_eq!(odd, ["n012"]);
    }

    #[test]
    fn the_later_of_two_reports_of_a_host_is_kept() {
        let mut fleet = hosts(4);
        fleet[3].host = "n001".into();
        fleet[3].created = Some("2099-01-01T00:00:00Z".into());
        let report = merge(fleet, Vec::new(), 0.9).unwrap();
        assert_eq!(report.hosts.len(), 3);
        assert_eq!(report.left_out.len(), 1);
        assert_eq!(
            report.left_out[0].to_string(),
            "r/n001.json: a second report of host n001: kept r/n003.json, written later"
        );
        let kept = report.hosts.iter().find(|h| h.host == "n001").unwrap();
        assert_eq!(kept.file, "r/n003.json");
    }

    #[test]
    fn reports_are_ordered_by_the_time_they_name_not_its_text() {
        // 05:00 at +05:00 is 00:00 UTC: earlier than 01:00 UTC, although
        // its text sorts after; an undated report is older than any.
        for (first, second, kept) in [
            (
                Some("2026-11-27T05:00:00+05:00"),
                Some("2026-11-27T01:00:00Z"),
                "r/n003.json",
            ),
            (
                Some("2026-11-27T01:00:00Z"),
                Some("2026-11-27T05:00:00+05:00"),
                "r/n001.json",
            ),
            (None, Some("1970-01-01T00:00:00Z"), "r/n003.json"),
        ] {
            let mut fleet = hosts(4);
            fleet[1].created = first.map(str::to_owned);
            fleet[3].host = "n001".into();
            fleet[3].created = second.map(str::to_owned);
            let report = merge(fleet, Vec::new(), 0.9).unwrap();
            let entry = report.hosts.iter().find(|h| h.host == "n001").unwrap();
            assert_eq!(entry.file, kept, "{first:?} then {second:?}");
        }
    }

    #[test]
    fn reports_with_and_without_the_fleet_fields_load() {
        use crate::document::Document;
        use crate::report::Report;
        let read = |name: &str| {
            let path = format!("{}/../../tests/results/{name}", env!("CARGO_MANIFEST_DIR"));
            Document::<Report>::parse(&std::fs::read_to_string(path).unwrap()).unwrap()
        };
        let old = read("report-two-socket.json");
        assert!(old.host.is_none() && old.fingerprint.is_none() && old.task.is_empty());
        let new = read("report-lopsided.json");
        assert_eq!(new.host.as_deref(), Some("(none)"));
        // What a report saved is what fleet computes from its parts.
        assert_eq!(new.fingerprint, Some(new.machine_fingerprint()));
        let nodes = &new.fingerprint.as_ref().unwrap().nodes;
        assert!(!crate::host::fingerprint::same_memory(
            nodes[0].memory_bytes,
            nodes[1].memory_bytes
        ));
    }

    #[test]
    fn a_report_with_cells_of_nodes_it_does_not_have_is_left_out() {
        let dir =
            std::env::temp_dir().join(format!("numalab-fleet-stranger-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/results/report-two-socket.json"
        ))
        .unwrap();
        for i in 0..3 {
            let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
            doc["host"] = format!("n{i}").into();
            if i == 2 {
                let cells = doc["matrix"]["latency"]["cells"].as_array_mut().unwrap();
                cells[3]["initiator"] = 99999.into();
                cells[3]["target"] = 4294967295u32.into();
            }
            std::fs::write(dir.join(format!("n{i}.json")), doc.to_string()).unwrap();
        }
        let report = fleet(std::slice::from_ref(&dir), &FleetOptions::default()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(report.hosts.len(), 2);
        assert_eq!(
            report.left_out[0].reason,
            "its latency cell 99999->4294967295 names node 99999, which it does not describe; not read"
        );
        assert!(report.left_out[0].path.ends_with("n2.json"));
        let cells = report.groups.iter().flat_map(|g| &g.cells);
        assert!(cells
            .clone()
            .all(|c| c.cell.initiator < 2 && c.cell.target < 2));
    }

    #[test]
    fn thresholds_are_checked() {
        for bad in [0.0, -1.0, 1.5, f64::NAN] {
            assert!(matches!(
                merge(hosts(1), Vec::new(), bad),
                Err(FleetError::Threshold(_))
            ));
        }
        assert!(matches!(
            merge(Vec::new(), Vec::new(), 0.9),
            Err(FleetError::NoReports { left_out }) if left_out.is_empty()
        ));
    }
}
