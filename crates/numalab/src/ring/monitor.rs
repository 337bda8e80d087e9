//! Counters anyone can read without joining: bytes and blocks moved, each
//! reader's lag, how often each side waited; and the list of segments on
//! the machine, live or stale.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::error::RingError;
use super::layout::{LOCK_CREATOR, LOCK_READERS, LOCK_SPAN, LOCK_WRITER};
use super::protocol::{
    self, MODE_LAG, READER_ACTIVE, READER_JOINING, WRITER_ACTIVE, WRITER_FINISHED, WRITER_NONE,
};
use super::segment::{self, Segment, HUGETLB_DIR, PREFIX, SHM_DIR};
use crate::sys::linux::{self, SegmentOpen};

/// A ring's counters at one instant.
///
/// ```
/// use numalab::ring::{Ring, RingOptions};
/// # let name = format!("doc-stats-{}", std::process::id());
/// let ring = Ring::create(&RingOptions::new(&name, 4 * 4096, 4096).node(0))?;
/// let _reader = ring.reader()?;
/// let mut writer = ring.writer()?;
/// writer.write(&[0; 3 * 4096])?;
///
/// let stats = ring.stats();
/// assert_eq!((stats.blocks, stats.block_size), (4, 4096));
/// assert_eq!(stats.policy, "bind:0");
/// assert!(stats.creator_alive);
/// assert_eq!(stats.writer.blocks, 3);
/// assert_eq!(stats.readers.len(), 1);
/// assert_eq!(stats.readers[0].lag_blocks, 3); // it has read nothing yet
/// # Ok::<(), numalab::ring::RingError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RingStats {
    /// The ring's name.
    pub name: String,
    /// Bytes per block.
    pub block_size: u64,
    /// Blocks in the ring.
    pub blocks: u64,
    /// The memory policy the creator asked for.
    pub policy: String,
    /// Process that made the ring.
    pub creator_pid: u32,
    /// Whether that process still holds the ring.
    pub creator_alive: bool,
    /// The writer.
    pub writer: WriterStats,
    /// Readers in their slots (free slots are left out).
    pub readers: Vec<ReaderStats>,
}

/// The writer's side of [`RingStats`].
///
/// ```
/// use numalab::ring::{Ring, RingOptions};
/// # let name = format!("doc-writerstats-{}", std::process::id());
/// let ring = Ring::create(&RingOptions::new(&name, 4 * 4096, 4096))?;
/// assert_eq!(ring.stats().writer.state, "none");
/// let mut writer = ring.writer()?;
/// writer.write(&[0; 5000])?;
/// writer.finish()?; // publishes the last 904 bytes and ends the stream
/// let stats = ring.stats().writer;
/// assert_eq!(stats.state, "finished");
/// assert_eq!((stats.blocks, stats.bytes, stats.transfers), (2, 5000, 1));
/// assert_eq!(stats.pid, std::process::id());
/// assert_eq!(stats.waits, 0); // no reader held it back
/// # Ok::<(), numalab::ring::RingError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriterStats {
    /// `none` (never attached), `active`, `finished`, or `dead` (attached
    /// and gone without finishing).
    pub state: String,
    /// Its process id as recorded.
    pub pid: u32,
    /// Blocks committed.
    pub blocks: u64,
    /// Payload bytes committed.
    pub bytes: u64,
    /// Transfers begun.
    pub transfers: u64,
    /// Times it found the ring full.
    pub waits: u64,
    /// Times it slept on the futex.
    pub sleeps: u64,
    /// Dead readers it dropped.
    pub dropped_readers: u64,
}

/// One reader's side of [`RingStats`].
///
/// ```
/// use numalab::ring::{Backpressure, Ring, RingOptions};
/// # let name = format!("doc-readerstats-{}", std::process::id());
/// let ring = Ring::create(&RingOptions::new(&name, 4 * 4096, 4096))?;
/// let mut reader = ring.reader_with(Backpressure::Lag)?;
/// let mut writer = ring.writer()?;
/// writer.write(&[0; 2 * 4096])?;
/// let mut buf = vec![0; 4096];
/// assert_eq!(reader.read(&mut buf)?, 4096);
///
/// let stats = &ring.stats().readers[0];
/// assert_eq!((stats.slot, stats.state.as_str(), stats.mode.as_str()), (0, "active", "lag"));
/// assert_eq!((stats.blocks, stats.bytes), (1, 4096));
/// assert_eq!((stats.position, stats.lag_blocks), (1, 1));
/// # Ok::<(), numalab::ring::RingError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReaderStats {
    /// Slot index.
    pub slot: usize,
    /// `active`, `joining`, or `dead` (its lock is gone).
    pub state: String,
    /// `block` or `lag`.
    pub mode: String,
    /// Its process id as recorded.
    pub pid: u32,
    /// Next block it will read.
    pub position: u64,
    /// Blocks committed that it has not read yet.
    pub lag_blocks: u64,
    /// Blocks read.
    pub blocks: u64,
    /// Payload bytes read.
    pub bytes: u64,
    /// Blocks it missed because the writer lapped it (lag mode).
    pub skipped: u64,
    /// Times it found no data.
    pub waits: u64,
    /// Times it slept on the futex.
    pub sleeps: u64,
}

impl RingStats {
    /// Reads the counters; `fd` is any descriptor of the segment that is
    /// not the one holding a lock being asked about (locks of its own open
    /// file description are invisible to it).
    pub(crate) fn read(seg: &Segment, fd: &OwnedFd) -> RingStats {
        let locked = |byte: u64| linux::is_locked(fd, byte, 1).unwrap_or(false);
        let ctl = seg.writer();
        let written = ctl.write_seq.load(SeqCst);
        let writer_state = match ctl.state.load(SeqCst) {
            WRITER_NONE => "none",
            WRITER_FINISHED => "finished",
            WRITER_ACTIVE if locked(LOCK_WRITER) => "active",
            WRITER_ACTIVE => "dead",
            _ => "unknown",
        };
        let readers = seg
            .readers()
            .iter()
            .enumerate()
            .filter_map(|(slot, r)| {
                let status = protocol::status(r.state.load(SeqCst));
                let state = match status {
                    READER_ACTIVE | READER_JOINING if !locked(LOCK_READERS + slot as u64) => "dead",
                    READER_ACTIVE => "active",
                    READER_JOINING => "joining",
                    _ => return None,
                };
                let position = r.pos.load(SeqCst) >> 1;
                Some(ReaderStats {
                    slot,
                    state: state.into(),
                    mode: if r.mode.load(Relaxed) == MODE_LAG {
                        "lag"
                    } else {
                        "block"
                    }
                    .into(),
                    pid: r.pid.load(Relaxed),
                    position,
                    lag_blocks: written.saturating_sub(position),
                    blocks: r.blocks_read.load(Relaxed),
                    bytes: r.bytes_read.load(Relaxed),
                    skipped: r.skipped.load(Relaxed),
                    waits: r.waits.load(Relaxed),
                    sleeps: r.sleeps.load(Relaxed),
                })
            })
            .collect();
        RingStats {
            name: seg.name.clone(),
            block_size: seg.geometry.block_size,
            blocks: seg.geometry.blocks,
            policy: seg.info.policy.clone(),
            creator_pid: seg.info.creator_pid,
            creator_alive: locked(LOCK_CREATOR),
            writer: WriterStats {
                state: writer_state.into(),
                pid: ctl.pid.load(Relaxed),
                blocks: written,
                bytes: ctl.bytes_written.load(Relaxed),
                transfers: ctl.transfers.load(Relaxed),
                waits: ctl.waits.load(Relaxed),
                sleeps: ctl.sleeps.load(Relaxed),
                dropped_readers: ctl.dropped_readers.load(Relaxed),
            },
            readers,
        }
    }
}

/// Reads a ring's counters from outside: it maps the segment read-only and
/// never joins, so it cannot slow the writer down or be waited for.
///
/// ```
/// use numalab::ring::{Ring, RingMonitor, RingOptions};
/// # let name = format!("doc-monitor-{}", std::process::id());
/// // Another program made the ring and writes to it ...
/// let ring = Ring::create(&RingOptions::new(&name, 4 * 4096, 4096))?;
/// let _reader = ring.reader()?;
/// let mut writer = ring.writer()?;
/// writer.write(&[0; 2 * 4096])?;
///
/// // ... and the monitor watches.
/// let monitor = RingMonitor::open(&name)?;
/// let stats = monitor.stats();
/// for reader in &stats.readers {
///     println!("reader {} is {} blocks behind", reader.slot, reader.lag_blocks);
/// }
/// assert_eq!(stats.readers[0].lag_blocks, 2);
/// assert_eq!(stats.writer.state, "active");
/// # Ok::<(), numalab::ring::RingError>(())
/// ```
#[derive(Debug)]
pub struct RingMonitor {
    seg: Arc<Segment>,
}

impl RingMonitor {
    /// Maps the ring `name` read-only after validating its header.
    ///
    /// This is safe where [`Ring::open`](super::Ring::open) is not: the
    /// monitor only performs atomic loads of counters and treats what it
    /// reads as untrusted numbers (never as sizes or indices), so a
    /// misbehaving process can make it print nonsense but not misbehave.
    pub fn open(name: &str) -> Result<RingMonitor, RingError> {
        Ok(RingMonitor {
            seg: Arc::new(Segment::open(name, true)?),
        })
    }

    /// The counters now.
    pub fn stats(&self) -> RingStats {
        RingStats::read(&self.seg, &self.seg.fd)
    }
}

/// A segment file found by [`list`].
///
/// ```
/// use numalab::ring::{self, Ring, RingOptions};
/// # let name = format!("doc-entry-{}", std::process::id());
/// let mut ring = Ring::create(&RingOptions::new(&name, 4 * 4096, 4096))?;
/// let find = || ring::list().into_iter().find(|entry| entry.name == name);
/// let entry = find().expect("the ring is listed");
/// assert!(!entry.is_stale()); // its creator holds it
/// assert_eq!(entry.stats.map(|stats| stats.blocks), Some(4));
///
/// ring.keep();
/// drop(ring); // its name stays, and nothing holds it any more
/// let entry = find().expect("the ring is still listed");
/// assert!(entry.is_stale() && entry.problem.is_none());
/// assert_eq!(ring::remove(&name, false)?, [entry.path]);
/// # Ok::<(), numalab::ring::RingError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SegmentEntry {
    /// The ring's name (for a temporary file, the name it was being made
    /// under).
    pub name: String,
    /// The file.
    pub path: PathBuf,
    /// Bytes.
    pub size: u64,
    /// Whether a live process holds it (creator, writer or reader).
    pub in_use: bool,
    /// A temporary file left by a creator that died before naming it.
    pub temporary: bool,
    /// Its counters, when its header is valid.
    pub stats: Option<RingStats>,
    /// Why its header is not valid, if it is not.
    pub problem: Option<String>,
}

impl SegmentEntry {
    /// Whether nothing holds it: left behind by processes that are gone.
    pub fn is_stale(&self) -> bool {
        !self.in_use
    }
}

/// Whether a live process holds the segment at `path`.
fn in_use(path: &std::path::Path) -> Result<bool, RingError> {
    let fd = linux::open_segment(path, SegmentOpen::ReadOnly)
        .map_err(RingError::os(format!("open {}", path.display())))?;
    linux::is_locked(&fd, 0, LOCK_SPAN).map_err(RingError::os(format!(
        "check the locks of {}",
        path.display()
    )))
}

/// Every numalab ring segment on this machine (in `/dev/shm` and
/// `/dev/hugepages`), live or stale.
pub fn list() -> Vec<SegmentEntry> {
    let mut found = Vec::new();
    for dir in [SHM_DIR, HUGETLB_DIR] {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let file_name = entry.file_name().to_string_lossy().into_owned();
            let (name, temporary) = if let Some(name) = file_name.strip_prefix(PREFIX) {
                (name.to_owned(), false)
            } else if let Some(rest) = file_name
                .strip_prefix('.')
                .and_then(|n| n.strip_prefix(PREFIX))
                .and_then(|n| n.strip_suffix(".tmp"))
            {
                (rest.to_owned(), true)
            } else {
                continue;
            };
            let path = entry.path();
            let size = entry.metadata().map_or(0, |m| m.len());
            let in_use = in_use(&path).unwrap_or(true);
            let (stats, problem) = if temporary {
                (
                    None,
                    Some("temporary file of an unfinished creation".to_owned()),
                )
            } else {
                match RingMonitor::open(&name) {
                    Ok(monitor) => (Some(monitor.stats()), None),
                    Err(err) => (None, Some(err.to_string())),
                }
            };
            found.push(SegmentEntry {
                name,
                path,
                size,
                in_use,
                temporary,
                stats,
                problem,
            });
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

/// Removes the segment of ring `name` (and any temporary file of an
/// unfinished creation under that name). Refuses while a live process
/// holds it, unless `force`: processes that have it mapped keep their
/// mapping either way.
pub fn remove(name: &str, force: bool) -> Result<Vec<PathBuf>, RingError> {
    segment::check_name(name)?;
    let mut removed = Vec::new();
    for entry in list().into_iter().filter(|e| e.name == name) {
        if entry.in_use && !force {
            let holders = entry
                .stats
                .as_ref()
                .map(|s| {
                    let mut pids = vec![format!("creator {}", s.creator_pid)];
                    if s.writer.state == "active" {
                        pids.push(format!("writer {}", s.writer.pid));
                    }
                    pids.extend(
                        s.readers
                            .iter()
                            .filter(|r| r.state != "dead")
                            .map(|r| format!("reader {}", r.pid)),
                    );
                    pids.join(", ")
                })
                .unwrap_or_default();
            return Err(RingError::Os {
                what: format!(
                    "remove {}: a live process holds it ({holders}); stop it first, or use --force",
                    entry.path.display()
                ),
                source: std::io::Error::from_raw_os_error(libc::EBUSY),
            });
        }
        linux::unlink(&entry.path)
            .map_err(RingError::os(format!("remove {}", entry.path.display())))?;
        removed.push(entry.path);
    }
    if removed.is_empty() {
        return Err(RingError::NotFound {
            name: name.to_owned(),
            path: segment::path_in(SHM_DIR, name),
        });
    }
    Ok(removed)
}
