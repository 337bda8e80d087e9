//! The experiment engine's placement, with `numalab run --json`: every
//! thread runs on the node the plan gives it, and every region's pages are
//! where the policy asked — `local` on its threads' node, `remote` on the
//! nearest other node by the SLIT, `interleave` spread evenly over every
//! node with memory, `first-touch` on the node of the thread that faulted
//! them — and the result says so. (Timings inside TCG mean nothing; the
//! placement is the kernel's and real.)

use std::fs;

use anyhow::Result;
use numalab::NodeSet;

use super::{Guest, Outcome, Pages};

/// One region per node with threads, of 2048 base pages each.
const REGION_PAGES: u64 = 2048;

fn experiment(threads: usize) -> String {
    format!(
        "name = \"emu-placement\"\n\
         [threads]\ncount = {threads}\nplacement = \"balanced\"\n\
         [memory]\nsize = \"{}KiB\"\nsharing = \"per-node\"\nhuge_pages = \"none\"\n\
         [access]\npattern = \"random\"\nop_size = 128\nread_write = \"2:1\"\nops = 20000\n\
         [run]\nrepeats = 1\nwarmup = 0\ncounters = false\n",
        REGION_PAGES * 4
    )
}

/// `numalab run` with each policy: threads on their planned nodes, pages
/// where the policy puts them, `as_requested` true.
pub fn placement(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let cpu_nodes: Vec<u32> = guest.preset.cpu_nodes().iter().collect();
    if cpu_nodes.len() < 2 {
        out.not_applicable("the preset has fewer than two nodes with CPUs");
        return Ok(());
    }
    let file = std::env::temp_dir().join("emu-placement.toml");
    fs::write(&file, experiment(cpu_nodes.len()))?;
    let file = file.to_string_lossy().into_owned();
    let all = guest.preset.node_ids();
    for policy in ["local", "remote", "interleave", "first-touch"] {
        let set = format!("memory.policy={policy}");
        let doc = guest.numalab_json(&["run", &file, "--set", &set, "--json"])?;
        // Balanced over the CPU nodes: thread i on the i-th of them, where
        // it really ran.
        for (i, node) in cpu_nodes.iter().enumerate() {
            out.same(
                format!("{policy}: thread {i}'s planned node"),
                node,
                &doc["plan"]["threads"][i]["node"],
            );
            out.same(
                format!("{policy}: thread {i} ran on node"),
                node,
                &doc["repeats"][0]["threads"][i]["node"],
            );
        }
        out.same(
            format!("{policy}: regions (one per node with threads)"),
            cpu_nodes.len(),
            doc["regions"].as_array().map_or(0, Vec::len),
        );
        for region in doc["regions"].as_array().into_iter().flatten() {
            let r = &region["region"];
            let home: u32 = serde_json::from_value::<NodeSet>(region["thread_nodes"].clone())
                .ok()
                .and_then(|s| s.first())
                .unwrap_or(u32::MAX);
            let found = Pages(
                region["audit"]["found"]["per_node"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter_map(|(n, c)| Some((n.parse().ok()?, c.as_u64()?)))
                    .collect(),
            );
            let (expected, slack) = match policy {
                "remote" => {
                    // Nearest other node with memory (ties: any of them).
                    let nearest = guest
                        .preset
                        .nearest(home, &all.difference(&NodeSet::single(home)));
                    let on = found.0.keys().next().copied().unwrap_or(u32::MAX);
                    let target = if nearest.contains(on) {
                        on
                    } else {
                        nearest.first().unwrap_or(u32::MAX)
                    };
                    (Pages::on(target, REGION_PAGES), 0)
                }
                "interleave" => (Pages::even(&all, REGION_PAGES), 2),
                _ => (Pages::on(home, REGION_PAGES), 0),
            };
            out.check(
                format!("{policy}: region {r} (threads on node {home}) pages"),
                if slack > 0 {
                    format!("{expected} (±{slack})")
                } else {
                    expected.to_string()
                },
                &found,
                found.within(&expected, slack),
            );
            out.same(
                format!("{policy}: region {r} as_requested"),
                true,
                &region["as_requested"],
            );
        }
        let placement_warnings = doc["warnings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|w| w["kind"] == "placement")
            .count();
        out.same(
            format!("{policy}: placement warnings"),
            0,
            placement_warnings,
        );
    }
    Ok(())
}
