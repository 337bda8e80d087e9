//! Idle latency: one thread pinned on the initiator follows a pointer
//! chain laid through memory bound to the target node.
//!
//! The chain visits every cache line of the working set once, in the order
//! of a random single-cycle permutation (Sattolo), so each load depends on
//! the previous one and no prefetcher can guess the next line. The figure
//! is nanoseconds per load: the time of `steps` loads divided by `steps`,
//! after a warm-up lap that brings the page tables and whatever fits of
//! the chain into the caches.

use std::time::{Duration, Instant};

use numalab::audit::PlacementAudit;
use numalab::{BufferOptions, HugePages, MemPolicy, NodeBuffer, NodeSet};
use serde::{Deserialize, Serialize};

use super::{on_cpu, MatrixError};
use crate::kernels::{build_chase, chase, Rng, LINE};

/// Which pages backed a working set, asked and found.
///
/// ```
/// use numalab::HugePages;
/// use numalab_bench::matrix::latency::Pages;
/// let thp = Pages { requested: HugePages::Transparent, huge_share: Some(0.5) };
/// assert_eq!(thp.label(), "THP 50%");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Pages {
    /// What was asked for.
    pub requested: HugePages,
    /// Share of the working set the kernel backed with huge pages (0 to 1);
    /// `None` when it does not say.
    pub huge_share: Option<f64>,
}

impl Pages {
    /// What backs `size` bytes of `buffer`, made asking for `requested`.
    pub(crate) fn of(buffer: &NodeBuffer, requested: HugePages, size: usize) -> Pages {
        Pages {
            requested,
            huge_share: buffer
                .huge_page_bytes()
                .map(|bytes| bytes as f64 / size.max(1) as f64),
        }
    }

    /// Short text: `2M`, `THP 100%`, `4K`.
    pub fn label(&self) -> String {
        match (self.requested, self.huge_share) {
            (HugePages::Explicit2M, _) => "2M".into(),
            (HugePages::Transparent, Some(share)) => format!("THP {:.0}%", share * 100.0),
            (HugePages::Transparent, None) => "THP".into(),
            (HugePages::None, _) => "4K".into(),
        }
    }
}

/// One chase: samples of nanoseconds per load, and where the memory was.
///
/// ```
/// use std::time::Duration;
/// use numalab::HugePages;
/// use numalab_bench::matrix::latency::{measure, ChaseTiming};
/// # let cpus: Vec<u32> = numalab::affinity::thread_cpus()?.iter().collect();
/// # let node = numalab::affinity::current().node;
/// let timing = ChaseTiming { repeats: 3, sample: Duration::from_millis(1) };
/// let run = measure(cpus[0], node, 1 << 20, HugePages::None, timing, 1)?;
/// assert_eq!(run.samples_ns.len(), 3);
/// assert!(run.samples_ns.iter().all(|ns| *ns > 0.0));
/// assert!(run.placement.is_match(), "{}", run.placement);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct ChaseRun {
    /// Nanoseconds per load, one per repeat.
    pub samples_ns: Vec<f64>,
    /// The placement check of the working set, after the last sample.
    pub placement: PlacementAudit,
    /// The pages that backed it.
    pub pages: Pages,
}

/// How long to chase.
///
/// ```
/// use std::time::Duration;
/// use numalab::HugePages;
/// use numalab_bench::matrix::latency::{measure, ChaseTiming};
/// # let cpus: Vec<u32> = numalab::affinity::thread_cpus()?.iter().collect();
/// # let node = numalab::affinity::current().node;
/// // Two samples of about 2 ms each (at least one lap of the chain).
/// let timing = ChaseTiming { repeats: 2, sample: Duration::from_millis(2) };
/// let run = measure(cpus[0], node, 1 << 20, HugePages::None, timing, 7)?;
/// assert_eq!(run.samples_ns.len(), timing.repeats);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ChaseTiming {
    /// Timed samples.
    pub repeats: usize,
    /// Aim for samples this long (at least one lap of the chain).
    pub sample: Duration,
}

/// Chases `size` bytes bound to `target` from a thread pinned on `cpu`.
pub fn measure(
    cpu: u32,
    target: u32,
    size: usize,
    huge_pages: HugePages,
    timing: ChaseTiming,
    seed: u64,
) -> Result<ChaseRun, MatrixError> {
    on_cpu(cpu, move || {
        let options =
            BufferOptions::new(MemPolicy::Bind(NodeSet::single(target))).huge_pages(huge_pages);
        let mut buffer = NodeBuffer::with_options(size, options)?;
        let lines = size / LINE;
        let start = build_chase(buffer.as_mut_slice(), LINE, &mut Rng::new(seed));
        // Warm-up lap, timed to size the samples.
        let begin = Instant::now();
        // SAFETY: the chain was laid in `buffer`, which lives and is not
        // written until the end of this closure.
        let mut p = unsafe { chase(start, lines as u64) };
        let lap = begin.elapsed();
        let steps = steps_for(lap, lines, timing.sample);
        let mut samples_ns = Vec::with_capacity(timing.repeats);
        for _ in 0..timing.repeats {
            let begin = Instant::now();
            // SAFETY: as above.
            p = unsafe { chase(p, steps) };
            samples_ns.push(begin.elapsed().as_nanos() as f64 / steps as f64);
        }
        std::hint::black_box(p);
        let placement = buffer.audit();
        let pages = Pages::of(&buffer, huge_pages, size);
        Ok(ChaseRun {
            samples_ns,
            placement,
            pages,
        })
    })?
}

/// The fewest loads a sample times, so clock reads stay negligible.
pub const MIN_STEPS: u64 = 10_000;

/// Loads per sample: enough for `sample`, judged by a lap of `lines` loads
/// that took `lap`. A sample may be shorter than a lap: after the warm-up
/// lap every stretch of a random cycle is as good as any other.
fn steps_for(lap: Duration, lines: usize, sample: Duration) -> u64 {
    let per_load = lap.as_secs_f64() / lines.max(1) as f64;
    let wanted = if per_load > 0.0 {
        (sample.as_secs_f64() / per_load).round() as u64
    } else {
        lines as u64
    };
    wanted.max(MIN_STEPS)
}

/// Latency of a chase over the first `bytes` of `buffer`, in ns per load:
/// `samples` timed runs of `steps` loads after a warm-up lap. The caller
/// pins the thread.
pub fn chase_prefix(
    buffer: &mut NodeBuffer,
    bytes: usize,
    steps: u64,
    samples: usize,
    seed: u64,
) -> Vec<f64> {
    let bytes = bytes.min(buffer.len());
    let lines = (bytes / LINE) as u64;
    let steps = steps.max(1);
    let start = build_chase(
        &mut buffer.as_mut_slice()[..bytes],
        LINE,
        &mut Rng::new(seed),
    );
    // SAFETY: the chain was laid in the first `bytes` of `buffer`, which
    // the exclusive borrow keeps alive and unwritten for these calls.
    let mut p = unsafe { chase(start, lines) };
    let ns = (0..samples)
        .map(|_| {
            let begin = Instant::now();
            // SAFETY: as above.
            p = unsafe { chase(p, steps) };
            begin.elapsed().as_nanos() as f64 / steps as f64
        })
        .collect();
    std::hint::black_box(p);
    ns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_last_as_asked() {
        // 10 us per load.
        let lap = Duration::from_millis(10_000);
        assert_eq!(steps_for(lap, 1_000_000, Duration::from_secs(1)), 100_000);
        assert_eq!(
            steps_for(lap, 1_000_000, Duration::from_millis(1)),
            MIN_STEPS
        );
        let unmeasurable = steps_for(Duration::ZERO, 1_000_000, Duration::from_secs(1));
        assert_eq!(unmeasurable, 1_000_000, "a lap when the clock saw nothing");
    }

    #[test]
    fn local_chase_is_placed_and_timed() {
        let cpu = numalab::affinity::thread_cpus().unwrap().first().unwrap();
        let node = numalab::Topology::system()
            .unwrap()
            .cpu(cpu)
            .and_then(|c| c.node)
            .unwrap();
        let timing = ChaseTiming {
            repeats: 3,
            sample: Duration::from_millis(1),
        };
        let run = measure(cpu, node, 1 << 20, HugePages::None, timing, 1).unwrap();
        assert_eq!(run.samples_ns.len(), 3);
        assert!(run.samples_ns.iter().all(|ns| *ns > 0.0), "{run:?}");
        assert!(run.placement.is_match(), "{}", run.placement);
        assert_eq!(run.pages.label(), "4K");
    }
}
