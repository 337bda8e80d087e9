//! A machine's fingerprint: everything that must be the same on two hosts
//! before their figures can be compared — the CPU, the topology's shape,
//! each node's memory, the firmware's tables, the kernel and its NUMA
//! settings, and how the report was measured.

use numalab::system::Environment;
use numalab::topology::Distances;
use numalab::units::Size;
use serde::{Deserialize, Serialize};

use crate::topo::TopoReport;

/// How far apart two nodes' memory may be and still count as the same: 2%
/// of the larger.
///
/// Firmware and kernel reservations make `MemTotal` differ by a few MiB
/// between identical hosts (well under 0.5%), while one missing DIMM takes
/// away 1/16 to 1/2 of a node's memory (16 DIMMs to 2 per node, the latter
/// with sub-NUMA clustering). Rounding to fixed steps would split two
/// hosts 0.1% apart whenever a step boundary fell between them, so sizes
/// are compared with this tolerance instead.
///
/// ```
/// use numalab_bench::host::fingerprint::same_memory;
/// let gib = 1u64 << 30;
/// assert!(same_memory(256 * gib, 256 * gib - gib / 4)); // 0.1% less: same
/// assert!(!same_memory(256 * gib, 240 * gib)); // a 16 GiB DIMM missing
/// ```
pub const MEMORY_TOLERANCE: f64 = 0.02;

/// Whether two memory sizes are the same within [`MEMORY_TOLERANCE`].
///
/// ```
/// use numalab_bench::host::fingerprint::same_memory;
/// let node = 96u64 << 30; // 6 DIMMs of 16 GiB
/// assert!(same_memory(node, node - (64 << 20))); // 64 MiB more reserved
/// assert!(!same_memory(node, node - (16 << 30))); // a DIMM missing
/// ```
pub fn same_memory(a: u64, b: u64) -> bool {
    let (small, large) = (a.min(b) as f64, a.max(b) as f64);
    large - small <= MEMORY_TOLERANCE * large
}

/// What two hosts must share for their figures to be compared.
///
/// Computed from the parts every `numalab.report` file has ever carried
/// (the topology and the matrix's environment), so a report written
/// before fingerprints were saved has one too.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::host::Fingerprint;
/// use numalab_bench::topo::TopoReport;
///
/// let two = TopoReport::gather(Topology::from_synthetic("pack:2 numa:1 core:4 pu:1")?);
/// let four = TopoReport::gather(Topology::from_synthetic("pack:2 numa:2 core:2 pu:1")?);
/// let a = Fingerprint::from_parts(&two, None, false);
/// let b = Fingerprint::from_parts(&four, None, false);
/// assert!(a.differences(&a).is_empty());
/// assert_eq!(b.differences(&a), ["4 NUMA nodes instead of 2"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// CPU model name (hwloc's, else `/proc/cpuinfo`'s).
    pub cpu_model: Option<String>,
    /// Packages (sockets).
    pub packages: usize,
    /// Every NUMA node, by increasing id.
    pub nodes: Vec<NodeShape>,
    /// The firmware's node distances (ACPI SLIT), if it gave them.
    pub slit: Option<Distances>,
    /// Whether the firmware described memory performance (ACPI HMAT).
    pub hmat: bool,
    /// Kernel release (`uname -r`).
    pub kernel: Option<String>,
    /// Transparent huge pages: `always`, `madvise` or `never`.
    pub thp: Option<String>,
    /// `/proc/sys/kernel/numa_balancing` (0 off, 1 on, 2 tiering).
    pub numa_balancing: Option<u32>,
    /// Whether the report was a `--quick` one: its figures come from
    /// smaller working sets and are not comparable with a full report's.
    pub quick: bool,
}

/// One NUMA node's shape.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::host::Fingerprint;
/// use numalab_bench::topo::TopoReport;
///
/// let machine = TopoReport::gather(Topology::from_synthetic("pack:2 numa:1 core:4 pu:2")?);
/// let node = &Fingerprint::from_parts(&machine, None, false).nodes[1];
/// assert_eq!((node.node, node.cpus, node.allowed_cpus), (1, 8, 8));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeShape {
    /// The kernel's node number.
    pub node: u32,
    /// Its CPUs.
    pub cpus: usize,
    /// Of those, the CPUs numalab was allowed to use (its cgroup and
    /// affinity: a Slurm job without `--exclusive` may get fewer).
    pub allowed_cpus: usize,
    /// Its memory in bytes, compared within [`MEMORY_TOLERANCE`].
    pub memory_bytes: u64,
    /// hwloc's subtype for special memory (`MCDRAM`, `CXL-DRAM`, …).
    pub subtype: Option<String>,
}

impl Fingerprint {
    /// The fingerprint of a report's machine: `topology` from its
    /// `topology`, `environment` from `matrix.environment`, `quick` from
    /// `matrix.settings.quick`. The kernel's settings come from the
    /// topology report, else from the environment.
    pub fn from_parts(
        topology: &TopoReport,
        environment: Option<&Environment>,
        quick: bool,
    ) -> Fingerprint {
        let topo = &topology.topology;
        let kernel = topology.kernel.as_ref().or(environment.map(|e| &e.kernel));
        Fingerprint {
            cpu_model: topo
                .cpu_model
                .clone()
                .or_else(|| environment.and_then(|e| e.host.cpu_model.clone())),
            packages: topo.packages,
            nodes: topo
                .nodes
                .iter()
                .map(|n| NodeShape {
                    node: n.id,
                    cpus: n.cpus.len(),
                    allowed_cpus: n.cpus.intersection(&topo.allowed_cpus).len(),
                    memory_bytes: n.memory_bytes,
                    subtype: n.subtype.clone(),
                })
                .collect(),
            slit: topo.distances.clone(),
            hmat: !topo.memory_attributes.is_empty(),
            kernel: environment
                .map(|e| e.host.kernel.clone())
                .or_else(|| topology.support.as_ref().map(|s| s.kernel.clone())),
            thp: kernel.and_then(|k| k.thp_enabled.clone()),
            numa_balancing: kernel.and_then(|k| k.numa_balancing),
            quick,
        }
    }

    /// Whether hosts of these fingerprints can be compared: no
    /// [`differences`](Self::differences).
    pub fn matches(&self, other: &Fingerprint) -> bool {
        self.differences(other).is_empty()
    }

    /// What differs from `reference`, one phrase each (`THP never instead
    /// of always`); empty when the two match. Node memory counts as the
    /// same within [`MEMORY_TOLERANCE`]; per-node differences are told
    /// only when both have the same nodes.
    pub fn differences(&self, reference: &Fingerprint) -> Vec<String> {
        let mut out = Vec::new();
        // `{before}{mine}{after} instead of {theirs}` when the two differ.
        let mut differ = |before: &str, mine: String, theirs: String, after: &str| {
            if mine != theirs {
                out.push(format!("{before}{mine}{after} instead of {theirs}"));
            }
        };
        let text = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".into());
        // ` package` or ` packages`, as `n` before it needs.
        let noun =
            |n: usize, one: &'static str, many: &'static str| if n == 1 { one } else { many };
        differ(
            "CPU ",
            text(&self.cpu_model),
            text(&reference.cpu_model),
            "",
        );
        differ(
            "",
            self.packages.to_string(),
            reference.packages.to_string(),
            noun(self.packages, " package", " packages"),
        );
        let ids = |f: &Fingerprint| f.nodes.iter().map(|n| n.node).collect::<Vec<_>>();
        if ids(self) != ids(reference) {
            if self.nodes.len() == reference.nodes.len() {
                differ(
                    "nodes ",
                    format!("{:?}", ids(self)),
                    format!("{:?}", ids(reference)),
                    "",
                );
            } else {
                differ(
                    "",
                    self.nodes.len().to_string(),
                    reference.nodes.len().to_string(),
                    noun(self.nodes.len(), " NUMA node", " NUMA nodes"),
                );
            }
        } else {
            for (mine, theirs) in self.nodes.iter().zip(&reference.nodes) {
                let node = format!("node {}: ", mine.node);
                differ(
                    &node,
                    mine.cpus.to_string(),
                    theirs.cpus.to_string(),
                    noun(mine.cpus, " CPU", " CPUs"),
                );
                if mine.cpus == theirs.cpus {
                    differ(
                        &node,
                        mine.allowed_cpus.to_string(),
                        theirs.allowed_cpus.to_string(),
                        noun(mine.allowed_cpus, " CPU allowed", " CPUs allowed"),
                    );
                }
                if !same_memory(mine.memory_bytes, theirs.memory_bytes) {
                    differ(
                        &format!("{node}memory "),
                        gib(mine.memory_bytes),
                        gib(theirs.memory_bytes),
                        "",
                    );
                }
                differ(
                    &format!("{node}memory kind "),
                    text(&mine.subtype),
                    text(&theirs.subtype),
                    "",
                );
            }
            match (&self.slit, &reference.slit) {
                (Some(mine), Some(theirs)) => {
                    let first = mine.nodes.iter().enumerate().find_map(|(i, &from)| {
                        mine.nodes.iter().enumerate().find_map(|(j, &to)| {
                            let value = mine.values.get(i)?.get(j).copied();
                            (value != theirs.get(from, to)).then_some((from, to, value))
                        })
                    });
                    if let Some((from, to, value)) = first {
                        let show = |v: Option<u64>| v.map_or("none".into(), |v| v.to_string());
                        differ(
                            &format!("SLIT {from}->{to} "),
                            show(value),
                            show(theirs.get(from, to)),
                            "",
                        );
                    }
                }
                (mine, theirs) => differ(
                    "SLIT ",
                    present(mine.is_some()).into(),
                    present(theirs.is_some()).into(),
                    "",
                ),
            }
        }
        differ(
            "HMAT ",
            present(self.hmat).into(),
            present(reference.hmat).into(),
            "",
        );
        differ("kernel ", text(&self.kernel), text(&reference.kernel), "");
        differ("THP ", text(&self.thp), text(&reference.thp), "");
        differ(
            "numa_balancing ",
            balancing_word(self.numa_balancing).into(),
            balancing_word(reference.numa_balancing).into(),
            "",
        );
        let how = |quick: bool| if quick { "--quick" } else { "in full" };
        differ(
            "measured ",
            how(self.quick).into(),
            how(reference.quick).into(),
            "",
        );
        out
    }

    /// Each node's memory in brief, `18.1 GiB` or `2 x 256.0 GiB, 1 x
    /// 64.0 GiB`.
    pub fn memory_summary(&self) -> String {
        let mut runs: Vec<(usize, u64)> = Vec::new();
        for node in &self.nodes {
            match runs.last_mut() {
                Some((count, bytes)) if same_memory(*bytes, node.memory_bytes) => *count += 1,
                _ => runs.push((1, node.memory_bytes)),
            }
        }
        let parts: Vec<String> = runs
            .iter()
            .map(|&(count, bytes)| match count {
                1 => gib(bytes),
                _ => format!("{count} x {}", gib(bytes)),
            })
            .collect();
        parts.join(", ")
    }
}

fn present(yes: bool) -> &'static str {
    if yes {
        "present"
    } else {
        "absent"
    }
}

/// Bytes as GiB with one decimal (`10.1 GiB`), so two sizes that differ
/// read as different.
fn gib(bytes: u64) -> String {
    if bytes < 1 << 30 {
        Size(bytes).to_string()
    } else {
        format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
    }
}

/// `kernel.numa_balancing` in a word, as `numalab topo` says it: `off`,
/// `on`, `tiering` (2), `on+tiering` (3), `unknown` when the file was not
/// read (any other value as its number).
///
/// ```
/// use numalab_bench::host::fingerprint::balancing_word;
/// assert_eq!(balancing_word(Some(0)), "off");
/// assert_eq!(balancing_word(Some(2)), "tiering");
/// assert_eq!(balancing_word(None), "unknown");
/// ```
pub fn balancing_word(state: Option<u32>) -> std::borrow::Cow<'static, str> {
    match state {
        Some(0) => "off".into(),
        Some(1) => "on".into(),
        Some(2) => "tiering".into(),
        Some(3) => "on+tiering".into(),
        Some(v) => v.to_string().into(),
        None => "unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use numalab::Topology;

    fn machine(synthetic: &str) -> Fingerprint {
        let topology = TopoReport::gather(Topology::from_synthetic(synthetic).unwrap());
        Fingerprint::from_parts(&topology, None, false)
    }

    #[test]
    fn a_missing_dimm_differs_and_a_tenth_of_a_percent_does_not() {
        let mut reference = machine("pack:2 numa:1 core:2 pu:1");
        for node in &mut reference.nodes {
            node.memory_bytes = 256 << 30;
        }
        let mut close = reference.clone();
        close.nodes[1].memory_bytes -= (256 << 30) / 1000;
        assert!(close.matches(&reference));
        let mut short = reference.clone();
        short.nodes[1].memory_bytes -= 32 << 30;
        assert_eq!(
            short.differences(&reference),
            ["node 1: memory 224.0 GiB instead of 256.0 GiB"]
        );
        assert_eq!(short.memory_summary(), "256.0 GiB, 224.0 GiB");
        assert_eq!(reference.memory_summary(), "2 x 256.0 GiB");
    }

    #[test]
    fn settings_and_firmware_are_named() {
        let reference = machine("pack:2 numa:1 core:2 pu:1");
        let mut other = reference.clone();
        other.thp = Some("never".into());
        other.kernel = Some("6.8.0".into());
        other.hmat = true;
        other.quick = true;
        other.nodes[0].allowed_cpus = 1;
        other.numa_balancing = Some(0);
        assert_eq!(
            other.differences(&reference),
            [
                "node 0: 1 CPU allowed instead of 2",
                "HMAT present instead of absent",
                "kernel 6.8.0 instead of unknown",
                "THP never instead of unknown",
                "numa_balancing off instead of unknown",
                "measured --quick instead of in full",
            ]
        );
    }
}
