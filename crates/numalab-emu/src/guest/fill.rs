//! The fill test from the field reports, with `numalab fill`: more than a
//! node's free memory, under `default` (numa_balancing on and off) and
//! `preferred`, spills onto the nearest other node; under `bind`, numalab
//! refuses before allocating.

use anyhow::Result;
use numalab::audit::Verdict;
use numalab::system::NodeMemory;
use numalab::NodeSet;
use numalab_bench::fill::FillReport;

use super::{Balancing, Guest, Outcome};

const MIB: u64 = 1 << 20;

/// The fill: which node, how much.
struct Plan {
    /// The node with CPUs and memory with the least free memory.
    node: u32,
    /// Its free memory before the fill.
    free: u64,
    /// The nodes the spill should go to: the other nodes with memory
    /// nearest to `node` (several when the SLIT ties them, as within an
    /// SNC package).
    nearest: NodeSet,
    /// Bytes to fill: the node's free memory and a quarter more (at least
    /// 64 MiB), within half of what each nearest node has free.
    size: u64,
}

fn plan(guest: &Guest) -> Result<Option<Plan>> {
    let preset = &guest.preset;
    let free = |n: u32| NodeMemory::read(n).map(|m| m.free_bytes);
    let memory = preset.memory_nodes();
    let mut best: Option<(u32, u64)> = None;
    for node in preset.cpu_nodes().intersection(&memory).iter() {
        let bytes = free(node)?;
        if best.is_none_or(|(_, b)| bytes < b) {
            best = Some((node, bytes));
        }
    }
    let Some((node, node_free)) = best else {
        return Ok(None);
    };
    let others = memory.difference(&NodeSet::single(node));
    let nearest = preset.nearest(node, &others);
    if nearest.is_empty() {
        return Ok(None);
    }
    let mut room = u64::MAX;
    for n in nearest.iter() {
        room = room.min(free(n)? / 2);
    }
    let spill = (node_free / 4).max(64 * MIB).min(room);
    if spill < 16 * MIB {
        return Ok(None);
    }
    Ok(Some(Plan {
        node,
        free: node_free,
        nearest,
        size: (node_free + spill) / MIB * MIB,
    }))
}

fn fill(guest: &Guest, flags: &[String]) -> Result<FillReport> {
    let mut args = vec!["fill", "--json"];
    args.extend(flags.iter().map(String::as_str));
    guest.numalab_result(&args)
}

/// default (numa_balancing on, then off) and preferred: the node fills
/// first, the rest goes to the nearest node by the preset's distances.
pub fn spill(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let Some(plan) = plan(guest)? else {
        out.not_applicable("the preset has one node with memory: nothing to spill to");
        return Ok(());
    };
    let size = format!("{}M", plan.size / MIB);
    out.note(format!(
        "node {} had {} MiB free; filling {size} (spill to node {})",
        plan.node,
        plan.free / MIB,
        plan.nearest
    ));
    let cases = [
        (
            "default, numa_balancing on",
            "1",
            vec![format!("--cpunodebind={}", plan.node)],
        ),
        (
            "default, numa_balancing off",
            "0",
            vec![format!("--cpunodebind={}", plan.node)],
        ),
        ("preferred", "1", vec![format!("--preferred={}", plan.node)]),
    ];
    for (label, balancing, mut flags) in cases {
        let _balancing = Balancing::set(balancing)?;
        flags.push(format!("--size={size}"));
        let report = fill(guest, &flags)?;
        let pages = &report.pages;
        let page = pages.page_size;
        let present = pages.present();
        out.same(
            format!("{label}: numa_balancing in the report"),
            balancing,
            report
                .numa_balancing
                .map_or("missing".to_owned(), |b| b.to_string()),
        );
        out.same(format!("{label}: pages present"), pages.queried, present);
        let on_node = pages.on_node(plan.node);
        let spilled = present - on_node;
        // The node fills to near its low watermark before anything spills.
        let floor = plan.free / page * 8 / 10;
        out.check(
            format!("{label}: pages on node {} (filled first)", plan.node),
            format!(">= {floor} (80% of its free memory)"),
            on_node,
            on_node >= floor,
        );
        out.check(
            format!("{label}: pages spilled"),
            "> 0",
            spilled,
            spilled > 0,
        );
        let on_nearest = pages.on_nodes(&plan.nearest);
        out.check(
            format!("{label}: spilled pages on nodes {} (nearest)", plan.nearest),
            format!(">= {} (99% of the spill)", spilled * 99 / 100),
            on_nearest,
            on_nearest >= spilled * 99 / 100,
        );
        out.same(
            format!("{label}: audit"),
            format!("{:?}", Verdict::Spilled),
            format!("{:?}", report.audit.verdict),
        );
        out.same(
            format!("{label}: fallback_bytes"),
            spilled * page,
            report.fallback_bytes,
        );
    }
    Ok(())
}

/// `--membind` to the node with more than its free memory: refused before
/// anything is allocated, naming the node and its free memory.
pub fn bind_refused(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let Some(plan) = plan(guest)? else {
        out.not_applicable("the preset has one node with memory: nothing to spill to");
        return Ok(());
    };
    let size = format!("{}M", plan.size / MIB);
    let ran = guest.numalab(&[
        "fill",
        &format!("--membind={}", plan.node),
        &format!("--size={size}"),
    ])?;
    let after = NodeMemory::read(plan.node)?.free_bytes;
    out.same("exit status", "Some(1)", format!("{:?}", ran.code));
    let error = ran.stderr.trim().to_owned();
    out.check(
        "error",
        format!("names node {} and its free memory", plan.node),
        &error,
        error.contains(&format!("requested on node {}, which has", plan.node))
            && error.contains("MiB) free"),
    );
    out.check(
        format!("node {} free memory after the refusal", plan.node),
        format!("about {} MiB (nothing allocated)", plan.free / MIB),
        format!("{} MiB", after / MIB),
        after + 32 * MIB >= plan.free,
    );
    out.same("nothing on standard output", "", ran.stdout.trim());
    Ok(())
}
