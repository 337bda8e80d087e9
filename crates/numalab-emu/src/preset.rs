//! The machines the suite boots, read from `presets.toml`, and everything
//! derived from one description: QEMU's command line and what the guest
//! must find (nodes, CPUs, memory, distances, HMAT values).

use std::collections::BTreeMap;
use std::fmt;

use numalab::units::{parse_size, Size};
use numalab::{CpuSet, NodeSet};
use serde::{Deserialize, Deserializer};

/// The presets file, compiled into both the host harness and the guest.
pub const PRESETS_TOML: &str = include_str!("../presets.toml");

/// A size written as `512M` or `1.5G` in the presets file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bytes(pub(crate) u64);

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_size(&text)
            .map(Bytes)
            .map_err(serde::de::Error::custom)
    }
}

/// How far the guest's view of memory may be from the description.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Tolerance {
    /// Percent of a node's memory the kernel may keep for itself.
    pub(crate) memory_percent: f64,
    /// What node 0 may hold besides: the kernel image, early allocations.
    pub(crate) kernel_node_reserve: Bytes,
}

/// One NUMA node of a preset.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NodeSpec {
    /// The node's id (its ACPI proximity domain, and Linux's node number):
    /// one more than the node before when absent. Ids skipped are nodes
    /// the firmware declares with nothing present (a CPU slot each).
    pub(crate) id: Option<u32>,
    /// Memory of the node (0: a memory-less node, which must have CPUs).
    pub(crate) memory: Bytes,
    /// Number of CPUs (0: a memory-only node).
    #[serde(default)]
    pub(crate) cpus: u32,
    /// For a memory-only node: the CPU node nearest to it.
    pub(crate) initiator: Option<u32>,
}

/// One HMAT entry: performance of `target`'s memory seen from
/// `initiator`'s CPUs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HmatSpec {
    /// The node whose CPUs access the memory.
    pub(crate) initiator: u32,
    /// The node whose memory is accessed.
    pub(crate) target: u32,
    /// Access latency in nanoseconds.
    pub(crate) latency_ns: Option<u64>,
    /// Access bandwidth in MiB/s.
    pub(crate) bandwidth_mib_s: Option<u64>,
}

/// A machine to boot.
///
/// ```
/// let presets = numalab_emu::preset::Presets::builtin()?;
/// let two = presets.get("two-socket")?;
/// assert_eq!(two.cpus_of(1).to_string(), "2-3");
/// assert_eq!(two.distance(0, 1), Some(21));
/// assert!(two.qemu_args().join(" ").contains("-numa dist,src=0,dst=1,val=21"));
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    /// Short name, used on the command line (`--preset cxl`).
    pub name: String,
    /// One line saying what the machine stands for.
    pub about: String,
    /// CPU packages; the CPUs are split evenly between them.
    #[serde(default = "one")]
    pub(crate) sockets: u32,
    /// The SLIT, row = from, column = to.
    pub(crate) distances: Vec<Vec<u64>>,
    /// The nodes, in id order.
    #[serde(rename = "node")]
    pub(crate) nodes: Vec<NodeSpec>,
    /// HMAT entries.
    #[serde(default)]
    pub(crate) hmat: Vec<HmatSpec>,
    /// Boots with the Python package (the host's interpreter, NumPy and
    /// numalab's wheel, about 50 MiB more initramfs), for check
    /// `python.place`.
    #[serde(default)]
    pub python: bool,
}

impl NodeSpec {
    /// The node's id (resolved when the presets file is read).
    pub(crate) fn id(&self) -> u32 {
        self.id.unwrap_or(0)
    }
}

fn one() -> u32 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PresetsFile {
    tolerance: Tolerance,
    preset: Vec<Preset>,
}

/// Every preset and the tolerance they are checked with.
///
/// ```
/// let presets = numalab_emu::preset::Presets::builtin()?;
/// assert_eq!(
///     presets.names(),
///     ["two-socket", "cxl", "lopsided", "snc", "sparse", "memless"]
/// );
/// let cxl = presets.get("cxl")?;
/// assert_eq!(cxl.memory_only_nodes().to_string(), "2-3");
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone)]
pub struct Presets {
    /// How close memory sizes must be.
    pub(crate) tolerance: Tolerance,
    /// The presets, in file order.
    pub presets: Vec<Preset>,
}

impl Presets {
    /// The presets compiled in from `presets.toml`.
    pub fn builtin() -> Result<Presets, String> {
        Self::parse(PRESETS_TOML)
    }

    /// Reads and checks a presets file.
    pub fn parse(text: &str) -> Result<Presets, String> {
        let file: PresetsFile = toml::from_str(text).map_err(|e| format!("presets.toml: {e}"))?;
        let mut seen = Vec::new();
        let mut file = file;
        for preset in &mut file.preset {
            if seen.contains(&preset.name) {
                return Err(format!(
                    "presets.toml: preset {:?} appears twice",
                    preset.name
                ));
            }
            seen.push(preset.name.clone());
            preset
                .validate()
                .map_err(|e| format!("presets.toml: preset {:?}: {e}", preset.name))?;
        }
        Ok(Presets {
            tolerance: file.tolerance,
            presets: file.preset,
        })
    }

    /// The preset called `name`.
    pub fn get(&self, name: &str) -> Result<&Preset, String> {
        self.presets.iter().find(|p| p.name == name).ok_or_else(|| {
            format!(
                "no preset {name:?}; the presets are {}",
                self.names().join(", ")
            )
        })
    }

    /// Every preset's name.
    pub fn names(&self) -> Vec<String> {
        self.presets.iter().map(|p| p.name.clone()).collect()
    }
}

/// An HMAT value as Linux and hwloc report it, derived from a preset.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ExpectedAttribute {
    /// hwloc's attribute name (`Latency`, `ReadBandwidth`, …).
    pub(crate) attribute: &'static str,
    /// The target node.
    pub(crate) target: u32,
    /// The initiator node.
    pub(crate) initiator: u32,
    /// ns or MiB/s.
    pub(crate) value: u64,
}

impl fmt::Display for ExpectedAttribute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} node {} -> node {}: {}",
            self.attribute, self.initiator, self.target, self.value
        )
    }
}

impl Preset {
    fn validate(&mut self) -> Result<(), String> {
        let n = self.nodes.len();
        if n == 0 {
            return Err("it has no node".into());
        }
        let mut next = 0;
        for node in &mut self.nodes {
            let id = node.id.unwrap_or(next);
            if id < next {
                return Err(format!(
                    "node id {id} comes after node {}; list nodes in increasing id order",
                    next - 1
                ));
            }
            if id > 63 {
                return Err(format!("node id {id}: at most 63"));
            }
            node.id = Some(id);
            next = id + 1;
        }
        if let Some(hole) = self.holes().first() {
            if let Some(later) = self.cpu_nodes().iter().find(|&c| c > *hole) {
                return Err(format!(
                    "node {later} has CPUs but comes after the unused id {hole}; ids may skip \
                     numbers only after the last node with CPUs (a present CPU after an empty \
                     slot stops Linux 6.1 at boot under TCG)"
                ));
            }
        }
        if self.total_cpus() == 0 {
            return Err("it has no CPU".into());
        }
        if let Some(first) = self.nodes.iter().position(|node| node.cpus == 0) {
            if let Some(later) = self.nodes[first..].iter().position(|node| node.cpus > 0) {
                return Err(format!(
                    "node {} has CPUs but comes after memory-only node {first}; list memory-only \
                     nodes last (Linux renumbers them otherwise)",
                    first + later
                ));
            }
        }
        for node in &self.nodes {
            let id = node.id();
            if !node.memory.0.is_multiple_of(1 << 20) {
                return Err(format!("node {id}: memory must be a whole number of MiB"));
            }
            if node.memory.0 == 0 && node.cpus == 0 {
                return Err(format!(
                    "node {id} has neither memory nor CPUs; leave its id out instead"
                ));
            }
            if node.memory.0 == 0 && id == 0 {
                return Err("node 0 must have memory (Linux boots from it)".into());
            }
            let holes = !self.holes().is_empty();
            match (node.cpus, node.initiator) {
                (0, Some(_)) if holes => {
                    return Err(format!(
                        "node {id}: no initiator in a preset with unused ids (the node holds an \
                         empty CPU slot, and QEMU makes such a node its own initiator)"
                    ))
                }
                (0, None) if holes => {}
                (0, None) => {
                    return Err(format!(
                        "node {id} has no CPUs: give its initiator (the CPU node nearest to it)"
                    ))
                }
                (0, Some(i)) if !self.has_cpus(i) => {
                    return Err(format!("node {id}: initiator {i} is not a node with CPUs"))
                }
                (c, Some(_)) if c > 0 => {
                    return Err(format!(
                        "node {id} has CPUs, so it is its own initiator; remove `initiator`"
                    ))
                }
                _ => {}
            }
        }
        if self.sockets == 0 || !self.possible_cpus().is_multiple_of(self.sockets) {
            return Err(format!(
                "{} CPUs{} cannot be split evenly over {} sockets",
                self.possible_cpus(),
                if self.holes().is_empty() {
                    String::new()
                } else {
                    " (with a slot for each unused id and each memory-only node after one)".into()
                },
                self.sockets
            ));
        }
        let per_socket = self.possible_cpus() / self.sockets;
        for id in self.node_ids().iter() {
            let cpus = self.cpus_of(id);
            if let (Some(first), Some(last)) = (cpus.first(), cpus.last()) {
                if first / per_socket != last / per_socket {
                    return Err(format!(
                        "node {id}'s CPUs {cpus} span two sockets ({per_socket} CPUs each)"
                    ));
                }
            }
        }
        if self.distances.len() != n || self.distances.iter().any(|row| row.len() != n) {
            return Err(format!("distances must be a {n}x{n} matrix"));
        }
        for (i, row) in self.distances.iter().enumerate() {
            for (j, &d) in row.iter().enumerate() {
                let ok = if i == j {
                    d == 10
                } else {
                    (11..=254).contains(&d)
                };
                if !ok {
                    return Err(format!(
                        "distance {i} -> {j} is {d}; local distances are 10, others 11 to 254"
                    ));
                }
            }
        }
        for node in self.memoryless_nodes().iter() {
            let nearest = self.nearest(node, &self.memory_nodes());
            if nearest.len() != 1 {
                return Err(format!(
                    "node {node} has no memory and nodes {nearest} are equally near it; Linux's \
                     choice among them is not the SLIT's, so give one of them a smaller distance"
                ));
            }
        }
        if !self.hmat.is_empty() && !self.holes().is_empty() {
            return Err(
                "hmat: not in a preset with unused ids (QEMU's HMAT needs an initiator for every \
                 memory-only node, which a node holding an empty CPU slot cannot have)"
                    .into(),
            );
        }
        let mut pairs = Vec::new();
        for entry in &self.hmat {
            let (i, t) = (entry.initiator, entry.target);
            if !self.has_cpus(i) {
                return Err(format!("hmat: initiator {i} is not a node with CPUs"));
            }
            if !self.has_memory(t) {
                return Err(format!("hmat: target {t} is not a node with memory"));
            }
            if entry.latency_ns.is_none() && entry.bandwidth_mib_s.is_none() {
                return Err(format!(
                    "hmat {i} -> {t}: give latency_ns, bandwidth_mib_s or both"
                ));
            }
            if entry.latency_ns == Some(0) || entry.bandwidth_mib_s == Some(0) {
                return Err(format!("hmat {i} -> {t}: zero means \"unknown\" to Linux"));
            }
            if pairs.contains(&(i, t)) {
                return Err(format!("hmat {i} -> {t} appears twice"));
            }
            pairs.push((i, t));
        }
        Ok(())
    }

    /// The description of node `id`.
    pub(crate) fn spec(&self, id: u32) -> Option<&NodeSpec> {
        self.nodes.iter().find(|n| n.id() == id)
    }

    /// The position of node `id` in the description (and in `distances`).
    fn index(&self, id: u32) -> Option<usize> {
        self.nodes.iter().position(|n| n.id() == id)
    }

    fn has_cpus(&self, node: u32) -> bool {
        self.spec(node).is_some_and(|n| n.cpus > 0)
    }

    fn has_memory(&self, node: u32) -> bool {
        self.spec(node).is_some_and(|n| n.memory.0 > 0)
    }

    /// Every node id.
    pub fn node_ids(&self) -> NodeSet {
        self.nodes.iter().map(NodeSpec::id).collect()
    }

    /// Nodes with memory.
    pub fn memory_nodes(&self) -> NodeSet {
        self.node_ids()
            .iter()
            .filter(|&n| self.has_memory(n))
            .collect()
    }

    /// Ids below the highest that no node has: proximity domains the
    /// firmware declares with only an empty CPU slot, which Linux knows
    /// as possible nodes but never brings online.
    pub fn holes(&self) -> Vec<u32> {
        let ids = self.node_ids();
        let top = ids.last().unwrap_or(0);
        (0..top).filter(|&id| !ids.contains(id)).collect()
    }

    /// The ids that get an empty, hot-pluggable CPU slot so that Linux,
    /// which numbers nodes in the order the firmware's SRAT first names
    /// them (CPUs first, by APIC id), keeps the preset's ids: every id
    /// from the first hole on that has no CPUs. None without holes.
    fn empty_slots(&self) -> Vec<u32> {
        let Some(&first) = self.holes().first() else {
            return Vec::new();
        };
        let top = self.node_ids().last().unwrap_or(0);
        (first..=top).filter(|&id| !self.has_cpus(id)).collect()
    }

    /// CPUs the firmware declares: present ones and empty slots.
    fn possible_cpus(&self) -> u32 {
        self.total_cpus() + self.empty_slots().len() as u32
    }

    /// Nodes with CPUs.
    pub fn cpu_nodes(&self) -> NodeSet {
        self.node_ids()
            .iter()
            .filter(|&n| self.has_cpus(n))
            .collect()
    }

    /// Nodes without CPUs.
    pub fn memory_only_nodes(&self) -> NodeSet {
        self.node_ids().difference(&self.cpu_nodes())
    }

    /// Nodes with CPUs and no memory.
    pub fn memoryless_nodes(&self) -> NodeSet {
        self.node_ids().difference(&self.memory_nodes())
    }

    /// All CPUs.
    pub fn total_cpus(&self) -> u32 {
        self.nodes.iter().map(|n| n.cpus).sum()
    }

    /// All memory, in bytes.
    pub fn total_memory(&self) -> u64 {
        self.nodes.iter().map(|n| n.memory.0).sum()
    }

    /// The CPUs of `node` (consecutive numbers, node by node).
    pub fn cpus_of(&self, node: u32) -> CpuSet {
        let Some(index) = self.index(node) else {
            return CpuSet::new();
        };
        let first: u32 = self.nodes.iter().take(index).map(|n| n.cpus).sum();
        let count = self.nodes[index].cpus;
        (first..first + count).collect()
    }

    /// The node whose CPUs Linux links to `node` as its HMAT initiator:
    /// itself when it has CPUs, else its `initiator`.
    pub fn attached_initiator(&self, node: u32) -> Option<u32> {
        let spec = self.spec(node)?;
        if spec.cpus > 0 {
            Some(node)
        } else {
            spec.initiator
        }
    }

    /// The SLIT distance.
    pub fn distance(&self, from: u32, to: u32) -> Option<u64> {
        self.distances
            .get(self.index(from)?)?
            .get(self.index(to)?)
            .copied()
    }

    /// The nodes of `among` nearest to `from` (several when tied).
    pub fn nearest(&self, from: u32, among: &NodeSet) -> NodeSet {
        let best = among.iter().filter_map(|n| self.distance(from, n)).min();
        among
            .iter()
            .filter(|&n| best.is_some() && self.distance(from, n) == best)
            .collect()
    }

    /// Where `local` and default allocations of `node`'s CPUs go: `node`
    /// itself when it has memory, else the nearest node with memory (one,
    /// checked when the presets file is read).
    pub fn home_node(&self, node: u32) -> u32 {
        if self.has_memory(node) {
            node
        } else {
            self.nearest(node, &self.memory_nodes())
                .first()
                .unwrap_or(node)
        }
    }

    /// The range of `MemTotal` the guest may report for `node`, in bytes.
    pub(crate) fn memory_range(&self, node: u32, tolerance: &Tolerance) -> (u64, u64) {
        let size = self.spec(node).map_or(0, |n| n.memory.0);
        let mut slack = (size as f64 * tolerance.memory_percent / 100.0) as u64;
        if node == 0 {
            slack += tolerance.kernel_node_reserve.0;
        }
        (size.saturating_sub(slack), size)
    }

    /// The memory attributes Linux 6.1 publishes and hwloc reports: for
    /// each target, only the values from its attached initiator (the node
    /// itself, or a memory-only node's `initiator`) are in sysfs
    /// (`nodeN/access0/initiators/`); a latency appears as hwloc's
    /// `Latency`, `ReadLatency` and `WriteLatency`, a bandwidth as
    /// `Bandwidth`, `ReadBandwidth` and `WriteBandwidth`.
    pub(crate) fn expected_attributes(&self) -> Vec<ExpectedAttribute> {
        let mut expected = Vec::new();
        for entry in &self.hmat {
            if self.attached_initiator(entry.target) != Some(entry.initiator) {
                continue;
            }
            let values = [
                (["Latency", "ReadLatency", "WriteLatency"], entry.latency_ns),
                (
                    ["Bandwidth", "ReadBandwidth", "WriteBandwidth"],
                    entry.bandwidth_mib_s,
                ),
            ];
            for (names, value) in values {
                let Some(value) = value else { continue };
                for attribute in names {
                    expected.push(ExpectedAttribute {
                        attribute,
                        target: entry.target,
                        initiator: entry.initiator,
                        value,
                    });
                }
            }
        }
        expected.sort();
        expected
    }

    /// The memory tiers Linux makes of this machine, tier id to nodes.
    /// Before Linux 6.7 (`hmat_tiers` false), and for memory with no HMAT
    /// figures, every node with memory is in the DRAM tier, 4. From 6.7
    /// a node's abstract distance comes from the HMAT figures of its
    /// attached initiator, against those of the first node with CPUs
    /// (mm/memory-tiers.c, `mt_perf_to_adistance`, integer arithmetic in
    /// its order): 2304 × latency ÷ DRAM latency × DRAM bandwidth ÷
    /// bandwidth, and its tier is that ÷ 512.
    pub fn expected_tiers(&self, hmat_tiers: bool) -> BTreeMap<u32, NodeSet> {
        const DRAM_ADISTANCE: u64 = 4 * 512 + 256;
        let perf = |node: u32| {
            let initiator = self.attached_initiator(node)?;
            let entry = self
                .hmat
                .iter()
                .find(|h| h.initiator == initiator && h.target == node)?;
            Some((entry.latency_ns?, entry.bandwidth_mib_s?))
        };
        let dram = self
            .cpu_nodes()
            .intersection(&self.memory_nodes())
            .iter()
            .find_map(perf);
        let mut tiers: BTreeMap<u32, NodeSet> = BTreeMap::new();
        for node in self.memory_nodes().iter() {
            let tier = match (hmat_tiers, dram, perf(node)) {
                (true, Some((dram_latency, dram_bandwidth)), Some((latency, bandwidth))) => {
                    // Access figures: read and write alike, summed.
                    let adistance = DRAM_ADISTANCE * (2 * latency) / (2 * dram_latency)
                        * (2 * dram_bandwidth)
                        / (2 * bandwidth);
                    (adistance >> 9) as u32
                }
                _ => (DRAM_ADISTANCE >> 9) as u32,
            };
            tiers.entry(tier).or_default().insert(node);
        }
        tiers
    }

    /// QEMU's options for this machine (without kernel, console and
    /// initramfs).
    pub fn qemu_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        let mut push = |a: &str, b: String| {
            args.push(a.to_owned());
            args.push(b);
        };
        // HMAT needs hmat=on, and with it every memory-only node needs an
        // initiator.
        let hmat = !self.hmat.is_empty()
            || (!self.memory_only_nodes().is_empty() && self.holes().is_empty());
        push(
            "-machine",
            if hmat { "pc,hmat=on" } else { "pc" }.to_owned(),
        );
        let cpus = self.total_cpus();
        let possible = self.possible_cpus();
        let per_socket = possible / self.sockets;
        push(
            "-smp",
            if possible == cpus {
                format!(
                    "cpus={cpus},sockets={},cores={per_socket},threads=1",
                    self.sockets
                )
            } else {
                format!(
                    "cpus={cpus},maxcpus={possible},sockets={},cores={per_socket},threads=1",
                    self.sockets
                )
            },
        );
        push("-m", format!("{}M", self.total_memory() >> 20));
        for node in self.nodes.iter().filter(|n| n.memory.0 > 0) {
            push(
                "-object",
                format!(
                    "memory-backend-ram,id=m{},size={}M",
                    node.id(),
                    node.memory.0 >> 20
                ),
            );
        }
        let slots = self.empty_slots();
        let top = self.node_ids().last().unwrap_or(0);
        for id in 0..=top {
            let mut spec = format!("node,nodeid={id}");
            if let Some(node) = self.spec(id) {
                if node.memory.0 > 0 {
                    spec.push_str(&format!(",memdev=m{id}"));
                }
                let cpus = self.cpus_of(id);
                if let (Some(first), Some(last), true) =
                    (cpus.first(), cpus.last(), slots.is_empty())
                {
                    spec.push_str(&format!(",cpus={first}-{last}"));
                }
                if let (0, Some(initiator)) = (node.cpus, node.initiator) {
                    spec.push_str(&format!(",initiator={initiator}"));
                }
            }
            push("-numa", spec);
        }
        if !slots.is_empty() {
            // Every possible CPU is placed by its socket and core: the
            // present ones (the lowest indices) on their nodes, then one
            // empty slot per id from the first hole on.
            let owners = self
                .nodes
                .iter()
                .flat_map(|n| std::iter::repeat_n(n.id(), n.cpus as usize))
                .chain(slots.iter().copied());
            for (index, node) in (0..).zip(owners) {
                push(
                    "-numa",
                    format!(
                        "cpu,node-id={node},socket-id={},core-id={},thread-id=0",
                        index / per_socket,
                        index % per_socket
                    ),
                );
            }
        }
        // QEMU wants a distance for every pair of its nodes, unused ids
        // included: those get the preset's largest.
        let far = self.distances.iter().flatten().max().copied().unwrap_or(20);
        for i in 0..=top {
            for j in 0..=top {
                if i != j {
                    let d = self.distance(i, j).unwrap_or(far);
                    push("-numa", format!("dist,src={i},dst={j},val={d}"));
                }
            }
        }
        for entry in &self.hmat {
            let lb = format!(
                "hmat-lb,initiator={},target={},hierarchy=memory",
                entry.initiator, entry.target
            );
            if let Some(ns) = entry.latency_ns {
                push(
                    "-numa",
                    format!("{lb},data-type=access-latency,latency={ns}"),
                );
            }
            if let Some(mib) = entry.bandwidth_mib_s {
                push(
                    "-numa",
                    format!("{lb},data-type=access-bandwidth,bandwidth={mib}M"),
                );
            }
        }
        args
    }

    /// How long a boot of this preset takes, roughly, to put the longest
    /// first when several run at once: the checks loop over nodes and
    /// CPUs.
    pub fn weight(&self) -> usize {
        self.nodes.len() + self.total_cpus() as usize
    }

    /// A one-line summary: `4 nodes (2 memory-only), 4 CPUs, 2.2 GiB`.
    pub fn summary(&self) -> String {
        let memory_only = self.memory_only_nodes().len();
        format!(
            "{} nodes{}, {} CPUs, {}",
            self.nodes.len(),
            if memory_only > 0 {
                format!(" ({memory_only} memory-only)")
            } else {
                String::new()
            },
            self.total_cpus(),
            Size(self.total_memory())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn presets() -> Presets {
        Presets::builtin().unwrap()
    }

    #[test]
    fn builtin_presets_are_valid_and_cover_the_six_machines() {
        let all = presets();
        assert_eq!(
            all.names(),
            ["two-socket", "cxl", "lopsided", "snc", "sparse", "memless"]
        );
        let two = all.get("two-socket").unwrap();
        assert_eq!(two.cpus_of(1).to_string(), "2-3");
        assert_eq!(two.distance(0, 1), Some(21));
        let cxl = all.get("cxl").unwrap();
        assert_eq!(cxl.memory_only_nodes().to_string(), "2-3");
        assert_eq!(cxl.attached_initiator(3), Some(1));
        assert!(cxl.cpus_of(2).is_empty());
        let lopsided = all.get("lopsided").unwrap();
        assert_eq!(lopsided.nodes[0].memory.0, 3 << 29);
        assert_eq!(lopsided.nodes[1].memory.0, 256 << 20);
        let err = all.get("eight-socket").unwrap_err();
        assert!(err.contains("two-socket, cxl, lopsided"), "{err}");
        let snc = all.get("snc").unwrap();
        assert_eq!((snc.node_ids().len(), snc.sockets), (8, 2));
        assert_eq!(snc.distance(0, 3), Some(12));
        assert_eq!(snc.distance(3, 4), Some(32));
        let sparse = all.get("sparse").unwrap();
        assert_eq!(sparse.node_ids().to_string(), "0,2,5");
        assert_eq!(sparse.holes(), [1, 3, 4]);
        assert_eq!(sparse.distance(2, 5), Some(30));
        let memless = all.get("memless").unwrap();
        assert_eq!(memless.memoryless_nodes().to_string(), "2");
        assert_eq!(memless.memory_nodes().to_string(), "0-1");
        assert_eq!(memless.home_node(2), 0, "nearest node with memory");
        assert_eq!(memless.home_node(1), 1);
    }

    #[test]
    fn memory_tiers_follow_the_kernel_s_formula() {
        let all = presets();
        let cxl = all.get("cxl").unwrap();
        let tiers = |hmat| -> Vec<(u32, String)> {
            cxl.expected_tiers(hmat)
                .into_iter()
                .map(|(t, n)| (t, n.to_string()))
                .collect()
        };
        assert_eq!(tiers(false), [(4, "0-3".to_owned())]);
        // As Linux 6.12 made them from the same HMAT in the guest.
        assert_eq!(
            tiers(true),
            [
                (4, "0".to_owned()),
                (5, "1".to_owned()),
                (35, "2".to_owned()),
                (50, "3".to_owned())
            ]
        );
        let two = all.get("two-socket").unwrap();
        assert_eq!(two.expected_tiers(true).len(), 1, "no HMAT: all DRAM");
    }

    #[test]
    fn qemu_gets_every_distance_pair_and_initiators() {
        let all = presets();
        let cxl = all.get("cxl").unwrap();
        let args = cxl.qemu_args().join(" ");
        assert!(
            args.starts_with(
                "-machine pc,hmat=on -smp cpus=4,sockets=2,cores=2,threads=1 -m 2304M"
            ),
            "{args}"
        );
        assert!(
            args.contains("-numa node,nodeid=2,memdev=m2,initiator=0"),
            "{args}"
        );
        assert!(
            args.contains("-numa node,nodeid=1,memdev=m1,cpus=2-3"),
            "{args}"
        );
        // Asymmetric: both directions, 12 pairs for 4 nodes.
        assert_eq!(args.matches("-numa dist,").count(), 12, "{args}");
        assert!(args.contains("dist,src=2,dst=0,val=26"), "{args}");
        assert!(args.contains(
            "hmat-lb,initiator=0,target=2,hierarchy=memory,data-type=access-bandwidth,bandwidth=8192M"
        ));
        let two = all.get("two-socket").unwrap().qemu_args().join(" ");
        assert!(two.starts_with("-machine pc -smp"), "{two}");
        assert!(!two.contains("hmat"), "{two}");
    }

    #[test]
    fn hmat_expectations_follow_what_linux_publishes() {
        let all = presets();
        let cxl = all.get("cxl").unwrap();
        let expected = cxl.expected_attributes();
        // Four targets with attached-initiator values, 3 latency and 3
        // bandwidth names each; the remote entries are not published.
        assert_eq!(expected.len(), 24);
        assert!(expected
            .iter()
            .all(|e| Some(e.initiator) == cxl.attached_initiator(e.target)));
        let to_cxl: Vec<String> = expected
            .iter()
            .filter(|e| e.target == 2)
            .map(|e| e.to_string())
            .collect();
        assert!(
            to_cxl.contains(&"ReadLatency node 0 -> node 2: 250".to_string()),
            "{to_cxl:?}"
        );
        assert!(
            to_cxl.contains(&"Bandwidth node 0 -> node 2: 8192".to_string()),
            "{to_cxl:?}"
        );
        assert!(all
            .get("two-socket")
            .unwrap()
            .expected_attributes()
            .is_empty());
    }

    #[test]
    fn memory_range_allows_for_the_kernel() {
        let all = presets();
        let lopsided = all.get("lopsided").unwrap();
        let (low, high) = lopsided.memory_range(1, &all.tolerance);
        assert_eq!(high, 256 << 20);
        assert!(low > 240 << 20 && low < 256 << 20, "{low}");
        let (low0, _) = lopsided.memory_range(0, &all.tolerance);
        assert!(low0 < (3 << 29) - (64 << 20), "{low0}");
    }

    #[test]
    fn nearest_breaks_no_ties_it_cannot() {
        let all = presets();
        let cxl = all.get("cxl").unwrap();
        let set: NodeSet = "1-3".parse().unwrap();
        assert_eq!(cxl.nearest(0, &set).to_string(), "1");
        assert_eq!(cxl.nearest(1, &"0,2-3".parse().unwrap()).to_string(), "0");
        let two = all.get("two-socket").unwrap();
        assert_eq!(two.nearest(1, &"0-1".parse().unwrap()).to_string(), "1");
    }

    #[test]
    fn bad_presets_are_refused_with_the_reason() {
        let base = |body: &str| {
            format!(
                "[tolerance]\nmemory_percent = 3\nkernel_node_reserve = \"64M\"\n\
                 [[preset]]\nname = \"x\"\nabout = \"x\"\n{body}"
            )
        };
        for (body, needle) in [
            (
                "distances = [[10,20],[20,10]]\n[[preset.node]]\nmemory = \"1G\"\n[[preset.node]]\nmemory = \"1G\"\ncpus = 2\n",
                "list memory-only nodes last",
            ),
            (
                "distances = [[10,20],[20,10]]\n[[preset.node]]\nmemory = \"1G\"\ncpus = 2\n[[preset.node]]\nmemory = \"1G\"\n",
                "give its initiator",
            ),
            (
                "distances = [[10]]\n[[preset.node]]\nmemory = \"1G\"\ncpus = 2\n[[preset.node]]\nmemory = \"1G\"\ncpus = 2\n",
                "2x2 matrix",
            ),
            (
                "distances = [[10,9],[9,10]]\n[[preset.node]]\nmemory = \"1G\"\ncpus = 2\n[[preset.node]]\nmemory = \"1G\"\ncpus = 2\n",
                "distance 0 -> 1 is 9",
            ),
            (
                "distances = [[10]]\n[[preset.node]]\nmemory = \"1.5 parsecs\"\ncpus = 1\n",
                "invalid size",
            ),
            (
                "distances = [[10]]\nsockets = 2\n[[preset.node]]\nmemory = \"1G\"\ncpus = 3\n",
                "cannot be split evenly",
            ),
            (
                "distances = [[10]]\ncolour = 1\n[[preset.node]]\nmemory = \"1G\"\ncpus = 1\n",
                "unknown field `colour`",
            ),
            (
                "distances = [[10]]\n[[preset.node]]\nmemory = \"1G\"\ncpus = 1\n[[preset.hmat]]\ninitiator = 0\ntarget = 0\n",
                "give latency_ns, bandwidth_mib_s or both",
            ),
        ] {
            let err = Presets::parse(&base(body)).unwrap_err();
            assert!(err.contains(needle), "{needle}: {err}");
        }
    }
}
