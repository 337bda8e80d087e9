//! Topology logic on machines this one is not: hwloc XML exports of real
//! machines and synthetic topologies of 1, 2, 4 and 8 nodes.

use std::path::PathBuf;

use numalab::topology::DeviceKind;
use numalab::{CpuSet, NodeSet, SpecError, Topology};

fn xml(name: &str) -> Topology {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/topologies")
        .join(name);
    Topology::from_xml_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn nodes(s: &str) -> NodeSet {
    s.parse().unwrap()
}

#[test]
fn synthetic_one_to_eight_nodes() {
    for (desc, count, cpus_per_node) in [
        ("core:2 pu:2", 1, 4),
        ("pack:2 core:4 pu:2", 1, 16),
        ("pack:2 numa:1 core:4 pu:2", 2, 8),
        ("pack:2 numa:2 core:4 pu:2", 4, 8),
        ("pack:4 numa:2 core:2 pu:1", 8, 2),
    ] {
        let topo = Topology::from_synthetic(desc).unwrap();
        assert_eq!(topo.nodes.len(), count, "{desc}");
        assert_eq!(topo.node_ids(), (0..count as u32).collect(), "{desc}");
        let mut seen = CpuSet::new();
        for node in &topo.nodes {
            assert_eq!(node.cpus.len(), cpus_per_node, "{desc} node {}", node.id);
            assert!(
                node.cpus.intersection(&seen).is_empty(),
                "{desc}: CPUs on two nodes"
            );
            seen = seen.union(&node.cpus);
            assert!(node.memory_bytes > 0);
            for cpu in node.cpus.iter() {
                assert_eq!(topo.cpu(cpu).unwrap().node, Some(node.id));
            }
        }
        assert_eq!(seen, topo.cpu_ids(), "{desc}: every CPU on a node");
        assert_eq!(topo.nodes_of(&topo.cpu_ids()), topo.node_ids());
        assert_eq!(topo.cpus_of(&topo.node_ids()), topo.cpu_ids());
    }
}

#[test]
fn two_socket_intel_with_pci() {
    let topo = xml("24em64t-2n6c2t-pci.xml");
    assert_eq!(topo.packages, 2);
    assert_eq!(topo.nodes.len(), 2);
    // CPUs alternate between the sockets, as Linux numbers them there.
    assert_eq!(
        topo.node(0).unwrap().cpus.to_string(),
        "0,2,4,6,8,10,12,14,16,18,20,22"
    );
    assert_eq!(topo.distance(0, 1), Some(20));
    assert_eq!(topo.distance(1, 1), Some(10));
    assert_eq!(topo.cache_sizes.get(&3), Some(&(12 << 20)));
    assert_eq!(topo.last_level_caches.len(), 2);
    let nics: Vec<_> = topo
        .devices
        .iter()
        .filter(|d| d.kind == DeviceKind::Network)
        .collect();
    assert_eq!(nics.len(), 2);
    assert!(nics.iter().all(|d| d.nodes == nodes("0")));
    assert!(nics.iter().any(|d| d.os_devices == ["eth0"]));
    assert!(topo
        .devices
        .iter()
        .any(|d| d.kind == DeviceKind::Gpu && d.nodes == nodes("1")));
}

#[test]
fn knights_landing_mcdram_is_memory_only() {
    let topo = xml("64intel64-fakeKNL-SNC4-hybrid.xml");
    assert_eq!(topo.nodes.len(), 8);
    assert_eq!(topo.nodes_with_cpus(), nodes("0-3"));
    assert_eq!(topo.nodes_with_memory(), nodes("0-7"));
    for id in 4..8 {
        let node = topo.node(id).unwrap();
        assert!(node.cpus.is_empty());
        assert_eq!(node.subtype.as_deref(), Some("MCDRAM"));
    }
    // The MCDRAM cache is not a CPU cache.
    assert_eq!(topo.cache_sizes.get(&2), Some(&(4 << 20)));
    assert!(topo.last_level_caches.iter().all(|c| c.level == 2));
    // HMAT-style bandwidth: each cluster's MCDRAM is 4x its DDR.
    let bandwidth = |initiator: u32, target: u32| {
        topo.memory_attributes
            .iter()
            .find(|v| {
                v.attribute == "Bandwidth"
                    && v.initiator_nodes == NodeSet::single(initiator)
                    && v.target == target
            })
            .map(|v| v.value)
    };
    assert_eq!(bandwidth(0, 0), Some(22500));
    assert_eq!(bandwidth(0, 7), Some(90000));
    let err = topo.check_cpu_nodes(&nodes("5")).unwrap_err();
    assert!(
        matches!(err, SpecError::NodeWithoutCpus { node: 5, .. }),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "node 5 has no CPUs (a memory-only node) and cannot run threads; nodes with CPUs: 0-3"
    );
}

#[test]
fn memory_attributes_export() {
    let topo = xml("8intel64-4n2t-memattrs.xml");
    assert_eq!(topo.nodes.len(), 4);
    let value = &topo.memory_attributes[0];
    assert_eq!(
        (value.attribute.as_str(), value.unit.as_str()),
        ("Bandwidth", "MiB/s")
    );
    assert_eq!(value.target, 1);
    assert_eq!(value.value, 20);
    assert_eq!(value.initiator_nodes, nodes("0-3"));
}

#[test]
fn restricted_cpuset_and_nodes_without_cpus() {
    let topo = xml("16amd64-8n2c-cpusets.xml");
    assert_eq!(topo.node_ids(), nodes("1-5"));
    assert_eq!(topo.nodes_with_cpus(), nodes("1-3"));
    assert_eq!(topo.parse_nodes("all").unwrap(), topo.allowed_nodes);
    let err = topo.parse_nodes("0").unwrap_err();
    assert_eq!(
        err.to_string(),
        "node 0 does not exist; this machine has nodes 1-5"
    );
}

#[test]
fn eight_node_amd_distances() {
    let topo = xml("16amd64-4distances.xml");
    assert_eq!(topo.nodes.len(), 8);
    let d = topo.distances.as_ref().unwrap();
    assert_eq!(d.nodes, (0..8).collect::<Vec<_>>());
    for i in 0..8u32 {
        assert_eq!(topo.distance(i, i), Some(10));
    }
    let hetero = xml("fakeheterodistances.xml");
    assert_eq!(hetero.distance(0, 1), Some(16));
    assert_eq!(hetero.distance(0, 3), Some(22));
    // Nearest first, ties by id.
    assert_eq!(hetero.nodes_by_distance(0), vec![1, 2, 4, 6, 3, 5, 7]);
}

#[test]
fn cpu_less_and_memory_less_nodes() {
    let topo = xml("cpuless.xml");
    assert_eq!(topo.host.as_deref(), Some("cxl-test"));
    assert_eq!(topo.nodes_with_cpus(), nodes("0,2"));
    assert_eq!(topo.nodes_with_memory(), nodes("0-1"));
    assert_eq!(topo.node(1).unwrap().subtype.as_deref(), Some("CXL-DRAM"));
    assert_eq!(topo.cpu(3).unwrap().node, Some(2));
    let err = topo.check_memory_nodes(&nodes("2")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "node 2 has no memory; nodes with memory: 0-1"
    );
    assert_eq!(topo.nodes_by_distance(2), vec![1, 0]);
    let summary = topo.summary();
    assert_eq!(
        (summary.nodes, summary.memory_only_nodes, summary.cpus),
        (3, 1, 4)
    );
    // Policies parse against the machine, `all` included.
    let policy = topo.parse_policy("interleave:all").unwrap();
    assert_eq!(policy.to_string(), "interleave:0-1");
    let err = topo.parse_policy("bind:2").unwrap_err();
    assert!(err.to_string().contains("node 2 has no memory"), "{err}");
}

#[test]
fn single_node_machine_with_four_sockets() {
    let topo = xml("16em64t-4s2c2t.xml");
    assert_eq!(topo.packages, 4);
    assert_eq!(topo.nodes.len(), 1);
    assert_eq!(topo.node(0).unwrap().cpus.len(), 16);
    assert!(topo.distances.is_none());
}

#[test]
fn large_four_node_intel() {
    let topo = xml("96em64t-4n4d3ca2co-pci.xml");
    assert_eq!(topo.nodes.len(), 4);
    assert_eq!(topo.cpus.len(), 96);
    assert_eq!(topo.distance(0, 3), Some(26));
    let nic_nodes: NodeSet = topo
        .devices
        .iter()
        .filter(|d| d.kind == DeviceKind::Network)
        .flat_map(|d| d.nodes.iter().collect::<Vec<_>>())
        .collect();
    assert_eq!(nic_nodes, nodes("0-3"), "NICs hang off every node");
}

#[test]
fn this_machine_agrees_with_sysfs() {
    let topo = Topology::system().unwrap();
    let online: NodeSet = std::fs::read_to_string("/sys/devices/system/node/online")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(topo.node_ids(), online);
    for node in &topo.nodes {
        let cpulist =
            std::fs::read_to_string(format!("/sys/devices/system/node/node{}/cpulist", node.id))
                .unwrap();
        let cpus: CpuSet = if cpulist.trim().is_empty() {
            CpuSet::new()
        } else {
            cpulist.trim().parse().unwrap()
        };
        assert_eq!(node.cpus, cpus, "node {}", node.id);
        assert!(topo.free_memory(node.id).unwrap() <= node.memory_bytes);
    }
    let json = serde_json::to_string(&topo).unwrap();
    let back: Topology = serde_json::from_str(&json).unwrap();
    assert_eq!(back, topo);
}

/// Every test machine, as a user might hand it over after editing it: with
/// comments before and inside the document, attributes in single quotes,
/// Windows line ends. hwloc's built-in XML reader (the one present when the
/// libxml2 plugin is not installed) refuses all three; numalab must load
/// the same machine either way.
#[test]
fn hand_edited_exports_load_as_the_original() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/topologies");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("xml") {
            continue;
        }
        let original = Topology::from_xml_file(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut edited = String::new();
        for line in text.lines() {
            let line = if line.trim_start().starts_with("<object") && !line.contains('\'') {
                line.replace('"', "'")
            } else {
                line.to_string()
            };
            edited.push_str(&line);
            edited.push_str("\r\n");
            if line.starts_with("<?xml") {
                edited.push_str("<!-- exported on a machine we no longer have -->\r\n");
            } else if line.trim_start().starts_with("<object") && line.ends_with("/>") {
                edited.push_str("  <!-- a note about this object -->\r\n");
            }
        }
        let copy = std::env::temp_dir().join(format!(
            "numalab-edited-{}-{}",
            std::process::id(),
            path.file_name().unwrap().to_string_lossy()
        ));
        std::fs::write(&copy, &edited).unwrap();
        let loaded = Topology::from_xml_file(&copy);
        std::fs::remove_file(&copy).unwrap();
        let mut loaded = loaded.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        loaded.source = original.source.clone();
        assert_eq!(loaded, original, "{}", path.display());
        checked += 1;
    }
    assert!(
        checked >= 10,
        "only {checked} XML files found in {}",
        dir.display()
    );
}

/// hwloc 1.x's XML format (`lstopo --export-xml-flags v1`) describes the
/// same machine as hwloc 2's.
#[test]
fn hwloc1_exports_load() {
    let v2 = xml("16amd64-4distances.xml");
    let v1 = xml("16amd64-4distances-v1.xml");
    assert_eq!(v1.node_ids(), v2.node_ids());
    assert_eq!(v1.cpu_ids(), v2.cpu_ids());
    for (a, b) in v1.nodes.iter().zip(&v2.nodes) {
        assert_eq!(
            (a.id, &a.cpus, a.memory_bytes),
            (b.id, &b.cpus, b.memory_bytes)
        );
    }
    assert_eq!(v1.distances, v2.distances);
}

/// What is not an hwloc export is refused with a reason, not "errno 22".
#[test]
fn non_topology_files_are_named() {
    let dir = std::env::temp_dir().join(format!("numalab-notxml-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let html = dir.join("page.xml");
    std::fs::write(&html, "<html><body/></html>").unwrap();
    let err = Topology::from_xml_file(&html).unwrap_err().to_string();
    assert!(err.contains("not an hwloc topology"), "{err}");
    let broken = dir.join("broken.xml");
    std::fs::write(&broken, "<topology version=\"2.0\"><object></topology>").unwrap();
    let err = Topology::from_xml_file(&broken).unwrap_err().to_string();
    assert!(err.contains("not well-formed XML"), "{err}");
    let err = Topology::from_xml_file("/dev/zero")
        .unwrap_err()
        .to_string();
    assert!(err.contains("/dev/zero is a character device"), "{err}");
    let huge = dir.join("huge.xml");
    let file = std::fs::File::create(&huge).unwrap();
    file.set_len((64 << 20) + 1).unwrap();
    let err = Topology::from_xml_file(&huge).unwrap_err().to_string();
    assert!(
        err.contains("larger than 64 MiB, the limit for hwloc XML exports"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn node_lists_resolve_for_the_role_they_play() {
    use numalab::Role;
    // CPUs on nodes 0 and 2, memory on nodes 0 and 1.
    let topo = xml("cpuless.xml");
    assert_eq!(topo.resolve_nodes("all", Role::Any).unwrap(), nodes("0-2"));
    assert_eq!(topo.resolve_nodes("all", Role::Cpus).unwrap(), nodes("0,2"));
    assert_eq!(
        topo.resolve_nodes("all", Role::Memory).unwrap(),
        nodes("0-1")
    );
    assert_eq!(topo.resolve_nodes("!0", Role::Cpus).unwrap(), nodes("2"));
    assert_eq!(topo.resolve_nodes("!0", Role::Memory).unwrap(), nodes("1"));
    assert_eq!(topo.resolve_nodes(" 1 ", Role::Memory).unwrap(), nodes("1"));
    // An explicit list must name nodes that can play the role, with the
    // messages the check_* functions always gave.
    let err = topo.resolve_nodes("0-1", Role::Cpus).unwrap_err();
    assert_eq!(
        err.to_string(),
        "node 1 has no CPUs (a memory-only node) and cannot run threads; nodes with CPUs: 0,2"
    );
    let err = topo.resolve_nodes("2", Role::Memory).unwrap_err();
    assert_eq!(
        err.to_string(),
        "node 2 has no memory; nodes with memory: 0-1"
    );
    let err = topo.resolve_nodes("!0,1", Role::Memory).unwrap_err();
    assert!(
        matches!(err, SpecError::Nothing { what: "node", .. }),
        "{err}"
    );
    let err = topo.resolve_nodes("!7", Role::Cpus).unwrap_err();
    assert_eq!(
        err.to_string(),
        "node 7 does not exist; this machine has nodes 0-2"
    );
    // The Topology and the inventory it gives answer alike, and the
    // check_* functions are the role check.
    let inventory = topo.inventory();
    for spec in ["all", "!2", "0", "1-2", "0,2"] {
        for role in [Role::Any, Role::Cpus, Role::Memory] {
            assert_eq!(
                topo.resolve_nodes(spec, role).map_err(|e| e.to_string()),
                inventory
                    .resolve_nodes(spec, role)
                    .map_err(|e| e.to_string()),
                "{spec} as {role:?}"
            );
        }
    }
    assert_eq!(
        topo.check_cpu_nodes(&nodes("1")),
        inventory.check_role(&nodes("1"), Role::Cpus)
    );
    assert_eq!(
        topo.parse_nodes("all").unwrap(),
        topo.resolve_nodes("all", Role::Any).unwrap()
    );
    // Policies name memory nodes: `interleave:all` skips node 2.
    assert_eq!(
        topo.parse_policy("interleave:all").unwrap().to_string(),
        "interleave:0-1"
    );
    // A restricted cpuset: `all` is the allowed nodes of the role only.
    let restricted = xml("16amd64-8n2c-cpusets.xml");
    assert_eq!(
        restricted.resolve_nodes("all", Role::Cpus).unwrap(),
        restricted.allowed_nodes.intersection(&nodes("1-3"))
    );
    // A synthetic machine: every node plays every role.
    let synthetic = Topology::from_synthetic("pack:2 numa:2 core:2 pu:1").unwrap();
    for role in [Role::Any, Role::Cpus, Role::Memory] {
        assert_eq!(synthetic.resolve_nodes("!3", role).unwrap(), nodes("0-2"));
    }
}
