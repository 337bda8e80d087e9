//! Loaded latency: the idle-latency chase from one core while the other
//! cores of the node read memory as fast as a delay lets them, from no
//! load to full load (what Intel MLC's `--loaded_latency` measures).
//!
//! Each load generator reads its own slice of a working set bound to the
//! same target node, 4 KiB at a time with the widest vector loads, and
//! spins `delay` iterations of a dependent add between blocks. Lowering the
//! delay raises the pressure; each point of the curve is the chase's
//! latency beside the bandwidth the generators reached while it ran.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use numalab::affinity;
use numalab::audit::PlacementAudit;
use numalab::{BufferOptions, CpuSet, HugePages, MemPolicy, NodeBuffer, NodeSet};

use super::latency::Pages;
use super::MatrixError;
use crate::kernels::{self, build_chase, chase, Isa, Rng, LINE};

/// Bytes a generator reads between two delays.
pub const BLOCK: usize = 4096;

/// Delays (spin iterations per 4 KiB block) of a full curve, light load
/// first.
pub const DELAYS: [u64; 10] = [4_000, 2_000, 1_000, 500, 250, 120, 60, 30, 10, 0];

/// How many times a loaded point is taken while its generators read
/// nothing during it (not scheduled on a busy machine) before it is kept
/// as it is.
pub const LOADED_ATTEMPTS: usize = 5;

/// Delays of a `--quick` curve.
pub const QUICK_DELAYS: [u64; 3] = [1_000, 60, 0];

/// One point of a loaded-latency curve, as measured.
///
/// ```
/// use std::time::Duration;
/// use numalab::HugePages;
/// use numalab_bench::matrix::loaded::measure;
/// # let cpus: Vec<u32> = numalab::affinity::thread_cpus()?.iter().collect();
/// # let node = numalab::affinity::current().node;
/// // Chase from the first CPU while the others (or, on a one-CPU machine,
/// // the same one) read at full speed: delay 0.
/// let load_cpus = if cpus.len() > 1 { &cpus[1..] } else { &cpus[..] };
/// let sample = Duration::from_millis(5);
/// let run = measure(cpus[0], load_cpus, node, 1 << 20, 4 << 20, HugePages::None, &[0], 2, sample)?;
/// let (idle, full) = (&run.points[0], &run.points[1]);
/// assert_eq!((idle.delay, idle.load_gbps), (None, 0.0), "paused generators read nothing");
/// assert_eq!(full.delay, Some(0));
/// assert_eq!(full.samples_ns.len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct LoadPoint {
    /// Spin iterations between 4 KiB blocks; `None` for the idle point
    /// (generators paused).
    pub delay: Option<u64>,
    /// The chase's nanoseconds per load, one per repeat.
    pub samples_ns: Vec<f64>,
    /// Read bandwidth the generators reached during the samples, GB/s.
    pub load_gbps: f64,
}

/// A whole curve.
///
/// ```
/// use std::time::Duration;
/// use numalab::HugePages;
/// use numalab_bench::matrix::loaded::measure;
/// # let cpus: Vec<u32> = numalab::affinity::thread_cpus()?.iter().collect();
/// # let node = numalab::affinity::current().node;
/// // Chase from the first CPU while the others (or, on a one-CPU machine,
/// // the same one) read at full speed: delay 0.
/// let load_cpus = if cpus.len() > 1 { &cpus[1..] } else { &cpus[..] };
/// let sample = Duration::from_millis(5);
/// let run = measure(cpus[0], load_cpus, node, 1 << 20, 4 << 20, HugePages::None, &[0], 2, sample)?;
/// assert_eq!(run.points.len(), 2, "the idle point, then one per delay");
/// assert!(run.chase_placement.is_match() && run.load_placement.is_match());
/// assert_eq!(run.pages.label(), "4K");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct LoadedRun {
    /// Idle first, then from the longest delay to none.
    pub points: Vec<LoadPoint>,
    /// Placement of the chased working set.
    pub chase_placement: PlacementAudit,
    /// Placement of the generators' working set.
    pub load_placement: PlacementAudit,
    /// Pages backing the chased working set.
    pub pages: Pages,
}

/// A counter alone on its cache lines, so generators do not slow each
/// other by sharing one.
#[repr(align(128))]
#[derive(Debug, Default)]
struct Padded(AtomicU64);

/// `PAUSED` in the delay cell: generators sleep.
const PAUSED: u64 = u64::MAX;

/// Measures the curve: chase `chase_size` bytes from `chase_cpu` while
/// `load_cpus` read `load_size` bytes, all bound to `target`.
#[allow(clippy::too_many_arguments)]
pub fn measure(
    chase_cpu: u32,
    load_cpus: &[u32],
    target: u32,
    chase_size: usize,
    load_size: usize,
    huge_pages: HugePages,
    delays: &[u64],
    repeats: usize,
    sample: Duration,
) -> Result<LoadedRun, MatrixError> {
    let policy = MemPolicy::Bind(NodeSet::single(target));
    let generators = load_cpus.len().max(1);
    let slice = (load_size / generators) / BLOCK * BLOCK;
    let mut load = NodeBuffer::with_options(
        (slice * generators).max(BLOCK),
        BufferOptions::new(policy.clone()).huge_pages(huge_pages),
    )?;
    let mut chased = NodeBuffer::with_options(
        chase_size,
        BufferOptions::new(policy).huge_pages(huge_pages),
    )?;
    let isa = Isa::detect();
    let delay = AtomicU64::new(PAUSED);
    let stop = AtomicBool::new(false);
    let counters: Vec<Padded> = load_cpus.iter().map(|_| Padded::default()).collect();

    let outcome = std::thread::scope(|scope| {
        let generators: Vec<_> = load
            .as_mut_slice()
            .chunks_mut(slice.max(BLOCK))
            .zip(load_cpus)
            .zip(&counters)
            .map(|((mine, &cpu), counter)| {
                let (delay, stop) = (&delay, &stop);
                scope.spawn(move || -> Result<(), MatrixError> {
                    // Stop the others if this one cannot run where asked.
                    let bound = affinity::bind_thread_to_cpus(&CpuSet::single(cpu));
                    if bound.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    bound?;
                    generate(mine, isa, delay, stop, counter);
                    Ok(())
                })
            })
            .collect();
        let chaser = scope.spawn(|| -> Result<Vec<LoadPoint>, MatrixError> {
            let result = (|| {
                affinity::bind_thread_to_cpus(&CpuSet::single(chase_cpu))?;
                let lines = (chased.len() / LINE) as u64;
                let start = build_chase(chased.as_mut_slice(), LINE, &mut Rng::new(17));
                // SAFETY: the chain lives in `chased`, borrowed by this
                // thread alone and not written while it is followed.
                let mut p = unsafe { chase(start, lines) };
                let begin = Instant::now();
                // SAFETY: as above.
                p = unsafe { chase(p, lines) };
                let per_load = begin.elapsed().as_secs_f64() / lines.max(1) as f64;
                let steps = if per_load > 0.0 {
                    (sample.as_secs_f64() / per_load) as u64
                } else {
                    lines
                }
                .max(super::latency::MIN_STEPS);
                let mut points = Vec::new();
                let schedule = std::iter::once(None).chain(delays.iter().map(|d| Some(*d)));
                for point_delay in schedule {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    delay.store(point_delay.unwrap_or(PAUSED), Ordering::Relaxed);
                    let each = || -> Vec<u64> {
                        counters
                            .iter()
                            .map(|c| c.0.load(Ordering::Relaxed))
                            .collect()
                    };
                    let read = || each().iter().sum::<u64>();
                    // Under load the generators run when the scheduler lets
                    // them, so their pace is waited for by their progress,
                    // not by a time: every one has read two blocks since
                    // the delay changed (the first may be finishing at the
                    // old delay).
                    if point_delay.is_some() {
                        let before = each();
                        while !stop.load(Ordering::Relaxed)
                            && each()
                                .iter()
                                .zip(&before)
                                .any(|(now, then)| now - then < 2 * BLOCK as u64)
                        {
                            std::thread::sleep(Duration::from_micros(500));
                        }
                    }
                    // A loaded point whose generators were not scheduled
                    // while the chase ran measured no load: taken again,
                    // a few times at most.
                    for attempt in 1..=LOADED_ATTEMPTS {
                        let (bytes0, t0): (u64, Instant) = (read(), Instant::now());
                        let mut samples_ns = Vec::with_capacity(repeats);
                        for _ in 0..repeats {
                            let begin = Instant::now();
                            // SAFETY: as above.
                            p = unsafe { chase(p, steps) };
                            samples_ns.push(begin.elapsed().as_nanos() as f64 / steps as f64);
                        }
                        let (bytes1, t1): (u64, Instant) = (read(), Instant::now());
                        let unloaded = point_delay.is_some() && bytes1 == bytes0;
                        if unloaded && attempt < LOADED_ATTEMPTS && !stop.load(Ordering::Relaxed) {
                            continue;
                        }
                        let secs = (t1 - t0).as_secs_f64().max(1e-9);
                        points.push(LoadPoint {
                            delay: point_delay,
                            samples_ns,
                            load_gbps: (bytes1 - bytes0) as f64 / secs / 1e9,
                        });
                        break;
                    }
                }
                std::hint::black_box(p);
                Ok(points)
            })();
            stop.store(true, Ordering::Relaxed);
            result
        });
        let points = chaser.join().expect("the chase thread panicked");
        for generator in generators {
            generator.join().expect("a load generator panicked")?;
        }
        points
    })?;
    let pages = Pages::of(&chased, huge_pages, chase_size);
    Ok(LoadedRun {
        points: outcome,
        chase_placement: chased.audit(),
        load_placement: load.audit(),
        pages,
    })
}

/// A load generator: reads `mine` block by block, spinning the current
/// delay between blocks, and publishes the bytes read in `counter`, until
/// `stop`. While the delay is [`PAUSED`] it sleeps.
fn generate(mine: &mut [u8], isa: Isa, delay: &AtomicU64, stop: &AtomicBool, counter: &Padded) {
    let mut bytes = 0u64;
    // Relaxed everywhere: the cells carry independent values and nothing
    // else is published through them; the chase reads a counter that may
    // lag by one block.
    while !stop.load(Ordering::Relaxed) {
        let d = delay.load(Ordering::Relaxed);
        if d == PAUSED {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        for block in mine.chunks(BLOCK) {
            std::hint::black_box(kernels::read(block, isa));
            spin(d);
            bytes += block.len() as u64;
            counter.0.store(bytes, Ordering::Relaxed);
            if stop.load(Ordering::Relaxed) || delay.load(Ordering::Relaxed) != d {
                break;
            }
        }
    }
}

/// `n` iterations of a dependent add the compiler cannot remove: the
/// injected delay. Each iteration passes its value through memory
/// (`black_box`), some ten to twenty cycles; the curve's x axis is the
/// bandwidth measured, not the delay.
#[inline(never)]
fn spin(n: u64) {
    let mut x = 0u64;
    for i in 0..n {
        x = std::hint::black_box(x.wrapping_add(i));
    }
    std::hint::black_box(x);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_lower_the_load_and_every_point_is_measured() {
        let cpus: Vec<u32> = affinity::thread_cpus().unwrap().iter().collect();
        if cpus.len() < 2 {
            numalab::testing::cannot_check("loaded latency needs two CPUs, this process has one");
            return;
        }
        let node = affinity::current().node;
        let run = measure(
            cpus[0],
            &cpus[1..],
            node,
            1 << 20,
            4 << 20,
            HugePages::None,
            // A long delay, then none. The point waits for the generators'
            // progress, and is taken again while they read nothing during
            // it, so a busy machine slows the test, not its answer.
            &[1_000_000, 0],
            2,
            Duration::from_millis(5),
        )
        .unwrap();
        assert_eq!(run.points.len(), 3, "idle + two delays");
        assert_eq!(run.points[0].delay, None);
        assert_eq!(
            run.points[0].load_gbps, 0.0,
            "paused generators read nothing"
        );
        assert!(run.points[2].load_gbps > 0.0, "{:?}", run.points);
        for point in &run.points {
            assert_eq!(point.samples_ns.len(), 2);
        }
        assert!(run.chase_placement.is_match() && run.load_placement.is_match());
    }
}
