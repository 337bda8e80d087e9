//! Which CPUs a thread runs on: binding to CPUs or to the CPUs of nodes
//! (as `numactl --physcpubind` and `--cpunodebind`), and where it is now.

use std::io;

use serde::{Deserialize, Serialize};

use crate::sets::{CpuSet, NodeSet};
use crate::sys::linux;
use crate::topology::{NodeInventory, SpecError, Topology};

/// Why a thread could not be bound.
///
/// Nodes and CPUs are checked before the kernel is asked, so a node the
/// machine lacks is a [`BindError::Spec`] naming the nodes it has:
///
/// ```
/// use numalab::affinity::{bind_thread_to_nodes, BindError};
/// use numalab::{NodeSet, SpecError, Topology};
///
/// let topology = Topology::from_synthetic("numa:2 core:2 pu:1")?;
/// match bind_thread_to_nodes(&topology, &NodeSet::single(7)) {
///     Err(BindError::Spec(SpecError::NoSuchNode { node, available })) => {
///         assert_eq!(node, 7);
///         assert_eq!(available.to_string(), "0-1");
///     }
///     other => panic!("expected an unknown node, got {other:?}"),
/// }
/// # Ok::<(), numalab::TopologyError>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    /// A CPU or node that cannot be used.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The kernel refused the CPU mask.
    #[error("the kernel refused to bind to CPUs {cpus}: {source}")]
    Os {
        /// The CPUs asked for.
        cpus: CpuSet,
        /// The kernel's error.
        source: io::Error,
    },
}

/// Binds the calling thread to `cpus` after checking that each exists and
/// is allowed on this machine.
///
/// ```
/// use numalab::affinity;
/// let before = affinity::thread_cpus()?;
/// let first = before.first().unwrap();
/// affinity::bind_thread_to_cpus(&numalab::CpuSet::single(first))?;
/// assert_eq!(affinity::current().cpu, first);
/// affinity::bind_thread_to_cpus(&before)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn bind_thread_to_cpus(cpus: &CpuSet) -> Result<(), BindError> {
    NodeInventory::live().check_cpus(cpus)?;
    set_thread_cpus(cpus)
}

/// Binds the calling thread to every CPU of `nodes`. Nodes without CPUs
/// (memory-only nodes) are an error naming the nodes that have CPUs.
pub fn bind_thread_to_nodes(topology: &Topology, nodes: &NodeSet) -> Result<(), BindError> {
    topology.check_cpu_nodes(nodes)?;
    let cpus = topology.cpus_of(nodes).intersection(&topology.allowed_cpus);
    set_thread_cpus(&cpus)
}

/// Binds without checking against the machine; the kernel's answer is the
/// check (used between fork and exec, where nothing may allocate).
pub(crate) fn set_thread_cpus(cpus: &CpuSet) -> Result<(), BindError> {
    linux::set_affinity(0, cpus.as_words()).map_err(|source| BindError::Os {
        cpus: cpus.clone(),
        source,
    })
}

/// The CPUs the calling thread may run on.
pub fn thread_cpus() -> io::Result<CpuSet> {
    Ok(CpuSet::from_words(&linux::get_affinity(0)?))
}

/// Where a thread is running.
///
/// ```
/// use numalab::affinity;
/// let here = affinity::current();
/// // The kernel only runs a thread on CPUs its affinity allows.
/// assert!(affinity::thread_cpus()?.contains(here.cpu), "{here:?}");
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    /// The CPU.
    pub cpu: u32,
    /// The CPU's node.
    pub node: u32,
}

/// The CPU and node the calling thread is running on at this instant
/// (`getcpu(2)`, a vDSO call of a few nanoseconds).
pub fn current() -> Location {
    let (cpu, node) = linux::getcpu();
    Location { cpu, node }
}
