//! Which replicas exist and on which node each one's memory lives
//! ([`ReplicaSet`]), and which replica the calling thread should read.

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;

use crate::sets::NodeSet;
use crate::sys::{linux, procfs};
use crate::topology::{NodeInventory, SpecError};

/// Why a replica set could not be made.
///
/// ```
/// use numalab::replicated::{ReplicaSet, ReplicaSetError};
/// assert!(matches!(ReplicaSet::emulated(vec![]), Err(ReplicaSetError::Empty)));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplicaSetError {
    /// No replica was asked for.
    #[error("a replica set needs at least one replica")]
    Empty,
    /// More replicas than numalab's per-value limit.
    #[error("{count} replicas asked for; at most {max} are supported")]
    TooMany {
        /// Replicas asked for.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A node that does not exist, is not allowed or has no memory.
    #[error(transparent)]
    Node(#[from] SpecError),
}

/// The most replicas one value may have.
pub const MAX_REPLICAS: usize = 1024;

/// How many reads a thread makes between two looks at which CPU it runs
/// on. A thread that migrates reads its old node's replica (correct, only
/// remote) for at most this many reads.
const CPU_REFRESH: u32 = 64;

#[derive(Clone)]
enum ThreadMap {
    /// Replica index by CPU number (one table lookup per read).
    Cpus(Arc<[u16]>),
    /// Chosen per thread by [`set_thread_replica`].
    Emulated,
    /// Chosen by the caller's function.
    Custom(Arc<dyn Fn() -> usize + Send + Sync>),
}

/// The replicas of a replicated value: the node each replica's memory is
/// bound to, and how a thread finds the replica it should read.
///
/// [`ReplicaSet::system`] makes one replica per NUMA node with memory and
/// CPUs, and sends each thread to the replica of the node it runs on (CPUs
/// of nodes without memory use the nearest replica). [`ReplicaSet::on_nodes`] chooses the
/// nodes. [`ReplicaSet::emulated`] and [`ReplicaSet::custom`] separate
/// replicas from nodes: several replicas may share a node's memory and the
/// thread-to-replica mapping is set by the caller, which lets the
/// multi-replica protocols run (and be tested) on a machine with one node.
///
/// ```
/// use numalab::replicated::{set_thread_replica, ReplicaSet};
/// let system = ReplicaSet::system()?;
/// assert_eq!(system.len(), system.nodes().len());
/// assert!(system.current() < system.len());
///
/// // Three replicas, all with memory on node 0; this thread reads replica 2.
/// let emulated = ReplicaSet::emulated(vec![0, 0, 0])?;
/// set_thread_replica(Some(2));
/// assert_eq!(emulated.current(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct ReplicaSet {
    nodes: Vec<u32>,
    map: ThreadMap,
}

impl fmt::Debug for ReplicaSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let map = match &self.map {
            ThreadMap::Cpus(_) => "by CPU",
            ThreadMap::Emulated => "emulated",
            ThreadMap::Custom(_) => "custom",
        };
        f.debug_struct("ReplicaSet")
            .field("nodes", &self.nodes)
            .field("threads", &map)
            .finish()
    }
}

impl ReplicaSet {
    /// One replica on every node this process may allocate from that has
    /// both memory and CPUs: a replica is read by the threads of its node,
    /// so one on a memory-only (CPU-less) node would only be written.
    /// (With no such node, as in a cpuset of memory-only nodes, one on
    /// every allowed node with memory.) [`on_nodes`](Self::on_nodes) puts
    /// replicas on memory-only nodes too, for reads through `read_from`.
    pub fn system() -> Result<ReplicaSet, ReplicaSetError> {
        let inventory = NodeInventory::live();
        let memory = inventory.with_memory.intersection(&inventory.allowed_nodes);
        let read = memory.intersection(&inventory.with_cpus);
        Self::on_nodes(if read.is_empty() { &memory } else { &read })
    }

    /// One replica on each of `nodes` (which must exist, be allowed and
    /// have memory); threads read the replica of their node, or of the
    /// nearest node by firmware distance.
    pub fn on_nodes(nodes: &NodeSet) -> Result<ReplicaSet, ReplicaSetError> {
        let inventory = NodeInventory::live();
        inventory.check_memory_nodes(nodes)?;
        let list: Vec<u32> = nodes.iter().collect();
        check_count(list.len())?;
        let table = cpu_table(&inventory, &list);
        Ok(ReplicaSet {
            nodes: list,
            map: ThreadMap::Cpus(table.into()),
        })
    }

    /// Replicas whose memory is on `nodes[i]` (a node may repeat), with
    /// each thread choosing its replica by [`set_thread_replica`]; a thread
    /// that has not chosen reads replica `k % len`, where `k` counts the
    /// threads in the order they first used replicated memory.
    pub fn emulated(nodes: Vec<u32>) -> Result<ReplicaSet, ReplicaSetError> {
        Self::checked(nodes, ThreadMap::Emulated)
    }

    /// Replicas whose memory is on `nodes[i]` (a node may repeat); the
    /// calling thread reads replica `thread_replica() % len`.
    pub fn custom(
        nodes: Vec<u32>,
        thread_replica: impl Fn() -> usize + Send + Sync + 'static,
    ) -> Result<ReplicaSet, ReplicaSetError> {
        Self::checked(nodes, ThreadMap::Custom(Arc::new(thread_replica)))
    }

    fn checked(nodes: Vec<u32>, map: ThreadMap) -> Result<ReplicaSet, ReplicaSetError> {
        check_count(nodes.len())?;
        let distinct: NodeSet = nodes.iter().copied().collect();
        NodeInventory::live().check_memory_nodes(&distinct)?;
        Ok(ReplicaSet { nodes, map })
    }

    /// A set that is not checked against the machine (model tests).
    #[cfg(all(test, loom))]
    pub(crate) fn unchecked(nodes: Vec<u32>) -> ReplicaSet {
        ReplicaSet {
            nodes,
            map: ThreadMap::Emulated,
        }
    }

    /// Number of replicas.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no replicas (never: a set has at least one).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node each replica's memory is bound to, by replica index.
    pub fn nodes(&self) -> &[u32] {
        &self.nodes
    }

    /// The node replica `replica`'s memory is bound to.
    pub fn node(&self, replica: usize) -> u32 {
        self.nodes[replica]
    }

    /// The replica the calling thread reads now. Cheap: a thread-local
    /// CPU number refreshed every few dozen calls and a table lookup.
    #[inline]
    pub fn current(&self) -> usize {
        if self.nodes.len() == 1 {
            return 0;
        }
        match &self.map {
            ThreadMap::Cpus(table) => {
                let cpu = cached_cpu() as usize;
                table.get(cpu).copied().unwrap_or(0) as usize
            }
            ThreadMap::Emulated => emulated_replica() % self.nodes.len(),
            ThreadMap::Custom(f) => f() % self.nodes.len(),
        }
    }
}

fn check_count(count: usize) -> Result<(), ReplicaSetError> {
    match count {
        0 => Err(ReplicaSetError::Empty),
        n if n > MAX_REPLICAS => Err(ReplicaSetError::TooMany {
            count: n,
            max: MAX_REPLICAS,
        }),
        _ => Ok(()),
    }
}

/// Replica index for every CPU: the replica on the CPU's node, else the
/// replica on the nearest node (SLIT), else replica 0.
fn cpu_table(inventory: &NodeInventory, replica_nodes: &[u32]) -> Vec<u16> {
    let max_cpu = inventory.cpus.last().unwrap_or(0) as usize;
    let mut table = vec![0u16; max_cpu + 1];
    let online: Vec<u32> = inventory.nodes.iter().collect();
    for node in inventory.with_cpus.iter() {
        let replica = match replica_nodes.iter().position(|&n| n == node) {
            Some(r) => r,
            None => {
                let distances = procfs::node_distances(node).unwrap_or_default();
                let distance_to = |target: u32| {
                    online
                        .iter()
                        .position(|&n| n == target)
                        .and_then(|i| distances.get(i).copied())
                        .unwrap_or(u64::MAX)
                };
                (0..replica_nodes.len())
                    .min_by_key(|&r| distance_to(replica_nodes[r]))
                    .unwrap_or(0)
            }
        };
        for cpu in procfs::node_cpus(node).unwrap_or_default().iter() {
            if let Some(slot) = table.get_mut(cpu as usize) {
                *slot = replica as u16;
            }
        }
    }
    table
}

thread_local! {
    /// (CPU, reads left before looking again).
    static CPU: Cell<(u32, u32)> = const { Cell::new((0, 0)) };
    /// The replica chosen with `set_thread_replica`, or `usize::MAX`.
    static EMULATED: Cell<usize> = const { Cell::new(usize::MAX) };
}

#[inline]
fn cached_cpu() -> u32 {
    CPU.with(|state| {
        let (cpu, left) = state.get();
        if left == 0 {
            let cpu = linux::current_cpu();
            state.set((cpu, CPU_REFRESH));
            cpu
        } else {
            state.set((cpu, left - 1));
            cpu
        }
    })
}

fn emulated_replica() -> usize {
    match EMULATED.with(Cell::get) {
        usize::MAX => super::sync::thread_index(),
        r => r,
    }
}

/// Chooses the replica the calling thread reads from values built on a
/// [`ReplicaSet::emulated`] set (taken modulo the set's length); `None`
/// returns to the default spreading of threads over replicas. Sets made
/// from nodes ignore it.
pub fn set_thread_replica(replica: Option<usize>) {
    EMULATED.with(|cell| cell.set(replica.unwrap_or(usize::MAX)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_set_covers_every_cpu() {
        let set = ReplicaSet::system().unwrap();
        assert!(!set.is_empty());
        let inventory = NodeInventory::live();
        let read = inventory
            .with_memory
            .intersection(&inventory.allowed_nodes)
            .intersection(&inventory.with_cpus);
        assert_eq!(set.nodes(), read.iter().collect::<Vec<_>>());
        for _ in 0..200 {
            assert!(set.current() < set.len());
        }
    }

    #[test]
    fn emulated_threads_choose_their_replica() {
        let set = ReplicaSet::emulated(vec![0, 0, 0, 0]).unwrap();
        std::thread::scope(|s| {
            for r in 0..4 {
                let set = &set;
                s.spawn(move || {
                    set_thread_replica(Some(r));
                    assert_eq!(set.current(), r);
                    set_thread_replica(Some(r + 4));
                    assert_eq!(set.current(), r, "taken modulo the set's length");
                });
            }
        });
    }

    #[test]
    fn bad_sets_are_refused() {
        assert!(matches!(
            ReplicaSet::emulated(vec![]),
            Err(ReplicaSetError::Empty)
        ));
        let err = ReplicaSet::emulated(vec![0, 9]).unwrap_err();
        assert!(err.to_string().contains("node 9 does not exist"), "{err}");
        let err = ReplicaSet::on_nodes(&NodeSet::single(5)).unwrap_err();
        assert!(err.to_string().contains("node 5"), "{err}");
        let custom = ReplicaSet::custom(vec![0, 0], || 7).unwrap();
        assert_eq!(custom.current(), 1);
    }
}
