//! `numalab check`: one host measured against a [`Baseline`], as a
//! scheduler's node health check runs it — healthy, or one line that
//! names what is wrong.
//!
//! The host's machine fingerprint must be one of the baseline's groups
//! (else nothing is measured: a node with a DIMM missing or sub-NUMA
//! clustering switched is named by what differs). Then the matrix the
//! group's reports measured (`--quick` or full, as the group's
//! fingerprint says) is measured here, and each cell with a limit is
//! compared with it by the fleet's rule.

use std::time::Instant;

use numalab::system::Environment;
use numalab::Topology;
use serde::{Deserialize, Serialize};

use super::baseline::{Baseline, BaselineGroup};
use super::{Cell, Metric};
use crate::control::Control;
use crate::document::Schema;
use crate::host::Fingerprint;
use crate::matrix::run::MatrixConfig;
use crate::matrix::shape::{NodeSelection, Shape};
use crate::matrix::{MatrixError, MatrixReport};
use crate::topo::TopoReport;

/// What a check found.
///
/// ```no_run
/// use numalab_bench::control::Control;
/// use numalab_bench::document::Document;
/// use numalab_bench::fleet::baseline::Baseline;
/// use numalab_bench::fleet::check::check;
///
/// let baseline = Document::<Baseline>::read("baseline.json".as_ref(), 1 << 28, "baseline")?;
/// let report = check(&baseline, &numalab::Topology::system()?, &Control::new())?;
/// if !report.healthy {
///     eprintln!("{}: {}", report.host, report.reason);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    /// This host's name.
    pub host: String,
    /// Whether it is healthy by the baseline.
    pub healthy: bool,
    /// The one line that says why not (empty when healthy): the worst
    /// thing wrong (the figure furthest past its limit), with how many
    /// more there are (`…; 2 more past their limits`).
    pub reason: String,
    /// Everything wrong, one line each, the worst first.
    pub problems: Vec<String>,
    /// The baseline group this host belongs to, when one has its
    /// fingerprint.
    pub group: Option<usize>,
    /// This host's fingerprint.
    pub fingerprint: Fingerprint,
    /// Each cell measured, with the baseline's median and limit.
    pub cells: Vec<CheckedCell>,
    /// Seconds the measurement took.
    pub seconds: f64,
}

impl Schema for CheckReport {
    const NAME: &'static str = "numalab.check";
    const VERSION: u32 = 1;
}

/// One cell: this host's figure against its group's.
///
/// ```
/// use numalab_bench::fleet::check::CheckedCell;
/// use numalab_bench::fleet::{Cell, Metric};
/// let cell = CheckedCell {
///     cell: Cell { metric: Metric::Read, initiator: 0, target: 1 },
///     unit: "GB/s".into(),
///     value: Some(31.2),
///     median: 42.2,
///     limit: Some(38.0),
///     failed: true, // a bandwidth below its limit
/// };
/// assert!(cell.value.unwrap() < cell.limit.unwrap());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckedCell {
    /// The cell.
    pub cell: Cell,
    /// Unit of the figures.
    pub unit: String,
    /// This host's figure (the median of its repeats); `None` when it
    /// could not be measured here.
    pub value: Option<f64>,
    /// The baseline group's median.
    pub median: f64,
    /// The limit (none when the group was too small to set one).
    pub limit: Option<f64>,
    /// Whether the figure is past the limit, or missing.
    pub failed: bool,
}

/// Why a check could not be made (numalab's own trouble, not the host's).
///
/// ```
/// use numalab_bench::control::Control;
/// use numalab_bench::fleet::baseline::Baseline;
/// use numalab_bench::fleet::check::{check, CheckError};
///
/// let empty = Baseline { threshold: 0.9, rule: String::new(), groups: Vec::new() };
/// let machine = numalab::Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// let err = check(&empty, &machine, &Control::new()).unwrap_err();
/// assert!(matches!(err, CheckError::EmptyBaseline));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The baseline holds no group at all.
    #[error("the baseline holds no group of hosts")]
    EmptyBaseline,
    /// The measurement failed.
    #[error(transparent)]
    Matrix(#[from] MatrixError),
    /// The measurement was stopped (Ctrl-C).
    #[error("interrupted: nothing checked")]
    Interrupted,
}

/// The group whose fingerprint this machine has; else the nearest group
/// (the fewest differences, the larger of two as near) with what differs.
pub fn find_group(
    baseline: &Baseline,
    here: impl Fn(bool) -> Fingerprint,
) -> Result<&BaselineGroup, (Option<&BaselineGroup>, Vec<String>)> {
    let mut nearest: Option<(&BaselineGroup, Vec<String>)> = None;
    for group in &baseline.groups {
        let differences = here(group.fingerprint.quick).differences(&group.fingerprint);
        if differences.is_empty() {
            return Ok(group);
        }
        if nearest
            .as_ref()
            .is_none_or(|(_, d)| differences.len() < d.len())
        {
            nearest = Some((group, differences));
        }
    }
    match nearest {
        Some((group, differences)) => Err((Some(group), differences)),
        None => Err((None, Vec::new())),
    }
}

/// Every figure a matrix measured, by cell: each cell's median.
pub fn figures(matrix: &MatrixReport) -> Vec<(Cell, f64)> {
    let mut figures = Vec::new();
    let mut add = |metric, initiator, target, median: Option<f64>| {
        if let Some(value) = median.filter(|v| *v != 0.0) {
            let cell = Cell {
                metric,
                initiator,
                target,
            };
            figures.push((cell, value));
        }
    };
    for c in matrix.latency.iter().flat_map(|m| &m.cells) {
        add(
            Metric::Latency,
            c.initiator,
            c.target,
            Some(c.latency_ns.summary.median),
        );
    }
    for c in matrix.bandwidth.iter().flat_map(|m| &m.cells) {
        let median = |f: &Option<crate::matrix::Figure>| f.as_ref().map(|f| f.summary.median);
        add(Metric::Read, c.initiator, c.target, median(&c.read_gbps));
        add(Metric::Write, c.initiator, c.target, median(&c.write_gbps));
        add(Metric::Copy, c.initiator, c.target, median(&c.copy_gbps));
    }
    figures.sort_by_key(|(cell, _)| *cell);
    figures
}

/// One line for a cell past its limit: `read 0->1 31.2 GB/s below the
/// limit 38.0 GB/s`.
fn problem(cell: &CheckedCell) -> String {
    let name = format!(
        "{} {}->{}",
        cell.cell.metric.name(),
        cell.cell.initiator,
        cell.cell.target
    );
    let unit = &cell.unit;
    match (cell.value, cell.limit) {
        (None, _) => format!(
            "{name} could not be measured here (baseline median {:.1} {unit})",
            cell.median
        ),
        (Some(value), Some(limit)) if cell.cell.metric.higher_is_better() => {
            format!("{name} {value:.1} {unit} below the limit {limit:.1} {unit} (baseline median {:.1})", cell.median)
        }
        (Some(value), Some(limit)) => {
            format!("{name} {value:.1} {unit} above the limit {limit:.1} {unit} (baseline median {:.1})", cell.median)
        }
        (Some(value), None) => format!("{name} {value:.1} {unit}"),
    }
}

/// Checks this host against `baseline`: its fingerprint first, then, if
/// its group has limits, the group's matrix measured here.
pub fn check(
    baseline: &Baseline,
    topology: &Topology,
    control: &Control,
) -> Result<CheckReport, CheckError> {
    if baseline.groups.is_empty() {
        return Err(CheckError::EmptyBaseline);
    }
    // This machine read once; only `quick` differs between the groups'
    // fingerprints it is compared with.
    let environment = Environment::current(topology);
    let machine = Fingerprint::from_parts(
        &TopoReport::gather(topology.clone()),
        Some(&environment),
        false,
    );
    let here = |quick| Fingerprint {
        quick,
        ..machine.clone()
    };
    let host = environment.host.hostname.clone();
    let group = match find_group(baseline, here) {
        Ok(group) => group,
        Err((nearest, differences)) => {
            let quick = nearest.is_some_and(|g| g.fingerprint.quick);
            let reason = match nearest {
                Some(group) => format!(
                    "no baseline group has this machine's fingerprint; nearest is group {} ({}): {}",
                    group.id,
                    numalab::units::count(group.hosts.len(), "host"),
                    differences.join(", ")
                ),
                None => "no baseline group has this machine's fingerprint".to_owned(),
            };
            return Ok(CheckReport {
                host,
                healthy: false,
                reason: reason.clone(),
                problems: vec![reason],
                group: None,
                fingerprint: here(quick),
                cells: Vec::new(),
                seconds: 0.0,
            });
        }
    };
    let quick = group.fingerprint.quick;
    let fingerprint = here(quick);
    let judged: Vec<_> = group.cells.iter().filter(|c| c.limit.is_some()).collect();
    let start = Instant::now();
    let measured = if judged.is_empty() {
        Vec::new()
    } else {
        let shape = Shape::of(topology, &NodeSelection::default())?;
        let config = if quick {
            MatrixConfig::quick()
        } else {
            MatrixConfig::full()
        };
        control.say("measuring latency and bandwidth between nodes");
        let matrix = crate::matrix::run::run(topology, &shape, &config, control)?;
        if control.is_stopped() || matrix.interrupted {
            return Err(CheckError::Interrupted);
        }
        figures(&matrix)
    };
    let seconds = start.elapsed().as_secs_f64();
    let cells: Vec<CheckedCell> = judged
        .iter()
        .map(|c| {
            let value = measured
                .iter()
                .find(|(cell, _)| *cell == c.cell)
                .map(|(_, v)| *v);
            CheckedCell {
                cell: c.cell,
                unit: c.unit.clone(),
                value,
                median: c.median,
                limit: c.limit,
                failed: match (value, c.limit) {
                    (None, _) => true,
                    (Some(v), Some(limit)) => c.cell.metric.past_limit(v, limit),
                    (Some(_), None) => false,
                },
            }
        })
        .collect();
    // The worst first: how far past its limit, as a factor (a figure
    // that could not be measured, worst of all).
    let mut failed: Vec<&CheckedCell> = cells.iter().filter(|c| c.failed).collect();
    let severity = |c: &CheckedCell| match (c.value, c.limit) {
        (Some(v), Some(limit)) if v > 0.0 && limit > 0.0 => {
            if c.cell.metric.higher_is_better() {
                limit / v
            } else {
                v / limit
            }
        }
        _ => f64::INFINITY,
    };
    failed.sort_by(|a, b| severity(b).total_cmp(&severity(a)));
    let problems: Vec<String> = failed.into_iter().map(problem).collect();
    let reason = match problems.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [first, rest @ ..] => format!(
            "{first}; {} more past {}",
            rest.len(),
            if rest.len() == 1 {
                "its limit"
            } else {
                "their limits"
            }
        ),
    };
    Ok(CheckReport {
        host,
        healthy: problems.is_empty(),
        reason,
        problems,
        group: Some(group.id),
        fingerprint,
        cells,
        seconds,
    })
}
