//! The plan: an experiment resolved against a [`Topology`] — each thread's
//! CPU and node, each region's size, users and kernel policy — and
//! checked before anything is allocated or started: threads beyond the
//! CPUs, nodes that do not exist, more memory than the nodes have free.

use std::collections::BTreeMap;

use numalab::system::NodeMemory;
use numalab::{
    CpuSet, HugePages, MemPolicy, NodeSet, PolicyError, Role, SpecError, Support, Topology,
};
use serde::{Deserialize, Serialize};

use super::config::Experiment;
use super::values::{Pattern, PolicySpec, Sharing, ThreadPlacement};
use super::warning::{Cause, Warning, WarningKind};

/// One worker thread's place.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::experiment::{Experiment, Plan};
/// // 2 nodes of 2 CPUs: node 0 has CPUs 0-1, node 1 CPUs 2-3.
/// let topo = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// let exp = Experiment::from_toml_str(
///     "[threads]\ncount = 2\n[memory]\nsize = \"1MiB\"\n[access]\nops = 1000", "x")?;
/// let plan = Plan::resolve(&exp, &topo)?;
/// let second = &plan.threads[1];
/// assert_eq!((second.cpu, second.node, second.region), (2, 1, 1), "balanced: one per node");
/// assert_eq!(second.ops, Some(500), "the operations are split");
/// assert_eq!((second.share_offset, second.share_len), (0, 1 << 20), "its node's own region");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadPlan {
    /// Thread number, from 0.
    pub thread: usize,
    /// The CPU it is pinned to.
    pub cpu: u32,
    /// That CPU's node.
    pub node: u32,
    /// The region it accesses.
    pub region: usize,
    /// Offset of its own share of the region (what sequential patterns
    /// walk and what it faults in first with `first-touch`).
    pub share_offset: u64,
    /// Length of its share.
    pub share_len: u64,
    /// Operations it performs per run (`None` when the run is timed).
    pub ops: Option<u64>,
    /// With `replicate`: the copy of its region it reads (its node's, or
    /// the nearest one); it writes to all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<usize>,
}

/// One memory region.
///
/// ```
/// use numalab::{MemPolicy, NodeSet, Topology};
/// use numalab_bench::experiment::{Experiment, Plan};
/// let topo = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// let exp = Experiment::from_toml_str(
///     "[threads]\ncount = 4\n[memory]\nsize = \"8MiB\"\nsharing = \"shared\"\npolicy = \"interleave\"",
///     "x")?;
/// let plan = Plan::resolve(&exp, &topo)?;
/// let region = &plan.regions[0];
/// assert_eq!((region.bytes, region.threads.len()), (8 << 20, 4));
/// assert_eq!(region.requested.to_string(), "interleave");
/// assert_eq!(region.expected_nodes, "0-1".parse::<NodeSet>()?);
/// assert!(matches!(region.policy, MemPolicy::Interleave(_)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionPlan {
    /// Region number, from 0.
    pub region: usize,
    /// Its size in bytes.
    pub bytes: u64,
    /// The policy the experiment asked for (`local`, `remote`, ...;
    /// written as that text).
    pub requested: PolicySpec,
    /// The kernel policy that gives it, on this topology.
    pub policy: MemPolicy,
    /// No policy: each thread faults in its own share.
    pub first_touch: bool,
    /// The node of the threads that use it (for a shared region, the node
    /// with most of them).
    pub home: u32,
    /// Nodes the pages should be on.
    pub expected_nodes: NodeSet,
    /// The threads that use it.
    pub threads: Vec<usize>,
    /// Page size backing it.
    pub huge_pages: HugePages,
    /// With `replicate`: the node of each copy, in copy order (ascending
    /// node ids), each a full copy of `bytes` bound to its node; empty
    /// otherwise. `policy` is then `bind` to all of them and
    /// `expected_nodes` their set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<u32>,
}

/// An experiment resolved against a topology.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::experiment::{Cause, Experiment, Plan};
/// let one_node = Topology::from_synthetic("numa:1 core:2 pu:1")?;
/// let exp = Experiment::from_toml_str(
///     "[threads]\ncount = 2\n[memory]\nsize = \"1MiB\"\npolicy = \"remote\"", "x")?;
/// let plan = Plan::resolve(&exp, &one_node)?;
/// assert_eq!(plan.cpus(), [0, 1]);
/// assert!(!plan.oversubscribed);
/// // No other node: the plan says `remote` cannot hold.
/// assert_eq!(plan.warnings[0].cause, Some(Cause::NoRemoteNode { region: 0 }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Each thread.
    pub threads: Vec<ThreadPlan>,
    /// Each region.
    pub regions: Vec<RegionPlan>,
    /// Whether threads share CPUs.
    pub oversubscribed: bool,
    /// What the plan could not honour as asked (e.g. `remote` on a
    /// one-node machine).
    pub warnings: Vec<Warning>,
}

/// Why an experiment cannot be placed on this machine.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::experiment::{Experiment, Plan, PlanError};
/// let topo = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// let exp = Experiment::from_toml_str("[threads]\ncount = 6", "x")?;
/// match Plan::resolve(&exp, &topo) {
///     Err(PlanError::TooManyThreads { threads, cpus, .. }) => assert_eq!((threads, cpus), (3, 2)),
///     Err(other) => panic!("unexpected: {other}"),
///     Ok(_) => panic!("6 threads on 4 CPUs need threads.oversubscribe"),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// More threads on a node (or CPU list) than it has CPUs.
    #[error(
        "threads.count = {count} with placement {placement} puts {} on {place}, which has {} this process may use ({cpu_list}); lower threads.count, choose other CPUs, or set threads.oversubscribe = true",
        numalab::units::count(*threads, "thread"), numalab::units::count(*cpus, "CPU")
    )]
    TooManyThreads {
        /// Threads asked for.
        count: u32,
        /// The placement.
        placement: String,
        /// Threads that landed there.
        threads: usize,
        /// "node 0" or "CPUs 0-3".
        place: String,
        /// CPUs available there.
        cpus: usize,
        /// Which.
        cpu_list: CpuSet,
    },
    /// A node or CPU that does not exist or may not be used.
    #[error("{key} = \"{value}\": {source}")]
    Spec {
        /// The experiment key.
        key: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        source: SpecError,
    },
    /// A policy that cannot be applied here.
    #[error("memory.policy = \"{value}\": {source}")]
    Policy {
        /// The policy as written.
        value: String,
        /// What is wrong.
        source: PolicyError,
    },
    /// No CPU to run on.
    #[error("threads.placement = \"{placement}\" leaves no CPU this process may use")]
    NoCpus {
        /// The placement.
        placement: String,
    },
    /// The regions need more memory than the nodes have free.
    #[error("the plan needs {} on {place}, which has {} free{}; lower memory.size or threads.count, or choose other nodes",
        numalab::units::mib(*needed), numalab::units::mib(*free),
        if *reclaimable > 0 { format!(" (and {} of reclaimable page cache)", numalab::units::mib(*reclaimable)) } else { String::new() })]
    Memory {
        /// "node 1" or "nodes 0-3".
        place: String,
        /// Bytes needed.
        needed: u64,
        /// Bytes free.
        free: u64,
        /// Reclaimable page cache.
        reclaimable: u64,
    },
    /// Not enough free explicit huge pages.
    #[error("the plan needs {needed} free 2 MiB huge pages on {place}, which has {free}; reserve them with `echo N > /sys/devices/system/node/nodeX/hugepages/hugepages-2048kB/nr_hugepages`, or set memory.huge_pages = \"thp\"")]
    HugePages {
        /// "node 1" or "nodes 0-3".
        place: String,
        /// Pages needed.
        needed: u64,
        /// Pages free.
        free: u64,
    },
    /// Shares too small for one operation.
    #[error("{0}")]
    Layout(String),
    /// A value out of range (an experiment not read through
    /// [`Experiment::from_toml_str`], which checks them first).
    #[error(transparent)]
    Config(#[from] super::config::ConfigError),
}

/// A node's memory available to the plan.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::experiment::plan::NodeFree;
/// use numalab_bench::experiment::{Experiment, Plan, PlanError};
/// let topo = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// let exp = Experiment::from_toml_str("[threads]\ncount = 2\n[memory]\nsize = \"1GiB\"", "x")?;
/// // Pretend each node has 512 MiB free: a 1 GiB region does not fit.
/// let free = |_node: u32| Some(NodeFree { free: 512 << 20, ..NodeFree::default() });
/// let err = Plan::resolve_with(&exp, &topo, &free).unwrap_err();
/// assert!(matches!(err, PlanError::Memory { needed, .. } if needed == 1 << 30));
/// // This machine's node 0, read from sysfs, has some memory free.
/// if let Some(node0) = NodeFree::live(0) {
///     assert!(node0.free > 0);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeFree {
    /// Free bytes.
    pub free: u64,
    /// Reclaimable page cache.
    pub reclaimable: u64,
    /// Free explicit 2 MiB huge pages.
    pub huge_2m: u64,
}

impl NodeFree {
    /// Read now from sysfs.
    pub fn live(node: u32) -> Option<NodeFree> {
        let memory = NodeMemory::read(node).ok()?;
        Some(NodeFree {
            free: memory.free_bytes,
            reclaimable: memory.file_bytes,
            huge_2m: memory
                .huge_pages
                .iter()
                .filter(|p| p.page_bytes == 2 << 20)
                .map(|p| p.free)
                .sum(),
        })
    }
}

fn place_name(nodes: &NodeSet) -> String {
    if nodes.len() == 1 {
        format!("node {nodes}")
    } else {
        format!("nodes {nodes}")
    }
}

impl Plan {
    /// Resolves `exp` on `topology`; for this machine, memory is checked
    /// against each node's free memory now.
    ///
    /// ```
    /// use numalab::Topology;
    /// use numalab_bench::experiment::{Experiment, Plan};
    /// let topo = Topology::from_synthetic("pack:2 numa:1 core:4 pu:1")?;
    /// let exp = Experiment::from_toml_str(
    ///     "[threads]\ncount = 4\nplacement = \"ratio:3:1\"\n[memory]\npolicy = \"remote\"", "x")?;
    /// let plan = Plan::resolve(&exp, &topo)?;
    /// let nodes: Vec<u32> = plan.threads.iter().map(|t| t.node).collect();
    /// assert_eq!(nodes, [0, 0, 0, 1]);
    /// assert_eq!(plan.regions[0].policy.to_string(), "bind:1", "node 0's threads use node 1");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resolve(exp: &Experiment, topology: &Topology) -> Result<Plan, PlanError> {
        let live = topology.is_this_system();
        Self::resolve_with(exp, topology, &|node| {
            if live {
                NodeFree::live(node)
            } else {
                None
            }
        })
    }

    /// Resolves with `free(node)` telling each node's available memory
    /// (`None`: unknown, not checked).
    pub fn resolve_with(
        exp: &Experiment,
        topology: &Topology,
        free: &dyn Fn(u32) -> Option<NodeFree>,
    ) -> Result<Plan, PlanError> {
        exp.validate()?;
        let mut warnings = Vec::new();
        let (cpus, oversubscribed) = thread_cpus(exp, topology, &mut warnings)?;
        let node_of = |cpu: u32| topology.cpu(cpu).and_then(|c| c.node).unwrap_or(0);

        // Who uses which region.
        let thread_nodes: Vec<u32> = cpus.iter().map(|&c| node_of(c)).collect();
        let groups: Vec<Vec<usize>> = match exp.memory.sharing {
            Sharing::Shared => vec![(0..cpus.len()).collect()],
            Sharing::PerThread => (0..cpus.len()).map(|t| vec![t]).collect(),
            Sharing::PerNode => {
                let mut by_node: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
                for (t, node) in thread_nodes.iter().enumerate() {
                    by_node.entry(*node).or_default().push(t);
                }
                by_node.into_values().collect()
            }
        };
        let mut region_of = vec![0; cpus.len()];
        for (r, users) in groups.iter().enumerate() {
            for &t in users {
                region_of[t] = r;
            }
        }

        let replicas = match &exp.memory.policy {
            PolicySpec::Replicate(nodes) => Some(replica_nodes(exp, topology, nodes.as_deref())?),
            _ => None,
        };
        let replica_of: Vec<Option<usize>> = thread_nodes
            .iter()
            .map(|&node| {
                replicas
                    .as_ref()
                    .map(|copies| nearest_replica(topology, copies, node))
            })
            .collect();

        let support = topology.is_this_system().then(Support::probe);
        let mut regions = Vec::with_capacity(groups.len());
        for (r, users) in groups.iter().enumerate() {
            let mut count: BTreeMap<u32, usize> = BTreeMap::new();
            for &t in users {
                *count.entry(thread_nodes[t]).or_default() += 1;
            }
            // The node with most users; the lowest id on a tie.
            let home = count
                .iter()
                .max_by_key(|(node, n)| (**n, std::cmp::Reverse(**node)))
                .map_or(0, |(node, _)| *node);
            let user_nodes: NodeSet = count.keys().copied().collect();
            let (policy, first_touch) = match &replicas {
                Some(copies) => (MemPolicy::Bind(copies.iter().copied().collect()), false),
                None => region_policy(
                    exp,
                    topology,
                    r,
                    home,
                    &user_nodes,
                    users.len(),
                    &mut warnings,
                )?,
            };
            if let Some(support) = &support {
                support
                    .require(&policy)
                    .map_err(|source| PlanError::Policy {
                        value: exp.memory.policy.to_string(),
                        source,
                    })?;
            }
            let expected_nodes =
                if first_touch || matches!(policy, MemPolicy::Default | MemPolicy::Local) {
                    // A memory-less node's threads allocate from the
                    // nearest node with memory.
                    topology.local_memory_nodes(&user_nodes)
                } else {
                    policy.nodes()
                };
            regions.push(RegionPlan {
                region: r,
                bytes: exp.memory.size.0,
                requested: exp.memory.policy.clone(),
                policy,
                first_touch,
                home,
                expected_nodes,
                threads: users.clone(),
                huge_pages: exp.memory.huge_pages,
                replicas: replicas.clone().unwrap_or_default(),
            });
        }
        if let Some(copies) = &replicas {
            replication_notes(exp, copies, &regions, &replica_of, &mut warnings);
        }

        let mut threads = shares(exp, &cpus, &thread_nodes, &region_of, &groups)?;
        for (thread, replica) in threads.iter_mut().zip(&replica_of) {
            thread.replica = *replica;
        }
        check_memory(&regions, &engine_memory(exp, threads.len()), topology, free)?;
        Ok(Plan {
            threads,
            regions,
            oversubscribed,
            warnings,
        })
    }

    /// The CPUs of the threads, in thread order.
    pub fn cpus(&self) -> Vec<u32> {
        self.threads.iter().map(|t| t.cpu).collect()
    }

    /// Operations of one run, all threads together (0 for a timed plan).
    pub fn total_ops(&self) -> u64 {
        self.threads.iter().filter_map(|t| t.ops).sum()
    }

    /// Every thread's operations `factor` times (a timed plan is left as
    /// it is): the run's total grows by exactly that factor.
    pub fn scale_ops(&mut self, factor: u64) {
        for t in &mut self.threads {
            t.ops = t.ops.map(|ops| ops.saturating_mul(factor));
        }
    }
}

/// The CPUs of each node that this process may use, one per core first,
/// then SMT siblings (as likwid-pin and OpenMP's `spread` fill a node).
fn node_cpus(topology: &Topology, node: u32) -> Vec<u32> {
    let mut cpus: Vec<(usize, u32)> = Vec::new();
    let mut seen_per_core: BTreeMap<u32, usize> = BTreeMap::new();
    let mut all: Vec<_> = topology
        .cpus
        .iter()
        .filter(|c| c.node == Some(node) && topology.allowed_cpus.contains(c.id))
        .collect();
    all.sort_by_key(|c| c.id);
    for cpu in all {
        let rank = seen_per_core.entry(cpu.core).or_default();
        cpus.push((*rank, cpu.id));
        *rank += 1;
    }
    cpus.sort();
    cpus.into_iter().map(|(_, id)| id).collect()
}

/// Splits `count` in proportion to `weights` (largest remainder; ties to
/// the earlier entry).
fn split(count: usize, weights: &[u64]) -> Vec<usize> {
    // Parts are u32 and at most a few thousand nodes: no overflow in u128.
    let total: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    if total == 0 {
        return vec![0; weights.len()];
    }
    let mut parts: Vec<usize> = weights
        .iter()
        .map(|&w| (count as u128 * u128::from(w) / total) as usize)
        .collect();
    let mut left = count - parts.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&i| {
        let rem = count as u128 * u128::from(weights[i]) % total;
        (std::cmp::Reverse(rem), i)
    });
    for i in order.into_iter().cycle() {
        if left == 0 {
            break;
        }
        if weights[i] > 0 {
            parts[i] += 1;
            left -= 1;
        }
    }
    parts
}

fn thread_cpus(
    exp: &Experiment,
    topology: &Topology,
    warnings: &mut Vec<Warning>,
) -> Result<(Vec<u32>, bool), PlanError> {
    let count = exp.threads.count as usize;
    let placement = exp.threads.placement.to_string();
    let oversubscribe = exp.threads.oversubscribe;
    let cpu_nodes: Vec<u32> = topology
        .nodes_with_cpus()
        .iter()
        .filter(|&n| !node_cpus(topology, n).is_empty())
        .collect();

    // An explicit CPU list: exactly those, in order.
    if let ThreadPlacement::Cpus(list) = &exp.threads.placement {
        let set = topology
            .parse_cpus(list)
            .map_err(|source| PlanError::Spec {
                key: "threads.placement",
                value: placement.clone(),
                source,
            })?;
        let list: Vec<u32> = set.iter().collect();
        if list.is_empty() {
            return Err(PlanError::NoCpus { placement });
        }
        if count > list.len() && !oversubscribe {
            return Err(PlanError::TooManyThreads {
                count: exp.threads.count,
                placement,
                threads: count,
                place: format!("CPUs {set}"),
                cpus: list.len(),
                cpu_list: set,
            });
        }
        let cpus: Vec<u32> = list.iter().copied().cycle().take(count).collect();
        return Ok((cpus, count > list.len()));
    }

    let (nodes, weights): (Vec<u32>, Vec<u64>) = match &exp.threads.placement {
        ThreadPlacement::Balanced => (cpu_nodes.clone(), vec![1; cpu_nodes.len()]),
        ThreadPlacement::Nodes(list) => {
            let set =
                topology
                    .resolve_nodes(list, Role::Cpus)
                    .map_err(|source| PlanError::Spec {
                        key: "threads.placement",
                        value: placement.clone(),
                        source,
                    })?;
            let nodes: Vec<u32> = set.iter().filter(|n| cpu_nodes.contains(n)).collect();
            let weights = vec![1; nodes.len()];
            (nodes, weights)
        }
        ThreadPlacement::Ratio(parts) => {
            let mut weights = vec![0u64; cpu_nodes.len().min(parts.len())];
            if parts.len() > cpu_nodes.len() {
                warnings.push(Warning::new(
                    WarningKind::Placement,
                    format!(
                        "threads.placement = \"{placement}\" names {} but only {} {} CPUs this process may use: the extra parts run on the same {}, so the split is not the one asked for",
                        numalab::units::count(parts.len(), "node"),
                        place_name(&cpu_nodes.iter().copied().collect()),
                        if cpu_nodes.len() == 1 { "has" } else { "have" },
                        if cpu_nodes.len() == 1 { "node" } else { "nodes" },
                    ),
                ).because(Cause::Key { key: "threads.placement".into() }));
            }
            if weights.is_empty() {
                return Err(PlanError::NoCpus { placement });
            }
            let k = weights.len();
            for (i, part) in parts.iter().enumerate() {
                weights[i % k] += u64::from(*part);
            }
            (cpu_nodes[..k].to_vec(), weights)
        }
        ThreadPlacement::Cpus(_) => unreachable!("handled above"),
    };
    if nodes.is_empty() {
        return Err(PlanError::NoCpus { placement });
    }
    let per_node = split(count, &weights);
    let mut cpus = Vec::with_capacity(count);
    let mut oversubscribed = false;
    for (node, n) in nodes.iter().zip(per_node) {
        let available = node_cpus(topology, *node);
        if n > available.len() {
            if !oversubscribe {
                return Err(PlanError::TooManyThreads {
                    count: exp.threads.count,
                    placement,
                    threads: n,
                    place: format!("node {node}"),
                    cpus: available.len(),
                    cpu_list: available.iter().copied().collect(),
                });
            }
            oversubscribed = true;
        }
        cpus.extend(available.iter().copied().cycle().take(n));
    }
    if oversubscribed {
        warnings.push(Warning::new(
            WarningKind::Oversubscribed,
            format!("{count} threads share fewer CPUs (threads.oversubscribe = true): they take turns, so times include waiting for a CPU"),
        ));
    }
    Ok((cpus, oversubscribed))
}

fn region_policy(
    exp: &Experiment,
    topology: &Topology,
    region: usize,
    home: u32,
    user_nodes: &NodeSet,
    users: usize,
    warnings: &mut Vec<Warning>,
) -> Result<(MemPolicy, bool), PlanError> {
    let memory_nodes = topology
        .nodes_with_memory()
        .intersection(&topology.allowed_nodes);
    let shared_note = |what: &str, node: u32, warnings: &mut Vec<Warning>| {
        if user_nodes.len() > 1 {
            warnings.push(Warning::new(
                WarningKind::Placement,
                format!(
                    "region {region} is shared by threads on nodes {user_nodes}: `{what}` can only be {what} to one node's threads; it is on node {node} (memory.sharing = \"per-node\" gives each node its own region)"
                ),
            ).because(Cause::SharedRegion { region }));
        }
    };
    let policy = match &exp.memory.policy {
        PolicySpec::FirstTouch => return Ok((MemPolicy::Default, true)),
        PolicySpec::Replicate(_) => unreachable!("replicated regions are planned by their copies"),
        PolicySpec::Local => {
            let node = if memory_nodes.contains(home) {
                home
            } else {
                let nearest = topology
                    .nodes_by_distance(home)
                    .into_iter()
                    .find(|n| memory_nodes.contains(*n))
                    .ok_or_else(|| {
                        PlanError::Layout("no node with memory this process may use".into())
                    })?;
                warnings.push(Warning::new(
                    WarningKind::Placement,
                    format!("node {home} has no memory: region {region}'s `local` pages go to the nearest node with memory, {nearest}"),
                ).because(Cause::NodeWithoutMemory { region, node: home }));
                nearest
            };
            shared_note("local", node, warnings);
            MemPolicy::Bind(NodeSet::single(node))
        }
        PolicySpec::Remote => {
            // Not the threads' own memory: their nodes', or for a
            // memory-less node the nearest node's, which is its local.
            let own = topology.local_memory_nodes(user_nodes).union(user_nodes);
            let other = topology
                .nodes_by_distance(home)
                .into_iter()
                .find(|n| memory_nodes.contains(*n) && !own.contains(*n));
            let other = other.or_else(|| {
                topology
                    .nodes_by_distance(home)
                    .into_iter()
                    .find(|n| memory_nodes.contains(*n))
            });
            match other {
                Some(node) => {
                    if users > 0 && own.contains(node) {
                        warnings.push(Warning::new(
                            WarningKind::Placement,
                            format!("region {region} is shared by threads on nodes {user_nodes}: no node is remote to all of them; it is on node {node}, local to that node's threads"),
                        ).because(Cause::SharedRegion { region }));
                    }
                    MemPolicy::Bind(NodeSet::single(node))
                }
                None => {
                    let node = if memory_nodes.contains(home) {
                        home
                    } else {
                        memory_nodes.first().unwrap_or(home)
                    };
                    warnings.push(Warning::new(
                        WarningKind::Placement,
                        format!(
                            "memory.policy = \"remote\": this machine has one NUMA node with memory ({}), so the pages cannot be remote; region {region} is on node {node} and its figures are local figures",
                            memory_nodes
                        ),
                    ).because(Cause::NoRemoteNode { region }));
                    MemPolicy::Bind(NodeSet::single(node))
                }
            }
        }
        PolicySpec::Kernel(text) => {
            let text = if text == "interleave" {
                "interleave:all"
            } else {
                text.as_str()
            };
            topology
                .parse_policy(text)
                .map_err(|source| PlanError::Policy {
                    value: exp.memory.policy.to_string(),
                    source,
                })?
        }
    };
    Ok((policy, false))
}

/// The nodes of a replicated region's copies, ascending: `nodes` as the
/// experiment names them (`replicate:0,1`), else every node with CPUs this
/// process may use — its own memory, or the nearest node with memory when
/// it has none. Memory-only nodes (CXL, HBM) get no copy of their own: no
/// thread runs there to read it.
fn replica_nodes(
    exp: &Experiment,
    topology: &Topology,
    nodes: Option<&str>,
) -> Result<Vec<u32>, PlanError> {
    let memory_nodes = topology
        .nodes_with_memory()
        .intersection(&topology.allowed_nodes);
    let set = match nodes {
        Some(list) => topology
            .resolve_nodes(list, Role::Memory)
            .map_err(|source| PlanError::Spec {
                key: "memory.policy",
                value: exp.memory.policy.to_string(),
                source,
            })?,
        None => {
            let mut set = NodeSet::new();
            for node in topology
                .nodes_with_cpus()
                .iter()
                .filter(|&n| !node_cpus(topology, n).is_empty())
            {
                if memory_nodes.contains(node) {
                    set.insert(node);
                } else if let Some(nearest) = topology
                    .nodes_by_distance(node)
                    .into_iter()
                    .find(|n| memory_nodes.contains(*n))
                {
                    set.insert(nearest);
                }
            }
            set
        }
    };
    if set.is_empty() {
        return Err(PlanError::Layout(format!(
            "memory.policy = \"{}\": no node with memory this process may use",
            exp.memory.policy
        )));
    }
    Ok(set.iter().collect())
}

/// The copy a thread on `node` reads: its node's, else the nearest by
/// firmware distance (the lowest id on a tie or without distances).
fn nearest_replica(topology: &Topology, copies: &[u32], node: u32) -> usize {
    copies
        .iter()
        .position(|&n| n == node)
        .or_else(|| {
            topology
                .nodes_by_distance(node)
                .into_iter()
                .find_map(|n| copies.iter().position(|&c| c == n))
        })
        .unwrap_or(0)
}

/// Says when a replicated experiment cannot show what mirroring gains:
/// one copy (one node), or regions whose threads all read one copy.
fn replication_notes(
    exp: &Experiment,
    copies: &[u32],
    regions: &[RegionPlan],
    replica_of: &[Option<usize>],
    warnings: &mut Vec<Warning>,
) {
    let policy = &exp.memory.policy;
    if copies.len() == 1 {
        let why = match policy {
            PolicySpec::Replicate(None) => {
                " (the only node with CPUs and memory this process may use)"
            }
            _ => "",
        };
        warnings.push(Warning::new(
            WarningKind::Inconclusive,
            format!(
                "memory.policy = \"{policy}\": one copy, on node {}{why}: every thread reads it as it would `local` memory, so replication cannot help on one node; these are local figures with the write path of a single copy",
                copies[0]
            ),
        ).because(Cause::OneCopy));
        return;
    }
    let read_from = |region: &RegionPlan| -> NodeSet {
        region
            .threads
            .iter()
            .filter_map(|&t| replica_of[t])
            .map(|r| r as u32)
            .collect()
    };
    if exp.memory.sharing != Sharing::Shared {
        warnings.push(Warning::new(
            WarningKind::Inconclusive,
            format!(
                "memory.policy = \"{policy}\" with memory.sharing = \"{}\": each region is read by one node's threads only, so its copies on the other nodes are written and never read; memory.sharing = \"shared\" mirrors one region for every thread (the deck's Experiment 2)",
                exp.memory.sharing
            ),
        ).because(Cause::CopiesNeverRead));
        return;
    }
    for region in regions {
        let read = read_from(region);
        if read.len() == 1 {
            let copy = read.first().unwrap_or(0) as usize;
            warnings.push(Warning::new(
                WarningKind::Inconclusive,
                format!(
                    "memory.policy = \"{policy}\": every thread of region {} reads copy {copy} (node {}); its other {} {} written and never read, so this cell shows what mirroring costs writes, not what it gains reads",
                    region.region,
                    copies[copy],
                    numalab::units::count_as(copies.len() - 1, "copy", "copies"),
                    if copies.len() == 2 { "is" } else { "are" },
                ),
            ).because(Cause::OneCopyRead { region: region.region }));
        }
    }
}

/// Each thread's share of its region, and its operations.
fn shares(
    exp: &Experiment,
    cpus: &[u32],
    thread_nodes: &[u32],
    region_of: &[usize],
    groups: &[Vec<usize>],
) -> Result<Vec<ThreadPlan>, PlanError> {
    let bytes = exp.memory.size.0;
    let op = exp.access.op_size.0;
    let minimum = match exp.access.pattern {
        Pattern::Copy => 2 * op,
        Pattern::Strided(stride) => op.max(stride.min(op)),
        _ => op,
    };
    let total_ops = exp.access.total_ops();
    let n = cpus.len() as u64;
    let mut threads = Vec::with_capacity(cpus.len());
    for (t, &cpu) in cpus.iter().enumerate() {
        let users = &groups[region_of[t]];
        let k = users.len() as u64;
        let index = users.iter().position(|&u| u == t).unwrap_or(0) as u64;
        // Page-aligned shares when the pages allow it, so first touch puts
        // whole pages on each thread's node; else op-aligned.
        let unit = if bytes / k >= 4096 { 4096 } else { op };
        let start = (bytes * index / k) / unit * unit;
        let end = if index + 1 == k {
            bytes
        } else {
            (bytes * (index + 1) / k) / unit * unit
        };
        let share_len = end - start;
        let needs_share = exp.access.pattern != Pattern::Random;
        if needs_share && share_len < minimum {
            return Err(PlanError::Layout(format!(
                "memory.size = {} split among the {k} threads of region {} leaves shares of {share_len} bytes, less than one {} operation of access.op_size = {}; raise memory.size or lower threads.count",
                exp.memory.size,
                region_of[t],
                exp.access.pattern,
                exp.access.op_size
            )));
        }
        let ops = total_ops.map(|total| total / n + u64::from((t as u64) < total % n));
        threads.push(ThreadPlan {
            thread: t,
            cpu,
            node: thread_nodes[t],
            region: region_of[t],
            share_offset: start,
            share_len,
            ops,
            replica: None,
        });
    }
    Ok(threads)
}

/// What the engine allocates besides the regions' data.
struct EngineMemory {
    /// Each region's lock array (per copy), placed with the region.
    locks_per_region: u64,
    /// The threads' latency reservoirs, on the heap (any node).
    samples: u64,
}

fn engine_memory(exp: &Experiment, threads: usize) -> EngineMemory {
    let locked = exp.access.sync == super::values::Sync::Rwlock
        && exp.memory.replication.library_mode().is_none();
    let locks = if locked {
        let bytes = u64::from(exp.access.lock_stripes)
            * std::mem::size_of::<super::rwlock::StripeLock>() as u64;
        bytes.div_ceil(4096) * 4096
    } else {
        0
    };
    let per_thread = if exp.access.latency_sample == 0 {
        0
    } else {
        super::access::samples_per_thread(threads)
    };
    EngineMemory {
        locks_per_region: locks,
        // Reads and writes, 8 bytes a timing, plus their nanoseconds when
        // the run ends.
        samples: (threads * per_thread * 2 * 16) as u64,
    }
}

/// Refuses regions (with their locks, and the threads' latency samples)
/// that the nodes cannot hold. Sums saturate: a size no machine has is
/// refused, never wrapped into a small one.
fn check_memory(
    regions: &[RegionPlan],
    engine: &EngineMemory,
    topology: &Topology,
    free: &dyn Fn(u32) -> Option<NodeFree>,
) -> Result<(), PlanError> {
    let all: NodeSet = topology
        .nodes_with_memory()
        .intersection(&topology.allowed_nodes);
    // Bytes that must be on one node, and bytes that may go anywhere.
    let mut on_node: BTreeMap<u32, u64> = BTreeMap::new();
    let mut anywhere: Vec<(NodeSet, u64)> = Vec::new();
    let huge = regions
        .iter()
        .any(|r| r.huge_pages == HugePages::Explicit2M);
    for region in regions {
        let bytes = if region.huge_pages == HugePages::Explicit2M {
            region.bytes.div_ceil(2 << 20).saturating_mul(2 << 20)
        } else {
            region.bytes
        };
        // Locks are base pages; with explicit huge pages only the pool
        // is counted.
        let bytes = if huge {
            bytes
        } else {
            bytes.saturating_add(engine.locks_per_region)
        };
        let mut add = |node: u32, bytes: u64| {
            let sum = on_node.entry(node).or_default();
            *sum = sum.saturating_add(bytes);
        };
        if !region.replicas.is_empty() {
            // A full copy on each of its nodes.
            for &node in &region.replicas {
                add(node, bytes);
            }
            continue;
        }
        match &region.policy {
            MemPolicy::Bind(nodes) if nodes.len() == 1 => {
                add(nodes.first().unwrap_or(0), bytes);
            }
            MemPolicy::Bind(nodes) => anywhere.push((nodes.clone(), bytes)),
            MemPolicy::Interleave(nodes) => {
                let k = nodes.len().max(1) as u64;
                for node in nodes.iter() {
                    add(node, bytes / k);
                }
            }
            MemPolicy::WeightedInterleave(weights) => {
                let total: u64 = weights.values().map(|&w| u64::from(w)).sum();
                for (node, w) in weights {
                    let share = u128::from(bytes) * u128::from(*w) / u128::from(total.max(1));
                    add(*node, u64::try_from(share).unwrap_or(u64::MAX));
                }
            }
            _ => anywhere.push((all.clone(), bytes)),
        }
    }
    if engine.samples > 0 && !huge {
        anywhere.push((all.clone(), engine.samples));
    }
    let available = |node: u32| free(node);
    let unit = |bytes: u64| if huge { bytes.div_ceil(2 << 20) } else { bytes };
    let room = |f: NodeFree| {
        if huge {
            f.huge_2m
        } else {
            f.free + f.reclaimable
        }
    };
    let refuse = |nodes: &NodeSet, needed: u64, free: u64, reclaimable: u64| {
        let place = place_name(nodes);
        if huge {
            PlanError::HugePages {
                place,
                needed: unit(needed),
                free,
            }
        } else {
            PlanError::Memory {
                place,
                needed,
                free,
                reclaimable,
            }
        }
    };
    for (&node, &needed) in &on_node {
        if let Some(f) = available(node) {
            if unit(needed) > room(f) {
                return Err(refuse(
                    &NodeSet::single(node),
                    needed,
                    if huge { f.huge_2m } else { f.free },
                    if huge { 0 } else { f.reclaimable },
                ));
            }
        }
    }
    // Everything together against everything the nodes have.
    let mut nodes = all.clone();
    for (set, _) in &anywhere {
        nodes = nodes.union(set);
    }
    let total: u64 = on_node
        .values()
        .chain(anywhere.iter().map(|(_, b)| b))
        .fold(0u64, |sum, b| sum.saturating_add(*b));
    let frees: Vec<NodeFree> = nodes.iter().filter_map(available).collect();
    if !frees.is_empty() {
        let free_sum: u64 = frees
            .iter()
            .map(|f| if huge { f.huge_2m } else { f.free })
            .sum();
        let reclaimable: u64 = if huge {
            0
        } else {
            frees.iter().map(|f| f.reclaimable).sum()
        };
        if unit(total) > free_sum + reclaimable {
            return Err(refuse(&nodes, total, free_sum, reclaimable));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
