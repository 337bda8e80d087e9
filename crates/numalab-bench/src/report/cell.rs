//! One figure of a report's matrix, as hosts are compared by it: what it
//! measures ([`Metric`]), from which CPU node to which memory node
//! ([`Cell`]), and the values a measurement can give.

use serde::{Deserialize, Serialize};

/// What a figure measures.
///
/// ```
/// use numalab_bench::report::Metric;
/// assert_eq!(Metric::Latency.unit(), "ns");
/// assert!(Metric::Read.higher_is_better() && !Metric::Latency.higher_is_better());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Idle latency, ns per dependent load.
    Latency,
    /// Sequential read bandwidth, GB/s.
    Read,
    /// Non-temporal write bandwidth, GB/s.
    Write,
    /// Copy bandwidth, GB/s.
    Copy,
}

impl Metric {
    /// The unit of its figures.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::Latency => "ns",
            _ => "GB/s",
        }
    }

    /// Whether a larger figure is better (bandwidth) or worse (latency).
    pub fn higher_is_better(self) -> bool {
        self != Metric::Latency
    }

    /// Whether `value` is past `limit`: below it for a bandwidth, above it
    /// for a latency (the fleet's rule, and the health check's).
    ///
    /// ```
    /// use numalab_bench::fleet::Metric;
    /// assert!(Metric::Read.past_limit(31.2, 38.0));
    /// assert!(!Metric::Latency.past_limit(31.2, 38.0));
    /// ```
    pub fn past_limit(self, value: f64, limit: f64) -> bool {
        if self.higher_is_better() {
            value < limit
        } else {
            value > limit
        }
    }

    /// The figures a measurement of this metric can give, in its unit: a
    /// latency from 0.1 ns to 10 ms, a bandwidth up to 100,000 GB/s (a
    /// hundred times the fastest memory of today). A saved report with a
    /// figure outside is not a measurement and is left out of a fleet.
    ///
    /// ```
    /// use numalab_bench::report::Metric;
    /// assert!(Metric::Latency.plausible().contains(&95.0));
    /// assert!(!Metric::Read.plausible().contains(&1e308));
    /// ```
    pub fn plausible(self) -> std::ops::RangeInclusive<f64> {
        match self {
            Metric::Latency => 0.1..=1e7,
            _ => 1e-6..=1e5,
        }
    }

    /// `None` when `value` is [plausible](Self::plausible) for `cell`,
    /// else why not, in one sentence.
    ///
    /// ```
    /// use numalab_bench::report::{Cell, Metric};
    /// let cell = Cell { metric: Metric::Latency, initiator: 0, target: 1 };
    /// assert_eq!(Metric::implausible(cell, 95.0), None);
    /// assert_eq!(
    ///     Metric::implausible(cell, -1e308).unwrap(),
    ///     "latency 0->1 is -1e308 ns: not a measurement (a figure is from 1e-1 to 1e7 ns)"
    /// );
    /// ```
    pub fn implausible(cell: Cell, value: f64) -> Option<String> {
        let range = cell.metric.plausible();
        (!range.contains(&value)).then(|| {
            format!(
                "{cell} is {value:e} {}: not a measurement (a figure is from {:e} to {:e} {})",
                cell.metric.unit(),
                range.start(),
                range.end(),
                cell.metric.unit()
            )
        })
    }

    /// Its name, as in [`Cell`]'s text.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Latency => "latency",
            Metric::Read => "read",
            Metric::Write => "write",
            Metric::Copy => "copy",
        }
    }
}

/// One figure of the matrix: a metric from a CPU node to a memory node.
///
/// ```
/// use numalab_bench::report::{Cell, Metric};
/// let cell = Cell { metric: Metric::Read, initiator: 0, target: 1 };
/// assert_eq!(cell.to_string(), "read 0->1");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Cell {
    /// What is measured.
    pub metric: Metric,
    /// CPU node.
    pub initiator: u32,
    /// Memory node.
    pub target: u32,
}

impl std::fmt::Display for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}->{}",
            self.metric.name(),
            self.initiator,
            self.target
        )
    }
}
