//! `numalab ring --layout blog --json` on the emulated machine, read as a
//! typed [`RingReport`]: every cell of the radio-astronomy blog's tables
//! runs, and in each the ring's pages (as `move_pages` found them) are on
//! the memory node the cell's name gives, and the writer and reader
//! processes ran only on the CPUs the preset gives that cell's nodes. The
//! expected values come from the blog's cell names and the preset, never
//! from numalab's plan or verdicts. Throughput under TCG means nothing
//! and is not checked.

use anyhow::{bail, Context, Result};
use numalab_bench::ring::{CellStatus, ProcessPlacement, RingReport};

use super::{expect_pages, Guest, Outcome, Pages};
use crate::preset::Preset;

/// Volume, block size and blocks of each stream.
const VOLUME: &str = "16M";
const BLOCK_SIZE: u64 = 1 << 20;
const BLOCKS: u64 = 8;

/// The (memory, writer, reader) nodes of each stream of the blog's cell
/// `table`/`name`, over the machine's first two nodes with CPUs `a` and
/// `b`: "memory 1, writer 0, reader 1" is one stream; the two-stream cells
/// are named by how their two streams share the nodes.
fn blog_cell(table: &str, name: &str, a: u32, b: u32) -> Result<Vec<(u32, u32, u32)>> {
    Ok(match (table, name) {
        ("single-stream", _) => {
            let nodes: Vec<u32> = name
                .split(", ")
                .zip(["memory ", "writer ", "reader "])
                .map(|(part, role)| {
                    part.strip_prefix(role)
                        .and_then(|n| n.parse().ok())
                        .with_context(|| format!("cell {name:?}: expected `{role}N`"))
                })
                .collect::<Result<_>>()?;
            if nodes.len() != 3 {
                bail!("cell {name:?}: expected `memory M, writer W, reader R`");
            }
            vec![(nodes[0], nodes[1], nodes[2])]
        }
        ("two-stream", "isolated") => vec![(a, a, a), (b, b, b)],
        ("two-stream", "crossed") => vec![(b, a, a), (a, b, b)],
        ("two-stream", other) => {
            let node = other
                .strip_prefix("adjacent on ")
                .and_then(|n| n.parse().ok())
                .with_context(|| format!("unknown two-stream cell {other:?}"))?;
            vec![(node, node, node); 2]
        }
        _ => bail!("unknown table {table:?}"),
    })
}

/// Records that a worker was pinned to the preset's CPUs of `node` and
/// ran only there.
fn expect_on(out: &mut Outcome, what: &str, preset: &Preset, node: u32, p: &ProcessPlacement) {
    let cpus = preset.cpus_of(node);
    out.same(format!("{what} pinned to CPUs"), &cpus, &p.cpus_allowed);
    out.check(
        format!("{what} ran on CPUs"),
        format!("some of {cpus} (node {node})"),
        &p.cpus_seen,
        !p.cpus_seen.is_empty() && p.cpus_seen.is_subset(&cpus),
    );
}

/// The blog layout's placement, cell by cell.
pub fn blog(guest: &Guest, out: &mut Outcome) -> Result<()> {
    // The blog's two nodes each hold a ring and run its processes.
    let preset = &guest.preset;
    let cpu_nodes: Vec<u32> = preset
        .cpu_nodes()
        .intersection(&preset.memory_nodes())
        .iter()
        .collect();
    let [a, b, ..] = cpu_nodes[..] else {
        out.not_applicable("the blog's layout needs two nodes with CPUs and memory");
        return Ok(());
    };
    let (block_size, blocks) = (BLOCK_SIZE.to_string(), BLOCKS.to_string());
    let args = [
        "ring",
        "--layout",
        "blog",
        "--volume",
        VOLUME,
        "--block-size",
        &block_size,
        "--blocks",
        &blocks,
        "--json",
    ];
    let report: RingReport = guest.numalab_result(&args)?;
    out.same(
        "cells (8 single-stream, 4 two-stream)",
        12,
        report.cells.len(),
    );
    for cell in &report.cells {
        let name = format!("{} {}", cell.table, cell.name);
        if !out.same(format!("{name}: status"), "ran", cell.status.as_str())
            || cell.status != CellStatus::Ran
        {
            continue;
        }
        let wanted = blog_cell(&cell.table, &cell.name, a, b)?;
        if !out.same(format!("{name}: streams"), wanted.len(), cell.streams.len()) {
            continue;
        }
        for (i, (stream, &(memory, writer, reader))) in cell.streams.iter().zip(&wanted).enumerate()
        {
            let what = format!("{name} stream {i}");
            let found = &stream.memory.found;
            // The ring's data alone is blocks × block size; its header
            // adds a little.
            let data_pages = BLOCKS * BLOCK_SIZE / found.page_size.max(1);
            out.check(
                format!("{what}: ring pages asked about"),
                format!(">= {data_pages}"),
                found.queried,
                found.queried >= data_pages,
            );
            expect_pages(
                out,
                format!("{what}: ring pages per node"),
                &Pages::on(memory, found.queried),
                found,
                0,
            );
            expect_on(
                out,
                &format!("{what}: writer"),
                &guest.preset,
                writer,
                &stream.writer,
            );
            for (r, placement) in stream.readers.iter().enumerate() {
                expect_on(
                    out,
                    &format!("{what}: reader {r}"),
                    &guest.preset,
                    reader,
                    placement,
                );
            }
            out.same(format!("{what}: readers"), 1, stream.readers.len());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use numalab::CpuSet;

    use super::*;

    #[test]
    fn cells_are_read_from_their_blog_names() {
        assert_eq!(
            blog_cell("single-stream", "memory 1, writer 0, reader 1", 0, 1).unwrap(),
            [(1, 0, 1)]
        );
        assert_eq!(
            blog_cell("two-stream", "crossed", 0, 1).unwrap(),
            [(1, 0, 0), (0, 1, 1)]
        );
        assert_eq!(
            blog_cell("two-stream", "adjacent on 1", 0, 1).unwrap(),
            [(1, 1, 1), (1, 1, 1)]
        );
        assert!(blog_cell("single-stream", "memory 1, writer 0", 0, 1).is_err());
        assert!(blog_cell("two-stream", "diagonal", 0, 1).is_err());
    }

    #[test]
    fn a_worker_off_its_node_fails() {
        let presets = crate::preset::Presets::builtin().unwrap();
        let preset = presets.get("two-socket").unwrap();
        let mut out = Outcome::default();
        let placement = ProcessPlacement {
            pid: 1,
            cpus_allowed: "2-3".parse().unwrap(),
            cpus_seen: "1-2".parse::<CpuSet>().unwrap(),
            nodes_seen: "0-1".parse().unwrap(),
            cpu_seconds: 0.0,
            ok: true,
        };
        expect_on(&mut out, "writer", preset, 1, &placement);
        let failed: Vec<&str> = out
            .comparisons
            .iter()
            .filter(|c| !c.ok)
            .map(|c| c.what.as_str())
            .collect();
        // Pinned right, but seen on CPU 1, which is node 0's.
        assert_eq!(failed, ["writer ran on CPUs"]);
    }
}
