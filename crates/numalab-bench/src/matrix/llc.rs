//! How large the last-level cache *behaves*, measured rather than read
//! from `cpuid`.
//!
//! Virtual machines report whatever the hypervisor passes through (these
//! VMs claim a 480 MiB L3 that behaves like a few MiB), and a share of a
//! real L3 is all one core gets on a busy host. So numalab chases pointers
//! over growing working sets, 256 KiB to 128 MiB, and finds the knee: the
//! smallest working set whose latency is at least halfway from the
//! fastest point to the largest one (main memory). The idle-latency
//! working set is four times that.

use numalab::{BufferOptions, HugePages, MemPolicy, NodeBuffer, NodeSet};
use serde::{Deserialize, Serialize};

use super::latency::chase_prefix;
use super::{on_cpu, MatrixError};

/// One point of the latency-versus-size curve.
///
/// ```
/// use numalab_bench::matrix::llc::{knee, SweepPoint};
/// // 3 ns while the set fits in a cache, 100 ns once it does not.
/// let curve: Vec<SweepPoint> = [(1, 3.0), (2, 3.0), (4, 100.0), (8, 100.0), (16, 100.0)]
///     .iter().map(|&(mib, ns)| SweepPoint { bytes: mib << 20, ns }).collect();
/// assert_eq!(knee(&curve), Some(4 << 20));
/// let json = serde_json::to_string(&curve[0])?;
/// assert_eq!(json, r#"{"bytes":1048576,"ns":3.0}"#);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    /// Working set, bytes.
    pub bytes: usize,
    /// Nanoseconds per dependent load.
    pub ns: f64,
}

/// What the sweep found.
///
/// ```
/// use numalab::HugePages;
/// use numalab_bench::matrix::llc::sweep;
/// # let cpus: Vec<u32> = numalab::affinity::thread_cpus()?.iter().collect();
/// # let node = numalab::affinity::current().node;
/// // Working sets of 256 KiB to 1 MiB, about 30,000 loads per point.
/// let found = sweep(cpus[0], node, 1 << 20, HugePages::None, 30_000, None)?;
/// assert_eq!((found.cpu, found.node), (cpus[0], node));
/// let sizes: Vec<usize> = found.points.iter().map(|p| p.bytes).collect();
/// assert_eq!(sizes, [256 << 10, 512 << 10, 1 << 20]);
/// assert!(found.points.iter().all(|p| p.ns > 0.0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheSweep {
    /// CPU the chase ran on.
    pub cpu: u32,
    /// Node whose memory it chased.
    pub node: u32,
    /// Page size asked for.
    pub huge_pages: HugePages,
    /// The curve, smallest working set first.
    pub points: Vec<SweepPoint>,
    /// The knee: the smallest working set at least halfway from cache to
    /// memory latency; `None` when the curve has no clear knee.
    pub knee_bytes: Option<usize>,
    /// The last-level cache size the hardware (`cpuid`, via hwloc) reports
    /// for that CPU.
    pub reported_bytes: Option<u64>,
}

/// Rounds of a sweep.
const ROUNDS: usize = 3;

/// Working-set sizes of a sweep: powers of two from 256 KiB to `largest`.
pub fn sweep_sizes(largest: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut size = 256 << 10;
    while size <= largest {
        sizes.push(size);
        size *= 2;
    }
    sizes
}

/// The knee of a latency-versus-size curve (points in ascending size):
/// the smallest size whose latency is at least halfway between the fastest
/// point and memory latency, taken as the median of the three largest
/// sizes (so one disturbed point does not move the knee). `None` when
/// memory is not clearly slower (less than twice the fastest): no cache
/// boundary was crossed, or the largest size still fits in a cache.
///
/// ```
/// use numalab_bench::matrix::llc::{knee, SweepPoint};
/// let curve: Vec<SweepPoint> = [(1, 2.0), (2, 4.0), (4, 30.0), (8, 90.0), (16, 120.0), (32, 125.0)]
///     .iter().map(|&(mib, ns)| SweepPoint { bytes: mib << 20, ns }).collect();
/// assert_eq!(knee(&curve), Some(8 << 20));
/// ```
pub fn knee(points: &[SweepPoint]) -> Option<usize> {
    if points.len() < 3 {
        return None;
    }
    let mut tail: Vec<f64> = points[points.len() - 3..].iter().map(|p| p.ns).collect();
    tail.sort_by(f64::total_cmp);
    let memory = tail[1];
    let fastest = points.iter().map(|p| p.ns).fold(f64::INFINITY, f64::min);
    if memory < 2.0 * fastest {
        return None;
    }
    let halfway = fastest + (memory - fastest) / 2.0;
    points.iter().find(|p| p.ns >= halfway).map(|p| p.bytes)
}

/// Sweeps working sets up to `largest` bytes of `node`'s memory from
/// `cpu`, `loads` dependent loads per point (at least one lap).
pub fn sweep(
    cpu: u32,
    node: u32,
    largest: usize,
    huge_pages: HugePages,
    loads: u64,
    reported_bytes: Option<u64>,
) -> Result<CacheSweep, MatrixError> {
    let sizes = sweep_sizes(largest);
    let points = on_cpu(cpu, move || -> Result<Vec<SweepPoint>, MatrixError> {
        let options =
            BufferOptions::new(MemPolicy::Bind(NodeSet::single(node))).huge_pages(huge_pages);
        let mut buffer = NodeBuffer::with_options(largest, options)?;
        // Three rounds over every size, each point the fastest of its
        // three: a busy machine only ever slows a chase down, and a burst
        // of load hits one round of a size, not all three.
        let mut best = vec![f64::INFINITY; sizes.len()];
        for round in 0..ROUNDS {
            for (i, &bytes) in sizes.iter().enumerate() {
                let seed = (round * sizes.len() + i) as u64 + 1;
                let ns = chase_prefix(&mut buffer, bytes, (loads / ROUNDS as u64).max(1), 1, seed);
                best[i] = ns.into_iter().fold(best[i], f64::min);
            }
        }
        Ok(sizes
            .iter()
            .zip(best)
            .map(|(&bytes, ns)| SweepPoint { bytes, ns })
            .collect())
    })??;
    Ok(CacheSweep {
        cpu,
        node,
        huge_pages,
        knee_bytes: knee(&points),
        points,
        reported_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(points: &[(usize, f64)]) -> Vec<SweepPoint> {
        points
            .iter()
            .map(|&(kib, ns)| SweepPoint {
                bytes: kib << 10,
                ns,
            })
            .collect()
    }

    #[test]
    fn knee_is_halfway_to_memory() {
        // L2 1 MiB, L3 behaving like 6 MiB, memory ~140 ns.
        let c = curve(&[
            (256, 3.0),
            (512, 3.5),
            (1024, 5.0),
            (2048, 25.0),
            (4096, 30.0),
            (8192, 80.0),
            (16384, 120.0),
            (32768, 135.0),
            (65536, 140.0),
        ]);
        assert_eq!(knee(&c), Some(8192 << 10));
    }

    #[test]
    fn one_disturbed_point_does_not_move_the_knee() {
        let c = curve(&[
            (256, 7.0),
            (1024, 9.0),
            (4096, 99.0),
            (8192, 192.0),
            (16384, 249.0),
            (32768, 261.0),
            (65536, 266.0),
            (131072, 381.0),
        ]);
        assert_eq!(knee(&c), Some(8192 << 10));
    }

    #[test]
    fn flat_curves_have_no_knee() {
        // Everything fits in a cache (or nothing does).
        let c = curve(&[(256, 3.0), (512, 3.1), (1024, 3.3), (2048, 4.0)]);
        assert_eq!(knee(&c), None);
        assert_eq!(knee(&[]), None);
        assert_eq!(knee(&c[..2]), None);
    }

    #[test]
    fn sizes_are_powers_of_two() {
        assert_eq!(
            sweep_sizes(2 << 20),
            vec![256 << 10, 512 << 10, 1 << 20, 2 << 20]
        );
        assert!(sweep_sizes(1000).is_empty());
    }
}
