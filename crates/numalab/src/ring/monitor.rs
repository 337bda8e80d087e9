//! Counters anyone can read without joining: bytes and blocks moved, each
//! reader's lag, how often each side waited; and the list of segments on
//! the machine, live or stale.

use std::fs::Metadata;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::error::RingError;
use super::layout::{
    decode_header, HeaderInfo, LOCK_CREATOR, LOCK_READERS, LOCK_SPAN, LOCK_WRITER,
};
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

/// A file found under a segment's name, looked at without trusting it:
/// opened non-blocking and without following links, its kind and owner
/// taken from the descriptor, its header read and validated before any
/// byte is mapped.
struct Inspection {
    name: String,
    path: PathBuf,
    temporary: bool,
    size: u64,
    /// Owner, when it could be seen.
    uid: Option<u32>,
    /// The file's identity (device, inode), when it was opened.
    id: Option<(u64, u64)>,
    /// A regular file numalab could open: whether a live process holds it,
    /// and whether its creator is one of them.
    locks: Option<Locks>,
    /// What the header says, or why it is not a header.
    header: Result<HeaderInfo, RingError>,
}

#[derive(Debug, Clone, Copy)]
struct Locks {
    in_use: bool,
    creator_alive: bool,
}

impl Inspection {
    /// Looks at the file at `path`; `file_type` is what the directory
    /// entry says (not following links).
    fn of(name: String, path: PathBuf, temporary: bool, lstat: Option<Metadata>) -> Inspection {
        let mut inspection = Inspection {
            name,
            path,
            temporary,
            size: lstat.as_ref().map_or(0, Metadata::len),
            uid: lstat.as_ref().map(MetadataExt::uid),
            id: None,
            locks: None,
            header: Err(RingError::Corrupt {
                reason: "not read".into(),
            }),
        };
        let not_a_segment = |path: &PathBuf, mode: u32| RingError::NotASegment {
            path: path.clone(),
            kind: crate::files::kind_of(mode),
        };
        // Anything but a regular file is never opened.
        if let Some(meta) = &lstat {
            if !meta.file_type().is_file() {
                inspection.header = Err(not_a_segment(&inspection.path, meta.mode()));
                return inspection;
            }
        }
        let fd = match linux::open_segment(&inspection.path, SegmentOpen::ReadOnly) {
            Ok(fd) => fd,
            Err(err) => {
                inspection.header = Err(match err.raw_os_error() {
                    Some(libc::ELOOP) => RingError::NotASegment {
                        path: inspection.path.clone(),
                        kind: "symbolic link",
                    },
                    Some(libc::EACCES) => RingError::NotOwned {
                        path: inspection.path.clone(),
                        reason: match inspection.uid {
                            Some(uid) => {
                                format!("it belongs to user {uid}, and this user may not read it")
                            }
                            None => "this user may not read it".into(),
                        },
                    },
                    _ => RingError::os(format!("open {}", inspection.path.display()))(err),
                });
                return inspection;
            }
        };
        let st = match linux::stat_fd(&fd) {
            Ok(st) => st,
            Err(err) => {
                inspection.header =
                    Err(RingError::os(format!("stat {}", inspection.path.display()))(err));
                return inspection;
            }
        };
        inspection.size = st.size;
        inspection.uid = Some(st.uid);
        inspection.id = Some(st.id);
        // Replaced by something else since the directory was read.
        if !st.regular {
            inspection.header = Err(not_a_segment(&inspection.path, st.mode));
            return inspection;
        }
        let locked = |start, len| linux::is_locked(&fd, start, len).unwrap_or(true);
        inspection.locks = Some(Locks {
            in_use: locked(0, LOCK_SPAN),
            creator_alive: locked(LOCK_CREATOR, 1),
        });
        inspection.header = segment::read_header(fd, &inspection.path, st.size)
            .and_then(|(_, bytes)| decode_header(&bytes, st.size, linux::page_size() as u64));
        inspection
    }

    /// Whether a live process holds it; a regular file that could not be
    /// looked at counts as held, and anything else (a FIFO) as not.
    fn in_use(&self) -> bool {
        match self.locks {
            Some(locks) => locks.in_use,
            None => !matches!(self.header, Err(RingError::NotASegment { .. })),
        }
    }

    /// Whether its content says it is a numalab segment: a valid header,
    /// a numalab header of another layout version (left by another
    /// numalab), or for the temporary file of a creation, a header not yet
    /// written (or an empty file: the creator died before sizing it).
    fn verified(&self) -> Result<(), String> {
        match &self.header {
            Ok(_) | Err(RingError::Version { .. }) => Ok(()),
            Err(RingError::Incomplete) if self.temporary => Ok(()),
            Err(RingError::Corrupt { .. }) if self.temporary && self.size == 0 => Ok(()),
            Err(RingError::NotASegment { kind, .. }) => Err(format!("not a ring segment: {kind}")),
            Err(err) => Err(format!(
                "numalab cannot verify that it is a ring segment ({err}); \
                 remove it by hand if you are sure"
            )),
        }
    }

    fn entry(&self) -> SegmentEntry {
        let (stats, problem) = if self.temporary {
            let problem = match self.verified() {
                Ok(()) => "temporary file of an unfinished creation".to_owned(),
                Err(why) => why,
            };
            (None, Some(problem))
        } else {
            match &self.header {
                Err(RingError::NotASegment { kind, .. }) => {
                    (None, Some(format!("not a ring segment: {kind}")))
                }
                Err(err) => match self.uid {
                    Some(uid) if uid != linux::effective_uid() => {
                        (None, Some(format!("it belongs to user {uid}: {err}")))
                    }
                    _ => (None, Some(err.to_string())),
                },
                Ok(_) => match Segment::open_path(&self.name, self.path.clone(), true) {
                    Ok(seg) => (Some(RingStats::read(&seg, &seg.fd)), None),
                    Err(err) => (None, Some(err.to_string())),
                },
            }
        };
        SegmentEntry {
            name: self.name.clone(),
            path: self.path.clone(),
            size: self.size,
            in_use: self.in_use(),
            temporary: self.temporary,
            stats,
            problem,
        }
    }

    /// Whether the file at its path is still the one looked at.
    fn still_there(&self) -> bool {
        let Ok(meta) = std::fs::symlink_metadata(&self.path) else {
            return false;
        };
        self.id == Some((meta.dev(), meta.ino()))
    }
}

/// Every file under a segment's name (or a temporary one's) in `/dev/shm`
/// and `/dev/hugepages`, looked at.
fn inspect_all(only: Option<&str>) -> Vec<Inspection> {
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
                // `.numalab-ring.NAME.PID.tmp`
                let name = rest.rsplit_once('.').map_or(rest, |(name, _pid)| name);
                (name.to_owned(), true)
            } else {
                continue;
            };
            if only.is_some_and(|only| only != name) {
                continue;
            }
            // DirEntry::metadata does not follow a link.
            found.push(Inspection::of(
                name,
                entry.path(),
                temporary,
                entry.metadata().ok(),
            ));
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.path.cmp(&b.path)));
    found
}

/// Every numalab ring segment on this machine (in `/dev/shm` and
/// `/dev/hugepages`), live or stale, and anything else found under a
/// segment's name, with its `problem` (`not a ring segment: FIFO`, another
/// user's file, a corrupt header). Every file is opened non-blocking and
/// without following links, and its header is validated before anything
/// is mapped: nothing found there can make it wait, fail or misread.
pub fn list() -> Vec<SegmentEntry> {
    inspect_all(None).iter().map(Inspection::entry).collect()
}

/// Removes the segment of ring `name` (and any temporary file of an
/// unfinished creation under that name). Refuses while a live process
/// holds it, unless `force`: processes that have it mapped keep their
/// mapping either way.
///
/// Only files verified to be numalab segments are removed: a regular file
/// (never a FIFO, link, directory or device) whose header is valid (or a
/// numalab header of another layout version), or the temporary file of a
/// creation. Another user's segment is never removed,
/// except by root, and then only when its header is valid and no process
/// holds it (its creator, writer and readers are gone; `force` does not
/// change that). Nothing is removed unless every file under the name may
/// be: the refusal names the file and why.
pub fn remove(name: &str, force: bool) -> Result<Vec<PathBuf>, RingError> {
    segment::check_name(name)?;
    let found = inspect_all(Some(name));
    if found.is_empty() {
        return Err(RingError::NotFound {
            name: name.to_owned(),
            path: segment::path_in(SHM_DIR, name),
        });
    }
    let me = linux::effective_uid();
    for file in &found {
        let refuse = |reason: String| RingError::NotRemoved {
            path: file.path.clone(),
            reason,
        };
        file.verified().map_err(refuse)?;
        match file.uid {
            Some(uid) if uid == me => {}
            Some(uid) if me == 0 => {
                if file.header.is_err() || file.in_use() {
                    return Err(refuse(format!(
                        "it belongs to user {uid}; root removes another user's segment only \
                         when its header is valid and no process holds it"
                    )));
                }
            }
            Some(uid) => {
                return Err(refuse(format!(
                    "it belongs to user {uid}; only that user or root may remove it"
                )))
            }
            None => return Err(refuse("its owner could not be seen".into())),
        }
        if file.in_use() && !force {
            let holders = file
                .entry()
                .stats
                .map(|s| {
                    let mut pids = Vec::new();
                    if s.creator_alive {
                        pids.push(format!("creator {}", s.creator_pid));
                    }
                    if s.writer.state == "active" {
                        pids.push(format!("writer {}", s.writer.pid));
                    }
                    pids.extend(
                        s.readers
                            .iter()
                            .filter(|r| r.state != "dead")
                            .map(|r| format!("reader {}", r.pid)),
                    );
                    format!(" ({})", pids.join(", "))
                })
                .unwrap_or_default();
            return Err(refuse(format!(
                "a live process holds it{holders}; stop it first, or use --force"
            )));
        }
    }
    let mut removed = Vec::new();
    for file in found {
        // The name may have been given to another file since it was
        // looked at: only the file verified is removed.
        if !file.still_there() {
            return Err(RingError::NotRemoved {
                path: file.path,
                reason: "it was replaced while numalab looked at it".into(),
            });
        }
        linux::unlink(&file.path)
            .map_err(RingError::os(format!("remove {}", file.path.display())))?;
        removed.push(file.path);
    }
    Ok(removed)
}

/// Removes the segment of ring `name` when the process that made it is
/// gone, even while others (its writer, its readers) still hold it: what a
/// writer or reader does when its creator was killed, so that the segment
/// does not outlive them all. Only a segment of this user with a valid
/// header is removed. `Ok(false)` when the creator lives or the segment is
/// gone already (another worker removed it).
///
/// ```
/// use numalab::ring::{self, Ring, RingOptions};
/// # let name = format!("doc-abandoned-{}", std::process::id());
/// let mut ring = Ring::create(&RingOptions::new(&name, 4 * 4096, 4096))?;
/// // Its creator (this process) holds it: it stays.
/// assert!(!ring::remove_abandoned(&name)?);
/// let path = ring.path().to_owned();
/// ring.keep();
/// drop(ring); // as if the creator had died
/// assert!(ring::remove_abandoned(&name)?);
/// assert!(!path.exists());
/// assert!(!ring::remove_abandoned(&name)?); // gone already
/// # Ok::<(), numalab::ring::RingError>(())
/// ```
pub fn remove_abandoned(name: &str) -> Result<bool, RingError> {
    segment::check_name(name)?;
    let me = linux::effective_uid();
    for file in inspect_all(Some(name)) {
        if file.temporary || file.header.is_err() || file.uid != Some(me) {
            continue;
        }
        if file.locks.is_none_or(|l| l.creator_alive) || !file.still_there() {
            continue;
        }
        match linux::unlink(&file.path) {
            Ok(()) => return Ok(true),
            Err(err) if err.raw_os_error() == Some(libc::ENOENT) => {}
            Err(err) => {
                return Err(RingError::os(format!("remove {}", file.path.display()))(
                    err,
                ))
            }
        }
    }
    Ok(false)
}
