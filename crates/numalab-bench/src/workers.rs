//! Pinned worker threads that start together: each is bound to its CPU,
//! prepares its state there (so first-touch memory lands on its node), waits
//! at a barrier, and is timed from the barrier to its own end. The run's
//! figure of merit is the time until the last worker finished.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use numalab::affinity::{self, BindError};
use numalab::CpuSet;
use serde::{Deserialize, Serialize};

/// One worker's outcome.
///
/// ```
/// use numalab::affinity;
/// use numalab_bench::workers::run_pinned;
/// let cpu = affinity::thread_cpus()?.first().expect("a CPU to run on");
/// let run = run_pinned(&[cpu], |_| (), |_, _| affinity::current())?;
/// let worker = &run.workers[0];
/// assert_eq!(worker.output.cpu, worker.cpu); // it ran where it was pinned
/// assert_eq!(worker.output.node, worker.node);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerRun<R> {
    /// The CPU it was pinned to.
    pub cpu: u32,
    /// The node it ran on (asked of the kernel after the work).
    pub node: u32,
    /// Time from the common start to its end.
    pub busy: Duration,
    /// What the work returned.
    pub output: R,
}

/// A whole run.
///
/// ```
/// use numalab::affinity;
/// use numalab_bench::workers::run_pinned;
/// let cpus: Vec<u32> = affinity::thread_cpus()?.iter().collect();
/// let run = run_pinned(
///     &cpus,
///     |i| vec![i as u8; 1 << 20], // first touched on worker i's CPU
///     |_, buffer| buffer.iter().map(|&b| u64::from(b)).sum::<u64>(),
/// )?;
/// assert_eq!(run.workers.len(), cpus.len());
/// for (i, worker) in run.workers.iter().enumerate() {
///     assert_eq!(worker.cpu, cpus[i]); // in the order of the CPUs given
///     assert_eq!(worker.output, i as u64 * (1 << 20));
///     assert!(worker.busy <= run.wall);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run<R> {
    /// Each worker, in the order of the CPUs given.
    pub workers: Vec<WorkerRun<R>>,
    /// From the common start until the last worker finished.
    pub wall: Duration,
}

/// Runs one worker per entry of `cpus`, pinned there. `prepare(i)` runs on
/// worker `i`'s CPU before the start; `work(i, &mut state)` is what is
/// timed. Binding errors (a CPU that does not exist or is not allowed) are
/// reported before any worker starts its work.
pub fn run_pinned<S, R, P, W>(cpus: &[u32], prepare: P, work: W) -> Result<Run<R>, BindError>
where
    S: Send,
    R: Send,
    P: Fn(usize) -> S + Sync,
    W: Fn(usize, &mut S) -> R + Sync,
{
    // Check every CPU first so a bad one fails before anything runs.
    let all: CpuSet = cpus.iter().copied().collect();
    numalab::NodeInventory::live().check_cpus(&all)?;
    let barrier = Barrier::new(cpus.len());
    let results: Vec<Result<(Instant, WorkerRun<R>), BindError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = cpus
            .iter()
            .enumerate()
            .map(|(i, &cpu)| {
                let (barrier, prepare, work) = (&barrier, &prepare, &work);
                scope.spawn(move || {
                    let bound = affinity::bind_thread_to_cpus(&CpuSet::single(cpu));
                    let mut state = bound.as_ref().ok().map(|_| prepare(i));
                    // Everyone meets the barrier, even a worker that failed
                    // to bind, so the others are not left waiting.
                    barrier.wait();
                    bound?;
                    let state = state.as_mut().expect("prepared when bound");
                    let start = Instant::now();
                    let output = work(i, state);
                    let busy = start.elapsed();
                    Ok((
                        start,
                        WorkerRun {
                            cpu,
                            node: affinity::current().node,
                            busy,
                            output,
                        },
                    ))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a worker panicked"))
            .collect()
    });
    let mut first_start = None::<Instant>;
    let mut last_end = None::<Instant>;
    let mut workers = Vec::with_capacity(results.len());
    for result in results {
        let (start, run) = result?;
        let end = start + run.busy;
        first_start = Some(first_start.map_or(start, |s| s.min(start)));
        last_end = Some(last_end.map_or(end, |e| e.max(end)));
        workers.push(run);
    }
    let wall = match (first_start, last_end) {
        (Some(s), Some(e)) => e - s,
        _ => Duration::ZERO,
    };
    Ok(Run { workers, wall })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_run_on_their_cpus() {
        let cpus: Vec<u32> = affinity::thread_cpus().unwrap().iter().collect();
        let run = run_pinned(
            &cpus,
            |i| i * 10,
            |i, state| {
                assert_eq!(*state, i * 10);
                affinity::current().cpu
            },
        )
        .unwrap();
        assert_eq!(run.workers.len(), cpus.len());
        for (worker, cpu) in run.workers.iter().zip(&cpus) {
            assert_eq!(worker.cpu, *cpu);
            assert_eq!(worker.output, *cpu, "ran on the CPU it was pinned to");
            assert!(worker.busy <= run.wall);
        }
    }

    #[test]
    fn a_bad_cpu_fails_before_any_work() {
        let ran = std::sync::atomic::AtomicBool::new(false);
        let err = run_pinned(
            &[0, 4000],
            |_| (),
            |_, _| ran.store(true, std::sync::atomic::Ordering::SeqCst),
        )
        .unwrap_err();
        assert!(err.to_string().contains("CPU 4000 does not exist"), "{err}");
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
    }
}
