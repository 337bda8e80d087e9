//! `numalab matrix --quick --json` on the emulated machine: the matrix has
//! the machine's shape (memory-only nodes are columns only), every cell's
//! working set lands on its target node, and every cell carries the
//! preset's SLIT distance and the HMAT values Linux publishes. Timings
//! under TCG mean nothing and are not checked.

use anyhow::Result;
use numalab::audit::PlacementAudit;
use numalab::NodeSet;
use numalab_bench::matrix::{Firmware, MatrixReport, MatrixWarningKind};

use super::{Guest, Outcome, Pages};

fn text<T: ToString>(value: Option<T>) -> String {
    value.map_or("none".into(), |v| v.to_string())
}

/// The shape, each cell's placement and its firmware values.
pub fn shape(guest: &Guest, out: &mut Outcome) -> Result<()> {
    // On an emulated CPU --quick keeps its working sets small by itself.
    // Read as its type: the schema and version are checked on the way.
    let result: &MatrixReport = guest.quick_matrix()?;
    let preset = &guest.preset;
    let (rows, cols) = (preset.cpu_nodes(), preset.memory_nodes());
    out.same(
        "--quick chase working set under TCG",
        4 << 20,
        result.settings.latency_bytes,
    );
    let says_emulated = result
        .warnings
        .iter()
        .any(|w| w.kind == MatrixWarningKind::Emulated);
    out.check(
        "warning that timings are emulated",
        "present",
        if says_emulated { "present" } else { "missing" },
        says_emulated,
    );
    let initiators: NodeSet = result.shape.initiators.iter().copied().collect();
    let targets: NodeSet = result.shape.targets.iter().copied().collect();
    out.same("rows (CPU nodes)", &rows, initiators);
    out.same("columns (memory nodes)", &cols, targets);
    let expected = preset.expected_attributes();
    let hmat = |attribute: &str, i: u32, t: u32| {
        expected
            .iter()
            .find(|e| e.attribute == attribute && e.initiator == i && e.target == t)
            .map_or("none".to_owned(), |e| e.value.to_string())
    };
    type Cell<'a> = (u32, u32, &'a PlacementAudit, &'a Firmware);
    let latency: Vec<Cell<'_>> = result
        .latency
        .iter()
        .flat_map(|m| &m.cells)
        .map(|c| (c.initiator, c.target, &c.placement, &c.firmware))
        .collect();
    let bandwidth: Vec<Cell<'_>> = result
        .bandwidth
        .iter()
        .flat_map(|m| &m.cells)
        .map(|c| (c.initiator, c.target, &c.placement, &c.firmware))
        .collect();
    for (matrix, cells) in [("latency", latency), ("bandwidth", bandwidth)] {
        out.same(
            format!("{matrix} cells"),
            rows.len() * cols.len(),
            cells.len(),
        );
        for i in rows.iter() {
            for t in cols.iter() {
                let what = format!("{matrix} {i}->{t}");
                let Some(&(_, _, placement, firmware)) =
                    cells.iter().find(|c| c.0 == i && c.1 == t)
                else {
                    out.same(what, "a cell", "missing");
                    continue;
                };
                out.check(
                    format!("{what} placement"),
                    "match",
                    placement,
                    placement.is_match(),
                );
                let on: NodeSet = Pages::found(&placement.found)
                    .0
                    .into_iter()
                    .filter(|&(_, pages)| pages > 0)
                    .map(|(node, _)| node)
                    .collect();
                out.same(format!("{what} pages on"), NodeSet::single(t), on);
                out.same(
                    format!("{what} SLIT"),
                    text(preset.distance(i, t)),
                    text(firmware.slit),
                );
                out.same(
                    format!("{what} HMAT latency"),
                    hmat("Latency", i, t),
                    text(firmware.hmat_latency_ns),
                );
                out.same(
                    format!("{what} HMAT bandwidth"),
                    hmat("Bandwidth", i, t),
                    text(firmware.hmat_bandwidth_mib_s),
                );
            }
        }
    }
    out.same(
        "placement_summary.all_match",
        true,
        result.placement_summary.all_match,
    );
    Ok(())
}
