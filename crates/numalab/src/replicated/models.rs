//! Model checks of the replication protocols with `loom`, which runs each
//! test under every interleaving of its threads' atomic operations (up to
//! a preemption bound) and reports data races on replica memory:
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" cargo test -p numalab --lib --release \
//!     --target-dir target/loom replicated::models
//! ```
//!
//! (`scripts/test.sh` runs them.) Replica sets here are unchecked
//! emulated sets: two replicas, both on node 0.
//!
//! Limit: loom cannot model `membarrier(2)`, so the asymmetric fence is
//! modelled as a `SeqCst` fence on each side (as liburcu and folly reason
//! about it). The models check the protocols built on it, but not the
//! argument that a reader which entered without fencing did so before the
//! writer that set `SLOW` ran its heavy barrier, which matters only when
//! the light side is no fence at all; that step is argued in `rwlock.rs`.
//!
//! Under loom every lock has one owned reader slot (`MIN_OWNED`), so a
//! second reading thread takes the overflow slots.
//!
//! Each of these changes to the protocols makes at least one model fail
//! (checked by editing the code and running the models): a writer that
//! does not wait for readers, or scans no slot (high water taken as 0); a
//! reader that ignores the writer bit, or the stale mark (fast entry or
//! slow); the log reusing an entry a replica still needs; stale marks set
//! after the replaying replica is released; a stale mark cleared without
//! looking at `ctail` again; a held reader that never steps out (in
//! broadcast mode the writer then never gets through, in log mode a read
//! after a returned write misses it).

use loom::sync::Arc;
use loom::thread;

use super::*;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(f);
}

fn value(options: ReplicatedOptions) -> Arc<Replicated<u64>> {
    Arc::new(Replicated::from_fn(ReplicaSet::unchecked(vec![0, 0]), options, |_, _| 0).unwrap())
}

fn log_options(entries: usize) -> ReplicatedOptions {
    ReplicatedOptions::new(Mode::Log)
        .log_entries(entries)
        .request_slots(1)
        .reader_slots(1)
}

/// A write on one replica and reads of both replicas on another thread:
/// once a read has seen the write, a later read on the other replica must
/// too (the property a broadcast that released replicas one by one, or a
/// log that raised `ctail` after unlocking, would break).
fn reads_never_go_back(options: ReplicatedOptions) {
    model(move || {
        let v = value(options.clone());
        let writer = {
            let v = v.clone();
            thread::spawn(move || {
                v.write_from(0, |x| {
                    *x += 1;
                    *x
                })
            })
        };
        let first = v.read_from(0, |x| *x);
        let second = v.read_from(1, |x| *x);
        assert!(
            second >= first,
            "read {first} on replica 0, then {second} on replica 1"
        );
        assert_eq!(writer.join().unwrap(), 1);
        assert_eq!(v.read_from(1, |x| *x), 1);
        assert_eq!(v.read_from(0, |x| *x), 1);
    });
}

#[test]
fn log_reads_never_go_back() {
    reads_never_go_back(log_options(2));
}

#[test]
fn broadcast_reads_never_go_back() {
    reads_never_go_back(ReplicatedOptions::new(Mode::Broadcast).reader_slots(1));
}

/// Writers on both replicas at once: each sees a distinct previous value
/// (the log orders them), and both replicas end equal.
#[test]
fn log_concurrent_writers_are_ordered() {
    model(|| {
        let v = value(log_options(2));
        let other = {
            let v = v.clone();
            thread::spawn(move || {
                v.write_from(1, |x| {
                    *x += 1;
                    *x
                })
            })
        };
        let mine = v.write_from(0, |x| {
            *x += 1;
            *x
        });
        let theirs = other.join().unwrap();
        let mut seen = [mine, theirs];
        seen.sort();
        assert_eq!(seen, [1, 2]);
        assert_eq!(v.read_from(0, |x| *x), 2);
        assert_eq!(v.read_from(1, |x| *x), 2);
    });
}

/// A log of two entries and three writes from replica 0 while replica 1
/// reads: the writer must help replica 1 forward (or the reader catch up)
/// to reuse the log, and no entry may be overwritten before replica 1 has
/// applied it.
#[test]
fn log_full_lagging_replica_is_helped() {
    model(|| {
        let v = value(log_options(2));
        let reader = {
            let v = v.clone();
            thread::spawn(move || v.read_from(1, |x| *x))
        };
        for _ in 0..3 {
            v.write_from(0, |x| *x += 1);
        }
        let seen = reader.join().unwrap();
        assert!(seen <= 3);
        assert_eq!(v.read_from(1, |x| *x), 3);
    });
}

/// Two writers on the same replica: one may combine the other's request
/// (flat combining), and each gets its own result.
#[test]
fn log_flat_combining_returns_each_result() {
    model(|| {
        let v = Arc::new(
            Replicated::from_fn(
                ReplicaSet::unchecked(vec![0, 0]),
                ReplicatedOptions::new(Mode::Log)
                    .log_entries(4)
                    .request_slots(2)
                    .reader_slots(1),
                |_, _| Vec::<u32>::new(),
            )
            .unwrap(),
        );
        let other = {
            let v = v.clone();
            thread::spawn(move || {
                v.write_from(0, |x| {
                    x.push(1);
                    x.len()
                })
            })
        };
        let mine = v.write_from(0, |x| {
            x.push(2);
            x.len()
        });
        let theirs = other.join().unwrap();
        assert_ne!(mine, theirs);
        let order = v.read_from(1, |x| x.clone());
        assert_eq!(order.len(), 2);
        // Each writer's result is its position in the log's order.
        assert_eq!(order[mine - 1], 2);
        assert_eq!(order[theirs - 1], 1);
    });
}

/// Enters `lock` as `Replicated::read` does: the fast entry through the
/// thread's owned slot, else the slow entry (an overflow slot for a
/// thread without one).
fn read_lock(lock: &ReplicaLock) -> rwlock::ReadGuard<'_> {
    let slot = lock.slot_of_thread();
    if let Some(slot) = slot {
        if let Some(guard) = lock.read_owned_or_contended(slot) {
            return guard;
        }
    }
    lock.read_slow(slot, false)
        .expect("never marked stale here")
}

/// The per-replica reader-writer lock alone: a reader and a writer never
/// overlap (loom reports a data race on the cell otherwise).
#[test]
fn replica_lock_excludes_writers() {
    use super::sync::UnsafeCell;
    model(|| {
        let lock = Arc::new((ReplicaLock::new(2), UnsafeCell::new(0u64)));
        let reader = {
            let lock = lock.clone();
            thread::spawn(move || {
                let _guard = read_lock(&lock.0);
                // SAFETY: the read guard excludes the writer.
                lock.1.with(|p| unsafe { *p })
            })
        };
        // Three writes: the second switches readers to the fenced entry,
        // the third is the first without the heavy barrier.
        for value in 1..=3 {
            lock.0.lock_exclusive();
            // SAFETY: the exclusive lock excludes readers.
            lock.1.with_mut(|p| unsafe { *p = value });
            lock.0.unlock_exclusive();
        }
        let seen = reader.join().unwrap();
        assert!(seen <= 3);
        assert_eq!(lock.0.reads(), 1);
    });
}

/// A reader without an owned slot (the main thread took the only one)
/// against a writer using the asymmetric barrier.
#[test]
fn replica_lock_shared_slot_excludes_writers() {
    use super::sync::UnsafeCell;
    model(|| {
        let lock = Arc::new((ReplicaLock::new(1), UnsafeCell::new(0u64)));
        // Takes owned slot 0 for the main thread.
        drop(read_lock(&lock.0));
        let reader = {
            let lock = lock.clone();
            thread::spawn(move || {
                let _guard = read_lock(&lock.0);
                // SAFETY: the read guard excludes the writer.
                lock.1.with(|p| unsafe { *p })
            })
        };
        lock.0.lock_exclusive();
        // SAFETY: the exclusive lock excludes readers.
        lock.1.with_mut(|p| unsafe { *p = 1 });
        lock.0.unlock_exclusive();
        assert!(reader.join().unwrap() <= 1);
        assert_eq!(lock.0.reads(), 2);
    });
}

/// A held reader on replica 0 that keeps reading until another thread,
/// writing from replica 1, says its write returned: the writer gets
/// through while the reader holds on (a reader that never stepped out
/// would spin here for ever, which loom reports), no read goes back, and
/// the read after the write returned sees it. With `each`, the reads are
/// one `read_each` over items taken until the write returned, and the
/// item taken after it sees it.
fn held_reads_see_returned_writes(options: ReplicatedOptions, each: bool) {
    model(move || {
        let v = value(options.clone());
        let done = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (v, done) = (v.clone(), done.clone());
            thread::spawn(move || {
                v.write_from(1, |x| *x += 1);
                done.store(true, Ordering::SeqCst);
            })
        };
        let mut reader = v.held_reader_on(0);
        let mut last = 0;
        if each {
            let mut running = true;
            let items = std::iter::from_fn(|| {
                running.then(|| {
                    running = !done.load(Ordering::SeqCst);
                    running
                })
            });
            reader.read_each(items, |x, still_running| {
                assert!(*x >= last, "read {last}, then {x}");
                assert!(still_running || *x == 1, "the write had returned");
                last = *x;
                thread::yield_now();
            });
        } else {
            while !done.load(Ordering::SeqCst) {
                let seen = reader.read(|x| *x);
                assert!(seen >= last, "read {last}, then {seen}");
                last = seen;
                thread::yield_now();
            }
            assert_eq!(reader.read(|x| *x), 1, "the write had returned");
        }
        drop(reader);
        writer.join().unwrap();
    });
}

#[test]
fn log_held_reads_see_returned_writes() {
    held_reads_see_returned_writes(log_options(2), false);
}

#[test]
fn broadcast_held_reads_see_returned_writes() {
    held_reads_see_returned_writes(broadcast_options(), false);
}

#[test]
fn log_read_each_sees_returned_writes() {
    held_reads_see_returned_writes(log_options(2), true);
}

#[test]
fn broadcast_read_each_sees_returned_writes() {
    held_reads_see_returned_writes(broadcast_options(), true);
}

/// Broadcast mode with one reader slot.
fn broadcast_options() -> ReplicatedOptions {
    ReplicatedOptions::new(Mode::Broadcast).reader_slots(1)
}
