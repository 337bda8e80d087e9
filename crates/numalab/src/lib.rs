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

/// This build of numalab: the crate's version, with the commit it was
/// built from as SemVer build metadata when it was built from a git
/// checkout (`0.1.0+3f2c1a9b7d4e`), or a packager's `NUMALAB_BUILD`.
/// `numalab --version` prints it, and every result records it as
/// `numalab_version`, so results of different builds can be told apart.
///
/// ```
/// let (version, _build) = numalab::VERSION.split_once('+').unwrap_or((numalab::VERSION, ""));
/// assert_eq!(version, env!("CARGO_PKG_VERSION"));
/// ```
pub const VERSION: &str = env!("NUMALAB_VERSION");

pub use buffer::{BufferError, BufferOptions, HugePages, NodeBuffer};
pub use inventory::{NodeInventory, Role, SpecError};
pub use policy::{InterleaveWeights, MemPolicy, PolicyError, RangeMode, Support};
#[cfg(not(loom))]
pub use replicated::ReplicatedPages;
pub use replicated::{Mode, ReplicaSet, Replicated};
pub use sets::{CpuSet, NodeSet, ParseSetError};
pub use topology::{Topology, TopologyError};

/// The operating system's error at the root of `err`: the first
/// [`std::io::Error`] in its chain of causes, if there is one. A program
/// (or a binding) tells "permission denied" from "not found" by it,
/// whichever numalab error carried it.
///
/// ```
/// let err = numalab::BufferError::Os {
///     what: "map",
///     len: 4096,
///     source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
/// };
/// let os = numalab::os_error(&err).unwrap();
/// assert_eq!(os.kind(), std::io::ErrorKind::PermissionDenied);
/// ```
pub fn os_error<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    let mut cause = Some(err);
    while let Some(current) = cause {
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        cause = current.source();
    }
    None
}
