//! Log mode: node replication (Calciu et al., "Black-box Concurrent Data
//! Structures for NUMA Architectures", ASPLOS'17).
//!
//! Writes become entries of one shared circular log. Each replica has a
//! combiner lock and a few request slots: a writer puts its operation in a
//! slot of its replica, and whichever thread holds (or takes) the
//! replica's combiner lock collects every pending request, appends them to
//! the log as one batch, replays the log on its replica up to the end of
//! the batch, and hands each request its result (flat combining). Other
//! replicas replay lazily: a replay that raises the log's `ctail`
//! (entries completed somewhere) marks every replica whose `ltail`
//! (entries applied) is below it stale, in its reader lock's state word;
//! a read that finds the mark catches its replica up to `ctail` first.
//! Reads of a current replica thus load nothing of the log: the lock's
//! state word, which they load anyway, says all.
//!
//! Positions are logical and only grow; entry `i` lives in slot
//! `i % capacity` and is published by storing `seq = i + 1` (`Release`)
//! after its operation is written. A writer may reserve position `i` only
//! when every replica has applied `i - capacity` (`min ltail`), so a slot
//! is never overwritten while a replica still needs it. When the log is
//! full, the combiner replays its own replica and then replays lagging
//! replicas itself (taking their combiner locks when free) instead of
//! waiting for their threads: a replica that lags is helped forward.
//!
//! Linearizability: a write's position in the log is its order. A
//! replay raises `ctail` and marks the lagging replicas stale before
//! releasing the replica's write lock, so a reader that sees a write's
//! effect finds every replica that lacks it marked (or caught up); a
//! request is marked done only after that, so a read that starts after a
//! write returns finds its replica marked and catches it up to include
//! it. A mark is cleared only by a replay of that replica, under its
//! write lock, when its `ltail` has reached `ctail`; a write completing
//! meanwhile marks it again (`ctail` is raised before the marks, and the
//! clearing replay looks at `ctail` after clearing).

use std::sync::Arc;

use super::sync::{
    seqcst_for_loom, thread_index, AbortOnUnwind, AtomicBool, AtomicU8, AtomicUsize, Backoff,
    CachePadded, Ordering, UnsafeCell,
};
use super::Replica;

/// A write operation, type-erased so one log holds writes of any closure
/// and result type.
pub(crate) trait Op<T>: Send + Sync {
    /// Applies to a replica, discarding the result.
    fn apply(&self, data: &mut T);
    /// Applies to the issuing replica, keeping the result for the issuer.
    fn apply_and_keep(&self, data: &mut T);
}

struct WriteOp<F, R> {
    f: F,
    /// Written once, by the issuing replica's replay, before the request
    /// is marked done (`Release`); read by the issuer after it sees done
    /// (`Acquire`).
    result: UnsafeCell<Option<R>>,
}

// SAFETY: `f` is shared between replicas' replays (F: Sync); `result` is
// accessed by one thread at a time under the done handshake above and
// moved across threads (R: Send).
unsafe impl<F: Sync, R: Send> Sync for WriteOp<F, R> {}

impl<T, F, R> Op<T> for WriteOp<F, R>
where
    F: Fn(&mut T) -> R + Send + Sync,
    R: Send,
{
    fn apply(&self, data: &mut T) {
        let _ = (self.f)(data);
    }

    fn apply_and_keep(&self, data: &mut T) {
        let result = (self.f)(data);
        // SAFETY: only the issuing replica's replay writes the result, once
        // per operation, and the issuer reads it only after the done flag.
        self.result.with_mut(|slot| unsafe { *slot = Some(result) });
    }
}

type OpRef<T> = Arc<dyn Op<T>>;

/// One log slot.
struct Entry<T> {
    /// `position + 1` once the entry at `position` is written.
    seq: AtomicUsize,
    /// The operation, the replica that issued it and its request slot.
    op: UnsafeCell<Option<(OpRef<T>, u32, u32)>>,
}

const FREE: u8 = 0;
const FILLING: u8 = 1;
const PENDING: u8 = 2;
const TAKEN: u8 = 3;
const DONE: u8 = 4;

/// A flat-combining request slot. States: FREE → FILLING (a writer
/// claimed it) → PENDING (op written) → TAKEN (a combiner moved the op to
/// the log) → DONE (the result is in the op) → FREE.
struct Request<T> {
    state: AtomicU8,
    op: UnsafeCell<Option<OpRef<T>>>,
}

struct LogReplica<T> {
    combiner: CachePadded<AtomicBool>,
    /// Log positions below this are applied to the replica. Written only
    /// by the combiner lock's holder (`Release`); read by readers and by
    /// writers computing the log's head (`Acquire`).
    ltail: CachePadded<AtomicUsize>,
    requests: Box<[CachePadded<Request<T>>]>,
}

pub(crate) struct Log<T> {
    entries: Box<[Entry<T>]>,
    mask: usize,
    /// The next position to reserve.
    tail: CachePadded<AtomicUsize>,
    /// Every position below has been applied on some replica, including
    /// every write that has returned.
    ctail: CachePadded<AtomicUsize>,
    replicas: Box<[LogReplica<T>]>,
}

impl<T> Log<T> {
    pub(crate) fn new(replicas: usize, entries: usize, requests: usize) -> Log<T> {
        let requests = requests.max(1);
        let capacity = entries.max(2 * requests).next_power_of_two();
        Log {
            entries: (0..capacity)
                .map(|_| Entry {
                    seq: AtomicUsize::new(0),
                    op: UnsafeCell::new(None),
                })
                .collect(),
            mask: capacity - 1,
            tail: CachePadded::new(AtomicUsize::new(0)),
            ctail: CachePadded::new(AtomicUsize::new(0)),
            replicas: (0..replicas)
                .map(|_| LogReplica {
                    combiner: CachePadded::new(AtomicBool::new(false)),
                    ltail: CachePadded::new(AtomicUsize::new(0)),
                    requests: (0..requests)
                        .map(|_| {
                            CachePadded::new(Request {
                                state: AtomicU8::new(FREE),
                                op: UnsafeCell::new(None),
                            })
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// Brings replica `r` up to every write completed before the call
    /// (`ctail` now), and settles its stale mark: called by a read that
    /// found the replica marked stale, and by `Replicated::sync`.
    #[cold]
    pub(crate) fn catch_up(&self, r: usize, data: &[Replica<T>]) {
        // Pairs with replay's `fetch_max` (SeqCst): a write that returned
        // before this load is below `target`.
        seqcst_for_loom();
        let target = self.ctail.load(Ordering::SeqCst);
        let mut backoff = Backoff::new();
        loop {
            if self.try_lock(r) {
                // Entries below ctail are all written: no waiting on a
                // writer that has reserved but not yet published.
                self.replay(r, target, data);
                self.unlock(r);
                return;
            }
            // Its combiner is replaying; it will pass `target`.
            if self.replicas[r].ltail.load(Ordering::Acquire) >= target {
                return;
            }
            backoff.snooze();
        }
    }

    fn try_lock(&self, r: usize) -> bool {
        let lock = &self.replicas[r].combiner;
        // Acquire pairs with `unlock`'s Release: the previous holder's
        // ltail and request updates are visible.
        !lock.load(Ordering::Relaxed)
            && lock
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    fn unlock(&self, r: usize) {
        self.replicas[r].combiner.store(false, Ordering::Release);
    }

    /// Issues `f` from replica `r` and waits for its result.
    pub(crate) fn write<F, R>(&self, r: usize, f: F, data: &[Replica<T>]) -> R
    where
        F: Fn(&mut T) -> R + Send + Sync + 'static,
        R: Send + 'static,
    {
        let op = Arc::new(WriteOp {
            f,
            result: UnsafeCell::new(None),
        });
        let requests = &self.replicas[r].requests;
        let start = thread_index();
        let mut backoff = Backoff::new();
        let request = 'claim: loop {
            for k in 0..requests.len() {
                let request = &requests[(start + k) % requests.len()];
                // Acquire pairs with the previous owner's FREE (Release):
                // its use of the slot is over.
                if request
                    .state
                    .compare_exchange(FREE, FILLING, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    break 'claim request;
                }
            }
            backoff.snooze();
        };
        let erased: OpRef<T> = op.clone();
        // SAFETY: FILLING gives this thread the slot alone.
        request.op.with_mut(|slot| unsafe { *slot = Some(erased) });
        // Release: a combiner that sees PENDING sees the op.
        request.state.store(PENDING, Ordering::Release);
        let mut backoff = Backoff::new();
        // Acquire pairs with replay's DONE (Release): the result is there.
        while request.state.load(Ordering::Acquire) != DONE {
            if self.try_lock(r) {
                self.combine(r, data);
                self.unlock(r);
            } else {
                backoff.snooze();
            }
        }
        // SAFETY: DONE: the replay that wrote the result is finished with
        // it, and no one else touches it.
        let result = op
            .result
            .with_mut(|slot| unsafe { (*slot).take() })
            .expect("a done request has its result");
        request.state.store(FREE, Ordering::Release);
        result
    }

    /// Holding `r`'s combiner lock: appends every pending request of `r`
    /// to the log and replays `r` past them.
    fn combine(&self, r: usize, data: &[Replica<T>]) {
        let replica = &self.replicas[r];
        let mut batch: Vec<(OpRef<T>, u32)> = Vec::new();
        for (i, request) in replica.requests.iter().enumerate() {
            if request.state.load(Ordering::Acquire) == PENDING {
                // SAFETY: PENDING and the combiner lock give this thread
                // the slot's op; its writer waits for DONE.
                let op = request.op.with_mut(|slot| unsafe { (*slot).take() });
                request.state.store(TAKEN, Ordering::Relaxed);
                batch.push((op.expect("a pending request has an op"), i as u32));
            }
        }
        if batch.is_empty() {
            return;
        }
        let count = batch.len();
        let start = self.reserve(r, count, data);
        for (k, (op, slot)) in batch.into_iter().enumerate() {
            let position = start + k;
            let entry = &self.entries[position & self.mask];
            // SAFETY: every replica has applied `position - capacity`
            // (checked by `reserve`), so no replay reads this slot; the
            // reservation makes this thread its only writer. The previous
            // lap's op is dropped here.
            entry
                .op
                .with_mut(|cell| unsafe { *cell = Some((op, r as u32, slot)) });
            // Release: a replay that sees the sequence sees the op.
            entry.seq.store(position + 1, Ordering::Release);
        }
        let counters = &data[r].counters;
        counters
            .writes
            .fetch_add(count as u64, super::sync::Ordering::Relaxed);
        counters.combines.fetch_add(1, Ordering::Relaxed);
        self.replay(r, start + count, data);
    }

    /// Reserves `count` positions, helping lagging replicas forward while
    /// the log is full. The caller holds `r`'s combiner lock.
    fn reserve(&self, r: usize, count: usize, data: &[Replica<T>]) -> usize {
        let capacity = self.entries.len();
        let mut backoff = Backoff::new();
        loop {
            let tail = self.tail.load(Ordering::Acquire);
            // Acquire pairs with replay's ltail (Release): every replica
            // is done reading slots below its ltail.
            let head = self
                .replicas
                .iter()
                .map(|q| q.ltail.load(Ordering::Acquire))
                .min()
                .unwrap_or(tail);
            if tail + count <= head + capacity {
                if self
                    .tail
                    .compare_exchange(tail, tail + count, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return tail;
                }
                continue;
            }
            // Full. Positions below `tail` are reserved, and their writers
            // publish them without waiting, so replaying up to `tail`
            // terminates. Our own replica first (we hold its lock) …
            self.replay(r, tail, data);
            // … then every replica still in the way, if its lock is free.
            let needed = tail + count - capacity;
            for q in 0..self.replicas.len() {
                if q != r
                    && self.replicas[q].ltail.load(Ordering::Acquire) < needed
                    && self.try_lock(q)
                {
                    let node = data[q].node;
                    let applied = if node == data[r].node {
                        self.replay(q, tail, data)
                    } else {
                        // Memory the replayed writes allocate belongs on
                        // the helped replica's node.
                        super::storage::on_node(node, || self.replay(q, tail, data))
                    };
                    data[q]
                        .counters
                        .helped
                        .fetch_add(applied as u64, Ordering::Relaxed);
                    self.unlock(q);
                }
            }
            backoff.snooze();
        }
    }

    /// Applies log positions `ltail..upto` to replica `q`, whose combiner
    /// lock the caller holds, and marks the other replicas that lag
    /// `upto` stale; returns how many entries it applied. With nothing to
    /// apply it still settles `q`'s stale mark (clears it if `q` has
    /// every completed write).
    fn replay(&self, q: usize, upto: usize, data: &[Replica<T>]) -> usize {
        let log_replica = &self.replicas[q];
        let lock = data[q].lock();
        // Only the lock holder writes ltail.
        let from = log_replica.ltail.load(Ordering::Relaxed);
        if from >= upto && !lock.is_stale() {
            return 0;
        }
        let upto = upto.max(from);
        let mut done = Vec::new();
        {
            let mut exclusive = data[q].exclusive();
            let _abort = AbortOnUnwind;
            for position in from..upto {
                let entry = &self.entries[position & self.mask];
                let mut backoff = Backoff::new();
                // Acquire pairs with combine's seq (Release).
                while entry.seq.load(Ordering::Acquire) != position + 1 {
                    backoff.snooze();
                }
                entry.op.with(|cell| {
                    // SAFETY: the entry is published and cannot be
                    // overwritten before this replica's ltail passes it.
                    let (op, origin, slot) = unsafe { (*cell).as_ref() }.expect("published");
                    if *origin as usize == q {
                        exclusive.apply(|d| op.apply_and_keep(d));
                        done.push(*slot);
                    } else {
                        exclusive.apply(|d| op.apply(d));
                    }
                });
            }
            // Release pairs with the Acquire loads of ltail (`catch_up`,
            // `reserve`).
            log_replica.ltail.store(upto, Ordering::Release);
            // All before the write lock is released, so a reader that sees
            // these writes here finds every lagging replica marked (see
            // the module doc): ctail past them, then the marks.
            self.ctail.fetch_max(upto, Ordering::SeqCst);
            seqcst_for_loom();
            for (p, other) in self.replicas.iter().enumerate() {
                if p != q && other.ltail.load(Ordering::SeqCst) < upto {
                    data[p].lock().set_stale();
                }
            }
            // This replica is current, unless the log moved past `upto`
            // meanwhile: then the mark cleared here may have been that
            // write's, so mark again (readers are kept out while we hold
            // the replica). A mark set after `is_stale` looked stays.
            if lock.is_stale() {
                lock.clear_stale();
                if self.ctail.load(Ordering::SeqCst) > upto {
                    lock.set_stale();
                }
            }
        }
        data[q]
            .counters
            .applied
            .fetch_add((upto - from) as u64, Ordering::Relaxed);
        for slot in done {
            // Release pairs with the issuer's Acquire: the result and the
            // ctail update are visible to it.
            log_replica.requests[slot as usize]
                .state
                .store(DONE, Ordering::Release);
        }
        upto - from
    }
}
