//! Reader-writer locks striped over a region, as a trading or database
//! system guards a shared table: each stripe of the region has its own
//! lock, taken shared by readers and exclusive by writers. The locks spin
//! (yielding the CPU after a while, so oversubscribed runs progress) and
//! each sits on its own cache line, so only threads touching the same
//! stripe contend.

use std::sync::atomic::{AtomicU32, Ordering};

/// The writer bit of a lock word; the low bits count readers.
const WRITER: u32 = 1 << 31;

/// Spins before yielding the CPU.
const SPINS_BEFORE_YIELD: u32 = 128;

/// One lock, alone on a cache line.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
/// use numalab_bench::experiment::rwlock::StripeLock;
/// assert_eq!(std::mem::size_of::<StripeLock>(), 64, "one cache line each");
/// let (lock, count) = (StripeLock::default(), AtomicU64::new(0));
/// std::thread::scope(|s| for _ in 0..2 {
///     s.spawn(|| for _ in 0..1000 {
///         lock.write(); // exclusive: this load-then-store loses no increment
///         count.store(count.load(Relaxed) + 1, Relaxed);
///         lock.write_unlock();
///     });
/// });
/// assert_eq!(count.load(Relaxed), 2000);
/// lock.read();
/// lock.read(); // readers share it
/// lock.read_unlock();
/// lock.read_unlock();
/// ```
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct StripeLock {
    /// `WRITER` when held exclusive, else the number of readers.
    state: AtomicU32,
}

impl StripeLock {
    /// Takes the lock shared.
    #[inline]
    pub fn read(&self) {
        let mut spins = 0;
        loop {
            let s = self.state.load(Ordering::Relaxed);
            // Acquire pairs with the Release of the writer's unlock, so
            // the writer's stores are visible to this reader.
            if s & WRITER == 0
                && self
                    .state
                    .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            backoff(&mut spins);
        }
    }

    /// Releases a shared hold.
    #[inline]
    pub fn read_unlock(&self) {
        // Release: the reader's loads happen before a writer takes over.
        self.state.fetch_sub(1, Ordering::Release);
    }

    /// Takes the lock exclusive.
    #[inline]
    pub fn write(&self) {
        let mut spins = 0;
        loop {
            // Acquire pairs with the Release of readers' and writers'
            // unlocks.
            if self.state.load(Ordering::Relaxed) == 0
                && self
                    .state
                    .compare_exchange_weak(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            backoff(&mut spins);
        }
    }

    /// Releases an exclusive hold.
    #[inline]
    pub fn write_unlock(&self) {
        // Release: the writer's stores are visible to the next holder.
        self.state.store(0, Ordering::Release);
    }
}

#[inline]
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < SPINS_BEFORE_YIELD {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn writers_exclude_everyone() {
        let lock = StripeLock::default();
        // Two words a writer keeps equal; a reader must never see them
        // differ.
        let (a, b) = (AtomicU64::new(0), AtomicU64::new(0));
        let torn = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..4 {
                let (lock, a, b, torn) = (&lock, &a, &b, &torn);
                s.spawn(move || {
                    for i in 0..20_000u64 {
                        if (i + t) % 3 == 0 {
                            lock.write();
                            let v = a.load(Ordering::Relaxed) + 1;
                            a.store(v, Ordering::Relaxed);
                            std::hint::spin_loop();
                            b.store(v, Ordering::Relaxed);
                            lock.write_unlock();
                        } else {
                            lock.read();
                            if a.load(Ordering::Relaxed) != b.load(Ordering::Relaxed) {
                                torn.fetch_add(1, Ordering::Relaxed);
                            }
                            lock.read_unlock();
                        }
                    }
                });
            }
        });
        assert_eq!(torn.load(Ordering::Relaxed), 0);
        assert_eq!(a.load(Ordering::Relaxed), b.load(Ordering::Relaxed));
        assert_eq!(lock.state.load(Ordering::Relaxed), 0, "released");
    }
}
