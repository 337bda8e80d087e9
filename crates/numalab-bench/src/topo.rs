//! `numalab topo`'s result: the machine as hwloc and the kernel describe
//! it, and what it has now.

use numalab::system::{KernelSettings, NodeMemory};
use numalab::{Support, Topology};
use serde::{Deserialize, Serialize};

use crate::document::Schema;

/// The `numalab.topo` document: a topology, and for this machine its
/// memory, kernel settings and placement support now.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::topo::TopoReport;
///
/// let topology = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1").unwrap();
/// let report = TopoReport::gather(topology);
/// assert_eq!(report.topology.nodes.len(), 2);
/// assert!(report.memory_now.is_none(), "a synthetic machine has no memory now");
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TopoReport {
    /// The topology.
    pub topology: Topology,
    /// Each node's memory now (only for this machine).
    pub memory_now: Option<Vec<NodeMemory>>,
    /// Kernel settings (only for this machine).
    pub kernel: Option<KernelSettings>,
    /// Which placement features the kernel has (only for this machine).
    pub support: Option<Support>,
}

impl Schema for TopoReport {
    const NAME: &'static str = "numalab.topo";
    const VERSION: u32 = 1;
}

impl TopoReport {
    /// Describes `topology`, and when it is this machine's, reads each
    /// node's memory, the kernel's settings and its placement support now.
    pub fn gather(topology: Topology) -> TopoReport {
        let live = topology.is_this_system();
        TopoReport {
            memory_now: live.then(|| {
                topology
                    .nodes
                    .iter()
                    .filter_map(|n| NodeMemory::read(n.id).ok())
                    .collect()
            }),
            kernel: live.then(KernelSettings::current),
            support: live.then(Support::probe),
            topology,
        }
    }

    /// The memory of `node` now, when this is this machine.
    pub fn memory_of(&self, node: u32) -> Option<&NodeMemory> {
        self.memory_now.as_ref()?.iter().find(|m| m.node == node)
    }
}
