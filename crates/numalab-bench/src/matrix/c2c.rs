//! Cache-to-cache latency: two threads pinned on two CPUs pass one cache
//! line back and forth. Thread A waits for an even value and writes the
//! next odd one, thread B waits for an odd value and writes the next even
//! one; each hand-over moves the line from one core's cache to the
//! other's. The figure is one hand-over (half a round trip), in ns.
//!
//! The line lives in memory bound to the first CPU's node. On a virtual
//! machine the figure includes whatever the hypervisor does when a vCPU
//! spins; numalab reports what it measures.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use numalab::affinity;
use numalab::audit::PlacementAudit;
use numalab::{CpuSet, MemPolicy, NodeBuffer, NodeSet};

use super::MatrixError;

/// What one pair measured.
///
/// ```
/// use numalab_bench::matrix::c2c::measure;
/// # let cpus: Vec<u32> = numalab::affinity::thread_cpus()?.iter().collect();
/// # let node = numalab::affinity::current().node;
/// // Two CPUs (the same one twice on a one-CPU machine) pass a line on
/// // this node: 1000 round trips per sample, three samples.
/// let run = measure(cpus[0], *cpus.last().unwrap(), node, 1000, 3)?;
/// assert_eq!(run.samples_ns.len(), 3);
/// assert!(run.samples_ns.iter().all(|ns| *ns > 0.0));
/// assert!(run.placement.is_match(), "{}", run.placement);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct PingPong {
    /// Nanoseconds per one-way hand-over, one per repeat.
    pub samples_ns: Vec<f64>,
    /// Placement of the page holding the line.
    pub placement: PlacementAudit,
}

/// A partner that has not answered for this long is taken as lost (its
/// CPU descheduled for good, or its thread failed): the run stops with an
/// error instead of spinning forever.
pub const STALL: Duration = Duration::from_secs(10);

/// Passes a line `round_trips` times per sample between `cpu_a` and
/// `cpu_b`, the line bound to `line_node`.
pub fn measure(
    cpu_a: u32,
    cpu_b: u32,
    line_node: u32,
    round_trips: u64,
    repeats: usize,
) -> Result<PingPong, MatrixError> {
    let mut page = NodeBuffer::new(4096, MemPolicy::Bind(NodeSet::single(line_node)))?;
    // SAFETY: the buffer is page-aligned (so aligned for u64), 4096 bytes
    // long, zero-filled, and outlives every use of `line` below (the
    // threads are scoped inside this function); while they run it is
    // accessed only through this atomic.
    let line = unsafe { AtomicU64::from_ptr(page.as_mut_ptr().cast::<u64>()) };
    let abort = AtomicBool::new(false);
    let barrier = Barrier::new(2);
    let (abort, barrier) = (&abort, &barrier);
    let samples = std::thread::scope(|scope| {
        let b = scope.spawn(move || -> Result<(), MatrixError> {
            let bound = affinity::bind_thread_to_cpus(&CpuSet::single(cpu_b));
            barrier.wait();
            if bound.is_err() {
                abort.store(true, Ordering::Relaxed);
            }
            bound?;
            for k in 0..round_trips * repeats as u64 {
                wait_for(line, 2 * k + 1, abort)?;
                // Release pairs with A's Acquire load in `wait_for`.
                line.store(2 * k + 2, Ordering::Release);
            }
            Ok(())
        });
        let a = scope.spawn(move || -> Result<Vec<f64>, MatrixError> {
            let bound = affinity::bind_thread_to_cpus(&CpuSet::single(cpu_a));
            barrier.wait();
            if bound.is_err() {
                abort.store(true, Ordering::Relaxed);
            }
            bound?;
            let mut samples = Vec::with_capacity(repeats);
            let mut k = 0;
            for _ in 0..repeats {
                let begin = Instant::now();
                for _ in 0..round_trips {
                    wait_for(line, 2 * k, abort)?;
                    // Release pairs with B's Acquire load in `wait_for`.
                    line.store(2 * k + 1, Ordering::Release);
                    k += 1;
                }
                samples.push(begin.elapsed().as_nanos() as f64 / (2 * round_trips) as f64);
            }
            // B's last answer, so it does not wait after A returns.
            wait_for(line, 2 * k, abort)?;
            Ok(samples)
        });
        let samples = a.join().expect("ping thread panicked");
        if samples.is_err() {
            abort.store(true, Ordering::Relaxed);
        }
        let answered = b.join().expect("pong thread panicked");
        first_cause(samples, answered)
    })?;
    Ok(PingPong {
        samples_ns: samples,
        placement: page.audit(),
    })
}

/// The outcome of both threads: the samples, or the error that caused the
/// failure rather than the partner's stall it led to.
fn first_cause(
    samples: Result<Vec<f64>, MatrixError>,
    answered: Result<(), MatrixError>,
) -> Result<Vec<f64>, MatrixError> {
    let stalled = |e: &MatrixError| matches!(e, MatrixError::Stalled { .. });
    match (samples, answered) {
        (Ok(samples), Ok(())) => Ok(samples),
        (Err(a), Err(b)) if stalled(&a) && !stalled(&b) => Err(b),
        (Err(a), _) => Err(a),
        (Ok(_), Err(b)) => Err(b),
    }
}

/// Spins until `line` holds `value`; gives up after [`STALL`] without a
/// change or when the partner aborts.
#[inline(always)]
fn wait_for(line: &AtomicU64, value: u64, abort: &AtomicBool) -> Result<(), MatrixError> {
    let mut spins = 0u32;
    let mut since: Option<Instant> = None;
    // Acquire pairs with the partner's Release store of `value`.
    while line.load(Ordering::Acquire) != value {
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1 << 16) {
            if abort.load(Ordering::Relaxed) {
                return Err(MatrixError::Stalled {
                    what: "cache-to-cache ping-pong: the partner thread stopped".into(),
                    after: since.map_or(Duration::ZERO, |s| s.elapsed()),
                });
            }
            let start = *since.get_or_insert_with(Instant::now);
            if start.elapsed() > STALL {
                abort.store(true, Ordering::Relaxed);
                return Err(MatrixError::Stalled {
                    what: "cache-to-cache ping-pong".into(),
                    after: STALL,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_passes_between_two_cpus() {
        let cpus: Vec<u32> = affinity::thread_cpus().unwrap().iter().collect();
        if cpus.len() < 2 {
            numalab::testing::cannot_check("ping-pong needs two CPUs, this process has one");
            return;
        }
        let node = affinity::current().node;
        let run = measure(cpus[0], cpus[1], node, 1000, 3).unwrap();
        assert_eq!(run.samples_ns.len(), 3);
        assert!(run.samples_ns.iter().all(|ns| *ns > 0.0));
        assert!(run.placement.is_match(), "{}", run.placement);
    }

    #[test]
    fn a_cpu_that_does_not_exist_fails_without_hanging() {
        let node = affinity::current().node;
        let err = measure(0, 4000, node, 10, 1).unwrap_err();
        assert!(err.to_string().contains("CPU 4000"), "{err}");
    }
}
