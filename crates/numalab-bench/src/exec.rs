//! `numalab exec`: run a command placed as `numactl` places it (the
//! library's [`numalab::launch`]), then hold where its memory landed
//! against the policy asked for.

use std::collections::BTreeMap;
use std::ffi::OsString;

use numalab::audit::{audit_in_units, PlacementAudit};
use numalab::launch::{Launch, LaunchError, LaunchReport, SignalRelay};
use numalab::{CpuSet, InterleaveWeights, MemPolicy, NodeSet, PolicyError, Topology};
use serde::{Deserialize, Serialize};

use crate::document::Schema;

/// The command to run, and its placement.
///
/// ```
/// use numalab::{MemPolicy, NodeSet};
/// use numalab_bench::exec::ExecConfig;
///
/// let config = ExecConfig::new(["dd", "if=/dev/zero", "of=/dev/null", "bs=8M", "count=1"])
///     .policy(MemPolicy::Bind(NodeSet::single(0)));
/// assert_eq!(config.command.len(), 5);
/// assert!(config.cpus.is_none());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ExecConfig {
    /// The program and its arguments.
    pub command: Vec<OsString>,
    /// The memory policy (none: the command inherits the default).
    pub policy: Option<MemPolicy>,
    /// The CPUs it may run on, if bound.
    pub cpus: Option<CpuSet>,
    /// Weighted-interleave weights to install for the run (restored
    /// after it), node to weight.
    pub weights: Option<BTreeMap<u32, u8>>,
    /// Give the command no standard input and discard its output
    /// ([`Launch::quiet`]).
    pub quiet: bool,
    /// End the command after this long ([`Launch::timeout`]).
    pub timeout: Option<std::time::Duration>,
}

impl ExecConfig {
    /// `command` with no placement of its own.
    pub fn new<I, S>(command: I) -> ExecConfig
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        ExecConfig {
            command: command.into_iter().map(Into::into).collect(),
            policy: None,
            cpus: None,
            weights: None,
            quiet: false,
            timeout: None,
        }
    }

    /// The config with memory policy `policy`.
    pub fn policy(mut self, policy: MemPolicy) -> ExecConfig {
        self.policy = Some(policy);
        self
    }

    /// The config with the command bound to `cpus`.
    pub fn cpus(mut self, cpus: CpuSet) -> ExecConfig {
        self.cpus = Some(cpus);
        self
    }
}

/// The `numalab.exec` document: what ran, how it ended, its memory per
/// node and kind, and its private memory at its peak against the policy.
///
/// ```
/// use std::collections::BTreeMap;
/// use std::time::Duration;
/// use numalab::launch::{Exit, LaunchReport, Observation};
/// use numalab::locate::{MemoryKind, ProcessMemory};
/// use numalab::{MemPolicy, NodeSet, Topology};
/// use numalab_bench::exec::ExecReport;
///
/// let topology = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1").unwrap();
/// let mut peak = ProcessMemory::default();
/// peak.bytes.insert(MemoryKind::Heap, BTreeMap::from([(1, 8 << 20)]));
/// let run = LaunchReport {
///     pid: 42,
///     exit: Exit::Code(0),
///     memory: ProcessMemory::default(),
///     peak,
///     processes: 1,
///     observation: Observation::AtExit,
///     elapsed: Duration::from_millis(20),
///     relayed: None,
///     timeline: None,
///     timed_out: false,
/// };
/// let policy = MemPolicy::Bind(NodeSet::single(1));
/// let report = ExecReport::new(&topology, vec!["./app".into()], Some(policy), None, run);
/// assert!(report.audit.is_match(), "{}", report.audit.note);
/// assert_eq!(report.nodes_seen(), [1]);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecReport {
    /// The command line.
    pub command: Vec<String>,
    /// The policy asked for (`default` when none).
    pub policy: MemPolicy,
    /// The CPUs it was bound to, if any.
    pub cpus: Option<CpuSet>,
    /// What happened.
    pub run: LaunchReport,
    /// Its private memory at its peak (heap, stack, anonymous, huge pages)
    /// against the policy.
    pub audit: PlacementAudit,
    /// What numalab could not put back as it was after the run (the
    /// kernel's interleave weights).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl Schema for ExecReport {
    const NAME: &'static str = "numalab.exec";
    const VERSION: u32 = 1;
}

impl ExecReport {
    /// The report of `run`, a command run on `topology` under `policy`
    /// and bound to `cpus`: its private memory at its peak audited
    /// against the policy, with `local` and `default` following the nodes
    /// of the CPUs it could run on.
    pub fn new(
        topology: &Topology,
        command: Vec<String>,
        policy: Option<MemPolicy>,
        cpus: Option<CpuSet>,
        run: LaunchReport,
    ) -> ExecReport {
        let policy = policy.unwrap_or(MemPolicy::Default);
        let ran_on: NodeSet = match &cpus {
            Some(cpus) => topology.nodes_of(cpus),
            None => topology.nodes_of(&topology.allowed_cpus),
        };
        // `local` and default pages of a memory-less node's CPUs go to the
        // nearest node with memory.
        let ran_on = topology.local_memory_nodes(&ran_on);
        ExecReport {
            command,
            audit: audit_in_units(
                &policy,
                &ran_on,
                &run.peak.private_histogram(),
                run.peak.placement_unit_pages(),
            ),
            policy,
            cpus,
            run,
            warnings: Vec::new(),
        }
    }

    /// Every node that held some of its memory, at its peak or at exit.
    pub fn nodes_seen(&self) -> Vec<u32> {
        let mut nodes: Vec<u32> = self.run.peak.per_node().keys().copied().collect();
        nodes.extend(self.run.memory.per_node().keys());
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }
}

/// Why a command could not be run and followed.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::exec::{run, ExecConfig, ExecError};
///
/// let machine = Topology::from_synthetic("pack:1 numa:1 core:1 pu:1").unwrap();
/// let nothing = ExecConfig::new(Vec::<String>::new());
/// assert!(matches!(run(&machine, &nothing), Err(ExecError::NoCommand)));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// An empty command line.
    #[error("no command given")]
    NoCommand,
    /// The interleave weights could not be installed.
    #[error(transparent)]
    Weights(#[from] PolicyError),
    /// The command could not be started ([`LaunchError::Spawn`]) or
    /// followed.
    #[error(transparent)]
    Launch(#[from] LaunchError),
}

/// Runs the command as `config` places it on this machine (`topology`),
/// follows it to its end, and reports where its memory (and that of its
/// descendants) was.
///
/// Signals another process sends meanwhile are passed on to the command
/// ([`SignalRelay`], in the report as `run.relayed`), and the weights are
/// restored after it ends whatever ended it. A signal that arrives before
/// the command starts is [`LaunchError::Interrupted`].
pub fn run(topology: &Topology, config: &ExecConfig) -> Result<ExecReport, ExecError> {
    let (program, rest) = config.command.split_first().ok_or(ExecError::NoCommand)?;
    // Caught before the weights change, so that no signal ends numalab
    // with the weights changed.
    let relay = SignalRelay::install().map_err(LaunchError::Signals)?;
    // The kernel reads the weights at each page fault: they stay set until
    // the command has ended.
    let weights = match &config.weights {
        Some(weights) => Some(InterleaveWeights::set(weights)?),
        None => None,
    };
    let mut launch = Launch::new(program, rest);
    if let Some(policy) = &config.policy {
        launch = launch.policy(policy.clone());
    }
    if let Some(cpus) = &config.cpus {
        launch = launch.cpus(cpus.clone());
    }
    if config.quiet {
        launch = launch.quiet();
    }
    if let Some(limit) = config.timeout {
        launch = launch.timeout(limit);
    }
    let run = launch.run();
    let restored = weights.map_or(Ok(()), InterleaveWeights::restore);
    drop(relay);
    let run = run?;
    let command = config
        .command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut report = ExecReport::new(
        topology,
        command,
        config.policy.clone(),
        config.cpus.clone(),
        run,
    );
    if let Err(err) = restored {
        report.warnings.push(err.to_string());
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use numalab::launch::{Exit, Observation};
    use numalab::locate::{MemoryKind, ProcessMemory};
    use std::time::Duration;

    fn run(peak: &[(MemoryKind, u32, u64)], at_exit: &[(MemoryKind, u32, u64)]) -> LaunchReport {
        let memory = |entries: &[(MemoryKind, u32, u64)]| {
            let mut m = ProcessMemory::default();
            for (kind, node, bytes) in entries {
                m.bytes.entry(*kind).or_default().insert(*node, *bytes);
            }
            m
        };
        LaunchReport {
            pid: 1,
            exit: Exit::Code(0),
            memory: memory(at_exit),
            peak: memory(peak),
            processes: 1,
            observation: Observation::AtExit,
            elapsed: Duration::from_millis(1),
            relayed: None,
            timeline: None,
            timed_out: false,
        }
    }

    #[test]
    fn default_follows_the_nodes_of_the_cpus_it_ran_on() {
        let topology = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1").unwrap();
        let on_one = run(&[(MemoryKind::Private, 1, 4 << 20)], &[]);
        let cpus_of_node_1 = topology.nodes[1].cpus.clone();
        let report = ExecReport::new(
            &topology,
            vec!["x".into()],
            None,
            Some(cpus_of_node_1),
            on_one.clone(),
        );
        assert_eq!(report.policy, MemPolicy::Default);
        assert!(report.audit.is_match(), "{}", report.audit.note);
        // Bound to node 0's CPUs, the same pages are not where default puts them.
        let cpus_of_node_0 = topology.nodes[0].cpus.clone();
        let report = ExecReport::new(&topology, vec![], None, Some(cpus_of_node_0), on_one);
        assert!(!report.audit.is_match(), "{}", report.audit.note);
    }

    #[test]
    fn nodes_seen_joins_peak_and_exit() {
        let topology = Topology::from_synthetic("pack:3 numa:1 core:1 pu:1").unwrap();
        let ran = run(
            &[(MemoryKind::Heap, 2, 1 << 20)],
            &[(MemoryKind::File, 0, 1 << 20), (MemoryKind::Heap, 2, 4096)],
        );
        let report = ExecReport::new(&topology, vec![], None, None, ran);
        assert_eq!(report.nodes_seen(), [0, 2]);
    }
}
