//! A cheap clock for timing single operations.
//!
//! On x86-64 with an invariant TSC (constant rate, running in every
//! C-state) the time-stamp counter is read directly — about ten
//! nanoseconds — and converted to nanoseconds with a rate calibrated
//! against [`Instant`]. The read is fenced (`lfence; rdtsc` before,
//! `rdtscp; lfence` after, as Intel's white paper *How to Benchmark Code
//! Execution Times* recommends) so the timed operation cannot drift out
//! of the window. Elsewhere [`Instant`] itself is used. The cost of a pair
//! of reads is measured and subtracted from every sample.

use std::time::{Duration, Instant};

/// Which counter the clock reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The time-stamp counter.
    Tsc,
    /// `Instant` (the vDSO's `clock_gettime`).
    Instant,
}

/// A calibrated clock. [`Clock::start`] and [`Clock::stop`] return ticks;
/// [`Clock::nanos`] converts a difference to nanoseconds.
///
/// ```
/// use numalab_bench::experiment::Clock;
/// let clock = Clock::calibrate();
/// let t0 = clock.start();
/// std::thread::sleep(std::time::Duration::from_millis(2));
/// let ns = clock.nanos(clock.stop() - t0);
/// assert!(ns > 1.5e6, "{ns}");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    source: Source,
    base: Instant,
    ns_per_tick: f64,
    overhead_ticks: u64,
}

impl Clock {
    /// The TSC where it is invariant, else `Instant`; calibrated (about
    /// 20 ms) and its overhead measured.
    pub fn calibrate() -> Clock {
        let source = if invariant_tsc() {
            Source::Tsc
        } else {
            Source::Instant
        };
        let mut clock = Clock {
            source,
            base: Instant::now(),
            ns_per_tick: 1.0,
            overhead_ticks: 0,
        };
        if source == Source::Tsc {
            let (t0, i0) = (clock.start(), Instant::now());
            while i0.elapsed() < Duration::from_millis(20) {
                std::hint::spin_loop();
            }
            let (t1, elapsed) = (clock.stop(), i0.elapsed());
            let ticks = t1.saturating_sub(t0).max(1);
            clock.ns_per_tick = elapsed.as_nanos() as f64 / ticks as f64;
        }
        // The smallest of many back-to-back pairs: the cost every sample
        // carries.
        clock.overhead_ticks = (0..2000)
            .map(|_| {
                let t = clock.start();
                clock.stop().saturating_sub(t)
            })
            .min()
            .unwrap_or(0);
        clock
    }

    /// `tsc` or `instant`.
    pub fn name(&self) -> &'static str {
        match self.source {
            Source::Tsc => "tsc",
            Source::Instant => "instant",
        }
    }

    /// A reading before the timed work.
    #[inline(always)]
    pub fn start(&self) -> u64 {
        match self.source {
            Source::Tsc => tsc_start(),
            Source::Instant => self.base.elapsed().as_nanos() as u64,
        }
    }

    /// A reading after the timed work (waits for it to complete).
    #[inline(always)]
    pub fn stop(&self) -> u64 {
        match self.source {
            Source::Tsc => tsc_stop(),
            Source::Instant => self.base.elapsed().as_nanos() as u64,
        }
    }

    /// Ticks to nanoseconds, the clock's own cost subtracted (never below
    /// zero).
    #[inline]
    pub fn nanos(&self, ticks: u64) -> f64 {
        ticks.saturating_sub(self.overhead_ticks) as f64 * self.ns_per_tick
    }

    /// The cost of a start/stop pair, in nanoseconds.
    pub fn overhead_ns(&self) -> f64 {
        self.overhead_ticks as f64 * self.ns_per_tick
    }
}

#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    use std::arch::x86_64::__cpuid;
    // CPUID leaf 0x8000_0007, EDX bit 8: the TSC runs at a constant rate
    // in every P-, C- and T-state.
    let max_extended = __cpuid(0x8000_0000).eax;
    max_extended >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0
}

#[cfg(not(target_arch = "x86_64"))]
fn invariant_tsc() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tsc_start() -> u64 {
    use std::arch::x86_64::{_mm_lfence, _rdtsc};
    // SAFETY: lfence (SSE2) and rdtsc exist on every x86-64 CPU; neither
    // touches memory.
    unsafe {
        _mm_lfence();
        let t = _rdtsc();
        _mm_lfence();
        t
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tsc_stop() -> u64 {
    use std::arch::x86_64::{__rdtscp, _mm_lfence};
    let mut aux = 0u32;
    // SAFETY: rdtscp only writes the processor id into `aux`, a valid
    // local (every x86-64 CPU with an invariant TSC has rdtscp); lfence
    // is SSE2, present on every x86-64 CPU.
    unsafe {
        let t = __rdtscp(&mut aux);
        _mm_lfence();
        t
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn tsc_start() -> u64 {
    0
}

#[cfg(not(target_arch = "x86_64"))]
fn tsc_stop() -> u64 {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_agrees_with_instant() {
        let clock = Clock::calibrate();
        let (t0, i0) = (clock.start(), Instant::now());
        std::thread::sleep(Duration::from_millis(100));
        let (t1, elapsed) = (clock.stop(), i0.elapsed());
        let ns = clock.nanos(t1 - t0);
        let reference = elapsed.as_nanos() as f64;
        assert!(
            (ns - reference).abs() < 0.05 * reference,
            "{} clock says {ns} ns, Instant {reference} ns",
            clock.name()
        );
        assert!(clock.overhead_ns() >= 0.0);
        assert_eq!(clock.nanos(0), 0.0, "never negative");
    }
}
