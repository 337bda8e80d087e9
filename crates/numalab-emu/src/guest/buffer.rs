//! Placement by the library: [`NodeBuffer`] under every policy, checked
//! page by page with `locate` and `audit`.

use std::collections::BTreeMap;

use anyhow::Result;
use numalab::locate::Sample;
use numalab::{BufferOptions, HugePages, InterleaveWeights, MemPolicy, NodeBuffer, NodeSet};

use super::{expect_pages, Balancing, Guest, Outcome, Pages};

/// Buffers of 1024 base pages: large enough to show a split, small enough
/// to fit any node.
const PAGES: u64 = 1024;

fn page_size() -> u64 {
    numalab::system::page_size() as u64
}

fn place(policy: MemPolicy) -> Result<NodeBuffer> {
    Ok(NodeBuffer::new((PAGES * page_size()) as usize, policy)?)
}

fn audit_line(out: &mut Outcome, what: String, buffer: &NodeBuffer) {
    let audit = buffer.audit();
    out.check(what, "audit: match", audit.note.clone(), audit.is_match());
}

/// A buffer for a policy on `node`, a node without memory: refused
/// before anything is mapped, naming the node and the nodes with memory.
fn refused_without_memory(guest: &Guest, out: &mut Outcome, policy: MemPolicy, node: u32) {
    let found = match place(policy.clone()) {
        Ok(_) => "no error: the buffer was made".to_owned(),
        Err(err) => err.to_string(),
    };
    let needle = format!(
        "node {node} has no memory; nodes with memory: {}",
        guest.preset.memory_nodes()
    );
    out.check(
        format!("{policy} (node {node} has no memory)"),
        format!("refused: {needle}"),
        &found,
        found.contains(&needle),
    );
}

/// Bound to each node with memory, every page is there; a memory-less
/// node is refused.
pub fn bind(guest: &Guest, out: &mut Outcome) -> Result<()> {
    for node in guest.preset.memoryless_nodes().iter() {
        refused_without_memory(guest, out, MemPolicy::Bind(NodeSet::single(node)), node);
    }
    for node in guest.preset.memory_nodes().iter() {
        let buffer = place(MemPolicy::Bind(NodeSet::single(node)))?;
        expect_pages(
            out,
            format!("bind:{node}"),
            &Pages::on(node, PAGES),
            &buffer.locate(Sample::All)?,
            0,
        );
        audit_line(out, format!("bind:{node} audit"), &buffer);
    }
    Ok(())
}

/// Preferring each node with memory, every page is there (it has
/// room); a memory-less node is refused.
pub fn preferred(guest: &Guest, out: &mut Outcome) -> Result<()> {
    for node in guest.preset.memoryless_nodes().iter() {
        refused_without_memory(guest, out, MemPolicy::Preferred(node), node);
    }
    for node in guest.preset.memory_nodes().iter() {
        let buffer = place(MemPolicy::Preferred(node))?;
        expect_pages(
            out,
            format!("preferred:{node}"),
            &Pages::on(node, PAGES),
            &buffer.locate(Sample::All)?,
            0,
        );
        audit_line(out, format!("preferred:{node} audit"), &buffer);
    }
    Ok(())
}

/// From a thread on each CPU node, preferred-many over the other nodes
/// with memory takes the nearest of them by the preset's distances (Linux
/// walks its zonelist, nearest first).
pub fn preferred_many(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let preset = &guest.preset;
    let memory = preset.memory_nodes();
    for cpu_node in preset.cpu_nodes().iter() {
        let others = memory.difference(&NodeSet::single(cpu_node));
        let set = if others.len() >= 2 {
            others
        } else {
            memory.clone()
        };
        let nearest = preset.nearest(cpu_node, &set);
        let policy = MemPolicy::PreferredMany(set.clone());
        let (ran_on, buffer) = guest.on_node(cpu_node, || place(policy.clone()))?;
        let buffer = buffer?;
        out.same(
            format!("thread pinned on node {cpu_node}"),
            cpu_node,
            ran_on,
        );
        let found = buffer.locate(Sample::All)?;
        match nearest.first().filter(|_| nearest.len() == 1) {
            Some(node) => {
                expect_pages(
                    out,
                    format!("{policy} from node {cpu_node} (nearest member: {node})"),
                    &Pages::on(node, PAGES),
                    &found,
                    0,
                );
            }
            None => {
                out.check(
                    format!("{policy} from node {cpu_node}"),
                    format!("all on the nearest members {nearest}"),
                    Pages::found(&found),
                    found.on_nodes(&nearest) == PAGES,
                );
            }
        }
        audit_line(out, format!("{policy} from node {cpu_node} audit"), &buffer);
    }
    Ok(())
}

/// Interleave splits pages evenly: over two nodes, over every node with
/// memory, and over a CPU node with a memory-only one.
pub fn interleave(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let preset = &guest.preset;
    let all = preset.memory_nodes();
    let mut sets: Vec<NodeSet> = vec![all.iter().take(2).collect()];
    if all.len() > 2 {
        sets.push(all.clone());
    }
    if let (Some(cpu), Some(memory_only)) = (
        preset.cpu_nodes().first(),
        preset.memory_only_nodes().first(),
    ) {
        sets.push([cpu, memory_only].into_iter().collect());
    }
    for nodes in sets {
        let policy = MemPolicy::Interleave(nodes.clone());
        let buffer = place(policy.clone())?;
        expect_pages(
            out,
            format!("{policy} ({} nodes)", nodes.len()),
            &Pages::even(&nodes, PAGES),
            &buffer.locate(Sample::All)?,
            2,
        );
        audit_line(out, format!("{policy} audit"), &buffer);
    }
    Ok(())
}

/// `local` and `default` from a thread pinned on each CPU node land on
/// that node, or for a memory-less node on the nearest node with memory.
pub fn local(guest: &Guest, out: &mut Outcome) -> Result<()> {
    for node in guest.preset.cpu_nodes().iter() {
        let home = guest.preset.home_node(node);
        for policy in [MemPolicy::Local, MemPolicy::Default] {
            let (ran_on, buffer) = guest.on_node(node, || place(policy.clone()))?;
            let buffer = buffer?;
            out.same(format!("thread pinned on node {node}"), node, ran_on);
            out.same(
                format!("{policy} buffer made from node"),
                node,
                buffer.touched_from(),
            );
            expect_pages(
                out,
                format!("{policy} from node {node}"),
                &Pages::on(home, PAGES),
                &buffer.locate(Sample::All)?,
                0,
            );
            audit_line(out, format!("{policy} from node {node} audit"), &buffer);
        }
    }
    Ok(())
}

/// Weighted interleave: on Linux 6.9 and later pages follow the weights
/// (3:1 over two nodes with memory, and 2:1:1 over three where the preset
/// has them), each node within a page per 100 of its share; before,
/// making the buffer fails with an error naming `MPOL_WEIGHTED_INTERLEAVE`
/// and the kernel version it needs.
pub fn weighted_interleave(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let nodes: Vec<u32> = guest.preset.memory_nodes().iter().collect();
    if guest.kernel_at_least(6, 9) {
        if nodes.len() < 2 {
            out.not_applicable("the preset has one node with memory: nothing to weigh");
            return Ok(());
        }
        let mut cases = vec![BTreeMap::from([(nodes[0], 3u8), (nodes[1], 1)])];
        if let [a, b, c, ..] = nodes[..] {
            cases.push(BTreeMap::from([(a, 2), (b, 1), (c, 1)]));
        }
        for weights in cases {
            let _restore = InterleaveWeights::set(&weights)?;
            let policy = MemPolicy::WeightedInterleave(weights.clone());
            let buffer = place(policy.clone())?;
            let total: u64 = weights.values().map(|&w| u64::from(w)).sum();
            let expected = Pages(
                weights
                    .iter()
                    .map(|(n, w)| (*n, PAGES * u64::from(*w) / total))
                    .collect(),
            );
            expect_pages(
                out,
                format!("{policy}"),
                &expected,
                &buffer.locate(Sample::All)?,
                PAGES / 100,
            );
            audit_line(out, format!("{policy} audit"), &buffer);
        }
    } else {
        let weights: BTreeMap<u32, u8> =
            BTreeMap::from([(nodes[0], 3), (*nodes.last().unwrap_or(&0), 1)]);
        let policy = MemPolicy::WeightedInterleave(weights);
        let err = match place(policy.clone()) {
            Ok(_) => "no error: the buffer was made".to_owned(),
            Err(err) => err.to_string(),
        };
        let needle = "MPOL_WEIGHTED_INTERLEAVE (Linux 6.9 or later)";
        out.check(
            format!("{policy} on Linux {}", guest.kernel),
            format!("an error naming {needle}"),
            &err,
            err.contains(needle) && err.contains("does not support weighted-interleave"),
        );
    }
    Ok(())
}

/// A buffer filled with a pattern moves to each other node in turn, then
/// to an interleave over all nodes; every page follows, bytes unchanged.
pub fn migrate(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let nodes = guest.preset.memory_nodes();
    let first = nodes.first().unwrap_or(0);
    let mut buffer = place(MemPolicy::Bind(NodeSet::single(first)))?;
    for (i, byte) in buffer.as_mut_slice().iter_mut().enumerate() {
        *byte = (i % 251) as u8;
    }
    let intact = |buffer: &NodeBuffer| {
        buffer
            .as_slice()
            .iter()
            .enumerate()
            .all(|(i, b)| *b == (i % 251) as u8)
    };
    let mut targets: Vec<MemPolicy> = nodes
        .iter()
        .skip(1)
        .map(|n| MemPolicy::Bind(NodeSet::single(n)))
        .collect();
    targets.push(MemPolicy::Bind(NodeSet::single(first)));
    targets.push(MemPolicy::Interleave(nodes.clone()));
    for policy in targets {
        buffer.migrate(policy.clone())?;
        let expected = match &policy {
            MemPolicy::Interleave(set) => Pages::even(set, PAGES),
            other => Pages::on(other.nodes().first().unwrap_or(0), PAGES),
        };
        expect_pages(
            out,
            format!("moved to {policy}"),
            &expected,
            &buffer.locate(Sample::All)?,
            if matches!(policy, MemPolicy::Interleave(_)) {
                2
            } else {
                0
            },
        );
        out.same(
            format!("contents after moving to {policy}"),
            "intact",
            if intact(&buffer) { "intact" } else { "changed" },
        );
    }
    Ok(())
}

/// How many full passes the kernel's NUMA-balancing scan has made over
/// this process's memory (`/proc/self/sched`, `mm->numa_scan_seq`).
fn numa_scan_passes() -> Option<u64> {
    let sched = std::fs::read_to_string("/proc/self/sched").ok()?;
    sched
        .lines()
        .find(|l| l.contains("numa_scan_seq"))?
        .rsplit(|c: char| c == ':' || c.is_whitespace())
        .find_map(|w| w.parse().ok())
}

/// A buffer under the default policy, touched on a node, then left alone
/// while the process runs long enough for a NUMA-balancing pass to mark
/// its pages inaccessible (the kernel watches which CPU touches them
/// next): every page is still found, on the node that touched it, for
/// base pages and for transparent huge pages alike. Linux 6.1 to 6.4
/// answer `move_pages(2)` for such a base page as if it were not there
/// (`-ENOENT`) and for such a huge page as if it were not mapped
/// (`-EFAULT`); `locate` then reads the page's frame from the pagemap.
pub fn while_balancing(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let Some(node) = guest.preset.cpu_nodes().first() else {
        out.not_applicable("the preset has no node with CPUs");
        return Ok(());
    };
    let _balancing = Balancing::set("1")?;
    let (_, found) = guest.on_node(node, || -> Result<_> {
        let base = place(MemPolicy::Default)?;
        // Two 2 MiB huge pages' worth (the buffer is 2 MiB-aligned and
        // advised MADV_HUGEPAGE).
        let huge = NodeBuffer::with_options(
            (4 << 20) as usize,
            BufferOptions::new(MemPolicy::Default).huge_pages(HugePages::Transparent),
        )?;
        // Read now: after the scan has made the huge pages inaccessible,
        // smaps no longer counts them.
        let huge_bytes = huge.huge_page_bytes();
        let before = numa_scan_passes();
        // Spin until a pass ends: the scan is paced by the process's own
        // CPU time, so that is what bounds the wait (60 s of it; the
        // check took 1.0-1.1 s in every guest), not the host's clock.
        let cpu = numalab::system::thread_cpu_time();
        while numa_scan_passes() <= before
            && numalab::system::thread_cpu_time() - cpu < std::time::Duration::from_secs(60)
        {
            let spin = std::time::Instant::now();
            while spin.elapsed().as_millis() < 50 {
                std::hint::spin_loop();
            }
        }
        let passes = numa_scan_passes();
        Ok((
            base.locate(Sample::All)?,
            huge.locate(Sample::All)?,
            huge_bytes,
            before,
            passes,
        ))
    })?;
    let (pages, huge_pages, huge_bytes, before, passes) = found?;
    out.note(format!(
        "numa_balancing scan passes over the process: {} before, {} after",
        before.map_or("unknown".into(), |p| p.to_string()),
        passes.map_or("unknown".into(), |p| p.to_string()),
    ));
    out.check(
        "a NUMA-balancing pass ran over the buffers",
        "more passes after than before",
        format!("{before:?} -> {passes:?}"),
        passes > before,
    );
    expect_pages(
        out,
        format!("default policy, touched on node {node}, after the pass"),
        &Pages::on(node, PAGES),
        &pages,
        0,
    );
    out.check(
        "transparent huge pages behind the 4 MiB buffer",
        "at least one 2 MiB page",
        format!("{huge_bytes:?} bytes"),
        huge_bytes.is_some_and(|b| b >= 2 << 20),
    );
    expect_pages(
        out,
        format!("default policy, huge pages, touched on node {node}, after the pass"),
        &Pages::on(node, (4 << 20) / page_size()),
        &huge_pages,
        0,
    );
    Ok(())
}
