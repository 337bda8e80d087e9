//! [`ReplicatedFile`]: a read-mostly file served from per-node copies.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{fence, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::inventory::NodeInventory;
use crate::pagecache::{range_cache, FileCache, PageCacheError};
use crate::sets::NodeSet;
use crate::sys::{linux, procfs};

/// The most nodes with copies of one file.
pub const MAX_COPY_NODES: usize = 64;
/// The most chunks a file is cut into (8 bytes of metadata per chunk and
/// node).
pub const MAX_CHUNKS: u64 = 1 << 26;
/// Bytes of copies made or tried on a node between two looks at its free
/// memory.
const CHECK_BYTES: u64 = 16 << 20;
/// How long a writer waits for another writer of the same chunk.
const WRITER_WAIT: Duration = Duration::from_secs(10);

const MAGIC: u64 = u64::from_le_bytes(*b"nlfcopy1");
const VERSION: u32 = 1;
/// A slot's tag: `VALID | (generation + 2)` for a copy of that
/// generation; `EMPTY` for no memory; `STALE` (never equal to a live tag)
/// for memory whose bytes are no copy; `BUSY` while being copied or given
/// back.
const VALID: u64 = 1 << 63;
const EMPTY: u64 = 0;
const STALE: u64 = VALID;
const BUSY: u64 = u64::MAX;

fn valid_tag(generation: u64) -> u64 {
    VALID | (generation + 2)
}

/// How a [`ReplicatedFile`] makes and limits its copies.
///
/// ```
/// use numalab::replicated::FileCopyOptions;
/// let options = FileCopyOptions::default()
///     .chunk_size(1 << 20)                  // copies made 1 MiB at a time
///     .budget_per_node(Some(256 << 20))     // at most 256 MiB of copies per node
///     .nodes(Some("1-3".parse()?));         // copies on nodes 1 to 3 only
/// assert_eq!(options.min_free_bytes, 64 << 20);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct FileCopyOptions {
    /// Bytes copied at once, and the unit a write makes stale: a power of
    /// two from the base page to 1 GiB (default 64 KiB).
    pub chunk_size: u64,
    /// Nodes that get copies (default: every node with memory this
    /// process may use). A reader on another node reads the file.
    pub nodes: Option<NodeSet>,
    /// Most bytes of copies on one node (default none).
    pub budget_per_node: Option<u64>,
    /// No new copy on a node with less free memory than this; copies are
    /// given back instead (default 64 MiB).
    pub min_free_bytes: u64,
}

impl Default for FileCopyOptions {
    fn default() -> Self {
        FileCopyOptions {
            chunk_size: 64 << 10,
            nodes: None,
            budget_per_node: None,
            min_free_bytes: 64 << 20,
        }
    }
}

impl FileCopyOptions {
    /// Copies of `bytes` at a time.
    pub fn chunk_size(mut self, bytes: u64) -> Self {
        self.chunk_size = bytes;
        self
    }

    /// Copies on these nodes only.
    pub fn nodes(mut self, nodes: Option<NodeSet>) -> Self {
        self.nodes = nodes;
        self
    }

    /// At most `bytes` of copies per node.
    pub fn budget_per_node(mut self, bytes: Option<u64>) -> Self {
        self.budget_per_node = bytes;
        self
    }

    /// The free-memory watermark.
    pub fn min_free_bytes(mut self, bytes: u64) -> Self {
        self.min_free_bytes = bytes;
        self
    }
}

/// Why a [`ReplicatedFile`] could not be made, attached or written.
///
/// ```
/// use numalab::replicated::{FileCopyError, FileCopyOptions, ReplicatedFile};
/// let file = numalab::files::scratch_file(&std::env::temp_dir())?;
/// let err = ReplicatedFile::new(file, FileCopyOptions::default()).unwrap_err();
/// assert!(matches!(err, FileCopyError::Empty));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileCopyError {
    /// The file has no bytes to copy.
    #[error("the file is empty: there is nothing to copy")]
    Empty,
    /// An option is out of range.
    #[error("file copies: {0}")]
    Options(String),
    /// The file is not one whose pages can be copied.
    #[error(transparent)]
    File(#[from] PageCacheError),
    /// A segment given to `attach` is not this file's copies.
    #[error("not this file's copies: {0}")]
    Segment(String),
    /// A write outside the file (copies cannot change its length).
    #[error("bytes {offset}..{end} are outside the file of {len} bytes (writes through copies cannot grow it)")]
    OutOfRange {
        /// Where the write starts.
        offset: u64,
        /// Where it ends.
        end: u64,
        /// The file's length.
        len: u64,
    },
    /// Another writer kept a chunk for longer than a writer waits.
    #[error("chunk {chunk} has been held by another writer for over {}s (a writer that died while writing leaves it so until the copies are made again)", WRITER_WAIT.as_secs())]
    WriterStuck {
        /// The chunk.
        chunk: u64,
    },
    /// A system call failed.
    #[error(transparent)]
    Os(#[from] io::Error),
}

/// The segment's first page.
#[repr(C)]
struct Header {
    magic: u64,
    version: u32,
    nodes: u32,
    len: u64,
    chunk: u64,
    chunks: u64,
    dev: u64,
    ino: u64,
    min_free: u64,
    budget_chunks: u64,
    node_ids: [u32; MAX_COPY_NODES],
}

/// A node's counters, at the start of its region.
#[repr(C)]
struct NodeCounters {
    /// Slots holding memory (a copy, a stale copy or one being made).
    resident: AtomicU64,
    /// Copies made.
    made: AtomicU64,
    /// Slots given back to the kernel.
    given_back: AtomicU64,
    /// Copies made or tried since the last look at free memory.
    tries: AtomicU64,
    /// 1 while the node is below its watermark.
    pressure: AtomicU64,
    /// The clock hand of giving back.
    hand: AtomicU64,
    /// Reads that found no copy and could not make one: budget or
    /// watermark.
    refused: AtomicU64,
    /// `CLOCK_MONOTONIC` nanoseconds of the last look at free memory.
    looked_ns: AtomicU64,
}

// The layout keeps 64 bytes for a node's counters.
const _: () = assert!(std::mem::size_of::<NodeCounters>() <= 64);

/// Where a node's metadata and slots are in the segment.
#[derive(Debug, Clone, Copy)]
struct NodeRegion {
    node: u32,
    counters: usize,
    tags: usize,
    referenced: usize,
    data: usize,
}

/// The segment's layout for a file of `chunks` chunks and `nodes` nodes.
#[derive(Debug, Clone)]
struct Layout {
    generations: usize,
    regions: Vec<NodeRegion>,
    total: usize,
}

impl Layout {
    fn new(node_ids: &[u32], chunks: u64, chunk: u64) -> Result<Layout, FileCopyError> {
        let page = linux::page_size() as u64;
        let round = |n: u64| n.div_ceil(page) * page;
        let chunks_bytes = chunks * 8;
        let generations = page;
        let mut at = generations + round(chunks_bytes);
        let meta = round(64 + chunks_bytes + chunks);
        let data = chunks
            .checked_mul(chunk)
            .map(round)
            .ok_or_else(|| FileCopyError::Options("the file is too large to copy".into()))?;
        let mut regions = Vec::new();
        for &node in node_ids {
            regions.push(NodeRegion {
                node,
                counters: at as usize,
                tags: (at + 64) as usize,
                referenced: (at + 64 + chunks_bytes) as usize,
                data: (at + meta) as usize,
            });
            at = at
                .checked_add(meta + data)
                .ok_or_else(|| FileCopyError::Options("the file is too large to copy".into()))?;
        }
        // Address space only: slots take memory when copies are made.
        if at > 1 << 46 {
            return Err(FileCopyError::Options(format!(
                "copies of this file on {} would need {} of address space (at most 64 TiB)",
                crate::units::count(node_ids.len(), "node"),
                crate::units::format_size(at)
            )));
        }
        Ok(Layout {
            generations: generations as usize,
            regions,
            total: at as usize,
        })
    }
}

/// A mapping of the whole segment, unmapped when dropped.
struct Mapping {
    addr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is shared memory reached only through atomics and
// the sequence-lock protocol of this module.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: addr/len are a mapping this value owns, used no more.
        let _ = unsafe { linux::unmap(self.addr, self.len) };
    }
}

/// A read-mostly file served from per-node copies of
/// its pages, after the kernel page-cache replication patches (LWN): a
/// copy of a chunk on the reader's node made on its first read there,
/// copies invalid before a write's bytes land, and given back when the
/// node's memory gets tight.
///
/// The file itself stays the master: its page cache, wherever it is, is
/// what writers change and what a reader reads whenever its node has no
/// valid copy. The copies live in one shared-memory segment (a `memfd`,
/// which other processes [`attach`](ReplicatedFile::attach) to through
/// `/proc/PID/fd`): a page of header, a generation per chunk, and per
/// copy node a region of metadata and one slot per chunk, placed with
/// `mbind(MPOL_PREFERRED)` on that node (shared memory keeps the policy
/// for every process that maps it; preferred, so a full node spills
/// instead of invoking the OOM killer, and the audit
/// [`copy_pages`](ReplicatedFile::copy_pages) says where copies really
/// are).
///
/// Consistency is a sequence lock per chunk, in the segment:
/// - a writer ([`write_at`](ReplicatedFile::write_at)) makes the chunk's
///   generation odd (which also locks out other writers), writes the file,
///   then makes it even and two higher;
/// - a reader copies from its node's slot only if the slot's tag equals
///   the current generation, and checks after copying that neither the
///   generation nor the tag moved (else it reads again); with an odd
///   generation it reads the file;
/// - a copy is made by the first reader on a node to find no valid copy:
///   it tags the slot busy, `pread`s the chunk from the file into it, and
///   tags it with the generation it saw before reading. A write meanwhile
///   makes that tag stale at once.
///
/// So once `write_at` has returned, no reader in any process gets the old
/// bytes. Writes that do not go through `write_at` (another program
/// writing the file) are not seen: copies stay as they were until
/// [`drop_copies`](ReplicatedFile::drop_copies).
///
/// Memory: each node has an optional budget (no new copy beyond it; reads
/// go to the shared cache) and a free-memory watermark, checked every
/// 16 MiB of copies made or tried: below it, no new copies, and cold
/// copies (a clock over referenced bits, as page reclaim) are given back
/// to the kernel (`fallocate(PUNCH_HOLE)`) until the node is 16 MiB above
/// it or no copies are left.
///
/// ```
/// use std::io::Write;
/// use numalab::replicated::{FileCopyOptions, ReplicatedFile};
///
/// let mut file = tempfile_in_doc()?;
/// file.write_all(&vec![42u8; 1 << 20])?;
/// let copies = ReplicatedFile::new(file, FileCopyOptions::default())?;
/// let node = copies.nodes()[0];
/// let mut reader = copies.reader(node);
/// let mut buf = [0u8; 8192];
/// reader.read_at(&mut buf, 4096)?;          // first read: copied to the node
/// reader.read_at(&mut buf, 4096)?;          // second: from the copy
/// assert_eq!(buf, [42u8; 8192]);
/// assert!(reader.from_copies > 0);
/// copies.write_at(&[7u8; 4], 4096)?;        // the copy is stale at once
/// reader.read_at(&mut buf[..4], 4096)?;
/// assert_eq!(&buf[..4], &[7u8; 4]);
/// # fn tempfile_in_doc() -> std::io::Result<std::fs::File> {
/// #     numalab::files::scratch_file(&std::env::temp_dir())
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Serving a read-mostly file from per-node copies: a thread per node,
/// bound to it, reads through that node's copies.
///
/// ```
/// use numalab::replicated::{FileCopyOptions, ReplicatedFile};
/// use numalab::{affinity, NodeSet, Topology};
/// # let file = numalab::files::scratch_file(&std::env::temp_dir())?;
/// # std::os::unix::fs::FileExt::write_all_at(&file, &[3u8; 1 << 20], 0)?;
/// let topology = Topology::system()?;
/// let copies = ReplicatedFile::new(file, FileCopyOptions::default())?;
/// std::thread::scope(|s| {
///     for node in copies.nodes().into_iter().filter(|&n| topology.node(n).is_some_and(|n| !n.cpus.is_empty())) {
///         let (copies, topology) = (&copies, &topology);
///         s.spawn(move || {
///             affinity::bind_thread_to_nodes(topology, &NodeSet::single(node)).unwrap();
///             let (mut reader, mut block, mut at) = (copies.reader(node), vec![0u8; 1 << 16], 0);
///             while let Ok(n @ 1..) = reader.read_at(&mut block, at) {
///                 at += n as u64; // serve `block[..n]`
///             }
///         });
///     }
/// });
/// assert!(copies.stats().iter().any(|s| s.copies_made > 0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ReplicatedFile {
    file: File,
    segment: File,
    map: Mapping,
    layout: Layout,
    len: u64,
    chunk: u64,
    chunks: u64,
    budget_chunks: u64,
}

impl fmt::Debug for ReplicatedFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicatedFile")
            .field("len", &self.len)
            .field("chunk", &self.chunk)
            .field("nodes", &self.nodes())
            .finish_non_exhaustive()
    }
}

/// One node's copies ([`ReplicatedFile::stats`]).
///
/// ```
/// use numalab::replicated::NodeCopyStats;
/// let stats = NodeCopyStats { node: 1, resident_bytes: 1 << 20, copies_made: 16,
///     given_back: 0, refused: 0, under_pressure: false };
/// assert_eq!(serde_json::to_value(&stats)?["copies_made"], 16);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCopyStats {
    /// The node.
    pub node: u32,
    /// Bytes of slots holding memory (whole chunks).
    pub resident_bytes: u64,
    /// Copies made (a chunk copied again after a write counts again).
    pub copies_made: u64,
    /// Slots given back to the kernel (memory pressure, or
    /// [`ReplicatedFile::drop_copies`]).
    pub given_back: u64,
    /// Reads that found no copy and could not make one: the budget was
    /// reached or free memory was low.
    pub refused: u64,
    /// Free memory was below the watermark at the last look.
    pub under_pressure: bool,
}

impl ReplicatedFile {
    /// Copies of `file` (which must be a regular, non-empty file; open it
    /// read-write to [`write_at`](Self::write_at)) in a new unnamed
    /// segment. No copy is made until a reader reads.
    pub fn new(file: File, options: FileCopyOptions) -> Result<ReplicatedFile, FileCopyError> {
        let stat = linux::stat_fd(&file)?;
        if !stat.regular {
            return Err(PageCacheError::NotRegular(crate::files::kind_of(stat.mode)).into());
        }
        if stat.size == 0 {
            return Err(FileCopyError::Empty);
        }
        let page = linux::page_size() as u64;
        let chunk = options.chunk_size;
        if !chunk.is_power_of_two() || chunk < page || chunk > 1 << 30 {
            return Err(FileCopyError::Options(format!(
                "the chunk size must be a power of two from {page} bytes to 1 GiB, not {chunk}"
            )));
        }
        let chunks = stat.size.div_ceil(chunk);
        if chunks > MAX_CHUNKS {
            return Err(FileCopyError::Options(format!(
                "{} in chunks of {} is {chunks} chunks, more than {MAX_CHUNKS}: use larger chunks",
                crate::units::format_size(stat.size),
                crate::units::format_size(chunk)
            )));
        }
        let inventory = NodeInventory::live();
        let usable = inventory.with_memory.intersection(&inventory.allowed_nodes);
        let nodes = match &options.nodes {
            Some(asked) => {
                if let Some(bad) = asked.iter().find(|&n| !usable.contains(n)) {
                    return Err(FileCopyError::Options(format!(
                        "node {bad} has no memory this process may use (nodes with memory: {usable})"
                    )));
                }
                asked.clone()
            }
            None => usable,
        };
        if nodes.is_empty() {
            return Err(FileCopyError::Options("no node to make copies on".into()));
        }
        if nodes.len() > MAX_COPY_NODES {
            return Err(FileCopyError::Options(format!(
                "copies on {} nodes: at most {MAX_COPY_NODES}",
                nodes.len()
            )));
        }
        let node_ids: Vec<u32> = nodes.iter().collect();
        let layout = Layout::new(&node_ids, chunks, chunk)?;
        let fd: OwnedFd = linux::memfd("numalab-file-copies")?;
        linux::set_len(&fd, layout.total as u64)?;
        let addr = linux::map_shared(&fd, layout.total, false)?;
        let map = Mapping {
            addr,
            len: layout.total,
        };
        for region in &layout.regions {
            let end = region.data as u64 + chunks * chunk;
            let start = region.counters;
            let mut mask = vec![0u64; region.node as usize / 64 + 1];
            mask[region.node as usize / 64] |= 1 << (region.node % 64);
            // SAFETY: the range is inside the mapping.
            let at = unsafe { addr.add(start) };
            linux::mbind(at, end as usize - start, linux::MPOL_PREFERRED, &mask, 0)?;
        }
        let budget_chunks = options
            .budget_per_node
            .map_or(u64::MAX, |bytes| bytes / chunk);
        let mut node_array = [0u32; MAX_COPY_NODES];
        node_array[..node_ids.len()].copy_from_slice(&node_ids);
        let header = Header {
            magic: MAGIC,
            version: VERSION,
            nodes: node_ids.len() as u32,
            len: stat.size,
            chunk,
            chunks,
            dev: stat.id.0,
            ino: stat.id.1,
            min_free: options.min_free_bytes,
            budget_chunks,
            node_ids: node_array,
        };
        // SAFETY: the header page is inside the fresh mapping, which no
        // one else has yet.
        unsafe { addr.cast::<Header>().write(header) };
        Ok(ReplicatedFile {
            file,
            segment: File::from(fd),
            map,
            layout,
            len: stat.size,
            chunk,
            chunks,
            budget_chunks,
        })
    }

    /// The copies another process made of `file`, from its `segment`
    /// (opened, for example, through `/proc/PID/fd/N` of the process that
    /// made them, [`segment`](Self::segment)). The segment must be this
    /// file's (same device and inode) and the file must not have changed
    /// length since.
    pub fn attach(file: File, segment: File) -> Result<ReplicatedFile, FileCopyError> {
        let stat = linux::stat_fd(&file)?;
        let seg = linux::stat_fd(&segment)?;
        let page = linux::page_size() as u64;
        if !seg.regular || seg.size < page {
            return Err(FileCopyError::Segment(
                "too small to hold a header, or not a regular file".into(),
            ));
        }
        let mut raw = vec![0u8; std::mem::size_of::<Header>()];
        segment.read_exact_at(&mut raw, 0)?;
        // SAFETY: Header is plain old data of this size; any bytes are a
        // value of it.
        let header: Header = unsafe { std::ptr::read_unaligned(raw.as_ptr().cast()) };
        if header.magic != MAGIC || header.version != VERSION {
            return Err(FileCopyError::Segment(
                "no numalab file-copies header".into(),
            ));
        }
        if (header.dev, header.ino) != stat.id {
            return Err(FileCopyError::Segment(
                "made for another file (device and inode differ)".into(),
            ));
        }
        if header.len != stat.size {
            return Err(FileCopyError::Segment(format!(
                "made for {} bytes, the file has {} now",
                header.len, stat.size
            )));
        }
        let nodes = header.nodes as usize;
        if nodes == 0
            || nodes > MAX_COPY_NODES
            || !header.chunk.is_power_of_two()
            || header.chunk < page
            || header.chunks != header.len.div_ceil(header.chunk)
        {
            return Err(FileCopyError::Segment("its header is damaged".into()));
        }
        let layout = Layout::new(&header.node_ids[..nodes], header.chunks, header.chunk)?;
        if (seg.size as usize) < layout.total {
            return Err(FileCopyError::Segment(format!(
                "{} bytes, its header says {}",
                seg.size, layout.total
            )));
        }
        let fd = OwnedFd::from(segment.try_clone()?);
        let addr = linux::map_shared(&fd, layout.total, false)?;
        Ok(ReplicatedFile {
            file,
            segment,
            map: Mapping {
                addr,
                len: layout.total,
            },
            layout,
            len: header.len,
            chunk: header.chunk,
            chunks: header.chunks,
            budget_chunks: header.budget_chunks,
        })
    }

    /// The file's length.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty (never: an empty file is refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes per chunk.
    pub fn chunk_size(&self) -> u64 {
        self.chunk
    }

    /// The nodes that get copies.
    pub fn nodes(&self) -> Vec<u32> {
        self.layout.regions.iter().map(|r| r.node).collect()
    }

    /// The segment holding the copies, to pass to another process for
    /// [`attach`](Self::attach).
    pub fn segment(&self) -> &File {
        &self.segment
    }

    /// The file (the master).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// A reader on `node`, which keeps its own counts. A node without
    /// copies reads the file.
    pub fn reader(&self, node: u32) -> FileReader<'_> {
        FileReader {
            copies: self,
            region: self.layout.regions.iter().position(|r| r.node == node),
            node,
            from_copies: 0,
            from_file: 0,
            copied: 0,
        }
    }

    /// Reads from `offset` into `buf` through the copies of the calling
    /// thread's current node; like `pread(2)`, fewer bytes at the end of
    /// the file (0 at or past it).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.reader(linux::getcpu().1).read_at(buf, offset)
    }

    /// Writes `data` to the file at `offset` (within its length): every
    /// copy of the chunks it touches is stale before the first byte
    /// lands, so once this returns no reader gets the old bytes.
    pub fn write_at(&self, data: &[u8], offset: u64) -> Result<(), FileCopyError> {
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= self.len)
            .ok_or(FileCopyError::OutOfRange {
                offset,
                end: offset.saturating_add(data.len() as u64),
                len: self.len,
            })?;
        if data.is_empty() {
            return Ok(());
        }
        let first = offset / self.chunk;
        let last = (end - 1) / self.chunk;
        let mut held = Vec::with_capacity((last - first + 1) as usize);
        for c in first..=last {
            match self.lock_chunk(c) {
                Ok(g) => held.push((c, g)),
                Err(e) => {
                    // Nothing written yet: the copies are still good.
                    for &(c, g) in &held {
                        self.generation(c).store(g, Ordering::Release);
                    }
                    return Err(e);
                }
            }
        }
        let written = self.file.write_all_at(data, offset);
        for &(c, g) in &held {
            self.generation(c).store(g + 2, Ordering::Release);
        }
        Ok(written?)
    }

    /// Changes the free-memory watermark for every process using these
    /// copies (it takes effect at each node's next look).
    pub fn set_min_free_bytes(&self, bytes: u64) {
        self.min_free().store(bytes, Ordering::Relaxed);
    }

    /// Looks at every copy node's free memory now (otherwise looked at
    /// every 16 MiB of copies made or tried): below the watermark, the
    /// node takes no new copies and gives cold ones back. A long-running
    /// reader that no longer makes copies calls this from time to time.
    pub fn check_memory(&self) {
        for region in &self.layout.regions {
            self.look_at_memory(region);
        }
    }

    /// Gives every copy on every node back to the kernel.
    pub fn drop_copies(&self) {
        for region in &self.layout.regions {
            self.give_back(region, u64::MAX, true);
        }
    }

    /// Each node's copies, from the segment's counters.
    pub fn stats(&self) -> Vec<NodeCopyStats> {
        self.layout
            .regions
            .iter()
            .map(|r| {
                let c = self.counters(r);
                NodeCopyStats {
                    node: r.node,
                    resident_bytes: c.resident.load(Ordering::Relaxed) * self.chunk,
                    copies_made: c.made.load(Ordering::Relaxed),
                    given_back: c.given_back.load(Ordering::Relaxed),
                    refused: c.refused.load(Ordering::Relaxed),
                    under_pressure: c.pressure.load(Ordering::Relaxed) != 0,
                }
            })
            .collect()
    }

    /// Where each copy node's slots have memory, as the kernel says
    /// ([`range_cache`] of the node's slots in the segment): pages and
    /// the nodes they are on.
    pub fn copy_pages(&self) -> Result<Vec<(u32, FileCache)>, PageCacheError> {
        self.layout
            .regions
            .iter()
            .map(|r| {
                range_cache(&self.segment, r.data as u64, self.chunks * self.chunk)
                    .map(|cache| (r.node, cache))
            })
            .collect()
    }

    fn generation(&self, chunk: u64) -> &AtomicU64 {
        // SAFETY: the generations array is inside the mapping and holds
        // `chunks` aligned u64s; only atomics touch it.
        unsafe {
            &*self
                .map
                .addr
                .add(self.layout.generations)
                .cast::<AtomicU64>()
                .add(chunk as usize)
        }
    }

    fn counters(&self, region: &NodeRegion) -> &NodeCounters {
        // SAFETY: 64 bytes of counters at a page boundary of the mapping,
        // only atomics.
        unsafe { &*self.map.addr.add(region.counters).cast::<NodeCounters>() }
    }

    fn slot_tag(&self, region: &NodeRegion, chunk: u64) -> &AtomicU64 {
        // SAFETY: `chunks` aligned u64s inside the mapping, only atomics.
        unsafe {
            &*self
                .map
                .addr
                .add(region.tags)
                .cast::<AtomicU64>()
                .add(chunk as usize)
        }
    }

    fn referenced(&self, region: &NodeRegion, chunk: u64) -> &AtomicU8 {
        // SAFETY: `chunks` bytes inside the mapping, only atomics.
        unsafe {
            &*self
                .map
                .addr
                .add(region.referenced)
                .cast::<AtomicU8>()
                .add(chunk as usize)
        }
    }

    fn slot(&self, region: &NodeRegion, chunk: u64) -> *mut u8 {
        // SAFETY: slot `chunk` of the node's data, inside the mapping.
        unsafe {
            self.map
                .addr
                .add(region.data + (chunk * self.chunk) as usize)
        }
    }

    /// Bytes of `chunk` in the file.
    fn chunk_len(&self, chunk: u64) -> u64 {
        (self.len - chunk * self.chunk).min(self.chunk)
    }

    /// Takes `chunk` for writing: its generation from even to odd.
    fn lock_chunk(&self, chunk: u64) -> Result<u64, FileCopyError> {
        let generation = self.generation(chunk);
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let g = generation.load(Ordering::Acquire);
            if g & 1 == 0
                && generation
                    .compare_exchange(g, g + 1, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                // The write's bytes must not land before the odd
                // generation is seen.
                fence(Ordering::SeqCst);
                return Ok(g);
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else if start.elapsed() > WRITER_WAIT {
                return Err(FileCopyError::WriterStuck { chunk });
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Whether `region`'s node may take a new copy now; looks at its free
    /// memory every [`CHECK_BYTES`] of copies made or tried.
    fn may_copy(&self, region: &NodeRegion) -> bool {
        let counters = self.counters(region);
        if counters.pressure.load(Ordering::Relaxed) != 0 {
            // Under pressure every read of a chunk without a copy comes
            // here: look again at most every 100 ms, by one reader.
            let now = linux::monotonic().as_nanos() as u64;
            let last = counters.looked_ns.load(Ordering::Relaxed);
            if now.saturating_sub(last) >= 100_000_000
                && counters
                    .looked_ns
                    .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                self.look_at_memory(region);
            }
            return counters.pressure.load(Ordering::Relaxed) == 0;
        }
        let every = (CHECK_BYTES / self.chunk).max(1);
        if counters
            .tries
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(every)
        {
            self.look_at_memory(region);
        }
        counters.pressure.load(Ordering::Relaxed) == 0
    }

    /// Reads `region`'s node's free memory; below the watermark, marks
    /// the node under pressure and gives copies back until it is
    /// [`CHECK_BYTES`] above (or none are left).
    fn look_at_memory(&self, region: &NodeRegion) {
        let counters = self.counters(region);
        let min_free = self.min_free().load(Ordering::Relaxed);
        let free = procfs::node_meminfo(region.node).map_or(u64::MAX, |m| m.free);
        counters
            .looked_ns
            .store(linux::monotonic().as_nanos() as u64, Ordering::Relaxed);
        if free < min_free {
            counters.pressure.store(1, Ordering::Relaxed);
            let want = (min_free - free).saturating_add(CHECK_BYTES);
            self.give_back(region, want.div_ceil(self.chunk), false);
        } else {
            counters.pressure.store(0, Ordering::Relaxed);
        }
    }

    /// The free-memory watermark, in the header (shared by every process).
    fn min_free(&self) -> &AtomicU64 {
        // SAFETY: the header's min_free field, aligned, inside the
        // mapping; after creation only atomics touch it.
        unsafe {
            &*std::ptr::addr_of_mut!((*self.map.addr.cast::<Header>()).min_free).cast::<AtomicU64>()
        }
    }

    /// Gives back up to `count` slots of `region` to the kernel: the
    /// clock over referenced bits (a referenced slot is spared once), or
    /// every slot when `all`.
    fn give_back(&self, region: &NodeRegion, count: u64, all: bool) {
        let counters = self.counters(region);
        let mut freed = 0;
        // Two turns of the clock: the first clears referenced bits.
        for _ in 0..self.chunks.saturating_mul(2) {
            if freed >= count || counters.resident.load(Ordering::Relaxed) == 0 {
                break;
            }
            let c = counters.hand.fetch_add(1, Ordering::Relaxed) % self.chunks;
            let referenced = self.referenced(region, c);
            if !all && referenced.load(Ordering::Relaxed) != 0 {
                referenced.store(0, Ordering::Relaxed);
                continue;
            }
            let tag = self.slot_tag(region, c);
            let t = tag.load(Ordering::Acquire);
            if t == EMPTY || t == BUSY {
                continue;
            }
            if tag
                .compare_exchange(t, BUSY, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            let at = (region.data as u64) + c * self.chunk;
            let _ = linux::punch_hole(self.segment.as_fd(), at, self.chunk);
            tag.store(EMPTY, Ordering::Release);
            counters.resident.fetch_sub(1, Ordering::Relaxed);
            counters.given_back.fetch_add(1, Ordering::Relaxed);
            freed += 1;
        }
    }
}

/// A reader of a [`ReplicatedFile`] on one node, with its own counts (no
/// shared counter is touched per read).
///
/// ```
/// use std::io::Write;
/// use numalab::replicated::{FileCopyOptions, ReplicatedFile};
/// let mut file = numalab::files::scratch_file(&std::env::temp_dir())?;
/// file.write_all(&[1u8; 100_000])?;
/// let copies = ReplicatedFile::new(file, FileCopyOptions::default())?;
/// let mut reader = copies.reader(copies.nodes()[0]);
/// let mut buf = vec![0u8; 200_000];
/// assert_eq!(reader.read_at(&mut buf, 0)?, 100_000, "stops at the end, as pread");
/// assert_eq!(reader.from_copies + reader.from_file, 100_000);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct FileReader<'a> {
    copies: &'a ReplicatedFile,
    region: Option<usize>,
    node: u32,
    /// Bytes served from this node's copies.
    pub from_copies: u64,
    /// Bytes served from the file (no valid copy, or no copy allowed).
    pub from_file: u64,
    /// Copies this reader made.
    pub copied: u64,
}

impl FileReader<'_> {
    /// The node it reads on.
    pub fn node(&self) -> u32 {
        self.node
    }

    /// Reads from `offset` into `buf`; like `pread(2)`, fewer bytes at the
    /// end of the file (0 at or past it).
    pub fn read_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let file = self.copies;
        if offset >= file.len {
            return Ok(0);
        }
        let want = (buf.len() as u64).min(file.len - offset) as usize;
        let mut done = 0;
        while done < want {
            let at = offset + done as u64;
            let chunk = at / file.chunk;
            let within = (at % file.chunk) as usize;
            let n = (file.chunk as usize - within).min(want - done);
            let piece = &mut buf[done..done + n];
            let region = self.region;
            let got = match region {
                Some(r) if self.copy_out(r, chunk, within, piece)? => n,
                _ => {
                    let got = read_full(&file.file, piece, at)?;
                    self.from_file += got as u64;
                    got
                }
            };
            done += got;
            if got < n {
                break;
            }
        }
        Ok(done)
    }

    /// Copies `dst.len()` bytes of `chunk` from `within` out of this
    /// node's valid copy, making the copy first if there is none and one
    /// may be made; `false`: read the file instead.
    fn copy_out(
        &mut self,
        region: usize,
        chunk: u64,
        within: usize,
        dst: &mut [u8],
    ) -> io::Result<bool> {
        let file = self.copies;
        let region = &file.layout.regions[region];
        let generation = file.generation(chunk);
        let tag = file.slot_tag(region, chunk);
        for _ in 0..4 {
            let g = generation.load(Ordering::Acquire);
            if g & 1 == 1 {
                return Ok(false); // a writer is inside
            }
            let t = tag.load(Ordering::Acquire);
            if t == valid_tag(g) {
                // SAFETY: the slot is inside the mapping; its bytes may be
                // changed by another process meanwhile, which the checks
                // below catch (the copy is then thrown away).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        file.slot(region, chunk).add(within),
                        dst.as_mut_ptr(),
                        dst.len(),
                    )
                };
                fence(Ordering::Acquire);
                if generation.load(Ordering::Relaxed) == g && tag.load(Ordering::Relaxed) == t {
                    let referenced = file.referenced(region, chunk);
                    if referenced.load(Ordering::Relaxed) == 0 {
                        referenced.store(1, Ordering::Relaxed);
                    }
                    self.from_copies += dst.len() as u64;
                    return Ok(true);
                }
                continue;
            }
            if t == BUSY || !self.make_copy(region, chunk, g, t)? {
                return Ok(false);
            }
        }
        Ok(false)
    }

    /// Copies `chunk` of generation `g` from the file into this node's
    /// slot, whose tag was `t`; `false` when another reader got there
    /// first, or the budget or the node's free memory forbids it.
    fn make_copy(&mut self, region: &NodeRegion, chunk: u64, g: u64, t: u64) -> io::Result<bool> {
        let file = self.copies;
        let counters = file.counters(region);
        let tag = file.slot_tag(region, chunk);
        let new_memory = t == EMPTY;
        if new_memory
            && (counters.resident.load(Ordering::Relaxed) >= file.budget_chunks
                || !file.may_copy(region))
        {
            counters.refused.fetch_add(1, Ordering::Relaxed);
            return Ok(false);
        }
        if tag
            .compare_exchange(t, BUSY, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return Ok(false);
        }
        if new_memory && counters.resident.fetch_add(1, Ordering::Relaxed) >= file.budget_chunks {
            counters.resident.fetch_sub(1, Ordering::Relaxed);
            counters.refused.fetch_add(1, Ordering::Relaxed);
            tag.store(EMPTY, Ordering::Release);
            return Ok(false);
        }
        let len = file.chunk_len(chunk) as usize;
        let slot = file.slot(region, chunk);
        // The slot's pages in one call rather than a fault per page inside
        // pread (an error leaves the faults to pread).
        let page = linux::page_size();
        let _ = linux::madvise(
            slot,
            len.div_ceil(page) * page,
            linux::Advice::PopulateWrite,
        );
        let mut got = 0;
        let mut failed = None;
        while got < len {
            // SAFETY: the slot has `chunk` bytes inside the mapping and
            // this reader holds it (tag BUSY).
            let n = unsafe {
                linux::pread_into(
                    file.file.as_fd(),
                    slot.add(got),
                    len - got,
                    chunk * file.chunk + got as u64,
                )
            };
            match n {
                Ok(0) => break,
                Err(err) => {
                    if err.kind() != io::ErrorKind::Interrupted {
                        failed = Some(err);
                        break;
                    }
                }
                Ok(n) => got += n,
            }
        }
        // The copy's bytes before its tag; a write since `g` was read
        // leaves the generation past `g`, so this tag is stale at once.
        fence(Ordering::SeqCst);
        if got == len {
            tag.store(valid_tag(g), Ordering::Release);
            counters.made.fetch_add(1, Ordering::Relaxed);
            self.copied += 1;
        } else {
            tag.store(STALE, Ordering::Release);
        }
        match failed {
            Some(err) => Err(err),
            None => Ok(got == len),
        }
    }
}

/// `pread` until `buf` is full or the file ends.
fn read_full(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}
