//! The experiment engine's placement, with `numalab run --json`: every
//! thread runs on the node the plan gives it, and every region's pages are
//! where the policy asked — `local` on its threads' node, `remote` on the
//! nearest other node by the SLIT, `interleave` spread evenly over every
//! node with memory, `first-touch` on the node of the thread that faulted
//! them — and the result says so. (Timings inside TCG mean nothing; the
//! placement is the kernel's and real.)

use std::fs;

use anyhow::{bail, Context, Result};
use numalab::NodeSet;
use numalab_bench::experiment::result::RUN_SCHEMA;
use numalab_bench::experiment::{RunReport, WarningKind};

use super::{Guest, Outcome, Pages};

/// `numalab run ARGS --json` read as its result type. A run result carries
/// its schema fields itself, so it is read directly after checking them.
pub fn run_result(guest: &Guest, args: &[&str]) -> Result<RunReport> {
    let doc = guest.numalab_json(args)?;
    let result: RunReport = serde_json::from_value(doc)
        .with_context(|| format!("reading the result of numalab {}", args.join(" ")))?;
    if result.schema != RUN_SCHEMA {
        bail!(
            "numalab {} wrote a {} document, not {RUN_SCHEMA}",
            args.join(" "),
            result.schema
        );
    }
    Ok(result)
}

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
    let preset = &guest.preset;
    let all = preset.memory_nodes();
    for policy in ["local", "remote", "interleave", "first-touch"] {
        let set = format!("memory.policy={policy}");
        let result = run_result(guest, &["run", &file, "--set", &set, "--json"])?;
        let node_of = |threads: Option<u32>| threads.map_or("none".to_owned(), |n| n.to_string());
        // Balanced over the CPU nodes: thread i on the i-th of them, where
        // it really ran.
        for (i, node) in cpu_nodes.iter().enumerate() {
            out.same(
                format!("{policy}: thread {i}'s planned node"),
                node,
                node_of(result.plan.threads.get(i).map(|t| t.node)),
            );
            out.same(
                format!("{policy}: thread {i} ran on node"),
                node,
                node_of(
                    result
                        .repeats
                        .first()
                        .and_then(|r| r.threads.get(i))
                        .map(|t| t.node),
                ),
            );
        }
        out.same(
            format!("{policy}: regions (one per node with threads)"),
            cpu_nodes.len(),
            result.regions.len(),
        );
        for region in &result.regions {
            let r = region.region;
            let threads_on: u32 = region.thread_nodes.first().unwrap_or(u32::MAX);
            // The threads' own memory: their node's, or the nearest node
            // with memory for a memory-less one.
            let home = preset.home_node(threads_on);
            let found = Pages::found(&region.audit.found);
            let (expected, slack) = match policy {
                "remote" => {
                    // Nearest other node with memory (ties: any of them).
                    let nearest =
                        preset.nearest(threads_on, &all.difference(&NodeSet::single(home)));
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
                format!("{policy}: region {r} (threads on node {threads_on}) pages"),
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
                region.as_requested,
            );
        }
        let placement_warnings: Vec<&str> = result
            .warnings
            .iter()
            .filter(|w| w.kind == WarningKind::Placement)
            .map(|w| w.message.as_str())
            .collect();
        // `local` on a memory-less node is said to be the nearest node's.
        let memoryless = preset.cpu_nodes().difference(&all);
        let expected: Vec<String> = match policy {
            "local" => memoryless
                .iter()
                .map(|n| format!("node {n} has no memory"))
                .collect(),
            _ => Vec::new(),
        };
        out.check(
            format!("{policy}: placement warnings"),
            format!("{expected:?}"),
            format!("{placement_warnings:?}"),
            placement_warnings.len() == expected.len()
                && expected
                    .iter()
                    .all(|e| placement_warnings.iter().any(|w| w.contains(e.as_str()))),
        );
    }
    Ok(())
}
