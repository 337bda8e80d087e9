//! `numalab topo`: what `numactl --hardware`, `lstopo` and
//! `likwid-topology` show, in one place.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use numalab_bench::topo::TopoReport;

use crate::output::OutputArgs;
use crate::render;

/// Show NUMA nodes, CPUs, memory, distances, HMAT, caches, nearby devices
/// and the kernel settings that change NUMA results
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    numalab topo                          this machine\n  \
    numalab topo --json | jq .topology.nodes   machine-readable\n  \
    numalab topo --xml server.xml         a topology exported on another machine with `lstopo --of xml`\n  \
    numalab topo --synthetic \"pack:2 numa:2 core:4 pu:2\"")]
pub struct TopoArgs {
    /// Show a topology exported elsewhere with `lstopo --of xml FILE`
    #[arg(long, value_name = "FILE", conflicts_with = "synthetic")]
    pub xml: Option<PathBuf>,

    /// Show an hwloc synthetic topology, e.g. "pack:2 numa:2 core:4 pu:2"
    #[arg(long, value_name = "DESCRIPTION")]
    pub synthetic: Option<String>,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Gathers the report.
pub fn report(args: &TopoArgs) -> Result<TopoReport> {
    let topology = crate::args::topology(args.xml.as_ref(), args.synthetic.as_deref())?;
    Ok(TopoReport::gather(topology))
}

/// Runs `numalab topo`.
pub fn run(args: &TopoArgs) -> Result<()> {
    args.output.check()?;
    render::emit(&report(args)?, &args.output)
}
