//! `numalab fincore` where the nodes really differ: a file written in the
//! guest's memory file system by a thread bound to each node in turn has
//! its pages on that node (the kernel allocates a tmpfs page by the
//! policy of the task that writes it), and the node's own page-cache
//! count (`FilePages`) grew by the file. `numalab pagecache bench` puts
//! its readers on the CPUs the preset gives each node and its file's
//! cache on the node asked, and its SLIT ratio is the preset's.

use std::fs;

use anyhow::Result;
use numalab::system::NodeMemory;
use numalab::{MemPolicy, NodeSet};
use numalab_bench::fincore::FincoreReport;
use numalab_bench::pagecache::PagecacheBench;

use super::{Guest, Outcome};

/// The file: 8 MiB, 2048 pages.
const BYTES: usize = 8 << 20;
const PAGES: u64 = 2048;

/// Writes `path` from a thread bound to `node`.
fn write_on(node: u32, path: &std::path::Path) -> Result<()> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| -> Result<()> {
                MemPolicy::Bind(NodeSet::single(node)).apply_to_thread()?;
                fs::write(path, vec![0x5a; BYTES])?;
                Ok(())
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the writing thread panicked"))?
    })
}

/// Every node of the preset: a file written under `bind:N` is found on N
/// by `numalab fincore`, page for page, and node N's `FilePages` grew by
/// about its size.
pub fn nodes(guest: &Guest, out: &mut Outcome) -> Result<()> {
    for node in guest.preset.node_ids().iter() {
        let path = std::env::temp_dir().join(format!("emu-fincore-{node}"));
        let before = NodeMemory::read(node)?.file_bytes;
        write_on(node, &path)?;
        let grew = NodeMemory::read(node)?.file_bytes.saturating_sub(before);
        let report: FincoreReport =
            guest.numalab_result(&["fincore", "--json", path.to_str().unwrap_or_default()])?;
        let _ = fs::remove_file(&path);
        let Some(file) = report.files.first() else {
            out.same(format!("node {node}: files counted"), 1, 0);
            continue;
        };
        out.same(
            format!("node {node}: cached pages"),
            PAGES,
            file.cache.cached,
        );
        out.same(
            format!("node {node}: pages on node {node}"),
            PAGES,
            file.cache.on_node(node),
        );
        // The kernel's own count, independent of numalab's: within 1 MiB
        // of the file (other activity in the guest is small).
        out.check(
            format!("node {node}: its FilePages grew by"),
            "8 MiB ± 1 MiB",
            format!("{:.1} MiB", grew as f64 / (1 << 20) as f64),
            grew.abs_diff(BYTES as u64) <= 1 << 20,
        );
    }
    Ok(())
}

/// `numalab pagecache bench` with its cache on a memory-only node where
/// the preset has one (else the last node), two readers on every node
/// with CPUs: each reader on a CPU the preset gives that node and on
/// that node by the kernel, the whole file read, every cached page on the
/// cache node before and after, and remote/local SLIT as the preset's.
pub fn bench(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let preset = &guest.preset;
    let cache = preset
        .memory_only_nodes()
        .iter()
        .next()
        .or_else(|| preset.node_ids().iter().last())
        .unwrap_or(0);
    let cpu_nodes: Vec<String> = preset.cpu_nodes().iter().map(|n| n.to_string()).collect();
    let dir = std::env::temp_dir();
    let report: PagecacheBench = guest.numalab_result(&[
        "pagecache",
        "bench",
        "--json",
        "--size",
        "4M",
        "--dir",
        dir.to_str().unwrap_or("/tmp"),
        "--cache-node",
        &cache.to_string(),
        "--reader-node",
        &cpu_nodes.join(","),
        "--readers",
        "2",
        "--oversubscribe",
        "--repeats",
        "1",
        "--no-matrix",
    ])?;
    out.same("cells", cpu_nodes.len(), report.cells.len());
    for cell in &report.cells {
        let node = cell.reader_node.unwrap_or(u32::MAX);
        let cpus = preset.cpus_of(node);
        let readers: Vec<_> = cell.repeats.iter().flat_map(|r| &r.readers).collect();
        out.same(format!("readers on node {node}: ran"), 2, readers.len());
        for reader in readers {
            out.check(
                format!("readers on node {node}: CPU {}", reader.cpu),
                format!("in {cpus}"),
                reader.cpu,
                cpus.contains(reader.cpu),
            );
            out.same(
                format!("readers on node {node}: the kernel's node"),
                node,
                reader.node,
            );
            out.same(
                format!("readers on node {node}: bytes read"),
                4 << 20,
                reader.bytes,
            );
        }
        for (when, found) in [("before", &cell.cache_before), ("after", &cell.cache_after)] {
            let on_cache = found.as_ref().map_or(0, |c| c.on_node(cache));
            out.same(
                format!("readers on node {node}: pages on node {cache} {when}"),
                1024,
                on_cache,
            );
        }
    }
    for ratio in &report.ratios {
        let expected = match (
            preset.distance(ratio.reader_node, cache),
            preset.distance(cache, cache),
        ) {
            (Some(far), Some(near)) => format!("{:.2}", far as f64 / near as f64),
            _ => "none".into(),
        };
        out.same(
            format!("remote/local SLIT, readers on node {}", ratio.reader_node),
            expected,
            ratio
                .slit_ratio
                .map_or("none".into(), |r| format!("{r:.2}")),
        );
    }
    if report.ratios.is_empty() && preset.cpus_of(cache).is_empty() {
        out.note(format!(
            "node {cache} has no CPUs: no local readers, so no remote/local ratio"
        ));
    }
    Ok(())
}

/// `numalab pagecache bench --replicate` with the cache on a memory-only
/// node (else the last), one reader per CPU node and a writer: each node's
/// copies are on that node, every page of the file, later repeats read
/// them, and the writer wrote meanwhile.
pub fn replicate(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let preset = &guest.preset;
    let cache = preset
        .memory_only_nodes()
        .iter()
        .next()
        .or_else(|| preset.node_ids().iter().last())
        .unwrap_or(0);
    let cpu_nodes: Vec<String> = preset.cpu_nodes().iter().map(|n| n.to_string()).collect();
    let dir = std::env::temp_dir();
    let report: PagecacheBench = guest.numalab_result(&[
        "pagecache",
        "bench",
        "--json",
        "--size",
        "4M",
        "--dir",
        dir.to_str().unwrap_or("/tmp"),
        "--cache-node",
        &cache.to_string(),
        "--reader-node",
        &cpu_nodes.join(","),
        "--repeats",
        "2",
        "--replicate",
        "--write-every",
        "1ms",
        "--no-matrix",
    ])?;
    let through: Vec<_> = report.cells.iter().filter(|c| c.copies).collect();
    out.same("cells through copies", cpu_nodes.len(), through.len());
    for cell in through {
        let node = cell.reader_node.unwrap_or(u32::MAX);
        let pages = cell
            .copy_audit
            .as_ref()
            .map(|a| a.pages.clone())
            .unwrap_or_default();
        out.same(
            format!("copies for node {node}: pages on node {node}"),
            1024,
            pages.get(&node).copied().unwrap_or(0),
        );
        out.same(
            format!("copies for node {node}: pages elsewhere"),
            0,
            pages
                .iter()
                .filter(|(&n, _)| n != node)
                .map(|(_, p)| p)
                .sum::<u64>(),
        );
        let later: u64 = cell
            .repeats
            .iter()
            .skip(1)
            .flat_map(|r| &r.readers)
            .map(|r| r.from_copies)
            .sum();
        out.check(
            format!("copies for node {node}: the second repeat read them"),
            "over half the file",
            later,
            later > 2 << 20,
        );
        let writes: u64 = cell.repeats.iter().map(|r| r.writes).sum();
        out.check(
            format!("copies for node {node}: writes while reading"),
            "at least one per repeat",
            writes,
            writes >= 2,
        );
    }
    Ok(())
}
