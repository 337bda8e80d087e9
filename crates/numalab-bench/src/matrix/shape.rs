//! Which node pairs a matrix has, and what the firmware says about each.
//!
//! Rows are *initiators*: nodes with CPUs this process may use. Columns are
//! *targets*: nodes with memory. A memory-only node (CXL, HBM, a CPU-less
//! node with HMAT) is a target only; a node with CPUs but no memory is an
//! initiator only. Each pair carries the firmware's claims about it: the
//! SLIT distance and, where the firmware has an HMAT, its latency and
//! bandwidth.

use std::collections::BTreeMap;

use numalab::{NodeSet, Topology};
use serde::{Deserialize, Serialize};

use super::MatrixError;

/// Which nodes the user asked to measure. `None` everywhere means every
/// node this process may use.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::matrix::{NodeSelection, Shape};
/// let topo = Topology::from_synthetic("pack:4 numa:1 core:2 pu:1")?;
/// let rows_0_1 = NodeSelection { cpu_nodes: Some(topo.parse_nodes("0-1")?), ..Default::default() };
/// let shape = Shape::of(&topo, &rows_0_1)?;
/// assert_eq!((shape.initiators.len(), shape.targets.len()), (2, 4));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSelection {
    /// Nodes to use in both roles, each where it can (`--nodes`).
    pub nodes: Option<NodeSet>,
    /// Initiator nodes (`--cpu-nodes`); each must have CPUs.
    pub cpu_nodes: Option<NodeSet>,
    /// Target nodes (`--mem-nodes`); each must have memory.
    pub mem_nodes: Option<NodeSet>,
}

/// The rows and columns of a matrix.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::matrix::{NodeSelection, Shape};
/// let topo = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// let shape = Shape::of(&topo, &NodeSelection::default())?;
/// assert_eq!((shape.initiators.clone(), shape.targets.clone()), (vec![0, 1], vec![0, 1]));
/// assert_eq!(shape.reference[&1], 1, "node 1's own memory is its local reference");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shape {
    /// Nodes whose CPUs run the measurements (rows), ascending.
    pub initiators: Vec<u32>,
    /// Nodes whose memory is measured (columns), ascending.
    pub targets: Vec<u32>,
    /// For each initiator, the target its remote/local ratios divide by:
    /// its own node when that has memory, else the nearest target by SLIT
    /// distance. Missing when there is no way to tell.
    pub reference: BTreeMap<u32, u32>,
    /// One sentence per node measured in one role only, e.g. "node 2 has
    /// no CPUs: a target only".
    pub notes: Vec<String>,
}

impl Shape {
    /// Resolves `selection` against `topology`. Nodes that do not exist or
    /// are not allowed, `cpu_nodes` without CPUs and `mem_nodes` without
    /// memory are errors naming the nodes that would do.
    pub fn of(topology: &Topology, selection: &NodeSelection) -> Result<Shape, MatrixError> {
        let inventory = topology.inventory();
        // Nodes with at least one CPU this process may run on.
        let usable_cpu_nodes: NodeSet = topology
            .nodes
            .iter()
            .filter(|n| !n.cpus.intersection(&topology.allowed_cpus).is_empty())
            .map(|n| n.id)
            .filter(|n| inventory.allowed_nodes.contains(*n))
            .collect();
        let usable_mem_nodes = inventory.with_memory.intersection(&inventory.allowed_nodes);
        let base = match &selection.nodes {
            Some(nodes) => {
                topology.check_nodes(nodes)?;
                nodes.clone()
            }
            None => inventory.allowed_nodes.clone(),
        };

        let initiators = match &selection.cpu_nodes {
            Some(nodes) => {
                topology.check_cpu_nodes(nodes)?;
                if let Some(node) = nodes.iter().find(|n| !usable_cpu_nodes.contains(*n)) {
                    return Err(MatrixError::NoUsableCpus {
                        node,
                        usable: usable_cpu_nodes,
                    });
                }
                nodes.clone()
            }
            None => base.intersection(&usable_cpu_nodes),
        };
        let targets = match &selection.mem_nodes {
            Some(nodes) => {
                topology.check_memory_nodes(nodes)?;
                nodes.clone()
            }
            None => base.intersection(&usable_mem_nodes),
        };
        if initiators.is_empty() {
            return Err(MatrixError::NoInitiators {
                nodes: base,
                with_cpus: usable_cpu_nodes,
            });
        }
        if targets.is_empty() {
            return Err(MatrixError::NoTargets {
                nodes: base,
                with_memory: usable_mem_nodes,
            });
        }

        let mut notes = Vec::new();
        if selection.cpu_nodes.is_none() && selection.mem_nodes.is_none() {
            for node in base.iter() {
                match (initiators.contains(node), targets.contains(node)) {
                    (false, true) if topology.node(node).is_some_and(|n| n.cpus.is_empty()) => {
                        notes.push(format!("node {node} has no CPUs: a target only"))
                    }
                    (false, true) => notes.push(format!(
                        "node {node}: this process may use none of its CPUs: a target only"
                    )),
                    (true, false) => {
                        notes.push(format!("node {node} has no memory: an initiator only"))
                    }
                    _ => {}
                }
            }
        }

        let reference = initiators
            .iter()
            .filter_map(|i| reference_target(topology, i, &targets).map(|t| (i, t)))
            .collect();
        Ok(Shape {
            initiators: initiators.iter().collect(),
            targets: targets.iter().collect(),
            reference,
            notes,
        })
    }

    /// Every (initiator, target) pair, row by row.
    pub fn cells(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.initiators
            .iter()
            .flat_map(move |&i| self.targets.iter().map(move |&t| (i, t)))
    }
}

/// The target an initiator's ratios divide by: itself when it is a target,
/// else the nearest target by SLIT distance (ties: lowest id).
fn reference_target(topology: &Topology, initiator: u32, targets: &NodeSet) -> Option<u32> {
    if targets.contains(initiator) {
        return Some(initiator);
    }
    topology.distances.as_ref()?;
    targets
        .iter()
        .filter_map(|t| topology.distance(initiator, t).map(|d| (d, t)))
        .min()
        .map(|(_, t)| t)
}

/// The CPUs of `node` this process may use, ascending.
pub fn usable_cpus(topology: &Topology, node: u32) -> Vec<u32> {
    topology
        .node(node)
        .map(|n| n.cpus.intersection(&topology.allowed_cpus))
        .unwrap_or_default()
        .iter()
        .collect()
}

/// `count` CPUs of `node` for parallel workers: one per core before any
/// second hardware thread of a core, so two workers share a core only when
/// there are more workers than cores.
pub fn spread_cpus(topology: &Topology, node: u32, count: usize) -> Vec<u32> {
    let cpus = usable_cpus(topology, node);
    let mut seen_cores = std::collections::BTreeSet::new();
    let (mut first, mut rest) = (Vec::new(), Vec::new());
    for cpu in cpus {
        let core = topology.cpu(cpu).map(|c| (c.package, c.core));
        if seen_cores.insert(core) {
            first.push(cpu);
        } else {
            rest.push(cpu);
        }
    }
    first.extend(rest);
    first.truncate(count);
    first
}

/// What the firmware says about one (initiator, target) pair.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::matrix::{Firmware, NodeSelection, Shape};
/// let xml = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/topologies/24em64t-2n6c2t-pci.xml");
/// let topo = Topology::from_xml_file(xml)?;
/// let shape = Shape::of(&topo, &NodeSelection::default())?;
/// let remote = Firmware::of(&topo, &shape, 0, 1);
/// assert_eq!((remote.slit, remote.slit_ratio), (Some(20), Some(2.0)));
/// assert_eq!(remote.latency_ns(), None, "no HMAT in this file");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Firmware {
    /// SLIT distance (10 = local), when the firmware has a SLIT.
    pub slit: Option<u64>,
    /// SLIT distance divided by the distance to the initiator's reference
    /// (local) target: what the firmware claims the remote/local cost is.
    pub slit_ratio: Option<f64>,
    /// HMAT access latency, ns.
    pub hmat_latency_ns: Option<u64>,
    /// HMAT read latency, ns.
    pub hmat_read_latency_ns: Option<u64>,
    /// HMAT write latency, ns.
    pub hmat_write_latency_ns: Option<u64>,
    /// HMAT access bandwidth, MiB/s.
    pub hmat_bandwidth_mib_s: Option<u64>,
    /// HMAT read bandwidth, MiB/s.
    pub hmat_read_bandwidth_mib_s: Option<u64>,
    /// HMAT write bandwidth, MiB/s.
    pub hmat_write_bandwidth_mib_s: Option<u64>,
}

impl Firmware {
    /// The firmware's values for `initiator` reading `target`'s memory.
    pub fn of(topology: &Topology, shape: &Shape, initiator: u32, target: u32) -> Firmware {
        let slit = topology.distance(initiator, target);
        let reference = shape
            .reference
            .get(&initiator)
            .and_then(|r| topology.distance(initiator, *r));
        let hmat = |name: &str| {
            topology
                .memory_attributes
                .iter()
                .filter(|v| {
                    v.attribute == name
                        && v.target == target
                        && v.initiator_nodes.contains(initiator)
                })
                .map(|v| v.value)
                .min()
        };
        Firmware {
            slit,
            slit_ratio: match (slit, reference) {
                (Some(d), Some(r)) if r > 0 => Some(d as f64 / r as f64),
                _ => None,
            },
            hmat_latency_ns: hmat("Latency"),
            hmat_read_latency_ns: hmat("ReadLatency"),
            hmat_write_latency_ns: hmat("WriteLatency"),
            hmat_bandwidth_mib_s: hmat("Bandwidth"),
            hmat_read_bandwidth_mib_s: hmat("ReadBandwidth"),
            hmat_write_bandwidth_mib_s: hmat("WriteBandwidth"),
        }
    }

    /// The HMAT latency to show beside a measured one: access latency, else
    /// read latency.
    pub fn latency_ns(&self) -> Option<u64> {
        self.hmat_latency_ns.or(self.hmat_read_latency_ns)
    }

    /// The HMAT bandwidth to show beside a measured one: access bandwidth,
    /// else read bandwidth.
    pub fn bandwidth_mib_s(&self) -> Option<u64> {
        self.hmat_bandwidth_mib_s.or(self.hmat_read_bandwidth_mib_s)
    }
}

/// The firmware's values for one pair of a shape, with the pair.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::matrix::{shape::firmware_cells, NodeSelection, Shape};
/// let topo = Topology::from_synthetic("pack:2 numa:1 core:1 pu:1")?;
/// let shape = Shape::of(&topo, &NodeSelection::default())?;
/// let cells = firmware_cells(&topo, &shape);
/// assert_eq!(cells.iter().map(|c| (c.initiator, c.target)).collect::<Vec<_>>(),
///            [(0, 0), (0, 1), (1, 0), (1, 1)]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FirmwareCell {
    /// CPU node.
    pub initiator: u32,
    /// Memory node.
    pub target: u32,
    /// What the firmware says.
    #[serde(flatten)]
    pub firmware: Firmware,
}

/// Firmware values for every cell of `shape`, row by row.
pub fn firmware_cells(topology: &Topology, shape: &Shape) -> Vec<FirmwareCell> {
    shape
        .cells()
        .map(|(initiator, target)| FirmwareCell {
            initiator,
            target,
            firmware: Firmware::of(topology, shape, initiator, target),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xml(name: &str) -> Topology {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/topologies")
            .join(name);
        Topology::from_xml_file(path).unwrap()
    }

    fn set(s: &str) -> Option<NodeSet> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn cpu_less_nodes_are_targets_and_memory_less_nodes_initiators() {
        let topo = xml("cpuless.xml");
        let with_cpus = topo.nodes_with_cpus();
        let with_memory = topo.nodes_with_memory();
        let shape = Shape::of(&topo, &NodeSelection::default()).unwrap();
        assert_eq!(shape.initiators, with_cpus.iter().collect::<Vec<_>>());
        assert_eq!(shape.targets, with_memory.iter().collect::<Vec<_>>());
        let cpuless: Vec<u32> = with_memory.difference(&with_cpus).iter().collect();
        let memless: Vec<u32> = with_cpus.difference(&with_memory).iter().collect();
        assert!(
            !cpuless.is_empty() && !memless.is_empty(),
            "the file has both"
        );
        for node in &cpuless {
            assert!(!shape.initiators.contains(node) && shape.targets.contains(node));
            assert!(shape
                .notes
                .contains(&format!("node {node} has no CPUs: a target only")));
        }
        for node in &memless {
            assert!(shape.initiators.contains(node) && !shape.targets.contains(node));
            assert!(shape
                .notes
                .contains(&format!("node {node} has no memory: an initiator only")));
            // Its ratios divide by the nearest node with memory.
            let reference = shape.reference[node];
            assert!(shape.targets.contains(&reference));
        }
        assert_eq!(
            shape.cells().count(),
            shape.initiators.len() * shape.targets.len()
        );
    }

    #[test]
    fn knl_mcdram_nodes_are_targets_only() {
        let topo = xml("64intel64-fakeKNL-SNC4-hybrid.xml");
        let shape = Shape::of(&topo, &NodeSelection::default()).unwrap();
        assert_eq!(shape.initiators, vec![0, 1, 2, 3]);
        assert_eq!(shape.targets, (0..8).collect::<Vec<_>>());
        assert_eq!(shape.notes.len(), 4, "{:?}", shape.notes);
        for i in 0..4 {
            assert_eq!(shape.reference[&i], i, "DRAM nodes are their own reference");
        }
        let firmware = firmware_cells(&topo, &shape);
        assert_eq!(firmware.len(), 32);
        let at = |i: u32, t: u32| {
            &firmware
                .iter()
                .find(|c| c.initiator == i && c.target == t)
                .unwrap()
                .firmware
        };
        // The file has HMAT bandwidths (DRAM 22500, the near MCDRAM 90000
        // MiB/s) and no SLIT.
        assert_eq!(at(0, 0).bandwidth_mib_s(), Some(22500));
        assert_eq!(at(0, 7).bandwidth_mib_s(), Some(90000));
        assert_eq!(at(1, 4).bandwidth_mib_s(), Some(90000));
        assert_eq!(at(0, 1).bandwidth_mib_s(), None);
        assert!(firmware.iter().all(|c| c.firmware.slit.is_none()));
        assert!(firmware.iter().all(|c| c.firmware.slit_ratio.is_none()));
    }

    #[test]
    fn slit_ratios_divide_by_the_local_distance() {
        let topo = xml("24em64t-2n6c2t-pci.xml");
        let shape = Shape::of(&topo, &NodeSelection::default()).unwrap();
        let firmware = firmware_cells(&topo, &shape);
        assert_eq!(firmware.len(), 4);
        for cell in &firmware {
            let slit = cell.firmware.slit.unwrap();
            let local = topo.distance(cell.initiator, cell.initiator).unwrap();
            assert_eq!(cell.firmware.slit_ratio, Some(slit as f64 / local as f64));
        }
        assert_eq!(firmware[1].firmware.slit_ratio, Some(2.0), "20 vs 10");
    }

    #[test]
    fn selections_narrow_the_matrix() {
        let topo = xml("cpuless.xml");
        let with_cpus: Vec<u32> = topo.nodes_with_cpus().iter().collect();
        let cpuless = topo
            .nodes_with_memory()
            .difference(&topo.nodes_with_cpus())
            .first()
            .unwrap();
        let shape = Shape::of(
            &topo,
            &NodeSelection {
                cpu_nodes: set(&with_cpus[0].to_string()),
                mem_nodes: set(&cpuless.to_string()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            (shape.initiators, shape.targets),
            (vec![with_cpus[0]], vec![cpuless])
        );
        // A CPU-less node cannot be an initiator.
        let err = Shape::of(
            &topo,
            &NodeSelection {
                cpu_nodes: set(&cpuless.to_string()),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("has no CPUs"), "{err}");
        // Nor a memory-less node a target.
        let memless = topo
            .nodes_with_cpus()
            .difference(&topo.nodes_with_memory())
            .first()
            .unwrap();
        let err = Shape::of(
            &topo,
            &NodeSelection {
                mem_nodes: set(&memless.to_string()),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("has no memory"), "{err}");
        // --nodes naming only a memory-less node has no target.
        let err = Shape::of(
            &topo,
            &NodeSelection {
                nodes: set(&memless.to_string()),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("none of nodes"), "{err}");
        // A node that does not exist.
        let err = Shape::of(
            &topo,
            &NodeSelection {
                nodes: set("9"),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("node 9 does not exist"), "{err}");
    }

    #[test]
    fn hmat_values_sit_beside_their_cell() {
        let topo = xml("8intel64-4n2t-memattrs.xml");
        let shape = Shape::of(&topo, &NodeSelection::default()).unwrap();
        let cells = firmware_cells(&topo, &shape);
        let with_hmat: Vec<_> = cells
            .iter()
            .filter(|c| c.firmware.latency_ns().is_some() || c.firmware.bandwidth_mib_s().is_some())
            .collect();
        assert!(!with_hmat.is_empty(), "the memattrs file has HMAT values");
        for cell in with_hmat {
            let expected = topo.memory_attributes.iter().any(|v| {
                v.target == cell.target
                    && v.initiator_nodes.contains(cell.initiator)
                    && (v.attribute.contains("Latency") || v.attribute.contains("Bandwidth"))
            });
            assert!(expected, "{cell:?}");
        }
    }

    #[test]
    fn restricted_cpusets_leave_out_unusable_nodes() {
        let topo = xml("16amd64-8n2c-cpusets.xml");
        let shape = Shape::of(&topo, &NodeSelection::default()).unwrap();
        for node in &shape.initiators {
            assert!(!usable_cpus(&topo, *node).is_empty());
            assert!(topo.allowed_nodes.contains(*node));
        }
        for node in &shape.targets {
            assert!(topo.allowed_nodes.contains(*node));
        }
    }

    #[test]
    fn workers_spread_over_cores_first() {
        // Two cores of two hardware threads each, on one node.
        let topo = Topology::from_synthetic("numa:1 core:2 pu:2").unwrap();
        let cpus = spread_cpus(&topo, 0, 2);
        assert_eq!(cpus.len(), 2);
        let cores: std::collections::BTreeSet<_> =
            cpus.iter().map(|c| topo.cpu(*c).unwrap().core).collect();
        assert_eq!(cores.len(), 2, "{cpus:?} share a core");
        assert_eq!(spread_cpus(&topo, 0, 9).len(), 4);
    }
}
