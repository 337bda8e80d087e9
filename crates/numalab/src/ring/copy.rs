//! The copies of [`Writer::write`](super::Writer::write) and
//! [`Reader::read`](super::Reader::read): through the caches with the
//! system's `memcpy`, or with streaming (non-temporal) stores for large
//! blocks, as [`CopyStores::Auto`] decides for the machine it runs on.
//!
//! A cached store first reads its line for ownership; when the memory
//! written is far larger than the caches that read is pure cost, and the
//! line then pushes something useful out of the cache. Streaming stores
//! write whole lines to memory without reading them. Which is faster
//! depends on the CPU, not only on the size, measured with the ring
//! benchmark (writer and reader on the two CPUs of a VM):
//!
//! | machine | block | cached stores | streaming stores |
//! |---|---|---|---|
//! | Xeon, AVX-512, one core writing only | 4 MiB (32 MiB area, in the cache) | 27 GB/s | 22 GB/s |
//! | Xeon, AVX-512, one core writing only | 64 MiB | 9.7 GB/s | 25 GB/s |
//! | EPYC, AVX2, 32 MiB L3 shared by writer and reader | 64 MiB | 4.05 GB/s | 1.39 GB/s |
//!
//! So `Auto` follows a rule made of what the machine is, and measures
//! what the rule cannot know ([`AutoStores`], [`auto_stores`]):
//!
//! 1. A copy smaller than half the last-level cache of the CPU that
//!    decides ([`streaming_threshold`]; sysfs, 8 MiB if sysfs has no
//!    cache description) is cached: its lines are still in a cache when
//!    the reader comes, from the shared last-level cache when writer and
//!    reader share one, by a cache-to-cache transfer when they do not;
//!    streaming would send them to memory for the reader to fetch back.
//! 2. From there the block has left the cache before it is read either
//!    way, and what is left is which stores move memory faster on this
//!    machine, with a writer and a reader both at work: that is measured
//!    once ([`Calibration`]). Two threads, on the CPU that decides and
//!    another it may use that shares its last-level cache (else any
//!    other), pass 32 blocks of half the cache (1 to 16 MiB) through a
//!    ring of 8, the writer copying in from a hot source, the reader out
//!    into its own buffer, with each kind of store (cached, and streaming
//!    in each [`StreamOrder`]): a pass of each to warm up, then three of
//!    each, interleaved, best of each; streaming is chosen only if its
//!    faster order is at least 10% faster, and streaming copies use that
//!    order. One core alone is not
//!    enough: on the EPYC VM it streamed 1.7× faster than it cached while
//!    a ring's two sides together were not faster streaming at all until
//!    the shifted loads below were mended. A process allowed one CPU only
//!    measures that core copying alone. The widest vectors the CPU has
//!    (AVX-512, AVX2, else SSE2) make the streaming copy; the cached one
//!    is glibc's `memcpy`, which picks `rep movsb` (`erms`, `fsrm`) or
//!    vectors by itself. The result is kept in
//!    `$XDG_CACHE_HOME/numalab/copy-stores.json` (or `~/.cache/…`) for the
//!    same CPU model, features, cache and kind of build (a debug build's
//!    streaming copy is unoptimised), so only the first ring with large
//!    blocks on a machine pays the fraction of a second; a measurement
//!    of one core is replaced by a writer and reader's as soon as a
//!    process that may use two CPUs decides (`numalab ring` does before
//!    it starts its pinned workers).
//! 3. `NUMALAB_COPY_STORES=cached` or `streaming` in the environment
//!    overrides both steps for every ring of the process;
//!    [`Writer::set_copy_stores`](super::Writer::set_copy_stores) and
//!    [`Reader::set_copy_stores`](super::Reader::set_copy_stores) for one.
//!
//! The streaming copy goes in one of two orders ([`StreamOrder`]). Four
//! pages at once, a line of each in turn: the hardware prefetchers follow
//! a stream only within a 4 KiB page, and four streams keep four of them
//! busy (one Xeon core copying memory to memory: 6.9 GB/s with `memcpy`,
//! 9.2 GB/s streaming one page at a time, 12 GB/s four pages at a time).
//! Or line after line, the source prefetched half a page ahead: on the
//! Zen 4 VM four pages at once was the slower one (one core memory to
//! memory 14–15 GB/s against 16–17.5; a ring of 256 MiB blocks between
//! two processes 15.3 against 19.1, medians of six), and the calibration
//! there measures the line order 1.1–1.4× faster. A source whose lines do
//! not fall on the destination's goes through a page-sized buffer in the
//! L1 cache in either order (see `stream_with`).

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// A copy routine: `(dst, src, len)`, unsafe as `copy`.
#[cfg(test)]
type Kernel = unsafe fn(*mut u8, *const u8, usize);

/// The last-level cache assumed where sysfs describes none: copies from
/// half of it may stream under [`CopyStores::Auto`].
pub const STREAMING_FROM: usize = 8 << 20;

/// How the ring's copies store the bytes they write: into the ring for
/// [`Writer::write`](super::Writer::write), into the caller's buffer for
/// [`Reader::read`](super::Reader::read). In-place access
/// ([`Writer::claim`](super::Writer::claim),
/// [`Reader::borrow`](super::Reader::borrow)) copies nothing.
///
/// ```
/// use numalab::ring::{streaming_threshold, CopyStores};
/// assert_eq!(CopyStores::default(), CopyStores::Auto);
/// // Below half the last-level cache, Auto never streams.
/// assert!(!CopyStores::Auto.streams(streaming_threshold() - 1));
/// assert!(CopyStores::Streaming.streams(4096));
/// assert_eq!("cached".parse::<CopyStores>()?, CopyStores::Cached);
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CopyStores {
    /// Cached stores below half the last-level cache
    /// ([`streaming_threshold`]); from there what [`auto_stores`]
    /// measured faster on this CPU (for the writer: by the ring's block
    /// size; for a reader: by the size of each copy).
    #[default]
    Auto,
    /// Always through the caches (the system's `memcpy`): for data read
    /// again soon by the core that copied it.
    Cached,
    /// Always streaming stores, straight to memory.
    Streaming,
}

impl CopyStores {
    /// Whether a copy of `len` bytes streams.
    pub fn streams(self, len: usize) -> bool {
        match self {
            CopyStores::Auto => {
                len >= streaming_threshold()
                    && auto_stores()
                        .streaming_from
                        .is_some_and(|from| len as u64 >= from)
            }
            CopyStores::Cached => false,
            CopyStores::Streaming => true,
        }
    }
}

impl std::fmt::Display for CopyStores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CopyStores::Auto => "auto",
            CopyStores::Cached => "cached",
            CopyStores::Streaming => "streaming",
        })
    }
}

impl std::str::FromStr for CopyStores {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(CopyStores::Auto),
            "cached" => Ok(CopyStores::Cached),
            "streaming" | "non-temporal" | "nt" => Ok(CopyStores::Streaming),
            other => Err(format!(
                "unknown copy stores {other:?}; expected auto, cached or streaming"
            )),
        }
    }
}

/// How [`CopyStores::Auto`] stores on this machine, and why.
///
/// ```
/// use numalab::ring::{auto_stores, streaming_threshold, AutoBasis};
/// let rule = auto_stores();
/// match rule.streaming_from {
///     Some(from) => println!("streaming from {from} bytes ({:?})", rule.basis),
///     None => println!("cached stores at every size ({:?})", rule.basis),
/// }
/// if rule.basis != AutoBasis::Environment {
///     // Decided by a measurement, now or kept from an earlier process.
///     assert!(rule.calibration.is_some());
///     assert!(rule.streaming_from.is_none_or(|f| f == streaming_threshold() as u64));
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AutoStores {
    /// The last-level cache of the CPU the rule was made on, bytes (0:
    /// sysfs describes none, [`STREAMING_FROM`] assumed).
    pub cache_bytes: u64,
    /// Copies of this many bytes or more stream; `None`: none do.
    pub streaming_from: Option<u64>,
    /// The order streaming copies store their lines in, whether `Auto`
    /// or [`CopyStores::Streaming`] chose streaming: the faster one in
    /// the measurement, [`StreamOrder::Pages`] without one.
    pub stream_order: StreamOrder,
    /// Where the choice above the cache came from.
    pub basis: AutoBasis,
    /// The measurement behind it, when one was made (now or before).
    pub calibration: Option<Calibration>,
}

/// Where [`AutoStores`] comes from.
///
/// ```
/// use numalab::ring::AutoBasis;
/// assert_eq!(serde_json::to_string(&AutoBasis::Remembered)?, "\"remembered\"");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AutoBasis {
    /// Measured by this process.
    Measured,
    /// Measured before on the same CPU model, features and cache, read
    /// back from the cache file.
    Remembered,
    /// `NUMALAB_COPY_STORES` set in the environment.
    Environment,
}

/// The order a streaming copy stores a block's lines in, where the
/// source's lines fall on the destination's (a source off them goes a
/// page at a time through a buffer in the L1 cache in either order).
/// Which is faster depends on how the CPU's prefetchers follow a stream,
/// so the calibration behind [`CopyStores::Auto`] measures both
/// ([`AutoStores::stream_order`]).
///
/// ```
/// use numalab::ring::StreamOrder;
/// assert_eq!(serde_json::to_string(&StreamOrder::Lines)?, "\"lines\"");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamOrder {
    /// Four pages side by side, a line of each in turn, so that four of
    /// the prefetchers' page-bound streams run at once. One Xeon core
    /// copying memory to memory: 12 GB/s, against 9.2 one page at a time
    /// without software prefetching.
    #[default]
    Pages,
    /// Line after line, the source prefetched half a page ahead. A Zen 4
    /// VM's ring (writer and reader processes, buffers on pages) moved
    /// 256 MiB blocks 1.25× faster this way, its reader copying out of
    /// memory.
    Lines,
}

/// The measurement behind [`AutoStores`]: the rate of a ring's copies
/// with each kind of store, where the copies leave the cache.
///
/// Where the process may run on two CPUs, two threads pass blocks
/// through a ring of 8 blocks of [`piece_bytes`](Self::piece_bytes) (at
/// least four times the last-level cache), a writer copying in from a
/// hot source and a reader copying out into its own buffer, both with the
/// kind of store measured, as a ring's writer and reader do: what a store
/// costs depends on the other side's traffic too (on the EPYC VM one
/// core alone streamed 1.7× faster than it cached, while the two sides
/// together moved 9% less with streaming). The two CPUs share the
/// last-level cache where the process may use two that do. Where it may
/// use one CPU only, that core copies into an area of that size alone.
///
/// ```
/// use numalab::ring::auto_stores;
/// if let Some(c) = &auto_stores().calibration {
///     println!(
///         "{}: streaming {:.0} MB/s, cached {:.0} MB/s on CPUs {:?}",
///         c.machine, c.streaming_mbps, c.cached_mbps, c.cpus
///     );
///     assert!((1..=2).contains(&c.cpus.len()));
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// The CPU model, its vector and string-copy features and its cache:
    /// what a remembered calibration must match.
    pub machine: String,
    /// The CPUs it ran on: writer and reader, or the one core.
    pub cpus: Vec<u32>,
    /// Whether the two CPUs share a last-level cache (false for one).
    pub shared_cache: bool,
    /// Bytes of each copy (a block).
    pub piece_bytes: u64,
    /// Bytes of the ring (or area) copied into.
    pub area_bytes: u64,
    /// MB/s with cached stores (`memcpy`).
    pub cached_mbps: f64,
    /// MB/s with streaming stores, four pages side by side
    /// ([`StreamOrder::Pages`]).
    pub streaming_mbps: f64,
    /// MB/s with streaming stores, line after line
    /// ([`StreamOrder::Lines`]); 0 in a file from before it was measured,
    /// which is then measured again.
    #[serde(default)]
    pub streaming_lines_mbps: f64,
}

impl Calibration {
    /// Whether it was measured with a writer and a reader (two CPUs).
    pub fn is_pipeline(&self) -> bool {
        self.cpus.len() == 2
    }

    /// Whether every kind of store was measured: a calibration kept by
    /// an older numalab (no figure for [`StreamOrder::Lines`]) is not,
    /// and is measured again.
    fn is_complete(&self) -> bool {
        self.cached_mbps > 0.0 && self.streaming_mbps > 0.0 && self.streaming_lines_mbps > 0.0
    }

    /// The faster order of streaming stores, and its MB/s.
    pub fn best_streaming(&self) -> (StreamOrder, f64) {
        if self.streaming_lines_mbps > self.streaming_mbps {
            (StreamOrder::Lines, self.streaming_lines_mbps)
        } else {
            (StreamOrder::Pages, self.streaming_mbps)
        }
    }
}

/// Streaming is chosen only when it is at least this much faster.
const STREAMING_MARGIN: f64 = 1.10;

/// Copies smaller than this never stream under [`CopyStores::Auto`]: half
/// the last-level cache of the CPU the process first asked on, at least
/// 1 MiB (half of [`STREAMING_FROM`] where sysfs describes no cache).
pub fn streaming_threshold() -> usize {
    static THRESHOLD: OnceLock<usize> = OnceLock::new();
    *THRESHOLD.get_or_init(|| (last_level_cache() as usize / 2).max(1 << 20))
}

fn last_level_cache() -> u64 {
    crate::sys::procfs::last_level_cache(crate::sys::linux::current_cpu())
        .map_or(STREAMING_FROM as u64, |c| c.bytes)
}

/// The rule [`CopyStores::Auto`] follows in this process: decided on
/// first use (from `NUMALAB_COPY_STORES`, the cache file, or a
/// measurement of a fraction of a second, [`Calibration`]), then fixed.
pub fn auto_stores() -> &'static AutoStores {
    static RULE: OnceLock<AutoStores> = OnceLock::new();
    RULE.get_or_init(|| {
        let cache = last_level_cache();
        let from = streaming_threshold() as u64;
        match std::env::var("NUMALAB_COPY_STORES").as_deref() {
            Ok("cached") => {
                return AutoStores {
                    cache_bytes: cache,
                    streaming_from: None,
                    stream_order: StreamOrder::default(),
                    basis: AutoBasis::Environment,
                    calibration: None,
                }
            }
            Ok("streaming") => {
                return AutoStores {
                    cache_bytes: cache,
                    streaming_from: Some(0),
                    stream_order: StreamOrder::default(),
                    basis: AutoBasis::Environment,
                    calibration: None,
                }
            }
            _ => {}
        }
        let machine = machine_key(cache);
        let pair = calibration_cpus();
        // A remembered one-core measurement is replaced by a writer and
        // reader's where this process may run both.
        let (calibration, basis) = match remembered(&machine) {
            Some(c) if c.is_pipeline() || pair.is_none() => (c, AutoBasis::Remembered),
            _ => {
                let c = calibrate(machine, cache, pair);
                remember(&c);
                (c, AutoBasis::Measured)
            }
        };
        let (stream_order, streaming_mbps) = calibration.best_streaming();
        AutoStores {
            cache_bytes: cache,
            streaming_from: (streaming_mbps >= STREAMING_MARGIN * calibration.cached_mbps)
                .then_some(from),
            stream_order,
            basis,
            calibration: Some(calibration),
        }
    })
}

/// "AMD EPYC; avx2 fma; LLC 8 MiB": what a calibration depends on.
fn machine_key(cache: u64) -> String {
    let cpuinfo = crate::files::read_input_limited(
        std::path::Path::new("/proc/cpuinfo"),
        4 << 20,
        "CPU description",
    )
    .map(|b| String::from_utf8_lossy(&b).into_owned())
    .unwrap_or_default();
    let field = |name: &str| {
        cpuinfo
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_once(':'))
            .map_or(String::new(), |(_, v)| v.trim().to_owned())
    };
    let flags = field("flags");
    let features: Vec<&str> = ["avx512f", "avx2", "sse2", "erms", "fsrm"]
        .into_iter()
        .filter(|f| flags.split_whitespace().any(|g| g == *f))
        .collect();
    // An unoptimised build's streaming copy is many times slower than
    // its `memcpy`: its measurement holds for its own kind of build only.
    let build = if cfg!(debug_assertions) {
        "; debug build"
    } else {
        ""
    };
    format!(
        "{}; {}; LLC {} KiB{build}",
        field("model name"),
        features.join(" "),
        cache >> 10
    )
}

fn cache_file() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("numalab").join("copy-stores.json"))
}

/// The most machines one cache file remembers (kinds of build count).
const REMEMBERED_MAX: usize = 8;

fn remembered_all() -> Vec<Calibration> {
    cache_file()
        .and_then(|path| crate::files::read_input_limited(&path, 64 << 10, "copy calibration").ok())
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

fn remembered(machine: &str) -> Option<Calibration> {
    remembered_all()
        .into_iter()
        .find(|c| c.machine == machine && c.is_complete())
}

/// Keeps a calibration for the next process, first among at most
/// [`REMEMBERED_MAX`]; a cache that cannot be written (read-only home, no
/// home) only costs the next process a measurement.
fn remember(c: &Calibration) {
    let Some(path) = cache_file() else { return };
    let mut all = remembered_all();
    all.retain(|old| old.machine != c.machine);
    all.insert(0, c.clone());
    all.truncate(REMEMBERED_MAX);
    if let Some(dir) = path.parent() {
        use std::os::unix::fs::DirBuilderExt;
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir);
    }
    if let Ok(json) = serde_json::to_vec_pretty(&all) {
        let _ = crate::files::write_output(&path, &json);
    }
}

/// Blocks in the calibration's ring.
const CALIBRATION_SLOTS: usize = 8;

/// The writer's and reader's CPUs for a calibration: the CPU this thread
/// runs on and another it may run on, sharing its last-level cache if one
/// does and not its core (an SMT sibling shares more than a ring's two
/// sides usually do); `None` where it may run on one CPU only.
fn calibration_cpus() -> Option<((u32, u32), bool)> {
    let allowed = crate::affinity::thread_cpus().ok()?;
    let here = crate::sys::linux::current_cpu();
    let first = if allowed.contains(here) {
        here
    } else {
        allowed.iter().next()?
    };
    let llc = crate::sys::procfs::last_level_cache(first).map(|c| c.shared_with);
    let siblings: crate::CpuSet = crate::sys::procfs::read_trimmed(format!(
        "/sys/devices/system/cpu/cpu{first}/topology/thread_siblings_list"
    ))
    .ok()
    .and_then(|l| l.parse().ok())
    .unwrap_or_else(|| crate::CpuSet::single(first));
    let others: Vec<u32> = allowed.iter().filter(|&c| c != first).collect();
    let shares = |c: u32| llc.as_ref().is_some_and(|l| l.contains(c));
    let pick = |prefer_shared: bool| {
        others
            .iter()
            .copied()
            .find(|&c| shares(c) == prefer_shared && !siblings.contains(c))
    };
    let second = pick(true)
        .or_else(|| pick(false))
        .or_else(|| others.first().copied())?;
    Some(((first, second), shares(second)))
}

/// Measures each kind of store (cached, and streaming in each
/// [`StreamOrder`]), a first pass of each to warm the memory, then three
/// of each, interleaved, the best of each kept: with a writer and a
/// reader on `pair` when there is one, else one core. Every buffer
/// starts on a page, so that each order is measured as itself (a source
/// whose lines do not fall on the destination's goes a page at a time
/// through the L1 cache in either order).
fn calibrate(machine: String, cache: u64, pair: Option<((u32, u32), bool)>) -> Calibration {
    let piece = (cache as usize / 2).clamp(1 << 20, 16 << 20);
    let area = piece * CALIBRATION_SLOTS;
    let mut source = Placed::new(piece.min(4 << 20), 1);
    let mut ring = Placed::new(area, 2);
    let mut out = Placed::new(if pair.is_some() { piece } else { 0 }, 3);
    let mut pass = |order: Option<StreamOrder>| match pair {
        Some((cpus, _)) => pipeline_pass(cpus, source.get(), ring.get(), out.get(), order),
        None => one_core_pass(source.get(), ring.get(), piece, order),
    };
    let kinds = [None, Some(StreamOrder::Pages), Some(StreamOrder::Lines)];
    let mut best = [0f64; 3];
    for kind in kinds {
        pass(kind);
    }
    for _ in 0..3 {
        for (kind, best) in kinds.into_iter().zip(&mut best) {
            *best = best.max(pass(kind));
        }
    }
    let (cpus, shared_cache) = match pair {
        Some(((w, r), shared)) => (vec![w, r], shared),
        None => (vec![crate::sys::linux::current_cpu()], false),
    };
    Calibration {
        machine,
        cpus,
        shared_cache,
        piece_bytes: piece as u64,
        area_bytes: area as u64,
        cached_mbps: best[0],
        streaming_mbps: best[1],
        streaming_lines_mbps: best[2],
    }
}

/// A buffer of a given length starting on a page, filled with one byte
/// (a `Vec` of that length from `malloc` starts 16 bytes past one).
struct Placed {
    bytes: Vec<u8>,
    start: usize,
    len: usize,
}

impl Placed {
    const PAGE: usize = 4096;

    fn new(len: usize, fill: u8) -> Placed {
        let bytes = vec![fill; len + Self::PAGE];
        let start = bytes.as_ptr().align_offset(Self::PAGE);
        Placed { bytes, start, len }
    }

    fn get(&mut self) -> &mut [u8] {
        &mut self.bytes[self.start..self.start + self.len]
    }
}

/// Copies the hot `source` into `dst` (a multiple of its length, or a
/// prefix of it), streaming in `order` or through the caches.
fn copy_in(dst: &mut [u8], source: &[u8], order: Option<StreamOrder>) {
    for part in dst.chunks_mut(source.len()) {
        // SAFETY: `part` is at most `source.len()` bytes; the two slices
        // are distinct borrows.
        unsafe { copy_in_order(part.as_mut_ptr(), source.as_ptr(), part.len(), order) };
    }
}

/// One core copies the source into `area` piece by piece: MB/s.
fn one_core_pass(source: &[u8], area: &mut [u8], piece: usize, order: Option<StreamOrder>) -> f64 {
    let start = Instant::now();
    for slot in area.chunks_mut(piece) {
        copy_in(slot, source, order);
    }
    std::hint::black_box(&mut *area);
    area.len() as f64 / start.elapsed().as_secs_f64().max(1e-9) / 1e6
}

/// A counter on its own cache line.
#[repr(align(128))]
struct Padded(std::sync::atomic::AtomicUsize);

/// A writer thread on `cpus.0` copies `source` into the blocks of `ring`
/// as they come free, a reader on `cpus.1` copies each out into `out`
/// (a block long) as it comes: four rings' worth of blocks, timed from
/// both threads ready to the reader's last block. MB/s.
fn pipeline_pass(
    cpus: (u32, u32),
    source: &[u8],
    ring: &mut [u8],
    out: &mut [u8],
    order: Option<StreamOrder>,
) -> f64 {
    use std::sync::atomic::Ordering::{Acquire, Release};
    use std::sync::Barrier;

    let piece = out.len();
    let blocks = 4 * CALIBRATION_SLOTS;
    let (written, read) = (Padded(Default::default()), Padded(Default::default()));
    let ready = Barrier::new(3);
    // The writer and reader touch disjoint blocks at any moment (the
    // counters say which); the pointer crosses to both threads.
    struct Ring(*mut u8);
    // SAFETY: see above; each block is used by one side at a time.
    unsafe impl Sync for Ring {}
    let base = Ring(ring.as_mut_ptr());
    let base = &base;
    let pin = |cpu| {
        // Unpinned, the measurement still holds, only noisier.
        let _ = crate::affinity::set_thread_cpus(&crate::CpuSet::single(cpu));
    };
    let start = std::thread::scope(|s| {
        s.spawn(|| {
            pin(cpus.0);
            ready.wait();
            for i in 0..blocks {
                while i - read.0.load(Acquire) >= CALIBRATION_SLOTS {
                    std::hint::spin_loop();
                }
                // SAFETY: block i % SLOTS lies inside `ring` and is free:
                // the reader has finished with it.
                let slot = unsafe {
                    std::slice::from_raw_parts_mut(base.0.add(i % CALIBRATION_SLOTS * piece), piece)
                };
                copy_in(slot, source, order);
                written.0.store(i + 1, Release);
            }
        });
        s.spawn(|| {
            pin(cpus.1);
            ready.wait();
            for i in 0..blocks {
                while written.0.load(Acquire) <= i {
                    std::hint::spin_loop();
                }
                // SAFETY: block i % SLOTS is written and not reused
                // before `read` says so; `out` is this thread's alone.
                unsafe {
                    copy_in_order(
                        out.as_mut_ptr(),
                        base.0.add(i % CALIBRATION_SLOTS * piece),
                        piece,
                        order,
                    )
                };
                read.0.store(i + 1, Release);
            }
        });
        ready.wait();
        Instant::now()
    });
    std::hint::black_box(&mut *out);
    (blocks * piece) as f64 / start.elapsed().as_secs_f64().max(1e-9) / 1e6
}

/// Copies `len` bytes from `src` to `dst`, with streaming stores if
/// `streaming`. A streaming copy ends with a store fence, so a release
/// store after it (publishing a block) orders the bytes before it.
///
/// # Safety
/// As [`std::ptr::copy_nonoverlapping`]: `src` valid for reads and `dst`
/// for writes of `len` bytes, the two not overlapping.
pub(crate) unsafe fn copy(dst: *mut u8, src: *const u8, len: usize, streaming: bool) {
    let order = streaming.then(|| auto_stores().stream_order);
    // SAFETY: passed on from the caller.
    unsafe { copy_in_order(dst, src, len, order) };
}

/// As [`copy`], streaming in `order` if one is given, else through the
/// caches: the calibration measures with it before [`auto_stores`] has
/// an order to give.
///
/// # Safety
/// As [`copy`].
unsafe fn copy_in_order(dst: *mut u8, src: *const u8, len: usize, order: Option<StreamOrder>) {
    #[cfg(target_arch = "x86_64")]
    if let Some(order) = order {
        // SAFETY: passed on from the caller.
        unsafe { x86::stream(dst, src, len, order) };
        return;
    }
    let _ = order;
    // SAFETY: passed on from the caller.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The streaming copy: the widest vectors the CPU has (AVX-512, AVX2,
    //! else SSE2, which every x86-64 CPU has), unaligned loads, aligned
    //! non-temporal stores, in either [`StreamOrder`].
    use std::arch::x86_64::*;
    use std::ptr::copy_nonoverlapping;

    #[cfg(test)]
    use super::Kernel;
    use super::StreamOrder;

    const LINE: usize = 64;
    const PAGE: usize = 4096;
    /// Pages copied side by side.
    const PAGES: usize = 4;
    /// How far ahead of its loads [`StreamOrder::Lines`] prefetches the
    /// source: 32 lines, half a page (on the Zen 4 VM a ring's reader
    /// streaming out of memory moved 18–21 GB/s with it, 16.4–17.6
    /// without, and 1 or 4 KiB ahead did no better).
    const AHEAD: usize = 2048;

    /// # Safety
    /// As [`super::copy`].
    pub(super) unsafe fn stream(dst: *mut u8, src: *const u8, len: usize, order: StreamOrder) {
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F; the rest is the caller's.
            unsafe { stream_avx512(dst, src, len, order) }
        } else if is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2; the rest is the caller's.
            unsafe { stream_avx2(dst, src, len, order) }
        } else {
            // SAFETY: SSE2 is part of x86-64; the rest is the caller's.
            unsafe { stream_sse2(dst, src, len, order) }
        }
    }

    /// # Safety
    /// The CPU has AVX-512F; otherwise as [`super::copy`].
    #[target_feature(enable = "avx512f")]
    unsafe fn stream_avx512(dst: *mut u8, src: *const u8, len: usize, order: StreamOrder) {
        // SAFETY: the caller's contract; `line` is called only for lines
        // inside both ranges, with `d` 64-byte aligned.
        unsafe {
            stream_with(dst, src, len, order, |d, s| {
                _mm512_stream_si512(d.cast(), _mm512_loadu_si512(s.cast()));
            })
        }
    }

    /// # Safety
    /// The CPU has AVX2; otherwise as [`super::copy`].
    #[target_feature(enable = "avx2")]
    unsafe fn stream_avx2(dst: *mut u8, src: *const u8, len: usize, order: StreamOrder) {
        // SAFETY: as in stream_avx512.
        unsafe {
            stream_with(dst, src, len, order, |d, s| {
                _mm256_stream_si256(d.cast(), _mm256_loadu_si256(s.cast()));
                _mm256_stream_si256(d.add(32).cast(), _mm256_loadu_si256(s.add(32).cast()));
            })
        }
    }

    /// # Safety
    /// As [`super::copy`].
    unsafe fn stream_sse2(dst: *mut u8, src: *const u8, len: usize, order: StreamOrder) {
        // SAFETY: as in stream_avx512.
        unsafe {
            stream_with(dst, src, len, order, |d, s| {
                for k in (0..LINE).step_by(16) {
                    _mm_stream_si128(d.add(k).cast(), _mm_loadu_si128(s.add(k).cast()));
                }
            })
        }
    }

    /// The copy's shape, for a `line` that copies one 64-byte line to an
    /// aligned destination with streaming stores: the bytes before `dst`'s
    /// first line boundary and after its last are copied with ordinary
    /// stores; the lines between in `order`; a store fence ends it.
    ///
    /// When the source's lines fall on the destination's, they go in
    /// `order`: four pages at a time, then one by one
    /// ([`StreamOrder::Pages`]), or line after line, the source
    /// prefetched [`AHEAD`] ([`StreamOrder::Lines`]).
    ///
    /// When the source's lines do not fall on the destination's (a
    /// caller's buffer off by 16 bytes, as `malloc` gives), every line
    /// stored would be loaded from two source lines, and loads that split
    /// lines, from memory, beside streaming stores, ran at half speed on
    /// the EPYC VM with AVX2 (4.5 against 9.5 GB/s in a two-process ring).
    /// Then the source goes through a page-sized buffer in the L1 cache
    /// instead: filled with whole aligned lines, stored from with the
    /// shifted loads that are cheap there, the next page prefetched
    /// meanwhile (8.0–8.4 GB/s; 6.1–6.7 without the prefetch), in
    /// either order: a page at a time is what the buffer holds.
    ///
    /// # Safety
    /// As [`super::copy`]; `line(d, s)` must be sound for any aligned
    /// line `d` of the destination and the matching `s`.
    #[inline(always)]
    unsafe fn stream_with(
        dst: *mut u8,
        src: *const u8,
        len: usize,
        order: StreamOrder,
        line: impl Fn(*mut u8, *const u8),
    ) {
        let head = dst.align_offset(LINE).min(len);
        let lines = (len - head) / LINE * LINE;
        // SAFETY: head <= len: inside both ranges.
        unsafe { copy_nonoverlapping(src, dst, head) };
        // SAFETY: every offset below is < lines, and head + lines <= len.
        let (d, s) = unsafe { (dst.add(head), src.add(head)) };
        if !(s as usize).is_multiple_of(LINE) {
            // SAFETY: passed on; d is line-aligned.
            unsafe { lines_bounced(d, s, lines, &line) };
        } else if order == StreamOrder::Lines {
            // SAFETY: passed on; d is line-aligned.
            unsafe { lines_in_turn(d, s, lines, &line) };
        } else {
            // SAFETY: passed on; d is line-aligned.
            unsafe { lines_aligned(d, s, lines, &line) };
        }
        // SAFETY: the bytes from head + lines to len, inside both ranges.
        unsafe { copy_nonoverlapping(s.add(lines), d.add(lines), len - head - lines) };
        // Streaming stores are weakly ordered: fence them before whatever
        // publishes them.
        // SAFETY: SSE is part of x86-64.
        unsafe { _mm_sfence() };
    }

    /// `lines` bytes (whole lines) from `s` to the line-aligned `d`, four
    /// pages side by side, then line by line.
    ///
    /// # Safety
    /// As [`stream_with`], for `lines` bytes.
    #[inline(always)]
    unsafe fn lines_aligned(
        d: *mut u8,
        s: *const u8,
        lines: usize,
        line: &impl Fn(*mut u8, *const u8),
    ) {
        let group = PAGE * PAGES;
        let mut done = 0;
        while done + group <= lines {
            for offset in (0..PAGE).step_by(LINE) {
                for page in 0..PAGES {
                    let at = done + page * PAGE + offset;
                    // SAFETY: at + LINE <= done + group <= lines; d + at is
                    // aligned since d is and at is a multiple of LINE.
                    unsafe { line(d.add(at), s.add(at)) };
                }
            }
            done += group;
        }
        while done < lines {
            // SAFETY: done + LINE <= lines, aligned as above.
            unsafe { line(d.add(done), s.add(done)) };
            done += LINE;
        }
    }

    /// `lines` bytes (whole lines) from the line-aligned `s` to the
    /// line-aligned `d`, one line after another, the source [`AHEAD`] of
    /// the loads prefetched.
    ///
    /// # Safety
    /// As [`stream_with`], for `lines` bytes.
    #[inline(always)]
    unsafe fn lines_in_turn(
        d: *mut u8,
        s: *const u8,
        lines: usize,
        line: &impl Fn(*mut u8, *const u8),
    ) {
        for at in (0..lines).step_by(LINE) {
            // SAFETY: at + LINE <= lines; d + at and s + at are aligned
            // since d and s are and at is a multiple of LINE. A prefetch
            // past the source's end reads nothing and cannot fault.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(s.wrapping_add(at + AHEAD).cast());
                line(d.add(at), s.add(at));
            }
        }
    }

    /// A page's worth of lines, line-aligned, on the stack (in L1).
    #[repr(C, align(64))]
    struct Bounce([u8; PAGE + LINE]);

    /// As [`lines_aligned`] for a source `mis` bytes past a line
    /// boundary: a page at a time, its bytes put at offset `mis` of the
    /// bounce buffer (the first and last partial source lines with
    /// ordinary copies, the whole lines between with aligned vector
    /// moves), then streamed out from there.
    ///
    /// # Safety
    /// As [`stream_with`], for `lines` bytes; `s` is not line-aligned.
    #[inline(always)]
    unsafe fn lines_bounced(
        d: *mut u8,
        s: *const u8,
        lines: usize,
        line: &impl Fn(*mut u8, *const u8),
    ) {
        let mis = s as usize % LINE;
        let mut bounce = Bounce([0; PAGE + LINE]);
        let b = bounce.0.as_mut_ptr();
        let mut done = 0;
        while done < lines {
            let len = (lines - done).min(PAGE);
            // SAFETY: every source byte read is in [s + done, s + done +
            // len), inside the source; every bounce byte written is in
            // [mis, mis + len), inside the buffer (mis < LINE, len <=
            // PAGE); the whole lines are aligned on both sides (s + done
            // + LINE - mis is a line boundary, b + LINE is one).
            unsafe {
                let front = LINE - mis;
                copy_nonoverlapping(s.add(done), b.add(mis), front);
                let whole = len / LINE - 1;
                for k in 0..whole {
                    let from = s.add(done + front + k * LINE);
                    let to = b.add(LINE + k * LINE);
                    let lo = _mm_load_si128(from.cast());
                    let m1 = _mm_load_si128(from.add(16).cast());
                    let m2 = _mm_load_si128(from.add(32).cast());
                    let hi = _mm_load_si128(from.add(48).cast());
                    _mm_store_si128(to.cast(), lo);
                    _mm_store_si128(to.add(16).cast(), m1);
                    _mm_store_si128(to.add(32).cast(), m2);
                    _mm_store_si128(to.add(48).cast(), hi);
                }
                copy_nonoverlapping(s.add(done + len - mis), b.add(len), mis);
                // While this page streams out, the next one is fetched:
                // otherwise loads and stores take turns, a page each.
                let next = done + len < lines;
                for at in (0..len).step_by(LINE) {
                    if next {
                        _mm_prefetch::<_MM_HINT_T0>(s.wrapping_add(done + PAGE + at).cast());
                    }
                    line(d.add(done + at), b.add(mis + at));
                }
            }
            done += len;
        }
    }

    #[cfg(test)]
    pub(super) fn kernels() -> Vec<(&'static str, Kernel)> {
        let mut kernels: Vec<(&str, Kernel)> = vec![
            ("sse2, pages", |d, s, n| {
                // SAFETY: SSE2 is part of x86-64; the rest is the caller's.
                unsafe { stream_sse2(d, s, n, StreamOrder::Pages) }
            }),
            ("sse2, lines", |d, s, n| {
                // SAFETY: as above.
                unsafe { stream_sse2(d, s, n, StreamOrder::Lines) }
            }),
        ];
        if is_x86_feature_detected!("avx2") {
            kernels.push(("avx2, pages", |d, s, n| {
                // SAFETY: the CPU has AVX2 (checked above); the rest is
                // the caller's.
                unsafe { stream_avx2(d, s, n, StreamOrder::Pages) }
            }));
            kernels.push(("avx2, lines", |d, s, n| {
                // SAFETY: as above.
                unsafe { stream_avx2(d, s, n, StreamOrder::Lines) }
            }));
        }
        if is_x86_feature_detected!("avx512f") {
            kernels.push(("avx512, pages", |d, s, n| {
                // SAFETY: the CPU has AVX-512F (checked above); the rest
                // is the caller's.
                unsafe { stream_avx512(d, s, n, StreamOrder::Pages) }
            }));
            kernels.push(("avx512, lines", |d, s, n| {
                // SAFETY: as above.
                unsafe { stream_avx512(d, s, n, StreamOrder::Lines) }
            }));
        }
        kernels
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies `len` bytes between offsets `from` and `to` of two buffers
    /// with `kernel`, and checks every byte of the destination: copied
    /// where it should be, untouched around it.
    fn check(name: &str, kernel: Kernel, from: usize, to: usize, len: usize) {
        let what = format!("{name}: {len} bytes from offset {from} to offset {to}");
        let src: Vec<u8> = (0..from + len).map(|i| (i * 7 + 3) as u8).collect();
        let mut dst = vec![0xeeu8; to + len + 100];
        // SAFETY: both ranges lie inside their vectors, which are distinct.
        unsafe { kernel(dst.as_mut_ptr().add(to), src.as_ptr().add(from), len) };
        assert!(dst[..to].iter().all(|&b| b == 0xee), "{what}: wrote before");
        assert!(dst[to..to + len] == src[from..], "{what}: wrong bytes");
        assert!(
            dst[to + len..].iter().all(|&b| b == 0xee),
            "{what}: wrote after"
        );
    }

    #[test]
    fn every_kernel_copies_every_length_and_alignment() {
        let mut kernels: Vec<(&str, Kernel)> = vec![("copy", |d, s, n| {
            // SAFETY: the caller's contract.
            unsafe { copy(d, s, n, true) }
        })];
        #[cfg(target_arch = "x86_64")]
        kernels.extend(x86::kernels());
        let lengths = [
            0,
            1,
            63,
            64,
            65,
            4095,
            4096,
            16384,
            16384 + 64,
            3 * 16384 + 4097,
            200_003,
        ];
        for (name, kernel) in kernels {
            for len in lengths {
                for (from, to) in [(0, 0), (1, 0), (0, 1), (13, 61), (64, 32), (4000, 96)] {
                    check(name, kernel, from, to, len);
                }
            }
        }
    }

    #[test]
    fn auto_streams_only_from_the_threshold_and_by_the_measurement() {
        let from = streaming_threshold();
        assert!(from >= 1 << 20);
        assert!(!CopyStores::Auto.streams(from - 1));
        let rule = auto_stores();
        eprintln!("Auto on this machine: from {from} bytes, {rule:?}");
        assert_eq!(
            CopyStores::Auto.streams(from),
            rule.streaming_from.is_some(),
            "{rule:?}"
        );
        if let Some(c) = &rule.calibration {
            assert!(
                c.cached_mbps > 0.0 && c.streaming_mbps > 0.0 && c.streaming_lines_mbps > 0.0,
                "{c:?}"
            );
            // A process that may use two CPUs measures (or keeps) a
            // writer and a reader's figures, on two distinct CPUs it may
            // use, never one core's.
            let allowed = crate::affinity::thread_cpus().unwrap();
            if allowed.iter().count() >= 2 {
                assert!(c.is_pipeline(), "{c:?}");
                assert_ne!(c.cpus[0], c.cpus[1], "{c:?}");
            }
            assert!(
                c.area_bytes >= CALIBRATION_SLOTS as u64 * c.piece_bytes,
                "{c:?}"
            );
            let faster = c.streaming_mbps.max(c.streaming_lines_mbps);
            assert_eq!(
                rule.streaming_from.is_some(),
                faster >= STREAMING_MARGIN * c.cached_mbps,
                "{c:?}"
            );
            // The order streaming copies use is the one measured faster.
            let lines = if rule.stream_order == StreamOrder::Lines {
                c.streaming_lines_mbps
            } else {
                c.streaming_mbps
            };
            assert_eq!(lines, faster, "{rule:?}");
        }
        assert!(!CopyStores::Cached.streams(usize::MAX));
        assert!(CopyStores::Streaming.streams(0));
        for stores in [CopyStores::Auto, CopyStores::Cached, CopyStores::Streaming] {
            assert_eq!(stores.to_string().parse::<CopyStores>(), Ok(stores));
        }
        assert!("fast"
            .parse::<CopyStores>()
            .unwrap_err()
            .contains("auto, cached or streaming"));
    }

    #[test]
    fn a_calibration_kept_before_the_orders_were_measured_is_measured_again() {
        let old = r#"{"machine": "AMD EPYC; avx2; LLC 8192 KiB", "cpus": [0, 1],
            "shared_cache": true, "piece_bytes": 4194304, "area_bytes": 33554432,
            "cached_mbps": 4050.0, "streaming_mbps": 8000.0}"#;
        let c: Calibration = serde_json::from_str(old).unwrap();
        assert_eq!(c.streaming_lines_mbps, 0.0);
        assert!(!c.is_complete());
        assert_eq!(c.best_streaming(), (StreamOrder::Pages, 8000.0));
        let new = Calibration {
            streaming_lines_mbps: 9000.0,
            ..c
        };
        assert!(new.is_complete());
        assert_eq!(new.best_streaming(), (StreamOrder::Lines, 9000.0));
    }

    #[test]
    fn cache_sizes_as_sysfs_writes_them() {
        use crate::sys::procfs::parse_cache_size;
        assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(parse_cache_size("8M"), Some(8 << 20));
        assert_eq!(parse_cache_size("1024"), Some(1024));
        assert_eq!(parse_cache_size("K"), None);
        assert_eq!(parse_cache_size("99999999999999999999G"), None);
    }
}
