//! The running system's state that changes NUMA results: the kernel and
//! CPU, automatic NUMA balancing, transparent huge pages, each node's free
//! memory and huge-page pools. Every result numalab writes carries an
//! [`Environment`] so results from two machines, or two settings, can be
//! told apart and compared.

use std::collections::BTreeMap;
use std::io;

use serde::{Deserialize, Serialize};

use crate::policy::Support;
use crate::sys::procfs;
use crate::topology::{Topology, TopologySummary};

/// Identity of the machine.
///
/// ```
/// let host = numalab::system::Host::current();
/// // The kernel release as `uname -r` prints it, e.g. `6.8.0-45-generic`.
/// assert!(host.kernel.starts_with(|c: char| c.is_ascii_digit()), "{}", host.kernel);
/// assert!(!host.hostname.is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// Host name.
    pub hostname: String,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// CPU model name.
    pub cpu_model: Option<String>,
    /// Nominal CPU frequency in MHz, as `/proc/cpuinfo` reports it.
    pub cpu_mhz: Option<f64>,
}

impl Host {
    /// Reads the running machine's identity.
    pub fn current() -> Host {
        let (cpu_model, cpu_mhz) = procfs::cpu_model();
        Host {
            hostname: procfs::hostname(),
            kernel: procfs::kernel_release(),
            cpu_model,
            cpu_mhz,
        }
    }
}

/// Kernel settings that change NUMA results.
///
/// ```
/// use numalab::system::KernelSettings;
/// let settings = KernelSettings::current();
/// // Read from `always [madvise] never`: the word in brackets.
/// if let Some(thp) = &settings.thp_enabled {
///     assert!(["always", "madvise", "never"].contains(&thp.as_str()), "{thp}");
/// }
/// // Automatic balancing migrates pages while a measurement runs.
/// let moves_pages = settings.numa_balancing.is_some_and(|mode| mode != 0);
/// println!("NUMA balancing {}", if moves_pages { "on" } else { "off" });
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelSettings {
    /// `/proc/sys/kernel/numa_balancing`: 0 off, 1 on (2: memory tiering
    /// mode), `None` when the kernel lacks it.
    pub numa_balancing: Option<u32>,
    /// Transparent huge pages: `always`, `madvise` or `never`.
    pub thp_enabled: Option<String>,
    /// THP defragmentation setting.
    pub thp_defrag: Option<String>,
    /// Weighted-interleave weights per node (Linux 6.9), `None` when the
    /// kernel lacks them.
    pub interleave_weights: Option<BTreeMap<u32, u8>>,
    /// The kernel's memory tiers, fastest first (Linux 6.1; from 6.7
    /// placed by the firmware's HMAT figures): where reclaim demotes cold
    /// pages to and `numa_balancing` mode 2 promotes hot ones from.
    /// `None` when the kernel has none (or the result predates them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_tiers: Option<Vec<MemoryTier>>,
    /// `/sys/kernel/mm/numa/demotion_enabled`: whether reclaim moves cold
    /// pages to a slower tier instead of dropping or swapping them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demotion_enabled: Option<bool>,
}

/// One of the kernel's memory tiers
/// (`/sys/devices/virtual/memory_tiering/memory_tierN`): a lower id is a
/// faster tier (4 is plain DRAM's).
///
/// ```
/// use numalab::system::MemoryTier;
/// let cxl = MemoryTier { id: 35, nodes: "2".parse()? };
/// assert!(cxl.id > MemoryTier::DRAM);
/// # Ok::<(), numalab::ParseSetError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryTier {
    /// The tier's number: its abstract distance divided by 512.
    pub id: u32,
    /// Its nodes.
    pub nodes: crate::NodeSet,
}

impl MemoryTier {
    /// The tier Linux puts DRAM (and memory it knows nothing of) in.
    pub const DRAM: u32 = 4;
}

impl KernelSettings {
    /// Reads the settings now.
    pub fn current() -> KernelSettings {
        let (thp_enabled, thp_defrag) = procfs::transparent_hugepages().unzip();
        KernelSettings {
            numa_balancing: procfs::numa_balancing(),
            thp_enabled,
            thp_defrag,
            interleave_weights: procfs::interleave_weights(),
            memory_tiers: procfs::memory_tiers().map(|tiers| {
                tiers
                    .into_iter()
                    .map(|(id, nodes)| MemoryTier { id, nodes })
                    .collect()
            }),
            demotion_enabled: procfs::demotion_enabled(),
        }
    }
}

/// Huge pages of one size on one node.
///
/// ```
/// use numalab::system::HugePagePool;
/// // 512 pages of 2 MiB reserved on a node, 384 of them free.
/// let pool = HugePagePool { page_bytes: 2 << 20, total: 512, free: 384 };
/// assert_eq!((pool.total - pool.free) * pool.page_bytes, 256 << 20); // in use
/// assert_eq!(pool.free * pool.page_bytes, 768 << 20); // left for new buffers
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HugePagePool {
    /// Page size in bytes.
    pub page_bytes: u64,
    /// Pages reserved in the pool.
    pub total: u64,
    /// Pages free in the pool.
    pub free: u64,
}

/// One node's memory, read now.
///
/// ```
/// use numalab::system::NodeMemory;
/// let node0 = NodeMemory::read(0)?;
/// assert_eq!(node0.node, 0);
/// assert!(0 < node0.free_bytes && node0.free_bytes <= node0.total_bytes);
/// assert!(node0.huge_pages.iter().all(|pool| pool.free <= pool.total));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeMemory {
    /// The node.
    pub node: u32,
    /// Installed memory in bytes.
    pub total_bytes: u64,
    /// Free memory in bytes (`MemFree`).
    pub free_bytes: u64,
    /// Page cache in bytes (`FilePages`), mostly reclaimable.
    pub file_bytes: u64,
    /// The page cache on the file LRU lists (`Active(file)` +
    /// `Inactive(file)`): what reclaim can free (tmpfs and shared memory
    /// count in `file_bytes` only).
    #[serde(default)]
    pub file_lru_bytes: u64,
    /// hugetlb pools.
    pub huge_pages: Vec<HugePagePool>,
}

impl NodeMemory {
    /// Reads `node`'s memory from sysfs.
    pub fn read(node: u32) -> io::Result<NodeMemory> {
        let info = procfs::node_meminfo(node)?;
        Ok(NodeMemory {
            node,
            total_bytes: info.total,
            free_bytes: info.free,
            file_bytes: info.file_pages,
            file_lru_bytes: info.file_lru,
            huge_pages: procfs::node_huge_pools(node)?
                .into_iter()
                .map(|p| HugePagePool {
                    page_bytes: p.page_size,
                    total: p.total,
                    free: p.free,
                })
                .collect(),
        })
    }
}

/// The node whose memory `local` and default allocations of `node`'s CPUs
/// come from, read from sysfs now: `node` itself when it has memory; for a
/// memory-less node the nearest node with memory by the firmware's
/// distances (Linux's `numa_mem_id`), the lowest id among equals. `node`
/// itself when sysfs cannot tell.
///
/// ```
/// use numalab::system::local_memory_node;
/// // Where this thread's `local` pages go.
/// let home = local_memory_node(numalab::affinity::current().node);
/// assert!(numalab::NodeInventory::live().with_memory.contains(home));
/// ```
pub fn local_memory_node(node: u32) -> u32 {
    local_memory_nodes(&crate::NodeSet::single(node))
        .first()
        .unwrap_or(node)
}

/// [`local_memory_node`] of each of `nodes`: where `local` and default
/// pages of threads on them go. Reads which nodes have memory once, and
/// distances only for nodes without.
///
/// ```
/// use numalab::system::local_memory_nodes;
/// use numalab::NodeInventory;
/// let inventory = NodeInventory::live();
/// assert!(local_memory_nodes(&inventory.with_cpus).is_subset(&inventory.with_memory));
/// ```
pub fn local_memory_nodes(nodes: &crate::NodeSet) -> crate::NodeSet {
    let Ok(with_memory) = procfs::nodes_with_memory() else {
        return nodes.clone();
    };
    let mut online = None;
    nodes
        .iter()
        .map(|node| {
            if with_memory.contains(node) {
                return node;
            }
            let online = online.get_or_insert_with(|| procfs::online_nodes().unwrap_or_default());
            let distances = procfs::node_distances(node).unwrap_or_default();
            // `distance` lists one value per online node, in node order.
            let distance = |to: u32| {
                let index = online.iter().position(|n| n == to)?;
                distances.get(index).copied()
            };
            crate::topology::nearest_with_memory(node, &with_memory, distance).unwrap_or(node)
        })
        .collect()
}

/// Pages the kernel's memory tiering has moved since boot, for one node:
/// demoted off it to a slower tier by reclaim, and promoted onto it from
/// a slower tier by `numa_balancing`'s tiering mode. Two readings apart
/// say what tiering did in between ([`TieringMoves::since`]).
///
/// ```
/// use numalab::system::TieringMoves;
/// let before = TieringMoves { node: 0, demoted: 10, promoted: 0 };
/// let after = TieringMoves { node: 0, demoted: 2058, promoted: 3 };
/// assert_eq!(after.since(&before), TieringMoves { node: 0, demoted: 2048, promoted: 3 });
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TieringMoves {
    /// The node.
    pub node: u32,
    /// Pages demoted off it.
    pub demoted: u64,
    /// Pages promoted onto it.
    pub promoted: u64,
}

impl TieringMoves {
    /// The node's counts now; `None` when the kernel keeps none (before
    /// Linux 6.1).
    pub fn read(node: u32) -> Option<TieringMoves> {
        let (demoted, promoted) = procfs::node_tiering_moves(node)?;
        Some(TieringMoves {
            node,
            demoted,
            promoted,
        })
    }

    /// What moved between `earlier` and this reading.
    pub fn since(&self, earlier: &TieringMoves) -> TieringMoves {
        TieringMoves {
            node: self.node,
            demoted: self.demoted.saturating_sub(earlier.demoted),
            promoted: self.promoted.saturating_sub(earlier.promoted),
        }
    }
}

/// Everything a result file records about where it was measured.
///
/// ```
/// use numalab::system::Environment;
/// use numalab::Topology;
/// let topology = Topology::from_synthetic("pack:2 numa:2 core:4 pu:2")?;
/// let environment = Environment::current(&topology);
/// assert_eq!((environment.topology.nodes, environment.topology.cpus), (4, 32));
/// assert_eq!(environment.numalab_version, numalab::VERSION);
/// // Saved with a result, it reads back unchanged.
/// let text = serde_json::to_string(&environment)?;
/// assert_eq!(serde_json::from_str::<Environment>(&text)?, environment);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    /// The machine.
    pub host: Host,
    /// Kernel settings.
    pub kernel: KernelSettings,
    /// Which placement features the kernel has.
    pub support: Support,
    /// The topology in brief.
    pub topology: TopologySummary,
    /// numalab's version.
    pub numalab_version: String,
}

impl Environment {
    /// Reads the running system's environment.
    pub fn current(topology: &Topology) -> Environment {
        Environment {
            host: Host::current(),
            kernel: KernelSettings::current(),
            support: Support::probe(),
            topology: topology.summary(),
            numalab_version: crate::VERSION.to_owned(),
        }
    }
}

/// Whether numalab runs as root (effective user 0): what writing the
/// kernel's global settings (interleave weights, dropping caches) needs.
///
/// ```
/// let root = numalab::system::is_root();
/// println!("{}", if root { "root" } else { "not root" });
/// ```
pub fn is_root() -> bool {
    crate::sys::linux::effective_uid() == 0
}

/// The base page size in bytes (`sysconf(_SC_PAGESIZE)`: 4 KiB on x86-64).
///
/// ```
/// assert!(numalab::system::page_size().is_power_of_two());
/// ```
pub fn page_size() -> usize {
    crate::sys::linux::page_size()
}

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`).
///
/// ```
/// let before = numalab::system::thread_cpu_time();
/// let _spin: u64 = (0..1_000_000u64).map(std::hint::black_box).sum();
/// assert!(numalab::system::thread_cpu_time() >= before);
/// ```
pub fn thread_cpu_time() -> std::time::Duration {
    crate::sys::linux::thread_cpu_time()
}

/// CPU time the calling process, all threads, has used
/// (`CLOCK_PROCESS_CPUTIME_ID`).
pub fn process_cpu_time() -> std::time::Duration {
    crate::sys::linux::process_cpu_time()
}

/// `CLOCK_MONOTONIC` since boot: the same clock in every process of the
/// machine, so instants taken in two processes can be compared (a writer
/// process's start against a reader process's end).
pub fn monotonic() -> std::time::Duration {
    crate::sys::linux::monotonic()
}

/// While it lives, Ctrl-C (`SIGINT`), `SIGTERM` and `SIGHUP` wait: they
/// are blocked on the calling thread, and one that arrives stays pending
/// until the guard is dropped, then takes its usual effect (a handler
/// installed meanwhile runs). For work that must not be cut short and must
/// not share the process with another thread while it runs: a second
/// thread, even a sleeping signal watcher, changes how the kernel's NUMA
/// balancing scans the process, and so where and whether its pages show
/// up. Create it before starting any thread (threads inherit the mask).
///
/// ```
/// let held = numalab::system::SignalsHeld::new()?;
/// // … fill and count pages: a Ctrl-C now waits …
/// assert_eq!(held.pending(), None);
/// drop(held); // a Ctrl-C that came meanwhile takes effect here
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct SignalsHeld {
    _private: (),
}

/// The signals a [`SignalsHeld`] holds back.
const HELD: [i32; 3] = [
    crate::sys::linux::SIGINT,
    crate::sys::linux::SIGTERM,
    crate::sys::linux::SIGHUP,
];

impl SignalsHeld {
    /// Blocks `SIGINT`, `SIGTERM` and `SIGHUP` until dropped.
    pub fn new() -> io::Result<SignalsHeld> {
        crate::sys::linux::block_signals(&HELD, true)?;
        Ok(SignalsHeld { _private: () })
    }

    /// The signal that arrived and waits, if any (the first of `SIGINT`,
    /// `SIGTERM`, `SIGHUP` pending).
    pub fn pending(&self) -> Option<i32> {
        crate::sys::linux::pending_signal(&HELD)
    }
}

impl Drop for SignalsHeld {
    fn drop(&mut self) {
        let _ = crate::sys::linux::block_signals(&HELD, false);
    }
}

/// Gives `SIGINT` and `SIGQUIT` their default effect (ending the process),
/// as a child whose parent ignored them must.
pub fn default_interrupts() {
    crate::sys::linux::ignore_signal(crate::sys::linux::SIGINT, false);
    crate::sys::linux::ignore_signal(crate::sys::linux::SIGQUIT, false);
}

/// Makes the calling process receive `SIGTERM` when the thread that
/// started it ends (`PR_SET_PDEATHSIG`: also when that thread's process is
/// killed with `SIGKILL`), then checks that `parent` is still its parent:
/// a parent that died before this call gives an error (`ESRCH`) instead of
/// a process that would never be told. Two system calls and no
/// allocation, so it can run between `fork` and `exec`
/// ([`CommandExt::pre_exec`](std::os::unix::process::CommandExt::pre_exec)).
/// The signal survives `exec` (except of set-user-ID programs).
///
/// ```
/// use std::os::unix::process::CommandExt;
///
/// let parent = std::process::id();
/// let mut command = std::process::Command::new("true");
/// // SAFETY: end_with_parent makes two system calls and allocates nothing.
/// unsafe { command.pre_exec(move || numalab::system::end_with_parent(parent)) };
/// assert!(command.status()?.success());
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn end_with_parent(parent: u32) -> io::Result<()> {
    crate::sys::linux::set_parent_death_signal(crate::sys::linux::SIGTERM)?;
    if crate::sys::linux::parent_process_id() != parent {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

/// The process id of the calling process's parent: after the parent died,
/// the process that adopted it (`getppid`).
///
/// ```
/// assert_ne!(numalab::system::parent_process_id(), std::process::id());
/// ```
pub fn parent_process_id() -> u32 {
    crate::sys::linux::parent_process_id()
}
