//! `numalab topo --json` against the preset.

use anyhow::Result;
use numalab::{CpuSet, NodeInventory, NodeSet, Topology};

use super::{Guest, Outcome};

fn cli_topology(guest: &Guest) -> Result<Topology> {
    Ok(guest.topo_report()?.topology.clone())
}

fn whole_mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// Nodes, CPUs per node, memory per node, packages, memory-only nodes;
/// and the library's own inventory agrees.
pub fn nodes(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let preset = &guest.preset;
    let topo = cli_topology(guest)?;
    out.same("node ids", preset.node_ids(), topo.node_ids());
    out.same("packages", preset.sockets, topo.packages);
    out.same(
        "CPUs",
        (0..preset.total_cpus()).collect::<CpuSet>(),
        topo.cpu_ids(),
    );
    for id in preset.node_ids().iter() {
        let node = topo.node(id);
        let cpus = |set: &CpuSet| {
            if set.is_empty() {
                "none".to_owned()
            } else {
                set.to_string()
            }
        };
        out.same(
            format!("node {id} CPUs"),
            cpus(&preset.cpus_of(id)),
            node.map_or("no such node".into(), |n| cpus(&n.cpus)),
        );
        let (low, high) = preset.memory_range(id, &guest.tolerance);
        let found = node.map_or(0, |n| n.memory_bytes);
        out.check(
            format!("node {id} memory"),
            format!("{} to {}", whole_mib(low), whole_mib(high)),
            whole_mib(found),
            (low..=high).contains(&found),
        );
    }
    let summary = topo.summary();
    out.same(
        "memory-only nodes",
        preset.memory_only_nodes().len(),
        summary.memory_only_nodes,
    );
    // The table marks them, as users see it.
    let table = guest.numalab(&["topo"])?;
    // The node table: from its header to the first blank line.
    let rows: Vec<&str> = table
        .stdout
        .lines()
        .skip_while(|l| !(l.trim_start().starts_with("node") && l.contains("cpus")))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    for id in preset.memory_only_nodes().iter() {
        let row = rows
            .iter()
            .find(|l| l.split_whitespace().next() == Some(&id.to_string()))
            .copied()
            .unwrap_or("no row")
            .to_owned();
        out.check(
            format!("numalab topo row of node {id}"),
            "CPUs \"-\", kind memory-only",
            row.split_whitespace().collect::<Vec<_>>().join(" "),
            row.split_whitespace().nth(1) == Some("-") && row.contains("memory-only"),
        );
    }
    // What placement checks use: the library's live inventory.
    let inventory = NodeInventory::live();
    out.same("inventory: nodes", preset.node_ids(), &inventory.nodes);
    out.same(
        "inventory: nodes with CPUs",
        preset.cpu_nodes(),
        &inventory.with_cpus,
    );
    out.same(
        "inventory: nodes with memory",
        preset.memory_nodes(),
        &inventory.with_memory,
    );
    // A memory-less node is not in the cpuset's mems, yet its CPUs are
    // usable: numactl --cpunodebind=N works there.
    out.same(
        "inventory: nodes this process may use",
        preset.node_ids(),
        &inventory.allowed_nodes,
    );
    Ok(())
}

/// The distance matrix, each cell `from -> to`.
pub fn distances(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let preset = &guest.preset;
    let topo = cli_topology(guest)?;
    out.same(
        "matrix nodes",
        preset.node_ids(),
        topo.distances
            .as_ref()
            .map_or(NodeSet::new(), |d| d.nodes.iter().copied().collect()),
    );
    for from in preset.node_ids().iter() {
        for to in preset.node_ids().iter() {
            out.same(
                format!("distance {from} -> {to}"),
                preset
                    .distance(from, to)
                    .map_or("-".into(), |d| d.to_string()),
                topo.distance(from, to)
                    .map_or("-".into(), |d| d.to_string()),
            );
        }
    }
    // The library's nearest-first order of the other memory nodes
    // follows the rows (from).
    for from in preset.cpu_nodes().iter() {
        let mut expected: Vec<u32> = preset
            .memory_nodes()
            .iter()
            .filter(|&n| n != from)
            .collect();
        expected.sort_by_key(|&n| (preset.distance(from, n), n));
        out.same(
            format!("nodes_by_distance({from})"),
            format!("{expected:?}"),
            format!("{:?}", topo.nodes_by_distance(from)),
        );
    }
    Ok(())
}

/// HMAT values: the ones the preset's description says Linux publishes,
/// and no others.
pub fn hmat(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let expected = guest.preset.expected_attributes();
    let topo = cli_topology(guest)?;
    let found: Vec<String> = topo
        .memory_attributes
        .iter()
        .map(|v| {
            format!(
                "{} node {} -> node {}: {}",
                v.attribute, v.initiator_nodes, v.target, v.value
            )
        })
        .collect();
    for attribute in &expected {
        let key = format!(
            "{} node {} -> node {}",
            attribute.attribute, attribute.initiator, attribute.target
        );
        let value = topo
            .memory_attributes
            .iter()
            .find(|v| {
                v.attribute == attribute.attribute
                    && v.target == attribute.target
                    && v.initiator_nodes == NodeSet::single(attribute.initiator)
            })
            .map_or("missing".to_owned(), |v| v.value.to_string());
        out.same(key, attribute.value, value);
    }
    let expected_text: Vec<String> = expected.iter().map(|e| e.to_string()).collect();
    let unexpected: Vec<&String> = found
        .iter()
        .filter(|f| !expected_text.contains(f))
        .collect();
    out.check(
        "values not in the preset",
        "none",
        if unexpected.is_empty() {
            "none".to_owned()
        } else {
            unexpected
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        },
        unexpected.is_empty(),
    );
    if !guest.preset.hmat.is_empty() {
        out.note(format!(
            "{} HMAT entries in the preset; Linux publishes {} (each target's attached \
             initiator only)",
            guest.preset.hmat.len(),
            guest
                .preset
                .hmat
                .iter()
                .filter(|h| { guest.preset.attached_initiator(h.target) == Some(h.initiator) })
                .count()
        ));
    }
    Ok(())
}

/// The kernel's memory tiers in `numalab topo --json` are the ones Linux
/// makes of the preset (one DRAM tier before 6.7; from 6.7 placed by the
/// HMAT figures), the table says so in a line, and `numa_balancing`'s
/// memory-tiering mode (2) is named.
pub fn tiers(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let kernel = guest
        .topo_report()?
        .kernel
        .clone()
        .unwrap_or_else(numalab::system::KernelSettings::current);
    // Whether there are tiers is the kernel's word, not numalab's.
    if !std::path::Path::new("/sys/devices/virtual/memory_tiering").is_dir() {
        out.not_applicable(format!(
            "Linux {} has no /sys/devices/virtual/memory_tiering",
            guest.kernel
        ));
        return Ok(());
    }
    let Some(found) = kernel.memory_tiers else {
        out.same("memory tiers in numalab topo --json", "present", "none");
        return Ok(());
    };
    let expected = guest.preset.expected_tiers(guest.kernel_at_least(6, 7));
    let text = |tiers: Vec<(u32, NodeSet)>| {
        tiers
            .iter()
            .map(|(id, nodes)| format!("{id}: {nodes}"))
            .collect::<Vec<_>>()
            .join("; ")
    };
    out.same(
        format!(
            "memory tiers (Linux {}: {})",
            guest.kernel,
            if guest.kernel_at_least(6, 7) {
                "from the HMAT"
            } else {
                "one DRAM tier"
            }
        ),
        text(expected.into_iter().collect()),
        text(found.into_iter().map(|t| (t.id, t.nodes)).collect()),
    );
    out.check(
        "demotion_enabled in the report",
        "true or false",
        format!("{:?}", kernel.demotion_enabled),
        kernel.demotion_enabled.is_some(),
    );
    // The line of `numalab topo`'s table that starts with `start`.
    let topo_line = |start: &str| -> Result<String> {
        let table = guest.numalab(&["topo"])?.stdout;
        Ok(table
            .lines()
            .find(|l| l.starts_with(start))
            .unwrap_or("none")
            .to_owned())
    };
    let line = topo_line("memory tiers")?;
    out.check(
        "numalab topo: the tiers' line",
        "memory tiers, fastest first: …",
        &line,
        line.starts_with("memory tiers, fastest first: "),
    );
    let _tiering = super::Balancing::set("2")?;
    let line = topo_line("kernel: numa_balancing")?;
    out.check(
        "numalab topo with numa_balancing = 2",
        "kernel: numa_balancing tiering (hot pages promoted …",
        &line,
        line.starts_with("kernel: numa_balancing tiering (hot pages promoted"),
    );
    Ok(())
}
