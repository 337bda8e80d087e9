//! The per-replica reader-writer lock: readers of one replica never write
//! a cache line another reader writes, and on Linux ≥ 4.14 they execute no
//! atomic read-modify-write and no fence either, so a read costs a few
//! plain loads and stores and does not stall the memory accesses around
//! it. (A distributed reader indicator, as in NR's and Calciu et al.'s
//! NUMA-aware reader-writer locks, made asymmetric with `membarrier(2)` as
//! in liburcu and folly.)
//!
//! Each reader slot keeps two monotonic counters, `enters` and `exits`; a
//! reader is inside while its `enters` increment is not matched by an
//! `exits` one. The counters double as the read statistics.
//!
//! **Owned slots.** A thread whose [`thread_slot`] id is below the slot
//! count owns that slot alone and updates it with plain stores. Entering:
//! store `enters + 1`, a light barrier (compiler fence), load `writer`
//! (`Acquire`): if set, leave (`exits + 1`, `Release`) and wait. The writer
//! stores `writer = true`, then runs the heavy barrier (`membarrier`: every
//! running thread of the process executes a full fence), then waits until
//! each slot's `exits` (`Acquire`), then `enters`, are equal. The barrier
//! pair orders like two `SeqCst` fences: either the reader's load sees the
//! flag, or the writer's loads see the reader's entry and wait for its
//! exit, whose `Release` the writer acquires.
//!
//! **Shared slot.** Threads beyond the slot count, and every thread when
//! `membarrier` is unavailable, share slots and use `SeqCst`
//! read-modify-writes instead (a Dekker handshake with the writer's
//! `SeqCst` store and loads).
//!
//! Why "exits, then enters, equal" suffices: every exit the writer's load
//! counts has its entry before it (same thread, `Release`/`Acquire`), so
//! the entries it then loads include them; equal counts mean the entries
//! seen are exactly those whose exits were seen, so no reader counted as
//! entered is still inside.

use super::sync::{
    asymmetric_barriers, heavy_barrier, light_barrier, seqcst_for_loom, thread_slot, AtomicBool,
    AtomicU64, Backoff, CachePadded, Ordering,
};

#[derive(Debug, Default)]
struct ReaderSlot {
    enters: AtomicU64,
    exits: AtomicU64,
    retries: AtomicU64,
}

/// A reader-writer lock with one reader slot per thread (up to the slot
/// count). Writers must be serialised by the caller.
#[derive(Debug)]
pub(crate) struct ReplicaLock {
    writer: CachePadded<AtomicBool>,
    /// Owned slots may be used (the heavy barrier works here).
    asymmetric: bool,
    slots: Box<[CachePadded<ReaderSlot>]>,
    /// For threads without an owned slot.
    shared: CachePadded<ReaderSlot>,
}

impl ReplicaLock {
    /// A lock with `slots` owned reader slots.
    pub(crate) fn new(slots: usize) -> ReplicaLock {
        ReplicaLock {
            writer: CachePadded::new(AtomicBool::new(false)),
            asymmetric: asymmetric_barriers(),
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

    /// As [`read`](Self::read), with the calling thread's owned slot (from
    /// [`slot_of_thread`](Self::slot_of_thread) on this thread) or `None`.
    #[inline(always)]
    pub(crate) fn read_in(&self, owned: Option<usize>) -> ReadGuard<'_> {
        if let Some(id) = owned {
            let slot = &self.slots[id];
            loop {
                // Only this thread writes its slot's counters.
                let enters = slot.enters.load(Ordering::Relaxed);
                slot.enters.store(enters + 1, Ordering::Relaxed);
                // Pairs with the writer's heavy barrier.
                light_barrier();
                // Acquire: pairs with `unlock_exclusive`, so the reader
                // sees every write made under the lock.
                if !self.writer.load(Ordering::Acquire) {
                    return ReadGuard { slot, owned: true };
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
                // Pairs with the writer's SeqCst store and loads.
                slot.enters.fetch_add(1, Ordering::SeqCst);
                seqcst_for_loom();
                if !self.writer.load(Ordering::SeqCst) {
                    return ReadGuard { slot, owned: false };
                }
                self.back_off(slot, false);
            }
        }
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
        while self.writer.load(Ordering::Acquire) {
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
        let mut asymmetric = false;
        for lock in locks.clone() {
            lock.writer.store(true, Ordering::SeqCst);
            asymmetric |= lock.asymmetric;
        }
        seqcst_for_loom();
        if asymmetric {
            heavy_barrier();
        }
        for lock in locks {
            for slot in lock.slots.iter().map(|s| &**s).chain([&*lock.shared]) {
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
        self.writer.store(false, Ordering::Release);
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
