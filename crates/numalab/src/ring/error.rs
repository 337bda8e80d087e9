//! Why a ring operation failed.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::buffer::BufferError;
use crate::policy::PolicyError;
use crate::units::{count, Size};

use super::limits::{MAX_BLOCKS, MAX_META_SIZE, MAX_READERS};

/// Which size rule of a ring [`RingOptions`](super::RingOptions) break;
/// each variant carries the value that breaks it, so a caller can name
/// the option it came from.
///
/// ```
/// use numalab::ring::{RingError, RingOptions, SizeError};
///
/// let one_block = RingOptions::new("radio", 1 << 20, 1 << 20);
/// match one_block.validate() {
///     Err(RingError::Size(SizeError::Blocks { blocks })) => assert_eq!(blocks, 1),
///     other => panic!("{other:?}"),
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SizeError {
    /// The block size is not a multiple of 64 bytes (or is 0).
    #[error("block size {block_size} must be a multiple of 64 bytes")]
    BlockSize {
        /// The block size given.
        block_size: usize,
    },
    /// The size is not a whole number of blocks.
    #[error("size {size} is not a whole number of {block_size}-byte blocks")]
    NotWholeBlocks {
        /// The size given.
        size: usize,
        /// The block size given.
        block_size: usize,
    },
    /// Fewer than 2 blocks, or more than [`MAX_BLOCKS`](super::MAX_BLOCKS).
    #[error("{}; a ring has 2 to {MAX_BLOCKS}", count(*blocks, "block"))]
    Blocks {
        /// Blocks the sizes give.
        blocks: u64,
    },
    /// No reader slot, or more than [`MAX_READERS`](super::MAX_READERS).
    #[error("{max_readers} reader slots; a ring has 1 to {MAX_READERS}")]
    Readers {
        /// Reader slots asked for.
        max_readers: u32,
    },
    /// A transfer header room that is not a multiple of 64 from 64 to
    /// [`MAX_META_SIZE`](super::MAX_META_SIZE).
    #[error("header size {header_size} must be a multiple of 64 from 64 to {MAX_META_SIZE}")]
    HeaderSize {
        /// The header size given.
        header_size: usize,
    },
    /// The segment would be larger than an address can describe.
    #[error("{size} bytes is too large")]
    TooLarge {
        /// The size given.
        size: usize,
    },
}

/// Why a ring could not be made, opened, written or read.
///
/// Names and sizes are checked before anything is made, and a ring that
/// is not there is named with the place it was looked for:
///
/// ```
/// use numalab::ring::{Ring, RingError, RingMonitor, RingOptions};
///
/// match RingMonitor::open("no-such-ring") {
///     Err(RingError::NotFound { name, path }) => {
///         assert_eq!(name, "no-such-ring");
///         assert!(!path.exists());
///     }
///     other => panic!("expected no ring, got {other:?}"),
/// }
/// let err = Ring::create(&RingOptions::new("a/b", 4 * 4096, 4096)).unwrap_err();
/// assert!(matches!(err, RingError::InvalidName { .. }), "{err}");
/// let err = Ring::create(&RingOptions::new("one-block", 4096, 4096)).unwrap_err();
/// assert!(err.to_string().contains("1 block; a ring has 2 to"), "{err}");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RingError {
    /// A held block given back twice, or one the handle has moved past
    /// ([`HeldBlock`](super::HeldBlock)).
    #[error("block {seq} is not held any more: it was published or given back already")]
    NotHeld {
        /// The block's sequence number.
        seq: u64,
    },
    /// The name cannot be used for a segment.
    #[error("invalid ring name {name:?}: {reason}")]
    InvalidName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Something other than the sizes that makes a ring impossible to
    /// make as asked (a hugetlbfs that is not mounted, a header too large).
    #[error("invalid ring size: {0}")]
    InvalidSize(String),
    /// Sizes that cannot make a ring ([`RingOptions::validate`](super::RingOptions::validate)).
    #[error("invalid ring size: {0}")]
    Size(SizeError),
    /// The memory policy cannot be applied, or the node lacks the memory.
    #[error(transparent)]
    Placement(#[from] BufferError),
    /// A segment with that name exists already.
    #[error("a ring named {name:?} exists already ({}); remove it with `numalab ring --cleanup {name}` if it is stale", path.display())]
    Exists {
        /// The name.
        name: String,
        /// Its file.
        path: PathBuf,
    },
    /// No segment has that name.
    #[error("no ring named {name:?} ({} does not exist); `numalab ring --list` shows the rings", path.display())]
    NotFound {
        /// The name.
        name: String,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// The file is not a regular file owned by this user with mode 0600.
    #[error("{} is not a ring segment this user may use: {reason}", path.display())]
    NotOwned {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Something under a segment's name that is not a regular file (a
    /// FIFO, a directory, a socket, a device, a symbolic link): never
    /// opened for reading, never removed.
    #[error("{} is not a ring segment: {kind}", path.display())]
    NotASegment {
        /// The file.
        path: PathBuf,
        /// What it is (`FIFO`, `directory`, …).
        kind: &'static str,
    },
    /// `remove` left the file in place.
    #[error("{} was not removed: {reason}", path.display())]
    NotRemoved {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Rings that do not fit together in the memory or the file system
    /// that would hold them ([`check_room`](super::check_room)).
    #[error(
        "{} {} {} together ({} of data, {} of block descriptors, \
         transfer-header slots and control) {place}, which has {} free",
        count(*rings, "ring"), if *rings == 1 { "needs" } else { "need" },
        Size(*needed), Size(*data), Size(needed.saturating_sub(*data)), Size(*free)
    )]
    NoRoom {
        /// Rings counted.
        rings: usize,
        /// Bytes of their segments in all.
        needed: u64,
        /// Of which data blocks.
        data: u64,
        /// Where: `on node 0`, `on nodes 0-1` or `in /dev/shm`.
        place: String,
        /// Bytes free there (with reclaimable page cache, for nodes).
        free: u64,
    },
    /// The segment's first word is zero: it was never completed (numalab
    /// names a segment only once it is complete, so a named file like this
    /// was not made by this numalab).
    #[error("its header was never completed: its first 8 bytes are zero")]
    Incomplete,
    /// The segment is not a numalab ring.
    #[error("not a numalab ring: magic {magic:#018x}")]
    Foreign {
        /// The first word found.
        magic: u64,
    },
    /// The segment was made by an incompatible numalab.
    #[error("the ring has layout version {found}; this numalab reads version {supported}")]
    Version {
        /// Version in the segment.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },
    /// The segment's header or control words are inconsistent.
    #[error("corrupt ring segment: {reason}")]
    Corrupt {
        /// What was inconsistent.
        reason: String,
    },
    /// Another writer is attached.
    #[error("the ring already has a live writer (pid {pid})")]
    WriterBusy {
        /// Its process id as recorded.
        pid: u32,
    },
    /// Every reader slot is in use by a live reader.
    #[error("all {slots} reader slots of the ring are taken by live readers")]
    NoReaderSlot {
        /// Slots the ring has.
        slots: u32,
    },
    /// The writer died without ending the stream; everything it had
    /// committed has been read.
    #[error(
        "the writer (pid {pid}) died without ending the stream; {} {} read before",
        count(*blocks, "block"), if *blocks == 1 { "was" } else { "were" }
    )]
    WriterDied {
        /// Its process id as recorded.
        pid: u32,
        /// Blocks this reader read in all.
        blocks: u64,
    },
    /// Nothing happened within the timeout.
    #[error("timed out after {:.1} s waiting for {what}", waited.as_secs_f64())]
    Timeout {
        /// What was waited for.
        what: String,
        /// How long.
        waited: Duration,
    },
    /// More bytes than a block (or a header slot) holds.
    #[error("{len} bytes do not fit in {what} of {capacity} bytes")]
    TooLarge {
        /// "a block" or "a transfer header".
        what: &'static str,
        /// Bytes given.
        len: usize,
        /// Bytes that fit.
        capacity: usize,
    },
    /// A system call failed.
    #[error("could not {what}: {source}")]
    Os {
        /// What was being done.
        what: String,
        /// The kernel's error.
        source: io::Error,
    },
}

impl RingError {
    pub(crate) fn os(what: impl Into<String>) -> impl FnOnce(io::Error) -> RingError {
        let what = what.into();
        move |source| RingError::Os { what, source }
    }
}

// Not `#[from]`: that would make the size error a source as well as part
// of the message, and error reports that print sources would say it twice.
impl From<SizeError> for RingError {
    fn from(err: SizeError) -> Self {
        RingError::Size(err)
    }
}

impl From<PolicyError> for RingError {
    fn from(err: PolicyError) -> Self {
        RingError::Placement(BufferError::Policy(err))
    }
}
