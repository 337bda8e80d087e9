//! `numalab pagecache load|drop`: put a file's page cache on a node, or
//! drop it, and show where its pages are before and after
//! ([`numalab_bench::fincore::change_cache`]); tables in
//! `render/pagecache.rs`.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};
use numalab_bench::fincore::{change_cache, CacheAction};

use crate::output::OutputArgs;
use crate::render;

/// Place a file's page cache on a node, or drop it; shows each file's
/// cached pages per node before and after
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    numalab pagecache load /data/table.bin --node 1             read it so its pages are cached on node 1\n  \
    numalab pagecache load /data/table.bin --node 1 --drop-first  move a cache that sits elsewhere\n  \
    numalab pagecache drop /data/table.bin                       evict its clean pages\n\n\
load reads each file from a thread whose memory policy prefers the node (another node when it is \
full), so the pages the read brings in are cached there; pages already cached elsewhere stay \
there (the kernel does not move cached pages): the table shows them, and --drop-first drops \
the file's cache before reading. drop asks the kernel to evict (POSIX_FADV_DONTNEED): clean \
pages no process maps leave the cache, dirty ones stay until written and are named. See also \
numalab fincore.")]
pub struct PagecacheArgs {
    #[command(subcommand)]
    pub action: Action,
}

/// `load` or `drop`.
#[derive(Debug, Subcommand)]
pub enum Action {
    /// Read files so their pages are cached on a node
    Load {
        /// The files
        #[arg(value_name = "FILE", required = true)]
        files: Vec<PathBuf>,
        /// The node whose memory should hold the cache
        #[arg(long, short = 'N', value_name = "NODE")]
        node: u32,
        /// Drop each file's cache first, so pages cached elsewhere move
        #[arg(long)]
        drop_first: bool,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Evict files' clean pages from the page cache
    Drop {
        /// The files
        #[arg(value_name = "FILE", required = true)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        output: OutputArgs,
    },
}

/// Runs `numalab pagecache`; exit status 1 when a file could not be
/// changed.
pub fn run(args: &PagecacheArgs) -> Result<i32> {
    let (files, output) = match &args.action {
        Action::Load { files, output, .. } | Action::Drop { files, output } => (files, output),
    };
    output.check()?;
    let change = match args.action {
        Action::Load {
            node, drop_first, ..
        } => {
            if drop_first {
                change_cache(files, CacheAction::Drop)?;
            }
            change_cache(files, CacheAction::Load { node })?
        }
        Action::Drop { .. } => change_cache(files, CacheAction::Drop)?,
    };
    render::emit(&change, output)?;
    super::fincore::say_failures(output, &change.failed);
    Ok(i32::from(!change.failed.is_empty()))
}
