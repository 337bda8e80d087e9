//! Broadcast mode: a write takes the writers' lock, takes every replica's
//! lock for writing (all at once: one heavy barrier), applies itself to
//! each, and releases them all. Readers take only their own replica's reader lock.
//!
//! Holding every replica while applying makes a write atomic across
//! replicas (linearizable): no reader can see the new value on one replica
//! and then the old one on another. The cost is that a write stops reads
//! everywhere for as long as it takes to apply it N times, which is why
//! this mode suits data written rarely.

use super::sync::{lock, AbortOnUnwind, Mutex, Ordering};
use super::Replica;

pub(crate) struct Broadcast {
    writers: Mutex<()>,
}

impl Broadcast {
    pub(crate) fn new() -> Broadcast {
        Broadcast {
            writers: Mutex::new(()),
        }
    }

    /// Applies `f` to every replica; returns replica `caller`'s result.
    pub(crate) fn write<T, R>(
        &self,
        caller: usize,
        f: impl Fn(&mut T) -> R,
        data: &[Replica<T>],
    ) -> R {
        let _writers = lock(&self.writers);
        let mut held = super::exclusive_all(data);
        let _abort = AbortOnUnwind;
        let mut result = None;
        for (i, replica) in held.iter_mut().enumerate() {
            let out = replica.apply(&f);
            if i == caller {
                result = Some(out);
            }
        }
        drop(held);
        data[caller].counters.writes.fetch_add(1, Ordering::Relaxed);
        for replica in data {
            replica.counters.applied.fetch_add(1, Ordering::Relaxed);
        }
        result.expect("the caller's replica is one of them")
    }
}
