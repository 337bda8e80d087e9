//! `numalab fincore`: how much of each file is in the page cache, per
//! node ([`numalab_bench::fincore`]); its tables are in
//! `render/fincore.rs`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use numalab_bench::fincore::{fincore, Unreadable};

use crate::output::{Format, OutputArgs};
use crate::render;

/// How much of each file is in the page cache, and on which node: util-linux
/// fincore's RES, PAGES and SIZE with a column per node, without reading
/// anything from the files; directories are walked
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    numalab fincore /data/table.bin             one file: its cached pages per node\n  \
    numalab fincore /var/lib/postgresql         every file under a directory, and a total\n  \
    numalab fincore --json big.dat > cache.json\n\n\
The counts are fincore's (mincore(2) on the file); the node of each cached page comes from \
move_pages(2) after mapping only the cached pages, so nothing is read from disk. Inside a \
directory, symbolic links are not followed and FIFOs, devices and sockets are passed over \
(the table says how many). A file that cannot be read is named on standard error and the \
exit status is 1, as fincore's; the others are still counted.")]
pub struct FincoreArgs {
    /// Files and directories (walked, depth first)
    #[arg(value_name = "PATH", required = true)]
    pub paths: Vec<PathBuf>,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Runs `numalab fincore`; returns the exit status: 1 when some path
/// could not be counted.
pub fn run(args: &FincoreArgs) -> Result<i32> {
    args.output.check()?;
    let report = fincore(&args.paths)?;
    render::emit(&report, &args.output)?;
    say_failures(&args.output, &report.failed);
    Ok(i32::from(!report.failed.is_empty()))
}

/// Paths that could not be counted or changed, on standard error, as
/// fincore's; `emit` already repeats them there for every output but a
/// table on standard output.
pub fn say_failures(output: &OutputArgs, failed: &[Unreadable]) {
    if output.format() == Format::Table && output.output.is_none() {
        for failed in failed {
            eprintln!("numalab: {}", crate::output::printable(&failed.to_string()));
        }
    }
}
