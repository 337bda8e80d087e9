//! Where a file's pages sit in the page cache: how many are cached, as
//! util-linux `fincore` counts them, and on which node, without reading
//! anything from disk.
//!
//! `fincore`, `vmtouch` and `cachestat(2)` count a file's cached pages
//! but not their nodes; `numactl --file --dump-nodes` finds the nodes by
//! faulting every page in, which reads the whole file from disk. Here the
//! file is taken a window at a time ([`WINDOW`] bytes, so a file larger
//! than memory or than the address space one window may take is fine):
//! the window is mapped shared and read-only, `mincore(2)` says which of
//! its pages are cached, only the runs of cached pages get page-table
//! entries (`MADV_POPULATE_READ`, Linux 5.14: a page in the cache is
//! mapped without I/O), and `move_pages(2)` in query mode says where each
//! is ([`locate_pages`]). A page the kernel evicts between `mincore` and
//! the mapping is read back from disk; that window is a few microseconds
//! per run of cached pages.
//!
//! ```
//! use numalab::pagecache::file_cache;
//! let path = std::env::temp_dir().join(format!("numalab-doc-{}", std::process::id()));
//! std::fs::write(&path, vec![7u8; 1 << 20])?; // written, so cached
//! let cache = file_cache(&std::fs::File::open(&path)?);
//! std::fs::remove_file(&path)?;
//! let cache = cache?;
//! assert_eq!(cache.pages, (1 << 20) / cache.page_size);
//! assert_eq!(cache.cached, cache.pages);
//! let on_nodes: u64 = cache.per_node.values().sum();
//! assert_eq!(on_nodes + cache.unknown, cache.cached);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;

use serde::{Deserialize, Serialize};

use crate::locate::{locate_pages, LocateError};
use crate::sys::linux::{self, FileStat};
use crate::sys::procfs::{self, MemoryBlocks};

/// The most bytes of a file mapped at once: 1 GiB (the `mincore` vector
/// of one window is 256 KiB with 4 KiB pages).
pub const WINDOW: u64 = 1 << 30;

/// A file's pages in the page cache, per node ([`file_cache`]).
///
/// ```
/// use numalab::pagecache::FileCache;
/// let empty = FileCache::default();
/// assert_eq!((empty.pages, empty.cached), (0, 0));
/// assert_eq!(empty.cached_bytes(), 0);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileCache {
    /// The file's size in bytes.
    pub size: u64,
    /// The page size `mincore` counts in.
    pub page_size: u64,
    /// Pages the file spans (its size rounded up to whole pages).
    pub pages: u64,
    /// Pages in the page cache (`fincore`'s PAGES).
    pub cached: u64,
    /// Cached pages per node.
    pub per_node: BTreeMap<u32, u64>,
    /// Cached pages whose node could not be told: evicted between the
    /// two questions, or past the end of a file truncated meanwhile.
    pub unknown: u64,
}

impl FileCache {
    /// Bytes of the file in the cache (`fincore`'s RES): cached pages
    /// times the page size.
    pub fn cached_bytes(&self) -> u64 {
        self.cached * self.page_size
    }

    /// Cached pages on `node`.
    ///
    /// ```
    /// use numalab::pagecache::FileCache;
    /// let cache = FileCache { cached: 5, per_node: [(1, 3)].into(), unknown: 2, ..FileCache::default() };
    /// assert_eq!((cache.on_node(1), cache.on_node(0)), (3, 0));
    /// assert_eq!(cache.off_node(1), 2, "the unknown ones are not on node 1 either");
    /// ```
    pub fn on_node(&self, node: u32) -> u64 {
        self.per_node.get(&node).copied().unwrap_or(0)
    }

    /// Cached pages not known to be on `node`: on other nodes or of
    /// unknown node.
    pub fn off_node(&self, node: u32) -> u64 {
        self.cached - self.on_node(node)
    }

    /// Adds another file's counts (for totals).
    pub fn add(&mut self, other: &FileCache) {
        self.size += other.size;
        self.page_size = other.page_size.max(self.page_size);
        self.pages += other.pages;
        self.cached += other.cached;
        self.unknown += other.unknown;
        for (&node, &pages) in &other.per_node {
            *self.per_node.entry(node).or_default() += pages;
        }
    }
}

/// Why a file's cache could not be read.
///
/// ```
/// use numalab::pagecache::{file_cache, PageCacheError};
/// let null = std::fs::File::open("/dev/null")?;
/// let err = file_cache(&null).unwrap_err();
/// assert!(matches!(err, PageCacheError::NotRegular(_)), "{err}");
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub enum PageCacheError {
    /// Not a regular file (its kind: a directory, a FIFO, a character
    /// device, ...): only regular files have pages in the cache to count.
    NotRegular(&'static str),
    /// A system call failed.
    Os(io::Error),
    /// The kernel could not say where pages are.
    Locate(LocateError),
}

impl fmt::Display for PageCacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PageCacheError::NotRegular(kind) => write!(
                f,
                "is a {kind}, not a regular file: only regular files have cached pages to count"
            ),
            PageCacheError::Os(err) => write!(f, "{err}"),
            PageCacheError::Locate(err) => write!(f, "{err}"),
        }
    }
}

impl std::error::Error for PageCacheError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PageCacheError::NotRegular(_) => None,
            PageCacheError::Os(err) => Some(err),
            PageCacheError::Locate(err) => Some(err),
        }
    }
}

impl From<io::Error> for PageCacheError {
    fn from(err: io::Error) -> Self {
        PageCacheError::Os(err)
    }
}

/// The kind of file a mode is, in words.
pub(crate) fn kind_of(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => "directory",
        libc::S_IFIFO => "FIFO",
        libc::S_IFCHR => "character device",
        libc::S_IFBLK => "block device",
        libc::S_IFSOCK => "socket",
        libc::S_IFLNK => "symbolic link",
        _ => "special file",
    }
}

/// `file`'s status, or why it has no cached pages to count: only a
/// regular file does.
fn regular(file: &File) -> Result<FileStat, PageCacheError> {
    let stat = linux::stat_fd(file)?;
    if !stat.regular {
        return Err(PageCacheError::NotRegular(kind_of(stat.mode)));
    }
    Ok(stat)
}

/// The size of `file`, which must be a regular file (the only kind with
/// pages in the page cache).
///
/// ```
/// use numalab::pagecache::{file_size, PageCacheError};
/// let err = file_size(&std::fs::File::open("/dev/null")?).unwrap_err();
/// assert!(matches!(err, PageCacheError::NotRegular(_)), "{err}");
/// assert_eq!(file_size(&std::fs::File::open("/proc/self/exe")?)?, std::fs::metadata("/proc/self/exe")?.len());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn file_size(file: &File) -> Result<u64, PageCacheError> {
    Ok(regular(file)?.size)
}

/// Opens `path` to ask about its cache: read-only, without waiting (a
/// FIFO does not block for a writer), without touching its access time
/// where the caller may ask that (its owner, or root), and, unless
/// `follow`, refusing a symbolic link at `path` itself (`ELOOP`).
///
/// ```
/// use numalab::pagecache::open_for_cache;
/// assert!(open_for_cache("/proc/self/exe".as_ref(), false).is_err(), "a link, not followed");
/// assert!(open_for_cache("/proc/self/exe".as_ref(), true).is_ok());
/// ```
pub fn open_for_cache(path: &std::path::Path, follow: bool) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOATIME;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let open = |flags| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(path)
    };
    open(flags).or_else(|err| match err.raw_os_error() {
        // O_NOATIME is for the file's owner and root only.
        Some(libc::EPERM) => open(flags & !libc::O_NOATIME),
        _ => Err(err),
    })
}

/// How many of `file`'s pages are in the page cache, and on which nodes
/// (see the [module](self)). Nothing is read from the file.
pub fn file_cache(file: &File) -> Result<FileCache, PageCacheError> {
    let size = regular(file)?.size;
    range_cache(file, 0, size)
}

/// [`file_cache`] of `len` bytes of `file` from `offset` (a multiple of
/// the page size; a range past the file's end counts as not cached):
/// for a part of a file, such as one node's copies in a
/// [`ReplicatedFile`](crate::replicated::ReplicatedFile)'s segment.
///
/// ```
/// use numalab::pagecache::range_cache;
/// let path = std::env::temp_dir().join(format!("numalab-range-doc-{}", std::process::id()));
/// std::fs::write(&path, vec![7u8; 1 << 20])?;
/// let page = numalab::pagecache::file_cache(&std::fs::File::open(&path)?)?.page_size;
/// let half = range_cache(&std::fs::File::open(&path)?, 1 << 19, 1 << 19);
/// std::fs::remove_file(&path)?;
/// assert_eq!(half?.cached, (1 << 19) / page);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn range_cache(file: &File, offset: u64, len: u64) -> Result<FileCache, PageCacheError> {
    let fd = file.as_fd();
    let size = regular(file)?.size;
    let page = linux::page_size() as u64;
    if !offset.is_multiple_of(page) {
        return Err(PageCacheError::Os(io::Error::from_raw_os_error(
            libc::EINVAL,
        )));
    }
    let mut cache = FileCache {
        size: len,
        page_size: page,
        pages: len.div_ceil(page),
        ..FileCache::default()
    };
    let start = offset;
    let end = offset.saturating_add(len).min(size);
    let mut residency = Vec::new();
    // As root, the frames the pagemap shows say each page's node much
    // faster than move_pages(2), which looks the mapping up again for
    // every page.
    let frames = Frames::get();
    let mut offset = start;
    while offset < end {
        let len = (end - offset).min(WINDOW);
        let window = linux::FileWindow::map(fd, offset, len as usize)?;
        residency.clear();
        residency.resize(len.div_ceil(page) as usize, 0);
        window.mincore(&mut residency)?;
        let mut addresses = Vec::new();
        let mut run = None;
        for (i, &flags) in residency.iter().chain(std::iter::once(&0)).enumerate() {
            match (flags & 1 == 1, run) {
                (true, None) => run = Some(i),
                (false, Some(start)) => {
                    run = None;
                    cache.cached += (i - start) as u64;
                    // A run the kernel will not map (the file shrank
                    // meanwhile) keeps its pages unknown below.
                    let from = start * page as usize;
                    let to = (i * page as usize).min(len as usize);
                    let _ = window.populate(from, to - from);
                    let counted = frames.is_some_and(|f| {
                        f.count(
                            window.at(from) as usize,
                            i - start,
                            page as usize,
                            &mut cache,
                        )
                    });
                    if !counted {
                        addresses.extend((start..i).map(|p| window.at(p * page as usize)));
                    }
                }
                _ => {}
            }
        }
        if !addresses.is_empty() {
            let found = locate_pages(&addresses).map_err(PageCacheError::Locate)?;
            for (node, pages) in found.per_node {
                *cache.per_node.entry(node).or_default() += pages;
            }
            cache.unknown += found.unknown + found.not_present;
        }
        offset += len;
    }
    Ok(cache)
}

/// Nodes of mapped pages from their page frames: `/proc/self/pagemap`
/// (frame numbers need `CAP_SYS_ADMIN`) and the node of each memory
/// block (`/sys/devices/system/node/nodeN/memoryM`).
struct Frames {
    pagemap: File,
    blocks: MemoryBlocks,
}

impl Frames {
    /// The table, read once per process (reading every node's memory
    /// blocks costs more than counting a small file); `None` without root
    /// (no frame numbers) or without memory blocks in sysfs. A block
    /// hot-plugged later is in no known block: its pages are asked of
    /// `move_pages(2)`.
    fn get() -> Option<&'static Frames> {
        static FRAMES: std::sync::OnceLock<Option<Frames>> = std::sync::OnceLock::new();
        FRAMES
            .get_or_init(|| {
                if linux::effective_uid() != 0 {
                    return None;
                }
                let blocks = procfs::memory_block_nodes()?;
                Some(Frames {
                    pagemap: File::open("/proc/self/pagemap").ok()?,
                    blocks,
                })
            })
            .as_ref()
    }

    /// Counts the nodes of `pages` mapped pages from `start` into `cache`;
    /// `false` (nothing counted) when some present page shows no frame
    /// number or a frame in no known block, so the caller asks
    /// `move_pages(2)` instead. A page not present (evicted before it
    /// was mapped) is unknown.
    fn count(&self, start: usize, pages: usize, page: usize, cache: &mut FileCache) -> bool {
        let Ok(entries) = procfs::pagemap_run(&self.pagemap, start, pages, page) else {
            return false;
        };
        let mut found: BTreeMap<u32, u64> = BTreeMap::new();
        let mut unknown = 0;
        let mut last: Option<(u64, u32)> = None;
        for entry in entries {
            if !entry.present {
                unknown += 1;
                continue;
            }
            if entry.pfn == 0 {
                return false;
            }
            // Runs of pages mostly sit in one block: look it up once.
            let block = self.blocks.block_of(entry.pfn, page as u64);
            let node = match last {
                Some((b, node)) if b == block => node,
                _ => match self.blocks.nodes.get(&block) {
                    Some(&node) => {
                        last = Some((block, node));
                        node
                    }
                    None => return false,
                },
            };
            *found.entry(node).or_default() += 1;
        }
        for (node, n) in found {
            *cache.per_node.entry(node).or_default() += n;
        }
        cache.unknown += unknown;
        true
    }
}

/// Pages of a file the page cache holds and cannot simply drop, from
/// `cachestat(2)` (Linux 6.5): dirty ones (written, not yet on disk) and
/// ones being written back. `None` on older kernels.
///
/// ```
/// use numalab::pagecache::unflushed_pages;
/// let path = std::env::temp_dir().join(format!("numalab-dirty-doc-{}", std::process::id()));
/// std::fs::write(&path, vec![1u8; 1 << 20])?;
/// let file = std::fs::File::open(&path)?;
/// file.sync_all()?;
/// let after_sync = unflushed_pages(&file);
/// std::fs::remove_file(&path)?;
/// if let Some(pages) = after_sync {
///     assert_eq!(pages, 0, "written to disk");
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn unflushed_pages(file: &File) -> Option<u64> {
    linux::cache_stat(file.as_fd())
        .ok()
        .map(|s| s.dirty + s.writeback)
}

/// Asks the kernel to drop `file`'s pages from the page cache
/// (`POSIX_FADV_DONTNEED` over the whole file): clean pages no process
/// maps leave it; dirty pages are queued for writeback and stay, as do
/// pages mapped by a process. Nothing is written by numalab.
///
/// ```
/// use numalab::pagecache::{drop_cache, file_cache};
/// let path = std::env::temp_dir().join(format!("numalab-drop-doc-{}", std::process::id()));
/// std::fs::write(&path, vec![1u8; 1 << 20])?;
/// let file = std::fs::File::open(&path)?;
/// file.sync_all()?; // clean, so droppable
/// drop_cache(&file)?;
/// let left = file_cache(&file)?.cached;
/// std::fs::remove_file(&path)?;
/// assert!(left < 256, "{left} of 256 pages stayed");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn drop_cache(file: &File) -> Result<(), PageCacheError> {
    regular(file)?;
    linux::drop_file_cache(file.as_fd())?;
    Ok(())
}

/// Reads all of `file` on a thread of its own whose memory policy
/// prefers `node` (`MPOL_PREFERRED`: another node when `node` is full),
/// so the pages the read brings into the page cache are allocated on
/// `node` — the kernel places a page-cache page by the policy of the task
/// that reads it in. Pages already cached stay where they are. The
/// caller's own policy is untouched. Reads as far as the file's size when
/// it began; returns the bytes read.
///
/// ```
/// use numalab::pagecache::{file_cache, load_on};
/// let path = std::env::temp_dir().join(format!("numalab-load-doc-{}", std::process::id()));
/// std::fs::write(&path, vec![1u8; 1 << 20])?;
/// let read = load_on(&std::fs::File::open(&path)?, 0);
/// let cache = file_cache(&std::fs::File::open(&path)?);
/// std::fs::remove_file(&path)?;
/// assert_eq!(read?, 1 << 20);
/// assert_eq!(cache?.cached, 256);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn load_on(file: &File, node: u32) -> Result<u64, PageCacheError> {
    use std::os::unix::fs::FileExt;
    let stat = regular(file)?;
    on_node(node, || {
        let mut buffer = vec![0u8; 1 << 20];
        let mut offset = 0u64;
        // The size it had: a file that keeps growing is read as far as
        // it was.
        while offset < stat.size {
            let want = (stat.size - offset).min(buffer.len() as u64) as usize;
            let n = file.read_at(&mut buffer[..want], offset)?;
            if n == 0 {
                break;
            }
            offset += n as u64;
        }
        Ok(offset)
    })
}

/// Writes `size` bytes (a pattern that no file system stores as a hole)
/// to the empty regular `file` on a thread whose memory policy prefers
/// `node`, so the page cache holds them there (or, on tmpfs, the file's
/// memory is there), and flushes them to disk so they are clean: a later
/// [`drop_cache`] can evict them. For making a file to measure the page
/// cache with ([`crate::files::scratch_file`]).
///
/// ```
/// use numalab::pagecache::{file_cache, fill_on};
/// let file = numalab::files::scratch_file(&std::env::temp_dir())?;
/// fill_on(&file, 1 << 20, 0)?;
/// let cache = file_cache(&file)?;
/// assert_eq!(cache.size, 1 << 20);
/// assert_eq!(cache.cached, cache.pages, "what was written is cached");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn fill_on(file: &File, size: u64, node: u32) -> Result<(), PageCacheError> {
    use std::os::unix::fs::FileExt;
    regular(file)?;
    on_node(node, || {
        let mut block = vec![0u8; 1 << 20];
        for (i, byte) in block.iter_mut().enumerate() {
            *byte = (i % 251) as u8 + 1;
        }
        let mut offset = 0u64;
        while offset < size {
            let n = (size - offset).min(block.len() as u64) as usize;
            file.write_all_at(&block[..n], offset)?;
            offset += n as u64;
        }
        file.sync_data()?;
        Ok(())
    })
}

/// Runs `work` on a thread of its own whose memory policy prefers `node`
/// (the caller's policy is untouched).
fn on_node<T: Send>(
    node: u32,
    work: impl FnOnce() -> Result<T, PageCacheError> + Send,
) -> Result<T, PageCacheError> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                crate::MemPolicy::Preferred(node)
                    .apply_to_thread()
                    .map_err(|err| PageCacheError::Os(io::Error::other(err)))?;
                work()
            })
            .join()
            .unwrap_or_else(|_| {
                Err(PageCacheError::Os(io::Error::other(
                    "the page-cache thread panicked",
                )))
            })
    })
}

/// A whole regular file mapped shared and read-only, for reading it
/// through the page cache without `read(2)`: each page is mapped on first
/// touch (the kernel maps a few cached neighbours with it). Unmapped when
/// dropped.
///
/// A file truncated under the mapping makes the next touch of a page past
/// its new end raise `SIGBUS`; [`BusErrorExit`] turns that into a
/// sentence and an exit.
///
/// ```
/// use numalab::pagecache::{fill_on, MappedFile};
/// let file = numalab::files::scratch_file(&std::env::temp_dir())?;
/// fill_on(&file, 10_000, 0)?;
/// let mapped = MappedFile::map(&file)?;
/// assert_eq!(mapped.len(), 10_000);
/// let mut block = [0u8; 8192];
/// assert_eq!(mapped.copy_to(0, &mut block), 8192);
/// assert_eq!(mapped.copy_to(8192, &mut block), 10_000 - 8192, "up to the end");
/// assert_eq!(block[0], 1 + (8192 % 251) as u8);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct MappedFile {
    window: Option<linux::FileWindow>,
    len: usize,
}

impl MappedFile {
    /// Maps `file` as long as it is now (an empty file maps to nothing).
    pub fn map(file: &File) -> Result<MappedFile, PageCacheError> {
        let stat = regular(file)?;
        let len = usize::try_from(stat.size)
            .map_err(|_| PageCacheError::Os(io::Error::from_raw_os_error(libc::EFBIG)))?;
        let window = if len == 0 {
            None
        } else {
            Some(linux::FileWindow::map(file.as_fd(), 0, len)?)
        };
        Ok(MappedFile { window, len })
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is mapped (an empty file).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the file's bytes from `offset` into `dst`, as many as fit
    /// and the file has; returns how many (0 at or past the end).
    pub fn copy_to(&self, offset: usize, dst: &mut [u8]) -> usize {
        self.window
            .as_ref()
            .map_or(0, |window| window.copy_to(offset, dst))
    }
}

/// While it lives, a `SIGBUS` (a page of a mapped file past its end: the
/// file was truncated while mapped) writes its message to standard error
/// and ends the process with status 1, where it would otherwise die of
/// "Bus error" with nothing said; dropped, the signal's former handling is
/// back.
///
/// ```
/// use numalab::pagecache::BusErrorExit;
/// let guard = BusErrorExit::install("numalab: data.bin was truncated while being read\n")?;
/// drop(guard); // SIGBUS is handled as before
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct BusErrorExit {
    saved: linux::SavedAction,
}

impl BusErrorExit {
    /// Installs the handler with `message` (end it with a newline).
    pub fn install(message: &str) -> io::Result<BusErrorExit> {
        Ok(BusErrorExit {
            saved: linux::exit_on_bus_error(message)?,
        })
    }
}

impl Drop for BusErrorExit {
    fn drop(&mut self) {
        linux::restore_signal(&self.saved);
    }
}
