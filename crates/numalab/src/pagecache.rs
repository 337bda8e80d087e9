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

    /// Adds another file's counts (for totals; saturating: ten million
    /// exabyte-long sparse files add up past `u64`).
    pub fn add(&mut self, other: &FileCache) {
        self.size = self.size.saturating_add(other.size);
        self.page_size = other.page_size.max(self.page_size);
        self.pages = self.pages.saturating_add(other.pages);
        self.cached = self.cached.saturating_add(other.cached);
        self.unknown = self.unknown.saturating_add(other.unknown);
        for (&node, &pages) in &other.per_node {
            let slot = self.per_node.entry(node).or_default();
            *slot = slot.saturating_add(pages);
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
    /// A file longer than numalab walks page by page where the kernel has
    /// no `cachestat(2)` (Linux 6.5) to skip what is not cached: a sparse
    /// file's apparent size costs time whether or not anything is cached.
    TooLong {
        /// The file's length.
        size: u64,
        /// The most numalab walks: [`MAX_WALKED`].
        limit: u64,
    },
    /// The file shrank while it was counted, every time it was counted
    /// ([`SETTLE_TRIES`] times): pages past the new end were counted but
    /// are no longer the file's.
    Shrinking {
        /// Its size when last asked.
        size: u64,
    },
}

impl fmt::Display for PageCacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PageCacheError::NotRegular(kind) => write!(
                f,
                "is a {kind}, not a regular file: only regular files have pages in the page cache"
            ),
            PageCacheError::Os(err) => write!(f, "{err}"),
            PageCacheError::Locate(err) => write!(f, "{err}"),
            PageCacheError::TooLong { size, limit } => write!(
                f,
                "is {} long, more than the {} numalab walks page by page on a kernel without cachestat(2) (Linux 6.5), which would let it skip what is not cached",
                crate::units::format_size(*size),
                crate::units::format_size(*limit)
            ),
            PageCacheError::Shrinking { size } => write!(
                f,
                "shrank while it was counted, {SETTLE_TRIES} times in a row (now {}): another process is truncating it",
                crate::units::format_size(*size)
            ),
        }
    }
}

impl std::error::Error for PageCacheError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PageCacheError::NotRegular(_)
            | PageCacheError::TooLong { .. }
            | PageCacheError::Shrinking { .. } => None,
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

/// `file`'s status, or why it has no cached pages to count: only a
/// regular file does.
fn regular(file: &File) -> Result<FileStat, PageCacheError> {
    let stat = linux::stat_fd(file)?;
    if !stat.regular {
        return Err(PageCacheError::NotRegular(crate::files::kind_of(stat.mode)));
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

/// Opens `path` to ask about its cache, once it is known to be a regular
/// file: its kind is read from a descriptor that opens nothing (`O_PATH`),
/// so a device, FIFO or socket named here is refused without its open
/// running ([`PageCacheError::NotRegular`]); then that same file is opened
/// read-only, without waiting, and without touching its access time where
/// the caller may ask that (its owner, or root). Unless `follow`, a
/// symbolic link at `path` itself is refused as one.
///
/// ```
/// use numalab::pagecache::{open_for_cache, PageCacheError};
/// let link = open_for_cache("/proc/self/exe".as_ref(), false).unwrap_err();
/// assert!(matches!(link, PageCacheError::NotRegular("symbolic link")), "{link}");
/// assert!(open_for_cache("/proc/self/exe".as_ref(), true).is_ok());
/// let device = open_for_cache("/dev/null".as_ref(), true).unwrap_err();
/// assert_eq!(device.to_string(), "is a character device, not a regular file: only regular files have pages in the page cache");
/// ```
pub fn open_for_cache(path: &std::path::Path, follow: bool) -> Result<File, PageCacheError> {
    open_for_cache_at(None, path, follow)
}

/// [`open_for_cache`] of `path` inside the directory `at` holds (a walk
/// opens each file from its directory's descriptor, so a directory
/// swapped for a link during the walk cannot lead it elsewhere).
pub fn open_for_cache_at(
    at: Option<std::os::fd::BorrowedFd<'_>>,
    path: &std::path::Path,
    follow: bool,
) -> Result<File, PageCacheError> {
    let named = linux::open_path_at(at, path, follow)?;
    let stat = linux::stat_fd(&named)?;
    if !stat.regular {
        return Err(PageCacheError::NotRegular(crate::files::kind_of(stat.mode)));
    }
    Ok(File::from(linux::reopen_read(named.as_fd(), true)?))
}

/// How many of `file`'s pages are in the page cache, and on which nodes
/// (see the [module](self)). Nothing is read from the file.
pub fn file_cache(file: &File) -> Result<FileCache, PageCacheError> {
    settled(file, |size| cache_of(file, size, 0, size))
}

/// How many times a file that shrinks while it is counted is counted.
pub const SETTLE_TRIES: usize = 4;

/// `count` of `file` at its size, counted again at its new size when it
/// shrank meanwhile (pages past its new end would be counted as cached
/// but unknown, under a size it no longer has); a file that grew keeps
/// the count of the size it had. [`PageCacheError::Shrinking`] after
/// [`SETTLE_TRIES`] counts that each saw it shrink.
fn settled(
    file: &File,
    mut count: impl FnMut(u64) -> Result<FileCache, PageCacheError>,
) -> Result<FileCache, PageCacheError> {
    let mut size = regular(file)?.size;
    for _ in 0..SETTLE_TRIES {
        let cache = count(size)?;
        let now = regular(file)?.size;
        if now >= size {
            return Ok(cache);
        }
        size = now;
    }
    Err(PageCacheError::Shrinking { size })
}

/// [`file_cache`] with the file shared among up to `threads` threads, a
/// part of at least [`PART`] bytes each: for a large file, where mapping
/// every cached page to find its node costs several times what `mincore`
/// does and each thread maps its own part. The counts are
/// [`file_cache`]'s; a file under two parts is counted on this thread.
///
/// ```
/// use numalab::pagecache::{file_cache, file_cache_threads};
/// let path = std::env::temp_dir().join(format!("numalab-threads-doc-{}", std::process::id()));
/// std::fs::write(&path, vec![7u8; 4 << 20])?;
/// let file = std::fs::File::open(&path)?;
/// let (one, four) = (file_cache(&file), file_cache_threads(&file, 4));
/// std::fs::remove_file(&path)?;
/// assert_eq!(one?.pages, four?.pages);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn file_cache_threads(file: &File, threads: usize) -> Result<FileCache, PageCacheError> {
    settled(file, |size| cache_in_parts(file, size, threads))
}

/// [`file_cache_threads`] of `file` at `size`.
fn cache_in_parts(file: &File, size: u64, threads: usize) -> Result<FileCache, PageCacheError> {
    let parts = (size / PART).min(threads as u64).max(1);
    if parts < 2 {
        return cache_of(file, size, 0, size);
    }
    let page = linux::page_size() as u64;
    let step = size.div_ceil(parts).next_multiple_of(page);
    let counted: Vec<Result<FileCache, PageCacheError>> = std::thread::scope(|scope| {
        let counting: Vec<_> = (0..size)
            .step_by(step as usize)
            .map(|from| scope.spawn(move || cache_of(file, size, from, step.min(size - from))))
            .collect();
        counting
            .into_iter()
            .map(|thread| {
                thread
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let mut cache = FileCache {
        page_size: page,
        ..FileCache::default()
    };
    for part in counted {
        cache.add(&part?);
    }
    Ok(cache)
}

/// [`file_cache`] of many files, cheaper per file: the small ones wholly
/// cached (most files of a hot tree) are mapped side by side in one
/// reservation and their nodes read in one go, instead of a mapping, a
/// `pagemap` read and an `munmap` each; the others are counted as
/// [`file_cache`] counts them. A file may be closed once added.
///
/// ```
/// use numalab::pagecache::{file_cache, FileCacheBatch};
/// let dir = std::env::temp_dir().join(format!("numalab-batch-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let mut batch = FileCacheBatch::new();
/// for (i, size) in [4096, 10_000, 0].into_iter().enumerate() {
///     std::fs::write(dir.join(i.to_string()), vec![1u8; size])?;
///     batch.add(&std::fs::File::open(dir.join(i.to_string()))?);
/// }
/// let caches = batch.finish();
/// let one = file_cache(&std::fs::File::open(dir.join("1"))?);
/// std::fs::remove_dir_all(&dir)?;
/// assert_eq!(caches.len(), 3);
/// assert_eq!(caches[1].as_ref().unwrap().pages, one?.pages);
/// assert_eq!(caches[2].as_ref().unwrap().pages, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default)]
pub struct FileCacheBatch {
    /// Reserved on the first file mapped; `None` before (or when the
    /// reservation failed: then every file is counted alone).
    slots: Option<linux::FileSlots>,
    /// Bytes of `slots` holding files.
    used: usize,
    /// Files mapped in `slots` and not yet counted: result index, byte
    /// offset in `slots`, size.
    mapped: Vec<(usize, usize, u64)>,
    results: Vec<Option<Result<FileCache, PageCacheError>>>,
}

/// The largest file [`FileCacheBatch`] maps beside others.
const SLOT_FILE: u64 = 1 << 20;

/// Address space one [`FileCacheBatch`] reserves for small files.
const SLOTS: usize = 64 << 20;

impl FileCacheBatch {
    /// An empty batch.
    pub fn new() -> FileCacheBatch {
        FileCacheBatch::default()
    }

    /// Adds `file`; its count is [`finish`](Self::finish)'s entry at the
    /// index returned.
    pub fn add(&mut self, file: &File) -> usize {
        let index = self.results.len();
        let counted = self.count_or_map(file, index);
        self.results.push(counted);
        index
    }

    /// Every file's count, in the order added.
    pub fn finish(mut self) -> Vec<Result<FileCache, PageCacheError>> {
        self.flush();
        self.results
            .into_iter()
            .map(|counted| counted.expect("every file mapped was counted by flush"))
            .collect()
    }

    /// `file`'s count, or `None` when it was mapped into the slots, to
    /// be counted by [`flush`](Self::flush).
    fn count_or_map(
        &mut self,
        file: &File,
        index: usize,
    ) -> Option<Result<FileCache, PageCacheError>> {
        let size = match regular(file) {
            Ok(stat) => stat.size,
            Err(err) => return Some(Err(err)),
        };
        let page = linux::page_size() as u64;
        let pages = size.div_ceil(page);
        let probe = match size {
            0 => Probe::Nothing,
            _ => Probe::of(file.as_fd(), 0, size),
        };
        if probe == Probe::Nothing {
            return Some(Ok(FileCache {
                size,
                page_size: page,
                pages,
                ..FileCache::default()
            }));
        }
        if probe != Probe::Whole || size > SLOT_FILE || Frames::get().is_none() {
            return Some(settled(file, |size| cache_of(file, size, 0, size)));
        }
        let bytes = (pages * page) as usize;
        if self.slots.is_none() {
            self.slots = linux::FileSlots::reserve(SLOTS).ok();
        }
        if self.used + bytes > self.slots.as_ref().map_or(0, |slots| slots.len()) {
            self.flush();
        }
        let mapped = self.slots.as_ref().is_some_and(|slots| {
            slots
                .map_populated(self.used, file.as_fd(), size as usize)
                .is_ok()
        });
        if !mapped {
            return Some(settled(file, |size| cache_of(file, size, 0, size)));
        }
        self.mapped.push((index, self.used, size));
        self.used += bytes;
        None
    }

    /// Counts the nodes of the files in the slots and empties them.
    fn flush(&mut self) {
        let Some(slots) = &self.slots else { return };
        if self.mapped.is_empty() {
            return;
        }
        let page = linux::page_size();
        let frames = Frames::get().expect("files are mapped only with page frames");
        let mut raw = Vec::new();
        let read = procfs::pagemap_run(
            &frames.pagemap,
            slots.at(0) as usize,
            self.used / page,
            page,
            &mut raw,
        )
        .is_ok();
        for &(index, at, size) in &self.mapped {
            let pages = (size as usize).div_ceil(page);
            let mut cache = FileCache {
                size,
                page_size: page as u64,
                pages: pages as u64,
                cached: pages as u64,
                ..FileCache::default()
            };
            let first = at / page;
            let run = read
                .then(|| frames.nodes_of(&raw[first * 8..(first + pages) * 8], page))
                .flatten();
            let counted = match run {
                Some(run) => {
                    run.add_to(&mut cache);
                    Ok(cache)
                }
                None => {
                    let addresses: Vec<*const u8> =
                        (0..pages).map(|p| slots.at(at + p * page)).collect();
                    locate_into(&addresses, &mut cache).map(|()| cache)
                }
            };
            self.results[index] = Some(counted);
        }
        self.mapped.clear();
        if slots.reset(self.used).is_err() {
            // Mapped files could not be unmapped in one go: drop the
            // reservation (unmapping them all) and reserve again.
            self.slots = None;
        }
        self.used = 0;
    }
}

/// The least bytes of a file [`file_cache_threads`] gives a thread.
pub const PART: u64 = 256 << 20;

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
    let size = regular(file)?.size;
    cache_of(file, size, offset, len)
}

/// [`range_cache`] of a regular file of `size` bytes.
fn cache_of(file: &File, size: u64, offset: u64, len: u64) -> Result<FileCache, PageCacheError> {
    let fd = file.as_fd();
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
    let end = offset.saturating_add(len).min(size);
    // Where cachestat(2) works, windows with nothing cached are skipped at
    // the cost of what is cached, whatever the file's apparent size;
    // without it every window is asked, so the length is bounded. (One
    // window has nothing to skip: its parts are probed below anyway.)
    let skips =
        end.saturating_sub(offset) > WINDOW && linux::cache_stat_range(fd, offset, page).is_ok();
    if !skips && end.saturating_sub(offset) > MAX_WALKED {
        return Err(PageCacheError::TooLong {
            size: end - offset,
            limit: MAX_WALKED,
        });
    }
    let mut residency = Vec::new();
    let mut raw = Vec::new();
    // As root, the frames the pagemap shows say each page's node much
    // faster than move_pages(2), which looks the mapping up again for
    // every page.
    let frames = Frames::get();
    // Mapping one page per fault-around block until a block's cached
    // pages turn out not all mapped (fault-around off or smaller).
    let mut sparse = true;
    let mut at = offset;
    while at < end {
        if skips {
            match next_cached_window(fd, at, end) {
                Some(next) => at = next,
                None => break,
            }
        }
        let len = (end - at).min(WINDOW);
        let pages = len.div_ceil(page) as usize;
        residency.clear();
        residency.resize(pages, 0);
        // Parts wholly cached (most of a hot file) or wholly not need no
        // mincore ([`Probe`]).
        let mut window = None;
        let mut whole = true;
        for from in (0..len).step_by(PROBE as usize) {
            let part = (len - from).min(PROBE);
            let part_pages = part.div_ceil(page);
            let first = (from / page) as usize;
            let vec = &mut residency[first..first + part_pages as usize];
            match Probe::of(fd, at + from, part) {
                Probe::Whole => {
                    vec.fill(1);
                    continue;
                }
                Probe::Nothing => {}
                Probe::Ask => {
                    let window = match &mut window {
                        Some(window) => window,
                        None => window.insert(linux::FileWindow::map(fd, at, len as usize)?),
                    };
                    window.mincore(from as usize, part as usize, vec)?;
                }
            }
            whole = false;
        }
        let cached = residency.iter().filter(|&&flags| flags & 1 == 1).count();
        if cached > 0 {
            // A small file wholly cached is mapped in the same call.
            let populated = window.is_none() && whole && len <= POPULATE_AT_MAP;
            let window = match window {
                Some(window) => window,
                None if populated => linux::FileWindow::map_populated(fd, at, len as usize)?,
                None => linux::FileWindow::map(fd, at, len as usize)?,
            };
            count_window(
                &window,
                &residency,
                frames,
                populated,
                &mut sparse,
                &mut cache,
                &mut raw,
            )?;
        }
        at += len;
    }
    Ok(cache)
}

/// The most bytes of one file numalab walks a window at a time where the
/// kernel has no `cachestat(2)`: 64 TiB, a few seconds (16 TiB took 1.5 s
/// on the development VM).
pub const MAX_WALKED: u64 = 64 << 40;

/// The start of the first window from `at` (`at`, or `at` plus a multiple
/// of [`WINDOW`]) before `end` with anything cached (or evicted), by
/// `cachestat(2)`; `None` when nothing from `at` on is. The next window
/// is asked first, so a file cached throughout costs one probe a window;
/// past an uncached one, the rest is halved until the cached part is
/// found, so a sparse file of exabytes costs a few dozen probes.
fn next_cached_window(fd: std::os::fd::BorrowedFd<'_>, at: u64, end: u64) -> Option<u64> {
    let empty = |from: u64, to: u64| Probe::of(fd, from, to - from) == Probe::Nothing;
    let first = at.saturating_add(WINDOW).min(end);
    if !empty(at, first) {
        return Some(at);
    }
    if first >= end || empty(first, end) {
        return None;
    }
    // Something is cached in [low, high); nothing before low.
    let (mut low, mut high) = (first, end);
    while high - low > WINDOW {
        let windows = (high - low).div_ceil(WINDOW);
        let middle = low + windows / 2 * WINDOW;
        if empty(low, middle) {
            low = middle;
        } else {
            high = middle;
        }
    }
    Some(low)
}

/// What `cachestat(2)` (Linux 6.5) says of part of a file, counting it a
/// folio at a time where `mincore(2)` looks at every page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// Every page is cached.
    Whole,
    /// No page is cached, and none was evicted: a tmpfs page in the swap
    /// cache is resident to `mincore` but evicted to `cachestat`, so a
    /// part with evicted entries is not this.
    Nothing,
    /// Ask `mincore` (part cached, or no `cachestat`).
    Ask,
}

impl Probe {
    /// `len` bytes of `fd` from `offset`.
    fn of(fd: std::os::fd::BorrowedFd<'_>, offset: u64, len: u64) -> Probe {
        let pages = len.div_ceil(linux::page_size() as u64);
        match linux::cache_stat_range(fd, offset, len) {
            Ok(stat) if stat.cached == pages => Probe::Whole,
            Ok(stat) if stat.cached == 0 && stat.evicted == 0 => Probe::Nothing,
            _ => Probe::Ask,
        }
    }
}

/// Asks `move_pages(2)` where the pages at `addresses` are, and adds them
/// to `cache` (those it cannot place as unknown).
fn locate_into(addresses: &[*const u8], cache: &mut FileCache) -> Result<(), PageCacheError> {
    let found = locate_pages(addresses).map_err(PageCacheError::Locate)?;
    for (node, pages) in found.per_node {
        *cache.per_node.entry(node).or_default() += pages;
    }
    cache.unknown += found.unknown + found.not_present;
    Ok(())
}

/// Counts the cached pages of `window` (`residency`: a byte per page,
/// bit 0 set where cached) and their nodes into `cache`: each run of
/// cached pages mapped ([`Frames::map_and_count`]; `populated` when the
/// whole window already is) and its nodes read from the page frames, or
/// asked of `move_pages(2)` without them.
fn count_window(
    window: &linux::FileWindow,
    residency: &[u8],
    frames: Option<&Frames>,
    populated: bool,
    sparse: &mut bool,
    cache: &mut FileCache,
    raw: &mut Vec<u8>,
) -> Result<(), PageCacheError> {
    let page = linux::page_size();
    let mut addresses = Vec::new();
    let mut run = None;
    for (i, &flags) in residency.iter().chain(std::iter::once(&0)).enumerate() {
        match (flags & 1 == 1, run) {
            (true, None) => run = Some(i),
            (false, Some(start)) => {
                run = None;
                cache.cached += (i - start) as u64;
                let counted = match frames {
                    Some(frames) if populated => frames.count(window, start, i, cache, raw),
                    Some(frames) => frames.map_and_count(window, start, i, sparse, cache, raw),
                    None => {
                        // A run the kernel will not map (the file shrank
                        // meanwhile) keeps its pages unknown below.
                        let from = start * page;
                        let to = (i * page).min(window.len());
                        let _ = window.populate(from, to - from);
                        false
                    }
                };
                if !counted {
                    addresses.extend((start..i).map(|p| window.at(p * page)));
                }
            }
            _ => {}
        }
    }
    if !addresses.is_empty() {
        locate_into(&addresses, cache)?;
    }
    Ok(())
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
    /// hot-plugged later has no known node, nor a frame of a block shared
    /// by two nodes that their zones' spans do not tell: such pages are
    /// asked of `move_pages(2)`.
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

    /// Maps pages `first..end` of `window` (all cached, says `mincore`)
    /// and counts their nodes into `cache`; `false` (nothing counted)
    /// when the frames cannot say, so the caller asks `move_pages(2)`.
    ///
    /// `MADV_POPULATE_READ` over a run walks it a page at a time (a
    /// reference taken and dropped on each, and each marked accessed);
    /// the fault it takes on a block's first page already maps the
    /// block's other cached pages (fault-around), so while `sparse` only
    /// one page per block is populated. Should a block's cached pages
    /// not all be mapped that way, `sparse` is cleared and whole runs are
    /// populated from then on. A run the kernel will not map (the file
    /// shrank meanwhile) keeps its pages unknown.
    fn map_and_count(
        &self,
        window: &linux::FileWindow,
        first: usize,
        end: usize,
        sparse: &mut bool,
        cache: &mut FileCache,
        raw: &mut Vec<u8>,
    ) -> bool {
        let page = linux::page_size();
        let from = first * page;
        let to = (end * page).min(window.len());
        let start = window.at(from) as usize;
        if *sparse {
            let per_fault = (FAULT_AROUND / page).max(1);
            let mut p = first;
            while p < end {
                let at = p * page;
                let _ = window.populate(at, page.min(window.len() - at));
                let block = window.at(at) as usize / page;
                p += per_fault - block % per_fault;
            }
            match self.nodes(start, end - first, page, raw) {
                Some(run) if run.not_present == 0 => return run.add_to(cache),
                Some(_) => *sparse = false,
                None => {}
            }
        }
        let _ = window.populate(from, to - from);
        self.nodes(start, end - first, page, raw)
            .is_some_and(|run| run.add_to(cache))
    }

    /// Counts the nodes of pages `first..end` of `window`, already
    /// mapped, into `cache`; `false` when the frames cannot say.
    fn count(
        &self,
        window: &linux::FileWindow,
        first: usize,
        end: usize,
        cache: &mut FileCache,
        raw: &mut Vec<u8>,
    ) -> bool {
        let page = linux::page_size();
        self.nodes(window.at(first * page) as usize, end - first, page, raw)
            .is_some_and(|run| run.add_to(cache))
    }

    /// The nodes of `pages` mapped pages from `start`; `None` when some
    /// present page shows no frame number or a frame in no known block.
    fn nodes(
        &self,
        start: usize,
        pages: usize,
        page: usize,
        raw: &mut Vec<u8>,
    ) -> Option<RunNodes> {
        procfs::pagemap_run(&self.pagemap, start, pages, page, raw).ok()?;
        self.nodes_of(raw, page)
    }

    /// The nodes of the pages whose pagemap entries `raw` holds.
    fn nodes_of(&self, raw: &[u8], page: usize) -> Option<RunNodes> {
        let mut run = RunNodes::default();
        let mut last: Option<(u64, u32)> = None;
        for entry in procfs::PagemapEntry::parse(raw) {
            if !entry.present {
                run.not_present += 1;
                continue;
            }
            if entry.pfn == 0 {
                return None;
            }
            // Runs of pages mostly sit in one block: look it up once (a
            // block shared by two nodes, frame by frame).
            let block = self.blocks.block_of(entry.pfn, page as u64);
            let node = match last {
                Some((b, node)) if b == block => node,
                _ => match self.blocks.nodes.get(&block) {
                    Some(&node) => {
                        last = Some((block, node));
                        node
                    }
                    None => self.blocks.node_by_span(entry.pfn)?,
                },
            };
            *run.per_node.entry(node).or_default() += 1;
        }
        Some(run)
    }
}

/// Where a run of mapped pages is: pages per node, and how many were not
/// mapped (evicted before they were, or never mapped).
#[derive(Default)]
struct RunNodes {
    per_node: BTreeMap<u32, u64>,
    not_present: u64,
}

impl RunNodes {
    /// Adds the run to `cache`, pages not mapped as unknown; `true`.
    fn add_to(self, cache: &mut FileCache) -> bool {
        for (node, n) in self.per_node {
            *cache.per_node.entry(node).or_default() += n;
        }
        cache.unknown += self.not_present;
        true
    }
}

/// Bytes of a file asked of `cachestat(2)` at once: wholly cached, they
/// need no `mincore(2)`.
const PROBE: u64 = 64 << 20;

/// The largest wholly cached window mapped with `MAP_POPULATE` (one
/// call for a small file; a larger one is mapped a fault-around block at
/// a time, which walks fewer pages).
const POPULATE_AT_MAP: u64 = 64 << 10;

/// Bytes the kernel maps around a page fault on a cached file
/// (`fault_around_bytes` in debugfs, 64 KiB unless changed), aligned.
const FAULT_AROUND: usize = 64 << 10;

/// Whether `file` lives in memory (tmpfs, shared memory, ramfs,
/// hugetlbfs): its pages are the file itself, not a cache, so
/// [`drop_cache`] cannot evict them.
///
/// ```
/// use numalab::pagecache::in_memory;
/// let shm = numalab::files::scratch_file("/dev/shm".as_ref())?;
/// assert!(in_memory(&shm), "/dev/shm is tmpfs");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn in_memory(file: &File) -> bool {
    linux::in_memory_file_system(file.as_fd())
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
    load_on_until(file, node, &std::sync::atomic::AtomicBool::new(false))
}

/// [`load_on`], ending at the next MiB once `stop` is set (Ctrl-C): the
/// bytes read so far.
///
/// ```
/// use numalab::pagecache::load_on_until;
/// use std::sync::atomic::AtomicBool;
/// let file = std::fs::File::open("/proc/self/exe")?;
/// assert_eq!(load_on_until(&file, 0, &AtomicBool::new(true))?, 0, "stopped before the first MiB");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn load_on_until(
    file: &File,
    node: u32,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<u64, PageCacheError> {
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::Ordering;
    let stat = regular(file)?;
    on_node(node, || {
        let mut buffer = vec![0u8; 1 << 20];
        let mut offset = 0u64;
        // The size it had: a file that keeps growing is read as far as
        // it was.
        while offset < stat.size && !stop.load(Ordering::Relaxed) {
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
    fill_on_until(file, size, node, &std::sync::atomic::AtomicBool::new(false))
}

/// [`fill_on`], ending at the next MiB once `stop` is set (Ctrl-C): the
/// file then holds less than `size`.
pub fn fill_on_until(
    file: &File,
    size: u64,
    node: u32,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<(), PageCacheError> {
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::Ordering;
    regular(file)?;
    on_node(node, || {
        let mut block = vec![0u8; 1 << 20];
        for (i, byte) in block.iter_mut().enumerate() {
            *byte = (i % 251) as u8 + 1;
        }
        let mut offset = 0u64;
        while offset < size && !stop.load(Ordering::Relaxed) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn an_exabyte_sparse_file_is_walked_by_what_is_cached_not_by_its_length() {
        let file = File::from(linux::memfd("numalab-sparse").unwrap());
        if linux::cache_stat_range(file.as_fd(), 0, 0).is_err() {
            // The walk is bounded by MAX_WALKED there instead.
            file.set_len(MAX_WALKED + WINDOW).unwrap();
            let err = file_cache(&file).unwrap_err();
            assert!(matches!(err, PageCacheError::TooLong { .. }), "{err}");
            eprintln!("no cachestat(2) here (Linux 6.5): checked the bound instead");
            return;
        }
        // 4 EiB long (a user can make one in /dev/shm), two pages written.
        file.set_len(1 << 62).unwrap();
        let (first, second) = (1u64 << 40, (1u64 << 61) + 12345);
        file.write_all_at(b"x", first).unwrap();
        file.write_all_at(b"y", second).unwrap();
        let fd = file.as_fd();
        let window_of = |at: u64| at / WINDOW * WINDOW;
        let found = next_cached_window(fd, 0, 1 << 62);
        assert_eq!(found, Some(window_of(first)));
        let found = next_cached_window(fd, window_of(first) + WINDOW, 1 << 62);
        assert_eq!(found, Some(window_of(second)));
        assert_eq!(
            next_cached_window(fd, window_of(second) + WINDOW, 1 << 62),
            None
        );
        let cache = file_cache(&file).unwrap();
        assert_eq!(
            (cache.cached, cache.pages),
            (2, (1u64 << 62) / linux::page_size() as u64)
        );
    }

    #[test]
    fn a_file_truncated_while_counted_is_counted_at_its_new_size() {
        let file = File::from(linux::memfd("numalab-shrinking").unwrap());
        let page = linux::page_size() as u64;
        file.write_all_at(&vec![1u8; 64 << 20], 0).unwrap();
        // Counted as it was when another process truncates it mid-count:
        // the pages past its new end are counted but are no one's.
        let stale = |file: &File, size: u64| {
            file.set_len(page).unwrap();
            cache_of(file, size, 0, size)
        };
        let what_was_said = stale(&file, 64 << 20).unwrap();
        assert_eq!(
            what_was_said.size,
            64 << 20,
            "a size the file no longer has"
        );
        file.write_all_at(&vec![1u8; 64 << 20], 0).unwrap();
        let mut first = true;
        let cache = settled(&file, |size| {
            if std::mem::take(&mut first) {
                stale(&file, size)
            } else {
                cache_of(&file, size, 0, size)
            }
        })
        .unwrap();
        assert_eq!((cache.size, cache.pages, cache.cached), (page, 1, 1));
        assert_eq!(cache.unknown, 0);
        // Truncated again at every count: said, not counted forever.
        let err = settled(&file, |size| {
            file.set_len(size - 1).unwrap();
            Ok(FileCache::default())
        })
        .unwrap_err();
        assert!(matches!(err, PageCacheError::Shrinking { .. }), "{err}");
    }
}
