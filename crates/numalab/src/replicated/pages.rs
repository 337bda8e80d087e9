//! [`ReplicatedPages`]: a read-mostly byte region with lazy, page-granular
//! node-local copies, after the kernel's per-node page-cache replication.
//!
//! Every page has one master copy (on the master's node) and, per replica,
//! at most one local copy. A read from a replica without a copy of a page
//! is served from the master and counted; after `copy_after` such reads
//! the page is copied into memory bound to the replica's node, if the
//! replica's budget and its node's free memory allow. A write replaces the
//! page's master (copy-on-write: readers never see a half-written page)
//! and collapses every local copy. Old masters and old copies are
//! reclaimed through epoch-based reclamation (`crossbeam-epoch`), once no
//! reader can still hold them. When a budget is reached or a node's free
//! memory falls below the watermark, no new memory is taken: cold copies
//! (by a clock over referenced bits, as the kernel's page reclaim) are
//! evicted first, and under memory pressure their pages are given back to
//! the kernel. Making a copy can fail for any of these reasons; a read
//! never does: it reads the master.
//!
//! Per page and replica: the copy's address (`AtomicPtr`, null for none),
//! a counter of reads served remotely since the last copy, and a
//! referenced bit. Each page has a lock taken by writers and by readers
//! installing a copy (never by reads themselves), so a copy is always made
//! from the current master.
//!
//! Each replica reserves address space with one slot per page of the
//! region (bound to its node, memory taken only for slots in use), and
//! page `i`'s copy goes to slot `i` whenever that slot is free (when its
//! last copy is not yet reclaimed, the copy goes to a chunk instead). A
//! read then knows where the copy should be before the load of its
//! address completes: it compares, and copies the bytes from the computed
//! slot, so the copy does not wait for the lookup (which costs a page
//! read of 4 KiB about 15 % on the development VM when it must wait).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use crossbeam_epoch::{self as epoch, Guard};
use serde::{Deserialize, Serialize};

use super::locality::ReplicaSet;
use super::pool::{Pool, PoolInner};
use super::sync::{
    assign_thread_slot, thread_slot, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
    Backoff, CachePadded, Ordering,
};
use crate::buffer::{BufferError, NodeBuffer};
use crate::locate::{self, LocateError, PageHistogram, Sample};
use crate::policy::MemPolicy;
use crate::sets::NodeSet;
use crate::sys::linux;

/// How a [`ReplicatedPages`] region makes and limits its copies.
///
/// ```
/// use numalab::replicated::PagesOptions;
/// let options = PagesOptions::default()
///     .copy_after(4)                       // a local copy after 4 remote reads
///     .budget_per_replica(Some(64 << 20))  // at most 64 MiB of copies per node
///     .min_free_bytes(512 << 20);          // none when a node has < 512 MiB free
/// assert_eq!(options.copy_after, 4);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct PagesOptions {
    /// Bytes per replicated page: a power of two, at least the base page
    /// (default: the base page, 4 KiB on x86-64).
    pub page_size: usize,
    /// Remote reads of a page from one replica before that replica gets a
    /// local copy (default 2; 1 copies on first access, as the kernel).
    pub copy_after: u32,
    /// Most bytes of copies resident over all replicas (default none).
    pub budget_total: Option<u64>,
    /// Most bytes of copies resident per replica (default none).
    pub budget_per_replica: Option<u64>,
    /// No new copy memory on a node whose free memory is below this; cold
    /// copies are evicted and their pages given back instead (default 64 MiB).
    pub min_free_bytes: u64,
    /// Where the master copy lives (default: local to the thread that
    /// makes the region).
    pub master: MemPolicy,
    /// New masters (for writes), and copies that cannot have their
    /// page's own slot, are allocated in chunks of this many pages
    /// (default 64).
    pub chunk_pages: usize,
}

impl Default for PagesOptions {
    fn default() -> Self {
        PagesOptions {
            page_size: linux::page_size(),
            copy_after: 2,
            budget_total: None,
            budget_per_replica: None,
            min_free_bytes: 64 << 20,
            master: MemPolicy::Local,
            chunk_pages: 64,
        }
    }
}

impl PagesOptions {
    /// With pages of `bytes`.
    pub fn page_size(mut self, bytes: usize) -> Self {
        self.page_size = bytes;
        self
    }

    /// A copy after `reads` remote reads.
    pub fn copy_after(mut self, reads: u32) -> Self {
        self.copy_after = reads;
        self
    }

    /// At most `bytes` of copies over all replicas.
    pub fn budget_total(mut self, bytes: Option<u64>) -> Self {
        self.budget_total = bytes;
        self
    }

    /// At most `bytes` of copies per replica.
    pub fn budget_per_replica(mut self, bytes: Option<u64>) -> Self {
        self.budget_per_replica = bytes;
        self
    }

    /// The free-memory watermark.
    pub fn min_free_bytes(mut self, bytes: u64) -> Self {
        self.min_free_bytes = bytes;
        self
    }

    /// Where the master lives.
    pub fn master(mut self, policy: MemPolicy) -> Self {
        self.master = policy;
        self
    }

    /// Copies allocated `pages` at a time.
    pub fn chunk_pages(mut self, pages: usize) -> Self {
        self.chunk_pages = pages;
        self
    }

    fn check(&self) -> Result<(), PagesError> {
        let base = linux::page_size();
        if !self.page_size.is_power_of_two() || self.page_size < base {
            return Err(PagesError::Options(format!(
                "page_size {} must be a power of two of at least {base} bytes",
                self.page_size
            )));
        }
        if self.copy_after == 0 {
            return Err(PagesError::Options(
                "copy_after must be at least 1 (1: copy on the first remote read)".into(),
            ));
        }
        if self.chunk_pages == 0 {
            return Err(PagesError::Options("chunk_pages must be at least 1".into()));
        }
        self.master.check()?;
        Ok(())
    }
}

/// Why a [`ReplicatedPages`] operation failed.
///
/// ```
/// use numalab::replicated::{PagesError, PagesOptions, ReplicaSet, ReplicatedPages};
/// let region = ReplicatedPages::new(&[0u8; 100], ReplicaSet::system()?, PagesOptions::default())?;
/// let err = region.read(96, &mut [0u8; 8]).unwrap_err();
/// assert!(matches!(err, PagesError::OutOfRange { .. }));
/// assert_eq!(err.to_string(), "bytes 96..104 are outside the region of 100 bytes");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PagesError {
    /// An empty region was asked for.
    #[error("a replicated region must hold at least one byte")]
    Empty,
    /// Bad options.
    #[error("replicated pages: {0}")]
    Options(String),
    /// A range outside the region.
    #[error("bytes {offset}..{end} are outside the region of {len} bytes")]
    OutOfRange {
        /// Start of the range.
        offset: usize,
        /// End of the range.
        end: usize,
        /// The region's length.
        len: usize,
    },
    /// The replica set could not be made.
    #[error(transparent)]
    Set(#[from] super::ReplicaSetError),
    /// The master's policy is not usable.
    #[error(transparent)]
    Policy(#[from] crate::policy::PolicyError),
    /// Memory for the master could not be had (reads never fail for this;
    /// making or writing the region can).
    #[error("memory for the master copy: {0}")]
    Allocation(#[from] BufferError),
    /// The source file could not be read.
    #[error("could not read {path}: {source}")]
    File {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Read counters, one set per reader slot so readers do not contend.
#[derive(Debug, Default)]
struct ReadCounters {
    local: AtomicU64,
    remote: AtomicU64,
}

/// Read counters owned by the first threads (the last slot is shared).
const READ_SLOTS: usize = 64;

struct PagesReplica {
    node: u32,
    /// Per page: the local copy, or null.
    copies: Box<[AtomicPtr<u8>]>,
    /// Per page: remote reads since the page last had a local copy.
    misses: Box<[AtomicU32]>,
    /// Per page: read since the eviction clock last passed.
    referenced: Box<[AtomicBool]>,
    pool: Arc<Pool>,
    reads: Box<[CachePadded<ReadCounters>]>,
    live: AtomicUsize,
    made: AtomicU64,
    evicted: AtomicU64,
    collapsed: AtomicU64,
    failed: AtomicU64,
}

/// A read-mostly byte region with lazy node-local copies of its pages.
///
/// Reads ([`read`], [`visit`]) are served from the calling thread's
/// replica's copy of each page when it has one, from the master
/// otherwise; pages read remotely often enough get a local copy. Writes
/// ([`write`]) replace a page's master and drop its copies; later reads
/// copy it again. Every page is read and written atomically; a read
/// spanning pages concurrent with a write spanning them may see some pages
/// before the write and some after (as `read(2)` and `write(2)` on a
/// file).
///
/// Replacing a shared read-only buffer:
///
/// ```
/// use numalab::replicated::{PagesOptions, ReplicaSet, ReplicatedPages};
///
/// // Before: let index: Arc<Vec<u8>> = Arc::new(std::fs::read("index.bin")?);
/// let data: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
/// let index = ReplicatedPages::new(&data, ReplicaSet::system()?, PagesOptions::default())?;
///
/// // Before: buf.copy_from_slice(&index[4096..4096 + 512]);
/// let mut buf = [0u8; 512];
/// for _ in 0..3 {
///     index.read(4096, &mut buf)?; // after 2 remote reads: a local copy
/// }
/// assert_eq!(&buf[..], &data[4096..4096 + 512]);
///
/// // Or work on the bytes in place, page run by page run:
/// let mut sum = 0u64;
/// index.visit(0, data.len(), |_offset, bytes| sum += bytes.iter().map(|&b| b as u64).sum::<u64>())?;
///
/// // A write collapses the copies of the pages it touches.
/// index.write(4096, b"new header")?;
/// index.read(4096, &mut buf[..10])?;
/// assert_eq!(&buf[..10], b"new header");
///
/// let stats = index.stats();
/// println!("copies made: {}", stats.iter().map(|s| s.copies_made).sum::<u64>());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`read`]: ReplicatedPages::read
/// [`visit`]: ReplicatedPages::visit
/// [`write`]: ReplicatedPages::write
pub struct ReplicatedPages {
    set: ReplicaSet,
    len: usize,
    page: usize,
    shift: u32,
    options: PagesOptions,
    /// Per page: the master copy.
    masters: Box<[AtomicPtr<u8>]>,
    /// Per page: held by writers and by readers installing a copy.
    locks: Box<[AtomicBool]>,
    master_pool: Arc<Pool>,
    replicas: Box<[PagesReplica]>,
}

impl fmt::Debug for ReplicatedPages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicatedPages")
            .field("len", &self.len)
            .field("page_size", &self.page)
            .field("nodes", &self.set.nodes())
            .finish_non_exhaustive()
    }
}

/// `x`, as a value the compiler cannot relate to anything else: a read
/// of a copy's bytes through its predicted address must not be turned into
/// a read through the loaded one it was compared with (same bytes, but
/// waiting for the load).
#[inline(always)]
fn opaque(x: usize) -> usize {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        let mut x = x;
        // SAFETY: an empty instruction sequence that claims to change `x`:
        // it touches no memory, no stack and no flags.
        unsafe {
            std::arch::asm!("/* {0} */", inout(reg) x, options(pure, nomem, nostack, preserves_flags))
        };
        x
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        std::hint::black_box(x)
    }
}

/// A pointer handed to the epoch collector.
struct Slot(usize);

/// Hands the thread's retired pages to the epoch collector's global queue
/// now (otherwise they wait until this thread has retired dozens more)
/// and reclaims what is safe. Never called with a pool locked: reclaiming
/// locks pools.
fn flush(guard: &Guard) {
    guard.flush();
}

impl ReplicatedPages {
    /// A region holding a copy of `data`, replicated over `set`.
    pub fn new(data: &[u8], set: ReplicaSet, options: PagesOptions) -> Result<Self, PagesError> {
        Self::build(data.len(), set, options, |master| {
            master[..data.len()].copy_from_slice(data);
            Ok(())
        })
    }

    /// A region holding the contents of the file at `path`, a regular
    /// file (a device, a FIFO or a directory is refused, not read: a FIFO
    /// could block forever, `/dev/zero` never end).
    pub fn from_file(
        path: impl AsRef<Path>,
        set: ReplicaSet,
        options: PagesOptions,
    ) -> Result<Self, PagesError> {
        use std::io::Read;
        let path = path.as_ref();
        let file_error = |source| PagesError::File {
            path: path.display().to_string(),
            source,
        };
        // Opened without blocking, so a FIFO is seen for what it is.
        let mut file =
            std::fs::File::from(crate::sys::linux::open_input(path, true).map_err(file_error)?);
        let meta = file.metadata().map_err(file_error)?;
        if let Some(kind) = crate::files::special_kind(std::os::unix::fs::MetadataExt::mode(&meta))
        {
            return Err(file_error(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("a {kind}, not a regular file"),
            )));
        }
        let len = meta.len() as usize;
        Self::build(len, set, options, |master| {
            file.read_exact(&mut master[..len]).map_err(file_error)
        })
    }

    fn build(
        len: usize,
        set: ReplicaSet,
        options: PagesOptions,
        fill: impl FnOnce(&mut [u8]) -> Result<(), PagesError>,
    ) -> Result<Self, PagesError> {
        if len == 0 {
            return Err(PagesError::Empty);
        }
        options.check()?;
        let page = options.page_size;
        let pages = len.div_ceil(page);
        let mut region = NodeBuffer::new(pages * page, options.master.clone())?;
        fill(region.as_mut_slice())?;
        let master_node = region
            .locate(Sample::Pages(1))
            .ok()
            .and_then(|h| h.dominant_node())
            .unwrap_or(0);
        let master_pool = Arc::new(Pool::new(master_node, options.master.clone(), page));
        let base = region.as_ptr() as usize;
        let masters = (0..pages)
            .map(|i| AtomicPtr::new((base + i * page) as *mut u8))
            .collect();
        {
            // The initial region's pages become the master pool's first
            // chunk, all in use.
            let mut inner = master_pool.lock();
            master_pool.adopt(&mut inner, region, pages);
            inner.free.clear();
        }
        let replicas = set
            .nodes()
            .iter()
            .map(|&node| {
                super::storage::on_node(node, || PagesReplica {
                    node,
                    copies: (0..pages).map(|_| AtomicPtr::default()).collect(),
                    misses: (0..pages).map(|_| AtomicU32::new(0)).collect(),
                    referenced: (0..pages).map(|_| AtomicBool::new(false)).collect(),
                    pool: Arc::new(Pool::with_area(
                        node,
                        MemPolicy::Bind(NodeSet::single(node)),
                        page,
                        pages,
                    )),
                    reads: (0..=READ_SLOTS).map(|_| CachePadded::default()).collect(),
                    live: AtomicUsize::new(0),
                    made: AtomicU64::new(0),
                    evicted: AtomicU64::new(0),
                    collapsed: AtomicU64::new(0),
                    failed: AtomicU64::new(0),
                })
            })
            .collect();
        Ok(ReplicatedPages {
            set,
            len,
            page,
            shift: page.trailing_zeros(),
            options,
            masters,
            locks: (0..pages).map(|_| AtomicBool::new(false)).collect(),
            master_pool,
            replicas,
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes per replicated page.
    pub fn page_size(&self) -> usize {
        self.page
    }

    /// The replicas and their nodes.
    pub fn replica_set(&self) -> &ReplicaSet {
        &self.set
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<(), PagesError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            end => Err(PagesError::OutOfRange {
                offset,
                end: end.unwrap_or(usize::MAX),
                len: self.len,
            }),
        }
    }

    /// Copies `buf.len()` bytes from `offset` into `buf`, from the calling
    /// thread's replica's copies where it has them. Fails only for a range
    /// outside the region.
    #[inline]
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), PagesError> {
        self.read_from(self.set.current(), offset, buf)
    }

    /// As [`read`](Self::read), through replica `replica` (panics if out
    /// of range).
    pub fn read_from(
        &self,
        replica: usize,
        offset: usize,
        buf: &mut [u8],
    ) -> Result<(), PagesError> {
        let base = buf.as_mut_ptr();
        self.visit_from(replica, offset, buf.len(), |at, bytes| {
            // SAFETY: `visit` hands out runs that tile `offset..offset +
            // len` exactly, so `at - offset + bytes.len() <= buf.len()`;
            // the source is a live page of the region, not `buf`.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(at - offset), bytes.len())
            }
        })
    }

    /// Calls `f(offset, bytes)` for consecutive runs of the range, each
    /// within one page, without copying: `bytes` is the local copy or the
    /// master.
    pub fn visit(
        &self,
        offset: usize,
        len: usize,
        f: impl FnMut(usize, &[u8]),
    ) -> Result<(), PagesError> {
        self.visit_from(self.set.current(), offset, len, f)
    }

    /// As [`visit`](Self::visit), through replica `replica`.
    pub fn visit_from(
        &self,
        replica: usize,
        offset: usize,
        len: usize,
        mut f: impl FnMut(usize, &[u8]),
    ) -> Result<(), PagesError> {
        self.check_range(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let rep = &self.replicas[replica];
        let area = rep.pool.area_base();
        let mut guard = epoch::pin();
        let (mut local, mut remote) = (0u64, 0u64);
        let mut at = offset;
        let end = offset + len;
        while at < end {
            let page = at >> self.shift;
            let within = at & (self.page - 1);
            let run = (self.page - within).min(end - at);
            // Where the page's copy is when it is in its area slot (1, never
            // a copy's address, without an area).
            let slot = if area != 0 {
                area + (page << self.shift)
            } else {
                1
            };
            // Acquire pairs with the Release that published the copy or
            // master: its bytes are visible.
            let copy = rep.copies[page].load(Ordering::Acquire);
            let source = if copy as usize == slot {
                // The usual case. The bytes are read from `slot`, computed
                // without the load, so their loads need not wait for it
                // (only the branch does, and it is predicted).
                local += 1;
                self.note_local(rep, page);
                opaque(slot) as *const u8
            } else if !copy.is_null() {
                local += 1;
                self.note_local(rep, page);
                copy
            } else {
                remote += 1;
                self.masters[page].load(Ordering::Acquire)
            };
            // SAFETY: a published copy or master stays valid while the
            // epoch guard is held (it is retired only through `guard.defer`
            // after being unpublished); `within + run <= page size`.
            let bytes = unsafe { std::slice::from_raw_parts(source.add(within), run) };
            f(at, bytes);
            if copy.is_null() && self.note_remote(replica, page, &guard) {
                // Copies were evicted to make room: `f` is done with the
                // page, so nothing from before is held; re-pinning lets
                // the epoch advance and their memory come back while a
                // long read goes on (otherwise a read over more pages
                // than the budget evicts every copy and makes none).
                guard.repin();
                flush(&guard);
            }
            at += run;
        }
        // Threads with an owned slot count with plain stores; the others
        // share the last slot.
        let mut id = thread_slot();
        if id == usize::MAX {
            id = assign_thread_slot();
        }
        if id < READ_SLOTS {
            let counters = &rep.reads[id];
            let add =
                |c: &AtomicU64, n: u64| c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
            add(&counters.local, local);
            add(&counters.remote, remote);
        } else {
            let counters = &rep.reads[READ_SLOTS];
            counters.local.fetch_add(local, Ordering::Relaxed);
            counters.remote.fetch_add(remote, Ordering::Relaxed);
        }
        Ok(())
    }

    /// A page was read from its local copy: mark the copy referenced (for
    /// the eviction clock).
    #[inline(always)]
    fn note_local(&self, rep: &PagesReplica, page: usize) {
        let referenced = &rep.referenced[page];
        if !referenced.load(Ordering::Relaxed) {
            referenced.store(true, Ordering::Relaxed);
        }
    }

    /// A page was read from the master: maybe it is time for a copy.
    /// Returns whether copies were evicted to make room.
    #[inline]
    fn note_remote(&self, replica: usize, page: usize, guard: &Guard) -> bool {
        let rep = &self.replicas[replica];
        let misses = rep.misses[page].fetch_add(1, Ordering::Relaxed) + 1;
        misses >= self.options.copy_after && self.make_copy(replica, page, guard)
    }

    /// Returns whether copies were evicted to make room (none made).
    #[cold]
    fn make_copy(&self, replica: usize, page: usize, guard: &Guard) -> bool {
        let rep = &self.replicas[replica];
        let lock = &self.locks[page];
        // Never wait in a read: if a writer or another copier holds the
        // page, a later read tries again.
        if lock
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        let mut evicted = false;
        if rep.copies[page].load(Ordering::Relaxed).is_null() {
            match self.take_slot(replica, page, guard, &mut evicted) {
                Some(slot) => {
                    // Under the page lock the master cannot change.
                    let master = self.masters[page].load(Ordering::Acquire);
                    // SAFETY: `slot` is a free page-sized slot of this
                    // replica's pool that no one else holds; `master` is a
                    // live page.
                    unsafe { std::ptr::copy_nonoverlapping(master, slot as *mut u8, self.page) };
                    rep.referenced[page].store(true, Ordering::Relaxed);
                    rep.misses[page].store(0, Ordering::Relaxed);
                    rep.live.fetch_add(1, Ordering::Relaxed);
                    rep.made.fetch_add(1, Ordering::Relaxed);
                    // Release pairs with the readers' Acquire.
                    rep.copies[page].store(slot as *mut u8, Ordering::Release);
                }
                None => {
                    rep.failed.fetch_add(1, Ordering::Relaxed);
                    // Try again after as many remote reads.
                    rep.misses[page].store(0, Ordering::Relaxed);
                }
            }
        }
        lock.store(false, Ordering::Release);
        evicted
    }

    /// A slot for a new copy on `replica`'s node, within the budgets and
    /// the watermark; evicts a cold copy (for a later copy) when there is
    /// none.
    fn take_slot(
        &self,
        replica: usize,
        page: usize,
        guard: &Guard,
        evicted: &mut bool,
    ) -> Option<usize> {
        let rep = &self.replicas[replica];
        let pool = &rep.pool;
        let mut inner = pool.lock();
        pool.check_watermark(&mut inner, self.options.min_free_bytes);
        let room = self.budget_room(replica);
        if !inner.pressure && room > 0 {
            // The page's own slot first: where readers look for it.
            if let Some(slot) = pool.take_area_slot(page) {
                return Some(slot);
            }
        }
        if let Some(slot) = inner.free.pop() {
            return Some(slot);
        }
        if !inner.pressure && room > 0 {
            if let Some(slot) = pool.revive(&mut inner) {
                return Some(slot);
            }
            let pages = self.options.chunk_pages.min(room);
            if pool.grow(&mut inner, pages).is_ok() {
                return inner.free.pop();
            }
        }
        // At a limit: make room for later copies by evicting cold ones (a
        // chunk's worth under memory pressure, one otherwise).
        let want = if inner.pressure {
            self.options.chunk_pages
        } else {
            1
        };
        *evicted = self.evict_cold(replica, &mut inner, want, guard) > 0;
        None
    }

    /// Pages of copy memory `replica` may still add.
    fn budget_room(&self, replica: usize) -> usize {
        let page = self.page as u64;
        let mut room = u64::MAX;
        if let Some(budget) = self.options.budget_per_replica {
            let resident = self.replicas[replica].pool.resident.load(Ordering::Relaxed) as u64;
            room = room.min((budget / page).saturating_sub(resident));
        }
        if let Some(budget) = self.options.budget_total {
            let resident: u64 = self
                .replicas
                .iter()
                .map(|r| r.pool.resident.load(Ordering::Relaxed) as u64)
                .sum();
            room = room.min((budget / page).saturating_sub(resident));
        }
        room.min(usize::MAX as u64) as usize
    }

    /// Evicts up to `want` copies of `replica` not read since the clock
    /// last passed them (clearing the referenced bits it passes).
    fn evict_cold(
        &self,
        replica: usize,
        inner: &mut PoolInner,
        want: usize,
        guard: &Guard,
    ) -> usize {
        let rep = &self.replicas[replica];
        let pages = self.masters.len();
        let mut evicted = 0;
        // At most one turn of the clock: a copy read since the hand last
        // cleared its bit gets a second chance, even when that leaves
        // nothing to evict this time.
        for _ in 0..pages {
            if evicted == want {
                break;
            }
            let page = inner.hand % pages;
            inner.hand = (page + 1) % pages;
            if rep.copies[page].load(Ordering::Relaxed).is_null() {
                continue;
            }
            if rep.referenced[page].swap(false, Ordering::Relaxed) {
                continue;
            }
            let copy = rep.copies[page].swap(std::ptr::null_mut(), Ordering::AcqRel);
            if !copy.is_null() {
                rep.live.fetch_sub(1, Ordering::Relaxed);
                rep.evicted.fetch_add(1, Ordering::Relaxed);
                self.retire(&rep.pool, copy, guard);
                evicted += 1;
            }
        }
        evicted
    }

    /// Hands an unpublished page to the epoch collector, which returns it
    /// to `pool` once no reader can hold it.
    fn retire(&self, pool: &Arc<Pool>, page: *mut u8, guard: &Guard) {
        let pool = Arc::clone(pool);
        let slot = Slot(page as usize);
        guard.defer(move || pool.reclaim(slot.0));
    }

    /// Writes `data` at `offset`: each page touched gets a new master
    /// (copy-on-write) and loses its local copies. Fails, changing
    /// nothing, for a range outside the region or when no memory can be
    /// had for the new masters.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), PagesError> {
        self.check_range(offset, data.len())?;
        if data.is_empty() {
            return Ok(());
        }
        let first = offset >> self.shift;
        let last = (offset + data.len() - 1) >> self.shift;
        // Lock the pages in order (no deadlock between writers).
        for page in first..=last {
            let mut backoff = Backoff::new();
            while self.locks[page]
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                backoff.snooze();
            }
        }
        let unlock = || {
            for page in first..=last {
                self.locks[page].store(false, Ordering::Release);
            }
        };
        // All the new masters first, so a failure changes nothing.
        let mut fresh = Vec::with_capacity(last - first + 1);
        {
            let mut inner = self.master_pool.lock();
            for _ in first..=last {
                if inner.free.is_empty() {
                    let grow = (last - first + 1).max(self.options.chunk_pages);
                    if let Err(err) = self.master_pool.grow(&mut inner, grow) {
                        inner.free.extend(fresh);
                        drop(inner);
                        unlock();
                        return Err(err.into());
                    }
                }
                fresh.push(inner.free.pop().expect("just grown"));
            }
        }
        let guard = epoch::pin();
        for (page, new) in (first..=last).zip(fresh) {
            let old = self.masters[page].load(Ordering::Relaxed);
            let new = new as *mut u8;
            let page_start = page << self.shift;
            let from = offset.max(page_start);
            let to = (offset + data.len()).min(page_start + self.page);
            // SAFETY: `new` is a free slot of the master pool owned by this
            // write; `old` is the live master (the page lock keeps it);
            // `from - page_start .. to - page_start` lies within the page.
            unsafe {
                std::ptr::copy_nonoverlapping(old, new, self.page);
                std::ptr::copy_nonoverlapping(
                    data.as_ptr().add(from - offset),
                    new.add(from - page_start),
                    to - from,
                );
            }
            // Release pairs with readers' Acquire.
            self.masters[page].store(new, Ordering::Release);
            self.retire(&self.master_pool, old, &guard);
            for rep in self.replicas.iter() {
                let copy = rep.copies[page].swap(std::ptr::null_mut(), Ordering::AcqRel);
                rep.misses[page].store(0, Ordering::Relaxed);
                if !copy.is_null() {
                    rep.live.fetch_sub(1, Ordering::Relaxed);
                    rep.collapsed.fetch_add(1, Ordering::Relaxed);
                    self.retire(&rep.pool, copy, &guard);
                }
            }
        }
        unlock();
        flush(&guard);
        Ok(())
    }

    /// Evicts every local copy (their memory is reused or given back once
    /// readers have left): a manual trim, e.g. before a memory-hungry phase.
    pub fn drop_copies(&self) {
        let guard = epoch::pin();
        for rep in self.replicas.iter() {
            for copy in rep.copies.iter() {
                let copy = copy.swap(std::ptr::null_mut(), Ordering::AcqRel);
                if !copy.is_null() {
                    rep.live.fetch_sub(1, Ordering::Relaxed);
                    rep.evicted.fetch_add(1, Ordering::Relaxed);
                    self.retire(&rep.pool, copy, &guard);
                }
            }
        }
        flush(&guard);
    }

    /// Statistics per replica, in replica order.
    pub fn stats(&self) -> Vec<PagesStats> {
        self.replicas
            .iter()
            .enumerate()
            .map(|(i, r)| PagesStats {
                replica: i,
                node: r.node,
                local_reads: r
                    .reads
                    .iter()
                    .map(|c| c.local.load(Ordering::Relaxed))
                    .sum(),
                remote_reads: r
                    .reads
                    .iter()
                    .map(|c| c.remote.load(Ordering::Relaxed))
                    .sum(),
                copies: r.live.load(Ordering::Relaxed) as u64,
                copies_made: r.made.load(Ordering::Relaxed),
                evicted: r.evicted.load(Ordering::Relaxed),
                collapsed: r.collapsed.load(Ordering::Relaxed),
                reclaimed: r.pool.reclaimed.load(Ordering::Relaxed),
                copy_failures: r.failed.load(Ordering::Relaxed),
                resident_bytes: (r.pool.resident.load(Ordering::Relaxed) * self.page) as u64,
                huge_pages: r
                    .pool
                    .area
                    .as_ref()
                    .map_or(0, |area| area.huge.load(Ordering::Relaxed)),
            })
            .collect()
    }

    /// Where each replica's local copies are, in replica order: with a set
    /// made from nodes, replica `i`'s copies should all be on
    /// `replica_set().node(i)`.
    pub fn replica_pages(&self) -> Result<Vec<PageHistogram>, LocateError> {
        let _guard = epoch::pin();
        self.replicas
            .iter()
            .map(|r| {
                let copies: Vec<*const u8> = r
                    .copies
                    .iter()
                    .map(|c| c.load(Ordering::Acquire) as *const u8)
                    .filter(|c| !c.is_null())
                    .collect();
                locate::locate_pages(&copies)
            })
            .collect()
    }

    /// Where the master's pages are.
    pub fn master_pages(&self) -> Result<PageHistogram, LocateError> {
        let _guard = epoch::pin();
        let masters: Vec<*const u8> = self
            .masters
            .iter()
            .map(|m| m.load(Ordering::Acquire) as *const u8)
            .collect();
        locate::locate_pages(&masters)
    }
}

/// What one replica of a [`ReplicatedPages`] region has done, in pages.
///
/// ```
/// use numalab::replicated::{PagesOptions, ReplicaSet, ReplicatedPages};
/// let region = ReplicatedPages::new(&[1u8; 8192], ReplicaSet::system()?,
///     PagesOptions::default().copy_after(1))?;
/// let mut buf = [0u8; 8192];
/// region.read(0, &mut buf)?; // remote: copies both pages
/// region.read(0, &mut buf)?; // local
/// let s = &region.stats()[region.replica_set().current()];
/// assert_eq!((s.remote_reads, s.local_reads, s.copies), (2, 2, 2));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PagesStats {
    /// Replica index.
    pub replica: usize,
    /// The node its copies are bound to.
    pub node: u32,
    /// Page reads served from a local copy.
    pub local_reads: u64,
    /// Page reads served from the master.
    pub remote_reads: u64,
    /// Local copies now.
    pub copies: u64,
    /// Local copies made.
    pub copies_made: u64,
    /// Copies evicted (cold, under a budget or memory pressure, or by
    /// [`ReplicatedPages::drop_copies`]).
    pub evicted: u64,
    /// Copies dropped because their page was written.
    pub collapsed: u64,
    /// Dropped copies whose memory has been reclaimed (no reader left).
    pub reclaimed: u64,
    /// Copies that could not be made (budget, watermark, allocation).
    pub copy_failures: u64,
    /// Bytes of copy memory resident on the replica's node.
    pub resident_bytes: u64,
    /// 2 MiB groups of pages all copied, gathered into one transparent
    /// huge page each (fewer TLB misses for random reads; see
    /// [`ReplicatedPages`]).
    pub huge_pages: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::HUGE_2M;
    use proptest::prelude::*;
    use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

    /// Epochs are global to the process: one reader of another test that
    /// is pinned (and perhaps descheduled on a busy host) holds back
    /// every reclamation. Tests that wait for memory to come back hold
    /// this for writing, all others for reading, so a wait depends only
    /// on the waiting test's own threads, never on the host's load.
    static EPOCH: RwLock<()> = RwLock::new(());

    fn sharing_the_epoch() -> RwLockReadGuard<'static, ()> {
        EPOCH.read().unwrap_or_else(|e| e.into_inner())
    }

    fn alone_in_the_epoch() -> RwLockWriteGuard<'static, ()> {
        EPOCH.write().unwrap_or_else(|e| e.into_inner())
    }

    const PAGE: usize = 4096;

    fn emulated(n: usize) -> ReplicaSet {
        ReplicaSet::emulated(vec![0; n]).unwrap()
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// Pumps the epoch collector until `done` holds. Called with
    /// [`alone_in_the_epoch`] held and the test's own threads ended, so
    /// each round advances the epoch: the bound counts rounds of the
    /// collector's own progress, not time.
    fn settle(done: impl Fn() -> bool) -> bool {
        for _ in 0..10_000 {
            if done() {
                return true;
            }
            epoch::pin().flush();
        }
        done()
    }

    #[test]
    fn copies_after_the_threshold_and_reads_locally() {
        let _sharing = sharing_the_epoch();
        let data = pattern(3 * PAGE, 1);
        let region =
            ReplicatedPages::new(&data, emulated(2), PagesOptions::default().copy_after(3))
                .unwrap();
        let mut buf = vec![0u8; PAGE];
        for _ in 0..3 {
            region.read_from(1, PAGE, &mut buf).unwrap();
            assert_eq!(buf, data[PAGE..2 * PAGE]);
        }
        let s = region.stats();
        assert_eq!(
            (s[1].remote_reads, s[1].copies_made, s[1].copies),
            (3, 1, 1)
        );
        assert_eq!(s[0].copies, 0, "replica 0 has read nothing");
        region.read_from(1, PAGE, &mut buf).unwrap();
        assert_eq!(buf, data[PAGE..2 * PAGE]);
        assert_eq!(region.stats()[1].local_reads, 1);
        // Copies are in the replica's own memory, bound to its node.
        let pages = region.replica_pages().unwrap();
        assert_eq!((pages[1].on_node(0), pages[0].present()), (1, 0));
        assert_eq!(region.master_pages().unwrap().on_node(0), 3);
    }

    #[test]
    fn a_write_collapses_copies_made_by_other_replicas() {
        let _alone = alone_in_the_epoch();
        let data = pattern(2 * PAGE, 2);
        let region =
            ReplicatedPages::new(&data, emulated(3), PagesOptions::default().copy_after(1))
                .unwrap();
        let mut buf = vec![0u8; 2 * PAGE];
        for r in 0..3 {
            region.read_from(r, 0, &mut buf).unwrap();
        }
        assert!(region.stats().iter().all(|s| s.copies == 2));
        // Written through replica 0's thread; collapses everyone's copy of page 1.
        region.write(PAGE + 10, b"fresh").unwrap();
        let s = region.stats();
        assert!(s.iter().all(|s| s.copies == 1 && s.collapsed == 1), "{s:?}");
        for r in 0..3 {
            region.read_from(r, 0, &mut buf).unwrap();
            assert_eq!(&buf[PAGE + 10..PAGE + 15], b"fresh");
            assert_eq!(buf[..PAGE], data[..PAGE]);
        }
        // Re-copied lazily: page 1 is local again after the next read.
        assert!(region.stats().iter().all(|s| s.copies == 2));
        // The old copies and the old master are reclaimed once no reader
        // holds them.
        assert!(settle(|| region.stats().iter().all(|s| s.reclaimed == 1)));
    }

    /// The kernel's count of transparent huge pages in the mapping that
    /// starts at `start` (`AnonHugePages` in `/proc/self/smaps`), bytes.
    fn anon_huge_bytes(start: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let header = format!("{start:x}-");
        // The first AnonHugePages after the mapping's header is its own.
        let block = smaps
            .split('\n')
            .skip_while(|line| !line.starts_with(&header))
            .skip(1);
        for line in block {
            if let Some(kb) = line.strip_prefix("AnonHugePages:") {
                return kb
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap()
                    << 10;
            }
        }
        panic!("no mapping at {start:#x} in /proc/self/smaps");
    }

    /// Why this kernel cannot gather pages into a huge page, if it cannot.
    fn no_collapse() -> Option<String> {
        let enabled = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if !enabled.contains('[') || enabled.contains("[never]") {
            return Some(format!(
                "transparent huge pages are off ({})",
                enabled.trim()
            ));
        }
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut parts = release
            .trim()
            .split(['.', '-'])
            .map(|p| p.parse::<u32>().unwrap_or(0));
        let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        (version < (6, 1)).then(|| format!("Linux {} has no MADV_COLLAPSE", release.trim()))
    }

    #[test]
    fn a_group_of_pages_all_copied_is_gathered_into_a_huge_page_and_reads_the_same() {
        let _alone = alone_in_the_epoch();
        let data = pattern(6 << 20, 9);
        let region =
            ReplicatedPages::new(&data, emulated(1), PagesOptions::default().copy_after(1))
                .unwrap();
        let area = region.replicas[0].pool.area_base();
        assert_eq!(area % HUGE_2M, 0, "the area is aligned for huge pages");
        let mut buf = vec![0u8; data.len()];
        // Half a group copied: base pages still, as the kernel sees them.
        region.read_from(0, 0, &mut buf[..1 << 20]).unwrap();
        assert_eq!(region.stats()[0].huge_pages, 0);
        assert_eq!(anon_huge_bytes(area), 0);
        // Every page copied: three whole groups.
        region.read_from(0, 0, &mut buf).unwrap();
        assert_eq!(buf, data);
        let huge = region.stats()[0].huge_pages;
        assert_eq!(
            anon_huge_bytes(area),
            huge * HUGE_2M as u64,
            "the kernel agrees"
        );
        match no_collapse() {
            Some(why) => crate::testing::cannot_check(format!("huge pages not checked: {why}")),
            None => assert_eq!(huge, 3, "{:?}", region.stats()),
        }
        // Read through the huge pages, and after giving a copy back.
        buf.fill(0);
        region.read_from(0, 0, &mut buf).unwrap();
        assert_eq!(buf, data);
        region.drop_copies();
        assert!(settle(|| region.stats()[0].resident_bytes == 0));
        region.read_from(0, 0, &mut buf).unwrap();
        assert_eq!(buf, data);
    }

    #[test]
    fn budgets_limit_copies_and_evict_cold_ones() {
        let _sharing = sharing_the_epoch();
        let data = pattern(16 * PAGE, 3);
        let options = PagesOptions::default()
            .copy_after(1)
            .chunk_pages(2)
            .budget_per_replica(Some(4 * PAGE as u64))
            .budget_total(Some(6 * PAGE as u64));
        let region = ReplicatedPages::new(&data, emulated(2), options).unwrap();
        let mut buf = vec![0u8; PAGE];
        // Replica 0 touches every page, twice over; pages 0 and 1 stay hot.
        for round in 0..2 {
            for page in 0..16 {
                region.read_from(0, 0, &mut buf).unwrap();
                region.read_from(0, PAGE, &mut buf).unwrap();
                region.read_from(0, page * PAGE, &mut buf).unwrap();
                assert_eq!(buf, data[page * PAGE..(page + 1) * PAGE], "round {round}");
            }
        }
        let s = region.stats();
        assert!(s[0].resident_bytes <= 4 * PAGE as u64, "{s:?}");
        assert!(
            s[0].copies <= 4 && s[0].copy_failures > 0 && s[0].evicted > 0,
            "{s:?}"
        );
        // The hot pages kept their copies through the evictions.
        let hot = &region.replicas[0];
        assert!(!hot.copies[0].load(Ordering::Relaxed).is_null());
        assert!(!hot.copies[1].load(Ordering::Relaxed).is_null());
        // Replica 1 gets only what is left of the total budget: what
        // replica 0 holds, evicted copies included until they are
        // reclaimed (which other threads' epochs may delay), counts.
        for page in 0..16 {
            region.read_from(1, page * PAGE, &mut buf).unwrap();
        }
        let s = region.stats();
        assert!(s[1].resident_bytes <= 4 * PAGE as u64, "{s:?}");
        assert!(s[1].copy_failures > 0, "{s:?}");
        assert!(
            s.iter().map(|s| s.resident_bytes).sum::<u64>() <= 6 * PAGE as u64,
            "{s:?}"
        );
    }

    #[test]
    fn memory_pressure_stops_copies_and_reads_still_work() {
        let _sharing = sharing_the_epoch();
        let data = pattern(4 * PAGE, 4);
        // A watermark no node can meet: every copy attempt fails.
        let options = PagesOptions::default()
            .copy_after(1)
            .min_free_bytes(u64::MAX);
        let region = ReplicatedPages::new(&data, emulated(1), options).unwrap();
        let mut buf = vec![0u8; 4 * PAGE];
        for _ in 0..3 {
            region.read_from(0, 0, &mut buf).unwrap();
            assert_eq!(buf, data);
        }
        let s = &region.stats()[0];
        assert_eq!((s.copies, s.resident_bytes, s.remote_reads), (0, 0, 12));
        assert!(s.copy_failures >= 4);
    }

    #[test]
    fn a_failed_allocation_never_fails_a_read() {
        let _sharing = sharing_the_epoch();
        let data = pattern(2 * PAGE, 5);
        // Chunks larger than any node's memory: the allocation fails.
        let options = PagesOptions::default()
            .copy_after(1)
            .min_free_bytes(0)
            .chunk_pages(1 << 40);
        let region = ReplicatedPages::new(&data, emulated(1), options).unwrap();
        // Each page's area slot taken already: copies need a chunk.
        for used in region.replicas[0].pool.area_used.iter() {
            used.store(true, Ordering::Relaxed);
        }
        let mut buf = vec![0u8; 2 * PAGE];
        region.read_from(0, 0, &mut buf).unwrap();
        assert_eq!(buf, data);
        assert_eq!(region.stats()[0].copy_failures, 2);
    }

    #[test]
    fn copies_go_to_their_page_slot_when_it_is_free() {
        let _alone = alone_in_the_epoch();
        let data = pattern(4 * PAGE, 7);
        let options = PagesOptions::default().copy_after(1).min_free_bytes(0);
        let region = ReplicatedPages::new(&data, emulated(1), options).unwrap();
        let rep = &region.replicas[0];
        let area = rep.pool.area_base();
        assert_ne!(area, 0, "this machine has the address space for an area");
        let in_slot =
            |page: usize| rep.copies[page].load(Ordering::Relaxed) as usize == area + page * PAGE;
        let mut buf = vec![0u8; 4 * PAGE];
        region.read_from(0, 0, &mut buf).unwrap();
        assert!((0..4).all(in_slot));
        // A write collapses page 2's copy; until the old copy is
        // reclaimed its slot is taken, so the next copy goes to a chunk,
        // and reads see the new bytes either way.
        region.write(2 * PAGE + 5, b"new").unwrap();
        region.read_from(0, 0, &mut buf).unwrap();
        assert_eq!(&buf[2 * PAGE + 5..2 * PAGE + 8], b"new");
        let recopied = !in_slot(2);
        // Once reclaimed, a later copy of the page finds its slot again.
        region.drop_copies();
        assert!(settle(|| !rep
            .pool
            .area_used
            .iter()
            .any(|u| u.load(Ordering::Acquire))));
        region.read_from(0, 0, &mut buf).unwrap();
        assert!(
            (0..4).all(in_slot),
            "recopied into a chunk first: {recopied}"
        );
        assert_eq!(&buf[2 * PAGE + 5..2 * PAGE + 8], b"new");
        assert_eq!(buf[..2 * PAGE], data[..2 * PAGE]);
    }

    #[test]
    fn under_pressure_evicted_memory_goes_back_to_the_kernel() {
        let _alone = alone_in_the_epoch();
        let data = pattern(8 * PAGE, 6);
        let options = PagesOptions::default().copy_after(1).min_free_bytes(0);
        let region = ReplicatedPages::new(&data, emulated(1), options).unwrap();
        let mut buf = vec![0u8; 8 * PAGE];
        region.read_from(0, 0, &mut buf).unwrap();
        assert_eq!(region.stats()[0].copies, 8);
        let resident = region.stats()[0].resident_bytes;
        region.replicas[0].pool.lock().pressure = true;
        region.drop_copies();
        assert!(settle(|| region.stats()[0].reclaimed == 8));
        let s = &region.stats()[0];
        assert_eq!(s.resident_bytes, resident - 8 * PAGE as u64, "{s:?}");
        // Discarded slots are repopulated before reuse.
        region.replicas[0].pool.lock().pressure = false;
        region.read_from(0, 0, &mut buf).unwrap();
        assert_eq!(buf, data);
        assert_eq!(region.stats()[0].copies, 8);
    }

    #[test]
    fn bad_input_is_refused_before_allocating() {
        let _sharing = sharing_the_epoch();
        let set = emulated(1);
        assert!(matches!(
            ReplicatedPages::new(&[], set.clone(), PagesOptions::default()),
            Err(PagesError::Empty)
        ));
        let err = ReplicatedPages::new(&[1], set.clone(), PagesOptions::default().page_size(1000))
            .unwrap_err();
        assert!(err.to_string().contains("power of two"), "{err}");
        let err = ReplicatedPages::new(&[1], set.clone(), PagesOptions::default().copy_after(0))
            .unwrap_err();
        assert!(err.to_string().contains("copy_after"), "{err}");
        let region = ReplicatedPages::new(&[1; 100], set, PagesOptions::default()).unwrap();
        let err = region.read(90, &mut [0; 20]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bytes 90..110 are outside the region of 100 bytes"
        );
        assert!(region.write(usize::MAX, b"x").is_err());
        let err =
            ReplicatedPages::from_file("/nonexistent/x", emulated(1), PagesOptions::default())
                .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/x"), "{err}");
    }

    #[test]
    fn from_file_refuses_a_fifo_instead_of_waiting_for_a_writer() {
        let _sharing = sharing_the_epoch();
        let dir = std::env::temp_dir().join(format!("numalab-pages-fifo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("f");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let (tx, rx) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || {
            let result = ReplicatedPages::from_file(&path, emulated(1), PagesOptions::default());
            let _ = tx.send(result.map(|_| ()).map_err(|e| e.to_string()));
        });
        // Generous: the test asserts that it returns, not how fast.
        let result = rx
            .recv_timeout(std::time::Duration::from_secs(120))
            .expect("from_file of a FIFO returns");
        let err = result.unwrap_err();
        assert!(err.contains("a FIFO, not a regular file"), "{err}");
        let err = ReplicatedPages::from_file("/dev/zero", emulated(1), PagesOptions::default())
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("a character device, not a regular file"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn from_file_holds_the_file() {
        let _sharing = sharing_the_epoch();
        let path = std::env::temp_dir().join(format!("numalab-pages-{}", std::process::id()));
        let data = pattern(10_000, 7);
        std::fs::write(&path, &data).unwrap();
        let region = ReplicatedPages::from_file(&path, emulated(2), PagesOptions::default());
        std::fs::remove_file(&path).unwrap();
        let region = region.unwrap();
        let mut buf = vec![0u8; 10_000];
        region.read(0, &mut buf).unwrap();
        assert_eq!(buf, data);
    }

    #[test]
    fn concurrent_readers_during_collapse() {
        let _alone = alone_in_the_epoch();
        // Every write fills a whole page with one byte value; readers must
        // only ever see whole pages of one value, never going back.
        let pages = 4;
        let region = ReplicatedPages::new(
            &vec![0u8; pages * PAGE],
            emulated(2),
            PagesOptions::default()
                .copy_after(1)
                .budget_per_replica(Some(3 * PAGE as u64)),
        )
        .unwrap();
        let rounds = if cfg!(miri) { 10 } else { 400 };
        // Readers go on until the writer is done, and the writer writes a
        // page only once some replica holds a copy of it: every write has
        // a copy to collapse however the host schedules the threads.
        let writing = AtomicBool::new(true);
        let has_copy = |page: usize| {
            region
                .replicas
                .iter()
                .any(|r| !r.copies[page].load(Ordering::Acquire).is_null())
        };
        std::thread::scope(|s| {
            for t in 0..3 {
                let (region, writing) = (&region, &writing);
                s.spawn(move || {
                    let mut buf = vec![0u8; PAGE];
                    let mut last = vec![0u8; pages];
                    let mut i = 0;
                    while i < rounds * 4 || writing.load(Ordering::Acquire) {
                        let page = (i + t) % pages;
                        region.read_from(t % 2, page * PAGE, &mut buf).unwrap();
                        assert!(buf.iter().all(|&b| b == buf[0]), "a torn page");
                        assert!(buf[0] >= last[page], "page {page} went back");
                        last[page] = buf[0];
                        i += 1;
                    }
                });
            }
            let (region, writing, has_copy) = (&region, &writing, &has_copy);
            s.spawn(move || {
                // Readers stop even if a write panics.
                struct Done<'a>(&'a AtomicBool);
                impl Drop for Done<'_> {
                    fn drop(&mut self) {
                        self.0.store(false, Ordering::Release);
                    }
                }
                let _done = Done(writing);
                for v in 1..=rounds {
                    let page = v % pages;
                    while !has_copy(page) {
                        std::thread::yield_now();
                    }
                    region
                        .write(page * PAGE, &vec![(v / pages + 1) as u8; PAGE])
                        .unwrap();
                }
            });
        });
        let s = region.stats();
        assert!(s.iter().map(|s| s.collapsed).sum::<u64>() > 0, "{s:?}");
        assert!(settle(|| {
            let s = region.stats();
            s.iter().all(|s| s.reclaimed == s.collapsed + s.evicted)
        }));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Any sequence of reads (from any replica) and writes behaves as
        /// a plain byte array, whatever the copies, budgets and evictions.
        #[test]
        fn behaves_as_a_byte_array(
            len in 1usize..6 * PAGE,
            copy_after in 1u32..3,
            budget in proptest::option::of(0u64..4),
            ops in proptest::collection::vec(
                (any::<bool>(), 0usize..3, any::<u16>(), 0usize..2 * PAGE, any::<u8>()),
                1..60,
            ),
        ) {
            let _sharing = sharing_the_epoch();
            let mut model = pattern(len, 9);
            let options = PagesOptions::default()
                .copy_after(copy_after)
                .chunk_pages(1)
                .budget_total(budget.map(|b| b * PAGE as u64));
            let region = ReplicatedPages::new(&model, emulated(3), options).unwrap();
            for (is_write, replica, at, size, byte) in ops {
                let offset = at as usize % len;
                let size = size.min(len - offset);
                if is_write {
                    let data = vec![byte; size];
                    region.write(offset, &data).unwrap();
                    model[offset..offset + size].copy_from_slice(&data);
                } else {
                    let mut buf = vec![0u8; size];
                    region.read_from(replica, offset, &mut buf).unwrap();
                    prop_assert_eq!(&buf[..], &model[offset..offset + size]);
                }
            }
            if let Some(b) = budget {
                let resident: u64 = region.stats().iter().map(|s| s.resident_bytes).sum();
                prop_assert!(resident <= b * PAGE as u64);
            }
            let mut all = vec![0u8; len];
            for r in 0..3 {
                region.read_from(r, 0, &mut all).unwrap();
                prop_assert_eq!(&all, &model);
            }
        }
    }
}
