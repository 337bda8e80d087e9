//! `numalab fincore`: how much of each file is in the page cache, per
//! node ([`numalab_bench::fincore`]); its tables are in
//! `render/fincore.rs`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use numalab_bench::fincore::{self as engine, FincoreOptions, MAX_THREADS};

use crate::output::OutputArgs;
use crate::render;

/// How much of each file is in the page cache, and on which node: util-linux
/// fincore's RES, PAGES and SIZE with a column per node, without reading
/// anything from the files; directories are walked
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    numalab fincore /data/table.bin             one file: its cached pages per node\n  \
    numalab fincore /var/lib/postgresql         every file under a directory, and a total\n  \
    numalab fincore -s /var/lib/postgresql/*    one row per directory or file given, its files added up\n  \
    numalab fincore --json big.dat > cache.json\n\n\
The counts are fincore's (mincore(2); cachestat(2) for a part wholly cached); the node of each cached page comes from \
its page frame (as root) or move_pages(2) after mapping only the cached pages, so nothing is \
read from disk. Mapping costs more than mincore(2), so files, and parts of a file over 512 MiB, \
are shared among threads (--threads). Inside a \
directory, symbolic links are not followed and FIFOs, devices and sockets are passed over \
(the table says how many). A file that cannot be read is named on standard error and the \
exit status is 1, as fincore's; the others are still counted.")]
pub struct FincoreArgs {
    /// Files and directories (walked, depth first)
    #[arg(value_name = "PATH", required = true)]
    pub paths: Vec<PathBuf>,

    /// Threads counting at once, files or parts of a large file [default:
    /// the CPUs numalab may use, at most 8]; 1 counts as fincore does, on
    /// one CPU
    #[arg(long, value_name = "N", value_parser = threads)]
    pub threads: Option<usize>,

    /// One row per PATH, its files added up (as du -s), not one per file
    #[arg(short = 's', long)]
    pub summarize: bool,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// `--threads N`: 1 to [`MAX_THREADS`].
fn threads(text: &str) -> Result<usize, String> {
    text.parse()
        .ok()
        .filter(|n| (1..=MAX_THREADS).contains(n))
        .ok_or_else(|| format!("give 1 to {MAX_THREADS} threads, not \"{text}\""))
}

/// Runs `numalab fincore`; returns the exit status: 1 when some path
/// could not be counted.
pub fn run(args: &FincoreArgs) -> Result<i32> {
    args.output.check()?;
    crate::output::not_over_paths(args.output.file(), &args.paths)?;
    let mut options = FincoreOptions::default();
    if let Some(threads) = args.threads {
        options.threads = threads;
    }
    options.summarize = args.summarize;
    let report = engine::run_with(&args.paths, options)?;
    if !render::fincore::nothing_counted(&args.output, report.files.is_empty(), &report.failed) {
        render::emit(&report, &args.output)?;
    }
    render::fincore::say_failures(&args.output, &report.failed);
    Ok(i32::from(!report.failed.is_empty()))
}
