//! The atomics, cells, locks and spin-waiting the replication protocols
//! use, in one module so that the `loom` model checker can replace them
//! (build with `RUSTFLAGS="--cfg loom"`; see `tests` in `log.rs` and
//! `broadcast.rs`). Nothing else in `replicated` names `std::sync::atomic`
//! or `std::cell::UnsafeCell`.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

pub(crate) use crossbeam_utils::CachePadded;

/// An `UnsafeCell` with loom's closure API: under loom every access is
/// checked against the others for data races; otherwise it compiles to the
/// plain pointer.
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(
    #[cfg(loom)] loom::cell::UnsafeCell<T>,
    #[cfg(not(loom))] std::cell::UnsafeCell<T>,
);

impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> Self {
        #[cfg(loom)]
        return UnsafeCell(loom::cell::UnsafeCell::new(value));
        #[cfg(not(loom))]
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a pointer for reading; the caller's protocol must rule
    /// out a concurrent `with_mut`.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        #[cfg(loom)]
        return self.0.with(f);
        #[cfg(not(loom))]
        f(self.0.get())
    }

    /// Runs `f` with a pointer for writing; the caller's protocol must rule
    /// out any concurrent access.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        #[cfg(loom)]
        return self.0.with_mut(f);
        #[cfg(not(loom))]
        f(self.0.get())
    }
}

/// Waiting for another thread: spins briefly, then yields the CPU, so a
/// waiter never starves the thread it waits for on a loaded machine
/// (under loom, every wait is a yield, which loom requires).
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    step: u32,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff { step: 0 }
    }

    pub(crate) fn snooze(&mut self) {
        #[cfg(loom)]
        loom::thread::yield_now();
        #[cfg(not(loom))]
        {
            if self.step < 6 {
                for _ in 0..(1u32 << self.step) {
                    std::hint::spin_loop();
                }
                self.step += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// Locks a mutex; a panic while it was held cannot leave the protected
/// state half-changed here (writes abort on panic), so poisoning is
/// ignored.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    #[cfg(loom)]
    return mutex.lock().unwrap();
    #[cfg(not(loom))]
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Aborts the process if dropped during a panic: a write that panics
/// half-way through one replica would leave the replicas disagreeing, and
/// the locks it holds would stop every other thread.
pub(crate) struct AbortOnUnwind;

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        // Under loom a failed check panics inside a write; let loom report it.
        if cfg!(not(loom)) && std::thread::panicking() {
            eprintln!("numalab: a write to a replicated value panicked; replicas would disagree, aborting");
            std::process::abort();
        }
    }
}

/// A small number unique to the calling thread (0, 1, 2, … in order of
/// first use), used to spread threads over reader and request slots. Not
/// part of any protocol: two threads sharing a slot is correct, only
/// slower. (This counter is the one atomic outside the model on purpose.)
pub(crate) fn thread_index() -> usize {
    use std::cell::Cell;
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static INDEX: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    INDEX.with(|index| {
        let mut i = index.get();
        if i == usize::MAX {
            i = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            index.set(i);
        }
        i
    })
}

/// Under loom, a `SeqCst` fence; elsewhere nothing. Loom models `SeqCst`
/// loads, stores and read-modify-writes as `AcqRel` (its README,
/// "Limitations"), which would report false races in the Dekker-style
/// handshakes here, whose correctness rests on the single total order of
/// `SeqCst` accesses. A `SeqCst` fence right after each such access gives
/// the same guarantee in the C11 model and loom models fences exactly, so
/// the models check the protocol as written without slowing real reads
/// (on x86-64 the fence would be an extra `mfence`).
#[inline(always)]
pub(crate) fn seqcst_for_loom() {
    #[cfg(loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
}

/// A small number unique among the threads alive now, reused after a
/// thread exits (0, 1, 2, … lowest free first), or `usize::MAX` for a
/// thread that has not been given one yet ([`assign_thread_slot`] gives
/// it). A thread whose id is below a lock's slot count owns that reader
/// slot alone, so it may update it with plain stores instead of
/// read-modify-writes. Every id handed out is below
/// [`slot_high_water`], raised before the id is returned, so writers scan
/// only the slots of threads that may be reading.
///
/// The hot path is one thread-local load: no lazy-initialisation check
/// (a lock's "is the id below my slot count" test sends `usize::MAX` to
/// the cold path, which assigns the id).
#[inline(always)]
pub(crate) fn thread_slot() -> usize {
    #[cfg(loom)]
    {
        LOOM_ID.with(|id| id.get())
    }
    #[cfg(not(loom))]
    {
        THREAD_SLOT.with(std::cell::Cell::get)
    }
}

#[cfg(not(loom))]
thread_local! {
    static THREAD_SLOT: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

#[cfg(loom)]
loom::lazy_static! {
    // Per model execution, so ids are the same in every execution.
    static ref LOOM_NEXT: AtomicUsize = AtomicUsize::new(0);
}
#[cfg(loom)]
loom::thread_local! {
    static LOOM_ID: std::cell::Cell<usize> = std::cell::Cell::new(usize::MAX);
}

/// Gives the calling thread its slot id if it has none; returns it.
#[cold]
#[inline(never)]
pub(crate) fn assign_thread_slot() -> usize {
    let id = thread_slot();
    if id != usize::MAX {
        return id;
    }
    #[cfg(loom)]
    {
        // Ids are never reused under loom; the counter is the high water.
        let id = LOOM_NEXT.fetch_add(1, Ordering::SeqCst);
        seqcst_for_loom();
        LOOM_ID.with(|cell| cell.set(id));
        id
    }
    #[cfg(not(loom))]
    {
        assign_slot_id(|id| THREAD_SLOT.with(|cell| cell.set(id)))
    }
}

/// One more than the highest slot id handed out so far (ids are dense and
/// reused, so this is the most threads that have had an id at once). A
/// writer that loads it after its `SeqCst` fence covers every thread that
/// can be inside a read: a thread raises it (a `SeqCst` read-modify-write)
/// before its first entry, so either the writer sees the raise, or the
/// thread's later load of the lock state sees the writer.
#[inline]
pub(crate) fn slot_high_water() -> usize {
    #[cfg(loom)]
    {
        let high = LOOM_NEXT.load(Ordering::SeqCst);
        seqcst_for_loom();
        high
    }
    #[cfg(not(loom))]
    {
        SLOT_HIGH_WATER.load(Ordering::SeqCst)
    }
}

#[cfg(not(loom))]
static SLOT_HIGH_WATER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[cfg(not(loom))]
fn assign_slot_id(store: impl Fn(usize)) -> usize {
    struct Release(usize);
    impl Drop for Release {
        fn drop(&mut self) {
            free_ids()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(self.0);
        }
    }
    fn free_ids() -> &'static std::sync::Mutex<Vec<usize>> {
        static FREE: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
        &FREE
    }
    thread_local! {
        static RELEASE: std::cell::Cell<Option<Release>> = const { std::cell::Cell::new(None) };
    }
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let id = {
        let mut free = free_ids().lock().unwrap_or_else(|p| p.into_inner());
        let lowest = free
            .iter()
            .enumerate()
            .min_by_key(|(_, id)| **id)
            .map(|(i, _)| i);
        match lowest {
            Some(i) => free.swap_remove(i),
            None => NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    };
    // SeqCst, before the id is used: see `slot_high_water`.
    SLOT_HIGH_WATER.fetch_max(id + 1, Ordering::SeqCst);
    // During thread teardown the release guard may be gone already: then
    // the id is simply not reused.
    let _ = RELEASE.try_with(|cell| cell.set(Some(Release(id))));
    store(id);
    id
}

/// Whether [`heavy_barrier`] works here (the kernel has `membarrier`
/// private expedited and this process is registered for it). Probed once.
pub(crate) fn asymmetric_barriers() -> bool {
    #[cfg(loom)]
    return true;
    #[cfg(not(loom))]
    {
        static PROBE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *PROBE.get_or_init(|| {
            crate::sys::linux::membarrier_register_private_expedited().is_ok()
                && crate::sys::linux::membarrier_private_expedited().is_ok()
        })
    }
}

/// The light side of an asymmetric fence, for readers: a compiler fence,
/// free at run time. Paired with [`heavy_barrier`] it orders like two
/// `SeqCst` fences (and under loom it is one).
#[inline(always)]
pub(crate) fn light_barrier() {
    #[cfg(loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
    #[cfg(not(loom))]
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
}

/// The heavy side of an asymmetric fence, for writers:
/// `membarrier(PRIVATE_EXPEDITED)` makes every running thread of the
/// process execute a full barrier (a few microseconds). Only call it when
/// [`asymmetric_barriers`] said yes.
pub(crate) fn heavy_barrier() {
    #[cfg(loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
    #[cfg(not(loom))]
    {
        std::sync::atomic::fence(Ordering::SeqCst);
        if crate::sys::linux::membarrier_private_expedited().is_err() {
            // Registered at probe time, so this cannot fail; if it ever
            // did, readers could be missed: stop rather than corrupt.
            eprintln!("numalab: membarrier failed after a successful probe, aborting");
            std::process::abort();
        }
    }
}

/// Nanoseconds on a monotonic clock (since the first call, plus one: never
/// 0), for writers judging how often writes come. Under loom, always 1
/// (models must be deterministic): every write after the first then counts
/// as frequent, so models see both reader entries.
pub(crate) fn now_nanos() -> u64 {
    #[cfg(loom)]
    return 1;
    #[cfg(not(loom))]
    {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos() as u64
            + 1
    }
}
