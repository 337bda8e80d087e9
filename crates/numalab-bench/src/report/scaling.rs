//! Read bandwidth by thread count: how many of a node's CPUs it takes to
//! draw its memory's bandwidth (one thread rarely can). The report
//! measures it on the matrix's first CPU node reading its own memory, at
//! 1, 2, 4, ... threads and at all of the node's CPUs, over the matrix's
//! stream working set, with the matrix's samples per figure. When the
//! matrix's own cell already streamed with the same CPUs, that point is
//! the matrix's figure, not a second measurement: one experiment, one
//! value, wherever the report quotes it.

use numalab::{HugePages, Topology};
use serde::{Deserialize, Serialize};

use crate::control::Control;
use crate::matrix::bandwidth::{self, Kernel, StreamTiming};
use crate::matrix::latency::Pages;
use crate::matrix::shape::spread_cpus;
use crate::matrix::{Figure, MatrixError, MatrixReport};
use numalab::audit::PlacementAudit;

/// Read bandwidth at several thread counts, one node reading one node.
///
/// ```
/// use numalab_bench::report::scaling::thread_counts;
/// assert_eq!(thread_counts(1), vec![1]);
/// assert_eq!(thread_counts(6), vec![1, 2, 4, 6]);
/// assert_eq!(thread_counts(8), vec![1, 2, 4, 8]);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadScaling {
    /// The CPU node the threads ran on.
    pub initiator: u32,
    /// The memory node they read.
    pub target: u32,
    /// Bytes of the working set (all threads together).
    pub size_bytes: usize,
    /// One point per thread count, in order.
    pub points: Vec<ScalingPoint>,
}

/// One thread count's read bandwidth.
///
/// ```
/// use numalab_bench::matrix::Figure;
/// use numalab_bench::report::scaling::ScalingPoint;
/// let point = ScalingPoint {
///     threads: 2,
///     cpus: vec![0, 1],
///     read_gbps: Figure::of(&[10.0, 12.0, 11.0]),
///     placement: None,
///     pages: None,
///     from_matrix: false,
/// };
/// assert_eq!(point.read_gbps.median(), 11.0);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalingPoint {
    /// Threads reading.
    pub threads: usize,
    /// The CPUs they ran on (one per core before any core's second thread).
    pub cpus: Vec<u32>,
    /// GB/s, all threads together.
    pub read_gbps: Figure,
    /// Where the working set's pages were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementAudit>,
    /// The pages that backed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages: Option<Pages>,
    /// Whether this point is the matrix's own cell (same CPUs, same
    /// memory, same working set), quoted rather than measured again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_matrix: bool,
}

/// 1, 2, 4, ... below `cpus`, then `cpus`.
pub fn thread_counts(cpus: usize) -> Vec<usize> {
    let mut counts = vec![1];
    let mut t = 2;
    while t < cpus {
        counts.push(t);
        t *= 2;
    }
    if cpus > 1 {
        counts.push(cpus);
    }
    counts
}

/// Measures read bandwidth by thread count on the matrix's first CPU node
/// reading its reference (local) memory; `None` when that node has one
/// usable CPU (one point is no curve) or the matrix measured no
/// bandwidth. A stop asked through `control` is seen between thread
/// counts.
pub fn measure(
    topology: &Topology,
    matrix: &MatrixReport,
    control: &Control,
) -> Result<Option<ThreadScaling>, MatrixError> {
    let Some(&initiator) = matrix.shape.initiators.first() else {
        return Ok(None);
    };
    let Some(&target) = matrix.shape.reference.get(&initiator) else {
        return Ok(None);
    };
    let Some(cell) = matrix.bandwidth.as_ref().and_then(|b| {
        b.cells
            .iter()
            .find(|c| c.initiator == initiator && c.target == target)
    }) else {
        return Ok(None);
    };
    let all = spread_cpus(topology, initiator, usize::MAX);
    if all.len() < 2 {
        return Ok(None);
    }
    let timing = StreamTiming {
        repeats: matrix.settings.repeats.max(1),
        sample: std::time::Duration::from_millis(matrix.settings.sample_ms.max(1)),
    };
    let pages: HugePages = cell.pages.requested;
    let mut points = Vec::new();
    for threads in thread_counts(all.len()) {
        if control.is_stopped() {
            break;
        }
        let cpus = spread_cpus(topology, initiator, threads);
        if let (true, Some(read)) = (cpus == cell.cpus, &cell.read_gbps) {
            points.push(ScalingPoint {
                threads,
                cpus,
                read_gbps: read.clone(),
                placement: Some(cell.placement.clone()),
                pages: Some(cell.pages),
                from_matrix: true,
            });
            continue;
        }
        let run = bandwidth::measure(
            &cpus,
            target,
            cell.size_bytes,
            pages,
            &[Kernel::Read],
            timing,
        )?;
        let Some((_, samples)) = run.samples.first() else {
            continue;
        };
        points.push(ScalingPoint {
            threads,
            cpus,
            read_gbps: Figure::of(samples),
            placement: Some(run.placement),
            pages: Some(run.pages),
            from_matrix: false,
        });
    }
    Ok(Some(ThreadScaling {
        initiator,
        target,
        size_bytes: cell.size_bytes,
        points,
    }))
}
