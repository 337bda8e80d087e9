//! `numalab pagecache load|drop`: put a file's page cache on a node, or
//! drop it, and show where its pages are before and after
//! ([`numalab_bench::pagecache::change`]); `numalab pagecache bench`:
//! the mailing-list post's concurrent readers of a cached file
//! ([`numalab_bench::pagecache`]). Tables in `render/pagecache.rs`.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};
use numalab::Topology;
use numalab_bench::experiment::values::Seconds;
use numalab_bench::pagecache::{
    self as bench, BenchConfig, CopyConfig, FileSource, Method, ReaderPlace,
};
use numalab_bench::pagecache::{change, change_with, CacheAction, ChangeError};

use crate::flags::{self, Flags};
use crate::output::OutputArgs;
use crate::render;
use crate::signals::{control_for_terminal, Interrupts};

/// Place a file's page cache on a node, or drop it, showing its cached
/// pages per node before and after; or time concurrent readers of a
/// cached file on its node and on another (bench)
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    numalab pagecache load /data/table.bin --node 1             read it so its pages are cached on node 1\n  \
    numalab pagecache load /data/table.bin --node 1 --drop-first  move a cache that sits elsewhere\n  \
    numalab pagecache drop /data/table.bin                       evict its clean pages\n  \
    numalab pagecache bench --readers 1,5 --stagger 1s           readers of a cached file, same node and other\n  \
    numalab pagecache bench --layout post                        the mailing-list post's table\n\n\
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
    /// Concurrent readers of a cached file, on the cache's node and on
    /// another: time to the last reader, GB/s, remote/local beside SLIT
    Bench(BenchArgs),
}

/// `numalab pagecache bench`'s flags.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    numalab pagecache bench                                  1 GiB file, 1 reader on the cache's node and on another\n  \
    numalab pagecache bench --readers 1,5,10 --stagger 1s --group 5\n  \
    numalab pagecache bench /data/table.bin --cache-node 1 --reader-node 0,1\n  \
    numalab pagecache bench --mmap --block-size 1M\n  \
    numalab pagecache bench --layout post --json > post.json\n  \
    numalab pagecache bench --readers 1,2 --replicate --write-every 10ms\n\n\
Without FILE, numalab writes an unnamed file of --size bytes in --dir from a thread on the \
cache's node, flushes it and reads that; no name ever reaches it, so nothing is left behind \
however the run ends. A FILE is only read: its cache is dropped and read in again on the \
cache node when it is not all there already. Each reader is a thread pinned to its own CPU \
(as `taskset -c CPU dd if=FILE of=/dev/null bs=8K`), with its buffer on its node; groups of \
--group readers start --stagger apart; the figure is the time from the first start until the \
last reader finished (the median of --repeats runs). remote/local divides the other node's \
time by the cache node's, beside SLIT/10 and the ratio of plain memory reads from one CPU \
(numalab matrix's read kernel). The cache's pages are counted per node before and after each \
cell: mapped reads under NUMA balancing can move them. With --replicate each cell runs again \
with its readers reading through copies of the file on their node (numalab's ReplicatedFile): \
the first repeat makes the copies, the later ones read them; the copies table shows the gain \
over reading the shared cache, the memory the copies took (the kernel's count of their pages) \
and how many were made. Ctrl-C stops at the next block, writes \
the cells that finished and exits 130.")]
pub struct BenchArgs {
    /// The file to read (default: a new unnamed one of --size bytes)
    #[arg(value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Size of the file numalab writes (binary units; at most 1 TiB)
    #[arg(long, default_value = "1G", value_name = "BYTES", value_parser = crate::args::size, conflicts_with = "file")]
    pub size: u64,
    /// Directory of the file numalab writes (its file system matters: on
    /// tmpfs the file's memory is the cache)
    #[arg(long, value_name = "DIR", default_value_os_t = std::env::temp_dir(), conflicts_with = "file")]
    pub dir: PathBuf,
    /// The node whose memory holds the file's cache (default: the first
    /// node with memory and CPUs)
    #[arg(long, value_name = "NODE")]
    pub cache_node: Option<u32>,
    /// Reader counts, a row each (1 to 1024)
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1",
        value_name = "N[,N…]"
    )]
    pub readers: Vec<usize>,
    /// Where readers run: same (the cache's node), other (the nearest
    /// other node with CPUs) or a node number; a column each (default:
    /// same, and other where there is one)
    #[arg(long, value_delimiter = ',', value_name = "same|other|NODE[,…]")]
    pub reader_node: Vec<ReaderPlace>,
    /// Between the starts of two groups of readers (`1s`, `250ms`; at most
    /// 60s; default: all start together)
    #[arg(long, value_name = "DURATION")]
    pub stagger: Option<Seconds>,
    /// Readers per group
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub group: usize,
    /// Bytes per read (`8K` as the post's dd; 1 byte to 1 GiB)
    #[arg(long, default_value = "8K", value_name = "BYTES", value_parser = crate::args::size)]
    pub block_size: u64,
    /// Read through a shared read-only mapping instead of read(2)
    #[arg(long)]
    pub mmap: bool,
    /// Timed runs per cell; figures are medians (1 to 100)
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub repeats: usize,
    /// Allow more readers than the node has CPUs (they share CPUs)
    #[arg(long)]
    pub oversubscribe: bool,
    /// Skip measuring plain memory's remote/local read bandwidth
    #[arg(long)]
    pub no_matrix: bool,
    /// Also run every cell with its readers reading through per-node
    /// copies of the file (made on the first read on their node, stale
    /// before a write lands, given back when the node's memory runs low)
    /// and show the gain over the shared cache, the memory the copies
    /// took and how many were made
    #[arg(long)]
    pub replicate: bool,
    /// Bytes per copy (a power of two from the page size to 1 GiB)
    #[arg(long, default_value = "64K", value_name = "BYTES", value_parser = crate::args::size, requires = "replicate")]
    pub copy_chunk: u64,
    /// Most bytes of copies per node (default: no limit but free memory,
    /// of which 64 MiB is always left)
    #[arg(long, value_name = "BYTES", value_parser = crate::args::size, requires = "replicate")]
    pub copy_budget: Option<u64>,
    /// A writer changes one block of the file this often while readers
    /// read through copies (`10ms`; only a file numalab makes)
    #[arg(long, value_name = "DURATION", requires = "replicate")]
    pub write_every: Option<Seconds>,
    /// `post`: the mailing-list post's table (1, 5, 10, 15, 30 readers on
    /// the cache's node and another, 8 KiB reads, groups of 5 started 1 s
    /// apart); cells this machine cannot run are shown with why
    #[arg(long, value_enum, conflicts_with_all = ["readers", "reader_node", "stagger", "group", "block_size", "mmap"])]
    pub layout: Option<LayoutArg>,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Preset tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    /// The cluster mailing-list post's readers.
    Post,
}

/// Runs `numalab pagecache`; exit status 1 when a file could not be
/// changed.
pub fn run(args: &PagecacheArgs) -> Result<i32> {
    let (files, output) = match &args.action {
        Action::Load { files, output, .. } | Action::Drop { files, output } => (files, output),
        Action::Bench(bench) => return run_bench(bench),
    };
    output.check()?;
    crate::output::not_over_paths(output.file(), files)?;
    let change = match args.action {
        Action::Load {
            node, drop_first, ..
        } => {
            // Dropped file by file, each once its load is known to go
            // ahead: a refused load drops nothing.
            change_with(files, CacheAction::Load { node }, drop_first).map_err(|err| {
                match err {
                    // The flag named, as every command names it.
                    ChangeError::Node(why) => anyhow::anyhow!("--node {node}: {why}"),
                    other => other.into(),
                }
            })?
        }
        _ => change(files, CacheAction::Drop)?,
    };
    if !render::fincore::nothing_counted(output, change.files.is_empty(), &change.failed) {
        render::emit(&change, output)?;
    }
    render::fincore::say_failures(output, &change.failed);
    Ok(i32::from(!change.failed.is_empty()))
}

/// The bench's configuration from its flags.
fn bench_config(args: &BenchArgs) -> BenchConfig {
    let config = BenchConfig {
        file: match &args.file {
            Some(path) => FileSource::Given(path.clone()),
            None => FileSource::Create {
                dir: args.dir.clone(),
                size: args.size,
            },
        },
        cache_node: args.cache_node,
        readers: args.readers.clone(),
        places: args.reader_node.clone(),
        stagger: args.stagger.map_or(std::time::Duration::ZERO, |s| s.0),
        group: args.group,
        block_size: args.block_size,
        method: if args.mmap {
            Method::Mmap
        } else {
            Method::Read
        },
        repeats: args.repeats,
        oversubscribe: args.oversubscribe,
        skip_impossible: false,
        compare_matrix: !args.no_matrix,
        copies: args.replicate.then(|| CopyConfig {
            chunk_size: args.copy_chunk,
            budget_per_node: args.copy_budget,
            write_every: args.write_every.map(|s| s.0),
        }),
    };
    match args.layout {
        Some(LayoutArg::Post) => BenchConfig::post(config),
        None => config,
    }
}

/// The bench's settings as `numalab pagecache bench` spells them.
const FLAGS: &Flags = &[
    ("block_size", "--block-size"),
    ("repeats", "--repeats"),
    ("group", "--group"),
    ("stagger", "--stagger"),
    ("readers", "--readers"),
    ("places", "--reader-node"),
    ("chunk_size", "--copy-chunk"),
    ("replicate", "--replicate"),
    ("mmap", "--mmap"),
    ("write_every", "--write-every"),
    ("file", "FILE"),
    ("cache_node", "--cache-node"),
    ("size", "--size"),
    ("dir", "--dir"),
];

/// The bench's error, its settings spelt as this command's flags.
fn with_flags(err: bench::BenchError) -> anyhow::Error {
    let message = err.message();
    flags::with_flags(err, message, FLAGS)
}

/// Runs `numalab pagecache bench`: 0, or 128 + the signal that stopped
/// it after writing the cells that finished.
fn run_bench(args: &BenchArgs) -> Result<i32> {
    args.output.check()?;
    let topology = Topology::system()?;
    // Every setting, node, CPU and the file are checked here, before
    // anything is written or read.
    let plan = bench::plan(&bench_config(args), &topology).map_err(with_flags)?;
    let control = control_for_terminal("");
    let interrupts = Interrupts::catch(&control)?;
    let report = bench::run(&plan, &topology, &control)?;
    render::emit(&report, &args.output)?;
    if report.interrupted {
        eprintln!("numalab: interrupted: the cells that finished were written");
        return Ok(interrupts
            .exit_status()
            .unwrap_or(crate::exit::after_signal(signal_hook::consts::SIGINT)));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every setting the bench's refusals name has a spelling here, and
    /// every spelling is one of the command's flags (FILE is its
    /// argument).
    #[test]
    fn every_setting_the_bench_names_is_spelt_as_a_flag_it_has() {
        let engine = include_str!("../../../numalab-bench/src/pagecache/plan.rs");
        let named = numalab_bench::message::Message::new(engine);
        assert_eq!(flags::unspelt(&named, FLAGS), Vec::<&str>::new());
        let longs = flags::longs_of::<BenchArgs>();
        for (_, flag) in FLAGS.iter().filter(|(_, flag)| *flag != "FILE") {
            assert!(
                longs.iter().any(|l| l == flag),
                "{flag} is not a flag of pagecache bench"
            );
        }
        let said =
            numalab_bench::message::Message::new("«replicate» cannot be combined with «mmap»");
        assert_eq!(
            with_flags(bench::BenchError::Invalid(said)).to_string(),
            "--replicate cannot be combined with --mmap"
        );
    }
}
