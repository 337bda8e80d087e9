//! The writer's handle: copy bytes in, or claim a block, fill it in place
//! and commit it.

use std::cell::Cell;
use std::ops::{Deref, DerefMut};
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::copy::{self, CopyStores};
use super::error::RingError;
use super::layout::{BLOCK_END, BLOCK_START, LOCK_READERS, LOCK_WRITER};
use super::meta::TransferHeader;
use super::monitor::RingStats;
use super::protocol::{self, Space, WRITER_ACTIVE, WRITER_FINISHED};
use super::segment::Segment;
use super::wait::{wait_until, wake_all};
use crate::sys::linux::{self, LockKind};

/// The one writer of a ring (an OS lock keeps others out while it lives).
///
/// Data is sent in *transfers*, each with a [`TransferHeader`];
/// [`write`](Writer::write) copies bytes in (filling blocks one after
/// another), [`claim`](Writer::claim) lends a whole block to fill in place.
/// Dropping the writer ends the stream for readers; a writer that dies
/// without that (killed, or dropped while panicking) is seen by readers as
/// dead once they have read everything it committed.
///
/// ```
/// use numalab::ring::{Ring, RingError, RingOptions};
/// # let name = format!("doc-writer-{}", std::process::id());
/// let ring = Ring::create(&RingOptions::new(&name, 4 * 4096, 4096))?;
/// let mut writer = ring.writer()?;
/// match ring.writer() {
///     Err(RingError::WriterBusy { pid }) => assert_eq!(pid, std::process::id()),
///     other => panic!("expected one writer at a time, got {other:?}"),
/// }
/// writer.write(&[1; 3 * 4096])?; // three blocks, each published when full
/// writer.write(&[2; 100])?; // held in a partly filled block
/// assert_eq!(writer.stats().writer.blocks, 3);
/// writer.flush()?;
/// assert_eq!(writer.stats().writer.bytes, 3 * 4096 + 100);
/// writer.finish()?;
/// assert_eq!(ring.stats().writer.state, "finished");
/// # Ok::<(), RingError>(())
/// ```
///
/// See the [module documentation](super) for a writer and a reader in two
/// threads.
pub struct Writer {
    seg: Arc<Segment>,
    /// Own open file description, holding the writer lock.
    lock_fd: OwnedFd,
    /// Next block to write (equal to `write_seq`: only this writer moves it).
    next: u64,
    /// Bytes already copied into the claimed block `next` by `write`.
    filled: Option<usize>,
    in_transfer: bool,
    /// Header bytes for the first block of the transfer just begun.
    pending_start: Option<Vec<u8>>,
    transfer: u64,
    timeout: Option<Duration>,
    stores: CopyStores,
    /// Whether `write` copies with streaming stores (from `stores` and the
    /// block size).
    streaming: bool,
    bytes: u64,
    finished: bool,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("ring", &self.seg.name)
            .field("next_block", &self.next)
            .field("transfer", &self.transfer)
            .finish()
    }
}

/// The largest block sequence, transfer or byte count a writer or reader
/// takes over from a segment: 2^62, out of reach of any real ring (at a
/// block per nanosecond, 146 years), far enough from `u64::MAX` that
/// adding to it never overflows.
pub(crate) const MAX_COUNTER: u64 = 1 << 62;

impl Writer {
    pub(crate) fn attach(seg: Arc<Segment>) -> Result<Writer, RingError> {
        let lock_fd = seg.reopen()?;
        let seg_block_size = seg.geometry.block_size as usize;
        let ctl = seg.writer();
        let (next, transfer, bytes) = (
            ctl.write_seq.load(SeqCst),
            ctl.transfers.load(Relaxed),
            ctl.bytes_written.load(Relaxed),
        );
        // The counters live in shared memory any process that may write
        // the segment can change: refuse values no real ring reaches
        // (2^62 blocks or bytes) before adding to them.
        for (what, value) in [
            ("block sequence", next),
            ("transfer count", transfer),
            ("byte count", bytes),
        ] {
            if value > MAX_COUNTER {
                return Err(RingError::Corrupt {
                    reason: format!("the writer's {what} is {value}, more than a ring can reach"),
                });
            }
        }
        if !linux::lock(&lock_fd, LOCK_WRITER, 1, LockKind::Exclusive)
            .map_err(RingError::os("lock the ring for writing"))?
        {
            return Err(RingError::WriterBusy {
                pid: ctl.pid.load(Relaxed),
            });
        }
        ctl.pid.store(linux::process_id(), Relaxed);
        if protocol::set_writer_state(ctl, WRITER_ACTIVE) {
            wake_all(&ctl.data_event);
        }
        Ok(Writer {
            seg,
            lock_fd,
            next,
            filled: None,
            in_transfer: false,
            pending_start: None,
            transfer,
            timeout: None,
            stores: CopyStores::Auto,
            streaming: CopyStores::Auto.streams(seg_block_size),
            bytes,
            finished: false,
        })
    }

    /// How long a write may wait for a reader to free a block before it
    /// fails with [`RingError::Timeout`]; `None` (the default) waits as long
    /// as the readers live. Dead readers never make the writer wait.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    /// How [`write`](Self::write) stores the bytes it copies into the
    /// ring: by default ([`CopyStores::Auto`]) through the caches for
    /// blocks below half the last-level cache
    /// ([`streaming_threshold`](super::streaming_threshold)), and above
    /// it with the stores [`auto_stores`](super::auto_stores) measured
    /// faster on this machine. Streaming copies store in the order it
    /// measured faster; choosing [`CopyStores::Streaming`] settles that
    /// measurement here (a fraction of a second, once per machine), not
    /// in the first write.
    pub fn set_copy_stores(&mut self, stores: CopyStores) {
        self.stores = stores;
        self.streaming = stores.streams(self.block_size());
        if self.streaming {
            copy::auto_stores();
        }
    }

    /// Whether [`write`](Self::write) copies into this ring with
    /// streaming (non-temporal) stores. A program filling blocks in place
    /// ([`claim`](Self::claim)) does well to store the same way: for
    /// blocks this large, streaming stores are what reach memory fastest.
    pub fn streams(&self) -> bool {
        self.streaming
    }

    /// Bytes per block.
    pub fn block_size(&self) -> usize {
        self.seg.geometry.block_size as usize
    }

    /// Waits until at least `count` readers have joined — finished
    /// joining, so that each reads every block written after this returns
    /// (readers start at the block being written when they join, so join
    /// them first to see the whole stream).
    pub fn wait_for_readers(&self, count: usize, timeout: Duration) -> Result<(), RingError> {
        let start = Instant::now();
        loop {
            let active = self
                .seg
                .readers()
                .iter()
                .filter(|r| protocol::settled(r.state.load(SeqCst)))
                .count();
            if active >= count {
                return Ok(());
            }
            if start.elapsed() >= timeout {
                return Err(RingError::Timeout {
                    what: format!(
                        "{} to join (have {active})",
                        crate::units::count(count, "reader")
                    ),
                    waited: start.elapsed(),
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Begins a transfer with `header` (ending the current one, if any).
    /// Readers get the header with the transfer's first block.
    pub fn begin_transfer(&mut self, header: &TransferHeader) -> Result<(), RingError> {
        if self.in_transfer {
            self.end_transfer()?;
        }
        let text = header.to_string().into_bytes();
        let capacity = self.seg.geometry.meta_size as usize - 4;
        if text.len() > capacity {
            return Err(RingError::TooLarge {
                what: "a transfer header",
                len: text.len(),
                capacity,
            });
        }
        self.pending_start = Some(text);
        self.in_transfer = true;
        self.transfer += 1;
        self.seg.writer().transfers.store(self.transfer, Relaxed);
        Ok(())
    }

    fn ensure_transfer(&mut self) -> Result<(), RingError> {
        if !self.in_transfer {
            self.begin_transfer(&TransferHeader::new())?;
        }
        Ok(())
    }

    /// Waits for the slot of block `self.next` to be free.
    fn wait_for_space(&mut self) -> Result<(), RingError> {
        let seg = &*self.seg;
        let ctl = seg.writer();
        let blocks = seg.geometry.blocks;
        let seq = self.next;
        if protocol::check_space(seg.readers(), seq, blocks) == Space::Free {
            return Ok(());
        }
        ctl.waits.fetch_add(1, Relaxed);
        let blocked = Cell::new(None);
        let lock_fd = &self.lock_fd;
        wait_until(
            &ctl.space_sleepers,
            &ctl.space_event,
            &ctl.sleeps,
            self.timeout,
            || format!("a reader to free block {seq} of ring {:?}", seg.name),
            || match protocol::check_space(seg.readers(), seq, blocks) {
                Space::Free => Ok(Some(())),
                Space::Blocked { slot, state } => {
                    blocked.set(Some((slot, state)));
                    Ok(None)
                }
            },
            || {
                // A reader whose lock is gone died: drop it.
                if let Some((slot, state)) = blocked.get() {
                    let alive = linux::is_locked(lock_fd, LOCK_READERS + slot as u64, 1)
                        .map_err(RingError::os("check a reader's lock"))?;
                    if !alive && protocol::drop_dead_reader(&seg.readers()[slot], state) {
                        ctl.dropped_readers.fetch_add(1, Relaxed);
                    }
                }
                Ok(())
            },
        )
    }

    /// Publishes block `self.next` with `len` bytes.
    fn commit(&mut self, len: usize, end: bool) {
        let seg = &*self.seg;
        let g = &seg.geometry;
        let seq = self.next;
        let slot = seq % g.blocks;
        let mut flags = if end { BLOCK_END } else { 0 };
        if let Some(text) = self.pending_start.take() {
            flags |= BLOCK_START;
            let meta = seg.meta_ptr(slot);
            // SAFETY: the slot's header area belongs to the writer until
            // the block is published (check_space said no reader holds the
            // slot); text fits (checked in begin_transfer).
            unsafe {
                meta.cast::<[u8; 4]>()
                    .write_unaligned((text.len() as u32).to_le_bytes());
                std::ptr::copy_nonoverlapping(text.as_ptr(), meta.add(4), text.len());
            }
        }
        let desc = seg.desc(slot);
        desc.seq.store(seq, Relaxed);
        desc.len.store(len as u64, Relaxed);
        desc.transfer.store(self.transfer, Relaxed);
        desc.flags.store(flags, Relaxed);
        self.bytes += len as u64;
        let ctl = seg.writer();
        ctl.bytes_written.store(self.bytes, Relaxed);
        // Publishes the contents and the descriptor written above.
        if protocol::publish(ctl, seq) {
            wake_all(&ctl.data_event);
        }
        self.next += 1;
        if end {
            self.in_transfer = false;
        }
    }

    /// Copies `data` into the ring, filling blocks one after another; a
    /// block is published when full (or at [`flush`](Self::flush) or
    /// [`end_transfer`](Self::end_transfer)).
    pub fn write(&mut self, mut data: &[u8]) -> Result<(), RingError> {
        self.ensure_transfer()?;
        let block_size = self.block_size();
        while !data.is_empty() {
            let filled = match self.filled {
                Some(filled) => filled,
                None => {
                    self.wait_for_space()?;
                    self.filled = Some(0);
                    0
                }
            };
            let n = data.len().min(block_size - filled);
            let dst = self.seg.block_ptr(self.next % self.seg.geometry.blocks);
            // SAFETY: the block is the writer's until published (its slot
            // is free: wait_for_space); filled + n <= block_size.
            unsafe { copy::copy(dst.add(filled), data.as_ptr(), n, self.streaming) };
            data = &data[n..];
            if filled + n == block_size {
                self.filled = None;
                self.commit(block_size, false);
            } else {
                self.filled = Some(filled + n);
            }
        }
        Ok(())
    }

    /// Publishes the partly filled block, if any.
    pub fn flush(&mut self) -> Result<(), RingError> {
        if let Some(filled) = self.filled.take() {
            if filled > 0 {
                self.commit(filled, false);
            }
        }
        Ok(())
    }

    /// Lends the next whole block to fill in place; publish it with
    /// [`WriteBlock::commit`]. Bytes copied with `write` and not yet
    /// published are published first.
    pub fn claim(&mut self) -> Result<WriteBlock<'_>, RingError> {
        self.flush()?;
        self.ensure_transfer()?;
        self.wait_for_space()?;
        let slot = self.next % self.seg.geometry.blocks;
        let ptr = self.seg.block_ptr(slot);
        Ok(WriteBlock { writer: self, ptr })
    }

    /// Ends the current transfer: readers see its end after its last byte.
    pub fn end_transfer(&mut self) -> Result<(), RingError> {
        if !self.in_transfer {
            return Ok(());
        }
        match self.filled.take() {
            Some(filled) => self.commit(filled, true),
            None => {
                // An empty block carries the end (and the header, for a
                // transfer without data).
                self.wait_for_space()?;
                self.commit(0, true);
            }
        }
        Ok(())
    }

    /// Ends the transfer and the stream: readers get `None` once they have
    /// read everything.
    pub fn finish(mut self) -> Result<(), RingError> {
        self.finish_inner()
    }

    fn finish_inner(&mut self) -> Result<(), RingError> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        self.end_transfer()?;
        let ctl = self.seg.writer();
        if protocol::set_writer_state(ctl, WRITER_FINISHED) {
            wake_all(&ctl.data_event);
        }
        Ok(())
    }

    /// The ring's counters now.
    pub fn stats(&self) -> RingStats {
        RingStats::read(&self.seg, &self.lock_fd)
    }

    pub(super) fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }

    /// Whether block `seq` is the next to publish and nothing was copied
    /// into it.
    pub(super) fn is_next(&self, seq: u64) -> bool {
        self.next == seq && self.filled.is_none()
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // A writer dropped by a panic did not finish its data: leave the
        // stream active, and the released lock tells readers it died.
        if !std::thread::panicking() {
            let _ = self.finish_inner();
        }
    }
}

/// A block lent by [`Writer::claim`], to fill in place. Dropping it without
/// [`commit`](Self::commit) publishes nothing.
///
/// ```
/// use numalab::ring::{Ring, RingError, RingOptions};
/// # let name = format!("doc-writeblock-{}", std::process::id());
/// let ring = Ring::create(&RingOptions::new(&name, 4 * 4096, 4096))?;
/// let mut reader = ring.reader()?;
/// let mut writer = ring.writer()?;
/// let mut block = writer.claim()?;
/// assert_eq!(block.len(), 4096); // the whole block, to fill in place
/// block[..5].copy_from_slice(b"hello");
/// block.commit(5)?; // readers get its first five bytes
/// let block = writer.claim()?;
/// assert!(matches!(block.commit(4097), Err(RingError::TooLarge { .. })));
/// assert_eq!(&*reader.borrow()?.expect("a block"), b"hello");
/// # Ok::<(), RingError>(())
/// ```
pub struct WriteBlock<'a> {
    writer: &'a mut Writer,
    ptr: *mut u8,
}

impl std::fmt::Debug for WriteBlock<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteBlock")
            .field("seq", &self.writer.next)
            .field("len", &self.len())
            .finish()
    }
}

impl WriteBlock<'_> {
    /// The block's sequence number (blocks are numbered from 0).
    pub fn seq(&self) -> u64 {
        self.writer.next
    }

    /// Publishes the first `len` bytes of the block.
    pub fn commit(self, len: usize) -> Result<(), RingError> {
        self.publish(len, false)
    }

    /// Publishes the first `len` bytes as the last block of the transfer.
    pub fn commit_last(self, len: usize) -> Result<(), RingError> {
        self.publish(len, true)
    }

    fn publish(self, len: usize, end: bool) -> Result<(), RingError> {
        let capacity = self.writer.block_size();
        if len > capacity {
            return Err(RingError::TooLarge {
                what: "a block",
                len,
                capacity,
            });
        }
        self.writer.commit(len, end);
        Ok(())
    }
}

impl Deref for WriteBlock<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: the block is the writer's until published (no reader
        // holds its slot), block_size bytes long, and initialised (shared
        // memory always is).
        unsafe { std::slice::from_raw_parts(self.ptr, self.writer.block_size()) }
    }
}

impl DerefMut for WriteBlock<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref; &mut self makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.writer.block_size()) }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering::Relaxed;

    use super::super::{Ring, RingError, RingOptions};

    /// Regression: a writer joining a segment whose control block another
    /// process set near `u64::MAX` added to the counters unchecked (a
    /// panic in debug builds, a wrapped count in release; found by the
    /// ring_segment fuzz target).
    #[test]
    fn a_writer_refuses_counters_no_ring_reaches() {
        let name = format!("writer-counters-{}", std::process::id());
        let ring = Ring::create(&RingOptions::new(&name, 4 * 4096, 4096)).unwrap();
        for field in 0..3 {
            let ctl = ring.seg.writer();
            let counter = [&ctl.write_seq, &ctl.transfers, &ctl.bytes_written][field];
            let before = counter.load(Relaxed);
            counter.store(u64::MAX, Relaxed);
            match ring.writer() {
                Err(RingError::Corrupt { reason }) => {
                    assert!(reason.contains("more than a ring can reach"), "{reason}")
                }
                other => panic!("counter {field} at u64::MAX: {other:?}"),
            }
            counter.store(before, Relaxed);
        }
        assert!(ring.writer().is_ok());
    }

    /// Regression (fuzzer): a reader joining a segment whose write_seq
    /// another process set to `u64::MAX` overflowed in `activate`.
    #[test]
    fn a_reader_refuses_a_block_sequence_no_ring_reaches() {
        let name = format!("reader-counters-{}", std::process::id());
        let ring = Ring::create(&RingOptions::new(&name, 4 * 4096, 4096)).unwrap();
        ring.seg.writer().write_seq.store(u64::MAX, Relaxed);
        match ring.reader() {
            Err(RingError::Corrupt { reason }) => {
                assert!(reason.contains("more than a ring can reach"), "{reason}")
            }
            other => panic!("write_seq at u64::MAX: {other:?}"),
        }
        ring.seg.writer().write_seq.store(0, Relaxed);
        assert!(ring.reader().is_ok());
    }
}
