//! `numalab topo` for people: nodes, distances, HMAT, caches, devices and
//! kernel settings, as `numactl --hardware` and `lstopo` show them.

use std::fmt::Write as _;

use numalab::units::count;
use numalab_bench::topo::TopoReport;

use super::{Render, Style};
use crate::output::{self, Csv};
use numalab::units::format_size;

impl Render for TopoReport {
    fn text(&self, style: Style) -> String {
        human(self, style == Style::Markdown)
    }

    fn csv(&self) -> String {
        csv(self)
    }
}

fn csv(report: &TopoReport) -> String {
    let mut csv = Csv::new(&[
        "node",
        "cpus",
        "memory_bytes",
        "free_bytes",
        "subtype",
        "distances",
    ]);
    let topo = &report.topology;
    for node in &topo.nodes {
        let distances = topo
            .nodes
            .iter()
            .map(|other| {
                topo.distance(node.id, other.id)
                    .map_or(String::new(), |d| d.to_string())
            })
            .collect::<Vec<_>>()
            .join(" ");
        csv.row([
            node.id.to_string(),
            node.cpus.to_string(),
            node.memory_bytes.to_string(),
            report
                .memory_of(node.id)
                .map_or(String::new(), |m| m.free_bytes.to_string()),
            node.subtype.clone().unwrap_or_default(),
            distances,
        ]);
    }
    csv.finish()
}

fn human(report: &TopoReport, markdown: bool) -> String {
    let topo = &report.topology;
    let new_table = |header: Vec<String>| {
        if markdown {
            output::markdown_table(header)
        } else {
            output::table(header)
        }
    };
    let mut out = String::new();
    // Names from a saved file are shown, never obeyed: a newline in one
    // cannot start a line of its own.
    let name = topo.host.clone().unwrap_or_else(|| "unnamed".into());
    let _ = writeln!(
        out,
        "topology of {} ({}){}",
        output::printable_field(&topo.source.to_string()),
        output::printable_field(&name),
        topo.cpu_model.as_ref().map_or(String::new(), |m| format!(
            ", {}",
            output::printable_field(m)
        ))
    );
    let summary = topo.summary();
    let _ = writeln!(
        out,
        "{}, {}, {}, {}{}, {} of memory\n",
        count(summary.packages, "package"),
        count(topo.cores, "core"),
        count(summary.cpus, "CPU"),
        count(summary.nodes, "NUMA node"),
        if summary.memory_only_nodes > 0 {
            format!(" ({} without CPUs)", summary.memory_only_nodes)
        } else {
            String::new()
        },
        format_size(summary.memory_bytes)
    );

    // Nodes.
    let live = report.memory_now.is_some();
    let mut header = vec!["node".to_string(), "cpus".into(), "memory".into()];
    if live {
        header.extend(["free".to_string(), "huge 2M free/total".into()]);
    }
    header.extend(["kind".to_string(), "allowed".into()]);
    let mut table = new_table(header);
    for node in &topo.nodes {
        let mut row = vec![
            node.id.to_string(),
            if node.cpus.is_empty() {
                "-".into()
            } else {
                node.cpus.to_string()
            },
            format!("{} MiB", node.memory_bytes >> 20),
        ];
        if live {
            let memory = report.memory_of(node.id);
            row.push(memory.map_or("?".into(), |m| format!("{} MiB", m.free_bytes >> 20)));
            row.push(
                memory
                    .and_then(|m| m.huge_pages.iter().find(|p| p.page_bytes == 2 << 20))
                    .map_or("-".into(), |p| format!("{}/{}", p.free, p.total)),
            );
        }
        let kind = match (&node.subtype, node.cpus.is_empty(), node.memory_bytes) {
            (Some(subtype), _, _) => output::printable_field(subtype).into_owned(),
            (None, _, 0) => "no memory".into(),
            (None, true, _) => "memory-only".into(),
            (None, false, _) => "DRAM".into(),
        };
        row.push(kind);
        row.push(if topo.allowed_nodes.contains(node.id) {
            "yes".into()
        } else {
            "no".into()
        });
        table.add_row(row);
    }
    out.push_str(&output::render(&table));

    // Distances.
    out.push_str("\nnode distances (SLIT");
    match &topo.distances {
        Some(d) => {
            out.push_str(", 10 = local)\n");
            let mut header = vec!["node".to_string()];
            header.extend(d.nodes.iter().map(|n| n.to_string()));
            let mut table = new_table(header);
            for (i, from) in d.nodes.iter().enumerate() {
                let mut row = vec![from.to_string()];
                row.extend(d.values[i].iter().map(|v| v.to_string()));
                table.add_row(row);
            }
            out.push_str(&output::render(&table));
        }
        None if topo.nodes.len() == 1 => out.push_str("): one node, nothing to compare\n"),
        None => out.push_str("): none reported by the firmware\n"),
    }

    // HMAT.
    out.push_str("\nmemory attributes (HMAT, initiator -> target)");
    if topo.memory_attributes.is_empty() {
        out.push_str(": none reported by the firmware\n");
    } else {
        out.push('\n');
        let mut table = new_table(vec![
            "attribute".into(),
            "initiator".into(),
            "target".into(),
            "value".into(),
        ]);
        for value in &topo.memory_attributes {
            let initiator = if value.initiator_nodes.is_empty() {
                format!("cpus {}", value.initiator_cpus)
            } else {
                format!("node {}", value.initiator_nodes)
            };
            table.add_row(vec![
                value.attribute.clone(),
                initiator,
                value.target.to_string(),
                format!("{} {}", value.value, value.unit),
            ]);
        }
        out.push_str(&output::render(&table));
    }

    // Caches.
    let levels = topo
        .cache_sizes
        .iter()
        .map(|(level, size)| format!("L{level} {}", format_size(*size)))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(
        out,
        "\ncaches: {}",
        if levels.is_empty() {
            "unknown".into()
        } else {
            levels
        }
    );
    for cache in &topo.last_level_caches {
        let _ = writeln!(
            out,
            "  L{} {} shared by CPUs {} (node {})",
            cache.level,
            format_size(cache.size_bytes),
            cache.cpus,
            cache.nodes
        );
    }

    // Devices.
    out.push_str("\ndevices near each node");
    if topo.devices.is_empty() {
        out.push_str(": none found\n");
    } else {
        out.push('\n');
        let mut table = new_table(vec![
            "kind".into(),
            "pci".into(),
            "os devices".into(),
            "node".into(),
            "name".into(),
        ]);
        for device in &topo.devices {
            table.add_row(vec![
                serde_json::to_value(device.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                output::printable_field(&device.bus_id).into_owned(),
                output::printable_field(&device.os_devices.join(" ")).into_owned(),
                if device.nodes.is_empty() {
                    "?".into()
                } else {
                    device.nodes.to_string()
                },
                output::printable_field(device.name.as_deref().unwrap_or_default()).into_owned(),
            ]);
        }
        out.push_str(&output::render(&table));
    }

    // Kernel.
    if let Some(kernel) = &report.kernel {
        let balancing = super::numa_balancing(kernel.numa_balancing);
        let _ = writeln!(
            out,
            "\nkernel: numa_balancing {balancing}; transparent huge pages enabled={} defrag={}",
            output::printable_field(kernel.thp_enabled.as_deref().unwrap_or("?")),
            output::printable_field(kernel.thp_defrag.as_deref().unwrap_or("?"))
        );
        if let Some(tiers) = kernel.memory_tiers.as_ref().filter(|t| !t.is_empty()) {
            let text = tiers
                .iter()
                .map(|t| format!("{} (nodes {})", t.id, t.nodes))
                .collect::<Vec<_>>()
                .join(", ");
            let demotion = match kernel.demotion_enabled {
                Some(true) => "on",
                Some(false) => "off",
                None => "not in this kernel",
            };
            let _ = writeln!(
                out,
                "memory tiers, fastest first: {text}; demotion of cold pages to slower tiers {demotion}"
            );
        }
        if let Some(weights) = &kernel.interleave_weights {
            let text = weights
                .iter()
                .map(|(n, w)| format!("{n}={w}"))
                .collect::<Vec<_>>()
                .join(",");
            let _ = writeln!(out, "weighted-interleave weights: {text}");
        }
    }
    if let Some(support) = &report.support {
        let mut policies = vec!["bind", "preferred", "interleave", "local"];
        if support.preferred_many {
            policies.push("preferred-many");
        }
        if support.weighted_interleave {
            policies.push("weighted-interleave");
        }
        let _ = writeln!(
            out,
            "policies this kernel (Linux {}) accepts: {}",
            output::printable_field(&support.kernel),
            policies.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "this process may use CPUs {} and nodes {}",
        topo.allowed_cpus, topo.allowed_nodes
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use numalab::Topology;

    #[test]
    fn synthetic_machine_is_described() {
        let topology = Topology::from_synthetic("pack:2 numa:2 core:4 pu:2").unwrap();
        let report = TopoReport::gather(topology);
        assert!(report.memory_now.is_none() && report.kernel.is_none());
        let text = report.text(Style::Plain);
        assert!(
            text.contains("2 packages, 16 cores, 32 CPUs, 4 NUMA nodes"),
            "{text}"
        );
        assert!(text.contains("24-31"), "{text}");
        let csv = report.csv();
        assert_eq!(csv.lines().count(), 5, "{csv}");
        assert!(csv.starts_with("node,cpus,memory_bytes"), "{csv}");
    }
}
