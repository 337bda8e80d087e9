//! Where memory really is: the node of every page of a range, or of a
//! sample of its pages, asked of the kernel with `move_pages(2)` in query
//! mode; and the resident memory of a whole process per node, from
//! `/proc/PID/numa_maps` (what `numastat -p` shows).

use std::collections::BTreeMap;
use std::fmt;
use std::io;

use serde::{Deserialize, Serialize};

use crate::sys::{linux, procfs};

/// Which pages of a range [`locate`] asks about.
///
/// ```
/// use numalab::locate::Sample;
/// use numalab::{MemPolicy, NodeBuffer, NodeSet};
/// let buffer = NodeBuffer::new(4 << 20, MemPolicy::Bind(NodeSet::single(0)))?;
/// let every = buffer.locate(Sample::default())?; // Sample::All
/// assert_eq!(every.queried, (4 << 20) / every.page_size);
/// // A large region is checked faster by a sample of its pages.
/// let sampled = buffer.locate(Sample::Pages(16))?;
/// assert_eq!(sampled.queried, 16);
/// assert_eq!(sampled.on_node(0), 16);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sample {
    /// Every page.
    #[default]
    All,
    /// At most this many pages, evenly spaced over the range (first and
    /// last included).
    Pages(usize),
}

/// Why pages could not be located.
///
/// A kernel built without NUMA support cannot say where pages are; a
/// caller that can do without the answer tells that case apart:
///
/// ```
/// use numalab::locate::{node_of, LocateError};
/// let value = Box::new(7u64); // written, so its page is present
/// match node_of((&*value as *const u64).cast()) {
///     Ok(node) => assert!(node.is_some()),
///     Err(LocateError::Unsupported(err)) => eprintln!("page locations unknown: {err}"),
///     Err(err) => return Err(err.into()),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocateError {
    /// The kernel has no `move_pages(2)` (built without NUMA support).
    #[error("the kernel cannot report page locations (move_pages: {0}); it needs CONFIG_NUMA and CONFIG_MIGRATION")]
    Unsupported(io::Error),
    /// Another error from `move_pages(2)`.
    #[error("move_pages failed: {0}")]
    Os(io::Error),
}

/// How many pages of a range are on each node.
///
/// ```
/// use numalab::{locate, MemPolicy, NodeBuffer, NodeSet};
/// let buffer = NodeBuffer::new(1 << 20, MemPolicy::Bind(NodeSet::single(0)))?;
/// let pages = buffer.locate(locate::Sample::All)?;
/// assert_eq!(pages.on_node(0), pages.present());
/// println!("{pages}"); // "node0 256 (100.0%)"
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageHistogram {
    /// Bytes per page counted.
    pub page_size: u64,
    /// Pages asked about.
    pub queried: u64,
    /// Pages present, per node.
    pub per_node: BTreeMap<u32, u64>,
    /// Pages not present (never touched, or swapped out).
    pub not_present: u64,
    /// Pages the kernel could not report: not mapped, other errors, or
    /// present but hidden from `move_pages(2)` by a NUMA-balancing scan
    /// (Linux 6.1–6.4) when the page's frame cannot be read either (it
    /// can with `CAP_SYS_ADMIN`).
    pub unknown: u64,
}

impl PageHistogram {
    /// Pages present on some node.
    pub fn present(&self) -> u64 {
        self.per_node.values().sum()
    }

    /// Pages present on `node`.
    pub fn on_node(&self, node: u32) -> u64 {
        self.per_node.get(&node).copied().unwrap_or(0)
    }

    /// Share of present pages on `node`, from 0 to 1 (0 when none present).
    pub fn fraction(&self, node: u32) -> f64 {
        match self.present() {
            0 => 0.0,
            present => self.on_node(node) as f64 / present as f64,
        }
    }

    /// Pages present on any node of `nodes`.
    pub fn on_nodes(&self, nodes: &crate::NodeSet) -> u64 {
        self.per_node
            .iter()
            .filter(|(n, _)| nodes.contains(**n))
            .map(|(_, c)| c)
            .sum()
    }

    /// The node holding the most pages.
    pub fn dominant_node(&self) -> Option<u32> {
        self.per_node
            .iter()
            .max_by_key(|(node, count)| (**count, std::cmp::Reverse(**node)))
            .map(|(node, _)| *node)
    }

    /// The nodes holding pages.
    pub fn nodes(&self) -> crate::NodeSet {
        self.per_node
            .iter()
            .filter(|(_, c)| **c > 0)
            .map(|(n, _)| *n)
            .collect()
    }

    /// Adds another histogram's counts (same page size).
    pub fn merge(&mut self, other: &PageHistogram) {
        self.queried = self.queried.saturating_add(other.queried);
        self.not_present = self.not_present.saturating_add(other.not_present);
        self.unknown = self.unknown.saturating_add(other.unknown);
        for (node, count) in &other.per_node {
            let slot = self.per_node.entry(*node).or_default();
            *slot = slot.saturating_add(*count);
        }
    }
}

impl fmt::Display for PageHistogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (node, count) in &self.per_node {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(
                f,
                "node{node} {count} ({:.1}%)",
                100.0 * self.fraction(*node)
            )?;
        }
        if self.not_present > 0 {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{} not present", self.not_present)?;
        }
        if first {
            f.write_str("no pages present")?;
        }
        Ok(())
    }
}

/// Pages per `move_pages` call: large enough to be cheap, small enough to
/// keep the arrays modest.
const BATCH: usize = 16 * 1024;

/// The node of each page of `[addr, addr + len)` (or of a sample of them),
/// counted per node. Addresses need not be page-aligned; pages that were
/// never touched are counted as not present, not as on some node.
pub fn locate(addr: *const u8, len: usize, sample: Sample) -> Result<PageHistogram, LocateError> {
    let page = linux::page_size();
    let start = addr as usize & !(page - 1);
    let end = (addr as usize).saturating_add(len);
    let total = if len == 0 {
        0
    } else {
        end.div_ceil(page) - start / page
    };
    let count = match sample {
        Sample::All => total,
        Sample::Pages(n) => n.min(total),
    };
    let page_at = |i: usize| -> usize {
        let index = if count == total || count <= 1 {
            i
        } else {
            // Evenly spaced, first and last page included.
            i * (total - 1) / (count - 1)
        };
        start + index * page
    };
    let mut histogram = PageHistogram {
        page_size: page as u64,
        queried: count as u64,
        ..Default::default()
    };
    let mut pages = Vec::with_capacity(count.min(BATCH));
    let mut status = Vec::with_capacity(count.min(BATCH));
    let mut i = 0;
    while i < count {
        let n = (count - i).min(BATCH);
        pages.clear();
        pages.extend((i..i + n).map(|k| page_at(k) as *const u8));
        status.clear();
        status.resize(n, 0);
        linux::query_pages(&pages, &mut status).map_err(|err| match err.raw_os_error() {
            Some(libc::ENOSYS) => LocateError::Unsupported(err),
            _ => LocateError::Os(err),
        })?;
        count_status(&mut histogram, &pages, &status);
        i += n;
    }
    Ok(histogram)
}

/// The node of each page holding one of `addresses` (which need not be
/// page-aligned or contiguous), counted per node: for memory made of
/// scattered pages, such as the node-local copies of a replicated region.
pub fn locate_pages(addresses: &[*const u8]) -> Result<PageHistogram, LocateError> {
    let page = linux::page_size();
    let mut histogram = PageHistogram {
        page_size: page as u64,
        queried: addresses.len() as u64,
        ..Default::default()
    };
    let mut status = Vec::with_capacity(addresses.len().min(BATCH));
    for chunk in addresses.chunks(BATCH) {
        let pages: Vec<*const u8> = chunk
            .iter()
            .map(|&a| (a as usize & !(page - 1)) as *const u8)
            .collect();
        status.clear();
        status.resize(pages.len(), 0);
        linux::query_pages(&pages, &mut status).map_err(|err| match err.raw_os_error() {
            Some(libc::ENOSYS) => LocateError::Unsupported(err),
            _ => LocateError::Os(err),
        })?;
        count_status(&mut histogram, &pages, &status);
    }
    Ok(histogram)
}

fn count_status(histogram: &mut PageHistogram, pages: &[*const u8], status: &[i32]) {
    let mut absent = Vec::new();
    for (&s, &page) in status.iter().zip(pages) {
        if s >= 0 {
            *histogram.per_node.entry(s as u32).or_default() += 1;
        } else if s == -libc::ENOENT || s == -libc::EFAULT {
            absent.push(page as usize);
        } else {
            histogram.unknown += 1;
        }
    }
    if !absent.is_empty() {
        count_absent(histogram, &absent);
    }
}

/// Pages `move_pages(2)` called absent or unmapped, asked again of
/// `/proc/self/pagemap`.
///
/// Linux 6.1 to 6.4 answer `-ENOENT` for a present base page that a
/// NUMA-balancing scan has just made inaccessible (to see who touches it
/// next), and `-EFAULT` for such a transparent huge page (its PMD is
/// skipped as if nothing were mapped there), so a region of a process that
/// has run for a second with `kernel.numa_balancing` on can look partly or
/// wholly untouched. An address that is truly unmapped reads as not
/// present in the pagemap too. The
/// pagemap still shows such a page as present, and to a reader with
/// `CAP_SYS_ADMIN` its frame number, whose memory block belongs to one
/// node. A present page whose node cannot be read that way is counted as
/// unknown, never as not present.
fn count_absent(histogram: &mut PageHistogram, absent: &[usize]) {
    let Ok(entries) = procfs::pagemap_of_self(absent, linux::page_size()) else {
        histogram.not_present += absent.len() as u64;
        return;
    };
    let page = linux::page_size() as u64;
    let mut blocks = None;
    for entry in entries {
        if !entry.present {
            histogram.not_present += 1;
            continue;
        }
        let node = (entry.pfn != 0)
            .then(|| {
                blocks
                    .get_or_insert_with(procfs::memory_block_nodes)
                    .as_ref()?
                    .node_of_frame(entry.pfn, page)
            })
            .flatten();
        match node {
            Some(node) => *histogram.per_node.entry(node).or_default() += 1,
            None => histogram.unknown += 1,
        }
    }
}

/// The node of the page holding `addr`, or `None` if it is not present.
pub fn node_of(addr: *const u8) -> Result<Option<u32>, LocateError> {
    let histogram = locate(addr, 1, Sample::All)?;
    Ok(histogram.dominant_node())
}

/// What a mapping of a process holds, as `numastat -p` splits it.
///
/// ```
/// use numalab::locate::MemoryKind;
/// // Kinds sort in the order of numastat's columns.
/// assert!(MemoryKind::Huge < MemoryKind::Heap && MemoryKind::Private < MemoryKind::File);
/// assert_eq!(serde_json::to_string(&MemoryKind::Private)?, "\"private\"");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryKind {
    /// hugetlb pages.
    Huge,
    /// The heap (`brk`).
    Heap,
    /// The main thread's stack.
    Stack,
    /// Other anonymous memory (malloc'd or mmap'd).
    Private,
    /// File-backed mappings (binaries, libraries, mapped files, shared
    /// memory).
    File,
}

/// A process's resident memory per node and kind, in bytes, read from
/// `/proc/PID/numa_maps`.
///
/// ```
/// use std::collections::BTreeMap;
/// use numalab::locate::{MemoryKind, ProcessMemory};
///
/// // What `ProcessMemory::of_process(pid)` reads, written out by hand.
/// let mut memory = ProcessMemory::default();
/// memory.bytes.insert(MemoryKind::Private, BTreeMap::from([(0, 6 << 20), (1, 2 << 20)]));
/// memory.bytes.insert(MemoryKind::File, BTreeMap::from([(0, 1 << 20)]));
/// // Mapped files are shared with other processes: not its own memory.
/// assert_eq!(memory.private_per_node(), BTreeMap::from([(0, 6 << 20), (1, 2 << 20)]));
/// assert_eq!(memory.per_node()[&0], 7 << 20);
/// let pages = memory.private_histogram(); // in base pages, for an audit
/// assert_eq!(pages.present(), (8 << 20) / pages.page_size);
/// // The memory of a command's processes adds up.
/// memory.merge(&memory.clone());
/// assert_eq!(memory.per_node()[&1], 4 << 20);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessMemory {
    /// Bytes per node and kind.
    pub bytes: BTreeMap<MemoryKind, BTreeMap<u32, u64>>,
    /// Bytes of its private memory backed by transparent huge pages
    /// (`AnonHugePages`, counted within `private` and `heap`). Linux places
    /// such memory a whole huge page at a time, so an interleave of it is
    /// even only to within a huge page per node.
    #[serde(default)]
    pub transparent_huge_bytes: u64,
}

impl ProcessMemory {
    /// Reads a live process's `numa_maps` (and `smaps_rollup` for its
    /// transparent huge pages).
    pub fn of_process(pid: i32) -> io::Result<ProcessMemory> {
        let mut memory = Self::from_numa_maps(&procfs::numa_maps(pid)?);
        memory.transparent_huge_bytes = procfs::anon_huge_pages(pid);
        Ok(memory)
    }

    /// How many base pages Linux placed at a time in this memory: one, or
    /// a transparent huge page's worth when some was backed by them.
    pub fn placement_unit_pages(&self) -> u64 {
        if self.transparent_huge_bytes > 0 {
            procfs::thp_size() / linux::page_size() as u64
        } else {
            1
        }
    }

    fn from_numa_maps(entries: &[procfs::NumaMapsEntry]) -> ProcessMemory {
        let mut memory = ProcessMemory::default();
        for entry in entries {
            let kind = if entry.page_size > 4096 && entry.kind == "anon" {
                MemoryKind::Huge
            } else {
                match entry.kind.as_str() {
                    "heap" => MemoryKind::Heap,
                    "stack" => MemoryKind::Stack,
                    "anon" => MemoryKind::Private,
                    _ => MemoryKind::File,
                }
            };
            for (node, pages) in &entry.pages {
                let slot = memory
                    .bytes
                    .entry(kind)
                    .or_default()
                    .entry(*node)
                    .or_default();
                *slot = slot.saturating_add(pages.saturating_mul(entry.page_size));
            }
        }
        memory
    }

    /// Bytes per node over all kinds. Sums saturate here and below: a
    /// saved profile's numbers come from a file, and a wrapped sum would
    /// show a huge count as a small one.
    pub fn per_node(&self) -> BTreeMap<u32, u64> {
        let mut total = BTreeMap::new();
        for per_node in self.bytes.values() {
            for (node, bytes) in per_node {
                let slot: &mut u64 = total.entry(*node).or_default();
                *slot = slot.saturating_add(*bytes);
            }
        }
        total
    }

    /// Bytes of the process's own memory on every node together
    /// ([`private_per_node`](Self::private_per_node), saturating).
    ///
    /// ```
    /// use numalab::locate::{MemoryKind, ProcessMemory};
    /// let mut memory = ProcessMemory::default();
    /// memory.bytes.entry(MemoryKind::Heap).or_default().insert(0, u64::MAX);
    /// memory.bytes.entry(MemoryKind::Stack).or_default().insert(0, 2 << 20);
    /// assert_eq!(memory.private_total(), u64::MAX, "never wraps to 2 MiB");
    /// ```
    pub fn private_total(&self) -> u64 {
        self.private_per_node()
            .values()
            .fold(0u64, |sum, b| sum.saturating_add(*b))
    }

    /// Bytes per node of the process's own memory: everything but
    /// file-backed mappings, which are shared with other processes and
    /// placed by whoever read them first.
    pub fn private_per_node(&self) -> BTreeMap<u32, u64> {
        let mut total = BTreeMap::new();
        for (kind, per_node) in &self.bytes {
            if *kind == MemoryKind::File {
                continue;
            }
            for (node, bytes) in per_node {
                let slot: &mut u64 = total.entry(*node).or_default();
                *slot = slot.saturating_add(*bytes);
            }
        }
        total
    }

    /// Adds another process's memory (saturating).
    pub fn merge(&mut self, other: &ProcessMemory) {
        self.transparent_huge_bytes = self
            .transparent_huge_bytes
            .saturating_add(other.transparent_huge_bytes);
        for (kind, per_node) in &other.bytes {
            let mine = self.bytes.entry(*kind).or_default();
            for (node, bytes) in per_node {
                let slot = mine.entry(*node).or_default();
                *slot = slot.saturating_add(*bytes);
            }
        }
    }

    /// The private memory as a page histogram in base pages, for auditing
    /// against a policy.
    pub fn private_histogram(&self) -> PageHistogram {
        let page = linux::page_size() as u64;
        let per_node: BTreeMap<u32, u64> = self
            .private_per_node()
            .into_iter()
            .map(|(n, b)| (n, b / page))
            .collect();
        PageHistogram {
            page_size: page,
            queried: per_node.values().sum(),
            per_node,
            not_present: 0,
            unknown: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_arithmetic() {
        let mut h = PageHistogram {
            page_size: 4096,
            queried: 10,
            per_node: BTreeMap::from([(0, 6), (1, 2)]),
            not_present: 2,
            unknown: 0,
        };
        assert_eq!(h.present(), 8);
        assert_eq!(h.fraction(0), 0.75);
        assert_eq!(h.dominant_node(), Some(0));
        assert_eq!(
            h.to_string(),
            "node0 6 (75.0%), node1 2 (25.0%), 2 not present"
        );
        h.merge(&h.clone());
        assert_eq!(h.on_node(1), 4);
        assert_eq!(h.queried, 20);
        assert_eq!(PageHistogram::default().to_string(), "no pages present");
    }

    #[test]
    fn untouched_pages_are_not_present() {
        let page = linux::page_size();
        let addr = linux::map_anonymous(8 * page, linux::Backing::Base).unwrap();
        let h = locate(addr, 8 * page, Sample::All).unwrap();
        assert_eq!(h.queried, 8);
        assert_eq!(h.not_present, 8);
        // Touch two pages: they become present on some node.
        // SAFETY: addr is a fresh private mapping of 8 pages.
        unsafe {
            addr.write(1);
            addr.add(5 * page).write(1);
        }
        let h = locate(addr, 8 * page, Sample::All).unwrap();
        assert_eq!(h.present(), 2);
        assert_eq!(h.not_present, 6);
        let sampled = locate(addr, 8 * page, Sample::Pages(2)).unwrap();
        assert_eq!(sampled.queried, 2);
        assert_eq!(sampled.present(), 1, "first page touched, last not");
        // SAFETY: the mapping is not used again.
        unsafe { linux::unmap(addr, 8 * page).unwrap() };
    }

    /// The pagemap path that stands in for `move_pages(2)` where a kernel
    /// hides pages a NUMA-balancing scan is watching: asked directly of
    /// every page of a half-touched mapping, it agrees with `move_pages`
    /// (touched pages on the node it names, untouched not present), or,
    /// without `CAP_SYS_ADMIN`, counts the touched pages as unknown.
    #[test]
    fn pagemap_agrees_with_move_pages() {
        let page = linux::page_size();
        let addr = linux::map_anonymous(8 * page, linux::Backing::Base).unwrap();
        for k in [0, 3, 4, 7] {
            // SAFETY: inside the fresh private mapping of 8 pages.
            unsafe { addr.add(k * page).write(1) };
        }
        let kernel = locate(addr, 8 * page, Sample::All).unwrap();
        assert_eq!((kernel.present(), kernel.not_present), (4, 4));
        let mut pagemap = PageHistogram::default();
        let pages: Vec<usize> = (0..8).map(|k| addr as usize + k * page).collect();
        count_absent(&mut pagemap, &pages);
        assert_eq!(pagemap.not_present, 4);
        let frames_readable = procfs::pagemap_of_self(&pages[..1], page).unwrap()[0].pfn != 0;
        if frames_readable && procfs::memory_block_nodes().is_some() {
            assert_eq!(pagemap.per_node, kernel.per_node);
            assert_eq!(pagemap.unknown, 0);
        } else {
            eprintln!("frame numbers or memory blocks not readable here: the touched pages count as unknown");
            assert_eq!((pagemap.present(), pagemap.unknown), (0, 4));
        }
        // SAFETY: the mapping is not used again.
        unsafe { linux::unmap(addr, 8 * page).unwrap() };
    }

    /// `move_pages(2)` answers `-EFAULT` for an address with no mapping
    /// (and, on Linux 6.1 to 6.4, for a huge page under a NUMA-balancing
    /// scan, checked in the emulated suite's `buffer.while-balancing`):
    /// the pagemap then tells a hole from a page, and a hole is not
    /// present.
    #[test]
    fn pages_of_an_unmapped_hole_are_not_present() {
        let page = linux::page_size();
        let addr = linux::map_anonymous(4 * page, linux::Backing::Base).unwrap();
        // SAFETY: inside the fresh private mapping of 4 pages.
        unsafe { addr.write(1) };
        // SAFETY: the two pages unmapped are not used again.
        unsafe { linux::unmap(addr.wrapping_add(2 * page), 2 * page).unwrap() };
        let pages: Vec<*const u8> = (0..4)
            .map(|k| addr.wrapping_add(k * page).cast_const())
            .collect();
        let mut status = vec![0; 4];
        linux::query_pages(&pages, &mut status).unwrap();
        assert_eq!(&status[2..], [-libc::EFAULT, -libc::EFAULT], "{status:?}");
        let h = locate_pages(&pages).unwrap();
        assert_eq!((h.present() + h.unknown, h.not_present), (1, 3), "{h:?}");
        // SAFETY: the mapping's remaining pages are not used again.
        unsafe { linux::unmap(addr, 2 * page).unwrap() };
    }

    #[test]
    fn process_memory_by_kind() {
        let entries = procfs::parse_numa_maps(
            "1000 default file=/bin/x mapped=2 N0=2 kernelpagesize_kB=4\n\
             2000 default heap anon=3 N0=1 N1=2 kernelpagesize_kB=4\n\
             3000 bind:1 anon=1 N1=1 kernelpagesize_kB=2048\n\
             4000 default anon=4 N0=4 kernelpagesize_kB=4\n",
        );
        let memory = ProcessMemory::from_numa_maps(&entries);
        assert_eq!(memory.bytes[&MemoryKind::File][&0], 8192);
        assert_eq!(memory.bytes[&MemoryKind::Heap][&1], 8192);
        assert_eq!(memory.bytes[&MemoryKind::Huge][&1], 2 << 20);
        assert_eq!(memory.private_per_node()[&0], 5 * 4096);
        assert_eq!(memory.per_node()[&0], 7 * 4096);
    }
}
