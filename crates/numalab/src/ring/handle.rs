//! [`Ring`]: a handle on a ring segment, made or opened, from which the
//! writer and readers attach.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::error::{RingError, SizeError};
use super::layout::{Geometry, FLAG_HUGE_2M, FLAG_LAG_DEFAULT, FLAG_LOCKED, FLAG_THP};
use super::limits::{MAX_BLOCKS, MAX_META_SIZE, MAX_READERS};
use super::monitor::RingStats;
use super::reader::Reader;
use super::segment::{check_name, CreateSpec, Segment, SHM_DIR};
use super::writer::Writer;
use crate::audit::{audit, PlacementAudit};
use crate::buffer::{check_free_memory, BufferError, BufferOptions, HugePages};
use crate::locate::{self, LocateError, PageHistogram, Sample};
use crate::policy::MemPolicy;
use crate::sets::NodeSet;
use crate::sys::linux;

/// What the writer does about a reader that falls a whole ring behind.
///
/// ```
/// use numalab::ring::Backpressure;
/// assert_eq!("lag".parse::<Backpressure>()?, Backpressure::Lag);
/// assert_eq!(Backpressure::default(), Backpressure::Block);
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backpressure {
    /// The writer waits for the reader (no data is lost).
    #[default]
    Block,
    /// The writer moves the reader on to the oldest block still in the
    /// ring; the reader is marked lagging and the blocks it missed counted.
    Lag,
}

impl fmt::Display for Backpressure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backpressure::Block => "block",
            Backpressure::Lag => "lag",
        })
    }
}

impl std::str::FromStr for Backpressure {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "block" | "wait" => Ok(Backpressure::Block),
            "lag" | "skip" => Ok(Backpressure::Lag),
            other => Err(format!(
                "unknown back-pressure {other:?}; expected block or lag"
            )),
        }
    }
}

/// How a ring is made.
///
/// ```
/// use numalab::ring::{Backpressure, RingOptions};
/// let options = RingOptions::new("radio", 8 << 24, 16 << 20) // 8 blocks of 16 MiB
///     .node(0)
///     .backpressure(Backpressure::Lag);
/// assert_eq!(options.blocks(), 8);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingOptions {
    /// Name: 1 to 100 of `A-Z a-z 0-9 . _ -`.
    pub name: String,
    /// Bytes of data (a whole number of blocks, at least two).
    pub size: usize,
    /// Bytes per block (a multiple of 64).
    pub block_size: usize,
    /// Where the memory goes (default: `local`, the creating thread's node).
    pub policy: MemPolicy,
    /// Page size: base, transparent huge pages (needs
    /// `/sys/kernel/mm/transparent_hugepage/shmem_enabled` at `advise` or
    /// `always`), or explicit 2 MiB pages (from a hugetlbfs at
    /// `/dev/hugepages`).
    pub huge_pages: HugePages,
    /// Lock the pages in memory (`mlock`).
    pub lock: bool,
    /// The readers' default back-pressure.
    pub backpressure: Backpressure,
    /// Reader slots (1 to 64; default 8).
    pub max_readers: u32,
    /// Bytes for each transfer header (default 4096).
    pub header_size: usize,
}

impl RingOptions {
    /// A ring `name` of `size` bytes in blocks of `block_size`.
    pub fn new(name: &str, size: usize, block_size: usize) -> RingOptions {
        RingOptions {
            name: name.to_owned(),
            size,
            block_size,
            policy: MemPolicy::Local,
            huge_pages: HugePages::None,
            lock: false,
            backpressure: Backpressure::Block,
            max_readers: 8,
            header_size: 4096,
        }
    }

    /// Places the memory by `policy`.
    pub fn policy(mut self, policy: MemPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Places the memory on `node` (`bind`).
    pub fn node(self, node: u32) -> Self {
        self.policy(MemPolicy::Bind(NodeSet::single(node)))
    }

    /// Backs the ring with huge pages.
    pub fn huge_pages(mut self, huge_pages: HugePages) -> Self {
        self.huge_pages = huge_pages;
        self
    }

    /// Locks the pages in memory.
    pub fn lock(mut self, lock: bool) -> Self {
        self.lock = lock;
        self
    }

    /// Sets the readers' default back-pressure.
    pub fn backpressure(mut self, backpressure: Backpressure) -> Self {
        self.backpressure = backpressure;
        self
    }

    /// Sets the number of reader slots.
    pub fn max_readers(mut self, max_readers: u32) -> Self {
        self.max_readers = max_readers;
        self
    }

    /// Sets the room for each transfer header.
    pub fn header_size(mut self, header_size: usize) -> Self {
        self.header_size = header_size;
        self
    }

    /// Blocks in the ring.
    pub fn blocks(&self) -> usize {
        self.size.checked_div(self.block_size).unwrap_or(0)
    }

    /// Bytes of the segment file these options make, once the sizes are
    /// valid: the data (`size`), and beside it a 32-byte descriptor and a
    /// `header_size` transfer-header slot per block, 384 bytes of header
    /// and writer control, 128 bytes per reader slot, rounded up to whole
    /// pages (2 MiB pages with huge pages). Memory is taken for all of it.
    ///
    /// ```
    /// use numalab::ring::RingOptions;
    ///
    /// // 1 Mi blocks of 64 bytes: 64 MiB of data, and 4 KiB of transfer
    /// // header room and 32 bytes of descriptor beside each block.
    /// let small = RingOptions::new("radio", 64 << 20, 64);
    /// assert!(small.segment_size()? > (64 + 4096 + 32) << 20);
    /// // With the smallest header room, 64 bytes a block.
    /// assert!(small.header_size(64).segment_size()? < (64 + 64 + 32 + 1) << 20);
    /// # Ok::<(), numalab::ring::RingError>(())
    /// ```
    pub fn segment_size(&self) -> Result<u64, RingError> {
        Ok(self.geometry()?.total_size)
    }

    fn flags(&self) -> u32 {
        let mut flags = match self.huge_pages {
            HugePages::None => 0,
            HugePages::Transparent => FLAG_THP,
            HugePages::Explicit2M => FLAG_HUGE_2M,
        };
        if self.lock {
            flags |= FLAG_LOCKED;
        }
        if self.backpressure == Backpressure::Lag {
            flags |= FLAG_LAG_DEFAULT;
        }
        flags
    }

    /// Checks everything about these options that can be checked without
    /// making the ring: the name, and the sizes (block size, whole blocks,
    /// block count, reader slots, header room). [`Ring::create`] checks the
    /// same before anything is allocated; call this to refuse bad input
    /// before starting anything else. Whether the node exists and has the
    /// memory is only known when the ring is made.
    ///
    /// ```
    /// use numalab::ring::{RingError, RingOptions, SizeError};
    ///
    /// assert!(RingOptions::new("radio", 8 << 20, 1 << 20).validate().is_ok());
    /// let err = RingOptions::new("radio", 8 * 100, 100).validate().unwrap_err();
    /// assert!(matches!(err, RingError::Size(SizeError::BlockSize { block_size: 100 })));
    /// assert_eq!(err.to_string(), "invalid ring size: block size 100 must be a multiple of 64 bytes");
    /// ```
    pub fn validate(&self) -> Result<(), RingError> {
        check_name(&self.name)?;
        self.geometry()?;
        Ok(())
    }

    /// Checks the sizes; the layout they give.
    pub(crate) fn geometry(&self) -> Result<Geometry, RingError> {
        if self.block_size < 64 || !self.block_size.is_multiple_of(64) {
            return Err(SizeError::BlockSize {
                block_size: self.block_size,
            }
            .into());
        }
        if !self.size.is_multiple_of(self.block_size) {
            return Err(SizeError::NotWholeBlocks {
                size: self.size,
                block_size: self.block_size,
            }
            .into());
        }
        let blocks = (self.size / self.block_size) as u64;
        if !(2..=MAX_BLOCKS).contains(&blocks) {
            return Err(SizeError::Blocks { blocks }.into());
        }
        if !(1..=MAX_READERS).contains(&self.max_readers) {
            return Err(SizeError::Readers {
                max_readers: self.max_readers,
            }
            .into());
        }
        let meta = self.header_size;
        if meta < 64 || meta > MAX_META_SIZE as usize || !meta.is_multiple_of(64) {
            return Err(SizeError::HeaderSize { header_size: meta }.into());
        }
        Geometry::compute(
            self.block_size as u64,
            blocks,
            self.max_readers,
            meta as u32,
            self.flags(),
            linux::page_size() as u64,
        )
        .ok_or_else(|| SizeError::TooLarge { size: self.size }.into())
    }
}

/// Checks that rings made with each of `rings` fit in memory together,
/// before any is made: the sizes of each ([`RingOptions::validate`]), then
/// their segments' bytes in all ([`RingOptions::segment_size`], data and
/// per-block overhead) against the free memory (and reclaimable page
/// cache) of the nodes their policies bind to, against the free 2 MiB huge
/// pages there for explicit huge pages, and against the space left in
/// `/dev/shm`. [`Ring::create`] checks one ring; a program that makes many
/// checks them all first, so that it fails before it has made any rather
/// than after it has taken the memory.
///
/// ```
/// use numalab::ring::{check_room, RingError, RingOptions};
///
/// let ring = |i: usize| RingOptions::new(&format!("stream-{i}"), 8 << 20, 1 << 20).node(0);
/// check_room(&[ring(0), ring(1)])?;
/// // A million such rings fit nowhere; the error names the total.
/// let many: Vec<RingOptions> = (0..1_000_000).map(ring).collect();
/// match check_room(&many) {
///     Err(RingError::NoRoom { rings, needed, .. }) => {
///         assert_eq!(rings, 1_000_000);
///         assert!(needed > 1_000_000 * (8 << 20));
///     }
///     other => panic!("expected no room, got {other:?}"),
/// }
/// # Ok::<(), RingError>(())
/// ```
pub fn check_room(rings: &[RingOptions]) -> Result<(), RingError> {
    // (policy, pages) -> (policy, pages, rings, segment bytes, data bytes)
    type Group = (MemPolicy, HugePages, usize, u64, u64);
    let mut groups: BTreeMap<(String, String), Group> = BTreeMap::new();
    let (mut shm_rings, mut shm_bytes, mut shm_data) = (0usize, 0u64, 0u64);
    for options in rings {
        let g = options.geometry()?;
        let data = g.blocks * g.block_size;
        let key = (options.policy.to_string(), options.huge_pages.to_string());
        let group = groups
            .entry(key)
            .or_insert_with(|| (options.policy.clone(), options.huge_pages, 0, 0, 0));
        group.2 += 1;
        group.3 = group.3.saturating_add(g.total_size);
        group.4 = group.4.saturating_add(data);
        if options.huge_pages != HugePages::Explicit2M {
            shm_rings += 1;
            shm_bytes = shm_bytes.saturating_add(g.total_size);
            shm_data = shm_data.saturating_add(data);
        }
    }
    for (policy, huge_pages, count, needed, data) in groups.into_values() {
        policy.check()?;
        let buffer = BufferOptions::new(policy).huge_pages(huge_pages);
        let len = usize::try_from(needed).unwrap_or(usize::MAX);
        match check_free_memory(len, &buffer) {
            Ok(()) => {}
            Err(BufferError::InsufficientMemory {
                nodes,
                free,
                reclaimable,
                ..
            }) => {
                return Err(RingError::NoRoom {
                    rings: count,
                    needed,
                    data,
                    place: format!(
                        "on {} {nodes}",
                        if nodes.len() == 1 { "node" } else { "nodes" }
                    ),
                    free: free.saturating_add(reclaimable),
                })
            }
            Err(other) => return Err(other.into()),
        }
    }
    if shm_rings > 0 {
        if let Ok(free) = linux::fs_available_bytes(Path::new(SHM_DIR)) {
            if shm_bytes > free {
                return Err(RingError::NoRoom {
                    rings: shm_rings,
                    needed: shm_bytes,
                    data: shm_data,
                    place: format!("in {SHM_DIR}"),
                    free,
                });
            }
        }
    }
    Ok(())
}

/// A handle on a ring segment: made with [`Ring::create`] (the creator
/// removes the segment's name when it drops the handle, unless told to
/// [`keep`](Ring::keep) it) or opened with [`Ring::open`]. The writer and
/// the readers attach through it.
///
/// ```
/// use numalab::ring::{Ring, RingOptions};
/// # let name = format!("doc-ring-{}", std::process::id());
/// let ring = Ring::create(&RingOptions::new(&name, 4 << 16, 1 << 16))?;
/// assert_eq!((ring.blocks(), ring.block_size()), (4, 1 << 16));
/// assert!(ring.audit().is_match()); // every page where `local` puts it
/// let path = ring.path().to_owned(); // a file in /dev/shm
/// assert!(path.exists());
/// drop(ring); // the creator's handle takes the name with it
/// assert!(!path.exists());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// See the [module documentation](super) for a writer and a reader.
pub struct Ring {
    pub(super) seg: Arc<Segment>,
    owner: bool,
    touched_from: NodeSet,
}

impl fmt::Debug for Ring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ring")
            .field("name", &self.seg.name)
            .field("path", &self.seg.path)
            .field("blocks", &self.seg.geometry.blocks)
            .field("block_size", &self.seg.geometry.block_size)
            .field("owner", &self.owner)
            .finish()
    }
}

impl Ring {
    /// Makes a ring as `options` say. Everything is checked (name, sizes,
    /// policy, free memory on the bound nodes) before anything is made; a
    /// failure leaves nothing behind.
    pub fn create(options: &RingOptions) -> Result<Ring, RingError> {
        let geometry = options.geometry()?;
        let seg = Segment::create(&CreateSpec {
            name: &options.name,
            geometry,
            policy: &options.policy,
            huge_pages: options.huge_pages,
            lock: options.lock,
        })?;
        Ok(Ring {
            seg: Arc::new(seg),
            owner: true,
            touched_from: NodeSet::single(linux::getcpu().1),
        })
    }

    /// Opens the existing ring `name`, validating its header (a segment
    /// that is incomplete, foreign, of another layout version, corrupt, not
    /// owned by this user or not owner-only is refused with an error).
    ///
    /// # Safety
    ///
    /// The segment is memory shared with other processes, and the handles
    /// lend its blocks as ordinary slices. Every other process that maps
    /// it must follow the ring protocol — in practice, use this module
    /// (of the same layout version) and nothing else to touch it — and
    /// must not shrink the file. A process that writes the segment by
    /// other means can change bytes under a borrowed slice.
    pub unsafe fn open(name: &str) -> Result<Ring, RingError> {
        let seg = Segment::open(name, false)?;
        Ok(Ring {
            seg: Arc::new(seg),
            owner: false,
            touched_from: NodeSet::single(linux::getcpu().1),
        })
    }

    /// Attaches the writer; [`RingError::WriterBusy`] while another lives.
    pub fn writer(&self) -> Result<Writer, RingError> {
        Writer::attach(self.seg.clone())
    }

    /// Joins as a reader with the ring's default back-pressure.
    pub fn reader(&self) -> Result<Reader, RingError> {
        let mode = if self.seg.geometry.flags & FLAG_LAG_DEFAULT != 0 {
            Backpressure::Lag
        } else {
            Backpressure::Block
        };
        Reader::join(self.seg.clone(), mode)
    }

    /// Joins as a reader with its own back-pressure.
    pub fn reader_with(&self, backpressure: Backpressure) -> Result<Reader, RingError> {
        Reader::join(self.seg.clone(), backpressure)
    }

    /// The ring's name.
    pub fn name(&self) -> &str {
        &self.seg.name
    }

    /// The segment's file.
    pub fn path(&self) -> &Path {
        &self.seg.path
    }

    /// Bytes per block.
    pub fn block_size(&self) -> usize {
        self.seg.geometry.block_size as usize
    }

    /// Blocks in the ring.
    pub fn blocks(&self) -> usize {
        self.seg.geometry.blocks as usize
    }

    /// The memory policy the creator asked for.
    pub fn policy(&self) -> Result<MemPolicy, RingError> {
        self.seg
            .info
            .policy
            .parse()
            .map_err(|_| RingError::Corrupt {
                reason: format!("unknown policy {:?} in the header", self.seg.info.policy),
            })
    }

    /// The ring's counters (bytes, blocks, each reader's lag, waits).
    pub fn stats(&self) -> RingStats {
        // A description of our own: the creator's lock is on `seg.fd`, and
        // a description does not see its own locks.
        match self.seg.reopen() {
            Ok(fd) => RingStats::read(&self.seg, &fd),
            Err(_) => RingStats::read(&self.seg, &self.seg.fd),
        }
    }

    /// Where the data blocks' pages are.
    pub fn locate(&self, sample: Sample) -> Result<PageHistogram, LocateError> {
        let (ptr, len) = self.seg.data_range();
        locate::locate(ptr, len, sample)
    }

    /// Checks every page of the data blocks against the policy asked for.
    pub fn audit(&self) -> PlacementAudit {
        let found = self.locate(Sample::All).unwrap_or_default();
        let policy = self.policy().unwrap_or(MemPolicy::Default);
        // `local` and default pages of a memory-less node's CPUs go to
        // the nearest node with memory.
        let home = crate::system::local_memory_nodes(&self.touched_from);
        audit(&policy, &home, &found)
    }

    /// Leaves the segment's name in place when this creator's handle is
    /// dropped (remove it later with [`remove`](super::remove)).
    pub fn keep(&mut self) {
        self.owner = false;
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Only our own segment: the name may have been removed and reused.
        if self.owner && self.seg.still_named() {
            let _ = linux::unlink(&self.seg.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size_error(options: &RingOptions) -> SizeError {
        match options.validate() {
            Err(RingError::Size(err)) => err,
            other => panic!("expected a size error, got {other:?}"),
        }
    }

    #[test]
    fn validate_names_the_size_rule_each_option_breaks() {
        assert!(RingOptions::new("ok", 2 * 64, 64).validate().is_ok());
        assert_eq!(
            size_error(&RingOptions::new("r", 8 * 100, 100)),
            SizeError::BlockSize { block_size: 100 }
        );
        assert_eq!(
            size_error(&RingOptions::new("r", 0, 0)),
            SizeError::BlockSize { block_size: 0 }
        );
        assert_eq!(
            size_error(&RingOptions::new("r", 101 * 64, 128)),
            SizeError::NotWholeBlocks {
                size: 6464,
                block_size: 128
            }
        );
        assert_eq!(
            size_error(&RingOptions::new("r", 64, 64)),
            SizeError::Blocks { blocks: 1 }
        );
        assert_eq!(
            size_error(&RingOptions::new("r", (MAX_BLOCKS as usize + 1) * 64, 64)),
            SizeError::Blocks {
                blocks: MAX_BLOCKS + 1
            }
        );
        for readers in [0, MAX_READERS + 1] {
            assert_eq!(
                size_error(&RingOptions::new("r", 4 * 64, 64).max_readers(readers)),
                SizeError::Readers {
                    max_readers: readers
                }
            );
        }
        assert_eq!(
            size_error(&RingOptions::new("r", 4 * 64, 64).header_size(100)),
            SizeError::HeaderSize { header_size: 100 }
        );
    }

    #[test]
    fn validate_checks_the_name_and_makes_nothing() {
        let err = RingOptions::new("../etc", 4 * 64, 64)
            .validate()
            .unwrap_err();
        assert!(matches!(err, RingError::InvalidName { .. }), "{err}");
        let name = format!("validate-only-{}", std::process::id());
        RingOptions::new(&name, 4 * 64, 64).validate().unwrap();
        assert!(
            !crate::ring::list().iter().any(|e| e.name == name),
            "validate must not make a segment"
        );
    }
}
