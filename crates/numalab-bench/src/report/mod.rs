//! `numalab report`, the main job on a machine: what the machine is
//! (`topo`), what NUMA costs on it (`matrix`: latency and bandwidth from
//! every CPU node to every memory node, beside the firmware's claims),
//! what placement costs a workload (a policy sweep: random operations from
//! one thread to a node's worth under local, remote and interleaved
//! memory), and what it all means ([`Finding`]s).
//!
//! [`design::ReportPlan`] decides and checks everything before anything is
//! measured; it measures the matrix and runs the sweep; [`Report::new`]
//! puts the results together with their findings.

pub mod design;
pub mod findings;
pub mod scaling;

use serde::{Deserialize, Serialize};

use crate::document::Schema;
use crate::experiment::config::ConfigError;
use crate::experiment::sweep::SweepError;
use crate::experiment::SweepResult;
use crate::fleet::{Fingerprint, TaskIdentity};
use crate::matrix::{MatrixError, MatrixResult};
use crate::topo::TopoReport;

pub use design::ReportPlan;
pub use findings::{Finding, FindingKind};

/// The `numalab.report` document: the machine, the matrix, the policy
/// sweep, and what they mean.
///
/// ```no_run
/// use numalab::Topology;
/// use numalab_bench::experiment::Control;
/// use numalab_bench::report::{Report, ReportPlan};
/// use numalab_bench::topo::TopoReport;
///
/// let topology = Topology::system()?;
/// let plan = ReportPlan::new(&topology, true)?;
/// let matrix = plan.measure_matrix(&topology, &mut |_| {})?;
/// let sweep = plan.run_sweep(&topology, &Control::default(), |_, _, _| {})?;
/// let report = Report::new(TopoReport::gather(topology), matrix, sweep);
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
    /// Absent in older reports; [`Fingerprint::of`] computes it from
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
    pub matrix: MatrixResult,
    /// The policy sweep.
    pub sweep: SweepResult,
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

/// Why `count` of `what` is too many, or nothing.
fn at_most(what: &str, count: usize, limit: usize) -> Result<(), String> {
    if count > limit {
        return Err(format!(
            "it describes {count} {what}, more than the {limit} a saved report may (Linux's own limit for nodes); not read"
        ));
    }
    Ok(())
}

/// Checks the sizes a saved report's tables are drawn from, before
/// anything is drawn: nodes and matrix sides at most [`MAX_SAVED_NODES`],
/// cells at most one per pair of nodes, sweep cells at most
/// [`MAX_SAVED_SWEEP_CELLS`].
///
/// ```
/// use numalab_bench::report::check_saved_sizes;
/// assert!(check_saved_sizes(8, [8, 8], 64, 24).is_ok());
/// let err = check_saved_sizes(3000, [3000, 3000], 9_000_000, 24).unwrap_err();
/// assert!(err.contains("3000 nodes, more than the 1024"), "{err}");
/// ```
pub fn check_saved_sizes(
    nodes: usize,
    sides: [usize; 2],
    cells: usize,
    sweep_cells: usize,
) -> Result<(), String> {
    at_most("nodes", nodes, MAX_SAVED_NODES)?;
    at_most("initiator nodes in its matrix", sides[0], MAX_SAVED_NODES)?;
    at_most("target nodes in its matrix", sides[1], MAX_SAVED_NODES)?;
    at_most(
        "cells in one matrix",
        cells,
        MAX_SAVED_NODES * MAX_SAVED_NODES,
    )?;
    at_most("sweep cells", sweep_cells, MAX_SAVED_SWEEP_CELLS)
}

impl Report {
    /// The report of these results, with its findings, its host and
    /// fingerprint, and — when `topology` is this machine's — the task's
    /// identity from this process's environment.
    pub fn new(topology: TopoReport, matrix: MatrixResult, sweep: SweepResult) -> Report {
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

    /// [`check_saved_sizes`] of this report.
    pub fn check_sizes(&self) -> Result<(), String> {
        let matrix = &self.matrix;
        let cells = [
            matrix.latency.as_ref().map_or(0, |m| m.cells.len()),
            matrix.bandwidth.as_ref().map_or(0, |m| m.cells.len()),
            matrix.c2c.as_ref().map_or(0, |m| m.cells.len()),
            matrix.firmware.len(),
        ]
        .into_iter()
        .max()
        .unwrap_or(0);
        check_saved_sizes(
            self.topology.topology.nodes.len(),
            [matrix.shape.initiators.len(), matrix.shape.targets.len()],
            cells,
            self.sweep.cells.len(),
        )
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
