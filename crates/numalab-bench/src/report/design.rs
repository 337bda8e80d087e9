//! What `numalab report` measures on a machine, decided before anything
//! is measured: the matrix's shape and size, and the policy sweep — the
//! vendor slide deck's simulator (random cache-line operations, 2 reads to
//! 1 write, time to the last thread) from one thread to a node's worth,
//! under local, remote and interleaved memory.

use numalab::Topology;

use super::{scaling, Report, ReportError};
use crate::control::Control;
use crate::experiment::config::ConfigError;
use crate::experiment::sweep::{plan_sweep, run_sweep};
use crate::experiment::Experiment;
use crate::matrix::{self, MatrixConfig, NodeSelection, Shape};
use crate::topo::TopoReport;

/// The workload of the policy sweep: the slide deck's simulator with
/// cache-line-sized random operations, 2 reads to 1 write, over regions
/// far larger than any last-level cache.
const POLICY_SWEEP: &str = r#"
name = "report-policies"
description = "random 64-byte operations, 2 reads to 1 write, one region per node, time to last thread"

[threads]
count = 1
placement = "balanced"

[memory]
size = "256MiB"
policy = "local"
sharing = "per-node"
huge_pages = "thp"

[access]
pattern = "random"
op_size = 64
read_write = "2:1"
ops = 4_000_000

[run]
repeats = 3
warmup = 1
"#;

/// The policy sweep for `topology`: thread counts from one to a node's
/// CPUs (powers of two, then the node's count); `remote` and `interleave`
/// only where there is another node with memory to be remote from.
/// `quick` shrinks the regions to 64 MiB and the operations to 500,000.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::report::design::policy_sweep;
///
/// let two = Topology::from_synthetic("pack:2 numa:1 core:4 pu:1").unwrap();
/// // threads 1, 2, 4 under local, remote and interleave
/// assert_eq!(policy_sweep(&two, false).unwrap().cells().unwrap().len(), 9);
/// ```
pub fn policy_sweep(topology: &Topology, quick: bool) -> Result<Experiment, ConfigError> {
    let per_node = topology
        .nodes
        .iter()
        .filter(|n| topology.allowed_nodes.contains(n.id))
        .map(|n| n.cpus.intersection(&topology.allowed_cpus).len())
        .max()
        .unwrap_or(1)
        .max(1);
    let threads = super::scaling::thread_counts(per_node);
    let policies = if topology.nodes_with_memory().len() > 1 {
        r#"["local", "remote", "interleave"]"#
    } else {
        r#"["local"]"#
    };
    let list = threads
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let text = format!(
        "{POLICY_SWEEP}\n[sweep]\n\"threads.count\" = [{list}]\n\"memory.policy\" = {policies}\n"
    );
    let experiment = Experiment::from_toml_str(&text, "numalab report's policy sweep")?;
    let mut sets = Vec::new();
    if quick {
        sets.push("memory.size=\"64MiB\"".to_string());
        sets.push("access.ops=500_000".to_string());
    }
    experiment.with_overrides(&sets)
}

/// Everything `numalab report` will measure, resolved against the machine
/// and checked before anything is allocated.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::report::design::ReportPlan;
///
/// let machine = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1").unwrap();
/// let plan = ReportPlan::new(&machine, true).unwrap();
/// assert_eq!(plan.shape.targets.len(), 2);
/// // threads 1 and 2, each under local, remote and interleave
/// assert_eq!(plan.sweep.cells().unwrap().len(), 6);
/// ```
#[derive(Debug, Clone)]
pub struct ReportPlan {
    /// Which nodes the matrix measures: every node.
    pub shape: Shape,
    /// The matrix's sizes and repeats.
    pub matrix: MatrixConfig,
    /// The policy sweep ([`policy_sweep`]).
    pub sweep: Experiment,
}

impl ReportPlan {
    /// Plans the report for `topology`; `quick` takes seconds instead of
    /// a minute, with small working sets and fewer operations.
    pub fn new(topology: &Topology, quick: bool) -> Result<ReportPlan, ReportError> {
        let shape = Shape::of(topology, &NodeSelection::default())?;
        let config = if quick {
            MatrixConfig::quick()
        } else {
            MatrixConfig::full()
        };
        matrix::validate(topology, &shape, &config)?;
        let sweep = policy_sweep(topology, quick)?;
        plan_sweep(&sweep, topology)?;
        Ok(ReportPlan {
            shape,
            matrix: config,
            sweep,
        })
    }
}

/// Measures what `plan` decided, in the order a reader meets it: latency
/// and bandwidth between the nodes, read bandwidth by thread count, then
/// the policy sweep; each step is said through `control`. A stop asked
/// through `control` (Ctrl-C) ends the step in progress and is an error: a
/// report is never written from half its measurements.
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
pub fn run(
    plan: &ReportPlan,
    topology: &Topology,
    control: &Control,
) -> Result<Report, ReportError> {
    let interrupted = || control.is_stopped().then_some(ReportError::Interrupted);
    control.say("measuring latency and bandwidth between nodes");
    let matrix = matrix::run::run(topology, &plan.shape, &plan.matrix, control)?;
    if let Some(err) = interrupted() {
        return Err(err);
    }

    control.say("measuring read bandwidth by thread count");
    let scaling = scaling::measure(topology, &matrix, control)?;
    if let Some(err) = interrupted() {
        return Err(err);
    }

    control.say("running the policy sweep");
    let mut sweep = run_sweep(&plan.sweep, topology, control)?;
    sweep.created = crate::document::now_rfc3339();
    if sweep.interrupted {
        return Err(ReportError::Interrupted);
    }
    let machine = TopoReport::gather(topology.clone());
    Ok(Report::new(machine, matrix, sweep).with_scaling(scaling))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_fits_the_machine() {
        let two = Topology::from_synthetic("pack:2 numa:1 core:4 pu:2").unwrap();
        let exp = policy_sweep(&two, false).unwrap();
        let axes: Vec<_> = exp
            .cells()
            .unwrap()
            .iter()
            .map(|(s, _)| format!("{s:?}"))
            .collect();
        // threads 1, 2, 4, 8 x three policies
        assert_eq!(axes.len(), 12, "{axes:?}");
        let one = Topology::from_synthetic("core:2 pu:1").unwrap();
        let exp = policy_sweep(&one, true).unwrap();
        assert_eq!(exp.cells().unwrap().len(), 2, "threads 1 and 2, local only");
    }
}
