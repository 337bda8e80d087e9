//! The per-replica reader-writer lock: readers of one replica never write
//! a cache line another reader writes, so reads on many cores do not
//! contend (a distributed reader indicator, as in NR's and Calciu et al.'s
//! NUMA-aware reader-writer locks).
//!
//! Each reader slot keeps two monotonic counters, `enters` and `exits`; a
//! reader is inside while its `enters` increment is not matched by an
//! `exits` one. Threads are spread over the slots by
//! [`thread_index`](super::sync::thread_index); two threads sharing a slot
//! is correct (the counters add up), only slower. The counters double as
//! the replica's read statistics.
//!
//! Protocol (all four marked operations are `SeqCst`, a Dekker handshake):
//! a reader increments `enters` (1), then loads `writer` (2): if set, it
//! undoes its entry (counting a retry) and waits. The writer stores
//! `writer = true` (3), then for each slot loads `exits` and then `enters`
//! (4) until they are equal. Either the reader's (2) sees (3) and backs
//! off, or the writer's (4) sees (1) and waits for the matching exit, whose
//! `Release` the writer's load acquires.

use super::sync::{
    seqcst_for_loom, thread_index, AtomicBool, AtomicU64, Backoff, CachePadded, Ordering,
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
    slots: Box<[CachePadded<ReaderSlot>]>,
    mask: usize,
}

impl ReplicaLock {
    /// A lock with `slots` reader slots (rounded up to a power of two).
    pub(crate) fn new(slots: usize) -> ReplicaLock {
        let slots = slots.max(1).next_power_of_two();
        ReplicaLock {
            writer: CachePadded::new(AtomicBool::new(false)),
            slots: (0..slots).map(|_| CachePadded::default()).collect(),
            mask: slots - 1,
        }
    }

    /// Enters as a reader, waiting while a writer holds the lock.
    #[inline]
    pub(crate) fn read(&self) -> ReadGuard<'_> {
        let slot = &self.slots[thread_index() & self.mask];
        loop {
            // (1): pairs with the writer's (4).
            slot.enters.fetch_add(1, Ordering::SeqCst);
            seqcst_for_loom();
            // (2): pairs with the writer's (3); an acquire of the writer's
            // unlock, so the reader sees every write before it.
            if !self.writer.load(Ordering::SeqCst) {
                return ReadGuard { slot };
            }
            self.back_off(slot);
        }
    }

    #[cold]
    fn back_off(&self, slot: &ReaderSlot) {
        slot.retries.fetch_add(1, Ordering::Relaxed);
        slot.exits.fetch_add(1, Ordering::Release);
        let mut backoff = Backoff::new();
        while self.writer.load(Ordering::Acquire) {
            backoff.snooze();
        }
    }

    /// Takes the lock for writing: keeps new readers out and waits for the
    /// readers inside to leave. The caller must hold the replica's writers'
    /// lock (only one writer at a time).
    pub(crate) fn lock_exclusive(&self) {
        // (3)
        self.writer.store(true, Ordering::SeqCst);
        seqcst_for_loom();
        for slot in self.slots.iter() {
            let mut backoff = Backoff::new();
            loop {
                // (4): exits first, then enters; equal means no reader of
                // this slot was inside between the two loads, and any later
                // one sees (3). Acquires the readers' exits.
                let exits = slot.exits.load(Ordering::SeqCst);
                let enters = slot.enters.load(Ordering::SeqCst);
                if exits == enters {
                    break;
                }
                backoff.snooze();
            }
        }
    }

    /// Releases the lock taken with [`lock_exclusive`](Self::lock_exclusive);
    /// readers that see it see everything written before.
    pub(crate) fn unlock_exclusive(&self) {
        self.writer.store(false, Ordering::Release);
    }

    /// Reads completed or in progress (entries that did not back off).
    pub(crate) fn reads(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| {
                s.enters
                    .load(Ordering::Relaxed)
                    .saturating_sub(s.retries.load(Ordering::Relaxed))
            })
            .sum()
    }

    /// Times a reader found a writer inside and waited.
    pub(crate) fn read_waits(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.retries.load(Ordering::Relaxed))
            .sum()
    }
}

/// A reader inside a [`ReplicaLock`]; leaves on drop.
#[derive(Debug)]
pub(crate) struct ReadGuard<'a> {
    slot: &'a ReaderSlot,
}

impl Drop for ReadGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // Released to the writer's (4).
        self.slot.exits.fetch_add(1, Ordering::Release);
    }
}
