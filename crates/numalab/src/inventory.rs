//! What a user may name on a machine — its nodes and CPUs, which have
//! memory or CPUs, which this process may use — and the one reading of
//! node and CPU lists against it ([`NodeInventory::resolve_nodes`]).
//!
//! Both a full [`Topology`](crate::Topology) and the cheaper
//! [`NodeInventory::live`] resolve lists here, and memory policies check
//! their nodes here, so `all`, `!1` and `0-2` mean the same everywhere.

use crate::sets::{CpuSet, NodeSet, ParseSetError};
use crate::sys::procfs;

/// What a node in a list must be able to do.
///
/// ```
/// use numalab::{Role, Topology};
/// let topo = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// assert_eq!(topo.resolve_nodes("all", Role::Memory)?.to_string(), "0-1");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Any node that exists (and is allowed).
    Any,
    /// A node whose CPUs run threads.
    Cpus,
    /// A node whose memory holds pages.
    Memory,
}

/// Why a node or CPU given by a user cannot be used on this topology.
///
/// ```
/// use numalab::{SpecError, Topology};
/// // Memory on nodes 0 and 1; node 2 has CPUs only.
/// let topo = Topology::from_xml_file(concat!(
///     env!("CARGO_MANIFEST_DIR"),
///     "/../../tests/topologies/cpuless.xml"
/// ))?;
/// let err = topo.check_memory_nodes(&"2".parse()?).unwrap_err();
/// match err {
///     SpecError::NodeWithoutMemory { node, with_memory } => {
///         assert_eq!((node, with_memory.to_string()), (2, "0-1".to_string()))
///     }
///     other => panic!("unexpected {other}"),
/// }
/// assert!(matches!(topo.parse_nodes("7"), Err(SpecError::NoSuchNode { node: 7, .. })));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// The list is malformed.
    #[error(transparent)]
    Parse(#[from] ParseSetError),
    /// A node that does not exist.
    #[error(
        "node {node} does not exist; this machine has {} {available}",
        if available.len() == 1 { "node" } else { "nodes" }
    )]
    NoSuchNode {
        /// The node asked for.
        node: u32,
        /// The nodes that exist.
        available: NodeSet,
    },
    /// A node the process's cpuset (cgroup) does not allow.
    #[error(
        "node {node} exists but this process may not use it (cgroup cpuset allows {} {allowed})",
        if allowed.len() == 1 { "node" } else { "nodes" }
    )]
    NodeNotAllowed {
        /// The node asked for.
        node: u32,
        /// The nodes allowed.
        allowed: NodeSet,
    },
    /// A node with no memory given where memory is needed.
    #[error("node {node} has no memory; nodes with memory: {with_memory}")]
    NodeWithoutMemory {
        /// The node asked for.
        node: u32,
        /// Nodes that have memory.
        with_memory: NodeSet,
    },
    /// A node with no CPUs given where CPUs are needed.
    #[error("node {node} has no CPUs (a memory-only node) and cannot run threads; nodes with CPUs: {with_cpus}")]
    NodeWithoutCpus {
        /// The node asked for.
        node: u32,
        /// Nodes that have CPUs.
        with_cpus: NodeSet,
    },
    /// A CPU that does not exist.
    #[error(
        "CPU {cpu} does not exist; this machine has {} {available}",
        if available.len() == 1 { "CPU" } else { "CPUs" }
    )]
    NoSuchCpu {
        /// The CPU asked for.
        cpu: u32,
        /// The CPUs that exist.
        available: CpuSet,
    },
    /// A CPU the process's cpuset (cgroup) does not allow.
    #[error(
        "CPU {cpu} exists but this process may not use it (cgroup cpuset allows {} {allowed})",
        if allowed.len() == 1 { "CPU" } else { "CPUs" }
    )]
    CpuNotAllowed {
        /// The CPU asked for.
        cpu: u32,
        /// The CPUs allowed.
        allowed: CpuSet,
    },
    /// The list, once resolved, names nothing.
    #[error("{what} list {spec:?} selects nothing on this machine")]
    Nothing {
        /// "node" or "CPU".
        what: &'static str,
        /// The list as given.
        spec: String,
    },
}

/// The nodes and CPUs a user may name: which exist, which have memory or
/// CPUs, and which this process may use. Node and CPU options are checked
/// against it before anything is allocated or started.
///
/// ```
/// use numalab::{NodeInventory, NodeSet, Role};
/// let inventory = NodeInventory {
///     nodes: "0-2".parse()?,
///     with_memory: "0-2".parse()?,
///     with_cpus: "0-1".parse()?,
///     allowed_nodes: "0-2".parse()?,
///     cpus: "0-7".parse()?,
///     allowed_cpus: "0-7".parse()?,
/// };
/// assert_eq!(inventory.resolve_nodes("all", Role::Cpus)?, "0-1".parse::<NodeSet>()?);
/// assert!(inventory.check_cpu_nodes(&NodeSet::single(2)).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeInventory {
    /// Every node.
    pub nodes: NodeSet,
    /// Nodes with memory.
    pub with_memory: NodeSet,
    /// Nodes with CPUs.
    pub with_cpus: NodeSet,
    /// Nodes this process may use: those it may allocate from, and
    /// memory-less nodes whose CPUs it may run on.
    pub allowed_nodes: NodeSet,
    /// Every CPU.
    pub cpus: CpuSet,
    /// CPUs this process may run on.
    pub allowed_cpus: CpuSet,
}

/// Adds to `allowed_nodes` each memory-less node of `memoryless` (a node
/// and its CPUs) whose CPUs meet `allowed_cpus`: a cpuset's mems (and
/// hwloc's allowed nodeset) list nodes with memory only, yet such a
/// node's CPUs are usable, and `--cpunodebind` may name it.
pub(crate) fn allow_memoryless<'a>(
    allowed_nodes: &mut NodeSet,
    memoryless: impl IntoIterator<Item = (u32, &'a CpuSet)>,
    allowed_cpus: &CpuSet,
) {
    for (node, cpus) in memoryless {
        if !cpus.intersection(allowed_cpus).is_empty() {
            allowed_nodes.insert(node);
        }
    }
}

impl NodeInventory {
    /// The running machine's, read from sysfs and `/proc/self/status`
    /// (cheaper than a full [`Topology::system`](crate::Topology::system)).
    pub fn live() -> NodeInventory {
        let nodes = procfs::online_nodes().unwrap_or_else(|_| NodeSet::single(0));
        let node_cpus: Vec<(u32, CpuSet)> = nodes
            .iter()
            .filter_map(|n| Some((n, procfs::node_cpus(n).ok()?)))
            .collect();
        let with_cpus = node_cpus
            .iter()
            .filter(|(_, c)| !c.is_empty())
            .map(|(n, _)| *n)
            .collect();
        let cpus = procfs::online_cpus().unwrap_or_default();
        let (allowed_cpus, allowed_nodes) = procfs::allowed_for_self().unwrap_or((None, None));
        let with_memory = procfs::nodes_with_memory().unwrap_or_else(|_| nodes.clone());
        let allowed_cpus = allowed_cpus.unwrap_or_else(|| cpus.clone());
        let mut allowed_nodes = allowed_nodes.unwrap_or_else(|| nodes.clone());
        allow_memoryless(
            &mut allowed_nodes,
            node_cpus
                .iter()
                .filter(|(n, _)| !with_memory.contains(*n))
                .map(|(n, cpus)| (*n, cpus)),
            &allowed_cpus,
        );
        NodeInventory {
            with_memory,
            with_cpus,
            allowed_nodes,
            allowed_cpus,
            nodes,
            cpus,
        }
    }

    /// The nodes that can play `role`: every node, those with CPUs, or
    /// those with memory.
    pub fn nodes_for(&self, role: Role) -> NodeSet {
        match role {
            Role::Any => self.nodes.clone(),
            Role::Cpus => self.with_cpus.intersection(&self.nodes),
            Role::Memory => self.with_memory.intersection(&self.nodes),
        }
    }

    /// Resolves a node list in numactl's syntax for `role`, the one
    /// reading of node lists every option and file uses: `all` is every
    /// allowed node that can play the role, `!1` the same but node 1, and
    /// an explicit list `0-3,7` must name nodes that exist, are allowed
    /// and can play the role.
    ///
    /// ```
    /// use numalab::{Role, Topology};
    /// // CPUs on nodes 0 and 2, memory on nodes 0 and 1 (a CXL node).
    /// let inventory = Topology::from_xml_file(concat!(
    ///     env!("CARGO_MANIFEST_DIR"),
    ///     "/../../tests/topologies/cpuless.xml"
    /// ))?
    /// .inventory();
    /// assert_eq!(inventory.resolve_nodes("all", Role::Any)?.to_string(), "0-2");
    /// assert_eq!(inventory.resolve_nodes("all", Role::Cpus)?.to_string(), "0,2");
    /// assert_eq!(inventory.resolve_nodes("!0", Role::Cpus)?.to_string(), "2");
    /// assert_eq!(inventory.resolve_nodes("all", Role::Memory)?.to_string(), "0-1");
    /// let err = inventory.resolve_nodes("0-1", Role::Cpus).unwrap_err();
    /// assert!(err.to_string().starts_with("node 1 has no CPUs"), "{err}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resolve_nodes(&self, spec: &str, role: Role) -> Result<NodeSet, SpecError> {
        let spec = spec.trim();
        let eligible = || self.allowed_nodes.intersection(&self.nodes_for(role));
        let nodes = if spec == "all" {
            eligible()
        } else if let Some(rest) = spec.strip_prefix('!') {
            let excluded: NodeSet = rest.parse()?;
            self.check_nodes(&excluded)?;
            eligible().difference(&excluded)
        } else {
            let nodes: NodeSet = spec.parse()?;
            self.check_role(&nodes, role)?;
            nodes
        };
        if nodes.is_empty() {
            return Err(SpecError::Nothing {
                what: "node",
                spec: spec.to_owned(),
            });
        }
        Ok(nodes)
    }

    /// Checks that every node exists, is allowed and can play `role`.
    pub fn check_role(&self, nodes: &NodeSet, role: Role) -> Result<(), SpecError> {
        let available = self.nodes.clone();
        for node in nodes.iter() {
            if !available.contains(node) {
                return Err(SpecError::NoSuchNode { node, available });
            }
            if !self.allowed_nodes.contains(node) {
                return Err(SpecError::NodeNotAllowed {
                    node,
                    allowed: self.allowed_nodes.clone(),
                });
            }
        }
        let able = self.nodes_for(role);
        let Some(node) = nodes.iter().find(|n| !able.contains(*n)) else {
            return Ok(());
        };
        Err(match role {
            Role::Any => unreachable!("every existing node can play any role"),
            Role::Cpus => SpecError::NodeWithoutCpus {
                node,
                with_cpus: self.with_cpus.clone(),
            },
            Role::Memory => SpecError::NodeWithoutMemory {
                node,
                with_memory: self.with_memory.clone(),
            },
        })
    }

    /// Parses a node list in numactl's syntax and checks every node exists
    /// and is allowed: `0-3,7`, `all` (every allowed node), `!1` (every
    /// allowed node but 1). [`resolve_nodes`](Self::resolve_nodes) with
    /// [`Role::Any`].
    pub fn parse_nodes(&self, spec: &str) -> Result<NodeSet, SpecError> {
        self.resolve_nodes(spec, Role::Any)
    }

    /// Checks that every node exists and is allowed.
    pub fn check_nodes(&self, nodes: &NodeSet) -> Result<(), SpecError> {
        self.check_role(nodes, Role::Any)
    }

    /// Checks that every node exists, is allowed and has memory.
    pub fn check_memory_nodes(&self, nodes: &NodeSet) -> Result<(), SpecError> {
        self.check_role(nodes, Role::Memory)
    }

    /// Checks that every node exists, is allowed and has CPUs.
    pub fn check_cpu_nodes(&self, nodes: &NodeSet) -> Result<(), SpecError> {
        self.check_role(nodes, Role::Cpus)
    }

    /// Parses a CPU list in numactl's syntax (`0-3,8`, `all`, `!0`) and
    /// checks every CPU exists and is allowed.
    pub fn parse_cpus(&self, spec: &str) -> Result<CpuSet, SpecError> {
        let spec = spec.trim();
        let usable = self.allowed_cpus.intersection(&self.cpus);
        let cpus = if spec == "all" {
            usable
        } else if let Some(rest) = spec.strip_prefix('!') {
            let excluded: CpuSet = rest.parse()?;
            self.check_cpus(&excluded)?;
            usable.difference(&excluded)
        } else {
            let cpus: CpuSet = spec.parse()?;
            self.check_cpus(&cpus)?;
            cpus
        };
        if cpus.is_empty() {
            return Err(SpecError::Nothing {
                what: "CPU",
                spec: spec.to_owned(),
            });
        }
        Ok(cpus)
    }

    /// Checks that every CPU exists and is allowed.
    pub fn check_cpus(&self, cpus: &CpuSet) -> Result<(), SpecError> {
        let available = self.cpus.clone();
        for cpu in cpus.iter() {
            if !available.contains(cpu) {
                return Err(SpecError::NoSuchCpu { cpu, available });
            }
            if !self.allowed_cpus.contains(cpu) {
                return Err(SpecError::CpuNotAllowed {
                    cpu,
                    allowed: self.allowed_cpus.clone(),
                });
            }
        }
        Ok(())
    }
}
