//! What the report's figures mean: a sentence each, with the figures it
//! rests on, picked out of the topology, the matrix and the policy sweep.

use std::collections::BTreeMap;
use std::fmt;

use numalab::system::NodeMemory;
use numalab::units::{count, Size};
use serde::{Deserialize, Serialize};

use crate::experiment::result::Comparison;
use crate::experiment::{PolicySpec, SweepReport};
use crate::matrix::MatrixReport;
use crate::stats::Verdict;
use crate::topo::TopoReport;

/// What a finding is about; in JSON, its name in snake case.
///
/// ```
/// use numalab_bench::report::FindingKind;
///
/// let json = serde_json::to_string(&FindingKind::RemoteLatency).unwrap();
/// assert_eq!(json, r#""remote_latency""#);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FindingKind {
    /// The machine: nodes, CPUs, memory.
    Machine,
    /// The slowest remote node against the local one, beside the SLIT.
    RemoteLatency,
    /// A node's own memory when there is no other to compare with.
    LocalLatency,
    /// What 4 KiB pages cost against huge pages (TLB misses).
    BasePages,
    /// A node's threads reading their own memory, and the slowest remote.
    LocalBandwidth,
    /// Read bandwidth with one thread against the most threads.
    ThreadScaling,
    /// A policy against local at the sweep's largest thread count.
    PolicyCost,
    /// The policy sweep could only run local memory.
    LocalOnlySweep,
    /// Every working set was on the node asked for.
    PlacementChecked,
    /// Some pages were not where they were asked to be.
    PlacementMismatch,
    /// Automatic NUMA balancing was on.
    NumaBalancing,
    /// One node holds far more of the page cache, for its size, than
    /// another.
    PageCache,
    /// Figures varied between repeats.
    Noise,
    /// A finding from a report written before findings had kinds.
    Unclassified,
}

/// One thing the report's figures say, as a sentence, and the figures
/// behind it by name (`local_ns`, `ratio`, `read_gbps`, …).
///
/// In JSON: `{"kind": "remote_latency", "text": "From node 0, …",
/// "figures": {"ratio": 1.62, …}}`. A report that stored findings as bare
/// sentences reads back as [`FindingKind::Unclassified`] findings.
///
/// ```
/// use numalab_bench::report::{Finding, FindingKind};
///
/// let finding: Finding = serde_json::from_str(
///     r#"{"kind": "noise", "text": "3 figures varied", "figures": {"noisy_figures": 3.0}}"#,
/// ).unwrap();
/// assert_eq!(finding.kind, FindingKind::Noise);
/// assert_eq!(finding.figure("noisy_figures"), Some(3.0));
/// assert_eq!(finding.to_string(), "3 figures varied");
///
/// let old: Finding = serde_json::from_str(r#""1 NUMA node, 2 CPUs.""#).unwrap();
/// assert_eq!(old.kind, FindingKind::Unclassified);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "Stored")]
pub struct Finding {
    /// What it is about.
    pub kind: FindingKind,
    /// The sentence, as the report prints it.
    pub text: String,
    /// The figures it rests on, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub figures: BTreeMap<String, f64>,
}

impl Finding {
    /// A finding of `kind` saying `text`, with no figures yet.
    pub fn new(kind: FindingKind, text: impl Into<String>) -> Finding {
        Finding {
            kind,
            text: text.into(),
            figures: BTreeMap::new(),
        }
    }

    /// The finding with `value` recorded as the figure `name`.
    pub fn with(mut self, name: &str, value: impl Into<f64>) -> Finding {
        self.figures.insert(name.to_owned(), value.into());
        self
    }

    /// The figure `name`, if it has one.
    pub fn figure(&self, name: &str) -> Option<f64> {
        self.figures.get(name).copied()
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A finding as stored: typed, or a bare sentence from an older report.
#[derive(Deserialize)]
#[serde(untagged)]
enum Stored {
    Sentence(String),
    Typed {
        kind: FindingKind,
        text: String,
        #[serde(default)]
        figures: BTreeMap<String, f64>,
    },
}

impl From<Stored> for Finding {
    fn from(stored: Stored) -> Finding {
        match stored {
            Stored::Sentence(text) => Finding::new(FindingKind::Unclassified, text),
            Stored::Typed {
                kind,
                text,
                figures,
            } => Finding {
                kind,
                text,
                figures,
            },
        }
    }
}

/// The sweep's finding for one policy against local at `threads`
/// threads: the difference where its 95% interval says there is one,
/// "cannot be told" where the interval holds zero, "too few" without one.
fn policy_cost(comparison: &Comparison, threads: u32) -> Finding {
    let policy = &comparison.policy;
    let percent = comparison.vs_local_percent;
    let with = count(threads, "thread");
    // A difference is stated only where its interval says it is one.
    let text = match &comparison.difference {
        Some(d) if d.verdict != Verdict::Indistinguishable => format!(
            "With {with} doing random 64-byte operations, {policy} memory takes {percent:+.0}% of local's time to the last thread (95% interval {:+.0}% to {:+.0}%).",
            100.0 * d.low,
            100.0 * d.high
        ),
        Some(d) => format!(
            "With {with} doing random 64-byte operations, {policy} memory's time to the last thread cannot be told from local's in this run ({percent:+.0}%, 95% interval {:+.0}% to {:+.0}%: within noise).",
            100.0 * d.low,
            100.0 * d.high
        ),
        None => format!(
            "With {with} doing random 64-byte operations, {policy} memory took {percent:+.0}% of local's time to the last thread in one repeat each: too few to tell a difference from noise."
        ),
    };
    let mut finding = Finding::new(FindingKind::PolicyCost, text)
        .with("threads", threads)
        .with("time_s", comparison.time_s)
        .with("vs_local_percent", percent);
    if let Some(d) = &comparison.difference {
        finding = finding
            .with("low_percent", 100.0 * d.low)
            .with("high_percent", 100.0 * d.high)
            .with(
                "significant",
                f64::from(u8::from(d.verdict != Verdict::Indistinguishable)),
            );
    }
    finding
}

/// The findings of a report: the medians behind them, picked out of the
/// results, in the order the report prints them.
pub fn findings(topo: &TopoReport, matrix: &MatrixReport, sweep: &SweepReport) -> Vec<Finding> {
    let mut found = Vec::new();
    let t = &topo.topology;
    let summary = t.summary();
    let memory_nodes = t.nodes_with_memory().len();
    found.push(
        Finding::new(
            FindingKind::Machine,
            format!(
                "{}{}, {}, {} of memory.",
                count(summary.nodes, "NUMA node"),
                if summary.memory_only_nodes > 0 {
                    format!(
                        " ({} without CPUs: memory-only tiers)",
                        summary.memory_only_nodes
                    )
                } else {
                    String::new()
                },
                count(summary.cpus, "CPU"),
                Size(summary.memory_bytes)
            ),
        )
        .with("nodes", summary.nodes as f64)
        .with("memory_only_nodes", summary.memory_only_nodes as f64)
        .with("cpus", summary.cpus as f64)
        .with("memory_bytes", summary.memory_bytes as f64),
    );

    if let Some(latency) = &matrix.latency {
        for initiator in &matrix.shape.initiators {
            let row: Vec<_> = latency
                .cells
                .iter()
                .filter(|c| c.initiator == *initiator)
                .collect();
            let local = row.iter().find(|c| c.ratio_to_local == Some(1.0));
            let worst = row
                .iter()
                .filter(|c| c.ratio_to_local.is_some_and(|r| r != 1.0))
                .max_by(|a, b| {
                    a.latency_ns
                        .summary
                        .median
                        .total_cmp(&b.latency_ns.summary.median)
                });
            match (local, worst) {
                (Some(local), Some(worst)) => {
                    let measured = worst.ratio_to_local.unwrap_or(1.0);
                    let claim = worst
                        .firmware
                        .slit_ratio
                        .map(|r| format!("; the firmware's SLIT says {r:.2}x"))
                        .unwrap_or_else(|| "; the firmware gives no SLIT".into());
                    let mut finding = Finding::new(
                        FindingKind::RemoteLatency,
                        format!(
                            "From node {initiator}, memory on node {} costs {:.0} ns per dependent load against {:.0} ns on node {}: {measured:.2}x{claim}.",
                            worst.target,
                            worst.latency_ns.summary.median,
                            local.latency_ns.summary.median,
                            local.target,
                        ),
                    )
                    .with("initiator", *initiator)
                    .with("target", worst.target)
                    .with("local_target", local.target)
                    .with("remote_ns", worst.latency_ns.summary.median)
                    .with("local_ns", local.latency_ns.summary.median)
                    .with("ratio", measured);
                    if let Some(slit) = worst.firmware.slit_ratio {
                        finding = finding.with("slit_ratio", slit);
                    }
                    found.push(finding);
                }
                (Some(local), None) => found.push(
                    Finding::new(
                        FindingKind::LocalLatency,
                        format!(
                            "Node {initiator}'s own memory: {:.0} ns per dependent load{}.",
                            local.latency_ns.summary.median,
                            if memory_nodes == 1 {
                                "; with one memory node every access is local, so placement cannot cost anything here"
                            } else {
                                ""
                            }
                        ),
                    )
                    .with("initiator", *initiator)
                    .with("local_ns", local.latency_ns.summary.median),
                ),
                _ => {}
            }
            if let Some(base) = local.and_then(|l| l.base_pages.as_ref()) {
                if base.inflation > 0.05 {
                    found.push(
                        Finding::new(
                            FindingKind::BasePages,
                            format!(
                                "4 KiB pages make those loads {:.0}% slower than huge pages (TLB misses): large working sets want transparent or explicit huge pages.",
                                100.0 * base.inflation
                            ),
                        )
                        .with("initiator", *initiator)
                        .with("inflation", base.inflation),
                    );
                }
            }
        }
    }
    if let Some(bandwidth) = &matrix.bandwidth {
        for cell in bandwidth
            .cells
            .iter()
            .filter(|c| c.read_ratio_to_local == Some(1.0))
        {
            // A figure of no samples was not measured: no finding of it.
            let measured =
                |f: &Option<crate::matrix::Figure>| f.as_ref().filter(|f| f.summary.n > 0).cloned();
            if let Some(read) = measured(&cell.read_gbps) {
                let slowest_remote = bandwidth
                    .cells
                    .iter()
                    .filter(|c| c.initiator == cell.initiator && c.target != cell.target)
                    .filter_map(|c| measured(&c.read_gbps).map(|f| (c.target, f.summary.median)))
                    .min_by(|a, b| a.1.total_cmp(&b.1));
                let mut finding = Finding::new(
                    FindingKind::LocalBandwidth,
                    format!(
                        "{} of node {} {} at {:.1} GB/s{}.",
                        count(cell.cpus.len(), "thread"),
                        cell.initiator,
                        if cell.cpus.len() == 1 {
                            "reads its own memory"
                        } else {
                            "read their own memory"
                        },
                        read.summary.median,
                        slowest_remote
                            .map(|(node, gbps)| format!(", node {node}'s at {gbps:.1} GB/s"))
                            .unwrap_or_default()
                    ),
                )
                .with("initiator", cell.initiator)
                .with("threads", cell.cpus.len() as f64)
                .with("read_gbps", read.summary.median);
                if let Some((node, gbps)) = slowest_remote {
                    finding = finding
                        .with("remote_target", node)
                        .with("remote_read_gbps", gbps);
                }
                found.push(finding);
            }
        }
    }

    // The sweep: each policy against local at the largest thread count.
    let largest = sweep
        .comparison
        .iter()
        .filter_map(|c| {
            c.settings
                .iter()
                .find(|(k, _)| k == "threads.count")
                .and_then(|(_, v)| v.parse::<u32>().ok())
        })
        .max();
    for comparison in sweep.comparison.iter().filter(|c| {
        c.policy != PolicySpec::Local
            && c.settings
                .iter()
                .any(|(k, v)| k == "threads.count" && v.parse::<u32>().ok() == largest)
    }) {
        found.push(policy_cost(comparison, largest.unwrap_or(1)));
    }
    if memory_nodes == 1 {
        found.push(Finding::new(
            FindingKind::LocalOnlySweep,
            "The policy sweep ran local memory only: remote and interleaved memory need a second node with memory.",
        ));
    }

    let mismatched: Vec<_> = matrix
        .audits()
        .into_iter()
        .filter(|(_, a)| !a.is_match())
        .map(|(what, _)| what)
        .collect();
    let sweep_mismatch = sweep
        .cells
        .iter()
        .filter_map(|c| c.result.as_ref())
        .filter(|r| !r.placement_as_requested())
        .count();
    if mismatched.is_empty() && sweep_mismatch == 0 {
        found.push(Finding::new(
            FindingKind::PlacementChecked,
            "Every working set measured was on the node asked for (checked page by page with move_pages).",
        ));
    } else {
        found.push(
            Finding::new(
                FindingKind::PlacementMismatch,
                format!(
                    "Pages were not where asked in {} ({}) and {}: those figures do not measure what they say.",
                    count(mismatched.len(), "matrix cell"),
                    mismatched.join(", "),
                    count(sweep_mismatch, "sweep cell")
                ),
            )
            .with("matrix_cells", mismatched.len() as f64)
            .with("sweep_cells", sweep_mismatch as f64),
        );
    }
    if let Some(kernel) = &topo.kernel {
        if let Some(mode) = kernel.numa_balancing.filter(|m| *m > 0) {
            found.push(
                Finding::new(
                    FindingKind::NumaBalancing,
                    "Automatic NUMA balancing is on: the kernel migrates pages towards the threads using them while programs run, which moves results between runs.",
                )
                .with("numa_balancing", mode),
            );
        }
    }
    if let Some(finding) = topo.memory_now.as_deref().and_then(page_cache) {
        found.push(finding);
    }
    let noisy = matrix.figures().iter().filter(|(_, f)| f.noisy).count()
        + sweep
            .cells
            .iter()
            .filter_map(|c| c.result.as_ref()?.figures.as_ref())
            .filter(|f| f.time_to_last_s.is_noisy_for_its_samples())
            .count();
    if noisy > 0 {
        found.push(
            Finding::new(
                FindingKind::Noise,
                format!(
                    "{} varied between repeats more than a quiet machine's 5% shows by chance: the machine was busy; re-run on a quiet machine before trusting small differences.",
                    count(noisy, "figure")
                ),
            )
            .with("noisy_figures", noisy as f64),
        );
    }
    found
}

/// Page cache under this on every node is not worth a line.
const PAGE_CACHE_WORTH: u64 = 256 << 20;

/// One line when the page cache is lopsided: the node holding the most
/// file pages for its size holds at least twice the share of its memory
/// that the node holding the least does, and at least 256 MiB. Programs
/// reading those files from the other node read them remotely.
/// What one thread draws of the bandwidth the node's threads draw
/// together: `None` with fewer than two points.
///
/// ```
/// use numalab_bench::matrix::Figure;
/// use numalab_bench::report::findings::scaling;
/// use numalab_bench::report::scaling::{ScalingPoint, ThreadScaling};
/// let point = |threads, gbps| ScalingPoint {
///     threads,
///     cpus: (0..threads as u32).collect(),
///     read_gbps: Figure::of(&[gbps]),
///     placement: None,
///     pages: None,
///     from_matrix: false,
/// };
/// let curve = ThreadScaling { initiator: 0, target: 0, size_bytes: 1 << 28, points: vec![point(1, 8.0), point(4, 30.0)] };
/// let finding = scaling(&curve).unwrap();
/// assert!(finding.text.contains("one thread reads 8.0 GB/s, 4 threads 30.0 GB/s (3.8×)"), "{}", finding.text);
/// // More than twice the bandwidth from twice the threads is said to be doubtful.
/// let curve = ThreadScaling { points: vec![point(1, 20.0), point(2, 44.0)], ..curve };
/// assert!(scaling(&curve).unwrap().text.contains("more than 2 threads can add"));
/// ```
pub fn scaling(curve: &super::scaling::ThreadScaling) -> Option<Finding> {
    let first = curve.points.first()?;
    let best = curve
        .points
        .iter()
        .max_by(|a, b| a.read_gbps.median().total_cmp(&b.read_gbps.median()))?;
    let last = curve.points.last()?;
    if curve.points.len() < 2 || first.read_gbps.median() <= 0.0 {
        return None;
    }
    let one = first.read_gbps.median();
    let factor = last.read_gbps.median() / one;
    // Streams on more cores cannot draw more than that many times one
    // core's bandwidth; a factor above it says one figure was disturbed.
    let beyond = factor > 1.05 * last.threads as f64 / first.threads as f64;
    let text = format!(
        "Reading node {}'s memory from node {}: one thread reads {one:.1} GB/s, {} threads {:.1} GB/s ({factor:.1}×{}){}.",
        curve.target,
        curve.initiator,
        last.threads,
        last.read_gbps.median(),
        if beyond {
            format!(
                ", more than {} threads can add: the one-thread samples ranged {:.1} to {:.1} GB/s, so take the factor as approximate",
                last.threads, first.read_gbps.summary.min, first.read_gbps.summary.max
            )
        } else {
            String::new()
        },
        if best.threads != last.threads {
            format!(
                "; the most was {:.1} GB/s at {}",
                best.read_gbps.median(),
                count(best.threads, "thread")
            )
        } else {
            String::new()
        }
    );
    Some(
        Finding::new(FindingKind::ThreadScaling, text)
            .with("one_thread_gbps", one)
            .with("threads", last.threads as f64)
            .with("all_threads_gbps", last.read_gbps.median()),
    )
}

fn page_cache(memory: &[NodeMemory]) -> Option<Finding> {
    let nodes: Vec<&NodeMemory> = memory.iter().filter(|m| m.total_bytes > 0).collect();
    if nodes.len() < 2 {
        return None;
    }
    let share = |m: &NodeMemory| m.file_bytes as f64 / m.total_bytes as f64;
    let most = nodes.iter().max_by(|a, b| share(a).total_cmp(&share(b)))?;
    let least = nodes.iter().min_by(|a, b| share(a).total_cmp(&share(b)))?;
    if most.file_bytes < PAGE_CACHE_WORTH || share(most) < 2.0 * share(least) {
        return None;
    }
    let mut finding = Finding::new(
        FindingKind::PageCache,
        format!(
            "The page cache is lopsided: node {} holds {} of file pages ({:.0}% of its memory), node {} {} ({:.0}%); programs on node {} read those files remotely (numalab fincore shows which files sit where, numalab pagecache bench what reading them remotely costs).",
            most.node,
            Size(most.file_bytes),
            100.0 * share(most),
            least.node,
            Size(least.file_bytes),
            100.0 * share(least),
            least.node,
        ),
    )
    .with("most_node", most.node)
    .with("least_node", least.node);
    for m in &nodes {
        finding = finding.with(&format!("node{}_file_bytes", m.node), m.file_bytes as f64);
    }
    Some(finding)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn findings_keep_their_sentence_and_figures_in_json() {
        let finding = Finding::new(FindingKind::RemoteLatency, "From node 0, …")
            .with("ratio", 1.5)
            .with("initiator", 0u32);
        let json = serde_json::to_value(&finding).unwrap();
        assert_eq!(json["kind"], "remote_latency");
        assert_eq!(json["text"], "From node 0, …");
        assert_eq!(json["figures"]["ratio"], 1.5);
        let back: Finding = serde_json::from_value(json).unwrap();
        assert_eq!(back, finding);
        // No figures: no empty object.
        let bare = serde_json::to_value(Finding::new(FindingKind::PlacementChecked, "ok")).unwrap();
        assert!(bare.get("figures").is_none(), "{bare}");
    }

    #[test]
    fn a_policy_cost_is_stated_only_when_its_interval_clears_zero() {
        use crate::stats::difference;
        let comparison = |local: &[f64], other: &[f64]| Comparison {
            settings: vec![("threads.count".into(), "2".into())],
            policy: "interleave".parse().unwrap(),
            time_s: other[0],
            local_s: local[0],
            compared: Default::default(),
            vs_local_percent: (other[0] / local[0] - 1.0) * 100.0,
            difference: difference(local, other, 0.95),
            control: false,
        };
        let real = policy_cost(&comparison(&[1.0, 1.01, 0.99], &[1.5, 1.52, 1.49]), 2);
        assert!(
            real.text.contains("takes +50% of local's time"),
            "{}",
            real.text
        );
        assert!(real.text.contains("95% interval +"), "{}", real.text);
        assert_eq!(real.figure("significant"), Some(1.0));
        let noise = policy_cost(&comparison(&[1.0, 1.2, 0.9], &[1.1, 0.95, 1.15]), 2);
        assert!(
            noise.text.contains("cannot be told from local's"),
            "{}",
            noise.text
        );
        assert!(!noise.text.contains("takes"), "{}", noise.text);
        assert_eq!(noise.figure("significant"), Some(0.0));
        let once = policy_cost(&comparison(&[1.0], &[1.3]), 2);
        assert!(once.text.contains("too few to tell"), "{}", once.text);
        assert_eq!(once.figure("significant"), None);
    }

    #[test]
    fn local_bandwidth_says_how_many_threads_read_in_the_right_number() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/results/report-two-socket.json"
        ))
        .unwrap();
        let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        // Node 0's cells measured by one thread, node 1's by two.
        for cell in doc["matrix"]["bandwidth"]["cells"].as_array_mut().unwrap() {
            if cell["initiator"] == 0 {
                cell["cpus"] = serde_json::json!([0]);
            }
        }
        let report =
            crate::document::Document::<super::super::Report>::parse(&doc.to_string()).unwrap();
        let found = findings(&report.topology, &report.matrix, &report.sweep);
        let local: Vec<&str> = found
            .iter()
            .filter(|f| f.kind == FindingKind::LocalBandwidth)
            .map(|f| f.text.as_str())
            .collect();
        assert_eq!(
            local,
            [
                "1 thread of node 0 reads its own memory at 2.8 GB/s, node 1's at 2.5 GB/s.",
                "2 threads of node 1 read their own memory at 3.0 GB/s, node 0's at 2.9 GB/s.",
            ]
        );
        assert_eq!(found[0].text, "2 NUMA nodes, 4 CPUs, 1.9 GiB of memory.");
    }

    #[test]
    fn a_lopsided_page_cache_is_one_line_and_an_even_one_none() {
        let node = |node, total_gib: u64, file_mib: u64| NodeMemory {
            node,
            total_bytes: total_gib << 30,
            free_bytes: 1 << 30,
            file_bytes: file_mib << 20,
            file_lru_bytes: file_mib << 20,
            huge_pages: Vec::new(),
        };
        let lopsided = page_cache(&[node(0, 16, 6144), node(1, 16, 512)]).unwrap();
        assert_eq!(lopsided.kind, FindingKind::PageCache);
        assert!(
            lopsided.text.starts_with("The page cache is lopsided: node 0 holds 6 GiB of file pages (38% of its memory), node 1 512 MiB (3%)"),
            "{}",
            lopsided.text
        );
        assert_eq!(
            lopsided.figure("node1_file_bytes"),
            Some((512u64 << 20) as f64)
        );
        // Shares of each node's memory, not bytes: a node twice the size
        // with twice the cache is even.
        assert!(page_cache(&[node(0, 32, 4096), node(1, 16, 2048)]).is_none());
        // Under 256 MiB it is not worth a line; one node has nothing to compare.
        assert!(page_cache(&[node(0, 16, 200), node(1, 16, 1)]).is_none());
        assert!(page_cache(&[node(0, 16, 8192)]).is_none());
        // A memory-less node is left out rather than divided by.
        assert!(page_cache(&[node(0, 16, 8192), node(1, 0, 0)]).is_none());
    }
}
