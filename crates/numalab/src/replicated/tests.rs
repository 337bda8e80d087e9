//! Tests of `Replicated<T>` on emulated replica sets (several replicas on
//! this machine's node), so the multi-replica paths run here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use super::*;

fn emulated(n: usize) -> ReplicaSet {
    ReplicaSet::emulated(vec![0; n]).unwrap()
}

fn both_modes() -> [ReplicatedOptions; 2] {
    [
        ReplicatedOptions::new(Mode::Log)
            .log_entries(8)
            .request_slots(2),
        ReplicatedOptions::new(Mode::Broadcast),
    ]
}

#[test]
fn every_replica_sees_every_write() {
    for options in both_modes() {
        let v = Replicated::with_set(Vec::<u64>::new(), emulated(3), options.clone()).unwrap();
        for i in 0..100u64 {
            // Issued from each replica in turn: the log wraps many times.
            let len = v.write_from(i as usize % 3, move |v| {
                v.push(i);
                v.len()
            });
            assert_eq!(len, i as usize + 1);
        }
        for r in 0..3 {
            assert_eq!(
                v.read_from(r, |v| v.clone()),
                (0..100).collect::<Vec<_>>(),
                "{options:?}"
            );
        }
        let stats = v.stats();
        assert_eq!(stats.iter().map(|s| s.writes).sum::<u64>(), 100);
        assert_eq!(stats.iter().map(|s| s.reads).sum::<u64>(), 3);
        for s in &stats {
            assert_eq!(s.applied, 100, "replica {} of {options:?}", s.replica);
            assert_eq!(s.node, 0);
            assert!(s.bytes >= std::mem::size_of::<Vec<u64>>() as u64);
        }
    }
}

#[test]
fn log_replicas_replay_lazily() {
    let options = ReplicatedOptions::new(Mode::Log).log_entries(64);
    let v = Replicated::with_set(0u64, emulated(2), options).unwrap();
    for _ in 0..10 {
        v.write_from(0, |x| *x += 1);
    }
    let stats = v.stats();
    assert_eq!(stats[0].applied, 10);
    assert_eq!(stats[1].applied, 0, "replica 1 has not read yet");
    assert_eq!(v.read_from(1, |x| *x), 10);
    assert_eq!(v.stats()[1].applied, 10);
    assert_eq!(v.stats()[1].helped, 0);
}

#[test]
fn a_lagging_replica_is_helped_forward() {
    let options = ReplicatedOptions::new(Mode::Log)
        .log_entries(4)
        .request_slots(1);
    let v = Replicated::with_set(0u64, emulated(2), options).unwrap();
    // Replica 1 never reads or writes: the writers of replica 0 must
    // replay it themselves to reuse the log.
    for _ in 0..50 {
        v.write_from(0, |x| *x += 1);
    }
    let stats = v.stats();
    assert!(stats[1].helped > 0, "{stats:?}");
    assert!(stats[1].applied >= 46, "{stats:?}");
    assert_eq!(v.read_from(1, |x| *x), 50);
}

#[test]
fn results_go_to_the_issuing_thread() {
    for options in both_modes() {
        let v = Arc::new(
            Replicated::with_set(HashMap::<u64, u64>::new(), emulated(2), options).unwrap(),
        );
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let v = &v;
                s.spawn(move || {
                    set_thread_replica(Some(t as usize % 2));
                    for i in 0..300u64 {
                        let key = t * 1000 + i;
                        // Each key is written twice, by one thread: the
                        // second insert must return the first value.
                        assert_eq!(v.write(move |m| m.insert(key, i)), None);
                        assert_eq!(v.write(move |m| m.insert(key, i + 1)), Some(i));
                        assert_eq!(v.read(|m| m.get(&key).copied()), Some(i + 1));
                    }
                });
            }
        });
        v.sync();
        let a = v.read_from(0, |m| m.clone());
        assert_eq!(a.len(), 1200);
        assert_eq!(a, v.read_from(1, |m| m.clone()));
    }
}

#[test]
fn write_closures_run_once_per_replica_and_are_dropped() {
    for options in both_modes() {
        let calls = Arc::new(AtomicUsize::new(0));
        let v = Replicated::with_set(0u32, emulated(3), options.clone()).unwrap();
        let counted = Arc::clone(&calls);
        v.write(move |x| {
            counted.fetch_add(1, Ordering::Relaxed);
            *x += 1
        });
        v.sync();
        assert_eq!(calls.load(Ordering::Relaxed), 3, "{options:?}");
        drop(v);
        assert_eq!(
            Arc::strong_count(&calls),
            1,
            "the log kept the closure alive"
        );
    }
}

#[test]
fn replicas_are_on_their_nodes() {
    let v = Replicated::new(vec![7u64; 100_000], Mode::Log).unwrap();
    let set = v.replica_set().clone();
    for (r, pages) in v.replica_pages(Sample::All).unwrap().iter().enumerate() {
        assert_eq!(pages.on_node(set.node(r)), pages.present(), "{pages}");
        assert!(pages.present() >= 1);
    }
    // The Vec's buffer was cloned with the thread bound to the node.
    let heap = v
        .replica_pages_of(Sample::All, |b| (b.as_ptr().cast(), b.len() * 8))
        .unwrap();
    for (r, pages) in heap.iter().enumerate() {
        assert_eq!(pages.on_node(set.node(r)), pages.present(), "{pages}");
        assert!(pages.present() >= 195, "{pages}");
    }
}

#[test]
fn byte_regions_expose_their_memory() {
    let data: Vec<u8> = (0..10_000).map(|i| i as u8).collect();
    let region = Replicated::bytes(emulated(2), Mode::Broadcast, &data).unwrap();
    region.write(|b| b.as_mut_slice()[9_999] = 1);
    let regions = region.regions();
    assert_eq!(regions.len(), 2);
    assert_ne!(regions[0].ptr, regions[1].ptr);
    for r in &regions {
        assert_eq!(r.len, 10_000);
        // SAFETY: the region is alive and no write runs concurrently.
        let bytes = unsafe { std::slice::from_raw_parts(r.ptr, r.len) };
        assert_eq!(bytes[9_999], 1);
        assert_eq!(&bytes[..9_999], &data[..9_999]);
    }
}

#[test]
fn modes_parse_and_print() {
    for mode in [Mode::Log, Mode::Broadcast] {
        assert_eq!(mode.to_string().parse::<Mode>().unwrap(), mode);
    }
    assert!("rcu"
        .parse::<Mode>()
        .unwrap_err()
        .contains("log or broadcast"));
}

#[test]
fn readers_and_writers_together() {
    // Writers keep the two halves of the pair equal; readers on every
    // replica must never see them differ.
    for options in both_modes() {
        let v = Replicated::with_set((0u64, 0u64), emulated(3), options).unwrap();
        let rounds = if cfg!(miri) { 20 } else { 2_000 };
        std::thread::scope(|s| {
            for t in 0..3 {
                let v = &v;
                s.spawn(move || {
                    set_thread_replica(Some(t));
                    let mut last = 0;
                    for i in 0..rounds {
                        if i % 10 == 0 {
                            v.write(|p| {
                                p.0 += 1;
                                p.1 += 1;
                            });
                        }
                        let (a, b) = v.read(|p| *p);
                        assert_eq!(a, b);
                        assert!(a >= last, "a replica went back in time");
                        last = a;
                    }
                });
            }
        });
        assert_eq!(v.read_from(2, |p| p.0), 3 * rounds as u64 / 10);
    }
}

/// The writes of [`while_writing`]: each stores its number, 1 to 200.
const WRITES: u64 = 200;

/// In both modes, [`WRITES`] writes from replica 1 on another thread, each
/// counted in `done` once it returned, while `reads` reads replica 0
/// through a held reader until it has seen the last; `reads` returns the
/// reads it made, which must be the replica's count in its statistics.
fn while_writing(reads: impl Fn(&Replicated<u64>, &AtomicU64, &ReplicatedOptions) -> u64) {
    for options in both_modes() {
        let v = Replicated::with_set(0u64, emulated(2), options.clone()).unwrap();
        let done = AtomicU64::new(0);
        let made = std::thread::scope(|s| {
            s.spawn(|| {
                for i in 1..=WRITES {
                    v.write_from(1, move |x| *x = i);
                    done.store(i, Ordering::SeqCst);
                }
            });
            reads(&v, &done, &options)
        });
        let stats = v.stats();
        assert_eq!(stats[0].reads, made, "{options:?}");
        assert_eq!(stats.iter().map(|s| s.writes).sum::<u64>(), WRITES);
    }
}

/// What a reader of [`while_writing`] has seen: the last value, how many
/// reads in a row saw it, and how many reads it made.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    last: u64,
    stuck: u64,
    reads: u64,
}

impl Seen {
    /// After one more read that saw `x`, begun when `returned` writes had
    /// returned: it never goes back and sees every write returned before
    /// it began. A writer starved by the held reader fails here instead
    /// of hanging: millions of reads, each offering the writer the CPU,
    /// and no write got through.
    fn after(self, x: u64, returned: u64, options: &ReplicatedOptions) -> Seen {
        let last = self.last;
        assert!(x >= last, "went back from {last} to {x}: {options:?}");
        assert!(
            x >= returned,
            "write {returned} had returned, the read after saw {x}: {options:?}"
        );
        let stuck = if x == last { self.stuck + 1 } else { 0 };
        assert!(stuck < 1 << 24, "writers starved after {last}: {options:?}");
        Seen {
            last: x,
            stuck,
            reads: self.reads + 1,
        }
    }
}

/// A held reader on one replica while writers write from the other, in
/// both modes: every write completes while the reader holds on and keeps
/// reading (it steps out for each), the reader sees each value once its
/// write has returned, never a value going back, and the reads it made
/// are counted in the replica's statistics.
#[test]
fn held_reader_lets_writers_through_and_sees_their_writes() {
    while_writing(|v, done, options| {
        let mut reader = v.held_reader_on(0);
        let mut seen = Seen::default();
        while seen.last < WRITES {
            let returned = done.load(Ordering::SeqCst);
            seen = seen.after(reader.read(|x| *x), returned, options);
            std::thread::yield_now();
        }
        seen.reads
    });
}

/// `read_each` while another thread writes from the other replica: the
/// writes get through between items, each item's read sees every write
/// returned before its item was taken, none goes back, and each item is
/// one read in the statistics.
#[test]
fn read_each_lets_writers_through_and_sees_their_writes() {
    while_writing(|v, done, options| {
        let mut reader = v.held_reader_on(0);
        let seen = std::cell::Cell::new(Seen::default());
        // One batch until the last write is seen: each item is the count
        // of writes returned when it was taken.
        let returned =
            std::iter::from_fn(|| (seen.get().last < WRITES).then(|| done.load(Ordering::SeqCst)));
        reader.read_each(returned, |x, returned| {
            seen.set(seen.get().after(*x, returned, options));
            std::thread::yield_now();
        });
        seen.get().reads
    });
}

/// Two held readers on one thread let go in the order they were made
/// (not the reverse): the replica's lock is free afterwards, as a write
/// that completes shows.
#[test]
fn held_readers_let_go_in_any_order() {
    for options in both_modes() {
        let v = Replicated::with_set(1u64, emulated(2), options.clone()).unwrap();
        let mut first = v.held_reader_on(0);
        let mut second = v.held_reader_on(0);
        assert_eq!(first.read(|x| *x) + second.read(|x| *x), 2);
        drop(first);
        drop(second);
        std::thread::scope(|s| {
            s.spawn(|| v.write(|x| *x = 5));
        });
        assert_eq!(v.read_from(0, |x| *x), 5, "{options:?}");
        assert_eq!(v.stats()[0].reads, 3, "{options:?}");
    }
}
