//! The ring's index protocol: who may write which block, who may read it,
//! how readers join and leave, and the handshake that lets either side
//! sleep without missing a wake-up.
//!
//! Everything here works on the control words in shared memory and nothing
//! else, so the `loom` models at the bottom check exactly the code the ring
//! runs. The writer is alone (an OS lock makes sure); readers are many.
//!
//! * The writer owns `write_seq`, the number of blocks committed. Block
//!   `s` lives in slot `s % blocks`. Before writing block `s` the writer
//!   checks every active reader ([`check_space`]): a reader whose next
//!   block is `n` still needs slot `n % blocks`, so block `s` may be written
//!   only when `n + blocks > s`.
//! * A reader owns `pos`: its next block, shifted left by one, with bit 0
//!   set while it holds ("is busy with") that block. It takes the block
//!   with a compare-and-swap setting the busy bit ([`try_take`]) and gives
//!   it back by storing the next position ([`release`]).
//! * A reader in *block* mode makes the writer wait. A reader in *lag* mode
//!   does not: when the writer would overwrite its next block and the
//!   reader is not busy, the writer moves the reader's `pos` on to the
//!   oldest block that stays in the ring (one compare-and-swap: if the
//!   reader took the block first, the swap fails and the writer waits for
//!   that one block).
//!
//! Orderings: the handshakes between the writer and a reader are
//! Dekker-style (each side stores its own word, then loads the other's):
//! joining (reader stores `state`, loads `write_seq`; writer stores
//! `write_seq`, loads `state`) and sleeping (a sleeper increments
//! `*_sleepers`, then loads the condition; the waker stores the condition,
//! then loads `*_sleepers`). Each side puts a `SeqCst` fence between its
//! store and its load, so at least one of them sees the other's store
//! (the fences are ordered; `SeqCst` accesses alone would also do in
//! C++20, but the fence makes it plain and is what `loom` models). The `SeqCst` load of `write_seq` by a reader also
//! acquires the writer's block contents (released by its `SeqCst` store),
//! and the writer's `SeqCst` load of `pos` acquires the reader's
//! finished reads of the slot it is about to overwrite. Counters are
//! `Relaxed`: they are for monitoring only.

use super::atomic::{fence, AtomicU32, AtomicU64, Ordering::*};

/// Reader slot status: free for a new reader.
pub(crate) const READER_FREE: u64 = 0;
/// Reader slot status: a reader holds the slot's lock and is joining.
pub(crate) const READER_JOINING: u64 = 1;
/// Reader slot status: an active reader the writer must account for.
pub(crate) const READER_ACTIVE: u64 = 2;

/// Flag beside an `ACTIVE` status: the reader has finished joining — its
/// position is final — so a writer waiting for readers
/// (`Writer::wait_for_readers`) may start and they miss nothing.
pub(crate) const READER_SETTLED: u64 = 0x80;

/// The slot status in a `state` word (the generation is above it, the
/// [`READER_SETTLED`] flag beside it).
pub(crate) fn status(state: u64) -> u64 {
    state & 0x7f
}

/// Whether the `state` word is an active reader that finished joining.
pub(crate) fn settled(state: u64) -> bool {
    status(state) == READER_ACTIVE && state & READER_SETTLED != 0
}

fn with_status(state: u64, status: u64) -> u64 {
    (state & !0xff) | status
}

/// Writer status: no writer has attached yet.
pub(crate) const WRITER_NONE: u32 = 0;
/// Writer status: a writer is attached (or died attached: its lock says).
pub(crate) const WRITER_ACTIVE: u32 = 1;
/// Writer status: the writer ended the stream.
pub(crate) const WRITER_FINISHED: u32 = 2;

/// Reader mode: the writer waits for this reader.
pub(crate) const MODE_BLOCK: u32 = 0;
/// Reader mode: the writer moves this reader on instead of waiting.
pub(crate) const MODE_LAG: u32 = 1;

const BUSY: u64 = 1;

/// The writer's control words (`#[repr(C)]`, in shared memory; 128 bytes).
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub(crate) struct WriterCtl {
    /// Blocks committed since the ring was made.
    pub write_seq: AtomicU64,
    /// `WRITER_NONE`, `WRITER_ACTIVE` or `WRITER_FINISHED`.
    pub state: AtomicU32,
    /// Process id of the writer (for people; its lock is the truth).
    pub pid: AtomicU32,
    /// Futex word readers sleep on; bumped when data or the end arrives.
    pub data_event: AtomicU32,
    /// Readers asleep (or about to sleep) on `data_event`.
    pub data_sleepers: AtomicU32,
    /// Futex word the writer sleeps on; bumped when a reader frees a block.
    pub space_event: AtomicU32,
    /// 1 while the writer sleeps (or is about to) on `space_event`.
    pub space_sleepers: AtomicU32,
    /// Payload bytes committed.
    pub bytes_written: AtomicU64,
    /// Transfers begun.
    pub transfers: AtomicU64,
    /// Times the writer found no free block and had to wait.
    pub waits: AtomicU64,
    /// Times the writer went to sleep on the futex while waiting.
    pub sleeps: AtomicU64,
    /// Readers found dead and dropped by the writer.
    pub dropped_readers: AtomicU64,
}

/// One reader's control words (`#[repr(C)]`, in shared memory; 128 bytes).
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub(crate) struct ReaderCtl {
    /// Generation (bits 8..) and status (bits 0..8) of the slot.
    pub state: AtomicU64,
    /// Next block to read, shifted left by one; bit 0: busy with it.
    pub pos: AtomicU64,
    /// `MODE_BLOCK` or `MODE_LAG`.
    pub mode: AtomicU32,
    /// Process id of the reader (for people; its lock is the truth).
    pub pid: AtomicU32,
    /// Blocks read.
    pub blocks_read: AtomicU64,
    /// Payload bytes read.
    pub bytes_read: AtomicU64,
    /// Blocks the writer overwrote before this (lag-mode) reader read them.
    pub skipped: AtomicU64,
    /// Times the writer moved this reader on.
    pub lapped: AtomicU64,
    /// Times the reader found no data and had to wait.
    pub waits: AtomicU64,
    /// Times the reader went to sleep on the futex while waiting.
    pub sleeps: AtomicU64,
}

/// What [`check_space`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    /// Block `seq` may be written.
    Free,
    /// Reader `slot` (whose `state` word was `state`) still needs the slot.
    Blocked {
        /// Index of the reader.
        slot: usize,
        /// Its `state` word as seen.
        state: u64,
    },
}

/// Writer: may block `seq` be written now? Moves lag-mode readers on.
pub(crate) fn check_space(readers: &[ReaderCtl], seq: u64, blocks: u64) -> Space {
    // Dekker with `activate`: our last store of write_seq, then the loads
    // of the readers' state.
    fence(SeqCst);
    for (slot, reader) in readers.iter().enumerate() {
        loop {
            // Pairs with the reader's SeqCst store of ACTIVE in `activate`.
            let state = reader.state.load(SeqCst);
            if status(state) != READER_ACTIVE {
                break;
            }
            // Acquires the reader's release of the block in this slot.
            let pos = reader.pos.load(SeqCst);
            let next = pos >> 1;
            if next.saturating_add(blocks) > seq {
                break;
            }
            // Written before the SeqCst store of ACTIVE loaded above.
            let lag = reader.mode.load(Relaxed) == MODE_LAG;
            if pos & BUSY != 0 || !lag {
                return Space::Blocked { slot, state };
            }
            let oldest_kept = seq + 1 - blocks;
            // Fails if the reader took the block (busy) or moved meanwhile.
            if reader
                .pos
                .compare_exchange(pos, oldest_kept << 1, SeqCst, SeqCst)
                .is_ok()
            {
                reader.skipped.fetch_add(oldest_kept - next, Relaxed);
                reader.lapped.fetch_add(1, Relaxed);
                break;
            }
        }
    }
    Space::Free
}

/// Writer: publishes block `seq` (its contents and descriptor written
/// before). Returns whether a reader may be asleep and needs a wake-up.
pub(crate) fn publish(writer: &WriterCtl, seq: u64) -> bool {
    // Releases the block's contents to readers' SeqCst loads in try_take;
    // Dekker pair with a reader's sleepers increment in prepare_sleep.
    writer.write_seq.store(seq + 1, SeqCst);
    fence(SeqCst);
    writer.data_sleepers.load(SeqCst) > 0
}

/// Writer: marks the stream ended (`WRITER_FINISHED`) or the writer
/// attached (`WRITER_ACTIVE`). Returns whether readers need a wake-up.
pub(crate) fn set_writer_state(writer: &WriterCtl, state: u32) -> bool {
    // Dekker pair with prepare_sleep, as in publish.
    writer.state.store(state, SeqCst);
    fence(SeqCst);
    writer.data_sleepers.load(SeqCst) > 0
}

/// What [`try_take`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Take {
    /// Block `seq` is the reader's until [`release`]; `written` blocks were
    /// committed when it was taken.
    Taken {
        /// The block.
        seq: u64,
        /// `write_seq` seen.
        written: u64,
    },
    /// Nothing new: the reader's next block is `next` and only `written`
    /// blocks are committed.
    Empty {
        /// The reader's next block.
        next: u64,
        /// `write_seq` seen.
        written: u64,
    },
}

/// Reader: takes its next block if the writer has committed it.
pub(crate) fn try_take(writer: &WriterCtl, reader: &ReaderCtl) -> Take {
    loop {
        let pos = reader.pos.load(SeqCst);
        let next = pos >> 1;
        // Acquires the block contents the writer published.
        let written = writer.write_seq.load(SeqCst);
        if next >= written {
            return Take::Empty { next, written };
        }
        // Fails only if a lag-mode writer moved us on: look again.
        if reader
            .pos
            .compare_exchange(pos, pos | BUSY, SeqCst, SeqCst)
            .is_ok()
        {
            return Take::Taken { seq: next, written };
        }
    }
}

/// Reader, after [`try_take`] found no block: `None` while the writer goes
/// on. Once it has finished, one more look, as `FINISHED` is stored after
/// the writer's last block is committed: a block committed after the
/// reader's first look is taken here (`Take::Taken`) instead of being lost
/// behind an early end, and `Take::Empty` is the end of the stream.
pub(crate) fn finished_take(writer: &WriterCtl, reader: &ReaderCtl) -> Option<Take> {
    if writer.state.load(SeqCst) != WRITER_FINISHED {
        return None;
    }
    Some(try_take(writer, reader))
}

/// Reader: gives block `seq` back. Returns whether the writer may be
/// asleep and needs a wake-up.
pub(crate) fn release(writer: &WriterCtl, reader: &ReaderCtl, seq: u64) -> bool {
    // Releases this reader's reads of the slot to the writer's SeqCst load
    // in check_space; Dekker pair with the writer's prepare_sleep.
    reader.pos.store(seq.wrapping_add(1) << 1, SeqCst);
    fence(SeqCst);
    writer.space_sleepers.load(SeqCst) > 0
}

/// Reader: claims slot `reader` for a new reader; the caller holds the
/// slot's OS lock, so whatever the slot says was left by a reader that is
/// gone. Returns the `JOINING` state word.
pub(crate) fn begin_join(reader: &ReaderCtl) -> u64 {
    let mut state = reader.state.load(SeqCst);
    loop {
        let joining = with_status(state.wrapping_add(0x100), READER_JOINING);
        // Only a writer dropping a dead reader races with us here.
        match reader
            .state
            .compare_exchange(state, joining, SeqCst, SeqCst)
        {
            Ok(_) => return joining,
            Err(seen) => state = seen,
        }
    }
}

/// Reader: becomes active at the writer's current position, in a ring of
/// `blocks` blocks. Returns the `ACTIVE` state word, with the
/// [`READER_SETTLED`] flag it stores once its position is final. The
/// caller then wakes
/// the writer (bump `space_event` and wake its futex): it may be waiting
/// on the position this function raised.
pub(crate) fn activate(
    writer: &WriterCtl,
    reader: &ReaderCtl,
    joining: u64,
    mode: u32,
    blocks: u64,
) -> u64 {
    let first = writer.write_seq.load(SeqCst);
    reader.pos.store(first << 1, SeqCst);
    reader.mode.store(mode, Relaxed);
    let active = with_status(joining, READER_ACTIVE);
    // Dekker pair with the writer's store of write_seq then load of state:
    // every claim the writer checks after it has committed `now` (below)
    // sees this reader.
    reader.state.store(active, SeqCst);
    fence(SeqCst);
    let now = writer.write_seq.load(SeqCst);
    // A claim the writer checked without seeing us was of a block `s <=
    // now`, and overwrote block `s - blocks`: every block after `now -
    // blocks` is intact, and claims that saw us respected `first` (or, in
    // lag mode, moved us on). Start at `first` when it is intact — a
    // writer that waited for this reader to be active and then wrote
    // before this load must not make it skip those blocks — else at the
    // oldest intact block (or later, if a lag-mode writer already moved
    // us).
    // write_seq is in shared memory: a corrupt one must not overflow here.
    let start = first.max(now.saturating_add(1).saturating_sub(blocks));
    let mut pos = reader.pos.load(SeqCst);
    while pos >> 1 < start {
        match reader.pos.compare_exchange(pos, start << 1, SeqCst, SeqCst) {
            Ok(_) => break,
            Err(seen) => pos = seen,
        }
    }
    // Only a writer dropping a dead reader changes the word meanwhile, and
    // this reader is alive.
    let settled = active | READER_SETTLED;
    reader.state.store(settled, SeqCst);
    settled
}

/// Reader: leaves the slot. Returns whether the writer may be asleep.
pub(crate) fn leave(writer: &WriterCtl, reader: &ReaderCtl, active: u64) -> bool {
    // Fails if the writer already dropped us (then the slot is free).
    let _ = reader
        .state
        .compare_exchange(active, with_status(active, READER_FREE), SeqCst, SeqCst);
    fence(SeqCst);
    writer.space_sleepers.load(SeqCst) > 0
}

/// Anyone: frees the slot of a reader found dead (its OS lock released
/// while its state still says `seen`). Fails harmlessly if the slot changed
/// meanwhile: the generation in `seen` makes a new reader's state differ.
pub(crate) fn drop_dead_reader(reader: &ReaderCtl, seen: u64) -> bool {
    reader
        .state
        .compare_exchange(seen, with_status(seen, READER_FREE), SeqCst, SeqCst)
        .is_ok()
}

/// A sleeper's side of the wake-up handshake: announces itself in
/// `sleepers`, then reads the futex word it will sleep on. The caller must
/// look at its condition again *after* this and sleep only if it still
/// holds, on the returned futex value, then call [`end_sleep`].
pub(crate) fn prepare_sleep(sleepers: &AtomicU32, event: &AtomicU32) -> u32 {
    sleepers.fetch_add(1, SeqCst);
    fence(SeqCst);
    event.load(SeqCst)
}

/// Ends what [`prepare_sleep`] began.
pub(crate) fn end_sleep(sleepers: &AtomicU32) {
    sleepers.fetch_sub(1, SeqCst);
}

/// The waker's side: changes the futex word so a sleeper that read the old
/// value does not sleep, before the caller wakes the futex.
pub(crate) fn bump(event: &AtomicU32) {
    event.fetch_add(1, SeqCst);
}

#[cfg(all(test, loom))]
mod loom_models {
    //! Run with `RUSTFLAGS="--cfg loom" cargo test -p numalab --release --lib ring::protocol`.
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::{Arc, Condvar, Mutex};
    use loom::thread;

    /// Shared memory of a tiny ring: control words and one `u64` per slot,
    /// in loom cells so that a read racing a write is reported.
    struct Ring {
        writer: WriterCtl,
        readers: Vec<ReaderCtl>,
        slots: Vec<UnsafeCell<u64>>,
        /// The futex, emulated as the kernel does it: check and sleep
        /// atomically under a lock.
        futex: (Mutex<()>, Condvar),
    }

    impl Ring {
        fn new(blocks: usize, readers: usize) -> Arc<Ring> {
            Arc::new(Ring {
                writer: WriterCtl::default(),
                readers: (0..readers).map(|_| ReaderCtl::default()).collect(),
                slots: (0..blocks).map(|_| UnsafeCell::new(u64::MAX)).collect(),
                futex: (Mutex::new(()), Condvar::new()),
            })
        }

        fn futex_wait(&self, word: &AtomicU32, expected: u32) {
            let guard = self.futex.0.lock().unwrap();
            if word.load(SeqCst) == expected {
                drop(self.futex.1.wait(guard).unwrap());
            }
        }

        fn futex_wake(&self) {
            let _guard = self.futex.0.lock().unwrap();
            self.futex.1.notify_all();
        }

        /// As `Reader::join`: activate, then wake a writer that may be
        /// waiting on the slot's old position.
        fn join(&self, slot: usize, mode: u32) {
            let joining = begin_join(&self.readers[slot]);
            let blocks = self.slots.len() as u64;
            activate(&self.writer, &self.readers[slot], joining, mode, blocks);
            bump(&self.writer.space_event);
            self.futex_wake();
        }

        /// Writes `count` blocks, sleeping on the futex when full.
        fn write(&self, count: u64) {
            let blocks = self.slots.len() as u64;
            for seq in 0..count {
                loop {
                    if check_space(&self.readers, seq, blocks) == Space::Free {
                        break;
                    }
                    let w = &self.writer;
                    let value = prepare_sleep(&w.space_sleepers, &w.space_event);
                    if check_space(&self.readers, seq, blocks) == Space::Free {
                        end_sleep(&w.space_sleepers);
                        break;
                    }
                    self.futex_wait(&w.space_event, value);
                    end_sleep(&w.space_sleepers);
                }
                let slot = &self.slots[(seq % blocks) as usize];
                slot.with_mut(|p| unsafe { *p = seq });
                if publish(&self.writer, seq) {
                    bump(&self.writer.data_event);
                    self.futex_wake();
                }
            }
            if set_writer_state(&self.writer, WRITER_FINISHED) {
                bump(&self.writer.data_event);
                self.futex_wake();
            }
        }

        /// Reads until the writer finished; returns the blocks read.
        fn read(&self, slot: usize) -> Vec<u64> {
            let reader = &self.readers[slot];
            let blocks = self.slots.len() as u64;
            let mut seen = Vec::new();
            loop {
                let take = match try_take(&self.writer, reader) {
                    // As `Reader::wait_next`.
                    Take::Empty { .. } => match finished_take(&self.writer, reader) {
                        Some(Take::Empty { .. }) => return seen,
                        Some(taken) => taken,
                        None => {
                            let w = &self.writer;
                            let value = prepare_sleep(&w.data_sleepers, &w.data_event);
                            let finished = w.state.load(SeqCst) == WRITER_FINISHED;
                            let empty = matches!(try_take_peek(w, reader), Take::Empty { .. });
                            if empty && !finished {
                                self.futex_wait(&w.data_event, value);
                            }
                            end_sleep(&w.data_sleepers);
                            continue;
                        }
                    },
                    taken => taken,
                };
                if let Take::Taken { seq, .. } = take {
                    let value = self.slots[(seq % blocks) as usize].with(|p| unsafe { *p });
                    assert_eq!(value, seq, "block {seq} overwritten while read");
                    seen.push(value);
                    if release(&self.writer, reader, seq) {
                        bump(&self.writer.space_event);
                        self.futex_wake();
                    }
                }
            }
        }
    }

    /// `try_take` without taking: is there a block?
    fn try_take_peek(writer: &WriterCtl, reader: &ReaderCtl) -> Take {
        let next = reader.pos.load(SeqCst) >> 1;
        let written = writer.write_seq.load(SeqCst);
        if next >= written {
            Take::Empty { next, written }
        } else {
            Take::Taken { seq: next, written }
        }
    }

    /// Every interleaving with up to `bound` preemptions (unbounded search
    /// does not finish in reasonable time for these models).
    fn check(bound: usize, f: impl Fn() + Sync + Send + 'static) {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(bound);
        builder.check(f);
    }

    #[test]
    fn blocking_reader_sees_every_block_once_in_order() {
        check(3, || {
            let ring = Ring::new(2, 1);
            ring.join(0, MODE_BLOCK);
            let r = ring.clone();
            let reader = thread::spawn(move || r.read(0));
            ring.write(4);
            assert_eq!(reader.join().unwrap(), vec![0, 1, 2, 3]);
        });
    }

    #[test]
    fn two_blocking_readers_both_see_everything() {
        check(2, || {
            let ring = Ring::new(2, 2);
            ring.join(0, MODE_BLOCK);
            ring.join(1, MODE_BLOCK);
            let handles: Vec<_> = (0..2)
                .map(|slot| {
                    let r = ring.clone();
                    thread::spawn(move || r.read(slot))
                })
                .collect();
            ring.write(3);
            for handle in handles {
                assert_eq!(handle.join().unwrap(), vec![0, 1, 2]);
            }
        });
    }

    #[test]
    fn lagging_reader_never_reads_an_overwritten_block() {
        check(3, || {
            let ring = Ring::new(2, 1);
            ring.join(0, MODE_LAG);
            let r = ring.clone();
            let reader = thread::spawn(move || r.read(0));
            ring.write(4);
            let seen = reader.join().unwrap();
            // In order, without repeats; gaps are the lag.
            assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
            let skipped = ring.readers[0].skipped.load(SeqCst);
            assert_eq!(seen.len() as u64 + skipped, 4, "{seen:?} + {skipped}");
        });
    }

    #[test]
    fn a_writer_that_waited_for_the_reader_loses_it_no_block() {
        check(3, || {
            let ring = Ring::new(2, 1);
            let r = ring.clone();
            let reader = thread::spawn(move || {
                r.join(0, MODE_BLOCK);
                r.read(0)
            });
            // As `Writer::wait_for_readers`: write once the reader settled.
            while !settled(ring.readers[0].state.load(SeqCst)) {
                thread::yield_now();
            }
            ring.write(3);
            assert_eq!(reader.join().unwrap(), vec![0, 1, 2]);
        });
    }

    #[test]
    fn a_reader_reads_the_blocks_committed_just_before_the_end() {
        check(3, || {
            let ring = Ring::new(4, 1);
            ring.join(0, MODE_BLOCK);
            let r = ring.clone();
            let reader = thread::spawn(move || r.read(0));
            ring.write(2);
            assert_eq!(reader.join().unwrap(), vec![0, 1]);
        });
    }

    #[test]
    fn reader_joining_mid_stream_reads_a_contiguous_tail() {
        check(3, || {
            let ring = Ring::new(2, 1);
            let r = ring.clone();
            let reader = thread::spawn(move || {
                r.join(0, MODE_BLOCK);
                r.read(0)
            });
            ring.write(3);
            let seen = reader.join().unwrap();
            // Whatever it joined at, it got every block from there on.
            if let Some(&first) = seen.first() {
                assert_eq!(seen, (first..3).collect::<Vec<_>>());
            }
        });
    }
}
