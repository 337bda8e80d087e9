//! Replicated memory on real nodes: every replica's pages on its own node,
//! reads from each CPU node served by that node's replica, copies limited
//! by a budget, and the experiment engine's `replicate` policy placing a
//! copy on every node with CPUs.
//!
//! `ReplicaSet::system()` makes one replica per node with memory and CPUs
//! that the process may use, in node order. The checks below use
//! `ReplicaSet::on_nodes` over every node with memory, memory-only
//! (CPU-less) ones included: its thread map sends each CPU node's threads
//! to their own node's replica, so a memory-only node's replica is written
//! (and holds its copies) but never read by `read`, only through
//! `read_from`. The engine's `replicate` places copies on the nodes with
//! CPUs only. (Timings inside TCG mean nothing; the placement is the
//! kernel's and real.)

use std::fs;

use anyhow::{bail, Result};
use numalab::locate::{self, PageHistogram, Sample};
use numalab::replicated::{Mode, PagesOptions, ReplicaSet, Replicated, ReplicatedPages};
use numalab_bench::experiment::WarningKind;

use super::{Guest, Outcome, Pages};

const PAGE: usize = 4096;

/// Records that every present page of `found` is on `node`, and that
/// `expected` pages (or, with `None`, some) are present.
fn all_on(
    out: &mut Outcome,
    what: impl Into<String>,
    node: u32,
    expected: Option<u64>,
    found: &PageHistogram,
) {
    let present = found.present();
    let missing = found.not_present + found.unknown;
    let count_ok = expected.map_or(present > 0, |n| present == n);
    out.check(
        what,
        match expected {
            Some(n) => format!("all {n} on node{node}"),
            None => format!("all on node{node}"),
        },
        format!("{}{}", Pages::found(found), Pages::absent(found)),
        found.on_node(node) == present && count_ok && missing == 0,
    );
}

/// The replica on `node`.
fn replica_of(set: &ReplicaSet, node: u32) -> Option<usize> {
    set.nodes().iter().position(|&n| n == node)
}

/// Library and engine replication on this preset.
pub fn placement(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let preset = &guest.preset;
    let cpu_nodes: Vec<u32> = preset.cpu_nodes().iter().collect();
    let memory_only: Vec<u32> = preset.memory_only_nodes().iter().collect();
    // Replicas for reading: on the nodes with CPUs and memory (a
    // memory-less node's threads read the nearest one).
    let read_nodes: Vec<u32> = preset
        .cpu_nodes()
        .intersection(&preset.memory_nodes())
        .iter()
        .collect();
    out.same(
        "ReplicaSet::system() replica nodes",
        format!("{read_nodes:?}"),
        format!("{:?}", ReplicaSet::system()?.nodes()),
    );
    // A replica on each node with memory, CPU-less ones included.
    let set = ReplicaSet::on_nodes(&preset.memory_nodes())?;
    out.same(
        "ReplicaSet::on_nodes(every node with memory) replica nodes",
        format!("{:?}", preset.memory_nodes().iter().collect::<Vec<_>>()),
        format!("{:?}", set.nodes()),
    );

    library_values(guest, out, &set, &cpu_nodes)?;
    pages(guest, out, &set, &cpu_nodes, &memory_only)?;
    budget(guest, out, &set, read_nodes[0])?;
    engine(guest, out, &cpu_nodes)?;
    Ok(())
}

/// `Replicated<T>`: the value's own pages, a `Vec`'s buffer and a byte
/// region, each replica on its node; reads from each CPU node counted on
/// that node's replica.
fn library_values(
    guest: &Guest,
    out: &mut Outcome,
    set: &ReplicaSet,
    cpu_nodes: &[u32],
) -> Result<()> {
    let table = Replicated::with_set([7u64; 2048], set.clone(), Mode::Broadcast)?;
    // A replica's storage holds the value (4 pages) and its lock's reader
    // slots beside it.
    for (i, pages) in table.replica_pages(Sample::All)?.iter().enumerate() {
        all_on(
            out,
            format!("Replicated<[u64; 2048]> replica {i} pages (value and reader slots)"),
            set.node(i),
            None,
            pages,
        );
        out.check(
            format!("Replicated<[u64; 2048]> replica {i} pages present"),
            "at least the value's 4",
            pages.present().to_string(),
            pages.present() >= 4,
        );
    }
    // Over 32 MiB, so glibc maps it fresh (never reused heap): each clone
    // is made with the thread bound to its replica's node.
    let words = (33 << 20) / 8;
    let vector = Replicated::with_set(vec![1u64; words], set.clone(), Mode::Log)?;
    let buffers = vector.replica_pages_of(Sample::All, |v| (v.as_ptr().cast(), v.len() * 8))?;
    for (i, pages) in buffers.iter().enumerate() {
        all_on(
            out,
            format!("Replicated<Vec<u64>> replica {i} buffer (33 MiB)"),
            set.node(i),
            None,
            pages,
        );
    }
    drop(vector);
    let bytes = Replicated::bytes(set.clone(), Mode::Broadcast, &vec![3u8; 1 << 20])?;
    for region in bytes.regions() {
        let pages = locate::locate(region.ptr, region.len, Sample::All)?;
        all_on(
            out,
            format!("Replicated::bytes replica {} region", region.replica),
            region.node,
            Some(256),
            &pages,
        );
    }

    // A thread pinned on each CPU node reads its node's replica (a
    // memory-less node's: the nearest node's).
    for &node in cpu_nodes {
        let home = guest.preset.home_node(node);
        let (ran_on, (current, sum)) = guest.on_node(node, || {
            (set.current(), table.read(|t| t.iter().sum::<u64>()))
        })?;
        out.same(
            format!("a thread pinned on node {node} ran on"),
            node,
            ran_on,
        );
        out.same(
            format!("set.current() on node {node}: the replica of"),
            home,
            set.nodes().get(current).copied().unwrap_or(u32::MAX),
        );
        out.same(format!("read on node {node}"), 7 * 2048, sum);
    }
    for stats in table.stats() {
        let readers = cpu_nodes
            .iter()
            .filter(|&&n| guest.preset.home_node(n) == stats.node)
            .count();
        out.same(
            format!(
                "reads served by replica {} (node {})",
                stats.replica, stats.node
            ),
            readers,
            stats.reads,
        );
    }
    Ok(())
}

/// `ReplicatedPages`: from a thread on each CPU node, the first read of
/// every page is served by the master and copies it (`copy_after(1)`),
/// the second is local; the copies are on the reading node. A
/// memory-only node's replica gets copies only through `read_from`, and
/// they land on it.
fn pages(
    guest: &Guest,
    out: &mut Outcome,
    set: &ReplicaSet,
    cpu_nodes: &[u32],
    memory_only: &[u32],
) -> Result<()> {
    const PAGES: usize = 64;
    let data: Vec<u8> = (0..PAGES * PAGE).map(|i| (i % 251) as u8).collect();
    let options = PagesOptions::default()
        .copy_after(1)
        .min_free_bytes(16 << 20);
    let region = ReplicatedPages::new(&data, set.clone(), options)?;
    let read_twice = |node: u32| {
        guest.on_node(node, || -> Result<bool> {
            let mut buf = vec![0u8; data.len()];
            region.read(0, &mut buf)?;
            region.read(0, &mut buf)?;
            Ok(buf == data)
        })
    };
    let (with_memory, memoryless): (Vec<u32>, Vec<u32>) = cpu_nodes
        .iter()
        .partition(|&&n| guest.preset.home_node(n) == n);
    for &node in &with_memory {
        let (_, read) = read_twice(node)?;
        out.same(format!("bytes read on node {node}"), true, read?);
        let Some(replica) = replica_of(set, node) else {
            bail!("no replica on CPU node {node}");
        };
        let stats = &region.stats()[replica];
        out.same(
            format!("node {node}: (remote, local) page reads"),
            format!("({PAGES}, {PAGES})"),
            format!("({}, {})", stats.remote_reads, stats.local_reads),
        );
        out.same(format!("node {node}: copies"), PAGES, stats.copies);
    }
    // A memory-less node reads the copies its nearest node already made.
    for &node in &memoryless {
        let home = guest.preset.home_node(node);
        let Some(replica) = replica_of(set, home) else {
            bail!("no replica on node {home}, nearest to node {node}");
        };
        let before = region.stats()[replica].clone();
        let (_, read) = read_twice(node)?;
        out.same(format!("bytes read on node {node}"), true, read?);
        let after = &region.stats()[replica];
        out.same(
            format!("node {node} (no memory): (remote, local) reads on node {home}'s replica"),
            format!("(+0, +{})", 2 * PAGES),
            format!(
                "(+{}, +{})",
                after.remote_reads - before.remote_reads,
                after.local_reads - before.local_reads
            ),
        );
        out.same(
            format!("node {node} (no memory): new copies"),
            0,
            after.copies - before.copies,
        );
    }
    for &node in memory_only {
        let Some(replica) = replica_of(set, node) else {
            bail!("no replica on memory-only node {node}");
        };
        let before = region.stats()[replica].copies;
        out.same(
            format!("memory-only node {node}: copies before read_from"),
            0,
            before,
        );
        let mut buf = vec![0u8; data.len()];
        region.read_from(replica, 0, &mut buf)?;
        region.read_from(replica, 0, &mut buf)?;
        out.same(format!("memory-only node {node}: bytes"), true, buf == data);
        out.same(
            format!("memory-only node {node}: copies after read_from"),
            PAGES,
            region.stats()[replica].copies,
        );
    }
    for (i, pages) in region.replica_pages()?.iter().enumerate() {
        all_on(
            out,
            format!("ReplicatedPages replica {i} copies"),
            set.node(i),
            Some(PAGES as u64),
            pages,
        );
    }
    Ok(())
}

/// A budget of 4 pages per replica: reading 16 pages from one node copies
/// the first 4, then the budget refuses copies (those reads are served by
/// the master, and each refusal evicts a cold copy for a later one), so
/// at most 4 copies and 4 pages of copy memory are ever there, on the
/// node.
fn budget(guest: &Guest, out: &mut Outcome, set: &ReplicaSet, node: u32) -> Result<()> {
    const PAGES: usize = 16;
    const BUDGET: u64 = 4;
    let data = vec![9u8; PAGES * PAGE];
    let options = PagesOptions::default()
        .copy_after(1)
        .budget_per_replica(Some(BUDGET * PAGE as u64))
        .min_free_bytes(16 << 20);
    let region = ReplicatedPages::new(&data, set.clone(), options)?;
    let (_, read) = guest.on_node(node, || -> Result<bool> {
        let mut buf = vec![0u8; data.len()];
        region.read(0, &mut buf)?;
        Ok(buf == data)
    })?;
    out.same("budget: bytes read", true, read?);
    let Some(replica) = replica_of(set, node) else {
        bail!("no replica on CPU node {node}");
    };
    let stats = &region.stats()[replica];
    out.check(
        "budget: copies made before the budget was reached",
        format!(">= {BUDGET}"),
        stats.copies_made,
        stats.copies_made >= BUDGET,
    );
    out.check(
        format!("budget {BUDGET} pages: copies on node {node} now"),
        format!("<= {BUDGET}"),
        stats.copies,
        stats.copies <= BUDGET,
    );
    out.check(
        "budget: copy memory resident",
        format!("<= {} bytes", BUDGET * PAGE as u64),
        stats.resident_bytes,
        stats.resident_bytes <= BUDGET * PAGE as u64,
    );
    // Every page was read once, remotely: each read made a copy or was
    // refused one.
    out.same(
        "budget: copies made + refused (one per page read)",
        PAGES,
        stats.copies_made + stats.copy_failures,
    );
    out.check(
        "budget: copies refused",
        "> 0",
        stats.copy_failures,
        stats.copy_failures > 0,
    );
    out.note(format!(
        "budget: {} copies made, {} refused, {} evicted, {} left",
        stats.copies_made, stats.copy_failures, stats.evicted, stats.copies
    ));
    let pages = &region.replica_pages()?[replica];
    all_on(
        out,
        "budget: the copies' pages",
        node,
        Some(stats.copies),
        pages,
    );
    Ok(())
}

/// `numalab run` of the deck's Experiment 2 miniature with `replicate`,
/// one thread per CPU node, with the engine's copies and through the
/// library's log mode: a copy on every CPU node (none on memory-only
/// ones), each thread reading its node's copy, every copy's pages on its
/// node.
fn engine(guest: &Guest, out: &mut Outcome, cpu_nodes: &[u32]) -> Result<()> {
    let file = std::env::temp_dir().join("emu-deck-exp2-small.toml");
    fs::write(
        &file,
        include_str!("../../../../examples/deck-exp2-small.toml"),
    )?;
    let file = file.to_string_lossy().into_owned();
    let threads = format!("threads.count={}", cpu_nodes.len());
    // A copy where each thread's memory is: its node's, or for a
    // memory-less node the nearest node's.
    let homes: Vec<u32> = cpu_nodes
        .iter()
        .map(|&n| guest.preset.home_node(n))
        .collect::<numalab::NodeSet>()
        .iter()
        .collect();
    let expected_nodes = format!("{homes:?}");
    for replication in ["copies", "log"] {
        let mode = format!("memory.replication={replication}");
        let args = [
            "run",
            &file,
            "--set",
            "memory.policy=replicate",
            "--set",
            &mode,
            "--set",
            &threads,
            "--set",
            "memory.size=4MiB",
            "--set",
            "access.ops=20000",
            "--set",
            "run.repeats=1",
            "--set",
            "run.warmup=0",
            "--set",
            "run.counters=false",
            "--json",
        ];
        let result = super::run::run_result(guest, &args)?;
        let what = |s: &str| format!("run {replication}: {s}");
        let plan_copies: Vec<u32> = result
            .plan
            .regions
            .first()
            .map(|r| r.replicas.clone())
            .unwrap_or_default();
        out.same(
            what("copies planned on"),
            &expected_nodes,
            format!("{plan_copies:?}"),
        );
        let copies = result
            .regions
            .first()
            .map(|r| r.replicas.clone())
            .unwrap_or_default();
        out.same(what("copies checked"), homes.len(), copies.len());
        for copy in &copies {
            let found = Pages::found(&copy.audit.found);
            out.same(
                what(&format!("copy {} pages", copy.replica)),
                Pages::on(copy.node, 1024),
                &found,
            );
            out.same(
                what(&format!("copy {} as_requested", copy.replica)),
                true,
                copy.as_requested,
            );
        }
        for (i, &node) in cpu_nodes.iter().enumerate() {
            let thread = result.plan.threads.get(i);
            out.same(
                what(&format!("thread {i}'s node")),
                node,
                thread.map_or(u32::MAX, |t| t.node),
            );
            let copy = thread.and_then(|t| t.replica).unwrap_or(usize::MAX);
            out.same(
                what(&format!("thread {i} reads the copy on node")),
                guest.preset.home_node(node),
                plan_copies.get(copy).copied().unwrap_or(u32::MAX),
            );
            let ran = result.repeats.first().and_then(|r| r.threads.get(i));
            out.same(
                what(&format!("thread {i} ran on node")),
                node,
                ran.map_or(u32::MAX, |t| t.node),
            );
        }
        // 9 reads to 1 write, in each thread's share of the 20000.
        let mix: numalab_bench::kernels::Mix = "9:1".parse().map_err(anyhow::Error::msg)?;
        let expected: u64 = result
            .plan
            .threads
            .iter()
            .map(|t| mix.writes_in(t.ops.unwrap_or(0)))
            .sum();
        let writes = result.repeats.first().map_or(0, |r| r.writes);
        out.same(
            what("writes (9:1 of each thread's share of 20000)"),
            expected,
            writes,
        );
        let odd: Vec<&str> = result
            .warnings
            .iter()
            .filter(|w| matches!(w.kind, WarningKind::Placement | WarningKind::Inconclusive))
            .map(|w| w.message.as_str())
            .collect();
        if homes.len() == 1 {
            // One copy cannot help, and numalab must say so.
            let says = "replication cannot help on one node";
            out.check(
                what("placement or inconclusive warnings"),
                format!("one, saying {says:?}"),
                format!("{odd:?}"),
                odd.len() == 1 && odd[0].contains(says),
            );
        } else {
            out.same(
                what("placement or inconclusive warnings"),
                "[]",
                format!("{odd:?}"),
            );
        }
    }
    Ok(())
}
