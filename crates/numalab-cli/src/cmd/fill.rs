//! `numalab fill`: allocate and touch memory under a policy, then show
//! where it landed per node — the field reports' question "does an
//! allocation larger than one node's free memory spill to the other node
//! (or go to swap)?", answered as `numastat -p` would.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use numalab::audit::PlacementAudit;
use numalab::locate::{ProcessMemory, Sample};
use numalab::system::{Environment, KernelSettings, NodeMemory};
use numalab::units::Size;
use numalab::{
    affinity, BufferOptions, CpuSet, HugePages, InterleaveWeights, MemPolicy, NodeBuffer, NodeSet,
    Topology,
};
use serde::Serialize;

use crate::output::{self, mib, Csv, Format, OutputArgs};
use crate::placement::PlacementArgs;

/// Allocate and touch SIZE bytes under a memory policy, then show where
/// the pages landed per node (numastat -p's split), numa_balancing's
/// state, and each node's free memory before and after
#[derive(Debug, Args)]
#[command(
    after_help = "A --membind that the bound nodes' free memory cannot hold is refused before \
anything is allocated; other policies fall back to other nodes when their first choice is full, \
and the table shows how much did.\n\n\
Examples:\n  \
  numalab fill --size 1.5G                       default policy: local node first, then the nearest\n  \
  numalab fill --size 1.5G -N 1 --preferred=1    prefer node 1, spill when it is full\n  \
  numalab fill --size 1.5G --membind=1           refused if node 1 lacks 1.5 GiB free\n  \
  numalab fill --size 512M --interleave=all --json"
)]
pub struct FillArgs {
    /// How much to allocate: 4096, 64K, 512M, 1.5G (binary units)
    #[arg(long, short = 's', value_name = "SIZE", value_parser = crate::args::size)]
    pub size: u64,

    /// Page size: none (base pages), thp (transparent huge pages), 2M
    /// (hugetlb pool)
    #[arg(long, value_name = "KIND", default_value = "none")]
    pub huge_pages: HugePages,

    #[command(flatten)]
    pub placement: PlacementArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// One node's share of the filled memory.
#[derive(Debug, Serialize)]
pub struct FillNode {
    /// The node.
    pub node: u32,
    /// Bytes of the buffer on it.
    pub bytes: u64,
    /// Share of the buffer's present pages on it, 0 to 1.
    pub share: f64,
    /// Free memory before the fill, in bytes.
    pub free_before: Option<u64>,
    /// Free memory after the fill (the buffer still held), in bytes.
    pub free_after: Option<u64>,
}

/// The `numalab.fill` JSON document.
#[derive(Debug, Serialize)]
pub struct FillReport {
    /// Bytes asked for.
    pub size_bytes: u64,
    /// The policy (`default` when none was given).
    pub policy: MemPolicy,
    /// The CPUs the filling thread was bound to, if any.
    pub cpus: Option<CpuSet>,
    /// The node of the CPU that touched the pages (what `default` and
    /// `local` follow).
    pub thread_node: NodeSet,
    /// Page size asked for.
    pub huge_pages: HugePages,
    /// `/proc/sys/kernel/numa_balancing` during the fill.
    pub numa_balancing: Option<u32>,
    /// Transparent huge pages setting.
    pub thp_enabled: Option<String>,
    /// Time to map and touch every page, in seconds.
    pub seconds: f64,
    /// Where every page of the buffer is (move_pages).
    pub pages: numalab::locate::PageHistogram,
    /// Per node: the buffer's bytes, share and free memory.
    pub nodes: Vec<FillNode>,
    /// The whole process's private memory per node at the end, as
    /// `numastat -p` counts it (the buffer plus numalab itself).
    pub process_bytes: BTreeMap<u32, u64>,
    /// Bytes that fell back to nodes other than the policy's first choice.
    pub fallback_bytes: u64,
    /// The pages against the policy.
    pub audit: PlacementAudit,
    /// Where this was measured.
    pub environment: Environment,
}

/// Schema version of `numalab.fill`.
pub const SCHEMA_VERSION: u32 = 1;

/// Runs `numalab fill`.
pub fn run(args: &FillArgs) -> Result<()> {
    let topology = Topology::system()?;
    let placement = args.placement.resolve(&topology)?;
    let _weights = match &placement.weights {
        Some(weights) => Some(InterleaveWeights::set(weights)?),
        None => None,
    };
    if let Some(cpus) = &placement.cpus {
        affinity::bind_thread_to_cpus(cpus)?;
    }
    let policy = placement.policy.clone().unwrap_or(MemPolicy::Default);
    let free = |topology: &Topology| -> BTreeMap<u32, u64> {
        topology
            .nodes
            .iter()
            .filter_map(|n| NodeMemory::read(n.id).ok().map(|m| (n.id, m.free_bytes)))
            .collect()
    };
    let free_before = free(&topology);
    let kernel = KernelSettings::current();

    let size =
        usize::try_from(args.size).context("--size does not fit this machine's addresses")?;
    let started = Instant::now();
    let buffer = NodeBuffer::with_options(
        size,
        BufferOptions::new(policy.clone()).huge_pages(args.huge_pages),
    )
    .with_context(|| format!("cannot fill {} under {policy}", Size(args.size)))?;
    let seconds = started.elapsed().as_secs_f64();

    let pages = buffer.locate(Sample::All)?;
    let placement_audit = buffer.audit_pages(&pages);
    let process_bytes = ProcessMemory::of_process(std::process::id() as i32)
        .map(|m| m.private_per_node())
        .unwrap_or_default();
    let free_after = free(&topology);
    let present = pages.present().max(1);
    let nodes: Vec<FillNode> = topology
        .nodes
        .iter()
        .map(|n| FillNode {
            node: n.id,
            bytes: pages.on_node(n.id) * pages.page_size,
            share: pages.on_node(n.id) as f64 / present as f64,
            free_before: free_before.get(&n.id).copied(),
            free_after: free_after.get(&n.id).copied(),
        })
        .collect();
    let fallback_pages = pages.present() - pages.on_nodes(&placement_audit.expected_nodes);
    let report = FillReport {
        size_bytes: args.size,
        policy,
        cpus: placement.cpus.clone(),
        thread_node: buffer.touched_from().clone(),
        huge_pages: args.huge_pages,
        numa_balancing: kernel.numa_balancing,
        thp_enabled: kernel.thp_enabled.clone(),
        seconds,
        fallback_bytes: fallback_pages * pages.page_size,
        pages,
        nodes,
        process_bytes,
        audit: placement_audit,
        environment: Environment::current(&topology),
    };
    drop(buffer);
    let text = match args.output.format() {
        Format::Json => output::to_json("numalab.fill", SCHEMA_VERSION, &report)?,
        Format::Csv => csv(&report),
        Format::Table | Format::Markdown => human(&report),
    };
    args.output.emit(&text)
}

fn balancing(state: Option<u32>) -> String {
    match state {
        Some(0) => "off".into(),
        Some(1) => "on".into(),
        Some(v) => format!("mode {v}"),
        None => "not in this kernel".into(),
    }
}

fn human(report: &FillReport) -> String {
    let mut out = String::new();
    let thread = match &report.cpus {
        Some(cpus) => format!("thread on CPUs {cpus} (node {})", report.thread_node),
        None => format!("thread on node {}", report.thread_node),
    };
    let _ = writeln!(
        out,
        "numalab fill: {} under {}, {thread}; numa_balancing {}, transparent huge pages {}",
        Size(report.size_bytes),
        report.policy,
        balancing(report.numa_balancing),
        report.thp_enabled.as_deref().unwrap_or("?"),
    );
    let _ = writeln!(out, "allocated and touched in {:.2} s\n", report.seconds);
    let mut table = output::table(vec![
        "node".to_string(),
        "filled MiB".into(),
        "share".into(),
        "free before MiB".into(),
        "free after MiB".into(),
    ]);
    for node in &report.nodes {
        table.add_row(vec![
            node.node.to_string(),
            mib(node.bytes),
            format!("{:.1}%", 100.0 * node.share),
            node.free_before.map_or("?".into(), mib),
            node.free_after.map_or("?".into(), mib),
        ]);
    }
    out.push_str(&output::render(&table));
    let process = report
        .process_bytes
        .iter()
        .map(|(n, b)| format!("node{n} {}", mib(*b)))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(
        out,
        "\nprocess private memory per node, MiB (numastat -p): {process}"
    );
    if report.pages.not_present > 0 {
        let _ = writeln!(
            out,
            "{} pages are not in memory (swapped out)",
            report.pages.not_present
        );
    }
    if report.fallback_bytes > 0 {
        let _ = writeln!(
            out,
            "{} ({:.1}%) fell back beyond node {}",
            Size(report.fallback_bytes),
            100.0 * report.fallback_bytes as f64 / report.size_bytes.max(1) as f64,
            report.audit.expected_nodes
        );
    }
    let _ = writeln!(out, "placement: {}", report.audit.note);
    out
}

fn csv(report: &FillReport) -> String {
    let mut csv = Csv::new(&["node", "bytes", "share", "free_before", "free_after"]);
    for node in &report.nodes {
        csv.row([
            node.node.to_string(),
            node.bytes.to_string(),
            format!("{:.4}", node.share),
            node.free_before.map_or(String::new(), |b| b.to_string()),
            node.free_after.map_or(String::new(), |b| b.to_string()),
        ]);
    }
    csv.finish()
}
