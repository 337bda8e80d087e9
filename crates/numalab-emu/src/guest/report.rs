//! `numalab report --quick` whole, as a user runs it first: the machine
//! it describes is the preset, its matrix has the preset's shape with
//! every cell's pages on its target, its policy sweep ran every cell with
//! each region where the policy puts it, and it says what that means.
//! Timings under TCG mean nothing and are not checked.

use anyhow::Result;
use numalab::NodeSet;
use numalab_bench::report::Report;

use super::{Guest, Outcome};

/// The report of the emulated machine, against the preset.
pub fn quick(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let began = std::time::Instant::now();
    let report: Report = guest.numalab_result(&["report", "--quick", "--json"])?;
    out.note(format!(
        "numalab report --quick took {:.1} s under TCG",
        began.elapsed().as_secs_f64()
    ));
    let preset = &guest.preset;
    let topology = &report.topology.topology;
    out.same("nodes", preset.node_ids(), topology.node_ids());
    out.same(
        "nodes with memory",
        preset.memory_nodes(),
        topology.nodes_with_memory(),
    );
    let matrix = &report.matrix;
    let rows: NodeSet = matrix.shape.initiators.iter().copied().collect();
    let columns: NodeSet = matrix.shape.targets.iter().copied().collect();
    out.same("matrix rows (CPU nodes)", preset.cpu_nodes(), rows);
    out.same(
        "matrix columns (memory nodes)",
        preset.memory_nodes(),
        columns,
    );
    out.same(
        "matrix: every cell's pages on its target",
        true,
        matrix.placement_summary.all_match,
    );
    // The sweep: local everywhere; remote and interleave where there is
    // another node with memory.
    let policies: Vec<&str> = if preset.memory_nodes().len() > 1 {
        vec!["local", "remote", "interleave"]
    } else {
        vec!["local"]
    };
    let cells = &report.sweep.cells;
    for policy in &policies {
        let of_policy: Vec<_> = cells
            .iter()
            .filter(|c| c.setting("memory.policy") == Some(*policy))
            .collect();
        out.check(
            format!("sweep: {policy} cells"),
            "at least one",
            of_policy.len(),
            !of_policy.is_empty(),
        );
        for cell in of_policy {
            let threads = cell.setting("threads.count").unwrap_or("?");
            let what = format!(
                "sweep: {policy}, {threads} {}",
                if threads == "1" { "thread" } else { "threads" }
            );
            let Some(result) = &cell.result else {
                out.same(
                    format!("{what}: result"),
                    "ran",
                    cell.error.as_deref().unwrap_or("no result"),
                );
                continue;
            };
            let strays: Vec<String> = result
                .regions
                .iter()
                .filter(|r| !r.as_requested)
                .map(|r| format!("region {}: {}", r.region, r.note))
                .collect();
            out.check(
                format!("{what}: every region where {policy} puts it"),
                "all as requested",
                if strays.is_empty() {
                    "all as requested".to_owned()
                } else {
                    strays.join("; ")
                },
                strays.is_empty() && !result.regions.is_empty(),
            );
        }
    }
    let unexpected: Vec<String> = cells
        .iter()
        .filter_map(|c| c.setting("memory.policy"))
        .filter(|p| !policies.contains(p))
        .map(str::to_owned)
        .collect();
    out.same("sweep: no other policy", "[]", format!("{unexpected:?}"));
    out.check(
        "findings",
        "at least one sentence",
        report.findings.len(),
        !report.findings.is_empty(),
    );
    out.same("not interrupted", false, report.sweep.interrupted);
    Ok(())
}
