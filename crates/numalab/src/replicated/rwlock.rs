//! The per-replica reader-writer lock: readers of one replica never write
//! a cache line another reader writes, and while writes are rare they
//! execute no atomic read-modify-write and no fence either, so a read
//! costs a few plain loads and stores. (A distributed reader indicator, as
//! in NR's and Calciu et al.'s NUMA-aware reader-writer locks, made
//! asymmetric with `membarrier(2)` as in liburcu and folly.)
//!
//! Each reader slot keeps two monotonic counters, `enters` and `exits`; a
//! reader is inside while its `enters` increment is not matched by an
//! `exits` one. The counters double as the read statistics. A thread whose
//! [`thread_slot`] id is below the slot count owns that slot alone and
//! updates it with plain stores; other threads share one slot and use
//! read-modify-writes.
//!
//! **Entering an owned slot.** Store `enters + 1`, then a barrier, then
//! load `writer` (`Acquire`): if set, leave (`exits + 1`, `Release`) and
//! wait. The barrier depends on the lock's `fast` flag:
//!
//! - fast (writes are rare): a light barrier (a compiler fence), and the
//!   reader checks `fast` again after loading `writer`. Every writer that
//!   may have fast readers runs the heavy barrier (`membarrier`: each
//!   running thread of the process executes a full fence) between storing
//!   `writer = true` and scanning the slots. Either a reader's loads come
//!   after that fence on its CPU (so it sees `writer` set, or `fast`
//!   cleared by an earlier writer, and backs off), or they and its entry
//!   come before it (so the entry is visible to the scan).
//! - slow (writes are frequent, so interrupting every reader's CPU per
//!   write would cost them more than a fence per read): a `SeqCst` fence,
//!   and the writer stores `writer` then runs a `SeqCst` fence before its
//!   scan (a Dekker handshake).
//!
//! Writers switch the flag (they are serialised, so they agree on it): to
//! slow when a write follows the previous one within [`SLOW_BELOW`] (that
//! write still runs the heavy barrier, for readers that saw fast), back to
//! fast when one comes after more than [`FAST_ABOVE`] (set as it unlocks,
//! so every later writer runs the heavy barrier).
//!
//! **Scanning.** Writers scan only the owned slots threads have used (a
//! thread's first read through its slot raises `used`, then fences), and
//! the shared one. For each, the writer loads `exits` (`Acquire`), then
//! `enters`, until they are equal: every exit it counts has its entry
//! before it (same thread), so the entries it then loads include them, and
//! equal counts mean no reader counted as entered is still inside.

use std::time::Duration;

use super::sync::{
    asymmetric_barriers, fence, heavy_barrier, light_barrier, now_nanos, seqcst_for_loom,
    thread_slot, AtomicBool, AtomicU64, AtomicUsize, Backoff, CachePadded, Ordering,
};

/// A write within this long of the previous one switches readers to the
/// fence-per-read entry.
pub(crate) const SLOW_BELOW: Duration = Duration::from_micros(100);
/// A write this long after the previous one switches them back.
pub(crate) const FAST_ABOVE: Duration = Duration::from_millis(1);

#[derive(Debug, Default)]
struct ReaderSlot {
    enters: AtomicU64,
    exits: AtomicU64,
    retries: AtomicU64,
}

/// What readers load on every entry: kept on one line, written only by
/// writers.
#[derive(Debug)]
struct Flags {
    writer: AtomicBool,
    /// Owned-slot readers may enter with the light barrier.
    fast: AtomicBool,
    /// Owned slots below this have been used; writers scan only those.
    used: AtomicUsize,
}

/// A reader-writer lock with one reader slot per thread (up to the slot
/// count). Writers must be serialised by the caller.
#[derive(Debug)]
pub(crate) struct ReplicaLock {
    flags: CachePadded<Flags>,
    /// Owned slots may be used (the heavy barrier works here).
    asymmetric: bool,
    /// When the last writer took the lock (writers only).
    last_write: CachePadded<AtomicU64>,
    /// Set `fast` when this write unlocks (writers only).
    to_fast: AtomicBool,
    slots: Box<[CachePadded<ReaderSlot>]>,
    /// For threads without an owned slot.
    shared: CachePadded<ReaderSlot>,
}

impl ReplicaLock {
    /// A lock with `slots` owned reader slots.
    pub(crate) fn new(slots: usize) -> ReplicaLock {
        let asymmetric = asymmetric_barriers();
        ReplicaLock {
            flags: CachePadded::new(Flags {
                writer: AtomicBool::new(false),
                fast: AtomicBool::new(asymmetric),
                used: AtomicUsize::new(0),
            }),
            asymmetric,
            last_write: CachePadded::new(AtomicU64::new(0)),
            to_fast: AtomicBool::new(false),
            slots: (0..slots.max(1)).map(|_| CachePadded::default()).collect(),
            shared: CachePadded::default(),
        }
    }

    /// The slot the calling thread owns, if it owns one: its own to use
    /// for as long as it lives.
    #[inline]
    pub(crate) fn slot_of_thread(&self) -> Option<usize> {
        let id = thread_slot();
        (self.asymmetric && id < self.slots.len()).then_some(id)
    }

    /// Enters as a reader with the calling thread's owned slot (from
    /// [`slot_of_thread`](Self::slot_of_thread) on this thread) or `None`,
    /// waiting while a writer holds the lock.
    #[inline(always)]
    pub(crate) fn read_in(&self, owned: Option<usize>) -> ReadGuard<'_> {
        let flags = &*self.flags;
        if let Some(id) = owned {
            let slot = &self.slots[id];
            if id >= flags.used.load(Ordering::Relaxed) {
                self.first_use(id);
            }
            loop {
                // Only this thread writes its slot's counters.
                let enters = slot.enters.load(Ordering::Relaxed);
                slot.enters.store(enters + 1, Ordering::Relaxed);
                if flags.fast.load(Ordering::Relaxed) {
                    light_barrier();
                    // Acquire: pairs with `unlock_exclusive`, so the reader
                    // sees every write made under the lock.
                    if !flags.writer.load(Ordering::Acquire) && flags.fast.load(Ordering::Relaxed) {
                        return ReadGuard { slot, owned: true };
                    }
                } else {
                    fence(Ordering::SeqCst);
                    if !flags.writer.load(Ordering::Acquire) {
                        return ReadGuard { slot, owned: true };
                    }
                }
                self.back_off(slot, true);
            }
        } else {
            let slot = if self.asymmetric {
                &self.shared
            } else {
                &self.slots[thread_slot() % self.slots.len()]
            };
            loop {
                // Pairs with the writer's SeqCst store and fence.
                slot.enters.fetch_add(1, Ordering::SeqCst);
                seqcst_for_loom();
                if !flags.writer.load(Ordering::SeqCst) {
                    return ReadGuard { slot, owned: false };
                }
                self.back_off(slot, false);
            }
        }
    }

    /// A thread's first read through its owned slot: makes writers scan
    /// it. The fence pairs with the writer's fence between storing
    /// `writer` and loading `used`: either the writer sees this slot, or
    /// this thread's coming load of `writer` sees the writer.
    #[cold]
    fn first_use(&self, id: usize) {
        self.flags.used.fetch_max(id + 1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    #[cold]
    fn back_off(&self, slot: &ReaderSlot, owned: bool) {
        if owned {
            let retries = slot.retries.load(Ordering::Relaxed);
            slot.retries.store(retries + 1, Ordering::Relaxed);
        } else {
            slot.retries.fetch_add(1, Ordering::Relaxed);
        }
        leave(slot, owned);
        let mut backoff = Backoff::new();
        while self.flags.writer.load(Ordering::Acquire) {
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
            lock.flags.writer.store(true, Ordering::SeqCst);
            let previous = lock.last_write.swap(now, Ordering::Relaxed);
            // The first write has no previous one: as if long ago.
            let gap = match previous {
                0 => u64::MAX,
                previous => now.saturating_sub(previous),
            };
            if lock.flags.fast.load(Ordering::Relaxed) {
                // Readers may be entering with the light barrier.
                heavy = true;
                if gap < SLOW_BELOW.as_nanos() as u64 {
                    lock.flags.fast.store(false, Ordering::Relaxed);
                }
            } else if lock.asymmetric && gap > FAST_ABOVE.as_nanos() as u64 {
                lock.to_fast.store(true, Ordering::Relaxed);
            }
        }
        fence(Ordering::SeqCst);
        if heavy {
            heavy_barrier();
        }
        for lock in locks {
            let used = lock.flags.used.load(Ordering::SeqCst);
            let owned = lock.slots[..used.min(lock.slots.len())].iter();
            for slot in owned.map(|s| &**s).chain([&*lock.shared]) {
                let mut backoff = Backoff::new();
                loop {
                    // Exits first, then enters (see the module doc);
                    // Acquire pairs with the readers' exits.
                    let exits = slot.exits.load(Ordering::SeqCst);
                    let enters = slot.enters.load(Ordering::SeqCst);
                    if exits == enters {
                        break;
                    }
                    backoff.snooze();
                }
            }
        }
    }

    /// Releases the lock; readers that see it see everything written
    /// before.
    pub(crate) fn unlock_exclusive(&self) {
        let flags = &*self.flags;
        if self.to_fast.swap(false, Ordering::Relaxed) {
            // Before the release: the next writer sees it (writers are
            // serialised) and runs the heavy barrier.
            flags.fast.store(true, Ordering::Relaxed);
        }
        flags.writer.store(false, Ordering::Release);
    }

    fn all_slots(&self) -> impl Iterator<Item = &ReaderSlot> {
        self.slots.iter().map(|s| &**s).chain([&*self.shared])
    }

    /// Reads completed or in progress (entries that did not back off).
    pub(crate) fn reads(&self) -> u64 {
        self.all_slots()
            .map(|s| {
                s.enters
                    .load(Ordering::Relaxed)
                    .saturating_sub(s.retries.load(Ordering::Relaxed))
            })
            .sum()
    }

    /// Times a reader found a writer inside and waited.
    pub(crate) fn read_waits(&self) -> u64 {
        self.all_slots()
            .map(|s| s.retries.load(Ordering::Relaxed))
            .sum()
    }
}

#[inline(always)]
fn leave(slot: &ReaderSlot, owned: bool) {
    // Release: the reader's accesses happen before the writer's, which
    // acquires this.
    if owned {
        let exits = slot.exits.load(Ordering::Relaxed);
        slot.exits.store(exits + 1, Ordering::Release);
    } else {
        slot.exits.fetch_add(1, Ordering::Release);
    }
}

/// A reader inside a [`ReplicaLock`]; leaves on drop.
#[derive(Debug)]
pub(crate) struct ReadGuard<'a> {
    slot: &'a ReaderSlot,
    owned: bool,
}

impl Drop for ReadGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        leave(self.slot, self.owned);
    }
}
