//! Bandwidth: every chosen CPU of the initiator streams through its own
//! slice of one working set bound to the target node.
//!
//! Three kernels, each with the widest vector instructions the CPU has:
//! **read** (loads only, what `likwid-bench load_avx512` does), **write**
//! with non-temporal stores (no read-for-ownership, as `store_mem`), and
//! **copy** from one half of each slice to the other with non-temporal
//! stores (as `copy_mem`; bytes read plus bytes written are counted). An
//! untimed run warms up and sizes the samples; in each timed run the
//! workers start together at a barrier, and the figure is the bytes moved
//! by all of them over the time until the last finished, in GB/s (10^9
//! bytes per second).

use std::sync::Mutex;
use std::time::Duration;

use numalab::audit::PlacementAudit;
use numalab::{BufferOptions, HugePages, MemPolicy, NodeBuffer, NodeSet};
use serde::{Deserialize, Serialize};

use super::latency::Pages;
use super::MatrixError;
use crate::kernels::{self, Isa, Store};
use crate::workers::run_pinned;

/// A bandwidth kernel.
///
/// ```
/// use numalab_bench::matrix::bandwidth::Kernel;
/// assert_eq!(Kernel::ALL.map(Kernel::name), ["read", "write", "copy"]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kernel {
    /// Sequential loads.
    Read,
    /// Sequential non-temporal stores.
    Write,
    /// Loads from one half, non-temporal stores to the other.
    Copy,
}

impl Kernel {
    /// Every kernel, in report order.
    pub const ALL: [Kernel; 3] = [Kernel::Read, Kernel::Write, Kernel::Copy];

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Read => "read",
            Kernel::Write => "write",
            Kernel::Copy => "copy",
        }
    }

    /// One pass over `slice`; returns the bytes moved.
    fn pass(self, slice: &mut [u8], isa: Isa, round: u8) -> usize {
        match self {
            Kernel::Read => {
                std::hint::black_box(kernels::read(slice, isa));
                slice.len()
            }
            Kernel::Write => {
                kernels::write(slice, round, isa, Store::NonTemporal);
                slice.len()
            }
            Kernel::Copy => {
                let half = slice.len() / 2;
                let (src, dst) = slice.split_at_mut(half);
                kernels::copy(&mut dst[..half], src, isa, Store::NonTemporal);
                2 * half
            }
        }
    }
}

/// What one bandwidth cell measured.
///
/// ```
/// use std::time::Duration;
/// use numalab::HugePages;
/// use numalab_bench::matrix::bandwidth::{measure, Kernel, StreamTiming, MIN_SLICE};
/// # let cpus: Vec<u32> = numalab::affinity::thread_cpus()?.iter().collect();
/// # let node = numalab::affinity::current().node;
/// let timing = StreamTiming { repeats: 2, sample: Duration::from_millis(1) };
/// let run = measure(&cpus[..1], node, MIN_SLICE, HugePages::None, &[Kernel::Read], timing)?;
/// assert_eq!(run.size, MIN_SLICE);
/// let (kernel, gbps) = &run.samples[0];
/// assert_eq!((*kernel, gbps.len()), (Kernel::Read, 2));
/// assert!(run.placement.is_match(), "{}", run.placement);
/// assert_eq!(run.pages.label(), "4K");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct BandwidthRun {
    /// GB/s samples per kernel.
    pub samples: Vec<(Kernel, Vec<f64>)>,
    /// Bytes of the working set (all workers together).
    pub size: usize,
    /// The placement check of the working set.
    pub placement: PlacementAudit,
    /// The pages that backed it.
    pub pages: Pages,
}

/// How long to stream.
///
/// ```
/// use std::time::Duration;
/// use numalab::HugePages;
/// use numalab_bench::matrix::bandwidth::{measure, Kernel, StreamTiming, MIN_SLICE};
/// # let cpus: Vec<u32> = numalab::affinity::thread_cpus()?.iter().collect();
/// # let node = numalab::affinity::current().node;
/// // Three samples per kernel, each of at least one pass over the slices.
/// let timing = StreamTiming { repeats: 3, sample: Duration::from_millis(1) };
/// let run = measure(&cpus[..1], node, MIN_SLICE, HugePages::None, &Kernel::ALL, timing)?;
/// assert!(run.samples.iter().all(|(_, gbps)| gbps.len() == 3));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct StreamTiming {
    /// Timed samples per kernel.
    pub repeats: usize,
    /// Aim for samples this long (at least one pass).
    pub sample: Duration,
}

/// Slices of at least this much per worker, so per-pass overheads vanish.
pub const MIN_SLICE: usize = 1 << 20;

/// Runs `kernels` on `cpus` over `size` bytes bound to `target`.
pub fn measure(
    cpus: &[u32],
    target: u32,
    size: usize,
    huge_pages: HugePages,
    which: &[Kernel],
    timing: StreamTiming,
) -> Result<BandwidthRun, MatrixError> {
    let workers = cpus.len().max(1);
    // Page-aligned slices, so no two workers share a line or a page.
    let slice = (size / workers) / 4096 * 4096;
    let size = slice * workers;
    let options =
        BufferOptions::new(MemPolicy::Bind(NodeSet::single(target))).huge_pages(huge_pages);
    let mut buffer = NodeBuffer::with_options(size, options)?;
    let isa = Isa::detect();
    let mut samples = Vec::new();
    for &kernel in which {
        // Warm up and calibrate: one pass decides the passes per sample.
        let (_, wall) = stream(&mut buffer, cpus, slice, kernel, isa, 1)?;
        let passes = if wall.is_zero() {
            1
        } else {
            (timing.sample.as_secs_f64() / wall.as_secs_f64()).ceil() as usize
        }
        .max(1);
        let mut gbps = Vec::with_capacity(timing.repeats);
        for _ in 0..timing.repeats {
            let (bytes, wall) = stream(&mut buffer, cpus, slice, kernel, isa, passes)?;
            gbps.push(bytes as f64 / wall.as_secs_f64().max(1e-9) / 1e9);
        }
        samples.push((kernel, gbps));
    }
    let placement = buffer.audit();
    let pages = Pages::of(&buffer, huge_pages, size);
    Ok(BandwidthRun {
        samples,
        size,
        placement,
        pages,
    })
}

/// One timed run: each worker takes its slice, meets the others at the
/// barrier, then makes `passes` passes. Returns the bytes all moved and
/// the time to the last one.
fn stream(
    buffer: &mut NodeBuffer,
    cpus: &[u32],
    slice: usize,
    kernel: Kernel,
    isa: Isa,
    passes: usize,
) -> Result<(usize, Duration), MatrixError> {
    let slices: Vec<Mutex<Option<&mut [u8]>>> = buffer
        .as_mut_slice()
        .chunks_mut(slice)
        .take(cpus.len())
        .map(|s| Mutex::new(Some(s)))
        .collect();
    let run = run_pinned(
        cpus,
        |i| {
            slices[i]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .expect("each slice is handed out once")
        },
        |_, mine| {
            (0..passes)
                .map(|round| kernel.pass(mine, isa, round as u8))
                .sum::<usize>()
        },
    )?;
    let bytes = run.workers.iter().map(|w| w.output).sum();
    Ok((bytes, run.wall))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_moves_bytes_on_placed_memory() {
        let cpus: Vec<u32> = numalab::affinity::thread_cpus().unwrap().iter().collect();
        let node = numalab::affinity::current().node;
        let timing = StreamTiming {
            repeats: 2,
            sample: Duration::from_millis(1),
        };
        let run = measure(
            &cpus,
            node,
            cpus.len() * (MIN_SLICE + 100),
            HugePages::None,
            &Kernel::ALL,
            timing,
        )
        .unwrap();
        assert_eq!(run.size, cpus.len() * MIN_SLICE, "slices rounded to pages");
        assert_eq!(run.samples.len(), 3);
        for (kernel, samples) in &run.samples {
            assert_eq!(samples.len(), 2, "{kernel:?}");
            assert!(samples.iter().all(|g| *g > 0.0), "{kernel:?} {samples:?}");
        }
        assert!(run.placement.is_match(), "{}", run.placement);
    }

    #[test]
    fn copy_counts_both_directions() {
        let mut data = vec![0u8; 8192];
        data[..4096].fill(7);
        let moved = Kernel::Copy.pass(&mut data, Isa::detect(), 0);
        assert_eq!(moved, 8192);
        assert!(data[4096..].iter().all(|&b| b == 7));
        assert_eq!(Kernel::Read.pass(&mut data, Isa::detect(), 0), 8192);
    }
}
