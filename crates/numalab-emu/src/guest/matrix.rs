//! `numalab matrix --quick --json` on the emulated machine: the matrix has
//! the machine's shape (memory-only nodes are columns only), every cell's
//! working set lands on its target node, and every cell carries the
//! preset's SLIT distance and the HMAT values Linux publishes. Timings
//! under TCG mean nothing and are not checked.

use anyhow::Result;
use numalab::NodeSet;
use serde_json::Value;

use super::{Guest, Outcome};

fn nodes(value: &Value) -> NodeSet {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_u64().map(|n| n as u32))
        .collect()
}

fn text(value: &Value) -> String {
    match value {
        Value::Null => "none".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The shape, each cell's placement and its firmware values.
pub fn shape(guest: &Guest, out: &mut Outcome) -> Result<()> {
    // On an emulated CPU --quick keeps its working sets small by itself.
    let args = ["matrix", "--quick", "--json"];
    let doc = guest.numalab_json(&args)?;
    let preset = &guest.preset;
    let (rows, cols) = (preset.cpu_nodes(), preset.node_ids());
    out.same("schema", "numalab.matrix", text(&doc["schema"]));
    out.same(
        "--quick chase working set under TCG",
        4 << 20,
        text(&doc["settings"]["latency_bytes"]),
    );
    let says_emulated = doc["warnings"].as_array().into_iter().flatten().any(|w| {
        w.as_str()
            .is_some_and(|w| w.contains("the CPU is emulated"))
    });
    out.check(
        "warning that timings are emulated",
        "present",
        if says_emulated { "present" } else { "missing" },
        says_emulated,
    );
    out.same(
        "rows (CPU nodes)",
        &rows,
        nodes(&doc["shape"]["initiators"]),
    );
    out.same(
        "columns (memory nodes)",
        &cols,
        nodes(&doc["shape"]["targets"]),
    );
    let expected = preset.expected_attributes();
    let hmat = |attribute: &str, i: u32, t: u32| {
        expected
            .iter()
            .find(|e| e.attribute == attribute && e.initiator == i && e.target == t)
            .map_or("none".to_owned(), |e| e.value.to_string())
    };
    for matrix in ["latency", "bandwidth"] {
        let cells = doc[matrix]["cells"].as_array().cloned().unwrap_or_default();
        out.same(
            format!("{matrix} cells"),
            rows.len() * cols.len(),
            cells.len(),
        );
        for i in rows.iter() {
            for t in cols.iter() {
                let what = format!("{matrix} {i}->{t}");
                let Some(cell) = cells
                    .iter()
                    .find(|c| c["initiator"] == i && c["target"] == t)
                else {
                    out.same(what, "a cell", "missing");
                    continue;
                };
                out.same(
                    format!("{what} placement"),
                    "match",
                    text(&cell["placement"]["verdict"]),
                );
                let found = &cell["placement"]["found"]["per_node"];
                let on: NodeSet = found
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(_, pages)| pages.as_u64().unwrap_or(0) > 0)
                    .filter_map(|(node, _)| node.parse().ok())
                    .collect();
                out.same(format!("{what} pages on"), NodeSet::single(t), on);
                out.same(
                    format!("{what} SLIT"),
                    preset
                        .distance(i, t)
                        .map_or("none".into(), |d| d.to_string()),
                    text(&cell["firmware"]["slit"]),
                );
                out.same(
                    format!("{what} HMAT latency"),
                    hmat("Latency", i, t),
                    text(&cell["firmware"]["hmat_latency_ns"]),
                );
                out.same(
                    format!("{what} HMAT bandwidth"),
                    hmat("Bandwidth", i, t),
                    text(&cell["firmware"]["hmat_bandwidth_mib_s"]),
                );
            }
        }
    }
    out.same(
        "placement_summary.all_match",
        "true",
        text(&doc["placement_summary"]["all_match"]),
    );
    Ok(())
}
