//! The access loops a worker thread runs: random, sequential, strided and
//! copy operations over its region, reads and writes interleaved in the
//! experiment's ratio, optionally under striped reader-writer locks, with
//! one operation in `sample_every` timed.
//!
//! The loops are written to cost little beside the memory traffic: the
//! generator is wyrand (a multiply), offsets come from Lemire's
//! multiply-shift (no division), the read:write schedule is a counter (no
//! modulo), and the stop flag, the deadline and the progress counter are
//! looked at once per chunk of operations, not per operation.
//!
//! Random operations reach anywhere in a region several threads may use
//! at once, so their words are read and written as relaxed atomics (plain
//! `mov`s on x86-64): the races the experiment asks for are well defined.
//! Sequential, strided and copy operations stay inside the thread's own
//! share of the region and use the SIMD kernels.
//!
//! A replicated region (`memory.policy = "replicate"`) has one copy per
//! node. With `memory.replication = "copies"` a thread reads its own copy
//! (under its own copy's stripe lock with `sync = "rwlock"`) and a write
//! stores to every copy: with locks, it takes the stripe's lock on every
//! copy in copy order, stores to every copy, then releases them all, so no
//! reader ever finds two copies disagreeing under their locks and writers
//! never deadlock; without locks the stores race as unsynchronised
//! threads' would. What a sampled operation times is all of that: a read
//! is its lock, load and unlock on one copy; a write is every lock, every
//! store and every unlock. With `broadcast` or `log`, every operation is
//! a call into [`numalab::replicated::Replicated`] (a read through the
//! thread's `Reader` of its copy, a write through `write_from`), and the
//! library's protocol is what is timed.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use std::time::{Duration, Instant};

use numalab::replicated::Replicated;
use numalab::NodeBuffer;

use super::clock::Clock;
use super::config::{MIN_SAMPLES_PER_THREAD, SAMPLES_PER_RUN, SAMPLES_PER_THREAD};
use super::rwlock::StripeLock;
use super::values::Pattern;
use crate::kernels::{self, Isa, Mix, Rng, Store};

/// A region as the loops see it: raw memory shared by threads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RegionPtr {
    /// Start (8-byte aligned; page-aligned in practice).
    pub base: *mut u8,
    /// Bytes.
    pub len: usize,
    /// `stripes` locks, or null without `sync = "rwlock"`.
    pub locks: *const StripeLock,
    /// Number of locks.
    pub stripes: usize,
}

// SAFETY: the pointers stay valid while the experiment's buffers live,
// which outlives every worker (the workers are scoped threads); threads
// touch shared words only through atomics and their own shares through
// disjoint slices, and the locks are atomics.
unsafe impl Send for RegionPtr {}
// SAFETY: as above.
unsafe impl Sync for RegionPtr {}

/// A replicated region whose reads and writes go through the library
/// (`memory.replication = "broadcast" | "log"`), and the copy a thread
/// uses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Library<'a> {
    /// The region.
    pub value: &'a Replicated<NodeBuffer>,
    /// The thread's copy: it reads it and issues its writes from it.
    pub replica: usize,
}

/// What one thread does in one run.
#[derive(Debug)]
pub(crate) struct Job<'a> {
    /// Its region (with `replicate`, its own copy).
    pub region: RegionPtr,
    /// With `replicate` and `replication = "copies"`: every copy of the
    /// region, in copy order (writes go to all of them); empty otherwise.
    pub copies: &'a [RegionPtr],
    /// With `replication = "broadcast" | "log"`: the library's region.
    pub library: Option<Library<'a>>,
    /// Its own share of the region (byte offsets).
    pub share: Range<usize>,
    /// The pattern.
    pub pattern: Pattern,
    /// Bytes per operation (a multiple of 8).
    pub op_size: usize,
    /// Reads to writes.
    pub mix: Mix,
    /// Vector instructions for large sequential operations.
    pub isa: Isa,
    /// Store kind for large sequential writes.
    pub store: Store,
    /// Time one operation in this many (0: none).
    pub sample_every: u64,
    /// Operations to do, or `None` to run until `duration`.
    pub ops: Option<u64>,
    /// How long to run when not counting operations.
    pub duration: Option<Duration>,
    /// Take the stripe locks.
    pub locked: bool,
    /// Clock for sampled operations.
    pub clock: &'a Clock,
    /// Set to stop between chunks (Ctrl-C).
    pub stop: &'a AtomicBool,
    /// Operations done, for progress display.
    pub progress: &'a AtomicU64,
}

/// What a thread did.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Done {
    /// Reads.
    pub reads: u64,
    /// Writes.
    pub writes: u64,
    /// Bytes read and written.
    pub bytes: u64,
    /// Checksum of what was read (keeps the loads alive).
    pub checksum: u64,
    /// Whether the stop flag ended it early.
    pub stopped: bool,
}

/// Operations between two looks at the stop flag and the clock: about a
/// quarter of a megabyte of traffic, at most 4096 operations.
fn chunk_ops(op_size: usize) -> u64 {
    ((256 << 10) / op_size.max(1)).clamp(1, 4096) as u64
}

/// The read:write schedule as a counter.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    phase: u32,
    reads: u32,
    period: u32,
}

impl Schedule {
    fn new(mix: Mix) -> Schedule {
        Schedule {
            phase: 0,
            reads: mix.reads,
            period: mix.reads + mix.writes,
        }
    }

    /// Whether the next operation is a write (as [`Mix::is_write`] says
    /// for its index).
    #[inline(always)]
    fn next_is_write(&mut self) -> bool {
        let write = self.phase >= self.reads;
        self.phase += 1;
        if self.phase == self.period {
            self.phase = 0;
        }
        write
    }
}

/// How many latency samples of each kind each of `threads` threads keeps.
pub(crate) fn samples_per_thread(threads: usize) -> usize {
    (SAMPLES_PER_RUN / threads.max(1)).clamp(MIN_SAMPLES_PER_THREAD, SAMPLES_PER_THREAD)
}

/// A bounded, uniform sample of a stream of timings (Vitter's algorithm
/// R): the first `capacity` are kept; then the n-th replaces a random kept
/// one with probability capacity / n, so every timing seen is kept with
/// the same probability.
#[derive(Debug)]
pub(crate) struct Reservoir {
    /// The timings kept (at most `capacity`), in clock ticks.
    pub kept: Vec<u64>,
    /// Timings seen.
    pub seen: u64,
    capacity: usize,
    rng: Rng,
}

impl Reservoir {
    /// Keeps at most `capacity` timings; `expected` (when known) sizes it
    /// so the loop does not allocate.
    pub fn new(capacity: usize, expected: Option<u64>, seed: u64) -> Reservoir {
        let reserve = expected.map_or(capacity, |n| capacity.min(n.saturating_add(2) as usize));
        Reservoir {
            kept: Vec::with_capacity(reserve),
            seen: 0,
            capacity,
            rng: Rng::new(seed),
        }
    }

    /// Records one timing.
    #[inline]
    pub fn push(&mut self, ticks: u64) {
        self.seen += 1;
        if self.kept.len() < self.capacity {
            self.kept.push(ticks);
        } else {
            let slot = self.rng.below(self.seen);
            if let Some(kept) = self.kept.get_mut(slot as usize) {
                *kept = ticks;
            }
        }
    }

    /// Timings kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    /// Forgets every timing.
    pub fn clear(&mut self) {
        self.kept.clear();
        self.seen = 0;
    }
}

impl Default for Reservoir {
    fn default() -> Reservoir {
        Reservoir::new(SAMPLES_PER_THREAD, Some(0), 0x5eed)
    }
}

/// Latency samples of one thread, in clock ticks.
#[derive(Debug, Default)]
pub(crate) struct Samples {
    /// Of reads.
    pub reads: Reservoir,
    /// Of writes.
    pub writes: Reservoir,
}

impl Samples {
    /// Reservoirs of `capacity` each, sized for `expected` timings of
    /// each kind.
    pub fn new(capacity: usize, expected: Option<u64>, seed: u64) -> Samples {
        Samples {
            reads: Reservoir::new(capacity, expected, seed),
            writes: Reservoir::new(capacity, expected, seed ^ 0x9e37_79b9_7f4a_7c15),
        }
    }
}

/// The stride of latency sampling: `every` operations, moved up to the
/// nearest number that shares no factor with the read:write cycle, so the
/// timed operations fall on every position of the cycle in turn and
/// reads and writes are both timed, in their ratio. (Every 1024th
/// operation of a `3:1` cycle of four is always its write.)
pub(crate) fn sampling_stride(every: u64, mix: Mix) -> u64 {
    let period = u64::from(mix.reads) + u64::from(mix.writes);
    if every == 0 || mix.reads == 0 || mix.writes == 0 || period <= 1 {
        return every;
    }
    fn gcd(mut a: u64, mut b: u64) -> u64 {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    }
    let mut stride = every;
    while gcd(stride, period) != 1 {
        stride = stride.saturating_add(1);
        if stride == u64::MAX {
            break;
        }
    }
    stride
}

/// Runs `job` with `rng`; samples are appended to `samples` (which the
/// caller sized beforehand so the loop does not allocate).
pub(crate) fn perform(job: &Job<'_>, rng: &mut Rng, samples: &mut Samples) -> Done {
    let mut done = Done::default();
    let chunk = chunk_ops(job.op_size);
    let start = Instant::now();
    let per_step = if job.pattern == Pattern::Copy { 2 } else { 1 };
    let mut schedule = Schedule::new(job.mix);
    let sample_every = if job.sample_every == 0 || job.pattern == Pattern::Copy {
        u64::MAX
    } else {
        sampling_stride(job.sample_every, job.mix)
    };
    let mut countdown = sample_every;
    let mut cursor = 0usize;
    let mut steps = 0u64;
    loop {
        let n = match job.ops {
            Some(total) => chunk.min(total / per_step - steps),
            None => chunk,
        };
        if n == 0 {
            break;
        }
        let mut state = ChunkState {
            schedule: &mut schedule,
            countdown: &mut countdown,
            cursor: &mut cursor,
            done: &mut done,
            samples,
            sample_every,
        };
        // Writes to a region with several copies go to all of them.
        let copies = job.copies.len() > 1;
        if let Some(library) = job.library {
            library_chunk(job, library, rng, n, &mut state);
        } else if copies && job.pattern == Pattern::Random && job.mix.writes > 0 {
            let (j, s) = (job, &mut state);
            match (job.locked, job.op_size) {
                (false, 64) => random_copies_chunk::<false, 64>(j, rng, n, s),
                (false, 128) => random_copies_chunk::<false, 128>(j, rng, n, s),
                (false, _) => random_copies_chunk::<false, 0>(j, rng, n, s),
                (true, _) => random_copies_chunk::<true, 0>(j, rng, n, s),
            }
        } else {
            match (job.pattern, job.locked) {
                (Pattern::Random, locked) => {
                    let mixed = job.mix.writes > 0;
                    let (j, s) = (job, &mut state);
                    match (locked, mixed, job.op_size) {
                        (false, false, 64) => random_chunk::<false, false, 64>(j, rng, n, s),
                        (false, false, 128) => random_chunk::<false, false, 128>(j, rng, n, s),
                        (false, false, _) => random_chunk::<false, false, 0>(j, rng, n, s),
                        (false, true, 64) => random_chunk::<false, true, 64>(j, rng, n, s),
                        (false, true, 128) => random_chunk::<false, true, 128>(j, rng, n, s),
                        (false, true, _) => random_chunk::<false, true, 0>(j, rng, n, s),
                        (true, false, _) => random_chunk::<true, false, 0>(j, rng, n, s),
                        (true, true, _) => random_chunk::<true, true, 0>(j, rng, n, s),
                    }
                }
                (Pattern::Sequential, locked) => {
                    walk_chunk(job, job.op_size, locked, n, &mut state)
                }
                (Pattern::Strided(stride), locked) => {
                    walk_chunk(job, stride as usize, locked, n, &mut state)
                }
                (Pattern::Copy, _) => copy_chunk(job, n, &mut state),
            }
        }
        steps += n;
        job.progress.fetch_add(n * per_step, Ordering::Relaxed);
        if job.stop.load(Ordering::Relaxed) {
            done.stopped = true;
            break;
        }
        if let Some(duration) = job.duration {
            if job.ops.is_none() && start.elapsed() >= duration {
                break;
            }
        }
    }
    done.checksum = std::hint::black_box(done.checksum);
    done
}

/// The loop state carried from chunk to chunk.
struct ChunkState<'s> {
    schedule: &'s mut Schedule,
    countdown: &'s mut u64,
    cursor: &'s mut usize,
    done: &'s mut Done,
    samples: &'s mut Samples,
    sample_every: u64,
}

impl ChunkState<'_> {
    /// Counts down to the next sampled operation.
    #[inline(always)]
    fn sample_now(&mut self) -> bool {
        *self.countdown -= 1;
        if *self.countdown == 0 {
            *self.countdown = self.sample_every;
            true
        } else {
            false
        }
    }
}

#[inline(always)]
fn lock_of(region: &RegionPtr, slot: usize, slots_per_stripe: usize) -> &StripeLock {
    let stripe = (slot / slots_per_stripe).min(region.stripes - 1);
    // SAFETY: `locks` holds `stripes` locks that live as long as the region
    // (RegionPtr's invariant); stripe < stripes.
    unsafe { &*region.locks.add(stripe) }
}

/// Which lock guards a slot: any fixed function of the slot is a correct
/// assignment (random operations are slot-aligned, so the same bytes
/// always take the same lock); a multiply-shift spreads the slots evenly
/// over the stripes without a division per operation.
#[derive(Debug, Clone, Copy)]
struct StripeMap {
    mult: u128,
    last: usize,
}

impl StripeMap {
    fn new(slots: usize, stripes: usize) -> StripeMap {
        StripeMap {
            mult: ((stripes.max(1) as u128) << 64) / slots.max(1) as u128,
            last: stripes.max(1) - 1,
        }
    }

    #[inline(always)]
    fn stripe(&self, slot: usize) -> usize {
        (((slot as u128 * self.mult) >> 64) as usize).min(self.last)
    }
}

/// One random operation of `op_size` bytes at `p`: the read's checksum, or
/// 0 after a write.
///
/// # Safety
/// `p` is 8-byte aligned with `op_size` valid bytes; `lock` (when `LOCKED`)
/// points to a live lock.
#[inline(always)]
unsafe fn random_op<const LOCKED: bool>(
    p: *mut u8,
    op_size: usize,
    write: bool,
    value: u64,
    lock: *const StripeLock,
) -> u64 {
    if write {
        if LOCKED {
            // SAFETY: a live lock (caller).
            unsafe { (*lock).write() };
        }
        // SAFETY: valid, aligned bytes (caller).
        unsafe { shared::write(p, op_size, value) };
        if LOCKED {
            // SAFETY: as above.
            unsafe { (*lock).write_unlock() };
        }
        0
    } else {
        if LOCKED {
            // SAFETY: as above.
            unsafe { (*lock).read() };
        }
        // SAFETY: as above.
        let x = unsafe { shared::read(p, op_size) };
        if LOCKED {
            // SAFETY: as above.
            unsafe { (*lock).read_unlock() };
        }
        x
    }
}

/// A sampled random operation, timed; kept out of line so the hot loop
/// stays small.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn sampled_random_op<const LOCKED: bool>(
    clock: &Clock,
    samples: &mut Samples,
    p: *mut u8,
    op_size: usize,
    write: bool,
    value: u64,
    lock: *const StripeLock,
) -> u64 {
    let t0 = clock.start();
    // SAFETY: forwarded from the caller's loop, which checked the slot.
    let x = unsafe { random_op::<LOCKED>(p, op_size, write, value, lock) };
    let ticks = clock.stop().saturating_sub(t0);
    if write {
        samples.writes.push(ticks);
    } else {
        samples.reads.push(ticks);
    }
    x
}

/// Runs `$body` `$n` times, with `$timed` true every `$every`th time (the
/// `$countdown`th from now first; the count goes on from call to call),
/// false otherwise. The operations before the next timed one run in a
/// loop with no countdown in it, `$body` compiled with `$timed` false:
/// every instruction an operation adds takes room in the reorder buffer
/// that another miss in flight could use (two more per operation read
/// 5-7% slower on a Zen 5 VM). A macro, so the loops' state stays in the
/// caller's registers (a closure's captures would live on the stack).
macro_rules! in_timed_runs {
    ($n:expr, $countdown:ident, $every:expr, |$timed:ident| $body:block) => {{
        let mut left: u64 = $n;
        while left > 0 {
            let untimed = ($countdown - 1).min(left);
            for _ in 0..untimed {
                let $timed = false;
                $body
            }
            left -= untimed;
            $countdown -= untimed;
            if left > 0 {
                // The countdown is 1: this operation is timed.
                let $timed = true;
                $body
                left -= 1;
                $countdown = $every;
            }
        }
    }};
}

/// `n` random operations. The loop keeps its state in registers and does,
/// per operation, the schedule step (none for reads only), one generator
/// step and the memory access: for 64- and 128-byte operations (compiled
/// for their size) about twenty instructions, so that as many operations
/// are in flight as the CPU can track misses — a loop twice as long would
/// halve the memory-level parallelism. The timed operations are taken
/// between runs of untimed ones ([`in_timed_runs`]), so no countdown is in
/// the loop. A
/// function of its own (not inlined into [`perform`], whose many live
/// values pushed the region's base and slot count onto the stack, loaded
/// again on every operation): the same loop then holds them in registers.
#[inline(never)]
fn random_chunk<const LOCKED: bool, const MIXED: bool, const SIZE: usize>(
    job: &Job<'_>,
    rng: &mut Rng,
    n: u64,
    state: &mut ChunkState<'_>,
) {
    // Common sizes are compile-time constants: straight-line code.
    let op_size = if SIZE > 0 { SIZE } else { job.op_size };
    let base = job.region.base;
    let slots = job.region.len / op_size;
    let stripes = StripeMap::new(slots, job.region.stripes);
    let locks = job.region.locks;
    let mut local = rng.clone();
    let mut schedule = *state.schedule;
    let mut countdown = *state.countdown;
    let sample_every = state.sample_every;
    let mut sum = 0u64;
    let mut writes = 0u64;
    in_timed_runs!(n, countdown, sample_every, |timed| {
        let write = MIXED && schedule.next_is_write();
        let slot = local.below(slots as u64) as usize;
        // SAFETY: slot < slots, so the operation lies inside the region.
        let p = unsafe { base.add(slot * op_size) };
        let lock = if LOCKED {
            // SAFETY: stripe() < stripes, the number of locks.
            unsafe { locks.add(stripes.stripe(slot)) }
        } else {
            std::ptr::null()
        };
        sum ^= if timed {
            sampled_random_op::<LOCKED>(
                job.clock,
                state.samples,
                p,
                op_size,
                write,
                slot as u64,
                lock,
            )
        } else {
            // SAFETY: p is inside the region and op-size aligned (a multiple
            // of 8 from a page-aligned base); the lock is live.
            unsafe { random_op::<LOCKED>(p, op_size, write, slot as u64, lock) }
        };
        writes += u64::from(write);
    });
    *rng = local;
    *state.schedule = schedule;
    *state.countdown = countdown;
    state.done.checksum ^= sum;
    state.done.writes += writes;
    state.done.reads += n - writes;
    state.done.bytes += n * op_size as u64;
}

/// One write of `op_size` bytes at `offset` to every copy: with `LOCKED`,
/// under stripe `stripe`'s lock of every copy, all taken (in copy order)
/// before the first store and released after the last.
///
/// # Safety
/// `offset + op_size` is within every copy, 8-byte aligned; with
/// `LOCKED`, every copy has more than `stripe` live locks.
#[inline(always)]
unsafe fn write_copies<const LOCKED: bool>(
    copies: &[RegionPtr],
    offset: usize,
    op_size: usize,
    value: u64,
    stripe: usize,
) {
    if LOCKED {
        for copy in copies {
            // SAFETY: a live lock (caller).
            unsafe { (*copy.locks.add(stripe)).write() };
        }
    }
    for copy in copies {
        // SAFETY: valid, aligned bytes of each copy (caller).
        unsafe { shared::write(copy.base.add(offset), op_size, value) };
    }
    if LOCKED {
        for copy in copies {
            // SAFETY: as above.
            unsafe { (*copy.locks.add(stripe)).write_unlock() };
        }
    }
}

/// One random operation on a replicated region: a read of the thread's
/// own copy, or a write to every copy. Returns the read's checksum.
///
/// # Safety
/// As [`random_op`] for the own copy and [`write_copies`] for all.
#[inline(always)]
unsafe fn random_copies_op<const LOCKED: bool>(
    job: &Job<'_>,
    offset: usize,
    op_size: usize,
    write: bool,
    value: u64,
    stripe: usize,
) -> u64 {
    if write {
        // SAFETY: forwarded (caller).
        unsafe { write_copies::<LOCKED>(job.copies, offset, op_size, value, stripe) };
        0
    } else {
        let own = &job.region;
        let lock = if LOCKED {
            // SAFETY: stripe < the number of locks (caller).
            unsafe { own.locks.add(stripe) }
        } else {
            std::ptr::null()
        };
        // SAFETY: forwarded (caller).
        unsafe { random_op::<LOCKED>(own.base.add(offset), op_size, false, value, lock) }
    }
}

/// A sampled [`random_copies_op`], timed.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn sampled_copies_op<const LOCKED: bool>(
    job: &Job<'_>,
    samples: &mut Samples,
    offset: usize,
    op_size: usize,
    write: bool,
    value: u64,
    stripe: usize,
) -> u64 {
    let t0 = job.clock.start();
    // SAFETY: forwarded from the caller's loop, which checked the slot.
    let x = unsafe { random_copies_op::<LOCKED>(job, offset, op_size, write, value, stripe) };
    let ticks = job.clock.stop().saturating_sub(t0);
    if write {
        samples.writes.push(ticks);
    } else {
        samples.reads.push(ticks);
    }
    x
}

/// `n` random operations on a replicated region with writes: as
/// [`random_chunk`], reads from the thread's own copy, writes to all.
fn random_copies_chunk<const LOCKED: bool, const SIZE: usize>(
    job: &Job<'_>,
    rng: &mut Rng,
    n: u64,
    state: &mut ChunkState<'_>,
) {
    let op_size = if SIZE > 0 { SIZE } else { job.op_size };
    let slots = job.region.len / op_size;
    let stripes = StripeMap::new(slots, job.region.stripes);
    let mut local = rng.clone();
    let mut schedule = *state.schedule;
    let mut countdown = *state.countdown;
    let sample_every = state.sample_every;
    let mut sum = 0u64;
    let mut writes = 0u64;
    in_timed_runs!(n, countdown, sample_every, |timed| {
        let write = schedule.next_is_write();
        let slot = local.below(slots as u64) as usize;
        let stripe = if LOCKED { stripes.stripe(slot) } else { 0 };
        sum ^= if timed {
            sampled_copies_op::<LOCKED>(
                job,
                state.samples,
                slot * op_size,
                op_size,
                write,
                slot as u64,
                stripe,
            )
        } else {
            // SAFETY: slot < slots, so the operation lies inside every copy
            // (all have the region's length), op-size aligned; the stripe
            // is below the number of locks, which every copy has.
            unsafe {
                random_copies_op::<LOCKED>(job, slot * op_size, op_size, write, slot as u64, stripe)
            }
        };
        writes += u64::from(write);
    });
    *rng = local;
    *state.schedule = schedule;
    *state.countdown = countdown;
    state.done.checksum ^= sum;
    state.done.writes += writes;
    state.done.reads += n - writes;
    state.done.bytes += n * op_size as u64;
}

/// `n` operations of any pattern through the library's replicated region:
/// reads through the thread's [`Reader`](numalab::replicated::Reader) of
/// its copy, writes (and copies, which read and write inside one write)
/// through [`Replicated::write_from`], applied by the library to every
/// copy. The data operations are the other loops' (`shared` for random
/// operations, the SIMD kernels for sequential ones).
fn library_chunk(
    job: &Job<'_>,
    library: Library<'_>,
    rng: &mut Rng,
    n: u64,
    state: &mut ChunkState<'_>,
) {
    let reader = library.value.reader_on(library.replica);
    let (op_size, isa, store) = (job.op_size, job.isa, job.store);
    let slots = job.region.len / op_size;
    let share = job.share.clone();
    let stride = match job.pattern {
        Pattern::Strided(stride) => stride as usize,
        _ => op_size,
    };
    let mut pos = *state.cursor;
    for _ in 0..n {
        let sampled = state.sample_now();
        let t0 = if sampled { job.clock.start() } else { 0 };
        let write = match job.pattern {
            Pattern::Random => {
                let write = state.schedule.next_is_write();
                let offset = rng.below(slots as u64) as usize * op_size;
                let value = (offset / op_size) as u64;
                if write {
                    library
                        .value
                        .write_from(library.replica, move |b: &mut NodeBuffer| {
                            // SAFETY: offset + op_size <= the region's length,
                            // 8-byte aligned in a page-aligned buffer.
                            unsafe { shared::write(b.as_mut_ptr().add(offset), op_size, value) }
                        });
                } else {
                    state.done.checksum ^= reader.read(|b| {
                        // SAFETY: as above.
                        unsafe { shared::read(b.as_ptr().add(offset), op_size) }
                    });
                }
                write
            }
            Pattern::Sequential | Pattern::Strided(_) => {
                let write = state.schedule.next_is_write();
                let last = share.len() - op_size;
                let offset = share.start + pos.min(last);
                pos += stride;
                if pos > last {
                    pos = 0;
                }
                if write {
                    let byte = state.done.writes as u8;
                    library
                        .value
                        .write_from(library.replica, move |b: &mut NodeBuffer| {
                            let op = &mut b.as_mut_slice()[offset..offset + op_size];
                            if op_size >= 256 {
                                kernels::write(op, byte, isa, store);
                            } else {
                                op.fill(byte);
                            }
                        });
                } else {
                    state.done.checksum ^= reader.read(|b| {
                        let op = &b.as_slice()[offset..offset + op_size];
                        if op_size >= 256 {
                            kernels::read(op, isa)
                        } else {
                            small_read(op)
                        }
                    });
                }
                write
            }
            Pattern::Copy => {
                let (half, dst_at) = copy_layout(share.len(), op_size);
                if pos + op_size > half {
                    pos = 0;
                }
                let (from, to) = (share.start + pos, share.start + dst_at + pos);
                pos += op_size;
                library
                    .value
                    .write_from(library.replica, move |b: &mut NodeBuffer| {
                        let (head, tail) = b.as_mut_slice().split_at_mut(to);
                        let (src, dst) = (&head[from..from + op_size], &mut tail[..op_size]);
                        if op_size >= 256 {
                            kernels::copy(dst, src, isa, store);
                        } else {
                            dst.copy_from_slice(src);
                        }
                    });
                state.done.reads += 1;
                true
            }
        };
        if sampled {
            let ticks = job.clock.stop().saturating_sub(t0);
            if write {
                state.samples.writes.push(ticks);
            } else {
                state.samples.reads.push(ticks);
            }
        }
        if write {
            state.done.writes += 1;
        } else {
            state.done.reads += 1;
        }
    }
    *state.cursor = pos;
    let per_op = if job.pattern == Pattern::Copy { 2 } else { 1 };
    state.done.bytes += per_op * n * op_size as u64;
}

mod shared {
    //! Loads and stores of memory other threads may write at the same
    //! time (the experiment's races are intended). On x86-64 they are
    //! inline-assembly SSE2 moves, which Rust's memory model treats like
    //! calls into foreign code, so the races are defined; the 8-byte tail
    //! (and other architectures) use relaxed atomics, also `mov`s.
    use std::sync::atomic::{AtomicU64, Ordering};

    /// XOR of the 8-byte words of `[p, p + len)`.
    ///
    /// # Safety
    /// `p` is 8-byte aligned, `len` a multiple of 8, and the bytes valid.
    #[inline(always)]
    pub(super) unsafe fn read(p: *const u8, len: usize) -> u64 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: forwarded (caller).
        let (mut off, mut x) = unsafe { read_sse2(p, len) };
        #[cfg(not(target_arch = "x86_64"))]
        let (mut off, mut x) = (0usize, 0u64);
        while off < len {
            // SAFETY: an aligned word inside the range (caller).
            x ^= unsafe { (*p.add(off).cast::<AtomicU64>()).load(Ordering::Relaxed) };
            off += 8;
        }
        x
    }

    /// The 16-byte blocks of [`read`]: how far it got, and their XOR.
    ///
    /// # Safety
    /// As [`read`].
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn read_sse2(p: *const u8, len: usize) -> (usize, u64) {
        use std::arch::x86_64::*;
        let mut off = 0;
        // SAFETY: SSE2 is part of x86-64; every load is inside
        // [p, p + len) (caller).
        unsafe {
            let mut acc = _mm_setzero_si128();
            // A cache line per iteration, then 16-byte steps.
            while off + 64 <= len {
                let (a, b, c, d): (__m128i, __m128i, __m128i, __m128i);
                std::arch::asm!(
                    "movdqu {a}, xmmword ptr [{p}]",
                    "movdqu {b}, xmmword ptr [{p} + 16]",
                    "movdqu {c}, xmmword ptr [{p} + 32]",
                    "movdqu {d}, xmmword ptr [{p} + 48]",
                    p = in(reg) p.add(off),
                    a = out(xmm_reg) a,
                    b = out(xmm_reg) b,
                    c = out(xmm_reg) c,
                    d = out(xmm_reg) d,
                    options(nostack, preserves_flags, readonly, pure),
                );
                acc = _mm_xor_si128(acc, _mm_xor_si128(_mm_xor_si128(a, b), _mm_xor_si128(c, d)));
                off += 64;
            }
            while off + 16 <= len {
                let v: __m128i;
                std::arch::asm!(
                    "movdqu {v}, xmmword ptr [{p}]",
                    p = in(reg) p.add(off),
                    v = out(xmm_reg) v,
                    options(nostack, preserves_flags, readonly, pure),
                );
                acc = _mm_xor_si128(acc, v);
                off += 16;
            }
            let high = _mm_unpackhi_epi64(acc, acc);
            (off, _mm_cvtsi128_si64(_mm_xor_si128(acc, high)) as u64)
        }
    }

    /// Writes `value` into every 8-byte word of `[p, p + len)`.
    ///
    /// # Safety
    /// As [`read`].
    #[inline(always)]
    pub(super) unsafe fn write(p: *mut u8, len: usize, value: u64) {
        let mut off = 0;
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::*;
            // SAFETY: SSE2 is part of x86-64; every store is inside
            // [p, p + len) (caller).
            unsafe {
                let v = _mm_set1_epi64x(value as i64);
                while off + 64 <= len {
                    std::arch::asm!(
                        "movdqu xmmword ptr [{p}], {v}",
                        "movdqu xmmword ptr [{p} + 16], {v}",
                        "movdqu xmmword ptr [{p} + 32], {v}",
                        "movdqu xmmword ptr [{p} + 48], {v}",
                        p = in(reg) p.add(off),
                        v = in(xmm_reg) v,
                        options(nostack, preserves_flags),
                    );
                    off += 64;
                }
                while off + 16 <= len {
                    std::arch::asm!(
                        "movdqu xmmword ptr [{p}], {v}",
                        p = in(reg) p.add(off),
                        v = in(xmm_reg) v,
                        options(nostack, preserves_flags),
                    );
                    off += 16;
                }
            }
        }
        while off < len {
            // SAFETY: an aligned word inside the range (caller).
            unsafe { (*p.add(off).cast::<AtomicU64>()).store(value, Ordering::Relaxed) };
            off += 8;
        }
    }
}

/// The thread's own share of `region` (one copy) as a slice.
///
/// # Safety
/// No other reference to the share may be alive while the slice is (the
/// loops below make one per operation, or one per chunk without copies).
unsafe fn share_of<'r>(job: &Job<'_>, region: &RegionPtr) -> &'r mut [u8] {
    debug_assert!(job.share.end <= region.len);
    // SAFETY: shares of one region are disjoint (the plan cuts them) and
    // only their thread touches them with sequential patterns, in every
    // copy; the region outlives the run (RegionPtr's invariant); the
    // caller keeps the slice unique.
    unsafe { std::slice::from_raw_parts_mut(region.base.add(job.share.start), job.share.len()) }
}

#[inline(always)]
fn small_read(op: &[u8]) -> u64 {
    let mut x = 0;
    for word in op.chunks_exact(8) {
        x ^= u64::from_ne_bytes(word.try_into().unwrap_or([0; 8]));
    }
    x
}

#[inline(always)]
fn write_op(op: &mut [u8], byte: u8, job: &Job<'_>) {
    if op.len() >= 256 {
        kernels::write(op, byte, job.isa, job.store);
    } else {
        op.fill(byte);
    }
}

/// Sequential and strided operations over the thread's share. With
/// several copies, reads are from the thread's own and a write stores to
/// every copy, under the operation's lock of every copy when `locked`
/// (all taken in copy order, then released).
fn walk_chunk(job: &Job<'_>, stride: usize, locked: bool, n: u64, state: &mut ChunkState<'_>) {
    let op_size = job.op_size;
    let len = job.share.len();
    let last = len - op_size;
    let stripes = job.region.stripes.max(1);
    let slots_per_stripe = (job.region.len / op_size).div_ceil(stripes).max(1);
    let copies: &[RegionPtr] = if job.copies.len() > 1 {
        job.copies
    } else {
        std::slice::from_ref(&job.region)
    };
    let mut pos = (*state.cursor).min(last);
    for _ in 0..n {
        let write = state.schedule.next_is_write();
        let sampled = state.sample_now();
        let t0 = if sampled { job.clock.start() } else { 0 };
        let slot = (job.share.start + pos) / op_size;
        if write {
            let byte = state.done.writes as u8;
            if locked {
                for copy in copies {
                    lock_of(copy, slot, slots_per_stripe).write();
                }
            }
            for copy in copies {
                // SAFETY: this operation's slice is the only live
                // reference to the share of this copy.
                let share = unsafe { share_of(job, copy) };
                write_op(&mut share[pos..pos + op_size], byte, job);
            }
            if locked {
                for copy in copies {
                    lock_of(copy, slot, slots_per_stripe).write_unlock();
                }
            }
            state.done.writes += 1;
        } else {
            let lock = locked.then(|| lock_of(&job.region, slot, slots_per_stripe));
            if let Some(lock) = lock {
                lock.read();
            }
            // SAFETY: as above, for the thread's own copy.
            let share = unsafe { share_of(job, &job.region) };
            let op = &share[pos..pos + op_size];
            state.done.checksum ^= if op_size >= 256 {
                kernels::read(op, job.isa)
            } else {
                small_read(op)
            };
            if let Some(lock) = lock {
                lock.read_unlock();
            }
            state.done.reads += 1;
        }
        if sampled {
            let ticks = job.clock.stop().saturating_sub(t0);
            if write {
                state.samples.writes.push(ticks);
            } else {
                state.samples.reads.push(ticks);
            }
        }
        pos += stride;
        if pos > last {
            pos = 0;
        }
    }
    *state.cursor = pos;
    state.done.bytes += n * op_size as u64;
}

/// Half a page: see [`copy_layout`].
const COPY_SKEW: usize = 2048;

/// Where a copy of a share of `len` bytes reads and writes: the source is
/// `[0, half)` and the destination `[dst_at, dst_at + half)`, `half` a
/// whole number of ops. The destination starts half a page past the
/// source's end: at a distance that is a multiple of 4 KiB every store
/// has the same low 12 address bits as a load beside it, which the CPU's
/// memory disambiguation takes for a possible conflict (4K aliasing; the
/// copy ran at 0.85-0.97x likwid-bench's, whose arrays are not a power of
/// two apart, on an AMD EPYC VM). A share too small for the skew copies
/// half to half.
fn copy_layout(len: usize, op_size: usize) -> (usize, usize) {
    let skewed = len.saturating_sub(COPY_SKEW) / 2 / op_size * op_size;
    if skewed >= op_size {
        (skewed, skewed + COPY_SKEW)
    } else {
        let half = len / 2 / op_size * op_size;
        (half, half)
    }
}

/// Copies of the first half of the share into the second half: from the
/// thread's own copy into every copy of a replicated region.
fn copy_chunk(job: &Job<'_>, n: u64, state: &mut ChunkState<'_>) {
    let op_size = job.op_size;
    let (half, dst_at) = copy_layout(job.share.len(), op_size);
    let others: &[RegionPtr] = if job.copies.len() > 1 {
        job.copies
    } else {
        &[]
    };
    // SAFETY: the only live reference to the thread's share of its own
    // copy until the end of the chunk (other copies are reached through
    // their own pointers, never this one).
    let share = unsafe { share_of(job, &job.region) };
    let (src, rest) = share.split_at_mut(half);
    let skew = dst_at - half;
    let dst = &mut rest[skew..skew + half];
    let mut pos = *state.cursor;
    for _ in 0..n {
        if pos + op_size > half {
            pos = 0;
        }
        let from = &src[pos..pos + op_size];
        let copy = |to: &mut [u8]| {
            if op_size >= 256 {
                kernels::copy(to, from, job.isa, job.store);
            } else {
                to.copy_from_slice(from);
            }
        };
        copy(&mut dst[pos..pos + op_size]);
        for other in others.iter().filter(|c| c.base != job.region.base) {
            let at = job.share.start + dst_at + pos;
            // SAFETY: the thread's share of another copy, which only this
            // thread touches; `at + op_size` lies within it.
            copy(unsafe { std::slice::from_raw_parts_mut(other.base.add(at), op_size) });
        }
        pos += op_size;
    }
    *state.cursor = pos;
    state.done.reads += n;
    state.done.writes += n;
    state.done.bytes += 2 * n * op_size as u64;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_keep_source_and_destination_off_a_4k_multiple() {
        for (len, op) in [(1 << 30, 1 << 20), (2 << 20, 4096), (1 << 20, 256)] {
            let (half, dst_at) = copy_layout(len, op);
            assert_eq!(half % op, 0);
            assert!(
                half >= op && dst_at + half <= len,
                "{len} {op}: {half} {dst_at}"
            );
            assert_eq!(dst_at - half, COPY_SKEW);
            // The distance between an op's load and its store.
            assert_ne!(dst_at % 4096, 0, "{len} {op}: a multiple of 4 KiB apart");
            assert_eq!(dst_at % 64, 0, "same phase as the source");
        }
        // Too small for the skew: half to half.
        assert_eq!(copy_layout(2 * 4096, 4096), (4096, 4096));
    }

    struct Memory {
        words: Vec<u64>,
    }

    impl Memory {
        fn new(bytes: usize) -> Memory {
            Memory {
                words: vec![0; bytes / 8],
            }
        }
        fn region(&mut self, locks: &[StripeLock]) -> RegionPtr {
            RegionPtr {
                base: self.words.as_mut_ptr().cast(),
                len: self.words.len() * 8,
                locks: locks.as_ptr(),
                stripes: locks.len(),
            }
        }
    }

    fn job<'a>(
        region: RegionPtr,
        pattern: Pattern,
        op_size: usize,
        mix: &str,
        ops: u64,
        deps: &'a (Clock, AtomicBool, AtomicU64),
    ) -> Job<'a> {
        Job {
            region,
            copies: &[],
            library: None,
            share: 0..region.len,
            pattern,
            op_size,
            mix: mix.parse().unwrap(),
            isa: Isa::detect(),
            store: Store::Cached,
            sample_every: 16,
            ops: Some(ops),
            duration: None,
            locked: region.stripes > 1,
            clock: &deps.0,
            stop: &deps.1,
            progress: &deps.2,
        }
    }

    fn deps() -> (Clock, AtomicBool, AtomicU64) {
        (
            Clock::calibrate(),
            AtomicBool::new(false),
            AtomicU64::new(0),
        )
    }

    #[test]
    fn random_ops_follow_the_ratio_and_count_bytes() {
        let deps = deps();
        let locks: Vec<StripeLock> = (0..4).map(|_| StripeLock::default()).collect();
        for locked in [false, true] {
            let mut memory = Memory::new(1 << 16);
            let stripes = if locked { &locks[..] } else { &locks[..1] };
            let job = job(
                memory.region(stripes),
                Pattern::Random,
                128,
                "2:1",
                30_000,
                &deps,
            );
            let mut samples = Samples::default();
            let done = perform(&job, &mut Rng::new(1), &mut samples);
            assert_eq!((done.reads, done.writes), (20_000, 10_000));
            assert_eq!(done.bytes, 30_000 * 128);
            assert_eq!(samples.reads.len() + samples.writes.len(), 30_000 / 16);
            assert!(memory.words.iter().any(|&w| w != 0), "writes landed");
            assert!(!done.stopped);
        }
        assert!(
            locks.iter().all(|l| format!("{l:?}").contains("state: 0")),
            "all released"
        );
    }

    #[test]
    fn reads_and_writes_are_both_timed_when_the_cycle_divides_the_stride() {
        // 3:1 is a cycle of four operations, which divides 1024: every
        // 1024th operation was the cycle's write, and no read was timed.
        let deps = deps();
        let locks = [StripeLock::default()];
        for pattern in [Pattern::Random, Pattern::Sequential] {
            let mut memory = Memory::new(1 << 16);
            let mut j = job(memory.region(&locks), pattern, 64, "3:1", 400_000, &deps);
            j.sample_every = 1024;
            let mut samples = Samples::default();
            let done = perform(&j, &mut Rng::new(5), &mut samples);
            assert_eq!((done.reads, done.writes), (300_000, 100_000));
            let (r, w) = (samples.reads.len(), samples.writes.len());
            assert!(r > 0 && w > 0, "{pattern}: {r} reads and {w} writes timed");
            // One in 1025 (shares no factor with 4): every place of the
            // cycle in turn, so reads and writes in their ratio.
            assert_eq!(r + w, 400_000 / 1025, "{pattern}");
            assert!((3 * w).abs_diff(r) <= 3, "{pattern}: {r} reads, {w} writes");
        }
        assert_eq!(sampling_stride(1024, "3:1".parse().unwrap()), 1025);
        assert_eq!(sampling_stride(1023, "2:1".parse().unwrap()), 1024);
        assert_eq!(sampling_stride(1024, "1:0".parse().unwrap()), 1024);
        assert_eq!(sampling_stride(0, "1:1".parse().unwrap()), 0);
    }

    #[test]
    fn latency_samples_stay_bounded_however_many_operations() {
        // Was one sample kept per timed operation: 10^14 operations asked
        // for hundreds of gigabytes before the first ran.
        let deps = deps();
        let locks = [StripeLock::default()];
        let mut memory = Memory::new(1 << 16);
        let mut j = job(
            memory.region(&locks),
            Pattern::Random,
            64,
            "1:1",
            200_001,
            &deps,
        );
        j.sample_every = 1;
        let mut samples = Samples::new(1000, Some(200_001), 3);
        assert!(samples.reads.kept.capacity() < 2000, "sized to the bound");
        perform(&j, &mut Rng::new(4), &mut samples);
        assert_eq!(
            (samples.reads.seen, samples.writes.seen),
            (100_001, 100_000)
        );
        assert_eq!((samples.reads.len(), samples.writes.len()), (1000, 1000));

        // The kept ones are a uniform sample of all: their mean is the
        // stream's (0..1e6: 500 000, with a standard error near 2 900).
        let mut reservoir = Reservoir::new(10_000, None, 9);
        for tick in 0..1_000_000u64 {
            reservoir.push(tick);
        }
        assert_eq!((reservoir.len(), reservoir.seen), (10_000, 1_000_000));
        let mean = reservoir.kept.iter().sum::<u64>() as f64 / 10_000.0;
        assert!((mean - 500_000.0).abs() < 20_000.0, "mean {mean}");
        let late = reservoir.kept.iter().filter(|&&t| t >= 900_000).count();
        assert!((800..1200).contains(&late), "{late} of the last tenth kept");
        assert_eq!(samples_per_thread(1), SAMPLES_PER_THREAD);
        assert_eq!(samples_per_thread(4096), MIN_SAMPLES_PER_THREAD);
    }

    #[test]
    fn sequential_strided_and_copy_stay_in_the_share() {
        let deps = deps();
        let locks = [StripeLock::default()];
        let mut memory = Memory::new(1 << 16);
        let region = memory.region(&locks);
        for (pattern, op) in [
            (Pattern::Sequential, 64),
            (Pattern::Sequential, 4096),
            (Pattern::Strided(1000), 64),
            (Pattern::Copy, 512),
            (Pattern::Copy, 64),
        ] {
            let mut j = job(region, pattern, op, "1:1", 1000, &deps);
            j.share = 8192..40960;
            let before: Vec<u64> = memory.words.clone();
            let done = perform(&j, &mut Rng::new(2), &mut Samples::default());
            assert_eq!(done.reads + done.writes, 1000, "{pattern}");
            assert_eq!(
                done.bytes,
                1000 * op as u64,
                "{pattern}: bytes = ops x op size"
            );
            for (i, (a, b)) in memory.words.iter().zip(&before).enumerate() {
                let byte = i * 8;
                if !(8192..40960).contains(&byte) {
                    assert_eq!(a, b, "{pattern} wrote outside its share at {byte}");
                }
            }
        }
    }

    /// Copies of one region, each with its own stripe locks.
    struct Copies {
        memories: Vec<Memory>,
        locks: Vec<Vec<StripeLock>>,
    }

    impl Copies {
        fn new(copies: usize, bytes: usize, stripes: usize) -> Copies {
            Copies {
                memories: (0..copies).map(|_| Memory::new(bytes)).collect(),
                locks: (0..copies)
                    .map(|_| (0..stripes).map(|_| StripeLock::default()).collect())
                    .collect(),
            }
        }
        fn regions(&mut self) -> Vec<RegionPtr> {
            self.memories
                .iter_mut()
                .zip(&self.locks)
                .map(|(m, l)| m.region(l))
                .collect()
        }
        fn all_equal(&self) -> bool {
            self.memories.windows(2).all(|w| w[0].words == w[1].words)
        }
    }

    #[test]
    fn writes_to_copies_keep_them_identical() {
        let deps = deps();
        for (pattern, op, locked) in [
            (Pattern::Random, 64, true),
            (Pattern::Random, 128, false),
            (Pattern::Random, 72, false),
            (Pattern::Sequential, 64, true),
            (Pattern::Sequential, 512, false),
            (Pattern::Strided(4096), 256, true),
            (Pattern::Copy, 128, false),
        ] {
            let mut copies = Copies::new(3, 1 << 16, if locked { 8 } else { 1 });
            if pattern == Pattern::Copy {
                // Something to copy, the same in every copy.
                for m in &mut copies.memories {
                    m.words
                        .iter_mut()
                        .enumerate()
                        .for_each(|(i, w)| *w = i as u64 + 1);
                }
            }
            let before = copies.memories[0].words.clone();
            let regions = copies.regions();
            // Two threads, each reading its own copy (0 and 2), writing to
            // all, over their own halves for the walking patterns.
            std::thread::scope(|s| {
                for (t, own) in [(0usize, 0usize), (1, 2)] {
                    let (regions, deps) = (&regions, &deps);
                    s.spawn(move || {
                        let mut j = job(regions[own], pattern, op, "1:1", 4000, deps);
                        j.copies = regions;
                        j.locked = locked;
                        j.share = t * (1 << 15)..(t + 1) * (1 << 15);
                        let mut samples = Samples::default();
                        let done = perform(&j, &mut Rng::new(t as u64 + 9), &mut samples);
                        assert_eq!(done.reads + done.writes, 4000, "{pattern}");
                        if pattern != Pattern::Copy {
                            // One in 17: the stride of 16 moved off the 1:1 cycle's 2.
                            assert_eq!(
                                samples.reads.len() + samples.writes.len(),
                                4000 / 17,
                                "{pattern}"
                            );
                        }
                        assert_eq!(
                            done.bytes,
                            4000 * op as u64,
                            "{pattern}: bytes = ops x op size"
                        );
                    });
                }
            });
            assert_ne!(
                copies.memories[1].words, before,
                "{pattern}: writes reached copy 1, which no thread reads"
            );
            assert!(copies.all_equal(), "{pattern} {op}: the copies differ");
            assert!(
                copies
                    .locks
                    .iter()
                    .flatten()
                    .all(|l| format!("{l:?}").contains("state: 0")),
                "{pattern}: every lock released"
            );
        }
    }

    #[test]
    fn reads_come_from_the_threads_own_copy() {
        let deps = deps();
        let mut copies = Copies::new(2, 1 << 14, 4);
        copies.memories[1].words.fill(0x0101_0101_0101_0101);
        let regions = copies.regions();
        let mut j = job(regions[1], Pattern::Random, 8, "1:0", 1, &deps);
        j.copies = &regions;
        let done = perform(&j, &mut Rng::new(1), &mut Samples::default());
        assert_eq!(done.checksum, 0x0101_0101_0101_0101, "one word of copy 1");
        let mut j = job(regions[0], Pattern::Random, 8, "1:0", 1, &deps);
        j.copies = &regions;
        assert_eq!(
            perform(&j, &mut Rng::new(1), &mut Samples::default()).checksum,
            0
        );
    }

    #[test]
    fn library_modes_apply_every_write_to_every_replica() {
        use numalab::replicated::{Mode, ReplicaSet};
        let deps = deps();
        for mode in [Mode::Broadcast, Mode::Log] {
            for (pattern, op) in [
                (Pattern::Random, 64),
                (Pattern::Sequential, 256),
                (Pattern::Copy, 128),
            ] {
                // Three replicas on this machine's node 0.
                let set = ReplicaSet::emulated(vec![0, 0, 0]).unwrap();
                let initial: Vec<u8> = (0..1 << 15).map(|i| (i % 251) as u8 + 1).collect();
                let value = Replicated::bytes(set, mode, &initial).unwrap();
                let region = value.regions()[0];
                let region = RegionPtr {
                    base: region.ptr.cast_mut(),
                    len: region.len,
                    locks: std::ptr::null(),
                    stripes: 1,
                };
                std::thread::scope(|s| {
                    for t in 0..2usize {
                        let (value, deps) = (&value, &deps);
                        s.spawn(move || {
                            let mut j = job(region, pattern, op, "1:1", 2000, deps);
                            j.library = Some(Library {
                                value,
                                replica: 2 * t,
                            });
                            j.share = t * (1 << 14)..(t + 1) * (1 << 14);
                            let mut samples = Samples::default();
                            let done = perform(&j, &mut Rng::new(t as u64), &mut samples);
                            assert_eq!(done.reads + done.writes, 2000, "{mode} {pattern}");
                            assert_eq!(done.bytes, 2000 * op as u64);
                            if pattern != Pattern::Copy {
                                // One in 17: the stride of 16 moved off the 1:1 cycle's 2.
                                assert_eq!(samples.reads.len() + samples.writes.len(), 2000 / 17);
                            }
                        });
                    }
                });
                value.sync();
                let bytes: Vec<Vec<u8>> = value
                    .regions()
                    .iter()
                    // SAFETY: no write runs now.
                    .map(|r| unsafe { std::slice::from_raw_parts(r.ptr, r.len) }.to_vec())
                    .collect();
                assert_ne!(bytes[1], initial, "{mode} {pattern}: replica 1 written");
                assert!(
                    bytes.windows(2).all(|w| w[0] == w[1]),
                    "{mode} {pattern}: replicas differ"
                );
                let writes: u64 = value.stats().iter().map(|s| s.writes).sum();
                assert_eq!(writes, 2000, "{mode} {pattern}: half the operations wrote");
            }
        }
    }

    #[test]
    fn the_stop_flag_ends_a_timed_run() {
        let deps = deps();
        let locks = [StripeLock::default()];
        let mut memory = Memory::new(1 << 16);
        let mut j = job(memory.region(&locks), Pattern::Random, 64, "1:0", 0, &deps);
        j.ops = None;
        j.duration = Some(Duration::from_secs(3600));
        deps.1.store(true, Ordering::Relaxed);
        let done = perform(&j, &mut Rng::new(3), &mut Samples::default());
        assert!(done.stopped);
        assert_eq!(
            done.reads,
            chunk_ops(64),
            "one chunk, then the flag is seen"
        );
        assert_eq!(deps.2.load(Ordering::Relaxed), done.reads);
    }

    #[test]
    fn shared_reads_and_writes_cover_every_word() {
        let mut words: Vec<u64> = (0..80u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect();
        for len in [8usize, 16, 24, 64, 72, 128, 512] {
            let expected = words[1..1 + len / 8].iter().fold(0, |a, b| a ^ b);
            // SAFETY: inside `words`, 8-byte aligned.
            let got = unsafe { shared::read(words.as_ptr().add(1).cast(), len) };
            assert_eq!(got, expected, "len {len}");
        }
        // SAFETY: as above.
        unsafe { shared::write(words.as_mut_ptr().add(3).cast(), 40, 7) };
        assert_eq!(
            words[2..9],
            [
                2u64.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                7,
                7,
                7,
                7,
                7,
                8u64.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ]
        );
    }

    #[test]
    fn stripes_cover_every_lock_evenly() {
        let map = StripeMap::new(1000, 10);
        let mut counts = [0; 10];
        for slot in 0..1000 {
            counts[map.stripe(slot)] += 1;
        }
        assert!(
            counts.iter().all(|&c| (99..=101).contains(&c)),
            "{counts:?}"
        );
        let more_locks_than_slots = StripeMap::new(3, 8);
        assert!((0..3).all(|s| more_locks_than_slots.stripe(s) < 8));
    }

    #[test]
    fn schedule_matches_mix() {
        let mix: Mix = "3:2".parse().unwrap();
        let mut s = Schedule::new(mix);
        for i in 0..100 {
            assert_eq!(s.next_is_write(), mix.is_write(i));
        }
    }
}
