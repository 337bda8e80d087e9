//! hwloc XML exports (`numalab topo --xml FILE`, `--topology FILE`): read
//! as `Topology::from_xml_file` reads a file, through numalab's rewrite
//! into the shape hwloc's built-in reader takes and then hwloc itself.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab::{Role, Topology};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let topo = match Topology::from_xml_str(text, "fuzz.xml") {
        Ok(topo) => topo,
        Err(err) => return drop(err.to_string()),
    };
    // What every command does next with a loaded topology.
    let _ = format!("{:?}", topo.summary());
    let inventory = topo.inventory();
    for role in [Role::Any, Role::Cpus, Role::Memory] {
        let _ = inventory.resolve_nodes("all", role);
    }
    let nodes = topo.node_ids();
    for node in nodes.iter() {
        let _ = topo.nodes_by_distance(node);
        let _ = topo.free_memory(node);
    }
    let _ = topo.cpus_of(&nodes);
    let _ = topo.nodes_of(&topo.cpu_ids());
    let _ = topo.parse_policy("interleave:all");
});
