//! `numalab matrix`: measured latency and bandwidth between every CPU node
//! and every memory node, beside what the firmware claims.
//!
//! - [`shape`]: which (initiator, target) pairs a machine has, and their
//!   SLIT and HMAT values;
//! - [`llc`]: how large the last-level cache behaves, from a
//!   latency-versus-size sweep, which sizes the idle-latency working set;
//! - [`latency`]: idle latency by pointer chasing, huge and base pages;
//! - [`bandwidth`]: read, non-temporal write and copy from every CPU of a
//!   node;
//! - [`loaded`]: latency under increasing bandwidth pressure;
//! - [`c2c`]: cache-line hand-over between two cores;
//! - [`run`](mod@run): the whole measurement, checked before anything is
//!   allocated, every cell placement-audited and repeated, into a
//!   [`MatrixReport`];
//! - [`plan`]: what `--plan` shows without measuring;
//! - [`hwloc`]: the figures as hwloc's memory attributes (`--hwloc-xml`).

pub mod bandwidth;
pub mod c2c;
pub mod hwloc;
pub mod latency;
pub mod llc;
pub mod loaded;
pub mod plan;
mod result;
pub mod run;
pub mod shape;

use std::time::Duration;

use numalab::affinity::{self, BindError};
use numalab::{BufferError, CpuSet, NodeSet, SpecError};

pub use plan::PlanReport;
pub use result::{
    BandwidthCell, BandwidthMatrix, BasePages, C2cCell, C2cMatrix, Figure, LatencyCell,
    LatencyMatrix, LoadedCurve, LoadedPoint, MatrixReport, MatrixWarning, MatrixWarningKind,
    PlacementSummary, Settings,
};
pub use run::{validate, MatrixConfig, Measurements};
pub use shape::{Firmware, FirmwareCell, NodeSelection, Shape};

/// Name of the JSON schema of a matrix result.
pub const SCHEMA: &str = "numalab.matrix";

/// Version of [`SCHEMA`]; bumped on incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

impl crate::document::Schema for MatrixReport {
    const NAME: &'static str = SCHEMA;
    const VERSION: u32 = SCHEMA_VERSION;
}

/// Why a matrix could not be measured.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::matrix::{MatrixError, NodeSelection, Shape};
/// // Node 1 of this machine is memory-only (CXL): nothing can run there.
/// let topo = Topology::from_xml_file(concat!(
///     env!("CARGO_MANIFEST_DIR"),
///     "/../../tests/topologies/cpuless.xml"
/// ))?;
/// let only_1 = NodeSelection { nodes: Some("1".parse()?), ..Default::default() };
/// match Shape::of(&topo, &only_1).unwrap_err() {
///     MatrixError::NoInitiators { with_cpus, .. } => assert_eq!(with_cpus.to_string(), "0,2"),
///     other => panic!("unexpected {other}"),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MatrixError {
    /// A node or CPU that does not exist, is not allowed, or lacks what its
    /// role needs.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// An initiator node whose CPUs this process may not use.
    #[error(
        "node {node}: this process may use none of its CPUs; nodes with usable CPUs: {usable}"
    )]
    NoUsableCpus {
        /// The node asked for.
        node: u32,
        /// Nodes that would do.
        usable: NodeSet,
    },
    /// The selection has no node with CPUs.
    #[error("none of nodes {nodes} has CPUs this process may use, so nothing can run the measurements; nodes with CPUs: {with_cpus}")]
    NoInitiators {
        /// The nodes selected.
        nodes: NodeSet,
        /// Nodes that would do.
        with_cpus: NodeSet,
    },
    /// The selection has no node with memory.
    #[error("none of nodes {nodes} has memory to measure; nodes with memory: {with_memory}")]
    NoTargets {
        /// The nodes selected.
        nodes: NodeSet,
        /// Nodes that would do.
        with_memory: NodeSet,
    },
    /// More threads than an initiator node has CPUs.
    #[error(
        "{} asked for, but node {node} has {} this process may use ({cpus})",
        numalab::units::count(*threads, "thread"), numalab::units::count(*available, "CPU")
    )]
    TooManyThreads {
        /// Threads asked for.
        threads: usize,
        /// The node that has fewer CPUs.
        node: u32,
        /// How many it has.
        available: usize,
        /// Which.
        cpus: CpuSet,
    },
    /// A thread count of zero.
    #[error("the thread count must be at least 1")]
    NoThreads,
    /// A repeat count of zero.
    #[error("the repeat count must be at least 1")]
    NoRepeats,
    /// A working set too small to measure.
    #[error("a working set of {size} bytes is too small; the smallest is {min} bytes")]
    TooSmall {
        /// Bytes asked for.
        size: usize,
        /// The smallest allowed.
        min: usize,
    },
    /// More memory than a target node has free.
    #[error("{what} needs {} on node {node}, which has {} free{}",
        human(*needed), human(*free),
        if *reclaimable > 0 { format!(" (and {} of reclaimable page cache)", human(*reclaimable)) } else { String::new() })]
    TooLarge {
        /// What needs it, e.g. "a 64 GiB working set".
        what: String,
        /// The target node.
        node: u32,
        /// Bytes needed at once.
        needed: u64,
        /// Bytes free on the node.
        free: u64,
        /// Page cache the kernel could reclaim.
        reclaimable: u64,
    },
    /// The huge pages asked for cannot be had.
    #[error("huge pages unavailable: {what}")]
    HugePagesUnavailable {
        /// Why.
        what: String,
    },
    /// Only the running machine can be measured.
    #[error("only this machine can be measured; {origin} describes another (its shape and firmware values can be shown without measuring)")]
    NotThisMachine {
        /// Where the topology came from.
        origin: String,
    },
    /// Memory could not be allocated or placed.
    #[error(transparent)]
    Buffer(#[from] BufferError),
    /// A thread could not be pinned.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// A worker thread could not be started (the ones started were
    /// stopped).
    #[error(transparent)]
    Workers(crate::workers::WorkerError),
    /// A thread stopped answering.
    #[error("{what}: no progress for {after:.1?} (a thread descheduled, or failed)")]
    Stalled {
        /// The measurement.
        what: String,
        /// How long it waited.
        after: Duration,
    },
}

impl From<crate::workers::WorkerError> for MatrixError {
    fn from(err: crate::workers::WorkerError) -> MatrixError {
        match err {
            crate::workers::WorkerError::Bind(err) => MatrixError::Bind(err),
            other => MatrixError::Workers(other),
        }
    }
}

/// Bytes in the largest fitting binary unit, for messages.
pub(crate) use numalab::units::format_size as human;

/// Runs `f` on a new thread pinned to `cpu` and returns its result.
pub(crate) fn on_cpu<R: Send>(cpu: u32, f: impl FnOnce() -> R + Send) -> Result<R, MatrixError> {
    std::thread::scope(|scope| {
        scope
            .spawn(move || {
                affinity::bind_thread_to_cpus(&CpuSet::single(cpu))?;
                Ok(f())
            })
            .join()
            .expect("a measurement thread panicked")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_runs_on_the_cpu_asked() {
        let cpu = affinity::thread_cpus().unwrap().first().unwrap();
        assert_eq!(on_cpu(cpu, || affinity::current().cpu).unwrap(), cpu);
        let err = on_cpu(4000, || ()).unwrap_err();
        assert!(err.to_string().contains("CPU 4000 does not exist"), "{err}");
    }
}
