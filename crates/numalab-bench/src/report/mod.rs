//! `numalab report`, the main job on a machine: what the machine is
//! (`topo`), what NUMA costs on it (`matrix`: latency and bandwidth from
//! every CPU node to every memory node, beside the firmware's claims),
//! what placement costs a workload (a policy sweep: random operations from
//! one thread to a node's worth under local, remote and interleaved
//! memory), and what it all means ([`Finding`]s).
//!
//! [`design::ReportPlan`] decides and checks everything before anything is
//! measured; [`run`] measures the matrix, the thread scaling and the sweep;
//! [`Report::new`] puts the results together with their findings.

mod cell;
pub mod design;
pub mod findings;
mod plausible;
pub mod scaling;

use serde::{Deserialize, Serialize};

use crate::document::Schema;
use crate::experiment::config::ConfigError;
use crate::experiment::sweep::SweepError;
use crate::experiment::SweepReport;
use crate::host::{Fingerprint, TaskIdentity};
use crate::matrix::{MatrixError, MatrixReport};
use crate::topo::TopoReport;

pub use cell::{Cell, Metric};
pub use design::{run, ReportPlan};
pub use findings::{Finding, FindingKind};

/// The `numalab.report` document: the machine, the matrix, the policy
/// sweep, and what they mean.
///
/// ```no_run
/// use numalab::Topology;
/// use numalab_bench::control::Control;
/// use numalab_bench::report::{self, ReportPlan};
///
/// let topology = Topology::system()?;
/// let plan = ReportPlan::new(&topology, true)?;
/// let report = report::run(&plan, &topology, &Control::new())?;
/// assert!(!report.findings.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// The host measured. Absent in reports written before `numalab
    /// fleet` (version 1 all the same): `numalab fleet` reads their host
    /// from `matrix.environment` then.
    #[serde(default)]
    pub host: Option<String>,
    /// The machine's fingerprint, what `numalab fleet` groups hosts by.
    /// Absent in older reports; [`Report::machine_fingerprint`] computes it from
    /// `topology` and `matrix.environment` for any report.
    #[serde(default)]
    pub fingerprint: Option<Fingerprint>,
    /// The task that wrote the report, from the launcher's environment
    /// variables (Slurm, Open MPI, PMI, PMIx, PBS, Kubernetes); empty
    /// outside a job and in older reports.
    #[serde(default)]
    pub task: TaskIdentity,
    /// The machine.
    pub topology: TopoReport,
    /// Latency and bandwidth between nodes.
    pub matrix: MatrixReport,
    /// The policy sweep.
    pub sweep: SweepReport,
    /// What the figures mean, one sentence each.
    pub findings: Vec<Finding>,
    /// Read bandwidth by thread count on one node (reports before
    /// numalab 0.1 of 2026-11-25 have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling: Option<scaling::ThreadScaling>,
}

impl Schema for Report {
    const NAME: &'static str = "numalab.report";
    const VERSION: u32 = 1;
}

/// The most NUMA nodes a saved report may describe: Linux's own limit
/// (`MAX_NUMNODES`, 1024). A report is drawn as tables of node × node:
/// past this a file of a few tens of megabytes made pages of hundreds
/// and gigabytes of memory (3,000 nodes: 2.6 GB, a 100 MB page).
pub const MAX_SAVED_NODES: usize = 1024;

/// The most cells of the policy sweep a saved report may hold (numalab's
/// own reports have a few dozen).
pub const MAX_SAVED_SWEEP_CELLS: usize = 10_000;

/// The most CPUs a saved report may describe: Linux's own limit (the
/// largest `NR_CPUS` a kernel can be built with, 8192).
pub const MAX_SAVED_CPUS: usize = 8192;

/// The most last-level caches a saved report may describe: one per CPU.
pub const MAX_SAVED_CACHES: usize = MAX_SAVED_CPUS;

/// The most devices a saved report may describe: 65,536, every function
/// of a whole PCI segment (256 buses × 32 devices × 8 functions); a large
/// server has a few hundred.
pub const MAX_SAVED_DEVICES: usize = 65_536;

/// The sizes of a saved report that its tables, and a fleet's memory, are
/// made from; checked by [`check_saved_sizes`].
///
/// ```
/// use numalab_bench::report::{check_saved_sizes, SavedSizes};
/// let two = SavedSizes {
///     nodes: 2, cpus: 4, initiators: 2, targets: 2,
///     matrices: vec![("latency", 4)],
///     ..SavedSizes::default()
/// };
/// assert!(check_saved_sizes(&two).is_ok());
/// let more_cells = SavedSizes { matrices: vec![("latency", 5)], ..two };
/// assert!(check_saved_sizes(&more_cells).is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SavedSizes {
    /// Its topology's nodes.
    pub nodes: usize,
    /// Its topology's CPUs.
    pub cpus: usize,
    /// Its topology's last-level caches.
    pub caches: usize,
    /// Its topology's devices.
    pub devices: usize,
    /// The matrix's rows (initiator nodes).
    pub initiators: usize,
    /// The matrix's columns (target nodes).
    pub targets: usize,
    /// Each of the matrix's tables of node pairs, by name ("latency",
    /// "bandwidth", ...), with its cells.
    pub matrices: Vec<(&'static str, usize)>,
    /// The policy sweep's cells.
    pub sweep_cells: usize,
}

/// `Err` saying that `count` of `what` is more than `limit`, the limit
/// `whose` says.
fn at_most(what: &str, count: usize, limit: usize, whose: &str) -> Result<(), String> {
    if count > limit {
        return Err(format!(
            "it describes {count} {what}, more than the {limit} {whose}; not read"
        ));
    }
    Ok(())
}

/// Checks the sizes a saved report's tables are drawn from, before
/// anything is drawn: nodes at most [`MAX_SAVED_NODES`], CPUs at most
/// [`MAX_SAVED_CPUS`], caches and devices at most [`MAX_SAVED_CACHES`] and
/// [`MAX_SAVED_DEVICES`]; the matrix's initiators and targets each at most
/// the report's nodes, and each of its tables at most one cell per
/// initiator and target; sweep cells at most [`MAX_SAVED_SWEEP_CELLS`].
/// Whether each cell names the report's nodes is [`check_cell_nodes`].
///
/// ```
/// use numalab_bench::report::{check_saved_sizes, SavedSizes};
/// let sizes = SavedSizes {
///     nodes: 8, cpus: 64, caches: 8, devices: 20, initiators: 8, targets: 8,
///     matrices: vec![("latency", 64)], sweep_cells: 24,
/// };
/// assert!(check_saved_sizes(&sizes).is_ok());
/// let err = check_saved_sizes(&SavedSizes { nodes: 3000, ..sizes.clone() }).unwrap_err();
/// assert!(err.contains("3000 nodes, more than the 1024"), "{err}");
/// let err = check_saved_sizes(&SavedSizes { matrices: vec![("latency", 65)], ..sizes }).unwrap_err();
/// assert_eq!(err, "its latency matrix has 65 cells, more than its 8 initiators × 8 targets; not read");
/// ```
pub fn check_saved_sizes(sizes: &SavedSizes) -> Result<(), String> {
    const LINUX: &str = "a saved report may (Linux's own limit)";
    at_most("nodes", sizes.nodes, MAX_SAVED_NODES, LINUX)?;
    at_most("CPUs", sizes.cpus, MAX_SAVED_CPUS, LINUX)?;
    at_most(
        "last-level caches",
        sizes.caches,
        MAX_SAVED_CACHES,
        "a saved report may (one per CPU)",
    )?;
    at_most(
        "devices",
        sizes.devices,
        MAX_SAVED_DEVICES,
        "a saved report may (a whole PCI segment)",
    )?;
    let sides = [("initiator", sizes.initiators), ("target", sizes.targets)];
    for (side, count) in sides {
        if count > sizes.nodes {
            return Err(format!(
                "its matrix has {}, more than the {} it describes; not read",
                numalab::units::count(count, &format!("{side} node")),
                numalab::units::count(sizes.nodes, "node")
            ));
        }
    }
    for &(name, cells) in &sizes.matrices {
        if cells > sizes.initiators.saturating_mul(sizes.targets) {
            return Err(format!(
                "its {name} matrix has {}, more than its {} × {}; not read",
                numalab::units::count(cells, "cell"),
                numalab::units::count(sizes.initiators, "initiator"),
                numalab::units::count(sizes.targets, "target")
            ));
        }
    }
    at_most(
        "sweep cells",
        sizes.sweep_cells,
        MAX_SAVED_SWEEP_CELLS,
        "a saved report may",
    )
}

/// Checks that every cell of the matrix table `name` names two of the
/// report's `nodes` (sorted), each pair once: a cell of a node the report
/// does not have is no measurement of it, and a pair twice would be
/// drawn twice while others go missing.
///
/// ```
/// use numalab_bench::report::check_cell_nodes;
/// assert!(check_cell_nodes(&[0, 1], "latency", [(0, 1), (1, 0)]).is_ok());
/// let err = check_cell_nodes(&[0, 1], "latency", [(99999, 4294967295)]).unwrap_err();
/// assert_eq!(err, "its latency cell 99999->4294967295 names node 99999, which it does not describe; not read");
/// let twice = check_cell_nodes(&[0, 1], "latency", [(0, 0), (0, 0)]).unwrap_err();
/// assert_eq!(twice, "its latency cell 0->0 appears twice; not read");
/// ```
pub fn check_cell_nodes(
    nodes: &[u32],
    name: &str,
    cells: impl IntoIterator<Item = (u32, u32)>,
) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for (initiator, target) in cells {
        if let Some(node) = [initiator, target]
            .into_iter()
            .find(|n| nodes.binary_search(n).is_err())
        {
            return Err(format!(
                "its {name} cell {initiator}->{target} names node {node}, which it does not describe; not read"
            ));
        }
        if !seen.insert((initiator, target)) {
            return Err(format!(
                "its {name} cell {initiator}->{target} appears twice; not read"
            ));
        }
    }
    Ok(())
}

impl Report {
    /// The report of these results, with its findings, its host and
    /// fingerprint, and — when `topology` is this machine's — the task's
    /// identity from this process's environment.
    pub fn new(topology: TopoReport, matrix: MatrixReport, sweep: SweepReport) -> Report {
        let environment = matrix.environment.as_ref();
        Report {
            host: environment
                .map(|e| e.host.hostname.clone())
                .or_else(|| topology.topology.host.clone()),
            fingerprint: Some(Fingerprint::from_parts(
                &topology,
                environment,
                matrix.settings.quick,
            )),
            task: if topology.topology.is_this_system() {
                TaskIdentity::current()
            } else {
                TaskIdentity::default()
            },
            findings: findings::findings(&topology, &matrix, &sweep),
            topology,
            matrix,
            sweep,
            scaling: None,
        }
    }

    /// [`check_saved_sizes`] and [`check_cell_nodes`] of this report.
    pub fn check_sizes(&self) -> Result<(), String> {
        let (topology, matrix) = (&self.topology.topology, &self.matrix);
        let cells = |m: Option<usize>| m.unwrap_or(0);
        check_saved_sizes(&SavedSizes {
            nodes: topology.nodes.len(),
            cpus: topology.cpus.len(),
            caches: topology.last_level_caches.len(),
            devices: topology.devices.len(),
            initiators: matrix.shape.initiators.len(),
            targets: matrix.shape.targets.len(),
            matrices: vec![
                ("firmware", matrix.firmware.len()),
                (
                    "latency",
                    cells(matrix.latency.as_ref().map(|m| m.cells.len())),
                ),
                (
                    "bandwidth",
                    cells(matrix.bandwidth.as_ref().map(|m| m.cells.len())),
                ),
                (
                    "loaded latency",
                    cells(matrix.loaded.as_ref().map(Vec::len)),
                ),
                (
                    "cache-to-cache",
                    cells(matrix.c2c.as_ref().map(|m| m.cells.len())),
                ),
            ],
            sweep_cells: self.sweep.cells.len(),
        })?;
        let nodes = saved_nodes(topology);
        check_shape_nodes(&nodes, &matrix.shape.initiators, &matrix.shape.targets)?;
        let firmware = matrix.firmware.iter().map(|c| (c.initiator, c.target));
        check_cell_nodes(&nodes, "firmware", firmware)?;
        let latency = matrix.latency.iter().flat_map(|m| &m.cells);
        check_cell_nodes(&nodes, "latency", latency.map(|c| (c.initiator, c.target)))?;
        let bandwidth = matrix.bandwidth.iter().flat_map(|m| &m.cells);
        check_cell_nodes(
            &nodes,
            "bandwidth",
            bandwidth.map(|c| (c.initiator, c.target)),
        )?;
        let loaded = matrix.loaded.iter().flatten();
        check_cell_nodes(
            &nodes,
            "loaded latency",
            loaded.map(|c| (c.initiator, c.target)),
        )?;
        let c2c = matrix.c2c.iter().flat_map(|m| &m.cells);
        check_cell_nodes(&nodes, "cache-to-cache", c2c.map(|c| (c.node_a, c.node_b)))
    }

    /// The fingerprint of the machine this report was measured on,
    /// computed from its topology and environment (a report of any
    /// numalab version has them), not copied from its `fingerprint` field.
    ///
    /// ```
    /// use numalab_bench::document::Document;
    /// use numalab_bench::report::Report;
    ///
    /// // Saved before reports carried a fingerprint.
    /// let text = std::fs::read_to_string(concat!(
    ///     env!("CARGO_MANIFEST_DIR"),
    ///     "/../../tests/results/report-cxl.json"
    /// ))?;
    /// let report: Report = Document::parse(&text)?;
    /// assert!(report.fingerprint.is_none() && report.task.is_empty());
    /// let fingerprint = report.machine_fingerprint();
    /// assert_eq!((fingerprint.packages, fingerprint.nodes.len()), (2, 4));
    /// assert!(fingerprint.hmat, "the CXL preset's firmware has HMAT");
    /// assert_eq!(fingerprint.nodes[2].cpus, 0, "a memory-only node");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn machine_fingerprint(&self) -> Fingerprint {
        Fingerprint::from_parts(
            &self.topology,
            self.matrix.environment.as_ref(),
            self.matrix.settings.quick,
        )
    }

    /// A report read from a file, made ready to show: its sizes checked
    /// ([`check_sizes`](Self::check_sizes)), every figure of its matrix
    /// checked to be one a measurement gives
    /// ([`Metric::plausible`](Metric::plausible)), and its
    /// findings made again from its topology, matrix, sweep and scaling
    /// (the file's own are not shown: they need not say what its figures
    /// do). Why not, in one sentence.
    pub fn from_saved(mut self) -> Result<Report, String> {
        self.check_sizes()?;
        plausible::check(&self).map_err(|why| format!("{why}; not read"))?;
        self.findings = findings::findings(&self.topology, &self.matrix, &self.sweep);
        let scaling = self.scaling.take();
        Ok(self.with_scaling(scaling))
    }

    /// With read bandwidth by thread count, and the finding it makes.
    pub fn with_scaling(mut self, scaling: Option<scaling::ThreadScaling>) -> Report {
        if let Some(finding) = scaling.as_ref().and_then(findings::scaling) {
            let at = self
                .findings
                .iter()
                .position(|f| f.kind == FindingKind::LocalBandwidth)
                .map_or(self.findings.len(), |i| i + 1);
            self.findings.insert(at, finding);
        }
        self.scaling = scaling;
        self
    }
}

/// Why a report could not be made.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::report::{ReportError, ReportPlan};
///
/// let machine = Topology::from_synthetic("pack:1 numa:1 core:1 pu:1").unwrap();
/// assert!(ReportPlan::new(&machine, true).is_ok(), "planned and checked");
/// // A sweep stopped by Ctrl-C leaves no report behind:
/// assert_eq!(ReportError::Interrupted.to_string(), "interrupted: no report written");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// The matrix cannot be measured here, or its measurement failed.
    #[error(transparent)]
    Matrix(#[from] MatrixError),
    /// The policy sweep's experiment is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The policy sweep cannot be placed here.
    #[error(transparent)]
    Sweep(#[from] SweepError),
    /// The sweep was stopped before its end.
    #[error("interrupted: no report written")]
    Interrupted,
}

/// Checks that the matrix's `initiators` and `targets` are the report's
/// `nodes` (sorted).
pub fn check_shape_nodes(nodes: &[u32], initiators: &[u32], targets: &[u32]) -> Result<(), String> {
    match initiators
        .iter()
        .chain(targets)
        .find(|n| nodes.binary_search(n).is_err())
    {
        Some(node) => Err(format!(
            "its matrix measures node {node}, which it does not describe; not read"
        )),
        None => Ok(()),
    }
}

/// The ids of a saved topology's nodes, sorted, for [`check_cell_nodes`].
pub fn saved_nodes(topology: &numalab::Topology) -> Vec<u32> {
    let mut nodes: Vec<u32> = topology.nodes.iter().map(|n| n.id).collect();
    nodes.sort_unstable();
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::Document;

    fn saved(change: &dyn Fn(&mut serde_json::Value)) -> Report {
        saved_from("two-socket", change)
    }

    /// tests/results/report-`name`.json changed by `change`.
    pub(super) fn saved_from(name: &str, change: &dyn Fn(&mut serde_json::Value)) -> Report {
        let text = std::fs::read_to_string(format!(
            "{}/../../tests/results/report-{name}.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        change(&mut doc);
        Document::<Report>::parse(&doc.to_string()).unwrap()
    }

    fn sizes() -> SavedSizes {
        SavedSizes {
            nodes: 2,
            cpus: 4,
            caches: 2,
            devices: 1,
            initiators: 2,
            targets: 2,
            matrices: vec![("latency", 4), ("bandwidth", 4)],
            sweep_cells: 6,
        }
    }

    #[test]
    fn each_size_of_a_saved_report_has_its_limit() {
        assert_eq!(check_saved_sizes(&sizes()), Ok(()));
        let refused = |sizes: SavedSizes| check_saved_sizes(&sizes).unwrap_err();
        assert_eq!(
            refused(SavedSizes { cpus: 8193, ..sizes() }),
            "it describes 8193 CPUs, more than the 8192 a saved report may (Linux's own limit); not read"
        );
        assert!(check_saved_sizes(&SavedSizes {
            cpus: 8192,
            ..sizes()
        })
        .is_ok());
        assert_eq!(
            refused(SavedSizes { nodes: 1025, initiators: 0, targets: 0, ..sizes() }),
            "it describes 1025 nodes, more than the 1024 a saved report may (Linux's own limit); not read"
        );
        assert!(refused(SavedSizes {
            caches: 8193,
            ..sizes()
        })
        .starts_with("it describes 8193 last-level caches, more than the 8192"));
        assert!(refused(SavedSizes {
            devices: 65_537,
            ..sizes()
        })
        .starts_with("it describes 65537 devices, more than the 65536"));
        assert_eq!(
            refused(SavedSizes {
                initiators: 3,
                ..sizes()
            }),
            "its matrix has 3 initiator nodes, more than the 2 nodes it describes; not read"
        );
        assert!(refused(SavedSizes {
            targets: 3,
            ..sizes()
        })
        .starts_with("its matrix has 3 target nodes"));
        assert_eq!(
            refused(SavedSizes { matrices: vec![("bandwidth", 1_000_000)], ..sizes() }),
            "its bandwidth matrix has 1000000 cells, more than its 2 initiators × 2 targets; not read"
        );
        assert!(refused(SavedSizes {
            sweep_cells: 10_001,
            ..sizes()
        })
        .starts_with("it describes 10001 sweep cells, more than the 10000"));
    }

    #[test]
    fn a_saved_report_shows_findings_of_its_own_figures_and_no_impossible_figure() {
        let all = |value: f64| {
            saved(&move |doc| {
                for cell in doc["matrix"]["latency"]["cells"].as_array_mut().unwrap() {
                    cell["latency_ns"]["median"] = value.into();
                }
                doc["findings"] = serde_json::json!([{"kind": "machine", "text": "planted"}]);
            })
        };
        assert_eq!(
            all(-1e308).from_saved().unwrap_err(),
            "its latency 0->0 is -1e308 ns: not a measurement (a figure is from 1e-1 to 1e7 ns); not read"
        );
        let report = all(150.0).from_saved().unwrap();
        let texts: Vec<&str> = report.findings.iter().map(|f| f.text.as_str()).collect();
        assert!(!texts.contains(&"planted"), "{texts:?}");
        assert!(texts.iter().any(|t| t.contains("150 ns")), "{texts:?}");
        // A figure of no samples is one not measured, not an impossible one.
        let unmeasured = saved(&|doc| {
            let figure = &mut doc["matrix"]["bandwidth"]["cells"][0]["write_gbps"];
            for field in ["n", "median", "min", "max", "mean", "stddev", "cv"] {
                figure[field] = 0.into();
            }
            figure["samples"] = serde_json::json!([]);
        });
        assert!(unmeasured.from_saved().is_ok());
    }

    #[test]
    fn a_saved_report_is_checked_whole() {
        assert_eq!(saved(&|_| {}).check_sizes(), Ok(()));
        let stranger = saved(&|doc| {
            doc["matrix"]["latency"]["cells"][3]["initiator"] = 99999.into();
            doc["matrix"]["latency"]["cells"][3]["target"] = 4294967295u32.into();
        });
        assert_eq!(
            stranger.check_sizes().unwrap_err(),
            "its latency cell 99999->4294967295 names node 99999, which it does not describe; not read"
        );
        let more = saved(&|doc| {
            let cells = doc["matrix"]["bandwidth"]["cells"].as_array_mut().unwrap();
            let copy = cells[0].clone();
            cells.push(copy);
        });
        assert_eq!(
            more.check_sizes().unwrap_err(),
            "its bandwidth matrix has 5 cells, more than its 2 initiators × 2 targets; not read"
        );
        let cpus = saved(&|doc| {
            let cpus = doc["topology"]["topology"]["cpus"].as_array_mut().unwrap();
            let copy = cpus[0].clone();
            cpus.resize(MAX_SAVED_CPUS + 1, copy);
        });
        assert!(cpus.check_sizes().unwrap_err().contains("8193 CPUs"));
        let shape = saved(&|doc| doc["matrix"]["shape"]["targets"] = serde_json::json!([0, 7]));
        assert_eq!(
            shape.check_sizes().unwrap_err(),
            "its matrix measures node 7, which it does not describe; not read"
        );
    }
}
