//! `numalab fincore` where the nodes really differ: a file written in the
//! guest's memory file system by a thread bound to each node in turn has
//! its pages on that node (the kernel allocates a tmpfs page by the
//! policy of the task that writes it), and the node's own page-cache
//! count (`FilePages`) grew by the file.

use std::fs;

use anyhow::Result;
use numalab::system::NodeMemory;
use numalab::{MemPolicy, NodeSet};
use numalab_bench::fincore::FincoreReport;

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
            file.cache.per_node.get(&node).copied().unwrap_or(0),
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
