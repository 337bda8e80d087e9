//! What a healthy host looks like, per machine fingerprint: a fleet of
//! known-good hosts merged and kept (`numalab fleet DIR --baseline
//! B.json`), for a health check to measure one host against later.

use serde::{Deserialize, Serialize};

use super::{Cell, FleetReport};
use crate::document::{seconds_since_epoch, Schema};
use crate::host::Fingerprint;

/// The groups of a fleet, each with its fingerprint and every cell's
/// median and limit (the fleet's own rule), and where they came from.
///
/// ```
/// # use numalab_bench::fleet::{merge, HostResult};
/// use numalab_bench::fleet::baseline::Baseline;
/// # let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"),
/// #     "/../../tests/results/report-two-socket.json"))?;
/// let hosts = (0..4).map(|i| {
///     let mut host = HostResult::parse(text.as_bytes(), "r.json".as_ref()).unwrap();
///     host.host = format!("n{i}");
///     host
/// });
/// let fleet = merge(hosts.collect(), Vec::new(), 0.9)?;
/// let baseline = Baseline::of(&fleet);
/// let group = &baseline.groups[0];
/// assert_eq!(group.hosts, ["n0", "n1", "n2", "n3"]);
/// assert!(group.cells.iter().all(|c| c.limit.is_some()), "4 hosts: every cell judged");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// The threshold `t` of the rule the limits come from.
    pub threshold: f64,
    /// The rule in words.
    pub rule: String,
    /// One per fingerprint, largest first.
    pub groups: Vec<BaselineGroup>,
}

impl Schema for Baseline {
    const NAME: &'static str = "numalab.baseline";
    const VERSION: u32 = 1;
}

/// A fingerprint's healthy figures.
///
/// ```
/// # use numalab_bench::fleet::{merge, HostResult};
/// use numalab_bench::fleet::baseline::Baseline;
/// # let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"),
/// #     "/../../tests/results/report-two-socket.json"))?;
/// # let host = HostResult::parse(text.as_bytes(), "r.json".as_ref()).unwrap();
/// let baseline = Baseline::of(&merge(vec![host], Vec::new(), 0.9)?);
/// let group = &baseline.groups[0];
/// assert_eq!(group.fingerprint.nodes.len(), 2, "the emulated two-socket machine");
/// assert!(group.measured_from.is_some() && group.measured_from == group.measured_to);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineGroup {
    /// The fleet's group id (1 for the largest).
    pub id: usize,
    /// The hosts it came from, by name.
    pub hosts: Vec<String>,
    /// When the first and the last of their reports were written (RFC
    /// 3339), where the reports say.
    pub measured_from: Option<String>,
    pub measured_to: Option<String>,
    /// The machine fingerprint a host must have to be judged by it.
    pub fingerprint: Fingerprint,
    /// Each cell's median over the hosts, and its limit: a bandwidth
    /// below or a latency above it fails. `None` when fewer than
    /// [`super::MIN_HOSTS`] hosts measured the cell: then only the
    /// fingerprint is checked.
    pub cells: Vec<BaselineCell>,
}

/// One cell of a group's baseline.
///
/// ```
/// # use numalab_bench::fleet::{merge, HostResult};
/// use numalab_bench::fleet::baseline::Baseline;
/// use numalab_bench::fleet::Metric;
/// # let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"),
/// #     "/../../tests/results/report-two-socket.json"))?;
/// # let host = HostResult::parse(text.as_bytes(), "r.json".as_ref()).unwrap();
/// let baseline = Baseline::of(&merge(vec![host], Vec::new(), 0.9)?);
/// let read = baseline.groups[0].cells.iter().find(|c| c.cell.metric == Metric::Read).unwrap();
/// assert_eq!((read.unit.as_str(), read.hosts), ("GB/s", 1));
/// assert_eq!(read.limit, None, "one host sets no limit");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineCell {
    /// The cell.
    pub cell: Cell,
    /// Unit of the figures.
    pub unit: String,
    /// Hosts that measured it.
    pub hosts: usize,
    /// Their median.
    pub median: f64,
    /// The limit (see [`BaselineGroup::cells`]).
    pub limit: Option<f64>,
}

impl Baseline {
    /// The baseline of a merged fleet: every group, its hosts, and its
    /// cells' medians and limits.
    pub fn of(fleet: &FleetReport) -> Baseline {
        let groups = fleet
            .groups
            .iter()
            .map(|group| {
                let members: Vec<_> = fleet.hosts.iter().filter(|h| h.group == group.id).collect();
                let mut dates: Vec<(i64, &String)> = members
                    .iter()
                    .filter_map(|h| h.created.as_ref())
                    .filter_map(|c| Some((seconds_since_epoch(c)?, c)))
                    .collect();
                dates.sort();
                BaselineGroup {
                    id: group.id,
                    hosts: members.iter().map(|h| h.host.clone()).collect(),
                    measured_from: dates.first().map(|(_, c)| (*c).clone()),
                    measured_to: dates.last().map(|(_, c)| (*c).clone()),
                    fingerprint: group.fingerprint.clone(),
                    cells: group
                        .cells
                        .iter()
                        .map(|summary| BaselineCell {
                            cell: summary.cell,
                            unit: summary.unit.clone(),
                            hosts: summary.hosts,
                            median: summary.median,
                            limit: summary.limit,
                        })
                        .collect(),
                }
            })
            .collect();
        Baseline {
            threshold: fleet.threshold,
            rule: fleet.rule.clone(),
            groups,
        }
    }
}
