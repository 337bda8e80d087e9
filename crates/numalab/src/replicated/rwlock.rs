//! The per-replica reader-writer lock: readers of one replica never write
//! a cache line another reader writes, and while writes are rare they
//! execute no atomic read-modify-write and no fence either: entering and
//! leaving costs two loads and two plain stores. (A distributed reader
//! indicator, as in NR's and Calciu et al.'s NUMA-aware reader-writer
//! locks, made asymmetric with `membarrier(2)` as in liburcu and folly.)
//!
//! The read path is short on purpose, and short in *loads* above all. A
//! read of data that misses the caches overlaps with the reads around it
//! only as far as the core looks ahead, and on the development VM every
//! extra load that hits the L1 cache cost a loop of independent random
//! 8-byte reads about 8 % of its rate, a plain store nothing, an extra
//! instruction little (12 cost 11 %). So the fast entry loads the thread's
//! slot word and the lock's one state word, and stores twice.
//!
//! **State.** One word, changed only by writers and by the log: `WRITER`
//! (a writer holds or is taking the lock), `SLOW` (readers must fence, see
//! below) and `STALE` (log mode: the replica lags the log and must catch
//! up before it is read). Zero means "enter".
//!
//! **Slots.** Each reader slot has one word: reads completed (the high
//! bits, the read statistics) and the depth of the reads its holder is
//! inside (the low bits; nested reads count each). Only the holder writes
//! it, with plain stores: entering stores the word plus one, leaving
//! stores the word loaded at entry plus one completed read. A thread whose
//! [`thread_slot`] id is below the slot count owns that slot; other threads
//! claim one of a few overflow slots for each read with a compare-exchange
//! (a slot is free while its depth is zero). Writers scan the owned slots
//! below [`slot_high_water`] (every id handed out so far) and the overflow
//! ones, waiting on each until its depth is zero.
//!
//! **Entering an owned slot.** Raise the depth, a light barrier (a
//! compiler fence), load `state` (`SeqCst`, a plain load on x86-64). If it
//! is zero the reader is in. With only `SLOW` set it runs a `SeqCst` fence
//! and looks again, and is in if neither `WRITER` nor `STALE` is set.
//! Otherwise it leaves, and the slow entry waits for the writer (entering
//! with a fence each time) or reports the replica stale.
//!
//! - A writer that finds `SLOW` clear when it sets `WRITER` (its
//!   read-modify-write returns the previous state) runs the heavy barrier
//!   (`membarrier`: each running thread of the process executes a full
//!   fence) before scanning. For each reader, either the reader's load of
//!   `state` comes after that fence on its CPU, so it sees `WRITER` and
//!   backs off, or its load and its entry before it come before the fence,
//!   so the entry is visible to the scan.
//! - A writer that finds `SLOW` set runs no heavy barrier: readers then
//!   fence (Dekker: the writer's `SeqCst` fence against the reader's). A
//!   reader that entered without fencing loaded `state` before the writer
//!   that set `SLOW` changed it; that writer ran the heavy barrier after
//!   its change, so the reader's entry was visible to its scan, and it
//!   waited for the reader to leave before any later writer began.
//!
//! Writers switch `SLOW` (they are serialised, so they agree on it): on
//! when a write follows the previous one within [`SLOW_BELOW`], off when
//! one comes after more than [`FAST_ABOVE`] (cleared as it unlocks, so the
//! next writer finds it clear and runs the heavy barrier). Without
//! `membarrier` it is always on.
//!
//! A thread raises the high water (a `SeqCst` read-modify-write) when it
//! gets its id, before its first entry; the writer loads it after its
//! fence. So either the writer scans the thread's slot, or the thread's
//! later load of `state` sees `WRITER`.
//!
//! A read inside a read of the same lock is counted in the depth, but it
//! waits for a writer that is itself waiting for the outer read to end:
//! read closures must not read the same value again.

use std::ptr::NonNull;
use std::time::Duration;

use super::sync::{
    assign_thread_slot, asymmetric_barriers, fence, heavy_barrier, light_barrier, now_nanos,
    seqcst_for_loom, slot_high_water, thread_index, thread_slot, AtomicBool, AtomicU64, Backoff,
    CachePadded, Ordering,
};

/// A write within this long of the previous one switches readers to the
/// fence-per-read entry.
pub(crate) const SLOW_BELOW: Duration = Duration::from_micros(100);
/// A write this long after the previous one switches them back.
pub(crate) const FAST_ABOVE: Duration = Duration::from_millis(1);

/// A writer holds the lock or is taking it.
pub(crate) const WRITER: u64 = 1;
/// Readers must enter with a fence.
pub(crate) const SLOW: u64 = 2;
/// The replica lags the log (log mode): catch up before reading.
pub(crate) const STALE: u64 = 4;

/// Slots per lock for threads without an owned one, claimed per read.
const OVERFLOW_SLOTS: usize = 8;

/// Every lock has at least this many owned slots, so a reader can tell
/// that it owns one by comparing its id with a constant, without loading
/// the lock's count. (One under loom, whose models need few threads to
/// reach the overflow slots.)
pub(crate) const MIN_OWNED: usize = if cfg!(loom) { 1 } else { 64 };

/// Bits of a slot's word that count the reads its holder is inside
/// (nested reads count each).
const DEPTH: u64 = (1 << 16) - 1;
/// One completed read in a slot's word (the bits above [`DEPTH`]).
const ONE_READ: u64 = 1 << 16;

/// One reader's word and counters. Only the slot's holder writes them
/// (the thread that owns it, or that claimed an overflow slot for one
/// read), with plain stores.
#[derive(Debug, Default)]
pub(crate) struct ReaderSlot {
    /// Reads completed (above [`DEPTH`]) and reads the holder is inside
    /// (the [`DEPTH`] bits): nonzero depth keeps writers out.
    word: AtomicU64,
    /// Entries that backed off (a writer inside, or the replica stale).
    retries: AtomicU64,
    /// Entries that found a writer inside and waited.
    waits: AtomicU64,
}

impl ReaderSlot {
    /// Adds one to a counter only the slot's holder writes.
    #[inline(always)]
    fn bump(counter: &AtomicU64) {
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Raises the depth (one plain load and store); returns the guard
    /// that leaves.
    #[inline(always)]
    fn enter(&self) -> ReadGuard<'_> {
        let word = self.word.load(Ordering::Relaxed);
        self.word.store(word + 1, Ordering::Relaxed);
        ReadGuard {
            slot: self,
            exit: word + ONE_READ,
        }
    }
}

/// The replica must catch up with the log before it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stale;

/// What readers load on every entry: one line, changed only by writers.
#[derive(Debug)]
struct Head {
    /// `WRITER | SLOW | STALE`; zero lets readers in.
    state: AtomicU64,
    /// Owned reader slots (the overflow ones follow them).
    owned: usize,
}

/// A reader-writer lock with one reader slot per thread (up to the slot
/// count). Writers must be serialised by the caller.
#[derive(Debug)]
pub(crate) struct ReplicaLock {
    head: CachePadded<Head>,
    /// `owned` slots, then [`OVERFLOW_SLOTS`] overflow slots: in `own`, or
    /// in memory the lock's owner keeps beside it ([`in_place`]).
    ///
    /// [`in_place`]: ReplicaLock::in_place
    slots: NonNull<CachePadded<ReaderSlot>>,
    _own: Option<Box<[CachePadded<ReaderSlot>]>>,
    /// `SLOW` may be cleared (the heavy barrier works here).
    asymmetric: bool,
    /// When the last writer took the lock (writers only).
    last_write: CachePadded<AtomicU64>,
    /// Clear `SLOW` when this write unlocks (writers only).
    to_fast: AtomicBool,
}

// SAFETY: the slots are owned by the lock (or by its owner, for as long
// as the lock lives) and only touched through atomics.
unsafe impl Send for ReplicaLock {}
// SAFETY: as above.
unsafe impl Sync for ReplicaLock {}

impl ReplicaLock {
    /// Slots a lock with `owned` owned reader slots needs in all.
    pub(crate) fn slots_needed(owned: usize) -> usize {
        owned.max(MIN_OWNED) + OVERFLOW_SLOTS
    }

    /// A lock with `owned` owned reader slots, which it allocates.
    #[cfg_attr(not(loom), allow(dead_code))]
    pub(crate) fn new(owned: usize) -> ReplicaLock {
        let mut own: Box<[CachePadded<ReaderSlot>]> = (0..Self::slots_needed(owned))
            .map(|_| CachePadded::default())
            .collect();
        let slots = NonNull::from(&mut own[0]);
        ReplicaLock {
            _own: Some(own),
            ..Self::with_slots(owned, slots)
        }
    }

    /// A lock with `owned` owned reader slots at `slots`.
    ///
    /// # Safety
    ///
    /// `slots` points to [`slots_needed(owned)`](Self::slots_needed)
    /// initialised slots that outlive the lock and that nothing else
    /// uses.
    pub(crate) unsafe fn in_place(owned: usize, slots: NonNull<CachePadded<ReaderSlot>>) -> Self {
        Self::with_slots(owned, slots)
    }

    fn with_slots(owned: usize, slots: NonNull<CachePadded<ReaderSlot>>) -> ReplicaLock {
        let asymmetric = asymmetric_barriers();
        ReplicaLock {
            head: CachePadded::new(Head {
                state: AtomicU64::new(if asymmetric { 0 } else { SLOW }),
                owned: owned.max(MIN_OWNED),
            }),
            slots,
            _own: None,
            asymmetric,
            last_write: CachePadded::new(AtomicU64::new(0)),
            to_fast: AtomicBool::new(false),
        }
    }

    /// Slot `i` (owned ones first, then overflow).
    #[inline(always)]
    fn slot(&self, i: usize) -> &ReaderSlot {
        debug_assert!(i < Self::slots_needed(self.head.owned));
        // SAFETY: `i` is below the slot count (callers check), and the
        // slots live as long as the lock.
        unsafe { &*self.slots.as_ptr().add(i) }
    }

    /// Where the slots are (for owners that find them without a load).
    pub(crate) fn slots_ptr(&self) -> *const CachePadded<ReaderSlot> {
        self.slots.as_ptr()
    }

    /// The slot thread `id` ([`thread_slot`]) owns, if it owns one.
    #[inline(always)]
    pub(crate) fn owned_slot(&self, id: usize) -> Option<&ReaderSlot> {
        (id < self.head.owned).then(|| self.slot(id))
    }

    /// The slot the calling thread owns, if any, giving the thread its id
    /// first if it has none.
    #[inline]
    pub(crate) fn slot_of_thread(&self) -> Option<&ReaderSlot> {
        match self.owned_slot(thread_slot()) {
            Some(slot) => Some(slot),
            None => self.owned_slot(assign_thread_slot()),
        }
    }

    /// The fast entry through `slot`, which the calling thread owns (from
    /// [`owned_slot`](Self::owned_slot) with its own id): `Ok` when the
    /// state is zero. Otherwise the reader is inside its slot with the
    /// state it saw, and must pass both to
    /// [`read_contended`](Self::read_contended).
    #[inline(always)]
    pub(crate) fn read_owned<'a>(
        &'a self,
        slot: &'a ReaderSlot,
    ) -> Result<ReadGuard<'a>, (ReadGuard<'a>, u64)> {
        let guard = slot.enter();
        light_barrier();
        let state = self.head.state.load(Ordering::SeqCst);
        if state == 0 {
            Ok(guard)
        } else {
            Err((guard, state))
        }
    }

    /// [`read_owned`](Self::read_owned), then, if the state was not zero,
    /// [`read_contended`](Self::read_contended): `None` sends the reader
    /// to [`read_slow`](Self::read_slow).
    #[inline]
    pub(crate) fn read_owned_or_contended<'a>(
        &'a self,
        slot: &'a ReaderSlot,
    ) -> Option<ReadGuard<'a>> {
        match self.read_owned(slot) {
            Ok(guard) => Some(guard),
            Err((guard, state)) => self.read_contended(guard, state),
        }
    }

    /// The entry when the state was not zero: with only `SLOW` set, a
    /// fence and a second look; otherwise the reader backs off and
    /// `None` sends it to [`read_slow`](Self::read_slow).
    #[inline(never)]
    pub(crate) fn read_contended<'a>(
        &'a self,
        guard: ReadGuard<'a>,
        state: u64,
    ) -> Option<ReadGuard<'a>> {
        if state & (WRITER | STALE) == 0 {
            // Pairs with the writer's fence after setting WRITER.
            fence(Ordering::SeqCst);
            if self.head.state.load(Ordering::SeqCst) & (WRITER | STALE) == 0 {
                return Some(guard);
            }
        }
        ReaderSlot::bump(&guard.slot.retries);
        drop(guard);
        None
    }

    /// Enters as a reader through `owned` (the calling thread's owned
    /// slot, if it has one) or an overflow slot claimed for this read,
    /// waiting while a writer holds the lock. `Err(Stale)` if the replica
    /// is marked stale, unless `stale_ok` (the caller has just caught the
    /// replica up to every write completed before its read began).
    #[cold]
    #[inline(never)]
    pub(crate) fn read_slow<'a>(
        &'a self,
        owned: Option<&'a ReaderSlot>,
        stale_ok: bool,
    ) -> Result<ReadGuard<'a>, Stale> {
        let blocking = if stale_ok { WRITER } else { WRITER | STALE };
        loop {
            let guard = match owned {
                Some(slot) => {
                    let guard = slot.enter();
                    // Pairs with the writer's fence after setting WRITER.
                    fence(Ordering::SeqCst);
                    guard
                }
                None => self.claim_overflow(),
            };
            let state = self.head.state.load(Ordering::SeqCst);
            if state & blocking == 0 {
                return Ok(guard);
            }
            let slot = guard.slot;
            ReaderSlot::bump(&slot.retries);
            if state & blocking & STALE != 0 {
                drop(guard);
                return Err(Stale);
            }
            ReaderSlot::bump(&slot.waits);
            drop(guard);
            self.wait_for_writer();
        }
    }

    /// Claims a free overflow slot (depth zero) by raising its depth (a
    /// `SeqCst` compare-exchange, which is also the entry's fence); it is
    /// the caller's until the guard drops.
    fn claim_overflow(&self) -> ReadGuard<'_> {
        let start = thread_index() % OVERFLOW_SLOTS;
        let mut backoff = Backoff::new();
        loop {
            for k in 0..OVERFLOW_SLOTS {
                let slot = self.slot(self.head.owned + (start + k) % OVERFLOW_SLOTS);
                // Acquire pairs with the previous holder's exit (Release):
                // its counter updates are visible.
                let word = slot.word.load(Ordering::Acquire);
                if word & DEPTH == 0
                    && slot
                        .word
                        .compare_exchange(word, word + 1, Ordering::SeqCst, Ordering::Relaxed)
                        .is_ok()
                {
                    seqcst_for_loom();
                    return ReadGuard {
                        slot,
                        exit: word + ONE_READ,
                    };
                }
            }
            backoff.snooze();
        }
    }

    fn wait_for_writer(&self) {
        let mut backoff = Backoff::new();
        while self.head.state.load(Ordering::Acquire) & WRITER != 0 {
            backoff.snooze();
        }
    }

    /// Takes the lock for writing: keeps new readers out and waits for the
    /// readers inside to leave. The caller must be the only writer.
    pub(crate) fn lock_exclusive(&self) {
        Self::lock_exclusive_all(std::iter::once(self));
    }

    /// Takes several locks for writing at once (one heavy barrier for all).
    pub(crate) fn lock_exclusive_all<'a>(locks: impl Iterator<Item = &'a ReplicaLock> + Clone) {
        let now = now_nanos();
        let mut heavy = false;
        for lock in locks.clone() {
            let before = lock.head.state.fetch_or(WRITER, Ordering::SeqCst);
            debug_assert_eq!(before & WRITER, 0, "writers are serialised");
            let previous = lock.last_write.swap(now, Ordering::Relaxed);
            // The first write has no previous one: as if long ago.
            let gap = match previous {
                0 => u64::MAX,
                previous => now.saturating_sub(previous),
            };
            if before & SLOW == 0 {
                // Readers may be entering with the light barrier.
                heavy = true;
                if gap < SLOW_BELOW.as_nanos() as u64 {
                    lock.head.state.fetch_or(SLOW, Ordering::SeqCst);
                }
            } else if lock.asymmetric && gap > FAST_ABOVE.as_nanos() as u64 {
                lock.to_fast.store(true, Ordering::Relaxed);
            }
        }
        fence(Ordering::SeqCst);
        if heavy {
            heavy_barrier();
        }
        // After the fence: every thread that may be inside has an id below.
        let high = slot_high_water();
        for lock in locks {
            let owned = 0..high.min(lock.head.owned);
            let overflow = lock.head.owned..Self::slots_needed(lock.head.owned);
            for slot in owned.chain(overflow).map(|i| lock.slot(i)) {
                let mut backoff = Backoff::new();
                // Pairs with the readers' Release exits.
                while slot.word.load(Ordering::SeqCst) & DEPTH != 0 {
                    backoff.snooze();
                }
            }
        }
    }

    /// Releases the lock; readers that see it see everything written
    /// before.
    pub(crate) fn unlock_exclusive(&self) {
        let clear = if self.to_fast.swap(false, Ordering::Relaxed) {
            // The next writer finds SLOW clear and runs the heavy barrier.
            WRITER | SLOW
        } else {
            WRITER
        };
        self.head.state.fetch_and(!clear, Ordering::Release);
    }

    /// Whether a reader inside should step out: a writer holds or is
    /// taking the lock, or the replica is stale (one load).
    #[inline(always)]
    pub(crate) fn must_step_out(&self) -> bool {
        self.head.state.load(Ordering::SeqCst) & (WRITER | STALE) != 0
    }

    /// Marks the replica stale: readers back off with [`Stale`] until
    /// [`clear_stale`](Self::clear_stale).
    pub(crate) fn set_stale(&self) {
        self.head.state.fetch_or(STALE, Ordering::SeqCst);
        seqcst_for_loom();
    }

    /// Clears the stale mark. Only with the lock held for writing (no
    /// reader can enter between this and a re-mark).
    pub(crate) fn clear_stale(&self) {
        self.head.state.fetch_and(!STALE, Ordering::SeqCst);
        seqcst_for_loom();
    }

    /// Whether the replica is marked stale.
    pub(crate) fn is_stale(&self) -> bool {
        self.head.state.load(Ordering::SeqCst) & STALE != 0
    }

    fn all_slots(&self) -> impl Iterator<Item = &ReaderSlot> {
        (0..Self::slots_needed(self.head.owned)).map(|i| self.slot(i))
    }

    /// Reads completed or in progress (entries that did not back off).
    pub(crate) fn reads(&self) -> u64 {
        self.all_slots()
            .map(|s| {
                let word = s.word.load(Ordering::Relaxed);
                ((word >> DEPTH.count_ones()) + (word & DEPTH))
                    .saturating_sub(s.retries.load(Ordering::Relaxed))
            })
            .sum()
    }

    /// Times a reader found a writer inside and waited.
    pub(crate) fn read_waits(&self) -> u64 {
        self.all_slots()
            .map(|s| s.waits.load(Ordering::Relaxed))
            .sum()
    }
}

/// A reader inside a [`ReplicaLock`]; leaves on drop: its slot's word
/// gets the value it had before the entry plus one completed read (a
/// plain store: only the holder writes the word). Release: the reader's
/// accesses happen before the writer's, which acquires this (and the next
/// holder of an overflow slot sees the counters).
#[derive(Debug)]
pub(crate) struct ReadGuard<'a> {
    slot: &'a ReaderSlot,
    exit: u64,
}

impl ReadGuard<'_> {
    /// Leaves, counting `reads` completed reads: a held reader's exit.
    /// Held readers need not leave in the order they entered (two on one
    /// thread, dropped first-in first-out), so this takes one off the
    /// depth the slot has now instead of restoring the word seen at
    /// entry. Only the slot's holder writes the word, so the plain load
    /// and store are exact.
    pub(crate) fn leave_counting(self, reads: u64) {
        let word = self.slot.word.load(Ordering::Relaxed);
        self.slot
            .word
            .store(word - 1 + reads * ONE_READ, Ordering::Release);
        std::mem::forget(self);
    }
}

impl Drop for ReadGuard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.slot.word.store(self.exit, Ordering::Release);
    }
}
