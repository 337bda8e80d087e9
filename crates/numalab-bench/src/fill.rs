//! `numalab fill`, the NUMA test write-up's question: does an allocation
//! larger than one node's free memory spill to the other node (or go to
//! swap)? Allocate and touch memory under a policy, then find every page
//! (move_pages) and the process's memory per node as `numastat -p` counts
//! it, beside each node's free memory before and after.

use std::collections::BTreeMap;
use std::time::Instant;

use numalab::audit::PlacementAudit;
use numalab::locate::{LocateError, PageHistogram, ProcessMemory, Sample};
use numalab::system::{Environment, KernelSettings, NodeMemory, TieringMoves};
use numalab::units::Size;
use numalab::{
    affinity, BufferError, BufferOptions, CpuSet, HugePages, InterleaveWeights, MemPolicy,
    NodeBuffer, NodeSet, PolicyError, Topology,
};
use serde::{Deserialize, Serialize};

use crate::document::Schema;

/// What to fill, and how.
///
/// ```
/// use numalab::{HugePages, MemPolicy};
/// use numalab_bench::fill::FillConfig;
///
/// let config = FillConfig::new(64 << 20);
/// assert_eq!(config.policy, MemPolicy::Default);
/// assert_eq!(config.huge_pages, HugePages::None);
/// assert!(config.cpus.is_none() && config.weights.is_none());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct FillConfig {
    /// Bytes to allocate and touch.
    pub size: u64,
    /// Page size asked for.
    pub huge_pages: HugePages,
    /// The memory policy (`default`: the local node first, then the
    /// nearest).
    pub policy: MemPolicy,
    /// The CPUs the filling thread is bound to, if any.
    pub cpus: Option<CpuSet>,
    /// Weighted-interleave weights to install for the fill (restored
    /// after it), node to weight.
    pub weights: Option<BTreeMap<u32, u8>>,
}

impl FillConfig {
    /// `size` bytes of base pages under the default policy, on whatever
    /// CPU the thread runs.
    pub fn new(size: u64) -> FillConfig {
        FillConfig {
            size,
            huge_pages: HugePages::None,
            policy: MemPolicy::Default,
            cpus: None,
            weights: None,
        }
    }
}

/// One node's share of the filled memory.
///
/// ```
/// use numalab_bench::fill::FillNode;
///
/// let node = FillNode { node: 1, bytes: 64 << 20, share: 0.25, free_before: None, free_after: None,
///     tiering: None };
/// assert_eq!(node.bytes >> 20, 64);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FillNode {
    /// The node.
    pub node: u32,
    /// Bytes of the buffer on it.
    pub bytes: u64,
    /// Share of the buffer's present pages on it, 0 to 1.
    pub share: f64,
    /// Free memory before the fill, in bytes.
    pub free_before: Option<u64>,
    /// Free memory after the fill (the buffer still held), in bytes.
    pub free_after: Option<u64>,
    /// Pages the kernel's memory tiering moved during the fill, on the
    /// whole machine: demoted off this node to a slower tier by reclaim,
    /// promoted onto it by `numa_balancing` mode 2. `None` where the
    /// kernel keeps no such counts (or in results from before them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiering: Option<TieringMoves>,
}

/// The `numalab.fill` document.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::fill::{run, FillConfig};
///
/// let topology = Topology::system().unwrap();
/// let report = run(&topology, &FillConfig::new(4 << 20)).unwrap();
/// let filled: u64 = report.nodes.iter().map(|n| n.bytes).sum();
/// assert_eq!(filled, 4 << 20, "every page touched and found");
/// assert_eq!(report.fallback_bytes, 0, "4 MiB fits the local node");
///
/// // Saved as JSON, it reads back as itself.
/// use numalab_bench::document::Document;
/// let text = Document::new(&report).to_json().unwrap();
/// let back: numalab_bench::fill::FillReport = Document::parse(&text).unwrap();
/// assert_eq!(back.pages, report.pages);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FillReport {
    /// Bytes asked for.
    pub size_bytes: u64,
    /// The policy (`default` when none was given).
    pub policy: MemPolicy,
    /// The CPUs the filling thread was bound to, if any.
    pub cpus: Option<CpuSet>,
    /// The node of the CPU that touched the pages (what `default` and
    /// `local` follow).
    pub thread_node: NodeSet,
    /// Page size asked for.
    pub huge_pages: HugePages,
    /// `/proc/sys/kernel/numa_balancing` during the fill.
    pub numa_balancing: Option<u32>,
    /// Transparent huge pages setting.
    pub thp_enabled: Option<String>,
    /// Time to map and touch every page, in seconds.
    pub seconds: f64,
    /// Where every page of the buffer is (move_pages).
    pub pages: PageHistogram,
    /// Per node: the buffer's bytes, share and free memory.
    pub nodes: Vec<FillNode>,
    /// The whole process's private memory per node at the end, as
    /// `numastat -p` counts it (the buffer plus numalab itself).
    pub process_bytes: BTreeMap<u32, u64>,
    /// Bytes that fell back to nodes other than the policy's first choice.
    pub fallback_bytes: u64,
    /// The pages against the policy.
    pub audit: PlacementAudit,
    /// Where this was measured.
    pub environment: Environment,
}

impl Schema for FillReport {
    const NAME: &'static str = "numalab.fill";
    const VERSION: u32 = 1;
}

/// Why a fill could not be done.
///
/// ```
/// use numalab::units::Size;
/// use numalab_bench::fill::FillError;
///
/// let err = FillError::TooLarge(Size(1 << 40));
/// assert_eq!(err.to_string(), "1 TiB does not fit this machine's addresses");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FillError {
    /// The interleave weights could not be installed.
    #[error(transparent)]
    Weights(#[from] PolicyError),
    /// The thread could not be bound to the CPUs asked for.
    #[error(transparent)]
    Bind(#[from] affinity::BindError),
    /// More bytes than this machine can address.
    #[error("{0} does not fit this machine's addresses")]
    TooLarge(Size),
    /// The memory could not be allocated under the policy (for `bind`:
    /// refused before anything is allocated when the nodes cannot hold it).
    #[error("cannot fill {size} under {policy}")]
    Allocate {
        /// Bytes asked for.
        size: Size,
        /// The policy.
        policy: MemPolicy,
        /// Why.
        source: BufferError,
    },
    /// The pages could not be found.
    #[error(transparent)]
    Locate(#[from] LocateError),
}

/// Fills memory as `config` says on this machine (`topology`), finds where
/// every page landed, and keeps the buffer until the report is made.
pub fn run(topology: &Topology, config: &FillConfig) -> Result<FillReport, FillError> {
    // Installed for the fill and restored after (at drop).
    let _weights = match &config.weights {
        Some(weights) => Some(InterleaveWeights::set(weights)?),
        None => None,
    };
    if let Some(cpus) = &config.cpus {
        affinity::bind_thread_to_cpus(cpus)?;
    }
    let policy = config.policy.clone();
    let free = |topology: &Topology| -> BTreeMap<u32, u64> {
        topology
            .nodes
            .iter()
            .filter_map(|n| NodeMemory::read(n.id).ok().map(|m| (n.id, m.free_bytes)))
            .collect()
    };
    let free_before = free(topology);
    let moves = |topology: &Topology| -> BTreeMap<u32, TieringMoves> {
        topology
            .nodes
            .iter()
            .filter_map(|n| TieringMoves::read(n.id).map(|m| (n.id, m)))
            .collect()
    };
    let moves_before = moves(topology);
    let kernel = KernelSettings::current();

    let size = usize::try_from(config.size).map_err(|_| FillError::TooLarge(Size(config.size)))?;
    let started = Instant::now();
    let buffer = NodeBuffer::with_options(
        size,
        BufferOptions::new(policy.clone()).huge_pages(config.huge_pages),
    )
    .map_err(|source| FillError::Allocate {
        size: Size(config.size),
        policy: policy.clone(),
        source,
    })?;
    let seconds = started.elapsed().as_secs_f64();

    let pages = buffer.locate(Sample::All)?;
    let audit = buffer.audit_pages(&pages);
    let process_bytes = ProcessMemory::of_process(std::process::id() as i32)
        .map(|m| m.private_per_node())
        .unwrap_or_default();
    let free_after = free(topology);
    let moves_after = moves(topology);
    let present = pages.present().max(1);
    let nodes: Vec<FillNode> = topology
        .nodes
        .iter()
        .map(|n| FillNode {
            node: n.id,
            bytes: pages.on_node(n.id) * pages.page_size,
            share: pages.on_node(n.id) as f64 / present as f64,
            free_before: free_before.get(&n.id).copied(),
            free_after: free_after.get(&n.id).copied(),
            tiering: moves_after
                .get(&n.id)
                .zip(moves_before.get(&n.id))
                .map(|(after, before)| after.since(before)),
        })
        .collect();
    let fallback_pages = pages.present() - pages.on_nodes(&audit.expected_nodes);
    let report = FillReport {
        size_bytes: config.size,
        policy,
        cpus: config.cpus.clone(),
        thread_node: buffer.touched_from().clone(),
        huge_pages: config.huge_pages,
        numa_balancing: kernel.numa_balancing,
        thp_enabled: kernel.thp_enabled.clone(),
        seconds,
        fallback_bytes: fallback_pages * pages.page_size,
        pages,
        nodes,
        process_bytes,
        audit,
        environment: Environment::current(topology),
    };
    drop(buffer);
    Ok(report)
}
