//! Blocks held across calls, for callers that cannot hold a borrow: a
//! binding for another language gives its program a block in one call and
//! takes it back in another ([`Reader::hold`], [`Writer::hold_claim`]).
//! The [`HeldBlock`] keeps the ring's memory mapped while it lives, so its
//! address stays valid even after the block is given back or the handle is
//! gone; what the bytes hold then is no longer the block's.

use std::sync::Arc;

use super::error::RingError;
use super::reader::Reader;
use super::segment::Segment;
use super::writer::Writer;

/// A block lent by [`Reader::hold`] or [`Writer::hold_claim`]: where it
/// is, how long, and which. Give it back with [`Reader::release_held`] or
/// [`Writer::commit_held`]; until then the handle lends no other.
///
/// ```
/// use numalab::ring::{Ring, RingOptions};
/// # let name = format!("doc-held-{}", std::process::id());
/// let ring = Ring::create(&RingOptions::new(&name, 4 * 4096, 4096))?;
/// let mut reader = ring.reader()?;
/// let mut writer = ring.writer()?;
///
/// let claimed = writer.hold_claim()?;
/// assert_eq!(claimed.len(), 4096);
/// // SAFETY: the writer holds the block; 5 <= its length.
/// unsafe { std::ptr::copy_nonoverlapping(b"hello".as_ptr(), claimed.as_ptr(), 5) };
/// writer.commit_held(&claimed, 5, true)?;
/// assert!(writer.commit_held(&claimed, 5, true).is_err()); // given once only
///
/// let held = reader.hold()?.expect("a block");
/// assert_eq!((held.seq(), held.len(), held.ends_transfer()), (0, 5, true));
/// // SAFETY: the reader holds the block until it is released.
/// assert_eq!(unsafe { held.as_slice() }, b"hello");
/// assert!(reader.release_held(&held));
/// assert!(!reader.release_held(&held)); // already given back
/// # Ok::<(), numalab::ring::RingError>(())
/// ```
pub struct HeldBlock {
    /// Keeps the mapping alive while the block's address is known.
    _seg: Arc<Segment>,
    ptr: *mut u8,
    len: usize,
    seq: u64,
    starts: bool,
    ends: bool,
}

// SAFETY: a HeldBlock is an address in a shared mapping it keeps alive,
// and a few numbers; it gives no access by itself (`as_slice` is unsafe).
unsafe impl Send for HeldBlock {}
// SAFETY: as for Send: no method reads or writes the memory safely.
unsafe impl Sync for HeldBlock {}

impl std::fmt::Debug for HeldBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldBlock")
            .field("seq", &self.seq)
            .field("len", &self.len)
            .field("starts_transfer", &self.starts)
            .field("ends_transfer", &self.ends)
            .finish()
    }
}

impl HeldBlock {
    /// The block's first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Bytes in the block: what the writer committed (reading), or the
    /// whole block (writing).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the block has no bytes (a transfer's empty last block).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The block's sequence number.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Whether it is the first block of a transfer (reading).
    pub fn starts_transfer(&self) -> bool {
        self.starts
    }

    /// Whether it is the last block of a transfer (reading).
    pub fn ends_transfer(&self) -> bool {
        self.ends
    }

    /// The block's bytes.
    ///
    /// # Safety
    ///
    /// The handle that lent the block must still hold it (not released,
    /// not committed): after that the writer may be writing these bytes.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping lives while self does; len <= block size;
        // the caller promises the block is still held.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Reader {
    /// As [`borrow`](Self::borrow), but the block stays held until
    /// [`release_held`](Self::release_held) (or the next call that reads);
    /// `None` at the end of the stream.
    pub fn hold(&mut self) -> Result<Option<HeldBlock>, RingError> {
        let seg = self.segment().clone();
        let Some(block) = self.borrow()? else {
            return Ok(None);
        };
        let held = HeldBlock {
            _seg: seg,
            ptr: block.as_ptr().cast_mut(),
            len: block.len(),
            seq: block.seq(),
            starts: block.starts_transfer(),
            ends: block.ends_transfer(),
        };
        // Dropping the borrow would give the block back: keep it held.
        std::mem::forget(block);
        Ok(Some(held))
    }

    /// Gives `held` back to the writer; false when it was given back
    /// already (or read past), which changes nothing.
    pub fn release_held(&mut self, held: &HeldBlock) -> bool {
        if !self.holds(held.seq) {
            return false;
        }
        self.release_borrowed();
        true
    }
}

impl Writer {
    /// As [`claim`](Self::claim), but the block stays the writer's until
    /// [`commit_held`](Self::commit_held); the whole block, to fill.
    pub fn hold_claim(&mut self) -> Result<HeldBlock, RingError> {
        let seg = self.segment().clone();
        let block = self.claim()?;
        let held = HeldBlock {
            _seg: seg,
            ptr: block.as_ptr().cast_mut(),
            len: block.len(),
            seq: block.seq(),
            starts: false,
            ends: false,
        };
        // An uncommitted claim publishes nothing when it ends; the block
        // stays the next one to publish.
        Ok(held)
    }

    /// Publishes the first `len` bytes of `held`, as the transfer's last
    /// block when `last`. A block already published, or one the writer has
    /// since written past (by [`write`](Self::write)), is refused.
    pub fn commit_held(
        &mut self,
        held: &HeldBlock,
        len: usize,
        last: bool,
    ) -> Result<(), RingError> {
        if !self.is_next(held.seq) {
            return Err(RingError::NotHeld { seq: held.seq });
        }
        let block = self.claim()?;
        if last {
            block.commit_last(len)
        } else {
            block.commit(len)
        }
    }
}
