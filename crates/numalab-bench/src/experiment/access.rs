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

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use std::time::{Duration, Instant};

use super::clock::Clock;
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

/// What one thread does in one run.
#[derive(Debug)]
pub(crate) struct Job<'a> {
    /// Its region.
    pub region: RegionPtr,
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

/// Latency samples of one thread, in clock ticks.
#[derive(Debug, Default)]
pub(crate) struct Samples {
    /// Of reads.
    pub reads: Vec<u64>,
    /// Of writes.
    pub writes: Vec<u64>,
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
        job.sample_every
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
            (Pattern::Sequential, locked) => walk_chunk(job, job.op_size, locked, n, &mut state),
            (Pattern::Strided(stride), locked) => {
                walk_chunk(job, stride as usize, locked, n, &mut state)
            }
            (Pattern::Copy, _) => copy_chunk(job, n, &mut state),
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

/// `n` random operations. The loop keeps its state in registers and does,
/// per operation, the schedule step (none for reads only), one generator
/// step, one countdown and the memory access: for 64- and 128-byte
/// operations (compiled for their size) about twenty instructions, so
/// that as many operations are in flight as the CPU can track misses —
/// a loop twice as long would halve the memory-level parallelism.
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
    for _ in 0..n {
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
        countdown -= 1;
        if countdown == 0 {
            countdown = sample_every;
            sum ^= sampled_random_op::<LOCKED>(
                job.clock,
                state.samples,
                p,
                op_size,
                write,
                slot as u64,
                lock,
            );
        } else {
            // SAFETY: p is inside the region and op-size aligned (a multiple
            // of 8 from a page-aligned base); the lock is live.
            sum ^= unsafe { random_op::<LOCKED>(p, op_size, write, slot as u64, lock) };
        }
        writes += u64::from(write);
    }
    *rng = local;
    *state.schedule = schedule;
    *state.countdown = countdown;
    state.done.checksum ^= sum;
    state.done.writes += writes;
    state.done.reads += n - writes;
    state.done.bytes += n * op_size as u64;
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

/// The thread's own share as a slice.
fn share_mut<'r>(job: &Job<'_>) -> &'r mut [u8] {
    debug_assert!(job.share.end <= job.region.len);
    // SAFETY: shares of one region are disjoint (the plan cuts them) and
    // only their thread touches them with sequential patterns; the region
    // outlives the run (RegionPtr's invariant).
    unsafe { std::slice::from_raw_parts_mut(job.region.base.add(job.share.start), job.share.len()) }
}

#[inline(always)]
fn small_read(op: &[u8]) -> u64 {
    let mut x = 0;
    for word in op.chunks_exact(8) {
        x ^= u64::from_ne_bytes(word.try_into().unwrap_or([0; 8]));
    }
    x
}

/// Sequential and strided operations over the thread's share.
fn walk_chunk(job: &Job<'_>, stride: usize, locked: bool, n: u64, state: &mut ChunkState<'_>) {
    let share = share_mut(job);
    let op_size = job.op_size;
    let last = share.len() - op_size;
    let stripes = job.region.stripes.max(1);
    let slots_per_stripe = (job.region.len / op_size).div_ceil(stripes).max(1);
    let mut pos = (*state.cursor).min(last);
    for _ in 0..n {
        let write = state.schedule.next_is_write();
        let sampled = state.sample_now();
        let t0 = if sampled { job.clock.start() } else { 0 };
        let lock = locked.then(|| {
            lock_of(
                &job.region,
                (job.share.start + pos) / op_size,
                slots_per_stripe,
            )
        });
        let op = &mut share[pos..pos + op_size];
        if write {
            if let Some(lock) = lock {
                lock.write();
            }
            if op_size >= 256 {
                kernels::write(op, state.done.writes as u8, job.isa, job.store);
            } else {
                op.fill(state.done.writes as u8);
            }
            if let Some(lock) = lock {
                lock.write_unlock();
            }
            state.done.writes += 1;
        } else {
            if let Some(lock) = lock {
                lock.read();
            }
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

/// Copies of the first half of the share into the second half.
fn copy_chunk(job: &Job<'_>, n: u64, state: &mut ChunkState<'_>) {
    let share = share_mut(job);
    let op_size = job.op_size;
    let half = share.len() / 2 / op_size * op_size;
    let (src, rest) = share.split_at_mut(half);
    let dst = &mut rest[..half];
    let mut pos = *state.cursor;
    for _ in 0..n {
        if pos + op_size > half {
            pos = 0;
        }
        let (from, to) = (&src[pos..pos + op_size], &mut dst[pos..pos + op_size]);
        if op_size >= 256 {
            kernels::copy(to, from, job.isa, job.store);
        } else {
            to.copy_from_slice(from);
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
