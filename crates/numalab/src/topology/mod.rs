//! The shape of a machine: NUMA nodes, CPUs, distances, memory attributes,
//! caches and the devices near each node.
//!
//! [`Topology`] is a plain snapshot taken from hwloc, so it can be printed,
//! saved in a result file and compared with another machine's. It comes
//! from this machine ([`Topology::system`]), from an XML file exported by
//! `lstopo --of xml` on another machine ([`Topology::from_xml_file`]) or from
//! an hwloc synthetic description ([`Topology::from_synthetic`]).
//!
//! Free memory changes while a program runs, so it is not part of the
//! snapshot: [`Topology::free_memory`] reads it fresh from sysfs.

use std::collections::BTreeMap;
use std::path::Path;

use hwlocality::memory::attribute::{Initiator, MemoryAttribute};
use hwlocality::object::attributes::ObjectAttributes;
use hwlocality::object::distance::DistancesKind;
use hwlocality::object::types::{CacheType, ObjectType};
use hwlocality::object::TopologyObject;
use hwlocality::topology::builder::{BuildFlags, TypeFilter};
use serde::{Deserialize, Serialize};

pub use crate::inventory::{NodeInventory, Role, SpecError};
use crate::policy::{MemPolicy, PolicyError};
use crate::sets::{CpuSet, NodeSet};
use crate::sys::procfs;

pub mod hwloc_xml;
mod xml;

/// Why a topology could not be loaded.
///
/// ```
/// use numalab::{Topology, TopologyError};
/// match Topology::from_xml_file("/no/such/topology.xml").unwrap_err() {
///     TopologyError::Hwloc { source_desc, .. } => assert!(source_desc.contains("/no/such")),
///     other => panic!("unexpected {other}"),
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TopologyError {
    /// hwloc failed to discover or import the topology.
    #[error("could not load the topology from {source_desc}: {message}")]
    Hwloc {
        /// Where the topology was being loaded from.
        source_desc: String,
        /// hwloc's message.
        message: String,
    },
    /// The topology has no NUMA node with memory.
    #[error("the topology from {0} has no NUMA node with memory")]
    NoMemory(String),
}

/// Where a topology snapshot came from.
///
/// ```
/// use numalab::topology::Source;
/// let topo = numalab::Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// assert_eq!(topo.source, Source::Synthetic("pack:2 numa:1 core:2 pu:1".into()));
/// assert_eq!(Source::System.to_string(), "this machine");
/// let json = serde_json::to_string(&Source::Xml("m.xml".into()))?;
/// assert_eq!(json, r#"{"kind":"xml","from":"m.xml"}"#);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "from", rename_all = "snake_case")]
pub enum Source {
    /// Discovered on the running machine.
    System,
    /// Imported from an hwloc XML file.
    Xml(String),
    /// Built from an hwloc synthetic description.
    Synthetic(String),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::System => f.write_str("this machine"),
            Source::Xml(path) => write!(f, "XML file {path}"),
            Source::Synthetic(desc) => write!(f, "synthetic topology \"{desc}\""),
        }
    }
}

/// One NUMA node.
///
/// ```
/// use numalab::Topology;
/// // A Knights Landing: nodes 4-7 are MCDRAM, memory without CPUs.
/// let topo = Topology::from_xml_file(concat!(
///     env!("CARGO_MANIFEST_DIR"),
///     "/../../tests/topologies/64intel64-fakeKNL-SNC4-hybrid.xml"
/// ))?;
/// let mcdram = topo.node(4).unwrap();
/// assert!(mcdram.cpus.is_empty() && mcdram.memory_bytes > 0);
/// assert_eq!(mcdram.subtype.as_deref(), Some("MCDRAM"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// The kernel's node number.
    pub id: u32,
    /// CPUs whose local memory is this node (empty for memory-only nodes
    /// such as CXL expanders or KNL's MCDRAM).
    pub cpus: CpuSet,
    /// Memory installed on the node, in bytes (0 for a node without memory).
    pub memory_bytes: u64,
    /// hwloc's subtype for special memory (`MCDRAM`, `GPUMemory`, `NVM`,
    /// `CXL-DRAM`, …); `None` for ordinary DRAM.
    pub subtype: Option<String>,
}

/// One logical CPU (hwloc's PU).
///
/// ```
/// use numalab::Topology;
/// let topo = Topology::from_synthetic("pack:2 numa:1 core:2 pu:2")?;
/// let cpu = topo.cpu(5).unwrap();
/// assert_eq!((cpu.core, cpu.package, cpu.node), (2, 1, Some(1)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cpu {
    /// The kernel's CPU number.
    pub id: u32,
    /// The core it belongs to (hwloc logical index).
    pub core: u32,
    /// The package (socket) it belongs to (hwloc logical index).
    pub package: u32,
    /// Its local NUMA node, if any.
    pub node: Option<u32>,
}

/// A node-by-node distance matrix (the ACPI SLIT on x86).
///
/// ```
/// use numalab::Topology;
/// let topo = Topology::from_xml_file(concat!(
///     env!("CARGO_MANIFEST_DIR"),
///     "/../../tests/topologies/24em64t-2n6c2t-pci.xml"
/// ))?;
/// let distances = topo.distances.as_ref().unwrap();
/// assert_eq!(distances.nodes, [0, 1]);
/// assert_eq!(distances.get(0, 1), Some(20));
/// assert_eq!(distances.get(1, 1), Some(10));
/// assert_eq!(distances.get(0, 5), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Read back from a saved file, a matrix must be what a machine can give:
/// square, a row and a column for each node listed, each node once, at
/// most [`MAX_DISTANCE_NODES`] of them; anything else is refused as it is
/// read, so nothing that draws or compares distances meets a ragged one.
///
/// ```
/// use numalab::topology::Distances;
/// let ragged = r#"{"nodes": [0, 1], "values": [[10], [21, 10]]}"#;
/// let err = serde_json::from_str::<Distances>(ragged).unwrap_err();
/// assert!(err.to_string().contains("row 0 has 1 value for 2 nodes"), "{err}");
/// let more = r#"{"nodes": [0, 1, 2], "values": [[10, 21], [21, 10]]}"#;
/// assert!(serde_json::from_str::<Distances>(more).is_err());
/// let zero = r#"{"nodes": [0, 1], "values": [[0, 0], [0, 0]]}"#;
/// assert!(serde_json::from_str::<Distances>(zero).unwrap_err().to_string().contains("1 to 255"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "UncheckedDistances")]
pub struct Distances {
    /// The nodes of the rows and columns, in order.
    pub nodes: Vec<u32>,
    /// `values[i][j]`: distance from `nodes[i]` to `nodes[j]`; 10 means
    /// local by convention.
    pub values: Vec<Vec<u64>>,
}

/// The most nodes a distance matrix read back may have: Linux's
/// `MAX_NUMNODES` (1024, the largest `CONFIG_NODES_SHIFT`).
pub const MAX_DISTANCE_NODES: usize = 1024;

/// [`Distances`] as a file holds it, before it is checked.
#[derive(Deserialize)]
struct UncheckedDistances {
    nodes: Vec<u32>,
    values: Vec<Vec<u64>>,
}

impl TryFrom<UncheckedDistances> for Distances {
    type Error = String;

    fn try_from(raw: UncheckedDistances) -> Result<Distances, String> {
        let n = raw.nodes.len();
        if n > MAX_DISTANCE_NODES {
            return Err(format!(
                "a distance matrix of {n} nodes: Linux has at most {MAX_DISTANCE_NODES}"
            ));
        }
        if raw.values.len() != n {
            return Err(format!(
                "a distance matrix with {} for {}",
                crate::units::count(raw.values.len(), "row"),
                crate::units::count(n, "node")
            ));
        }
        if let Some((i, row)) = raw.values.iter().enumerate().find(|(_, r)| r.len() != n) {
            return Err(format!(
                "distance matrix row {i} has {} for {}",
                crate::units::count(row.len(), "value"),
                crate::units::count(n, "node")
            ));
        }
        // ACPI's SLIT holds one byte a distance, and Linux never shows 0.
        if let Some((i, j, v)) = raw.values.iter().enumerate().find_map(|(i, row)| {
            row.iter()
                .enumerate()
                .find(|(_, v)| !(1..=255).contains(*v))
                .map(|(j, v)| (i, j, *v))
        }) {
            return Err(format!(
                "distance {v} from node {} to node {}: distances are 1 to 255",
                raw.nodes[i], raw.nodes[j]
            ));
        }
        let mut seen = raw.nodes.clone();
        seen.sort_unstable();
        if let Some(twice) = seen.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!(
                "node {} appears twice in a distance matrix",
                twice[0]
            ));
        }
        Ok(Distances {
            nodes: raw.nodes,
            values: raw.values,
        })
    }
}

impl Distances {
    /// The distance from node `from` to node `to`, if both are in the matrix.
    pub fn get(&self, from: u32, to: u32) -> Option<u64> {
        let i = self.nodes.iter().position(|&n| n == from)?;
        let j = self.nodes.iter().position(|&n| n == to)?;
        self.values.get(i)?.get(j).copied()
    }
}

/// One memory-attribute value: how a target node performs as seen from an
/// initiator (ACPI HMAT on x86).
///
/// ```
/// use numalab::Topology;
/// let topo = Topology::from_xml_file(concat!(
///     env!("CARGO_MANIFEST_DIR"),
///     "/../../tests/topologies/8intel64-4n2t-memattrs.xml"
/// ))?;
/// let value = &topo.memory_attributes[0];
/// assert_eq!((value.attribute.as_str(), value.unit.as_str()), ("Bandwidth", "MiB/s"));
/// assert_eq!((value.target, value.value), (1, 20));
/// assert_eq!(value.initiator_nodes.to_string(), "0-3");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryAttributeValue {
    /// Attribute name: `Bandwidth`, `ReadBandwidth`, `WriteBandwidth` (MiB/s),
    /// `Latency`, `ReadLatency`, `WriteLatency` (ns).
    pub attribute: String,
    /// The unit of `value`.
    pub unit: String,
    /// The target memory node.
    pub target: u32,
    /// The CPUs of the initiator.
    pub initiator_cpus: CpuSet,
    /// The nodes whose CPUs make up the initiator.
    pub initiator_nodes: NodeSet,
    /// The value.
    pub value: u64,
}

/// A cache.
///
/// ```
/// use numalab::Topology;
/// // Two sockets, one 12 MiB L3 each.
/// let topo = Topology::from_xml_file(concat!(
///     env!("CARGO_MANIFEST_DIR"),
///     "/../../tests/topologies/24em64t-2n6c2t-pci.xml"
/// ))?;
/// assert_eq!(topo.last_level_caches.len(), 2);
/// let l3 = &topo.last_level_caches[0];
/// assert_eq!((l3.level, l3.size_bytes), (3, 12 << 20));
/// assert_eq!(l3.cpus, topo.node(l3.nodes.first().unwrap()).unwrap().cpus);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cache {
    /// 1, 2, 3, …
    pub level: u32,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Line size in bytes, if known.
    pub line_bytes: Option<u64>,
    /// CPUs sharing it.
    pub cpus: CpuSet,
    /// Nodes whose CPUs share it.
    pub nodes: NodeSet,
}

/// What a PCI device is, as far as placement is concerned.
///
/// ```
/// use numalab::topology::DeviceKind;
/// use numalab::Topology;
/// let topo = Topology::from_xml_file(concat!(
///     env!("CARGO_MANIFEST_DIR"),
///     "/../../tests/topologies/24em64t-2n6c2t-pci.xml"
/// ))?;
/// let near = |kind, node: &str| {
///     topo.devices.iter().any(|d| d.kind == kind && d.nodes.to_string() == node)
/// };
/// assert!(near(DeviceKind::Gpu, "1") && near(DeviceKind::Network, "0"));
/// assert_eq!(serde_json::to_string(&DeviceKind::Nvme)?, r#""nvme""#);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    /// A GPU or display controller.
    Gpu,
    /// An Ethernet or other network controller.
    Network,
    /// An InfiniBand or other high-speed fabric adapter.
    Fabric,
    /// An NVMe drive.
    Nvme,
    /// Another storage controller (SATA, SAS, RAID).
    Storage,
    /// An accelerator or co-processor.
    Accelerator,
    /// Anything else.
    Other,
}

impl DeviceKind {
    fn from_class(class: u16) -> Self {
        match class {
            0x0300..=0x03ff => Self::Gpu,
            0x0207 => Self::Fabric,
            0x0200..=0x02ff => Self::Network,
            0x0108 => Self::Nvme,
            0x0100..=0x01ff => Self::Storage,
            0x0b40 | 0x1200..=0x12ff => Self::Accelerator,
            _ => Self::Other,
        }
    }
}

/// A PCI device and the nodes it is attached near.
///
/// ```
/// use numalab::topology::DeviceKind;
/// use numalab::Topology;
/// let topo = Topology::from_xml_file(concat!(
///     env!("CARGO_MANIFEST_DIR"),
///     "/../../tests/topologies/24em64t-2n6c2t-pci.xml"
/// ))?;
/// let eth0 = topo.devices.iter().find(|d| d.os_devices == ["eth0"]).unwrap();
/// assert_eq!(eth0.kind, DeviceKind::Network);
/// assert_eq!(eth0.class >> 8, 0x02); // PCI class: network controller
/// assert_eq!(eth0.nodes.to_string(), "0");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    /// PCI address, `domain:bus:device.function`.
    pub bus_id: String,
    /// What it is.
    pub kind: DeviceKind,
    /// PCI class code.
    pub class: u16,
    /// PCI vendor and device ids.
    pub vendor_device: (u16, u16),
    /// hwloc's name for the device, when known.
    pub name: Option<String>,
    /// The operating-system devices behind it (`eth0`, `nvme0n1`, `card0`, …).
    pub os_devices: Vec<String>,
    /// The NUMA nodes local to it.
    pub nodes: NodeSet,
}

/// A snapshot of a machine's NUMA topology.
///
/// ```
/// use numalab::Topology;
/// let topo = Topology::from_synthetic("pack:2 numa:2 core:4 pu:2")?;
/// assert_eq!(topo.nodes.len(), 4);
/// assert_eq!(topo.node(1).unwrap().cpus.to_string(), "8-15");
/// assert_eq!(topo.cpu(9).unwrap().node, Some(1));
/// # Ok::<(), numalab::TopologyError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    /// Where the snapshot came from.
    pub source: Source,
    /// The host name recorded by hwloc, when known.
    pub host: Option<String>,
    /// The CPU model recorded by hwloc, when known.
    pub cpu_model: Option<String>,
    /// Number of packages (sockets).
    pub packages: usize,
    /// Number of cores.
    pub cores: usize,
    /// NUMA nodes, by increasing id.
    pub nodes: Vec<Node>,
    /// Logical CPUs, by increasing id.
    pub cpus: Vec<Cpu>,
    /// The node distance matrix, if the firmware provided one.
    pub distances: Option<Distances>,
    /// Memory attributes (HMAT), if the firmware provided them.
    pub memory_attributes: Vec<MemoryAttributeValue>,
    /// Data and unified caches of the last level (one entry per instance).
    pub last_level_caches: Vec<Cache>,
    /// Size in bytes of one cache instance per level (L1d, L2, L3, …).
    pub cache_sizes: BTreeMap<u32, u64>,
    /// PCI devices worth placing work near (GPUs, NICs, storage,
    /// accelerators).
    pub devices: Vec<Device>,
    /// CPUs this process may run on (its cgroup cpuset and affinity).
    pub allowed_cpus: CpuSet,
    /// Nodes this process may use: those it may allocate from (its
    /// cgroup cpuset), and memory-less nodes whose CPUs it may run on.
    pub allowed_nodes: NodeSet,
}

fn index_set<T: FromIterator<u32>>(
    bitmap: Option<impl std::ops::Deref<Target = impl BitmapLike>>,
) -> T {
    bitmap
        .map(|b| b.indices())
        .unwrap_or_default()
        .into_iter()
        .collect()
}

/// Read access to hwloc's bitmaps as plain index lists.
trait BitmapLike {
    fn indices(&self) -> Vec<u32>;
}

impl BitmapLike for hwlocality::cpu::cpuset::CpuSet {
    fn indices(&self) -> Vec<u32> {
        self.iter_set().map(|i| usize::from(i) as u32).collect()
    }
}

impl BitmapLike for hwlocality::memory::nodeset::NodeSet {
    fn indices(&self) -> Vec<u32> {
        self.iter_set().map(|i| usize::from(i) as u32).collect()
    }
}

fn cstr(s: Option<&std::ffi::CStr>) -> Option<String> {
    s.map(|s| s.to_string_lossy().into_owned())
}

impl Topology {
    /// Discovers the running machine, including nodes and CPUs this process
    /// is not allowed to use (they are marked by [`allowed_cpus`] and
    /// [`allowed_nodes`]).
    ///
    /// [`allowed_cpus`]: Topology::allowed_cpus
    /// [`allowed_nodes`]: Topology::allowed_nodes
    pub fn system() -> Result<Self, TopologyError> {
        let builder = hwlocality::Topology::builder();
        Self::build(builder, Source::System)
    }

    /// This machine's topology, read once per process (as libnuma reads
    /// it once) and kept: what a binding resolves policy strings such as
    /// `interleave:all` against on every call. A failed read is not kept,
    /// so the next call tries again. (Free memory changes; read
    /// [`crate::system`] for it now.)
    pub fn system_once() -> Result<&'static Topology, TopologyError> {
        static SYSTEM: std::sync::OnceLock<Topology> = std::sync::OnceLock::new();
        if let Some(topology) = SYSTEM.get() {
            return Ok(topology);
        }
        let topology = Self::system()?;
        Ok(SYSTEM.get_or_init(|| topology))
    }

    /// Imports a topology exported with `lstopo --of xml` (or
    /// `numalab topo --export-xml`).
    pub fn from_xml_file(path: impl AsRef<Path>) -> Result<Self, TopologyError> {
        let path = path.as_ref();
        let source = Source::Xml(path.display().to_string());
        // Read and parse it here: hwloc's own file errors say only
        // "errno 22", and its built-in reader (used when the libxml2 plugin
        // is not installed) refuses comments and other layouts.
        let text = xml::read_bounded(path).map_err(|message| TopologyError::Hwloc {
            source_desc: source.to_string(),
            message,
        })?;
        Self::from_xml_text(&text, source)
    }

    /// Imports a topology from the text of an hwloc XML export already in
    /// memory (a pipe, a request, a database); `name` says where it came
    /// from in errors and in [`Topology::source`]. The text is read as
    /// [`from_xml_file`](Self::from_xml_file) reads a file's: any
    /// well-formed layout, comments included; at most 64 MiB.
    ///
    /// ```
    /// use numalab::Topology;
    /// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/topologies/cpuless.xml");
    /// let text = std::fs::read_to_string(path)?;
    /// let topo = Topology::from_xml_str(&text, "cpuless.xml")?;
    /// assert_eq!(topo.node_ids().to_string(), "0-2");
    ///
    /// let err = Topology::from_xml_str("<html/>", "page.html").unwrap_err().to_string();
    /// assert!(err.contains("XML file page.html") && err.contains("not an hwloc topology"), "{err}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_xml_str(text: &str, name: &str) -> Result<Self, TopologyError> {
        let source = Source::Xml(name.to_owned());
        if text.len() as u64 > xml::MAX_XML_BYTES {
            return Err(TopologyError::Hwloc {
                source_desc: source.to_string(),
                message: format!(
                    "it is {} bytes, more than {} MiB, the limit for hwloc XML exports",
                    text.len(),
                    xml::MAX_XML_BYTES >> 20
                ),
            });
        }
        Self::from_xml_text(text, source)
    }

    fn from_xml_text(text: &str, source: Source) -> Result<Self, TopologyError> {
        let invalid = |message: String| TopologyError::Hwloc {
            source_desc: source.to_string(),
            message,
        };
        let text = xml::canonical(text).map_err(invalid)?;
        let builder = hwlocality::Topology::builder()
            .from_xml(&text)
            .map_err(|e| hwloc_error(&source, e))?;
        Self::build(builder, source).map_err(|err| match err {
            TopologyError::Hwloc {
                source_desc,
                message,
            } => TopologyError::Hwloc {
                source_desc,
                message: format!(
                    "{message}; the document is well-formed XML with a <topology> element, \
                     so hwloc rejected what it describes (written by a newer hwloc, \
                     or edited into an inconsistent machine?)"
                ),
            },
            other => other,
        })
    }

    /// Builds a topology from an hwloc synthetic description such as
    /// `"pack:2 numa:2 core:4 pu:2"` (see hwloc's documentation of
    /// synthetic topologies; memory sizes as `numa:2(memory=4GB)`).
    ///
    /// A description of more than [`MAX_SYNTHETIC_OBJECTS`] objects is
    /// refused before hwloc builds it:
    ///
    /// ```
    /// use numalab::Topology;
    /// let err = Topology::from_synthetic("pack:1000 pu:1000").unwrap_err();
    /// assert!(err.to_string().contains("1001000 objects, more than 32768"), "{err}");
    /// ```
    pub fn from_synthetic(description: &str) -> Result<Self, TopologyError> {
        let source = Source::Synthetic(description.to_owned());
        let objects = synthetic_objects(description);
        if objects > MAX_SYNTHETIC_OBJECTS {
            return Err(hwloc_error(
                &source,
                format!(
                    "it describes {} objects, more than {MAX_SYNTHETIC_OBJECTS}, the most numalab builds from a synthetic description",
                    if objects == u64::MAX {
                        "more than 2^64".to_owned()
                    } else {
                        objects.to_string()
                    }
                ),
            ));
        }
        let builder = hwlocality::Topology::builder()
            .from_synthetic(description)
            .map_err(|e| hwloc_error(&source, e))?;
        Self::build(builder, source)
    }

    fn build(
        builder: hwlocality::topology::builder::TopologyBuilder,
        source: Source,
    ) -> Result<Self, TopologyError> {
        let builder = builder
            .with_flags(BuildFlags::INCLUDE_DISALLOWED)
            .map_err(|e| hwloc_error(&source, e))?
            .with_io_type_filter(TypeFilter::KeepImportant)
            .map_err(|e| hwloc_error(&source, e))?;
        let hw = builder.build().map_err(|e| hwloc_error(&source, e))?;
        let is_system = source == Source::System;
        Self::from_hwloc(&hw, source, is_system)
    }

    fn from_hwloc(
        hw: &hwlocality::Topology,
        source: Source,
        is_system: bool,
    ) -> Result<Self, TopologyError> {
        let root = hw.root_object();
        let host = cstr(root.info("HostName"));
        let cpu_model = hw
            .objects_with_type(ObjectType::Package)
            .find_map(|p| cstr(p.info("CPUModel")));

        // Nodes, their memory and subtype.
        let mut nodes: Vec<Node> = hw
            .objects_with_type(ObjectType::NUMANode)
            .filter_map(|obj| {
                let id = obj.os_index()? as u32;
                let memory_bytes = match obj.attributes() {
                    Some(ObjectAttributes::NUMANode(attr)) => {
                        attr.local_memory().map_or(0, |m| m.get())
                    }
                    _ => 0,
                };
                Some(Node {
                    id,
                    cpus: CpuSet::new(),
                    memory_bytes,
                    subtype: cstr(obj.subtype()),
                })
            })
            .collect();
        nodes.sort_by_key(|n| n.id);
        if nodes.is_empty() {
            return Err(TopologyError::NoMemory(source.to_string()));
        }

        // Each CPU's local node: on the live system the kernel says
        // (sysfs cpulist); for an imported topology, the most specific
        // node whose locality covers the CPU, ordinary DRAM before special
        // memory, lowest id first: the node Linux would have given it.
        let mut cpus = Vec::new();
        let node_objs: Vec<&TopologyObject> = hw.objects_with_type(ObjectType::NUMANode).collect();
        for pu in hw.objects_with_type(ObjectType::PU) {
            let Some(id) = pu.os_index() else { continue };
            let id = id as u32;
            let ancestor_index = |ty| {
                pu.first_ancestor_with_type(ty)
                    .map_or(0, |o| o.logical_index() as u32)
            };
            let node = if is_system {
                None
            } else {
                node_objs
                    .iter()
                    .filter(|n| n.cpuset().is_some_and(|set| set.is_set(id as usize)))
                    .min_by_key(|n| {
                        (
                            n.cpuset().and_then(|s| s.weight()).unwrap_or(usize::MAX),
                            n.subtype().is_some(),
                            n.os_index().unwrap_or(usize::MAX),
                        )
                    })
                    .and_then(|n| n.os_index())
                    .map(|n| n as u32)
            };
            cpus.push(Cpu {
                id,
                core: ancestor_index(ObjectType::Core),
                package: ancestor_index(ObjectType::Package),
                node,
            });
        }
        cpus.sort_by_key(|c| c.id);
        if is_system {
            for node in &mut nodes {
                node.cpus = procfs::node_cpus(node.id).unwrap_or_default();
            }
            for cpu in &mut cpus {
                cpu.node = nodes.iter().find(|n| n.cpus.contains(cpu.id)).map(|n| n.id);
            }
        } else {
            for cpu in &cpus {
                if let Some(node) = nodes.iter_mut().find(|n| Some(n.id) == cpu.node) {
                    node.cpus.insert(cpu.id);
                }
            }
        }

        let node_of = |cpus_of_initiator: &CpuSet| -> NodeSet {
            nodes
                .iter()
                .filter(|n| !n.cpus.is_empty() && n.cpus.is_subset(cpus_of_initiator))
                .map(|n| n.id)
                .collect()
        };

        let distances = node_distances(hw);
        let memory_attributes = memory_attributes(hw, &node_objs, &node_of);
        let (last_level_caches, cache_sizes) = caches(hw, &cpus);
        let devices = devices(hw);

        let mut allowed_cpus: CpuSet = hw.allowed_cpuset().indices().into_iter().collect();
        let mut allowed_nodes: NodeSet = hw.allowed_nodeset().indices().into_iter().collect();
        if is_system {
            // The process's own view is authoritative: cgroup cpuset and
            // affinity mask.
            if let Ok((Some(c), Some(m))) = procfs::allowed_for_self() {
                allowed_cpus = c;
                allowed_nodes = m;
            }
        }
        let memoryless = nodes
            .iter()
            .filter(|n| n.memory_bytes == 0)
            .map(|n| (n.id, &n.cpus));
        crate::inventory::allow_memoryless(&mut allowed_nodes, memoryless, &allowed_cpus);

        Ok(Topology {
            source,
            host,
            cpu_model,
            packages: hw.objects_with_type(ObjectType::Package).count(),
            cores: hw.objects_with_type(ObjectType::Core).count(),
            nodes,
            cpus,
            distances,
            memory_attributes,
            last_level_caches,
            cache_sizes,
            devices,
            allowed_cpus,
            allowed_nodes,
        })
    }

    /// Whether this snapshot describes the running machine.
    pub fn is_this_system(&self) -> bool {
        self.source == Source::System
    }

    /// The node with id `id`.
    pub fn node(&self, id: u32) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The CPU with id `id`.
    pub fn cpu(&self, id: u32) -> Option<&Cpu> {
        self.cpus.iter().find(|c| c.id == id)
    }

    /// Every node id.
    pub fn node_ids(&self) -> NodeSet {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// Nodes with at least one CPU.
    pub fn nodes_with_cpus(&self) -> NodeSet {
        self.nodes
            .iter()
            .filter(|n| !n.cpus.is_empty())
            .map(|n| n.id)
            .collect()
    }

    /// Nodes with memory.
    pub fn nodes_with_memory(&self) -> NodeSet {
        self.nodes
            .iter()
            .filter(|n| n.memory_bytes > 0)
            .map(|n| n.id)
            .collect()
    }

    /// Every CPU id.
    pub fn cpu_ids(&self) -> CpuSet {
        self.cpus.iter().map(|c| c.id).collect()
    }

    /// The CPUs of a set of nodes.
    pub fn cpus_of(&self, nodes: &NodeSet) -> CpuSet {
        self.nodes
            .iter()
            .filter(|n| nodes.contains(n.id))
            .fold(CpuSet::new(), |acc, n| acc.union(&n.cpus))
    }

    /// The nodes a set of CPUs belong to.
    pub fn nodes_of(&self, cpus: &CpuSet) -> NodeSet {
        self.cpus
            .iter()
            .filter(|c| cpus.contains(c.id))
            .filter_map(|c| c.node)
            .collect()
    }

    /// The firmware distance from node `from` to node `to`.
    pub fn distance(&self, from: u32, to: u32) -> Option<u64> {
        self.distances.as_ref()?.get(from, to)
    }

    /// Memory nodes other than `node`, nearest first (by distance, then id).
    pub fn nodes_by_distance(&self, node: u32) -> Vec<u32> {
        let mut others: Vec<u32> = self
            .nodes
            .iter()
            .filter(|n| n.id != node && n.memory_bytes > 0)
            .map(|n| n.id)
            .collect();
        others.sort_by_key(|&n| (self.distance(node, n).unwrap_or(u64::MAX), n));
        others
    }

    /// The node whose memory `local` and default allocations of `node`'s
    /// CPUs come from: `node` itself when it has memory; for a memory-less
    /// node, the nearest node with memory by the firmware's distances
    /// (what Linux calls the node's `numa_mem_id`), the lowest id among
    /// equals. `None` when no node has memory.
    ///
    /// ```
    /// use numalab::Topology;
    /// // Memory on nodes 0 and 1; node 2 has CPUs only, 30 from node 0
    /// // and 25 from node 1.
    /// let topo = Topology::from_xml_file(concat!(
    ///     env!("CARGO_MANIFEST_DIR"),
    ///     "/../../tests/topologies/cpuless.xml"
    /// ))?;
    /// assert_eq!(topo.local_memory_node(0), Some(0));
    /// assert_eq!(topo.local_memory_node(2), Some(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn local_memory_node(&self, node: u32) -> Option<u32> {
        nearest_with_memory(node, &self.nodes_with_memory(), |to| {
            self.distance(node, to)
        })
    }

    /// [`local_memory_node`](Self::local_memory_node) of each of `nodes`
    /// (a node itself when no node has memory).
    pub fn local_memory_nodes(&self, nodes: &NodeSet) -> NodeSet {
        nodes
            .iter()
            .map(|n| self.local_memory_node(n).unwrap_or(n))
            .collect()
    }

    /// Free memory of `node` in bytes, read now from sysfs. `None` for a
    /// topology that is not this machine's, or a node sysfs does not show.
    pub fn free_memory(&self, node: u32) -> Option<u64> {
        if !self.is_this_system() {
            return None;
        }
        procfs::node_meminfo(node).ok().map(|m| m.free)
    }

    /// What a user may name on this machine.
    pub fn inventory(&self) -> NodeInventory {
        NodeInventory {
            nodes: self.node_ids(),
            with_memory: self.nodes_with_memory(),
            with_cpus: self.nodes_with_cpus(),
            allowed_nodes: self.allowed_nodes.clone(),
            cpus: self.cpu_ids(),
            allowed_cpus: self.allowed_cpus.clone(),
        }
    }

    /// Parses a node list in numactl's syntax and checks every node exists
    /// and is allowed: `0-3,7`, `all` (every allowed node), `!1` (every
    /// allowed node but 1).
    ///
    /// ```
    /// use numalab::Topology;
    /// let topo = Topology::from_synthetic("numa:4 core:2 pu:1")?;
    /// assert_eq!(topo.parse_nodes("all")?.to_string(), "0-3");
    /// assert_eq!(topo.parse_nodes("!1")?.to_string(), "0,2-3");
    /// let err = topo.parse_nodes("7").unwrap_err();
    /// assert_eq!(err.to_string(), "node 7 does not exist; this machine has nodes 0-3");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn parse_nodes(&self, spec: &str) -> Result<NodeSet, SpecError> {
        self.inventory().parse_nodes(spec)
    }

    /// Resolves a node list for `role` on this topology: `all` and `!1`
    /// are the allowed nodes that can play it, an explicit list must name
    /// only such nodes ([`NodeInventory::resolve_nodes`]).
    ///
    /// ```
    /// use numalab::{Role, Topology};
    /// let topo = Topology::from_synthetic("numa:2 core:2 pu:1")?;
    /// assert_eq!(topo.resolve_nodes("!1", Role::Cpus)?.to_string(), "0");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resolve_nodes(&self, spec: &str, role: Role) -> Result<NodeSet, SpecError> {
        self.inventory().resolve_nodes(spec, role)
    }

    /// Parses a CPU list in numactl's syntax (`0-3,8`, `all`, `!0`) and
    /// checks every CPU exists and is allowed.
    pub fn parse_cpus(&self, spec: &str) -> Result<CpuSet, SpecError> {
        self.inventory().parse_cpus(spec)
    }

    /// Checks that every node exists and is allowed.
    pub fn check_nodes(&self, nodes: &NodeSet) -> Result<(), SpecError> {
        self.inventory().check_nodes(nodes)
    }

    /// Checks that every node exists, is allowed and has memory.
    pub fn check_memory_nodes(&self, nodes: &NodeSet) -> Result<(), SpecError> {
        self.inventory().check_memory_nodes(nodes)
    }

    /// Checks that every node exists, is allowed and has CPUs.
    pub fn check_cpu_nodes(&self, nodes: &NodeSet) -> Result<(), SpecError> {
        self.inventory().check_cpu_nodes(nodes)
    }

    /// Checks that every CPU exists and is allowed.
    pub fn check_cpus(&self, cpus: &CpuSet) -> Result<(), SpecError> {
        self.inventory().check_cpus(cpus)
    }

    /// Parses a policy as [`MemPolicy`]'s `FromStr` does, also accepting
    /// numactl's `all` and `!list` for its nodes (`interleave:all`), and
    /// checks its nodes on this topology.
    pub fn parse_policy(&self, spec: &str) -> Result<MemPolicy, PolicyError> {
        let inventory = self.inventory();
        let policy = match spec.trim().split_once(':') {
            Some((name, nodes)) if nodes.trim() == "all" || nodes.trim().starts_with('!') => {
                let nodes = inventory.resolve_nodes(nodes, Role::Memory)?;
                format!("{name}:{nodes}").parse()?
            }
            _ => spec.parse::<MemPolicy>()?,
        };
        policy.check_nodes(&inventory)?;
        Ok(policy)
    }

    /// One line describing the machine: `2 packages, 4 nodes (2 memory-only),
    /// 16 CPUs, 64.0 GiB`.
    pub fn summary(&self) -> TopologySummary {
        TopologySummary {
            packages: self.packages,
            nodes: self.nodes.len(),
            memory_only_nodes: self.nodes.iter().filter(|n| n.cpus.is_empty()).count(),
            cpus: self.cpus.len(),
            // Saturating: a topology read back from a file may say anything.
            memory_bytes: self
                .nodes
                .iter()
                .fold(0u64, |sum, n| sum.saturating_add(n.memory_bytes)),
            distances: self.distances.clone(),
        }
    }
}

/// The part of a topology that result files carry so results from
/// different machines can be told apart and compared.
///
/// ```
/// use numalab::Topology;
/// // Memory on nodes 0 and 1 (a CXL node without CPUs); CPUs on 0 and 2.
/// let topo = Topology::from_xml_file(concat!(
///     env!("CARGO_MANIFEST_DIR"),
///     "/../../tests/topologies/cpuless.xml"
/// ))?;
/// let summary = topo.summary();
/// assert_eq!((summary.nodes, summary.memory_only_nodes, summary.cpus), (3, 1, 4));
/// assert_eq!(summary.memory_bytes, topo.nodes.iter().map(|n| n.memory_bytes).sum::<u64>());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopologySummary {
    /// Packages (sockets).
    pub packages: usize,
    /// NUMA nodes.
    pub nodes: usize,
    /// Nodes without CPUs.
    pub memory_only_nodes: usize,
    /// Logical CPUs.
    pub cpus: usize,
    /// Total memory in bytes.
    pub memory_bytes: u64,
    /// The distance matrix, if any.
    pub distances: Option<Distances>,
}

/// The most objects (packages, nodes, caches, cores, PUs, ...) numalab
/// builds from an hwloc synthetic description: 32 768.
///
/// The largest machines numalab measures have a few thousand PUs, which
/// with their cores, caches and nodes stay well under this; hwloc's time
/// and memory grow faster than the object count (`pack:1000 pu:1000`, a
/// million objects, took minutes), so a description past the limit is
/// refused before hwloc sees it.
pub const MAX_SYNTHETIC_OBJECTS: u64 = 32_768;

/// Objects an hwloc synthetic description makes below the machine: at each
/// level, the level's arity times the objects above (saturating). Levels
/// are written `type:arity` or `arity`, with optional `(attributes)`;
/// `[memory children]` count one per parent. What is not a level is left
/// to hwloc to refuse.
fn synthetic_objects(description: &str) -> u64 {
    let mut parents = 1u64;
    let mut total = 0u64;
    let mut depth = 0usize;
    let mut token = String::new();
    let level = |token: &mut String, parents: &mut u64, total: &mut u64| {
        let arity = token.rsplit(':').next().unwrap_or("");
        if let Ok(arity) = arity.trim().parse::<u64>() {
            *parents = parents.saturating_mul(arity);
            *total = total.saturating_add(*parents);
        }
        token.clear();
    };
    for c in description.chars() {
        match c {
            '(' | '[' | '{' => {
                if c == '[' && depth == 0 {
                    // Memory children of each object of the level above.
                    total = total.saturating_add(parents);
                }
                depth += 1;
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ if depth > 0 => {}
            c if c.is_whitespace() => level(&mut token, &mut parents, &mut total),
            c => token.push(c),
        }
    }
    level(&mut token, &mut parents, &mut total);
    total
}

fn hwloc_error(source: &Source, err: impl std::fmt::Display) -> TopologyError {
    TopologyError::Hwloc {
        source_desc: source.to_string(),
        message: err.to_string(),
    }
}

/// The NUMA-node latency matrix: the OS-provided one if there is one, else
/// the first NUMA-node matrix.
fn node_distances(hw: &hwlocality::Topology) -> Option<Distances> {
    let all = hw.distances(None).ok()?;
    let node_matrices: Vec<_> = all
        .iter()
        .filter(|d| {
            d.objects()
                .all(|o| o.is_some_and(|o| o.object_type() == ObjectType::NUMANode))
        })
        .collect();
    let best = node_matrices
        .iter()
        .find(|d| {
            d.kind()
                .contains(DistancesKind::FROM_OS | DistancesKind::MEANS_LATENCY)
        })
        .or_else(|| node_matrices.first())?;
    let nodes: Vec<u32> = best
        .objects()
        .map(|o| o.and_then(|o| o.os_index()).unwrap_or(0) as u32)
        .collect();
    let n = nodes.len();
    let flat = best.distances();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| nodes[i]);
    Some(Distances {
        nodes: order.iter().map(|&i| nodes[i]).collect(),
        values: order
            .iter()
            .map(|&i| order.iter().map(|&j| flat[i * n + j]).collect())
            .collect(),
    })
}

fn memory_attributes(
    hw: &hwlocality::Topology,
    node_objs: &[&TopologyObject],
    node_of: &dyn Fn(&CpuSet) -> NodeSet,
) -> Vec<MemoryAttributeValue> {
    let attributes = [
        ("Bandwidth", "MiB/s", MemoryAttribute::bandwidth(hw)),
        (
            "ReadBandwidth",
            "MiB/s",
            MemoryAttribute::read_bandwidth(hw),
        ),
        (
            "WriteBandwidth",
            "MiB/s",
            MemoryAttribute::write_bandwidth(hw),
        ),
        ("Latency", "ns", MemoryAttribute::latency(hw)),
        ("ReadLatency", "ns", MemoryAttribute::read_latency(hw)),
        ("WriteLatency", "ns", MemoryAttribute::write_latency(hw)),
    ];
    let mut values = Vec::new();
    for (name, unit, attribute) in attributes {
        for target in node_objs {
            let Some(target_id) = target.os_index() else {
                continue;
            };
            let Ok((initiators, vals)) = attribute.initiators(target) else {
                continue;
            };
            for (initiator, value) in initiators.iter().zip(vals) {
                let initiator_cpus: CpuSet = match initiator {
                    Initiator::CpuSet(set) => set.indices().into_iter().collect(),
                    Initiator::Object(obj) => index_set(obj.cpuset()),
                };
                values.push(MemoryAttributeValue {
                    attribute: name.to_owned(),
                    unit: unit.to_owned(),
                    target: target_id as u32,
                    initiator_nodes: node_of(&initiator_cpus),
                    initiator_cpus,
                    value,
                });
            }
        }
    }
    values
}

fn caches(hw: &hwlocality::Topology, cpus: &[Cpu]) -> (Vec<Cache>, BTreeMap<u32, u64>) {
    let mut all = Vec::new();
    for obj in hw.objects() {
        let Some(ObjectAttributes::Cache(attr)) = obj.attributes() else {
            continue;
        };
        // CPU data and unified caches only: not instruction caches, nor
        // memory-side caches (KNL's MCDRAM in cache mode, which old hwloc
        // exports as an L3 with subtype MemorySideCache).
        let memory_side = obj.object_type() == ObjectType::MemCache
            || obj
                .subtype()
                .is_some_and(|s| s.to_bytes() == b"MemorySideCache");
        if attr.cache_type() == CacheType::Instruction || memory_side {
            continue;
        }
        let cache_cpus: CpuSet = index_set(obj.cpuset());
        all.push(Cache {
            level: attr.depth() as u32,
            size_bytes: attr.size().map_or(0, |s| s.get()),
            line_bytes: attr.line_size().map(|l| l.get() as u64),
            nodes: cpus
                .iter()
                .filter(|c| cache_cpus.contains(c.id))
                .filter_map(|c| c.node)
                .collect(),
            cpus: cache_cpus,
        });
    }
    let mut sizes = BTreeMap::new();
    for cache in &all {
        sizes.entry(cache.level).or_insert(cache.size_bytes);
    }
    let last = all.iter().map(|c| c.level).max();
    let llc = all.into_iter().filter(|c| Some(c.level) == last).collect();
    (llc, sizes)
}

fn devices(hw: &hwlocality::Topology) -> Vec<Device> {
    let mut devices = Vec::new();
    for obj in hw.pci_devices() {
        let Some(ObjectAttributes::PCIDevice(pci)) = obj.attributes() else {
            continue;
        };
        let kind = DeviceKind::from_class(pci.class_id());
        let os_devices: Vec<String> = obj
            .io_children()
            .filter(|c| c.object_type() == ObjectType::OSDevice)
            .filter_map(|c| cstr(c.name()))
            .collect();
        if kind == DeviceKind::Other && os_devices.is_empty() {
            continue;
        }
        let nodes: NodeSet = obj
            .first_non_io_ancestor()
            .map(|a| index_set(a.nodeset()))
            .unwrap_or_default();
        devices.push(Device {
            bus_id: format!(
                "{:04x}:{:02x}:{:02x}.{:x}",
                pci.domain(),
                pci.bus_id(),
                pci.bus_device(),
                pci.function()
            ),
            kind,
            class: pci.class_id(),
            vendor_device: (pci.vendor_id(), pci.device_id()),
            name: cstr(obj.name()).or_else(|| cstr(obj.info("PCIDevice"))),
            os_devices,
            nodes,
        });
    }
    devices.sort_by(|a, b| (a.kind, &a.bus_id).cmp(&(b.kind, &b.bus_id)));
    devices
}

/// `node` when it is in `with_memory`, else the member of `with_memory`
/// nearest to it by `distance` (the lowest id among equals; nodes with no
/// distance last).
pub(crate) fn nearest_with_memory(
    node: u32,
    with_memory: &NodeSet,
    distance: impl Fn(u32) -> Option<u64>,
) -> Option<u32> {
    if with_memory.contains(node) {
        return Some(node);
    }
    with_memory
        .iter()
        .min_by_key(|&n| (distance(n).unwrap_or(u64::MAX), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_descriptions_are_counted_before_hwloc_builds_them() {
        for (description, objects) in [
            ("pack:2 numa:2 core:4 pu:2", 2 + 4 + 16 + 32),
            ("pack:2 numa:2(memory=4GB) core:4 pu:2", 2 + 4 + 16 + 32),
            ("2 2 4 2", 2 + 4 + 16 + 32),
            ("pack:2 [numa(memory=1GB)] core:2 pu:1", 2 + 2 + 4 + 4),
            ("pack:1000 pu:1000", 1000 + 1_000_000),
            ("pack:4294967295 core:4294967295 pu:4294967295", u64::MAX),
        ] {
            assert_eq!(synthetic_objects(description), objects, "{description}");
        }
    }

    #[test]
    fn a_synthetic_topology_past_the_limit_is_refused_at_once() {
        // Ran for minutes in hwloc.
        let err = Topology::from_synthetic("pack:1000 pu:1000").unwrap_err();
        assert_eq!(
            err.to_string(),
            "could not load the topology from synthetic topology \"pack:1000 pu:1000\": it describes 1001000 objects, more than 32768, the most numalab builds from a synthetic description"
        );
        // At the limit's scale, built.
        let topo = Topology::from_synthetic("pack:4 numa:2 core:64 pu:2").unwrap();
        assert_eq!(topo.cpus.len(), 1024);
    }
}
