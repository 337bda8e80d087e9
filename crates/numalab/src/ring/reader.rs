//! A reader's handle: copy bytes out, or borrow a block in place and
//! release it.

use std::cell::Cell;
use std::ops::Deref;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;
use std::time::Duration;

use super::copy::{self, CopyStores};
use super::error::RingError;
use super::layout::{BLOCK_END, BLOCK_START, LOCK_READERS, LOCK_WRITER};
use super::meta::{Transfer, TransferHeader};
use super::monitor::RingStats;
use super::protocol::{self, Take, MODE_BLOCK, MODE_LAG, WRITER_ACTIVE};
use super::segment::Segment;
use super::wait::{wait_until, wake_all};
use super::Backpressure;
use crate::sys::linux::{self, LockKind};

/// A block a reader holds.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    seq: u64,
    len: usize,
    offset: usize,
    flags: u32,
    transfer: u64,
}

/// One of a ring's readers. Every reader sees every block from the moment
/// it joins (it starts at the block the writer is writing), in order.
///
/// [`read`](Reader::read) copies bytes out, stopping at each transfer's
/// end; [`borrow`](Reader::borrow) lends the next block in place.
/// [`next_transfer`](Reader::next_transfer) skips to the next transfer and
/// returns its header. A reader in [`Backpressure::Block`] mode makes the
/// writer wait for it; in [`Backpressure::Lag`] mode the writer skips it
/// ahead when it falls a whole ring behind (see [`Reader::skipped`]).
///
/// ```
/// use numalab::ring::{Ring, RingOptions, TransferHeader};
/// # let name = format!("doc-reader-{}", std::process::id());
/// let ring = Ring::create(&RingOptions::new(&name, 4 * 4096, 4096))?;
/// let mut reader = ring.reader()?; // joined first, it sees every block
/// let mut writer = ring.writer()?;
/// let mut header = TransferHeader::new();
/// header.set("FILE", "a.dat")?;
/// writer.begin_transfer(&header)?;
/// writer.write(&[7; 6000])?; // a block and a half
/// writer.finish()?;
///
/// let transfer = reader.next_transfer()?.expect("a transfer");
/// assert_eq!(transfer.header.get("FILE"), Some("a.dat"));
/// let mut data = Vec::new();
/// let mut buf = [0; 1024];
/// loop {
///     match reader.read(&mut buf)? {
///         0 => break, // the end of the transfer
///         n => data.extend_from_slice(&buf[..n]),
///     }
/// }
/// assert_eq!(data, [7; 6000]);
/// assert_eq!(reader.skipped(), 0); // a reader in block mode misses nothing
/// # Ok::<(), numalab::ring::RingError>(())
/// ```
///
/// See the [module documentation](super) for a writer and a reader in two
/// threads.
pub struct Reader {
    seg: Arc<Segment>,
    /// Own open file description, holding this slot's lock.
    lock_fd: OwnedFd,
    slot: usize,
    active: u64,
    cursor: Option<Cursor>,
    pending_end: bool,
    announced: Option<u64>,
    transfer: Option<Transfer>,
    timeout: Option<Duration>,
    stores: CopyStores,
    blocks: u64,
    bytes: u64,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("ring", &self.seg.name)
            .field("slot", &self.slot)
            .field("blocks_read", &self.blocks)
            .finish()
    }
}

/// What waiting for the next block ended with.
enum Next {
    Block(u64),
    End,
    WriterDied,
}

impl Reader {
    pub(crate) fn join(seg: Arc<Segment>, mode: Backpressure) -> Result<Reader, RingError> {
        let lock_fd = seg.reopen()?;
        // The writer's block sequence is in shared memory any process that
        // may write the segment can change: refuse one no ring reaches.
        let write_seq = seg.writer().write_seq.load(SeqCst);
        if write_seq > super::writer::MAX_COUNTER {
            return Err(RingError::Corrupt {
                reason: format!(
                    "the writer's block sequence is {write_seq}, more than a ring can reach"
                ),
            });
        }
        let slots = seg.readers();
        for (slot, ctl) in slots.iter().enumerate() {
            let locked = linux::lock(&lock_fd, LOCK_READERS + slot as u64, 1, LockKind::Exclusive)
                .map_err(RingError::os("lock a reader slot"))?;
            if !locked {
                continue;
            }
            // The lock is ours: whatever the slot says was left by a reader
            // that is gone.
            let joining = protocol::begin_join(ctl);
            ctl.pid.store(linux::process_id(), Relaxed);
            for counter in [
                &ctl.blocks_read,
                &ctl.bytes_read,
                &ctl.skipped,
                &ctl.lapped,
                &ctl.waits,
                &ctl.sleeps,
            ] {
                counter.store(0, Relaxed);
            }
            let mode = match mode {
                Backpressure::Block => MODE_BLOCK,
                Backpressure::Lag => MODE_LAG,
            };
            // A ring whose blocks may be copied with streaming stores
            // settles Auto's rule now, not in the first read.
            if seg.geometry.block_size as usize >= copy::streaming_threshold() {
                copy::auto_stores();
            }
            let active = protocol::activate(seg.writer(), ctl, joining, mode, seg.geometry.blocks);
            // A writer waiting on this slot's old occupant can look again.
            wake_all(&seg.writer().space_event);
            return Ok(Reader {
                seg,
                lock_fd,
                slot,
                active,
                cursor: None,
                pending_end: false,
                announced: None,
                transfer: None,
                timeout: None,
                stores: CopyStores::Auto,
                blocks: 0,
                bytes: 0,
            });
        }
        Err(RingError::NoReaderSlot {
            slots: slots.len() as u32,
        })
    }

    /// How long a read may wait for data before it fails with
    /// [`RingError::Timeout`]; `None` (the default) waits as long as the
    /// writer lives (or, before a writer has attached, for ever).
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    /// How [`read`](Self::read) stores the bytes it copies into the
    /// caller's buffer: by default ([`CopyStores::Auto`]) through the
    /// caches for copies below half the last-level cache
    /// ([`streaming_threshold`](super::streaming_threshold)), and above
    /// it with the stores [`auto_stores`](super::auto_stores) measured
    /// faster on this machine (a buffer that large does not stay in the
    /// cache anyway). Streaming copies store in the order it measured
    /// faster; choosing [`CopyStores::Streaming`] settles that
    /// measurement here (a fraction of a second, once per machine), not
    /// in the first read.
    pub fn set_copy_stores(&mut self, stores: CopyStores) {
        self.stores = stores;
        if stores == CopyStores::Streaming {
            copy::auto_stores();
        }
    }

    /// This reader's slot in the ring (for the monitor).
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// Blocks the writer overwrote before this reader could read them (lag
    /// mode only; always 0 in block mode).
    pub fn skipped(&self) -> u64 {
        self.seg.readers()[self.slot].skipped.load(Relaxed)
    }

    /// The transfer the last block read belongs to.
    pub fn transfer(&self) -> Option<&Transfer> {
        self.transfer.as_ref()
    }

    fn wait_next(&mut self) -> Result<Next, RingError> {
        let seg = &*self.seg;
        let ctl = seg.writer();
        let reader = &seg.readers()[self.slot];
        let writer_dead = Cell::new(false);
        let ready = || -> Result<Option<Next>, RingError> {
            match protocol::try_take(ctl, reader) {
                Take::Taken { seq, .. } => Ok(Some(Next::Block(seq))),
                Take::Empty { next, written } => {
                    if reader.state.load(SeqCst) != self.active {
                        return Err(RingError::Corrupt {
                            reason: format!("reader slot {} was taken from this reader", self.slot),
                        });
                    }
                    if next > written {
                        return Err(RingError::Corrupt {
                            reason: format!("reader at block {next} but only {written} written"),
                        });
                    }
                    // The writer stores FINISHED after its last block:
                    // a block committed since the look above is read
                    // before the end.
                    match protocol::finished_take(ctl, reader) {
                        Some(Take::Taken { seq, .. }) => return Ok(Some(Next::Block(seq))),
                        Some(Take::Empty { .. }) => return Ok(Some(Next::End)),
                        None => {}
                    }
                    if writer_dead.get() {
                        Ok(Some(Next::WriterDied))
                    } else {
                        Ok(None)
                    }
                }
            }
        };
        if let Some(next) = ready()? {
            return Ok(next);
        }
        reader.waits.fetch_add(1, Relaxed);
        let lock_fd = &self.lock_fd;
        wait_until(
            &ctl.data_sleepers,
            &ctl.data_event,
            &reader.sleeps,
            self.timeout,
            || format!("data from the writer of ring {:?}", seg.name),
            ready,
            || {
                if ctl.state.load(SeqCst) == WRITER_ACTIVE
                    && !linux::is_locked(lock_fd, LOCK_WRITER, 1)
                        .map_err(RingError::os("check the writer's lock"))?
                {
                    writer_dead.set(true);
                }
                Ok(())
            },
        )
    }

    /// Takes the next block into the cursor; `None` at the end of the
    /// stream.
    fn take_next(&mut self) -> Result<Option<Cursor>, RingError> {
        debug_assert!(self.cursor.is_none());
        let seq = match self.wait_next()? {
            Next::Block(seq) => seq,
            Next::End => return Ok(None),
            Next::WriterDied => {
                return Err(RingError::WriterDied {
                    pid: self.seg.writer().pid.load(Relaxed),
                    blocks: self.blocks,
                })
            }
        };
        let g = &self.seg.geometry;
        let slot = seq % g.blocks;
        let desc = self.seg.desc(slot);
        let cursor = Cursor {
            seq,
            len: desc.len.load(Relaxed) as usize,
            offset: 0,
            flags: desc.flags.load(Relaxed),
            transfer: desc.transfer.load(Relaxed),
        };
        self.cursor = Some(cursor);
        let found_seq = desc.seq.load(Relaxed);
        if found_seq != seq || cursor.len as u64 > g.block_size {
            self.release();
            return Err(RingError::Corrupt {
                reason: format!(
                    "block {seq}: descriptor says block {found_seq} of {} bytes",
                    cursor.len
                ),
            });
        }
        if cursor.flags & BLOCK_START != 0 {
            let header = self.read_header(slot);
            match header {
                Ok(header) => {
                    self.transfer = Some(Transfer {
                        id: cursor.transfer,
                        header,
                    })
                }
                Err(err) => {
                    self.release();
                    return Err(err);
                }
            }
        } else if self.transfer.as_ref().map(|t| t.id) != Some(cursor.transfer) {
            // Joined (or skipped) into the middle of a transfer.
            self.transfer = Some(Transfer {
                id: cursor.transfer,
                header: TransferHeader::new(),
            });
        }
        Ok(Some(cursor))
    }

    fn read_header(&self, slot: u64) -> Result<TransferHeader, RingError> {
        let meta = self.seg.meta_ptr(slot);
        let capacity = self.seg.geometry.meta_size as usize - 4;
        // SAFETY: the reader holds the block (busy), so the writer does not
        // touch its header slot; the slot is meta_size bytes long.
        let len = u32::from_le_bytes(unsafe { meta.cast::<[u8; 4]>().read_unaligned() }) as usize;
        if len > capacity {
            return Err(RingError::Corrupt {
                reason: format!("transfer header of {len} bytes in a {capacity}-byte slot"),
            });
        }
        // SAFETY: as above; len fits in the slot.
        let bytes = unsafe { std::slice::from_raw_parts(meta.add(4), len) };
        TransferHeader::parse(bytes)
    }

    /// Gives the held block back to the writer.
    fn release(&mut self) {
        let Some(cursor) = self.cursor.take() else {
            return;
        };
        let seg = &*self.seg;
        let ctl = &seg.readers()[self.slot];
        self.blocks += 1;
        self.bytes += cursor.len as u64;
        ctl.blocks_read.store(self.blocks, Relaxed);
        ctl.bytes_read.store(self.bytes, Relaxed);
        if protocol::release(seg.writer(), ctl, cursor.seq) {
            wake_all(&seg.writer().space_event);
        }
        if cursor.flags & BLOCK_END != 0 {
            self.pending_end = true;
        }
    }

    /// Copies the next bytes of the current transfer into `buf`; returns
    /// how many. `Ok(0)` once at the end of each transfer (then the next
    /// call goes on with the next transfer), and for ever at the end of the
    /// stream. A writer that died is an error once everything it committed
    /// has been read.
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, RingError> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.pending_end {
                self.pending_end = false;
                return Ok(0);
            }
            let mut cursor = match self.cursor {
                Some(cursor) => cursor,
                None => match self.take_next()? {
                    Some(cursor) => cursor,
                    None => return Ok(0),
                },
            };
            let n = buf.len().min(cursor.len - cursor.offset);
            if n > 0 {
                let src = self.seg.block_ptr(cursor.seq % self.seg.geometry.blocks);
                // SAFETY: the reader holds the block (busy), so the writer
                // does not write it; offset + n <= len <= block_size.
                unsafe {
                    copy::copy(
                        buf.as_mut_ptr(),
                        src.add(cursor.offset),
                        n,
                        self.stores.streams(n),
                    )
                };
                cursor.offset += n;
            }
            self.cursor = Some(cursor);
            if cursor.offset == cursor.len {
                self.release();
            }
            if n > 0 {
                return Ok(n);
            }
        }
    }

    /// Lends the next block in place; `None` at the end of the stream. The
    /// block is given back when the [`ReadBlock`] is dropped. Bytes of a
    /// block partly consumed by [`read`](Self::read) are dropped.
    pub fn borrow(&mut self) -> Result<Option<ReadBlock<'_>>, RingError> {
        self.pending_end = false;
        match self.cursor {
            Some(cursor) if cursor.offset == 0 => {}
            Some(_) => {
                self.release();
                self.pending_end = false;
                if self.take_next()?.is_none() {
                    return Ok(None);
                }
            }
            None => {
                if self.take_next()?.is_none() {
                    return Ok(None);
                }
            }
        }
        Ok(Some(ReadBlock { reader: self }))
    }

    /// Skips the rest of the current transfer and waits for the next one;
    /// returns its header, or `None` at the end of the stream.
    pub fn next_transfer(&mut self) -> Result<Option<Transfer>, RingError> {
        self.pending_end = false;
        loop {
            let cursor = match self.cursor {
                Some(cursor) => cursor,
                None => match self.take_next()? {
                    Some(cursor) => cursor,
                    None => return Ok(None),
                },
            };
            if cursor.flags & BLOCK_START != 0
                && cursor.offset == 0
                && self.announced != Some(cursor.seq)
            {
                self.announced = Some(cursor.seq);
                if cursor.len == 0 {
                    // A transfer without data: its one block is also its end.
                    self.release();
                    self.pending_end = false;
                }
                return Ok(self.transfer.clone());
            }
            self.release();
            self.pending_end = false;
        }
    }

    /// The ring's counters now (readable by anyone; see
    /// [`RingMonitor`](super::RingMonitor)).
    pub fn stats(&self) -> RingStats {
        RingStats::read(&self.seg, &self.lock_fd)
    }

    pub(super) fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }

    /// Whether block `seq` is lent whole (by `borrow`) now.
    pub(super) fn holds(&self, seq: u64) -> bool {
        self.cursor
            .is_some_and(|cursor| cursor.seq == seq && cursor.offset == 0)
    }

    /// Gives back the block `borrow` lent, as dropping its `ReadBlock`
    /// does.
    pub(super) fn release_borrowed(&mut self) {
        self.release();
        self.pending_end = false;
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.release();
        let seg = &*self.seg;
        if protocol::leave(seg.writer(), &seg.readers()[self.slot], self.active) {
            wake_all(&seg.writer().space_event);
        }
        // Closing lock_fd (dropped after this) releases the slot's lock.
    }
}

/// A block lent by [`Reader::borrow`]; derefs to its bytes and gives the
/// block back when dropped.
///
/// ```
/// use numalab::ring::{Ring, RingOptions};
/// # let name = format!("doc-readblock-{}", std::process::id());
/// let ring = Ring::create(&RingOptions::new(&name, 4 * 4096, 4096))?;
/// let mut reader = ring.reader()?;
/// let mut writer = ring.writer()?;
/// writer.write(b"hello")?;
/// writer.finish()?;
///
/// let block = reader.borrow()?.expect("a block");
/// assert_eq!(&*block, b"hello"); // read in place, not copied
/// assert_eq!(block.seq(), 0);
/// assert!(block.starts_transfer() && block.ends_transfer());
/// assert_eq!(block.transfer().map(|t| t.id), Some(1));
/// drop(block); // the writer may reuse it now
/// assert!(reader.borrow()?.is_none()); // the end of the stream
/// # Ok::<(), numalab::ring::RingError>(())
/// ```
pub struct ReadBlock<'a> {
    reader: &'a mut Reader,
}

impl std::fmt::Debug for ReadBlock<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadBlock")
            .field("seq", &self.seq())
            .field("len", &self.len())
            .finish()
    }
}

impl ReadBlock<'_> {
    fn cursor(&self) -> Cursor {
        self.reader
            .cursor
            .expect("a borrowed block holds the cursor")
    }

    /// The block's sequence number (blocks are numbered from 0 when the
    /// ring is made).
    pub fn seq(&self) -> u64 {
        self.cursor().seq
    }

    /// Whether this is the first block of a transfer.
    pub fn starts_transfer(&self) -> bool {
        self.cursor().flags & BLOCK_START != 0
    }

    /// Whether this is the last block of a transfer.
    pub fn ends_transfer(&self) -> bool {
        self.cursor().flags & BLOCK_END != 0
    }

    /// The transfer the block belongs to.
    pub fn transfer(&self) -> Option<&Transfer> {
        self.reader.transfer.as_ref()
    }
}

impl Deref for ReadBlock<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        let cursor = self.cursor();
        let src = self
            .reader
            .seg
            .block_ptr(cursor.seq % self.reader.seg.geometry.blocks);
        // SAFETY: the reader holds the block (busy) until this ReadBlock is
        // dropped, so the writer does not write it; len <= block_size.
        unsafe { std::slice::from_raw_parts(src, cursor.len) }
    }
}

impl Drop for ReadBlock<'_> {
    fn drop(&mut self) {
        self.reader.release_borrowed();
    }
}
