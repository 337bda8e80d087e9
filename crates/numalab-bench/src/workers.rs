//! Pinned worker threads that start together: each is bound to its CPU,
//! prepares its state there (so first-touch memory lands on its node), waits
//! at a barrier, and is timed from the barrier to its own end. The run's
//! figure of merit is the time until the last worker finished.

use std::sync::{Condvar, Mutex};
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

/// Why pinned workers could not run.
///
/// ```
/// use numalab_bench::workers::{run_pinned, WorkerError};
/// match run_pinned(&[4000], |_| (), |_, _| ()) {
///     Err(WorkerError::Bind(err)) => assert!(err.to_string().contains("CPU 4000")),
///     other => panic!("unexpected: {other:?}"),
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// A worker could not be pinned to its CPU.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// The system refused a new thread (its thread or memory limits): the
    /// workers already started were released before their work and ended.
    #[error("could not start worker thread {worker} of {workers}: {source}; the {worker} started before it were stopped before their work")]
    Spawn {
        /// The worker that could not start (from 0; as many had started).
        worker: usize,
        /// Workers asked for.
        workers: usize,
        /// The system's answer.
        source: std::io::Error,
    },
}

/// The start line: every worker waits there until all have arrived, or
/// until the start is called off (a worker could not be started), so no
/// worker is left waiting for one that will never come.
struct Gate {
    /// Workers arrived, and whether the start is called off.
    state: Mutex<(usize, bool)>,
    changed: Condvar,
    workers: usize,
}

impl Gate {
    fn new(workers: usize) -> Gate {
        Gate {
            state: Mutex::new((0, false)),
            changed: Condvar::new(),
            workers,
        }
    }

    /// Waits for every worker; `false` when the start was called off.
    fn wait(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.0 += 1;
        if state.0 == self.workers {
            self.changed.notify_all();
        }
        while state.0 < self.workers && !state.1 {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        !state.1
    }

    /// Calls the start off: every waiting worker returns.
    fn call_off(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.1 = true;
        self.changed.notify_all();
    }
}

/// Runs one worker per entry of `cpus`, pinned there. `prepare(i)` runs on
/// worker `i`'s CPU before the start; `work(i, &mut state)` is what is
/// timed. Binding errors (a CPU that does not exist or is not allowed) are
/// reported before any worker starts its work, and so is a thread the
/// system refuses to start: the workers already started then end without
/// working.
pub fn run_pinned<S, R, P, W>(cpus: &[u32], prepare: P, work: W) -> Result<Run<R>, WorkerError>
where
    S: Send,
    R: Send,
    P: Fn(usize) -> S + Sync,
    W: Fn(usize, &mut S) -> R + Sync,
{
    run_with(cpus, prepare, work, |_| std::thread::Builder::new())
}

/// [`run_pinned`] with each worker's thread made by `thread(i)`.
fn run_with<S, R, P, W>(
    cpus: &[u32],
    prepare: P,
    work: W,
    thread: impl Fn(usize) -> std::thread::Builder,
) -> Result<Run<R>, WorkerError>
where
    S: Send,
    R: Send,
    P: Fn(usize) -> S + Sync,
    W: Fn(usize, &mut S) -> R + Sync,
{
    // Check every CPU first so a bad one fails before anything runs.
    let all: CpuSet = cpus.iter().copied().collect();
    numalab::NodeInventory::live()
        .check_cpus(&all)
        .map_err(BindError::from)?;
    let gate = Gate::new(cpus.len());
    type Outcome<R> = Result<Option<(Instant, WorkerRun<R>)>, BindError>;
    let results: Result<Vec<Outcome<R>>, WorkerError> = std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(cpus.len());
        for (i, &cpu) in cpus.iter().enumerate() {
            let (gate, prepare, work) = (&gate, &prepare, &work);
            let spawned = thread(i).spawn_scoped(scope, move || -> Outcome<R> {
                let bound = affinity::bind_thread_to_cpus(&CpuSet::single(cpu));
                let mut state = bound.as_ref().ok().map(|_| prepare(i));
                // Everyone meets at the gate, even a worker that failed
                // to bind, so the others are not left waiting.
                if !gate.wait() {
                    return Ok(None);
                }
                bound?;
                let state = state.as_mut().expect("prepared when bound");
                let start = Instant::now();
                let output = work(i, state);
                let busy = start.elapsed();
                Ok(Some((
                    start,
                    WorkerRun {
                        cpu,
                        node: affinity::current().node,
                        busy,
                        output,
                    },
                )))
            });
            match spawned {
                Ok(handle) => handles.push(handle),
                Err(source) => {
                    // Release the ones waiting at the gate; the scope
                    // joins them.
                    gate.call_off();
                    return Err(WorkerError::Spawn {
                        worker: i,
                        workers: cpus.len(),
                        source,
                    });
                }
            }
        }
        Ok(handles
            .into_iter()
            .map(|h| h.join().expect("a worker panicked"))
            .collect())
    });
    let mut first_start = None::<Instant>;
    let mut last_end = None::<Instant>;
    let mut workers = Vec::with_capacity(cpus.len());
    for result in results? {
        let Some((start, run)) = result? else {
            continue;
        };
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
    fn a_thread_the_system_refuses_stops_the_started_ones_without_a_hang() {
        // Worker 2 asks for a stack no address space holds, as the 100 000th
        // thread of an oversubscribed run meets the system's limit. Workers
        // 0 and 1 are already waiting at the start: they must be released
        // (they used to wait at a barrier for ever, after a panic).
        let cpu = affinity::thread_cpus().unwrap().first().unwrap();
        let ran = std::sync::atomic::AtomicUsize::new(0);
        let err = run_with(
            &[cpu; 4],
            |_| (),
            |_, _| ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
            |i| {
                let thread = std::thread::Builder::new();
                if i == 2 {
                    thread.stack_size(1 << 62)
                } else {
                    thread
                }
            },
        )
        .unwrap_err();
        match &err {
            WorkerError::Spawn {
                worker, workers, ..
            } => assert_eq!((*worker, *workers), (2, 4)),
            other => panic!("unexpected: {other}"),
        }
        assert!(
            err.to_string()
                .starts_with("could not start worker thread 2 of 4: "),
            "{err}"
        );
        assert_eq!(
            ran.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "no work done"
        );
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
