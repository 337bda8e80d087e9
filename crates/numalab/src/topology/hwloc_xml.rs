//! A machine's topology as hwloc XML, carrying measured latency and
//! bandwidth as hwloc memory attributes, so that `lstopo --memattrs` and
//! hwloc-based runtimes (Open MPI, Slurm, StarPU), given the file with
//! `HWLOC_XMLFILE`, read measured figures where firmware gives none (HMAT
//! is missing on most machines).
//!
//! hwloc's `hwloc_memattr_set_value()` sets the predefined attributes
//! (`Latency`, `Bandwidth`, ...), but `hwlocality` 1.0.0-alpha.13 sets
//! values only on an attribute it has just registered
//! (`TopologyEditor::register_memory_attribute`), registering `Latency`
//! fails because hwloc already has it, and the raw topology handle that
//! `hwlocality-sys` would need is private to `hwlocality`. So hwloc exports
//! the topology itself (`hwloc_topology_export_xmlbuffer`), this module
//! writes the `<memattr>` elements into that export in the form hwloc's
//! writer gives them (`hwloc__xml_export_memattrs` in hwloc's
//! `topology-xml.c`), and then hwloc reads the document back: every value
//! must read back as written, or nothing is returned.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::ops::Range;

use hwlocality::memory::attribute::Initiator;
use hwlocality::object::types::ObjectType;
use hwlocality::topology::builder::{BuildFlags, TypeFilter};
use hwlocality::topology::export::xml::XMLExportFlags;

use super::{hwloc_error, Source, Topology, TopologyError};

/// One of hwloc's predefined memory attributes, in the order of hwloc's
/// identifiers (`HWLOC_MEMATTR_ID_BANDWIDTH` = 2 to
/// `HWLOC_MEMATTR_ID_WRITE_LATENCY` = 7), which is the order hwloc writes
/// them in.
///
/// ```
/// use numalab::topology::hwloc_xml::Attribute;
/// assert_eq!((Attribute::Latency.name(), Attribute::Latency.unit()), ("Latency", "ns"));
/// assert_eq!(Attribute::ReadBandwidth.unit(), "MiB/s");
/// assert_eq!(Attribute::ALL.len(), 6);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Attribute {
    /// MiB/s; hwloc's definition: the average of read and write bandwidth.
    Bandwidth,
    /// ns; hwloc's definition: the average of read and write latency.
    Latency,
    /// MiB/s.
    ReadBandwidth,
    /// MiB/s.
    WriteBandwidth,
    /// ns.
    ReadLatency,
    /// ns.
    WriteLatency,
}

impl Attribute {
    /// Every attribute, in hwloc's order.
    pub const ALL: [Attribute; 6] = [
        Attribute::Bandwidth,
        Attribute::Latency,
        Attribute::ReadBandwidth,
        Attribute::WriteBandwidth,
        Attribute::ReadLatency,
        Attribute::WriteLatency,
    ];

    /// hwloc's name of the attribute.
    pub fn name(self) -> &'static str {
        match self {
            Attribute::Bandwidth => "Bandwidth",
            Attribute::Latency => "Latency",
            Attribute::ReadBandwidth => "ReadBandwidth",
            Attribute::WriteBandwidth => "WriteBandwidth",
            Attribute::ReadLatency => "ReadLatency",
            Attribute::WriteLatency => "WriteLatency",
        }
    }

    /// The unit hwloc gives its values in: `MiB/s` or `ns`.
    pub fn unit(self) -> &'static str {
        if self.is_bandwidth() {
            "MiB/s"
        } else {
            "ns"
        }
    }

    fn is_bandwidth(self) -> bool {
        matches!(
            self,
            Attribute::Bandwidth | Attribute::ReadBandwidth | Attribute::WriteBandwidth
        )
    }

    /// hwloc's flags of the attribute, as its XML carries them:
    /// `HWLOC_MEMATTR_FLAG_NEED_INITIATOR` (4) with `HIGHER_FIRST` (1) for
    /// bandwidths, `LOWER_FIRST` (2) for latencies.
    fn flags(self) -> &'static str {
        if self.is_bandwidth() {
            "5"
        } else {
            "6"
        }
    }
}

impl std::fmt::Display for Attribute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A figure to write: the value of `attribute` for memory of node `target`
/// accessed from the CPUs of node `initiator`, in the attribute's
/// [unit](Attribute::unit).
///
/// ```
/// use numalab::topology::hwloc_xml::{Attribute, MeasuredValue};
/// let v = MeasuredValue { attribute: Attribute::Latency, initiator: 0, target: 1, value: 140 };
/// assert_eq!(v.to_string(), "Latency from node 0 to node 1: 140 ns");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MeasuredValue {
    /// Which attribute.
    pub attribute: Attribute,
    /// The node whose CPUs made the accesses; hwloc's initiator is that
    /// node's cpuset.
    pub initiator: u32,
    /// The node whose memory was accessed.
    pub target: u32,
    /// The figure, in the attribute's unit.
    pub value: u64,
}

impl std::fmt::Display for MeasuredValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} from node {} to node {}: {} {}",
            self.attribute,
            self.initiator,
            self.target,
            self.value,
            self.attribute.unit()
        )
    }
}

/// Why the XML could not be written.
///
/// ```
/// use numalab::topology::hwloc_xml::{export, Attribute, HwlocXmlError, MeasuredValue};
/// let topo = numalab::Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// let to_node_5 = MeasuredValue { attribute: Attribute::Latency, initiator: 0, target: 5, value: 90 };
/// match export(&topo, &[to_node_5]).unwrap_err() {
///     HwlocXmlError::UnknownNode { node, .. } => assert_eq!(node, 5),
///     other => panic!("unexpected {other}"),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HwlocXmlError {
    /// hwloc could not load, export or read back the topology.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// A value names a node the topology does not have.
    #[error("node {node} is not a NUMA node of {source_desc}")]
    UnknownNode {
        /// The node named.
        node: u32,
        /// Where the topology came from.
        source_desc: String,
    },
    /// A value's initiator is a node without CPUs.
    #[error(
        "node {node} has no CPUs, so it cannot be an initiator (the CPUs that accessed the memory)"
    )]
    NoCpus {
        /// The node named.
        node: u32,
    },
    /// Two values for one attribute and one (initiator, target) pair.
    #[error("two values of {attribute} from node {initiator} to node {target}")]
    Duplicate {
        /// The attribute.
        attribute: Attribute,
        /// The initiator node.
        initiator: u32,
        /// The target node.
        target: u32,
    },
    /// hwloc read a value back other than the one written (a bug: please
    /// report it with the topology).
    #[error("hwloc reads {} back for {value}", read.map_or("nothing".to_owned(), |r| r.to_string()))]
    ReadBack {
        /// What was written.
        value: MeasuredValue,
        /// What hwloc read.
        read: Option<u64>,
    },
}

/// The topology `topology` was taken from (this machine, an XML file, a
/// synthetic description), exported by hwloc as XML, with `values` as
/// memory-attribute values: initiator = the cpuset of the initiator node,
/// target = the target NUMA node.
///
/// The topology is exported as `lstopo --of xml` exports it (every object
/// type, important I/O devices), with the CPUs and nodes this process may
/// not use included and marked as such (hwloc's `allowed_cpuset`).
///
/// Values already in the topology (the firmware's HMAT) are kept, except
/// those of an attribute written here, for a target written here, from an
/// initiator whose CPUs overlap the written initiator's: hwloc would
/// otherwise merge the two (it looks a value up by the first initiator
/// whose cpuset contains the CPUs asked about). Attributes not written are
/// kept as they are.
///
/// ```
/// use numalab::topology::hwloc_xml::{export, Attribute, MeasuredValue};
/// use numalab::Topology;
/// let topo = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// let latency = |initiator, target, value| MeasuredValue { attribute: Attribute::Latency, initiator, target, value };
/// let xml = export(&topo, &[latency(0, 0, 90), latency(0, 1, 140)])?;
///
/// // hwloc reads it back: 140 ns from node 0's CPUs to node 1's memory.
/// let again = Topology::from_xml_str(&xml, "measured.xml")?;
/// let remote = again.memory_attributes.iter()
///     .find(|v| v.attribute == "Latency" && v.target == 1).unwrap();
/// assert_eq!((remote.initiator_nodes.to_string(), remote.value), ("0".into(), 140));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn export(topology: &Topology, values: &[MeasuredValue]) -> Result<String, HwlocXmlError> {
    let source = &topology.source;
    let exported = machine_xml(source)?;
    let nodes = numa_nodes(&exported).map_err(|e| hwloc_error(source, e))?;
    check(topology, &nodes, values)?;
    let xml = with_values(&exported, &nodes, values).map_err(|e| hwloc_error(source, e))?;
    read_back(&xml, source, values)?;
    Ok(xml)
}

/// hwloc's XML export of the topology at `source`.
fn machine_xml(source: &Source) -> Result<String, TopologyError> {
    let builder = hwlocality::Topology::builder();
    let builder = match source {
        Source::System => builder,
        Source::Synthetic(description) => builder
            .from_synthetic(description)
            .map_err(|e| hwloc_error(source, e))?,
        Source::Xml(path) => {
            let invalid = |message| hwloc_error(source, message);
            let text = super::xml::read_bounded(path.as_ref()).map_err(invalid)?;
            let text = super::xml::canonical(&text).map_err(invalid)?;
            builder
                .from_xml(&text)
                .map_err(|e| hwloc_error(source, e))?
        }
    };
    // What `lstopo` keeps (lstopo.c: every type, then important I/O
    // devices), and the disallowed CPUs and nodes, marked as such.
    let hw = builder
        .with_flags(BuildFlags::INCLUDE_DISALLOWED)
        .map_err(|e| hwloc_error(source, e))?
        .with_common_type_filter(TypeFilter::KeepAll)
        .map_err(|e| hwloc_error(source, e))?
        .with_io_type_filter(TypeFilter::KeepImportant)
        .map_err(|e| hwloc_error(source, e))?
        .build()
        .map_err(|e| hwloc_error(source, e))?;
    let xml = hw
        .export_xml(XMLExportFlags::empty())
        .map_err(|e| hwloc_error(source, e))?;
    Ok(xml.as_str().to_owned())
}

/// A NUMA node as hwloc's export names it.
#[derive(Debug)]
struct NodeObject {
    /// `gp_index`: how memory-attribute values name their target.
    gp_index: String,
    /// `cpuset`, in hwloc's bitmap format.
    cpuset: String,
}

fn parse(text: &str) -> Result<roxmltree::Document<'_>, String> {
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    roxmltree::Document::parse_with_options(text, options)
        .map_err(|e| format!("hwloc's XML export does not parse: {e}"))
}

/// The NUMA nodes of hwloc's export, by OS index.
fn numa_nodes(text: &str) -> Result<HashMap<u32, NodeObject>, String> {
    let doc = parse(text)?;
    let mut nodes = HashMap::new();
    for object in doc
        .descendants()
        .filter(|n| n.has_tag_name("object") && n.attribute("type") == Some("NUMANode"))
    {
        let attribute = |name| {
            object
                .attribute(name)
                .ok_or_else(|| format!("hwloc's export has a NUMANode without {name}"))
        };
        let os_index = attribute("os_index")?.parse().map_err(|e| {
            format!("hwloc's export has a NUMANode os_index that is not a number: {e}")
        })?;
        nodes.insert(
            os_index,
            NodeObject {
                gp_index: attribute("gp_index")?.to_owned(),
                cpuset: attribute("cpuset")?.to_owned(),
            },
        );
    }
    Ok(nodes)
}

fn check(
    topology: &Topology,
    nodes: &HashMap<u32, NodeObject>,
    values: &[MeasuredValue],
) -> Result<(), HwlocXmlError> {
    let mut seen = HashSet::new();
    for v in values {
        for node in [v.initiator, v.target] {
            if !nodes.contains_key(&node) {
                return Err(HwlocXmlError::UnknownNode {
                    node,
                    source_desc: topology.source.to_string(),
                });
            }
        }
        if topology.node(v.initiator).is_none_or(|n| n.cpus.is_empty()) {
            return Err(HwlocXmlError::NoCpus { node: v.initiator });
        }
        if !seen.insert((v.attribute, v.initiator, v.target)) {
            return Err(HwlocXmlError::Duplicate {
                attribute: v.attribute,
                initiator: v.initiator,
                target: v.target,
            });
        }
    }
    Ok(())
}

/// hwloc's export `text` with its `<memattr>` section rewritten: the
/// attributes in `values` carry them (and the firmware's values that do
/// not collide with them), every other attribute is kept byte for byte.
/// The section is where hwloc writes it (after the distances and the
/// support flags, before the CPU kinds), attributes in hwloc's order,
/// children of `<topology>` indented by two spaces as hwloc indents.
fn with_values(
    text: &str,
    nodes: &HashMap<u32, NodeObject>,
    values: &[MeasuredValue],
) -> Result<String, String> {
    let doc = parse(text)?;
    let root = doc.root_element();
    let memattrs: Vec<roxmltree::Node<'_, '_>> = root
        .children()
        .filter(|n| n.has_tag_name("memattr"))
        .collect();
    let named = |name: &'static str| {
        memattrs
            .iter()
            .filter(move |m| m.attribute("name") == Some(name))
    };
    let mut ours: BTreeMap<Attribute, Vec<&MeasuredValue>> = BTreeMap::new();
    for v in values {
        ours.entry(v.attribute).or_default().push(v);
    }

    let mut section = String::new();
    for attribute in Attribute::ALL {
        let Some(written) = ours.get(&attribute) else {
            for m in named(attribute.name()) {
                section.push_str(&text[lines(text, m.range())]);
            }
            continue;
        };
        let _ = writeln!(
            section,
            "  <memattr name=\"{}\" flags=\"{}\">",
            attribute.name(),
            attribute.flags()
        );
        // hwloc ignores the values of an attribute whose flags are not
        // the predefined one's: so are they here.
        for m in named(attribute.name()).filter(|m| m.attribute("flags") == Some(attribute.flags()))
        {
            for value in m.children().filter(|n| n.has_tag_name("memattr_value")) {
                if !collides(value, written, nodes) {
                    let _ = writeln!(section, "    {}", &text[value.range()]);
                }
            }
        }
        for v in written {
            let (target, initiator) = (&nodes[&v.target], &nodes[&v.initiator]);
            let _ = writeln!(
                section,
                "    <memattr_value target_obj_type=\"NUMANode\" target_obj_gp_index=\"{}\" value=\"{}\" initiator_cpuset=\"{}\"/>",
                target.gp_index, v.value, initiator.cpuset
            );
        }
        section.push_str("  </memattr>\n");
    }
    let predefined = |m: &roxmltree::Node<'_, '_>| {
        Attribute::ALL
            .iter()
            .any(|a| m.attribute("name") == Some(a.name()))
    };
    for m in memattrs.iter().filter(|m| !predefined(m)) {
        section.push_str(&text[lines(text, m.range())]);
    }

    // Where the section goes: where hwloc put its own, else before the CPU
    // kinds, else before `</topology>`.
    let removed: Vec<Range<usize>> = memattrs.iter().map(|m| lines(text, m.range())).collect();
    let at = match removed.first() {
        Some(first) => first.start,
        None => {
            let before = root
                .children()
                .find(|n| n.has_tag_name("cpukind"))
                .map(|n| n.range().start)
                .or_else(|| text[..root.range().end].rfind("</topology>"))
                .ok_or("hwloc's export has no </topology>")?;
            lines(text, before..before).start
        }
    };
    let mut out = String::with_capacity(text.len() + section.len());
    let mut pos = 0;
    for range in &removed {
        if pos <= at && at <= range.start {
            out.push_str(&text[pos..at]);
            out.push_str(&section);
            pos = at;
        }
        out.push_str(&text[pos..range.start]);
        pos = range.end;
    }
    if removed.is_empty() {
        out.push_str(&text[..at]);
        out.push_str(&section);
        pos = at;
    }
    out.push_str(&text[pos..]);
    Ok(out)
}

/// `range` widened to whole lines: back over the indentation before it,
/// on over the line end after it.
fn lines(text: &str, range: Range<usize>) -> Range<usize> {
    let line_start = text[..range.start].rfind('\n').map_or(0, |i| i + 1);
    let start = if text[line_start..range.start].trim().is_empty() {
        line_start
    } else {
        range.start
    };
    let end = if text[range.end..].starts_with('\n') {
        range.end + 1
    } else {
        range.end
    };
    start..end
}

/// Whether a firmware `<memattr_value>` would be merged with one written:
/// same target node, and an initiator cpuset that shares a CPU with the
/// written initiator's. An initiator hwloc gives as an object is not a
/// cpuset, so it never collides.
fn collides(
    value: roxmltree::Node<'_, '_>,
    written: &[&MeasuredValue],
    nodes: &HashMap<u32, NodeObject>,
) -> bool {
    let (Some("NUMANode"), Some(target), Some(cpuset)) = (
        value.attribute("target_obj_type"),
        value.attribute("target_obj_gp_index"),
        value.attribute("initiator_cpuset"),
    ) else {
        return false;
    };
    written.iter().any(|v| {
        nodes[&v.target].gp_index == target && overlap(cpuset, &nodes[&v.initiator].cpuset)
    })
}

/// Whether two bitmaps in hwloc's format share a bit. The format
/// (`hwloc_bitmap_snprintf`): comma-separated 32-bit words, most
/// significant first, each `0x` and 8 hex digits, an empty word for zero,
/// `0xf...f` first for an infinite set. A bitmap that does not read counts
/// as sharing (the firmware's value is then replaced).
fn overlap(a: &str, b: &str) -> bool {
    match (bitmap(a), bitmap(b)) {
        (Some((a, a_infinite)), Some((b, b_infinite))) => {
            let word = |words: &[u32], infinite: bool, i: usize| {
                words
                    .get(i)
                    .copied()
                    .unwrap_or(if infinite { u32::MAX } else { 0 })
            };
            (a_infinite && b_infinite)
                || (0..a.len().max(b.len()))
                    .any(|i| word(&a, a_infinite, i) & word(&b, b_infinite, i) != 0)
        }
        _ => true,
    }
}

/// hwloc's bitmap text as its words, least significant first, and whether
/// the set is infinite.
fn bitmap(text: &str) -> Option<(Vec<u32>, bool)> {
    let mut words = Vec::new();
    let mut infinite = false;
    for (i, word) in text.trim().split(',').enumerate() {
        if i == 0 && word == "0xf...f" {
            infinite = true;
            continue;
        }
        let digits = word.strip_prefix("0x").unwrap_or(word);
        words.push(if digits.is_empty() {
            0
        } else {
            u32::from_str_radix(digits, 16).ok()?
        });
    }
    words.reverse();
    Some((words, infinite))
}

/// hwloc reads `xml` and finds every value as written, asked as its
/// consumers ask: the value for the initiator node's cpuset.
fn read_back(xml: &str, source: &Source, values: &[MeasuredValue]) -> Result<(), HwlocXmlError> {
    let hw = hwlocality::Topology::builder()
        .from_xml(xml)
        .map_err(|e| hwloc_error(source, e))?
        .with_flags(BuildFlags::INCLUDE_DISALLOWED)
        .map_err(|e| hwloc_error(source, e))?
        .build()
        .map_err(|e| hwloc_error(source, e))?;
    let node = |id: u32| {
        hw.objects_with_type(ObjectType::NUMANode)
            .find(|n| n.os_index() == Some(id as usize))
    };
    for v in values {
        let read = match (
            hw.memory_attribute_named(v.attribute.name()),
            node(v.initiator).and_then(|n| n.cpuset()),
            node(v.target),
        ) {
            (Ok(Some(attribute)), Some(cpuset), Some(target)) => attribute
                .value(Some(Initiator::CpuSet(cpuset.into())), target)
                .ok()
                .flatten(),
            _ => None,
        };
        if read != Some(v.value) {
            return Err(HwlocXmlError::ReadBack { value: *v, read });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(attribute: Attribute, initiator: u32, target: u32, value: u64) -> MeasuredValue {
        MeasuredValue {
            attribute,
            initiator,
            target,
            value,
        }
    }

    /// (attribute, initiator, target node, value) as hwloc reads them back
    /// (`hwloc_memattr_get_initiators`), sorted; an initiator cpuset as the
    /// nodes whose CPUs it holds, an initiator object as its type and
    /// logical index.
    fn read(xml: &str, attributes: &[&str]) -> Vec<(String, String, u32, u64)> {
        let topo = Topology::from_xml_str(xml, "written.xml").unwrap();
        let hw = hwlocality::Topology::builder()
            .from_xml(&super::super::xml::canonical(xml).unwrap())
            .unwrap()
            .build()
            .unwrap();
        let mut found = Vec::new();
        for name in attributes {
            let attribute = hw.memory_attribute_named(name).unwrap().unwrap();
            for target in hw.objects_with_type(ObjectType::NUMANode) {
                let Ok((initiators, values)) = attribute.initiators(target) else {
                    continue;
                };
                for (initiator, value) in initiators.iter().zip(values) {
                    let initiator = match initiator {
                        Initiator::CpuSet(set) => {
                            let cpus: crate::CpuSet =
                                set.iter_set().map(|i| usize::from(i) as u32).collect();
                            let nodes: crate::NodeSet = topo
                                .nodes
                                .iter()
                                .filter(|n| !n.cpus.is_empty() && n.cpus.is_subset(&cpus))
                                .map(|n| n.id)
                                .collect();
                            nodes.to_string()
                        }
                        Initiator::Object(object) => object.to_string(),
                    };
                    let target = target.os_index().unwrap() as u32;
                    found.push((name.to_string(), initiator, target, value));
                }
            }
        }
        found.sort();
        found
    }

    #[test]
    fn every_pair_of_a_two_node_machine_reads_back_through_hwloc() {
        let topo = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1").unwrap();
        let mut values = Vec::new();
        for (initiator, target, ns, mib) in [
            (0, 0, 90, 20_000),
            (0, 1, 140, 12_000),
            (1, 0, 145, 11_500),
            (1, 1, 91, 19_800),
        ] {
            values.push(value(Attribute::Latency, initiator, target, ns));
            values.push(value(Attribute::Bandwidth, initiator, target, mib));
            values.push(value(Attribute::WriteBandwidth, initiator, target, mib / 2));
        }
        let xml = export(&topo, &values).unwrap();
        let mut expected: Vec<_> = values
            .iter()
            .map(|v| {
                (
                    v.attribute.name().to_owned(),
                    v.initiator.to_string(),
                    v.target,
                    v.value,
                )
            })
            .collect();
        expected.sort();
        assert_eq!(
            read(&xml, &["Latency", "Bandwidth", "WriteBandwidth"]),
            expected
        );
        assert!(
            read(&xml, &["ReadBandwidth", "ReadLatency", "WriteLatency"]).is_empty(),
            "only what was given is written"
        );
        // The machine is the synthetic one, whole.
        let again = Topology::from_xml_str(&xml, "written.xml").unwrap();
        assert_eq!((again.nodes.len(), again.cpus.len()), (2, 4));
        assert_eq!(again.node(1).unwrap().cpus.to_string(), "2-3");
        // In hwloc's layout: one value per line, in hwloc's attribute order.
        let bandwidth = xml
            .find("<memattr name=\"Bandwidth\" flags=\"5\">")
            .unwrap();
        let latency = xml.find("<memattr name=\"Latency\" flags=\"6\">").unwrap();
        let write = xml
            .find("<memattr name=\"WriteBandwidth\" flags=\"5\">")
            .unwrap();
        assert!(bandwidth < latency && latency < write, "{xml}");
        assert!(
            xml.contains("\n    <memattr_value target_obj_type=\"NUMANode\" target_obj_gp_index="),
            "{xml}"
        );
    }

    #[test]
    fn firmware_values_are_replaced_where_measured_and_kept_elsewhere() {
        // hwloc's test topology: Bandwidth 20 MiB/s to node 1 from the whole
        // machine (0x000000ff), and a user attribute `foobar` with values
        // from cpusets and from objects.
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/topologies/8intel64-4n2t-memattrs.xml"
        );
        let topo = Topology::from_xml_file(path).unwrap();
        let before = read(&std::fs::read_to_string(path).unwrap(), &["foobar"]);
        assert!(!before.is_empty());
        let xml = export(
            &topo,
            &[
                value(Attribute::Bandwidth, 0, 1, 9_000),
                value(Attribute::Latency, 2, 3, 300),
            ],
        )
        .unwrap();
        // Node 0's CPUs are among the machine's: the firmware's value
        // would have been merged with the measured one, so it is replaced.
        assert_eq!(
            read(&xml, &["Bandwidth", "Latency"]),
            [
                ("Bandwidth".to_owned(), "0".to_owned(), 1, 9_000),
                ("Latency".to_owned(), "2".to_owned(), 3, 300),
            ]
        );
        assert_eq!(read(&xml, &["foobar"]), before, "other attributes kept");
        let original = std::fs::read_to_string(path).unwrap();
        let foobar = |text: &str| {
            let start = text.find("  <memattr name=\"foobar\"").unwrap();
            let end = start + text[start..].find("</memattr>").unwrap();
            text[start..end].to_owned()
        };
        assert_eq!(foobar(&xml), foobar(&original), "byte for byte");
    }

    #[test]
    fn firmware_values_from_other_cpus_are_kept() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/topologies/8intel64-4n2t-memattrs.xml"
        );
        let topo = Topology::from_xml_file(path).unwrap();
        // To node 0, not node 1: the firmware's value to node 1 stays.
        let xml = export(&topo, &[value(Attribute::Bandwidth, 3, 0, 7_000)]).unwrap();
        assert_eq!(
            read(&xml, &["Bandwidth"]),
            [
                ("Bandwidth".to_owned(), "0-3".to_owned(), 1, 20),
                ("Bandwidth".to_owned(), "3".to_owned(), 0, 7_000),
            ]
        );
    }

    #[test]
    fn bad_values_are_refused() {
        let cpuless = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/topologies/cpuless.xml"
        );
        let topo = Topology::from_xml_file(cpuless).unwrap();
        let err = export(&topo, &[value(Attribute::Latency, 1, 0, 100)]).unwrap_err();
        assert!(matches!(err, HwlocXmlError::NoCpus { node: 1 }), "{err}");
        let twice = [
            value(Attribute::Latency, 0, 1, 100),
            value(Attribute::Latency, 0, 1, 101),
        ];
        let err = export(&topo, &twice).unwrap_err();
        assert_eq!(
            err.to_string(),
            "two values of Latency from node 0 to node 1"
        );
        let err = export(&topo, &[value(Attribute::Latency, 0, 7, 100)]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("node 7 is not a NUMA node of XML file"),
            "{err}"
        );
    }

    #[test]
    fn bitmaps_overlap_as_hwloc_writes_them() {
        assert!(overlap("0x00000003", "0x000000ff"));
        assert!(!overlap("0x00000003", "0x0000000c"));
        assert!(overlap(
            "0x00000001,,0x0",
            "0x00000001,0x00000000,0x00000000"
        ));
        assert!(!overlap("0x00000001,0x00000000", "0x00000001,,0x0"));
        assert!(!overlap("0x00000001,0x00000000", "0x00000001"));
        assert!(overlap("0xf...f,0x00000000", "0x00000001,0x00000000"));
        assert!(!overlap("0xf...f,0x00000000", "0x00000001"));
        assert!(overlap("garbage", "0x00000001"), "unreadable: replaced");
        assert_eq!(
            bitmap("0x00000001,,0x00000002"),
            Some((vec![2, 0, 1], false))
        );
    }
}
