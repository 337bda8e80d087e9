//! numalab: place memory and threads on NUMA nodes, and check where pages
//! really landed.
#![warn(missing_docs)]
// Model-checking builds (`--cfg loom`) build only what the ring's and the
// replication protocols' models use.
#![cfg_attr(loom, allow(dead_code, unused_imports))]

pub mod affinity;
pub mod audit;
pub mod buffer;
pub mod files;
pub mod inventory;
pub mod launch;
pub mod locate;
pub mod pagecache;
pub mod policy;
pub mod profile;
pub mod replicated;
pub mod ring;
pub mod sets;
pub(crate) mod sys;
pub mod system;
#[doc(hidden)]
pub mod testing;
pub mod topology;
pub mod units;

pub use buffer::{BufferError, BufferOptions, HugePages, NodeBuffer};
pub use inventory::{NodeInventory, Role, SpecError};
pub use policy::{InterleaveWeights, MemPolicy, PolicyError, RangeMode, Support};
#[cfg(not(loom))]
pub use replicated::ReplicatedPages;
pub use replicated::{Mode, ReplicaSet, Replicated};
pub use sets::{CpuSet, NodeSet, ParseSetError};
pub use topology::{Topology, TopologyError};
