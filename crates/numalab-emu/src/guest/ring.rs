//! `numalab ring --layout blog --json` on the emulated machine: every cell
//! of the radio-astronomy blog's tables runs, and in each the ring's pages
//! are on the memory node asked for and the writer and reader processes ran
//! only on CPUs of their nodes. Throughput under TCG means nothing and is
//! not checked.

use anyhow::{Context, Result};
use serde_json::Value;

use super::{Guest, Outcome};

fn ids(value: &Value) -> Vec<u64> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .collect()
}

/// The blog layout's placement, cell by cell.
pub fn blog(guest: &Guest, out: &mut Outcome) -> Result<()> {
    if guest.preset.cpu_nodes().len() < 2 {
        out.not_applicable("the blog's layout needs two nodes with CPUs");
        return Ok(());
    }
    let args = [
        "ring",
        "--layout",
        "blog",
        "--volume",
        "16M",
        "--block-size",
        "1M",
        "--json",
    ];
    let doc = guest.numalab_json(&args)?;
    let cells = doc["cells"].as_array().context("no cells in the result")?;
    out.same("cells (8 single-stream, 4 two-stream)", 12, cells.len());
    for cell in cells {
        let name = format!(
            "{} {}",
            cell["table"].as_str().unwrap_or("?"),
            cell["name"].as_str().unwrap_or("?")
        );
        if !out.same(
            format!("{name}: status"),
            "ran",
            cell["status"].as_str().unwrap_or("?"),
        ) {
            continue;
        }
        for (i, stream) in cell["streams"].as_array().into_iter().flatten().enumerate() {
            let plan = &stream["plan"];
            let memory = plan["memory_node"].as_u64().unwrap_or(u64::MAX);
            out.same(
                format!("{name} stream {i}: ring pages on node"),
                memory,
                ids(&stream["memory"]["expected_nodes"])
                    .first()
                    .copied()
                    .unwrap_or(u64::MAX),
            );
            out.same(
                format!("{name} stream {i}: ring placement"),
                "match",
                stream["memory"]["verdict"].as_str().unwrap_or("?"),
            );
            let writer = plan["writer_node"].as_u64().unwrap_or(u64::MAX);
            out.same(
                format!("{name} stream {i}: writer ran on nodes"),
                format!("{:?}", [writer]),
                format!("{:?}", ids(&stream["writer"]["nodes_seen"])),
            );
            let reader = plan["reader_node"].as_u64().unwrap_or(u64::MAX);
            for r in stream["readers"].as_array().into_iter().flatten() {
                out.same(
                    format!("{name} stream {i}: reader ran on nodes"),
                    format!("{:?}", [reader]),
                    format!("{:?}", ids(&r["nodes_seen"])),
                );
            }
        }
        out.same(
            format!("{name}: placement_ok"),
            true,
            cell["placement_ok"].as_bool().unwrap_or(false),
        );
    }
    Ok(())
}
