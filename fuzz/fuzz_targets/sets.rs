//! Node and CPU lists (`--membind 0-3,7`, `--cpus !0`, `threads.nodes`),
//! memory policies (`bind:0-1`, `weighted-interleave:0=3,1=1`) and their
//! resolution against a machine's nodes: never a panic, and whatever
//! parses prints back as text that parses to the same value.
#![no_main]
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use numalab::policy::parse_weights;
use numalab::{CpuSet, MemPolicy, NodeInventory, NodeSet, Role};

/// Nodes 0-3 and 8 (with a gap), node 3 memory-only, node 8 not allowed.
fn inventory() -> &'static NodeInventory {
    static INVENTORY: OnceLock<NodeInventory> = OnceLock::new();
    INVENTORY.get_or_init(|| NodeInventory {
        nodes: "0-3,8".parse().unwrap(),
        with_memory: "0-3".parse().unwrap(),
        with_cpus: "0-2,8".parse().unwrap(),
        allowed_nodes: "0-3".parse().unwrap(),
        cpus: "0-11,64-65".parse().unwrap(),
        allowed_cpus: "0-11".parse().unwrap(),
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(set) = text.parse::<NodeSet>() {
        assert!(set.iter().all(|n| n <= NodeSet::MAX));
        assert_eq!(set.to_string().parse::<NodeSet>().unwrap(), set);
    }
    if let Ok(set) = text.parse::<CpuSet>() {
        assert!(set.iter().all(|c| c <= CpuSet::MAX));
        assert_eq!(set.to_string().parse::<CpuSet>().unwrap(), set);
    }
    let inventory = inventory();
    for role in [Role::Any, Role::Cpus, Role::Memory] {
        match inventory.resolve_nodes(text, role) {
            Ok(nodes) => {
                assert!(!nodes.is_empty());
                assert!(
                    nodes.is_subset(&inventory.nodes_for(role)),
                    "{text:?}: {nodes}"
                );
                assert!(
                    nodes.is_subset(&inventory.allowed_nodes),
                    "{text:?}: {nodes}"
                );
            }
            Err(err) => drop(err.to_string()),
        }
    }
    match inventory.parse_cpus(text) {
        Ok(cpus) => {
            assert!(!cpus.is_empty());
            assert!(cpus.is_subset(&inventory.allowed_cpus), "{text:?}: {cpus}");
        }
        Err(err) => drop(err.to_string()),
    }
    match text.parse::<MemPolicy>() {
        Ok(policy) => {
            let printed = policy.to_string();
            assert_eq!(printed.parse::<MemPolicy>().unwrap(), policy, "{text:?}");
            let _ = policy.check_nodes(inventory).map_err(|e| e.to_string());
        }
        Err(err) => drop(err.to_string()),
    }
    if let Err(err) = parse_weights(text) {
        drop(err.to_string());
    }
});
