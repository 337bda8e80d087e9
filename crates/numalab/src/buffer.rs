//! [`NodeBuffer`]: memory mapped for a policy before the first touch, so
//! every page lands where the policy says, then prefaulted and checked.

use std::fmt;
use std::ptr::NonNull;

use serde::{Deserialize, Serialize};

use crate::audit::{audit_in_units, PlacementAudit};
use crate::locate::{self, LocateError, PageHistogram, Sample};
use crate::policy::{MemPolicy, PolicyError, RangeMode};
use crate::sets::NodeSet;
use crate::sys::{linux, procfs};
use crate::topology::NodeInventory;

/// Page size backing a buffer.
///
/// ```
/// use numalab::HugePages;
/// assert_eq!(HugePages::default(), HugePages::None);
/// assert_eq!("2M".parse::<HugePages>()?, HugePages::Explicit2M);
/// assert_eq!(HugePages::Transparent.to_string(), "thp");
/// assert!("1G".parse::<HugePages>().unwrap_err().contains("expected none, thp or 2M"));
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum HugePages {
    /// Base pages only (transparent huge pages disabled for the range).
    #[default]
    #[serde(rename = "none")]
    None,
    /// Transparent huge pages where the kernel can find them (the range is
    /// 2 MiB-aligned and advised `MADV_HUGEPAGE`).
    #[serde(rename = "thp")]
    Transparent,
    /// Explicit 2 MiB pages from the hugetlb pool
    /// (`/sys/devices/system/node/nodeN/hugepages/hugepages-2048kB`).
    #[serde(rename = "2M")]
    Explicit2M,
}

impl fmt::Display for HugePages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HugePages::None => "none",
            HugePages::Transparent => "thp",
            HugePages::Explicit2M => "2M",
        })
    }
}

impl std::str::FromStr for HugePages {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(HugePages::None),
            "thp" => Ok(HugePages::Transparent),
            "2M" | "2m" | "2MiB" => Ok(HugePages::Explicit2M),
            other => Err(format!(
                "unknown huge page setting {other:?}; expected none, thp or 2M"
            )),
        }
    }
}

pub(crate) const HUGE_2M: usize = 2 << 20;

/// Why a buffer could not be made.
///
/// Everything that can be checked is checked before any memory is mapped:
///
/// ```
/// use numalab::{BufferError, MemPolicy, NodeBuffer, NodeSet, PolicyError, SpecError};
///
/// fn outcome(made: Result<NodeBuffer, BufferError>) -> String {
///     match made {
///         Ok(buffer) => format!("{} bytes", buffer.len()),
///         Err(BufferError::Policy(PolicyError::Node(SpecError::NoSuchNode { node, .. }))) => {
///             format!("no node {node}")
///         }
///         Err(BufferError::InsufficientMemory { free, .. }) => format!("{free} bytes free"),
///         Err(err) => err.to_string(),
///     }
/// }
/// assert_eq!(
///     outcome(NodeBuffer::new(0, MemPolicy::Local)),
///     "a buffer must be at least one byte long"
/// );
/// let node_1000 = MemPolicy::Bind(NodeSet::single(1000));
/// assert_eq!(outcome(NodeBuffer::new(4096, node_1000)), "no node 1000");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BufferError {
    /// A zero-length buffer was asked for.
    #[error("a buffer must be at least one byte long")]
    Empty,
    /// The policy cannot be applied.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The nodes the policy binds to do not have the memory free.
    #[error("{requested} bytes ({}) requested on {} {nodes}, which {} {free} bytes ({}) free{}",
        crate::units::mib(*requested as u64), nodes_word(nodes), if nodes.len() == 1 { "has" } else { "have" }, crate::units::mib(*free),
        if *reclaimable > 0 { format!(" and {} of reclaimable page cache", crate::units::mib(*reclaimable)) } else { String::new() })]
    InsufficientMemory {
        /// The nodes bound to.
        nodes: NodeSet,
        /// Bytes asked for.
        requested: usize,
        /// Bytes free on those nodes now.
        free: u64,
        /// Bytes of page cache the kernel could reclaim on those nodes.
        reclaimable: u64,
    },
    /// Not enough free 2 MiB huge pages on the nodes the policy allows.
    #[error("{} needed on {} {nodes}, which {} {free}; reserve more with `echo N > /sys/devices/system/node/nodeX/hugepages/hugepages-2048kB/nr_hugepages`",
        crate::units::count(*needed, "free 2 MiB huge page"), nodes_word(nodes), if nodes.len() == 1 { "has" } else { "have" })]
    HugePagesUnavailable {
        /// Nodes the pages may come from.
        nodes: NodeSet,
        /// Pages needed.
        needed: u64,
        /// Pages free on those nodes.
        free: u64,
    },
    /// The kernel would not map or fault in the memory.
    #[error("could not {what} {len} bytes: {source}")]
    Os {
        /// "map", "prefault" or "lock".
        what: &'static str,
        /// Bytes.
        len: usize,
        /// The kernel's error.
        source: std::io::Error,
    },
}

/// `node` or `nodes`, as `set` needs before it: `node 0`, `nodes 0-1`.
fn nodes_word(set: &NodeSet) -> &'static str {
    if set.len() == 1 {
        "node"
    } else {
        "nodes"
    }
}

/// How a [`NodeBuffer`] is made.
///
/// ```
/// use numalab::locate::Sample;
/// use numalab::{BufferOptions, HugePages, MemPolicy, NodeBuffer, NodeSet};
///
/// let options = BufferOptions::new(MemPolicy::Bind(NodeSet::single(0)))
///     .huge_pages(HugePages::Transparent);
/// assert!(options.prefault && !options.lock); // the defaults
/// let buffer = NodeBuffer::with_options(4 << 20, options.clone())?;
/// assert_eq!(buffer.options(), &options);
/// assert_eq!(buffer.as_ptr() as usize % (2 << 20), 0); // room for whole huge pages
/// assert!(buffer.audit().is_match());
///
/// // Without prefaulting, no page exists until the buffer is first written.
/// let lazy = BufferOptions::new(MemPolicy::Local).prefault(false);
/// let buffer = NodeBuffer::with_options(1 << 20, lazy)?;
/// assert_eq!(buffer.locate(Sample::All)?.present(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferOptions {
    /// Where its pages go.
    pub policy: MemPolicy,
    /// Which pages back it.
    pub huge_pages: HugePages,
    /// Fault every page in now (true by default), so the placement is
    /// decided — and can be checked — before the buffer is used.
    pub prefault: bool,
    /// Lock the pages in memory (`mlock`), so they are never swapped.
    pub lock: bool,
}

impl BufferOptions {
    /// Prefaulted base pages placed by `policy`.
    pub fn new(policy: MemPolicy) -> Self {
        BufferOptions {
            policy,
            huge_pages: HugePages::None,
            prefault: true,
            lock: false,
        }
    }

    /// With huge pages.
    pub fn huge_pages(mut self, huge_pages: HugePages) -> Self {
        self.huge_pages = huge_pages;
        self
    }

    /// Prefault or not.
    pub fn prefault(mut self, prefault: bool) -> Self {
        self.prefault = prefault;
        self
    }

    /// Lock in memory or not.
    pub fn lock(mut self, lock: bool) -> Self {
        self.lock = lock;
        self
    }
}

/// Anonymous memory placed by a [`MemPolicy`].
///
/// The policy is applied to the mapping before any page is touched, then
/// (by default) every page is faulted in, so the pages are where the policy
/// puts them from the first use. With `local` or `default`, the thread that
/// makes the buffer decides the node: make it on a thread already bound to
/// the node you want.
///
/// ```
/// use numalab::{MemPolicy, NodeBuffer, NodeSet};
/// let mut buffer = NodeBuffer::new(4 << 20, MemPolicy::Bind(NodeSet::single(0)))?;
/// buffer.as_mut_slice()[0] = 42;
/// let check = buffer.audit();
/// assert!(check.is_match(), "{check}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct NodeBuffer {
    ptr: NonNull<u8>,
    len: usize,
    /// The whole mapping, which is larger than `len` when rounded to pages.
    map_len: usize,
    options: BufferOptions,
    /// Node of the thread that prefaulted it (what `local` follows).
    touched_from: NodeSet,
}

// SAFETY: NodeBuffer owns its mapping exclusively, as a Vec<u8> owns its
// allocation; shared references only give out `&[u8]`.
unsafe impl Send for NodeBuffer {}
// SAFETY: as above; `&NodeBuffer` allows no mutation.
unsafe impl Sync for NodeBuffer {}

impl fmt::Debug for NodeBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeBuffer")
            .field("addr", &self.ptr)
            .field("len", &self.len)
            .field("policy", &self.options.policy.to_string())
            .field("huge_pages", &self.options.huge_pages)
            .finish()
    }
}

impl NodeBuffer {
    /// `len` bytes of prefaulted base pages placed by `policy`.
    pub fn new(len: usize, policy: MemPolicy) -> Result<NodeBuffer, BufferError> {
        Self::with_options(len, BufferOptions::new(policy))
    }

    /// `len` bytes made as `options` say. Checks the policy (nodes exist,
    /// are allowed and have memory; the kernel supports it) and that bound
    /// nodes have the memory free before anything is mapped.
    pub fn with_options(len: usize, options: BufferOptions) -> Result<NodeBuffer, BufferError> {
        if len == 0 {
            return Err(BufferError::Empty);
        }
        options.policy.check()?;
        check_free_memory(len, &options)?;

        let (backing, unit) = match options.huge_pages {
            HugePages::Explicit2M => (linux::Backing::Huge2M, HUGE_2M),
            _ => (linux::Backing::Base, linux::page_size()),
        };
        let map_len = len.div_ceil(unit) * unit;
        let ptr = map_aligned(map_len, options.huge_pages).map_err(|source| BufferError::Os {
            what: "map",
            len: map_len,
            source,
        })?;
        let buffer = NodeBuffer {
            // map_aligned never returns null.
            ptr: NonNull::new(ptr).ok_or(BufferError::Empty)?,
            len,
            map_len,
            touched_from: NodeSet::single(linux::getcpu().1),
            options,
        };
        if backing == linux::Backing::Base {
            let advice = match buffer.options.huge_pages {
                HugePages::Transparent => linux::Advice::HugePage,
                _ => linux::Advice::NoHugePage,
            };
            // Advice only; a kernel without THP ignores it.
            let _ = linux::madvise(ptr, map_len, advice);
        }
        buffer
            .options
            .policy
            .apply_to_range(ptr, map_len, RangeMode::FutureOnly)?;
        if buffer.options.prefault {
            buffer.prefault()?;
        }
        if buffer.options.lock {
            linux::mlock(ptr, map_len).map_err(|source| BufferError::Os {
                what: "lock",
                len: map_len,
                source,
            })?;
        }
        Ok(buffer)
    }

    fn prefault(&self) -> Result<(), BufferError> {
        let ptr = self.ptr.as_ptr();
        match linux::madvise(ptr, self.map_len, linux::Advice::PopulateWrite) {
            Ok(()) => Ok(()),
            Err(err) if err.raw_os_error() == Some(libc::EINVAL) => {
                // Kernels before 5.14: touch one byte per page.
                let step = match self.options.huge_pages {
                    HugePages::Explicit2M => HUGE_2M,
                    _ => linux::page_size(),
                };
                for offset in (0..self.map_len).step_by(step) {
                    // SAFETY: offset is inside the mapping, which this
                    // buffer owns; writing zero over fresh zero pages
                    // changes no contents.
                    unsafe { ptr.add(offset).write_volatile(0) };
                }
                Ok(())
            }
            Err(source) => Err(BufferError::Os {
                what: "prefault",
                len: self.map_len,
                source,
            }),
        }
    }

    /// The buffer's bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes for the buffer's lifetime and
        // initialised (anonymous memory reads as zeros).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The buffer's bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as for as_slice, and &mut self makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Start of the buffer.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// Start of the buffer, writable.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty (never: buffers have at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The policy the buffer was made with (or last moved to).
    pub fn policy(&self) -> &MemPolicy {
        &self.options.policy
    }

    /// The options the buffer was made with.
    pub fn options(&self) -> &BufferOptions {
        &self.options
    }

    /// The node of the thread that made (and prefaulted) the buffer.
    pub fn touched_from(&self) -> &NodeSet {
        &self.touched_from
    }

    /// Where the buffer's pages are.
    pub fn locate(&self, sample: Sample) -> Result<PageHistogram, LocateError> {
        locate::locate(self.as_ptr(), self.len, sample)
    }

    /// Checks every page against the policy. A failure to locate pages
    /// (a kernel without `move_pages`) is reported as an empty check.
    pub fn audit(&self) -> PlacementAudit {
        let found = self.locate(Sample::All).unwrap_or_default();
        self.audit_pages(&found)
    }

    /// Checks pages already located (by [`locate`](Self::locate)) against
    /// the policy, knowing how the buffer is backed: huge pages are placed
    /// whole, so an interleave of them is even to within one per node.
    pub fn audit_pages(&self, found: &PageHistogram) -> PlacementAudit {
        // `local` and default pages of a memory-less node's CPUs go to
        // the nearest node with memory.
        let home = crate::system::local_memory_nodes(&self.touched_from);
        audit_in_units(&self.options.policy, &home, found, self.unit_pages())
    }

    /// Base pages Linux places at once in this buffer: 1, or a huge
    /// page's worth (512 for 2 MiB on x86-64) when it asks for huge pages,
    /// which an interleave deals out whole.
    ///
    /// ```
    /// use numalab::{BufferOptions, HugePages, MemPolicy, NodeBuffer};
    /// let plain = NodeBuffer::new(1 << 20, MemPolicy::Default)?;
    /// assert_eq!(plain.unit_pages(), 1);
    /// let thp = NodeBuffer::with_options(
    ///     4 << 20,
    ///     BufferOptions::new(MemPolicy::Default).huge_pages(HugePages::Transparent),
    /// )?;
    /// assert!(thp.unit_pages() >= 1);
    /// # Ok::<(), numalab::BufferError>(())
    /// ```
    pub fn unit_pages(&self) -> u64 {
        let page = linux::page_size() as u64;
        match self.options.huge_pages {
            HugePages::None => 1,
            HugePages::Transparent => (procfs::thp_size() / page).max(1),
            HugePages::Explicit2M => HUGE_2M as u64 / page,
        }
    }

    /// Bytes of the buffer backed by huge pages: all of it for explicit
    /// 2 MiB pages; for the others, the transparent huge pages the kernel
    /// reports for the mapping (`AnonHugePages` in `/proc/self/smaps`).
    /// `None` when the kernel does not say.
    pub fn huge_page_bytes(&self) -> Option<u64> {
        if self.options.huge_pages == HugePages::Explicit2M {
            return Some(self.map_len as u64);
        }
        let start = self.ptr.as_ptr() as u64;
        procfs::anon_huge_bytes(start, start + self.map_len as u64)
            .ok()
            .map(|bytes| bytes.min(self.map_len as u64))
    }

    /// Applies a new policy and migrates the pages already there
    /// (`mbind` with `MPOL_MF_MOVE`; for an interleave, every page to the
    /// node the interleave gives it); pages that cannot move stay put (see
    /// [`audit`](Self::audit)).
    pub fn migrate(&mut self, policy: MemPolicy) -> Result<(), PolicyError> {
        policy.check()?;
        policy.apply_to_range(self.as_ptr(), self.map_len, RangeMode::Move)?;
        self.options.policy = policy;
        Ok(())
    }
}

impl Drop for NodeBuffer {
    fn drop(&mut self) {
        // SAFETY: the mapping is owned by this buffer and no borrow of it
        // outlives the buffer.
        let _ = unsafe { linux::unmap(self.ptr.as_ptr(), self.map_len) };
    }
}

/// Maps `len` bytes; for transparent huge pages, aligned to 2 MiB so whole
/// huge pages fit (a mapping 2 MiB larger is trimmed at both ends).
fn map_aligned(len: usize, huge: HugePages) -> std::io::Result<*mut u8> {
    match huge {
        HugePages::Explicit2M => linux::map_anonymous(len, linux::Backing::Huge2M),
        HugePages::None => linux::map_anonymous(len, linux::Backing::Base),
        HugePages::Transparent => linux::map_anonymous_aligned(len, HUGE_2M),
    }
}

/// Refuses, before mapping, a buffer its bound nodes cannot hold.
pub(crate) fn check_free_memory(len: usize, options: &BufferOptions) -> Result<(), BufferError> {
    let nodes = match &options.policy {
        MemPolicy::Bind(nodes) => nodes.clone(),
        // Other policies fall back to any allowed node.
        _ => {
            let inventory = NodeInventory::live();
            inventory.allowed_nodes.intersection(&inventory.with_memory)
        }
    };
    if options.huge_pages == HugePages::Explicit2M {
        let needed = len.div_ceil(HUGE_2M) as u64;
        let free: u64 = nodes
            .iter()
            .filter_map(|n| procfs::node_huge_pools(n).ok())
            .flatten()
            .filter(|p| p.page_size == HUGE_2M as u64)
            .map(|p| p.free)
            .sum();
        if free < needed {
            return Err(BufferError::HugePagesUnavailable {
                nodes,
                needed,
                free,
            });
        }
        return Ok(());
    }
    let infos: Vec<_> = nodes
        .iter()
        .filter_map(|n| procfs::node_meminfo(n).ok())
        .collect();
    if infos.is_empty() {
        return Ok(()); // no sysfs view of node memory: let the kernel decide
    }
    let free: u64 = infos.iter().map(|i| i.free).sum();
    // Only page cache on the file LRU can be reclaimed: tmpfs, shared
    // memory and ramfs count in FilePages but stay.
    let reclaimable: u64 = infos.iter().map(|i| i.file_lru).sum();
    if (len as u64) > free + reclaimable {
        return Err(BufferError::InsufficientMemory {
            nodes,
            requested: len,
            free,
            reclaimable,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_buffer_lands_on_node_zero() {
        let buffer = NodeBuffer::new(3 << 20, MemPolicy::Bind(NodeSet::single(0))).unwrap();
        let found = buffer.locate(Sample::All).unwrap();
        assert_eq!(found.queried, (3 << 20) / linux::page_size() as u64);
        assert_eq!(found.on_node(0), found.queried, "{found}");
        assert!(buffer.audit().is_match());
        assert_eq!(
            MemPolicy::of_address(buffer.as_ptr()).unwrap(),
            MemPolicy::Bind(NodeSet::single(0))
        );
    }

    #[test]
    fn without_prefault_nothing_is_present() {
        let options = BufferOptions::new(MemPolicy::Default).prefault(false);
        let mut buffer = NodeBuffer::with_options(1 << 20, options).unwrap();
        assert_eq!(buffer.locate(Sample::All).unwrap().present(), 0);
        buffer.as_mut_slice()[0] = 1;
        assert_eq!(buffer.locate(Sample::All).unwrap().present(), 1);
    }

    #[test]
    fn transparent_huge_pages_are_aligned() {
        let options = BufferOptions::new(MemPolicy::Local).huge_pages(HugePages::Transparent);
        let buffer = NodeBuffer::with_options(5 << 20, options).unwrap();
        assert_eq!(buffer.as_ptr() as usize % HUGE_2M, 0);
        assert_eq!(buffer.as_slice().iter().map(|&b| b as u64).sum::<u64>(), 0);
        assert!(buffer.audit().is_match());
    }

    #[test]
    fn base_pages_report_no_huge_pages() {
        let buffer = NodeBuffer::new(8 << 20, MemPolicy::Local).unwrap();
        assert_eq!(buffer.huge_page_bytes(), Some(0), "MADV_NOHUGEPAGE holds");
        let options = BufferOptions::new(MemPolicy::Local).huge_pages(HugePages::Transparent);
        let thp = NodeBuffer::with_options(8 << 20, options).unwrap();
        let huge = thp.huge_page_bytes().unwrap();
        assert!(huge <= 8 << 20, "{huge}");
    }

    #[test]
    fn refuses_before_mapping() {
        assert!(matches!(
            NodeBuffer::new(0, MemPolicy::Default),
            Err(BufferError::Empty)
        ));
        let err = NodeBuffer::new(4096, MemPolicy::Bind(NodeSet::single(7))).unwrap_err();
        assert!(err.to_string().contains("node 7 does not exist"), "{err}");
        let err = NodeBuffer::new(1 << 50, MemPolicy::Bind(NodeSet::single(0))).unwrap_err();
        assert!(
            matches!(err, BufferError::InsufficientMemory { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("free"), "{err}");
    }

    #[test]
    fn migrate_keeps_contents() {
        let mut buffer = NodeBuffer::new(1 << 20, MemPolicy::Default).unwrap();
        buffer
            .as_mut_slice()
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = i as u8);
        buffer.migrate(MemPolicy::Bind(NodeSet::single(0))).unwrap();
        assert!(buffer.audit().is_match());
        assert!(buffer
            .as_slice()
            .iter()
            .enumerate()
            .all(|(i, &b)| b == i as u8));
    }
}
