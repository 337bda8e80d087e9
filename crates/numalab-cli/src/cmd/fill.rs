//! `numalab fill`: allocate and touch memory under a policy, then show
//! where it landed per node — the field reports' question "does an
//! allocation larger than one node's free memory spill to the other node
//! (or go to swap)?", answered as `numastat -p` would. The fill itself is
//! [`numalab_bench::fill`]; its tables are in `render/fill.rs`.

use anyhow::{Context, Result};
use clap::Args;
use numalab::{HugePages, MemPolicy, Topology};
use numalab_bench::control::Control;
use numalab_bench::fill::{self as engine, FillConfig};

use crate::output::OutputArgs;
use crate::placement::PlacementArgs;
use crate::render;
use crate::signals::Interrupts;

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

/// Runs `numalab fill`; returns the exit status (128 + the signal when
/// Ctrl-C, SIGTERM or SIGHUP arrived: the fill is finished, the weights
/// restored and the report written first).
pub fn run(args: &FillArgs) -> Result<i32> {
    args.output.check()?;
    // A signal waits until the pages are counted (the fill's guard then
    // restores the weights) and is caught after: a watcher thread during
    // the fill would change how NUMA balancing scans the process, and the
    // pages it counts.
    let held = numalab::system::SignalsHeld::new().context("holding back signals")?;
    let topology = Topology::system()?;
    let placement = args.placement.resolve(&topology)?;
    let config = FillConfig {
        size: args.size,
        huge_pages: args.huge_pages,
        policy: placement.policy.unwrap_or(MemPolicy::Default),
        cpus: placement.cpus,
        weights: placement.weights,
    };
    let report = engine::run(&topology, &config);
    let interrupts = Interrupts::catch(&Control::new())?;
    let waited = held.pending();
    drop(held);
    let report = report?;
    render::emit(&report, &args.output)?;
    Ok(waited
        .map(crate::exit::after_signal)
        .or_else(|| interrupts.exit_status())
        .unwrap_or(0))
}
