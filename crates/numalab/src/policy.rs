//! Memory policies: where the kernel takes pages from.
//!
//! [`MemPolicy`] names every policy Linux offers, spelt as `numactl` spells
//! it. A policy is applied to the calling thread ([`MemPolicy::apply_to_thread`],
//! like `numactl --membind`) or to a range of memory
//! ([`MemPolicy::apply_to_range`], like `mbind(2)`), optionally moving the
//! pages already there. [`Support::probe`] tells which policies the running
//! kernel accepts, so an unsupported one is an error naming the kernel
//! feature, never a silent fallback.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::inventory::{NodeInventory, SpecError};
use crate::sets::{NodeSet, ParseSetError};
use crate::sys::{linux, procfs};

/// A Linux memory policy.
///
/// ```
/// use numalab::MemPolicy;
/// let policy: MemPolicy = "interleave:0-3".parse()?;
/// assert_eq!(policy, MemPolicy::Interleave("0-3".parse()?));
/// assert_eq!(policy.to_string(), "interleave:0-3");
/// let weighted: MemPolicy = "weighted-interleave:0=3,1=1".parse()?;
/// assert_eq!(weighted.nodes().to_string(), "0-1");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MemPolicy {
    /// The process default: allocate on the node of the CPU that touches the
    /// page first, falling back to the nearest node with free memory.
    Default,
    /// `MPOL_LOCAL`: allocate on the touching CPU's node (as `--localalloc`).
    Local,
    /// `MPOL_BIND`: only these nodes; fail (or reclaim, or OOM) rather than
    /// use another (as `--membind`).
    Bind(NodeSet),
    /// `MPOL_PREFERRED`: this node first, any other when it is full (as
    /// `--preferred`).
    Preferred(u32),
    /// `MPOL_PREFERRED_MANY` (Linux 5.15): these nodes first, nearest one to
    /// the CPU, any other when they are full (as `--preferred-many`).
    PreferredMany(NodeSet),
    /// `MPOL_INTERLEAVE`: round-robin pages over these nodes (as
    /// `--interleave`).
    Interleave(NodeSet),
    /// `MPOL_WEIGHTED_INTERLEAVE` (Linux 6.9): round-robin with per-node
    /// weights (as `--weighted-interleave`). The kernel takes the weights
    /// from its global table in `/sys/kernel/mm/mempolicy/weighted_interleave/`;
    /// see [`InterleaveWeights`] to set them.
    WeightedInterleave(BTreeMap<u32, u8>),
}

/// Why a policy could not be applied.
///
/// ```
/// use numalab::{MemPolicy, PolicyError, Topology};
/// let err = "spread:0-1".parse::<MemPolicy>().unwrap_err();
/// assert!(matches!(err, PolicyError::Parse { .. }), "{err}");
/// // Nodes are checked against the machine: this one has nodes 0 and 1.
/// let topo = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// match topo.parse_policy("bind:3").unwrap_err() {
///     PolicyError::Node(spec) => assert!(spec.to_string().starts_with("node 3 does not exist")),
///     other => panic!("unexpected {other}"),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A node in the policy cannot be used.
    #[error(transparent)]
    Node(#[from] SpecError),
    /// The running kernel lacks the policy.
    #[error("the running kernel (Linux {kernel}) does not support {policy}: it needs {feature}")]
    Unsupported {
        /// The policy's name.
        policy: &'static str,
        /// The kernel feature that is missing.
        feature: &'static str,
        /// The running kernel's release.
        kernel: String,
    },
    /// The kernel rejected the policy although numalab found nothing wrong
    /// with it.
    #[error("the kernel rejected {policy}: {source}")]
    Rejected {
        /// The policy as written.
        policy: String,
        /// The kernel's error.
        source: io::Error,
    },
    /// The memory range is not mapped.
    #[error("the range {addr:#x}+{len} is not mapped in this process")]
    NotMapped {
        /// Start of the range.
        addr: usize,
        /// Length of the range.
        len: usize,
    },
    /// With [`RangeMode::MoveStrict`], some pages could not be moved.
    #[error("some pages of {addr:#x}+{len} could not be moved to {policy} (in use or pinned)")]
    NotMoved {
        /// Start of the range.
        addr: usize,
        /// Length of the range.
        len: usize,
        /// The policy as written.
        policy: String,
    },
    /// Weights given for a weighted interleave differ from the kernel's
    /// global table.
    #[error("weighted interleave asks for weights {wanted} but the kernel's table has {current}; set them first (InterleaveWeights::set, as root)")]
    WeightsDiffer {
        /// The weights asked for.
        wanted: String,
        /// The kernel's weights.
        current: String,
    },
    /// A malformed policy string.
    #[error("invalid policy {input:?}: {reason}")]
    Parse {
        /// The text as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl From<ParseSetError> for PolicyError {
    fn from(err: ParseSetError) -> Self {
        PolicyError::Node(SpecError::Parse(err))
    }
}

/// What happens to pages already in a range when a policy is applied to it.
///
/// ```
/// use numalab::{MemPolicy, NodeBuffer, RangeMode};
/// assert_eq!(RangeMode::default(), RangeMode::FutureOnly);
/// // Pages already touched move to node 0; the range keeps the policy.
/// let buffer = NodeBuffer::new(1 << 20, MemPolicy::Local)?;
/// let bind = MemPolicy::Bind("0".parse()?);
/// bind.apply_to_range(buffer.as_ptr(), buffer.len(), RangeMode::Move)?;
/// assert_eq!(MemPolicy::of_address(buffer.as_ptr())?, bind);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RangeMode {
    /// Only pages allocated from now on follow the policy.
    #[default]
    FutureOnly,
    /// Existing pages are migrated to follow the policy (`MPOL_MF_MOVE`);
    /// pages that cannot move stay where they are.
    Move,
    /// As `Move`, but an error if any page could not be moved
    /// (`MPOL_MF_MOVE | MPOL_MF_STRICT`).
    MoveStrict,
}

fn weights_to_string(weights: &BTreeMap<u32, u8>) -> String {
    weights
        .iter()
        .map(|(n, w)| format!("{n}={w}"))
        .collect::<Vec<_>>()
        .join(",")
}

impl MemPolicy {
    /// The policy's name as `numactl` spells the option.
    pub fn name(&self) -> &'static str {
        match self {
            MemPolicy::Default => "default",
            MemPolicy::Local => "local",
            MemPolicy::Bind(_) => "bind",
            MemPolicy::Preferred(_) => "preferred",
            MemPolicy::PreferredMany(_) => "preferred-many",
            MemPolicy::Interleave(_) => "interleave",
            MemPolicy::WeightedInterleave(_) => "weighted-interleave",
        }
    }

    /// The nodes the policy names (empty for `default` and `local`).
    pub fn nodes(&self) -> NodeSet {
        match self {
            MemPolicy::Default | MemPolicy::Local => NodeSet::new(),
            MemPolicy::Preferred(node) => NodeSet::single(*node),
            MemPolicy::Bind(nodes)
            | MemPolicy::PreferredMany(nodes)
            | MemPolicy::Interleave(nodes) => nodes.clone(),
            MemPolicy::WeightedInterleave(weights) => weights.keys().copied().collect(),
        }
    }

    /// The kernel's `MPOL_*` mode number.
    pub(crate) fn kernel_mode(&self) -> i32 {
        match self {
            MemPolicy::Default => linux::MPOL_DEFAULT,
            MemPolicy::Local => linux::MPOL_LOCAL,
            MemPolicy::Bind(_) => linux::MPOL_BIND,
            MemPolicy::Preferred(_) => linux::MPOL_PREFERRED,
            MemPolicy::PreferredMany(_) => linux::MPOL_PREFERRED_MANY,
            MemPolicy::Interleave(_) => linux::MPOL_INTERLEAVE,
            MemPolicy::WeightedInterleave(_) => linux::MPOL_WEIGHTED_INTERLEAVE,
        }
    }

    /// Checks the policy against a machine's nodes: every node exists, is
    /// allowed and has memory.
    pub fn check_nodes(&self, nodes: &NodeInventory) -> Result<(), PolicyError> {
        let named = self.nodes();
        if named.is_empty() && !matches!(self, MemPolicy::Default | MemPolicy::Local) {
            return Err(PolicyError::Parse {
                input: self.to_string(),
                reason: "the policy names no node".into(),
            });
        }
        nodes.check_memory_nodes(&named)?;
        Ok(())
    }

    /// Checks the policy against this machine: nodes (as
    /// [`check_nodes`](Self::check_nodes)), kernel support, and for a
    /// weighted interleave that the kernel's weights are the ones asked for.
    pub fn check(&self) -> Result<(), PolicyError> {
        self.check_nodes(&NodeInventory::live())?;
        Support::probe().require(self)?;
        if let MemPolicy::WeightedInterleave(wanted) = self {
            let current = procfs::interleave_weights().unwrap_or_default();
            if wanted.iter().any(|(n, w)| current.get(n) != Some(w)) {
                let current = wanted
                    .keys()
                    .filter_map(|n| current.get(n).map(|w| (*n, *w)))
                    .collect();
                return Err(PolicyError::WeightsDiffer {
                    wanted: weights_to_string(wanted),
                    current: weights_to_string(&current),
                });
            }
        }
        Ok(())
    }

    /// Makes this the calling thread's policy for its future allocations
    /// (`set_mempolicy(2)`); child processes inherit it.
    pub fn apply_to_thread(&self) -> Result<(), PolicyError> {
        linux::set_mempolicy(self.kernel_mode(), self.nodes().as_words())
            .map_err(|err| self.kernel_error(err))
    }

    /// Applies the policy to `[addr, addr + len)` (`mbind(2)`); `addr` must
    /// be page-aligned. Pages not yet touched follow it when first touched;
    /// `mode` says what happens to pages already there. Changing where
    /// pages live never changes their contents.
    ///
    /// Moving to an interleave puts every page where the interleave would
    /// have put it: `mbind` alone moves only pages outside the new nodes,
    /// so a range all on node 0 moved to `interleave:0-3` would stay on
    /// node 0; numalab then moves each page to its node with
    /// `move_pages(2)`. A huge page moves whole, to the node the
    /// interleave gives its huge-page-sized slot, as Linux places huge
    /// pages under an interleave.
    pub fn apply_to_range(
        &self,
        addr: *const u8,
        len: usize,
        mode: RangeMode,
    ) -> Result<(), PolicyError> {
        self.mbind(addr, len, mode)?;
        if mode == RangeMode::FutureOnly {
            return Ok(());
        }
        let Some(weights) = self.interleave_weights() else {
            return Ok(());
        };
        let stuck = spread(addr, len, &weights).map_err(|err| self.kernel_error(err))?;
        if stuck > 0 && mode == RangeMode::MoveStrict {
            return Err(PolicyError::NotMoved {
                addr: addr as usize,
                len,
                policy: self.to_string(),
            });
        }
        Ok(())
    }

    /// [`apply_to_range`](Self::apply_to_range) for any byte range: the
    /// whole pages holding `[addr, addr + len)`, the first and last
    /// rounded out (so bytes sharing those pages are placed with it, as
    /// libnuma's `numa_tonode_memory` does). A range that wraps around
    /// the address space is [`PolicyError::NotMapped`].
    pub fn apply_to_pages(
        &self,
        addr: *const u8,
        len: usize,
        mode: RangeMode,
    ) -> Result<(), PolicyError> {
        let page = linux::page_size();
        let start = addr as usize & !(page - 1);
        let end = (addr as usize)
            .checked_add(len)
            .and_then(|end| end.checked_next_multiple_of(page))
            .ok_or(PolicyError::NotMapped {
                addr: addr as usize,
                len,
            })?;
        self.apply_to_range(start as *const u8, end - start, mode)
    }

    /// For an interleave: its nodes in the kernel's order, each with its
    /// weight (1 for a plain interleave).
    fn interleave_weights(&self) -> Option<Vec<(u32, u32)>> {
        match self {
            MemPolicy::Interleave(nodes) => Some(nodes.iter().map(|n| (n, 1)).collect()),
            MemPolicy::WeightedInterleave(weights) => Some(
                weights
                    .iter()
                    .map(|(n, w)| (*n, u32::from(*w).max(1)))
                    .collect(),
            ),
            _ => None,
        }
    }

    fn mbind(&self, addr: *const u8, len: usize, mode: RangeMode) -> Result<(), PolicyError> {
        let flags = match mode {
            RangeMode::FutureOnly => 0,
            RangeMode::Move => linux::MPOL_MF_MOVE,
            RangeMode::MoveStrict => linux::MPOL_MF_MOVE | linux::MPOL_MF_STRICT,
        };
        linux::mbind(
            addr,
            len,
            self.kernel_mode(),
            self.nodes().as_words(),
            flags,
        )
        .map_err(|err| match err.raw_os_error() {
            Some(libc::EFAULT) | Some(libc::ENOMEM) => PolicyError::NotMapped {
                addr: addr as usize,
                len,
            },
            Some(libc::EIO) => PolicyError::NotMoved {
                addr: addr as usize,
                len,
                policy: self.to_string(),
            },
            _ => self.kernel_error(err),
        })
    }

    /// The calling thread's current policy.
    pub fn of_thread() -> io::Result<MemPolicy> {
        let (mode, mask) = linux::get_thread_mempolicy()?;
        Ok(Self::from_kernel(mode, &mask))
    }

    /// The policy governing the page at `addr`.
    pub fn of_address(addr: *const u8) -> io::Result<MemPolicy> {
        let (mode, mask) = linux::get_range_mempolicy(addr)?;
        Ok(Self::from_kernel(mode, &mask))
    }

    fn from_kernel(mode: i32, mask: &[u64]) -> MemPolicy {
        let nodes = NodeSet::from_words(mask);
        match mode & !linux::MPOL_MODE_FLAGS {
            linux::MPOL_LOCAL => MemPolicy::Local,
            linux::MPOL_BIND => MemPolicy::Bind(nodes),
            // An empty preferred mask is the kernel's old spelling of local.
            linux::MPOL_PREFERRED => nodes.first().map_or(MemPolicy::Local, MemPolicy::Preferred),
            linux::MPOL_PREFERRED_MANY => MemPolicy::PreferredMany(nodes),
            linux::MPOL_INTERLEAVE => MemPolicy::Interleave(nodes),
            linux::MPOL_WEIGHTED_INTERLEAVE => {
                let table = procfs::interleave_weights().unwrap_or_default();
                MemPolicy::WeightedInterleave(
                    nodes
                        .iter()
                        .map(|n| (n, table.get(&n).copied().unwrap_or(1)))
                        .collect(),
                )
            }
            _ => MemPolicy::Default,
        }
    }

    /// Turns a kernel error into one that says what is wrong.
    fn kernel_error(&self, err: io::Error) -> PolicyError {
        let support = Support::probe();
        if let Err(unsupported) = support.require(self) {
            return unsupported;
        }
        if err.raw_os_error() == Some(libc::EINVAL) {
            // The nodes are the other thing EINVAL can mean.
            if let Err(node) = self.check_nodes(&NodeInventory::live()) {
                return node;
            }
        }
        PolicyError::Rejected {
            policy: self.to_string(),
            source: err,
        }
    }
}

impl fmt::Display for MemPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemPolicy::Default | MemPolicy::Local => f.write_str(self.name()),
            MemPolicy::WeightedInterleave(weights) => {
                write!(f, "{}:{}", self.name(), weights_to_string(weights))
            }
            _ => write!(f, "{}:{}", self.name(), self.nodes()),
        }
    }
}

impl FromStr for MemPolicy {
    type Err = PolicyError;

    /// Parses `default`, `local`, `bind:0-1`, `preferred:1`,
    /// `preferred-many:0,2`, `interleave:0-3`,
    /// `weighted-interleave:0=3,1=1` (or `0:3,1:1`). Node lists are
    /// explicit; `all` needs a topology ([`Topology::parse_policy`](crate::Topology::parse_policy)).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let (name, arg) = match s.split_once(':') {
            Some((name, arg)) => (name, Some(arg)),
            None => (s, None),
        };
        let need_arg = || {
            arg.ok_or_else(|| PolicyError::Parse {
                input: s.to_owned(),
                reason: format!("{name} needs nodes, as in {name}:0-1"),
            })
        };
        let policy = match name {
            "default" => MemPolicy::Default,
            "local" | "localalloc" => MemPolicy::Local,
            "bind" | "membind" => MemPolicy::Bind(need_arg()?.parse()?),
            "interleave" => MemPolicy::Interleave(need_arg()?.parse()?),
            "preferred-many" => MemPolicy::PreferredMany(need_arg()?.parse()?),
            "preferred" => {
                let nodes: NodeSet = need_arg()?.parse()?;
                if nodes.len() != 1 {
                    return Err(PolicyError::Parse {
                        input: s.to_owned(),
                        reason: "preferred takes one node; use preferred-many for several".into(),
                    });
                }
                MemPolicy::Preferred(nodes.first().unwrap_or(0))
            }
            "weighted-interleave" => MemPolicy::WeightedInterleave(parse_weights(need_arg()?)?),
            _ => {
                return Err(PolicyError::Parse {
                    input: s.to_owned(),
                    reason: format!(
                        "unknown policy {name:?}; expected one of default, local, bind, preferred, \
                         preferred-many, interleave, weighted-interleave"
                    ),
                })
            }
        };
        if arg.is_some() && matches!(policy, MemPolicy::Default | MemPolicy::Local) {
            return Err(PolicyError::Parse {
                input: s.to_owned(),
                reason: format!("{name} takes no nodes"),
            });
        }
        Ok(policy)
    }
}

/// The node an interleave gives the `index`-th page of its address space,
/// as Linux does for anonymous memory (`interleave_nid` and
/// `weighted_interleave_nid`: the page's index modulo the total weight,
/// dealt out node by node in increasing order).
fn interleave_target(index: u64, weights: &[(u32, u32)]) -> u32 {
    let total: u64 = weights.iter().map(|(_, w)| u64::from(*w)).sum();
    let mut target = index % total.max(1);
    for (node, weight) in weights {
        if target < u64::from(*weight) {
            return *node;
        }
        target -= u64::from(*weight);
    }
    weights.last().map_or(0, |(n, _)| *n)
}

/// Moves every present page of `[addr, addr + len)` to the node the
/// interleave gives it; returns how many could not move.
///
/// A huge page moves whole, so it is asked for once, to the node the
/// interleave gives its huge-page-sized slot (as Linux places huge pages
/// under an interleave). Asking for each of its base pages instead would
/// move it back and forth between the nodes, once per page, and leave it
/// wherever its last page was meant to go.
fn spread(addr: *const u8, len: usize, weights: &[(u32, u32)]) -> io::Result<u64> {
    const BATCH: usize = 16 * 1024;
    let page = linux::page_size();
    let unit = (procfs::thp_size() as usize).max(page);
    let start = addr as usize;
    let end = (start + len).div_ceil(page) * page;
    let mut huge = huge_windows(start, end, unit).into_iter().peekable();
    let mut stuck = 0;
    let mut at = start;
    let (mut pages, mut nodes, mut status) = (Vec::new(), Vec::new(), Vec::new());
    while at < end {
        pages.clear();
        nodes.clear();
        while at < end && pages.len() < BATCH {
            let (index, step) = if huge.next_if_eq(&at).is_some() {
                (at / unit, unit)
            } else {
                (at / page, page)
            };
            pages.push(at as *const u8);
            nodes.push(interleave_target(index as u64, weights) as i32);
            at += step;
        }
        status.clear();
        status.resize(pages.len(), 0);
        linux::move_pages_to(&pages, &nodes, &mut status)?;
        // Not present: nothing to move.
        stuck += status
            .iter()
            .filter(|&&s| s < 0 && s != -libc::ENOENT)
            .count() as u64;
    }
    Ok(stuck)
}

/// The huge pages in `[start, end)`: the start of each `unit`-sized,
/// aligned window inside the range that one huge page maps, in increasing
/// order. Exact where the kernel has `PAGEMAP_SCAN` (Linux 6.7); before
/// that, which windows a huge page maps cannot be told without
/// privileges, so every window of a mapping that holds huge pages at all
/// (`smaps`) counts as one: its pages then move together, still spread
/// evenly a window at a time.
fn huge_windows(start: usize, end: usize, unit: usize) -> Vec<usize> {
    let stretches = match linux::huge_stretches(start, end) {
        Ok(Some(stretches)) => stretches,
        Ok(None) | Err(_) => procfs::huge_mappings_of_self(start as u64, end as u64)
            .unwrap_or_default()
            .iter()
            .map(|m| (m.start as usize, m.end as usize))
            .collect(),
    };
    let mut windows = Vec::new();
    for (lo, hi) in stretches {
        let hi = hi.min(end);
        let mut window = lo.max(start).next_multiple_of(unit);
        while window + unit <= hi {
            windows.push(window);
            window += unit;
        }
    }
    windows.sort_unstable();
    windows.dedup();
    windows
}

/// Parses `0=3,1=1` or `0:3,1:1` into node weights (1–255 each).
pub fn parse_weights(text: &str) -> Result<BTreeMap<u32, u8>, PolicyError> {
    let bad = |reason: String| PolicyError::Parse {
        input: text.to_owned(),
        reason,
    };
    let mut weights = BTreeMap::new();
    for pair in text.split(',') {
        let (node, weight) = pair
            .split_once('=')
            .or_else(|| pair.split_once(':'))
            .ok_or_else(|| bad(format!("{pair:?} is not node=weight, as in 0=3")))?;
        let nodes: NodeSet = node.parse()?;
        let weight: u8 = weight
            .trim()
            .parse()
            .ok()
            .filter(|w| *w > 0)
            .ok_or_else(|| {
                bad(format!(
                    "weight {weight:?} is not a whole number from 1 to 255"
                ))
            })?;
        for node in nodes.iter() {
            if weights.insert(node, weight).is_some() {
                return Err(bad(format!(
                    "node {node} is given two weights; give each node one"
                )));
            }
        }
    }
    Ok(weights)
}

impl Serialize for MemPolicy {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MemPolicy {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Which memory-placement features the running kernel has.
///
/// ```
/// let support = numalab::Support::probe();
/// // Every NUMA kernel has bind and interleave.
/// assert!(support.numa);
/// println!("preferred-many: {}", support.preferred_many);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Support {
    /// The kernel release.
    pub kernel: String,
    /// Memory policies at all (`CONFIG_NUMA`).
    pub numa: bool,
    /// `MPOL_PREFERRED_MANY` (Linux 5.15).
    pub preferred_many: bool,
    /// `MPOL_WEIGHTED_INTERLEAVE` (Linux 6.9).
    pub weighted_interleave: bool,
    /// `move_pages(2)` (query and move).
    pub move_pages: bool,
}

impl Support {
    /// Asks the kernel: each policy is tried on a scratch page of memory.
    pub fn probe() -> Support {
        let page = linux::page_size();
        let scratch = linux::map_anonymous(page, linux::Backing::Base).ok();
        let node_mask = linux::mems_allowed()
            .ok()
            .map(|words| NodeSet::from_words(&words))
            .and_then(|set| set.first())
            .map(NodeSet::single)
            .unwrap_or_else(|| NodeSet::single(0));
        let accepts = |mode: i32| match scratch {
            Some(addr) => linux::mbind(addr, page, mode, node_mask.as_words(), 0).is_ok(),
            None => false,
        };
        let support = Support {
            kernel: procfs::kernel_release(),
            numa: accepts(linux::MPOL_BIND),
            preferred_many: accepts(linux::MPOL_PREFERRED_MANY),
            weighted_interleave: accepts(linux::MPOL_WEIGHTED_INTERLEAVE),
            move_pages: scratch.is_some_and(|addr| {
                let mut status = [0i32];
                linux::query_pages(&[addr.cast_const()], &mut status).is_ok()
            }),
        };
        if let Some(addr) = scratch {
            // SAFETY: the scratch page was mapped above and is not used again.
            let _ = unsafe { linux::unmap(addr, page) };
        }
        support
    }

    /// An error naming the missing kernel feature if the kernel cannot
    /// apply `policy`.
    pub fn require(&self, policy: &MemPolicy) -> Result<(), PolicyError> {
        let missing = |feature| PolicyError::Unsupported {
            policy: policy.name(),
            feature,
            kernel: self.kernel.clone(),
        };
        if !self.numa && !matches!(policy, MemPolicy::Default) {
            return Err(missing("a kernel built with CONFIG_NUMA"));
        }
        match policy {
            MemPolicy::PreferredMany(_) if !self.preferred_many => {
                Err(missing("MPOL_PREFERRED_MANY (Linux 5.15 or later)"))
            }
            MemPolicy::WeightedInterleave(_) if !self.weighted_interleave => {
                Err(missing("MPOL_WEIGHTED_INTERLEAVE (Linux 6.9 or later)"))
            }
            _ => Ok(()),
        }
    }
}

/// The kernel's global weighted-interleave table, changed for as long as
/// this value lives and restored when it is dropped (or by
/// [`restore`](Self::restore), which says what could not be restored).
///
/// The table lives in `/sys/kernel/mm/mempolicy/weighted_interleave/nodeN`,
/// is shared by every process, and writing it needs root. The kernel reads
/// it at each allocation (page fault), not when a policy is set, so it
/// must stay as asked for as long as the process using it allocates.
/// Writing a weight also switches off the kernel's automatic weights
/// (the `auto` switch of Linux 6.16); they are switched back on at
/// restore where they were on, which the kernel refuses when it has no
/// bandwidth figures for its nodes.
///
/// ```
/// use numalab::system::KernelSettings;
/// use numalab::{InterleaveWeights, PolicyError};
/// // Asking for the weights the table already has writes nothing; asking
/// // for others (`0=3,1=1`) writes them until `guard` is dropped.
/// let current = KernelSettings::current().interleave_weights.unwrap_or_default();
/// assert_eq!(InterleaveWeights::restore_commands(&current), None);
/// match InterleaveWeights::set(&current) {
///     Ok(guard) => {
///         assert!(guard.previous().is_empty());
///         guard.restore()?;
///     }
///     // Before Linux 6.9 there is no table.
///     Err(PolicyError::Unsupported { .. }) => assert!(current.is_empty()),
///     Err(err) => return Err(err.into()),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct InterleaveWeights {
    previous: BTreeMap<u32, u8>,
    /// The automatic weights were on before and must be switched back on.
    auto_was_on: bool,
    restored: bool,
}

/// What the live [`InterleaveWeights`] of this process changed, first
/// value of each node: what [`InterleaveWeights::restore_all`] puts back.
#[derive(Debug, Default)]
struct Changed {
    weights: BTreeMap<u32, u8>,
    auto_was_on: bool,
    holders: usize,
}

static CHANGED: std::sync::Mutex<Option<Changed>> = std::sync::Mutex::new(None);

fn changed() -> std::sync::MutexGuard<'static, Option<Changed>> {
    CHANGED.lock().unwrap_or_else(|e| e.into_inner())
}

const WEIGHTS_DIR: &str = "/sys/kernel/mm/mempolicy/weighted_interleave";

fn unsupported_weights() -> PolicyError {
    PolicyError::Unsupported {
        policy: "weighted-interleave",
        feature: "MPOL_WEIGHTED_INTERLEAVE (Linux 6.9 or later)",
        kernel: procfs::kernel_release(),
    }
}

impl InterleaveWeights {
    /// Sets the weights of the given nodes, remembering the old ones.
    pub fn set(weights: &BTreeMap<u32, u8>) -> Result<InterleaveWeights, PolicyError> {
        let Some(current) = procfs::interleave_weights() else {
            return Err(unsupported_weights());
        };
        let mut guard = InterleaveWeights {
            previous: BTreeMap::new(),
            auto_was_on: false,
            restored: false,
        };
        let auto = procfs::interleave_weights_auto() == Some(true);
        for (&node, &weight) in weights {
            if current.get(&node) == Some(&weight) {
                continue;
            }
            if guard.previous.is_empty() {
                // Recorded before the first write, so that everything up
                // to here is put back even if numalab is then stopped.
                guard.auto_was_on = auto;
                let mut changed = changed();
                let changed = changed.get_or_insert_with(Changed::default);
                changed.holders += 1;
                changed.auto_was_on |= auto;
            }
            let before = current.get(&node).copied().unwrap_or(1);
            if let Some(changed) = changed().as_mut() {
                changed.weights.entry(node).or_insert(before);
            }
            guard.previous.insert(node, before);
            procfs::set_interleave_weight(node, weight).map_err(|source| {
                PolicyError::Rejected {
                    policy: format!(
                    "weight {weight} for node {node} (writing {WEIGHTS_DIR}/node{node} needs root)"
                ),
                    source,
                }
            })?;
        }
        Ok(guard)
    }

    /// The weights that will be restored.
    pub fn previous(&self) -> &BTreeMap<u32, u8> {
        &self.previous
    }

    /// Puts the old weights back (and the automatic weights, if they were
    /// on), and says what the kernel refused.
    pub fn restore(mut self) -> Result<(), PolicyError> {
        self.restore_now()
    }

    fn restore_now(&mut self) -> Result<(), PolicyError> {
        if self.restored {
            return Ok(());
        }
        self.restored = true;
        if self.previous.is_empty() {
            return Ok(());
        }
        {
            let mut changed = changed();
            if let Some(c) = changed.as_mut() {
                c.holders = c.holders.saturating_sub(1);
                if c.holders == 0 {
                    *changed = None;
                }
            }
        }
        write_back(&self.previous, self.auto_was_on)
    }

    /// Puts back everything the live [`InterleaveWeights`] of this process
    /// changed, as it was before the first of them: for a process about to
    /// end at once (a second Ctrl-C), whose guards will not be dropped.
    /// Safe to call from any thread; does nothing when nothing is changed.
    pub fn restore_all() -> Result<(), PolicyError> {
        let Some(changed) = changed().take() else {
            return Ok(());
        };
        write_back(&changed.weights, changed.auto_was_on)
    }

    /// The shell commands that would put the kernel's table back after
    /// [`set`](Self::set)`(wanted)`, for a person to run if this process is
    /// killed (`SIGKILL`) before it restores it; `None` when `wanted` would
    /// change nothing (or the kernel has no table).
    pub fn restore_commands(wanted: &BTreeMap<u32, u8>) -> Option<String> {
        let current = procfs::interleave_weights()?;
        let mut commands: Vec<String> = wanted
            .iter()
            .filter(|(node, weight)| current.get(node) != Some(weight))
            .map(|(node, _)| {
                let old = current.get(node).copied().unwrap_or(1);
                format!("echo {old} > {WEIGHTS_DIR}/node{node}")
            })
            .collect();
        if commands.is_empty() {
            return None;
        }
        if procfs::interleave_weights_auto() == Some(true) {
            if let Some(path) = procfs::interleave_auto_path() {
                commands.push(format!("echo true > {path}"));
            }
        }
        Some(commands.join("; "))
    }
}

/// Writes `weights` back, then switches the automatic weights back on if
/// `auto` (writing a weight switched them off).
fn write_back(weights: &BTreeMap<u32, u8>, auto: bool) -> Result<(), PolicyError> {
    let mut first_error = None;
    for (&node, &weight) in weights {
        if let Err(source) = procfs::set_interleave_weight(node, weight) {
            first_error.get_or_insert(PolicyError::Rejected {
                policy: format!(
                    "restoring weight {weight} of node {node} ({WEIGHTS_DIR}/node{node})"
                ),
                source,
            });
        }
    }
    if auto {
        if let Err(source) = procfs::set_interleave_weights_auto(true) {
            let policy = if source.raw_os_error() == Some(libc::ENODEV) {
                "switching its automatic weights back on (the weights are as before, but in manual mode until the next boot: the kernel has no bandwidth figures for its nodes to compute weights from)".to_owned()
            } else {
                "switching its automatic weights back on".to_owned()
            };
            first_error.get_or_insert(PolicyError::Rejected { policy, source });
        }
    }
    match first_error {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

impl Drop for InterleaveWeights {
    fn drop(&mut self) {
        let _ = self.restore_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleave_targets_follow_the_kernel() {
        let plain = [(0, 1), (2, 1), (3, 1)];
        let dealt: Vec<u32> = (6..12).map(|i| interleave_target(i, &plain)).collect();
        assert_eq!(dealt, [0, 2, 3, 0, 2, 3]);
        let weighted = [(0, 3), (1, 1)];
        let dealt: Vec<u32> = (0..8).map(|i| interleave_target(i, &weighted)).collect();
        assert_eq!(dealt, [0, 0, 0, 1, 0, 0, 0, 1]);
    }

    #[test]
    fn moving_to_an_interleave_keeps_every_page() {
        // One node here, so every page stays on node 0; the emulated-NUMA
        // suite checks the spread on 2 and 4 nodes.
        let page = linux::page_size();
        let len = 64 * page;
        let addr = linux::map_anonymous(len, linux::Backing::Base).unwrap();
        // SAFETY: addr is a fresh private mapping of len bytes.
        let bytes = unsafe { std::slice::from_raw_parts_mut(addr, len) };
        bytes.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
        let interleave = MemPolicy::Interleave(NodeSet::single(0));
        interleave
            .apply_to_range(addr, len, RangeMode::MoveStrict)
            .unwrap();
        assert!(bytes.iter().enumerate().all(|(i, b)| *b == i as u8));
        assert_eq!(MemPolicy::of_address(addr).unwrap(), interleave);
        // SAFETY: the mapping is not used again.
        unsafe { linux::unmap(addr, len).unwrap() };
    }

    #[test]
    fn parses_every_policy() {
        let cases = [
            ("default", MemPolicy::Default),
            ("local", MemPolicy::Local),
            ("localalloc", MemPolicy::Local),
            ("bind:0-1", MemPolicy::Bind("0-1".parse().unwrap())),
            ("membind:2", MemPolicy::Bind("2".parse().unwrap())),
            ("preferred:1", MemPolicy::Preferred(1)),
            (
                "preferred-many:0,2",
                MemPolicy::PreferredMany("0,2".parse().unwrap()),
            ),
            (
                "interleave:0-3",
                MemPolicy::Interleave("0-3".parse().unwrap()),
            ),
            (
                "weighted-interleave:0=3,1=1",
                MemPolicy::WeightedInterleave(BTreeMap::from([(0, 3), (1, 1)])),
            ),
            (
                "weighted-interleave:0:3,1:1",
                MemPolicy::WeightedInterleave(BTreeMap::from([(0, 3), (1, 1)])),
            ),
        ];
        for (text, policy) in cases {
            assert_eq!(text.parse::<MemPolicy>().unwrap(), policy, "{text}");
        }
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "default",
            "local",
            "bind:0-1",
            "preferred:3",
            "preferred-many:0,2",
            "interleave:0-3",
            "weighted-interleave:0=3,1=1",
        ] {
            let policy: MemPolicy = text.parse().unwrap();
            assert_eq!(policy.to_string(), text);
            let json = serde_json::to_string(&policy).unwrap();
            assert_eq!(serde_json::from_str::<MemPolicy>(&json).unwrap(), policy);
        }
    }

    #[test]
    fn rejects_bad_policies() {
        for bad in [
            "bind",
            "bind:",
            "preferred:0-1",
            "local:0",
            "interleave:x",
            "weighted-interleave:0",
            "weighted-interleave:0=0",
            "weighted-interleave:0=300",
            "firsttouch",
        ] {
            let err = bad.parse::<MemPolicy>().unwrap_err();
            assert!(!err.to_string().is_empty(), "{bad}");
        }
        let err = "bogus".parse::<MemPolicy>().unwrap_err().to_string();
        assert!(err.contains("expected one of"), "{err}");
    }

    #[test]
    fn a_node_weighted_twice_is_refused_naming_it() {
        for (text, node) in [("0:3,0:1", 0), ("0-1=3,1=1", 1), ("2:1,0-3:2", 2)] {
            let err = parse_weights(text).unwrap_err().to_string();
            assert!(
                err.contains(&format!("node {node} is given two weights")),
                "{text}: {err}"
            );
        }
        assert_eq!(
            parse_weights("0:3,1:1").unwrap(),
            BTreeMap::from([(0, 3), (1, 1)])
        );
    }

    #[test]
    fn names_the_missing_kernel_feature() {
        let old = Support {
            kernel: "6.1.0".into(),
            numa: true,
            preferred_many: true,
            weighted_interleave: false,
            move_pages: true,
        };
        let err = old
            .require(&"weighted-interleave:0=1".parse().unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("MPOL_WEIGHTED_INTERLEAVE"), "{err}");
        assert!(err.contains("6.1.0"), "{err}");
        assert!(old
            .require(&MemPolicy::Interleave(NodeSet::single(0)))
            .is_ok());
    }

    #[test]
    fn applying_to_bytes_places_their_whole_pages() {
        let page = linux::page_size();
        let addr = linux::map_anonymous(4 * page, linux::Backing::Base).unwrap();
        // Bytes from the middle of the second page into the third: both
        // pages take the policy (as the kernel reads it back), the first
        // and the fourth keep the default.
        let bind = MemPolicy::Bind(NodeSet::single(0));
        // SAFETY: the offsets lie inside the fresh mapping.
        let (second, third, fourth) =
            unsafe { (addr.add(page), addr.add(2 * page), addr.add(3 * page)) };
        // SAFETY: as above.
        bind.apply_to_pages(unsafe { second.add(100) }, page, RangeMode::FutureOnly)
            .unwrap();
        let of = |p: *mut u8| linux::get_range_mempolicy(p).unwrap().0;
        assert_eq!(of(addr), linux::MPOL_DEFAULT);
        assert_eq!(of(second), linux::MPOL_BIND);
        assert_eq!(of(third), linux::MPOL_BIND);
        assert_eq!(of(fourth), linux::MPOL_DEFAULT);
        // SAFETY: nothing refers to the mapping any more.
        unsafe { linux::unmap(addr, 4 * page) }.unwrap();
        let wraps = bind.apply_to_pages((usize::MAX - 10) as *const u8, 100, RangeMode::FutureOnly);
        assert!(
            matches!(wraps, Err(PolicyError::NotMapped { .. })),
            "{wraps:?}"
        );
    }

    #[test]
    fn finds_the_huge_pages_smaps_counts() {
        // Half of 8 MiB may have transparent huge pages, half may not:
        // the windows found must be the huge pages smaps counts, all in
        // the first half.
        let unit = procfs::thp_size() as usize;
        let len = 4 * unit;
        let addr = linux::map_anonymous_aligned(len, unit).unwrap();
        let half = len / 2;
        linux::madvise(addr, half, linux::Advice::HugePage).unwrap();
        // SAFETY: addr + half lies inside the fresh mapping.
        let second = unsafe { addr.add(half) };
        linux::madvise(second, half, linux::Advice::NoHugePage).unwrap();
        // SAFETY: addr is a fresh private mapping of len bytes.
        unsafe { std::slice::from_raw_parts_mut(addr, len) }.fill(1);
        let (start, end) = (addr as usize, addr as usize + len);
        let smaps = procfs::anon_huge_bytes(start as u64, end as u64).unwrap();
        // SAFETY: nothing refers to the mapping any more.
        let unmap = || unsafe { linux::unmap(addr, len) }.unwrap();
        if smaps == 0 {
            unmap();
            let why =
                "no transparent huge pages here (/sys/kernel/mm/transparent_hugepage/enabled)";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            eprintln!("skipped: {why}");
            return;
        }
        let windows = huge_windows(start, end, unit);
        unmap();
        assert_eq!((windows.len() * unit) as u64, smaps, "{windows:x?}");
        assert!(
            windows
                .iter()
                .all(|w| w % unit == 0 && *w >= start && w + unit <= start + half),
            "{windows:x?} in {start:#x}..{end:#x}"
        );
    }

    #[test]
    fn thread_policy_round_trips_through_the_kernel() {
        let before = MemPolicy::of_thread().unwrap();
        let bind = MemPolicy::Bind(NodeSet::single(0));
        bind.apply_to_thread().unwrap();
        assert_eq!(MemPolicy::of_thread().unwrap(), bind);
        MemPolicy::Default.apply_to_thread().unwrap();
        assert_eq!(MemPolicy::of_thread().unwrap(), MemPolicy::Default);
        before.apply_to_thread().unwrap();
    }
}
