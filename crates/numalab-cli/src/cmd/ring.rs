//! `numalab ring`: the radio-astronomy blog's shared-memory ring test as
//! one command — writer and reader processes pinned to chosen nodes or
//! CPUs, the ring's memory on a chosen node, MB/s per stream with every
//! placement verified — and the ring segments' housekeeping (`--list`,
//! `--cleanup`).

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use numalab::ring;
use numalab::{CpuSet, HugePages, Topology};
use numalab_bench::ring::config::timeout_from_secs;
use numalab_bench::ring::{
    self as engine, CellStatus, RingConfig, RingListReport, Role, RunError, WorkerConfig,
};

use crate::flags::{self, Flags};
use crate::output::{self, OutputArgs};
use crate::render;
use crate::signals::{control_for_terminal, Interrupts};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// Move data between writer and reader processes through numalab's
/// shared-memory ring, for chosen placements of ring memory, writer and
/// reader, as the radio-astronomy (PSRDada) blog measured; or list and
/// clean up ring segments
#[derive(Debug, Args)]
#[command(
    after_help = "Placement options take one value for every stream, or one per stream \
separated by commas (nodes) or slashes (CPU sets): `--streams 2 --memory-node 0,1`.\n\n\
Examples:\n  \
  numalab ring                                   memory, writer, reader on the first node, 20 GiB\n  \
  numalab ring --memory-node 1 --writer-node 0 --reader-node 0 --volume 4GiB\n  \
  numalab ring --mode in-place --block-size 16MiB\n  \
  numalab ring --streams 2 --memory-node 0,1 --writer-node 0,1 --reader-node 0,1\n  \
  numalab ring --layout blog --json              the blog's two tables, placement verified\n  \
  numalab ring --list                            ring segments on this machine, live or stale\n  \
  numalab ring --cleanup NAME                    remove a stale segment\n\n\
Ctrl-C, SIGTERM or SIGHUP end the workers, remove the run's segments, write the cells that \
finished (the others marked interrupted) and exit with 128 + the signal's number (130, 143, \
129); a second signal exits at once. Workers end when numalab dies, even by kill -9, and \
remove their ring then."
)]
pub struct RingArgs {
    /// Run a preset table: `blog` is the blog's single-stream table (every
    /// placement of memory, writer and reader over the first two nodes)
    /// and its two-stream table (isolated, adjacent on 0, adjacent on 1,
    /// crossed)
    #[arg(long, value_enum, conflicts_with_all = ["streams", "memory_node", "writer_node", "reader_node", "writer_cpus", "reader_cpus"])]
    pub layout: Option<LayoutArg>,

    /// Parallel streams, each with its own ring, writer and readers; at
    /// most 256, and all their rings must fit in free memory together
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub streams: usize,

    /// Node of each stream's ring memory (default: the first node with memory)
    #[arg(long, value_name = "NODE[,NODE…]")]
    pub memory_node: Option<String>,

    /// Run each stream's writer on the CPUs of NODE (default: the memory node)
    #[arg(long, value_name = "NODE[,NODE…]", conflicts_with = "writer_cpus")]
    pub writer_node: Option<String>,

    /// Run each stream's readers on the CPUs of NODE (default: the memory node)
    #[arg(long, value_name = "NODE[,NODE…]", conflicts_with = "reader_cpus")]
    pub reader_node: Option<String>,

    /// Run each stream's writer on CPUS (`0-3`; streams separated by `/`)
    #[arg(long, value_name = "CPUS[/CPUS…]")]
    pub writer_cpus: Option<String>,

    /// Run each stream's readers on CPUS (`4-7`; streams separated by `/`)
    #[arg(long, value_name = "CPUS[/CPUS…]")]
    pub reader_cpus: Option<String>,

    /// Readers per stream (each reads everything), 1 to 64; at most 1024
    /// writer and reader processes in all
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub readers: usize,

    /// Bytes each stream moves (`20G`, `512M`; binary units); large enough
    /// for a stable figure by default
    #[arg(long, visible_alias = "size", default_value = "20G", value_name = "BYTES", value_parser = crate::args::size)]
    pub volume: u64,

    /// Bytes each stream moves first, untimed, before the volume (`2G`;
    /// rounded up to whole blocks; 0, the default, for none): the figures are then of
    /// a ring already running, without the start of the processes and of
    /// idle CPUs waking up, as `fio`'s `ramp_time` leaves a job's start
    /// out. Worth it for short runs: on the VMs measured an idle CPU ran
    /// the first 25–90 ms of a ring slowly
    #[arg(long, default_value = "0", value_name = "BYTES", value_parser = crate::args::size_or_zero)]
    pub ramp: u64,

    /// Bytes per ring block: a multiple of 64, at most 1 TiB
    #[arg(long, default_value = "4M", value_name = "BYTES", value_parser = crate::args::size)]
    pub block_size: u64,

    /// Blocks per ring, 2 to 1048576. Each block also takes 96 bytes in
    /// the ring's segment (its descriptor and transfer-header slot), and
    /// the segment is rounded up to whole pages: with blocks of a few
    /// hundred bytes the segment is much larger than the data (the result
    /// gives its size)
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub blocks: u64,

    /// `copy`: the writer copies each block in from its own buffer (at
    /// most 4 MiB, copied in as often as a block takes) and the readers
    /// copy it out into a block-sized buffer (the blog's memcpy in, memcpy
    /// out); `in-place`: the writer fills blocks in the ring (with the
    /// stores the ring's own copies use for that block size) and readers read
    /// every byte there with the widest vector loads
    #[arg(long, value_enum, default_value_t = ModeArg::Copy)]
    pub mode: ModeArg,

    /// Ring pages: none, thp or 2M
    #[arg(long, default_value = "none", value_name = "none|thp|2M")]
    pub huge_pages: HugePages,

    /// Lock the ring's pages in memory
    #[arg(long)]
    pub mlock: bool,

    /// Seconds any process may wait for the other side before failing
    /// (more than 0, at most 86400)
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub timeout: f64,

    /// Check every byte: blocks carry sequence-numbered words that readers
    /// verify (slower; for testing the ring, not for figures)
    #[arg(long)]
    pub verify: bool,

    /// List the ring segments on this machine (live and stale) and exit
    #[arg(long, conflicts_with_all = ["cleanup", "layout"])]
    pub list: bool,

    /// Remove the segment of ring NAME (refused while a live process holds
    /// it, unless --force) and exit
    #[arg(long, value_name = "NAME", conflicts_with = "layout")]
    pub cleanup: Option<String>,

    /// With --cleanup: remove the segment even while processes hold it
    /// (they keep their mapping)
    #[arg(long, requires = "cleanup")]
    pub force: bool,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Preset tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    /// The radio-astronomy blog's single- and two-stream tables.
    Blog,
}

impl From<LayoutArg> for engine::Layout {
    fn from(layout: LayoutArg) -> engine::Layout {
        match layout {
            LayoutArg::Blog => engine::Layout::Blog,
        }
    }
}

/// How data goes in and out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// memcpy in, memcpy out.
    Copy,
    /// Filled and read in place.
    InPlace,
}

impl From<ModeArg> for engine::Mode {
    fn from(mode: ModeArg) -> engine::Mode {
        match mode {
            ModeArg::Copy => engine::Mode::Copy,
            ModeArg::InPlace => engine::Mode::InPlace,
        }
    }
}

/// Runs `numalab ring`; returns the exit status: 0, or 128 + the signal
/// that stopped a run (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP)
/// after writing the cells that finished.
pub fn run(args: &RingArgs) -> Result<i32> {
    args.output.check()?;
    if args.list {
        render::emit(&RingListReport::current(), &args.output)?;
        return Ok(0);
    }
    if let Some(name) = &args.cleanup {
        let removed =
            ring::remove(name, args.force).with_context(|| format!("--cleanup {name}"))?;
        for path in removed {
            eprintln!("removed {}", path.display());
        }
        return Ok(0);
    }
    // Every count, size and duration is checked before anything else.
    let config = config(args)?;
    let topology = Topology::system()?;
    // Ctrl-C, SIGTERM and SIGHUP stop the control the run looks at: it
    // ends its workers, removes its segments and writes what it measured.
    // A second signal ends numalab at once (the workers, told by the
    // kernel that their parent is gone, remove the segments).
    let control = control_for_terminal("");
    let interrupts = Interrupts::catch(&control)?;
    let report = engine::run(&config, &topology, &control).map_err(with_flags)?;
    render::emit(&report, &args.output)?;
    if report.interrupted {
        // A worker ended by Ctrl-C may be all that was seen of it.
        let signal = interrupts.arrived().unwrap_or(SIGINT);
        let finished = report
            .cells
            .iter()
            .filter(|c| c.status == CellStatus::Ran)
            .count();
        eprintln!(
            "numalab: interrupted by {}: {} finished and {} written; \
             the workers were ended and the run's ring segments removed",
            numalab::launch::signal_name(signal),
            numalab::units::count(finished, "cell"),
            if finished == 1 { "was" } else { "were" }
        );
        return Ok(crate::exit::after_signal(signal));
    }
    if let Some(failed) = report.failed_cell() {
        bail!(
            "cell {:?} failed: {}",
            failed.name,
            failed.reason.as_deref().unwrap_or("")
        );
    }
    Ok(0)
}

/// The engine's configuration from the flags, every count, size and
/// duration checked against its limit before anything is allocated or
/// started.
fn config(args: &RingArgs) -> Result<RingConfig> {
    let config = RingConfig {
        layout: args.layout.map(Into::into),
        streams: args.streams,
        memory_node: args.memory_node.clone(),
        writer_node: args.writer_node.clone(),
        reader_node: args.reader_node.clone(),
        writer_cpus: args.writer_cpus.clone(),
        reader_cpus: args.reader_cpus.clone(),
        readers: args.readers,
        volume: args.volume,
        ramp: args.ramp,
        block_size: args.block_size,
        blocks: args.blocks,
        mode: args.mode.into(),
        huge_pages: args.huge_pages,
        mlock: args.mlock,
        timeout: timeout_from_secs(args.timeout).map_err(with_flags)?,
        verify: args.verify,
        worker_exe: std::env::current_exe()
            .context("finding the numalab binary to start workers")?,
    };
    config.check().map_err(with_flags)?;
    Ok(config)
}

/// The engine's settings as `numalab ring` (and its workers) spell them.
const FLAGS: &Flags = &[
    ("streams", "--streams"),
    ("memory_node", "--memory-node"),
    ("writer_node", "--writer-node"),
    ("reader_node", "--reader-node"),
    ("writer_cpus", "--writer-cpus"),
    ("reader_cpus", "--reader-cpus"),
    ("readers", "--readers"),
    ("volume", "--volume"),
    ("ramp", "--ramp"),
    ("block_size", "--block-size"),
    ("blocks", "--blocks"),
    ("timeout", "--timeout"),
];

/// The engine's error, its settings spelt as this command's flags.
fn with_flags(err: impl Into<RunError>) -> anyhow::Error {
    let err = err.into();
    let message = err.message();
    flags::with_flags(err, message, FLAGS)
}

// ---------------------------------------------------------------------------
// The worker processes.
// ---------------------------------------------------------------------------

/// A writer or reader process of `numalab ring` (started by it; hidden)
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// `writer` or `reader`
    #[arg(long)]
    pub role: String,
    /// The ring
    #[arg(long)]
    pub name: String,
    /// CPUs to pin to
    #[arg(long)]
    pub cpus: String,
    /// copy or in-place
    #[arg(long, value_enum)]
    pub mode: ModeArg,
    /// Seconds to wait for the other side
    #[arg(long)]
    pub timeout: f64,
    /// Bytes to write, timed
    #[arg(long)]
    pub volume: u64,
    /// Bytes moved first, untimed (whole blocks, this rounded up)
    #[arg(long, default_value_t = 0)]
    pub ramp: u64,
    /// Readers the writer waits for
    #[arg(long)]
    pub readers: usize,
    /// Sequence-numbered words, checked by readers
    #[arg(long)]
    pub verify: bool,
}

/// Runs a worker; prints its report as one JSON line.
pub fn worker(args: &WorkerArgs) -> Result<()> {
    let role = match args.role.as_str() {
        "writer" => Role::Writer,
        "reader" => Role::Reader,
        other => bail!("--role={other}: expected writer or reader"),
    };
    let cpus: CpuSet = args
        .cpus
        .parse()
        .with_context(|| format!("--cpus={}", args.cpus))?;
    let timeout = timeout_from_secs(args.timeout).map_err(with_flags)?;
    end_with_the_ring(&args.name)?;
    let report = engine::worker::run(&WorkerConfig {
        role,
        name: args.name.clone(),
        cpus,
        mode: args.mode.into(),
        timeout,
        volume: args.volume,
        ramp: args.ramp,
        readers: args.readers,
        verify: args.verify,
    })?;
    output::print_stdout(&format!("{}\n", serde_json::to_string(&report)?))
}

/// How long a worker told to end waits for its ring's creator to be gone.
const CREATOR_EXIT: Duration = Duration::from_secs(2);

/// SIGTERM or SIGHUP end the worker, and first remove its ring when the
/// process that made it is gone: `numalab ring` starts its workers so that
/// the kernel sends them SIGTERM when it dies, even by `kill -9`, and its
/// segments must not outlive them. The signal comes when the thread that
/// started the worker ends, which can be before the rest of the process
/// (and its hold on the ring) is gone: the worker waits up to
/// [`CREATOR_EXIT`] for that. A ring whose creator lives is left to it.
fn end_with_the_ring(name: &str) -> Result<()> {
    let mut signals =
        Signals::new([SIGTERM, SIGHUP]).context("installing the worker's signal handlers")?;
    let name = name.to_owned();
    std::thread::Builder::new()
        .name("ring-worker-signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                let start = Instant::now();
                while start.elapsed() < CREATOR_EXIT {
                    match ring::remove_abandoned(&name) {
                        Ok(false) if ring::RingMonitor::open(&name).is_ok() => {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        // Removed, gone already, or not a ring to remove.
                        _ => break,
                    }
                }
                std::process::exit(crate::exit::after_signal(signal));
            }
        })
        .context("starting the worker's signal thread")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each setting the engine refuses is shown as the flag that set it,
    /// and every spelling is one of the command's flags.
    #[test]
    fn every_setting_the_engine_names_is_spelt_as_a_flag_it_has() {
        let topology = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1").unwrap();
        type Change = fn(&mut RingConfig);
        let cases: [(Change, &str); 13] = [
            (
                |c| c.ramp = u64::MAX,
                "--ramp=18446744073709551615 and the volume (21474836480 bytes) are more than 2^64 bytes together",
            ),
            (
                |c| c.streams = 0,
                "--streams=0: at least one stream is needed",
            ),
            (|c| c.streams = 300, "--streams=300 is more than 256"),
            (|c| c.readers = 0, "--readers=0 is not from 1"),
            (|c| c.block_size = 65, "--block-size=65 is not a multiple"),
            (|c| c.blocks = 1, "--blocks=1 is not from 2"),
            (|c| c.volume = 1, "--volume=1 is less than one block"),
            (
                |c| c.timeout = Duration::from_secs(1 << 40),
                "--timeout=1099511627776 is more than 86400",
            ),
            (|c| c.memory_node = Some("7".into()), "--memory-node=7: "),
            (
                |c| c.writer_node = Some("x".into()),
                "--writer-node=x: \"x\" is not a node number",
            ),
            (
                |c| c.reader_node = Some("0,0,0".into()),
                "--reader-node=0,0,0: 3 values for 1 stream",
            ),
            (|c| c.writer_cpus = Some("99".into()), "--writer-cpus=99: "),
            (
                |c| c.reader_cpus = Some("0/1".into()),
                "--reader-cpus=0/1: 2 CPU sets for 1 stream",
            ),
        ];
        for (change, shown) in cases {
            let mut config = RingConfig::new("numalab");
            change(&mut config);
            let err = match config.check() {
                Err(err) => with_flags(err),
                Ok(()) => with_flags(engine::plan::cells(&config, &topology).unwrap_err()),
            };
            let text = crate::describe(&err);
            assert!(text.starts_with(shown), "{text:?} is not {shown:?}…");
        }
        let longs = flags::longs_of::<RingArgs>();
        for (_, flag) in FLAGS {
            assert!(
                longs.iter().any(|l| l == flag),
                "{flag} is not a flag of ring"
            );
        }
    }
}
