//! `numalab ring`: the radio-astronomy blog's shared-memory ring test as
//! one command — writer and reader processes pinned to chosen nodes or
//! CPUs, the ring's memory on a chosen node, MB/s per stream with every
//! placement verified — and the ring segments' housekeeping (`--list`,
//! `--cleanup`).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use numalab::audit::PlacementAudit;
use numalab::ring::{self, Backpressure, Ring, RingOptions, SegmentEntry};
use numalab::system::Environment;
use numalab::{affinity, CpuSet, HugePages, NodeSet, Topology};
use numalab_bench::kernels::{self, Isa, Store};
use serde::{Deserialize, Serialize};

use crate::output::{self, human_bytes, Csv, Format, OutputArgs};

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
  numalab ring --cleanup NAME                    remove a stale segment"
)]
pub struct RingArgs {
    /// Run a preset table: `blog` is the blog's single-stream table (every
    /// placement of memory, writer and reader over the first two nodes)
    /// and its two-stream table (isolated, adjacent on 0, adjacent on 1,
    /// crossed)
    #[arg(long, value_enum, conflicts_with_all = ["streams", "memory_node", "writer_node", "reader_node", "writer_cpus", "reader_cpus"])]
    pub layout: Option<Layout>,

    /// Parallel streams, each with its own ring, writer and reader(s)
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub streams: usize,

    /// Node of each stream's ring memory (default: the first node with memory)
    #[arg(long, value_name = "NODE[,NODE…]")]
    pub memory_node: Option<String>,

    /// Run each stream's writer on the CPUs of NODE (default: the memory node)
    #[arg(long, value_name = "NODE[,NODE…]", conflicts_with = "writer_cpus")]
    pub writer_node: Option<String>,

    /// Run each stream's reader(s) on the CPUs of NODE (default: the memory node)
    #[arg(long, value_name = "NODE[,NODE…]", conflicts_with = "reader_cpus")]
    pub reader_node: Option<String>,

    /// Run each stream's writer on CPUS (`0-3`; streams separated by `/`)
    #[arg(long, value_name = "CPUS[/CPUS…]")]
    pub writer_cpus: Option<String>,

    /// Run each stream's reader(s) on CPUS (`4-7`; streams separated by `/`)
    #[arg(long, value_name = "CPUS[/CPUS…]")]
    pub reader_cpus: Option<String>,

    /// Readers per stream (each reads everything)
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub readers: usize,

    /// Bytes each stream moves (`20G`, `512M`; binary units); large enough
    /// for a stable figure by default
    #[arg(long, visible_alias = "size", default_value = "20G", value_name = "BYTES", value_parser = crate::args::size)]
    pub volume: u64,

    /// Bytes per ring block
    #[arg(long, default_value = "4M", value_name = "BYTES", value_parser = crate::args::size)]
    pub block_size: u64,

    /// Blocks per ring
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub blocks: u64,

    /// `copy`: the writer copies each block in from its own buffer (at
    /// most 4 MiB, copied in as often as a block takes) and the readers
    /// copy it out into a block-sized buffer (the blog's memcpy in, memcpy
    /// out); `in-place`: the writer fills blocks in the ring (streaming
    /// stores from 8 MiB blocks, as the ring's copies) and readers read
    /// every byte there with the widest vector loads
    #[arg(long, value_enum, default_value_t = Mode::Copy)]
    pub mode: Mode,

    /// Ring pages: none, thp or 2M
    #[arg(long, default_value = "none", value_name = "none|thp|2M")]
    pub huge_pages: HugePages,

    /// Lock the ring's pages in memory
    #[arg(long)]
    pub mlock: bool,

    /// Seconds any process may wait for the other side before failing
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
pub enum Layout {
    /// The radio-astronomy blog's single- and two-stream tables.
    Blog,
}

/// How data goes in and out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// memcpy in, memcpy out.
    Copy,
    /// Filled and read in place.
    InPlace,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Copy => "copy",
            Mode::InPlace => "in-place",
        }
    }
}

// ---------------------------------------------------------------------------
// The plan: streams and cells.
// ---------------------------------------------------------------------------

/// Where one stream's parts run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamPlan {
    /// Node of the ring's memory.
    pub memory_node: u32,
    /// Node the writer was asked to run on, when given as a node.
    pub writer_node: Option<u32>,
    /// CPUs the writer is pinned to.
    pub writer_cpus: CpuSet,
    /// Node the readers were asked to run on, when given as a node.
    pub reader_node: Option<u32>,
    /// CPUs the readers are pinned to.
    pub reader_cpus: CpuSet,
}

/// One cell of a table: streams run together.
#[derive(Debug, Clone)]
struct CellPlan {
    table: &'static str,
    name: String,
    /// Nodes as asked: (memory, writer, reader) per stream.
    wanted: Vec<(u32, u32, u32)>,
}

fn node_list(spec: &str, streams: usize, flag: &str) -> Result<Vec<u32>> {
    let values: Vec<u32> = spec
        .split(',')
        .map(|v| {
            v.trim()
                .parse()
                .with_context(|| format!("--{flag}={spec}: {v:?} is not a node number"))
        })
        .collect::<Result<_>>()?;
    match values.len() {
        1 => Ok(vec![values[0]; streams]),
        n if n == streams => Ok(values),
        n => bail!(
            "--{flag}={spec}: {n} values for {streams} stream(s); give one, or one per stream"
        ),
    }
}

fn cpu_list(topology: &Topology, spec: &str, streams: usize, flag: &str) -> Result<Vec<CpuSet>> {
    let values: Vec<CpuSet> = spec
        .split('/')
        .map(|v| {
            topology
                .parse_cpus(v)
                .with_context(|| format!("--{flag}={spec}"))
        })
        .collect::<Result<_>>()?;
    match values.len() {
        1 => Ok(vec![values[0].clone(); streams]),
        n if n == streams => Ok(values),
        n => bail!("--{flag}={spec}: {n} CPU sets for {streams} stream(s); give one, or one per stream (separated by /)"),
    }
}

/// Why a node cannot be used for `what` here, if it cannot.
fn unusable(topology: &Topology, node: u32, what: &str) -> Option<String> {
    let check = if what == "memory" {
        topology.check_memory_nodes(&NodeSet::single(node))
    } else {
        topology.check_cpu_nodes(&NodeSet::single(node))
    };
    check
        .err()
        .map(|err| format!("{what} on node {node}: {err}"))
}

fn cpus_of_node(topology: &Topology, node: u32) -> CpuSet {
    topology
        .cpus_of(&NodeSet::single(node))
        .intersection(&topology.allowed_cpus)
}

/// The streams of the command-line placement.
fn custom_streams(args: &RingArgs, topology: &Topology) -> Result<Vec<StreamPlan>> {
    let n = args.streams;
    if n == 0 {
        bail!("--streams=0: at least one stream is needed");
    }
    let default_memory = topology
        .nodes_with_memory()
        .intersection(&topology.inventory().allowed_nodes)
        .first()
        .unwrap_or(0);
    let memory = match &args.memory_node {
        Some(spec) => node_list(spec, n, "memory-node")?,
        None => vec![default_memory; n],
    };
    for node in &memory {
        topology
            .check_memory_nodes(&NodeSet::single(*node))
            .with_context(|| format!("--memory-node={node}"))?;
    }
    let side = |node_spec: &Option<String>,
                cpu_spec: &Option<String>,
                flag: &str|
     -> Result<(Vec<Option<u32>>, Vec<CpuSet>)> {
        if let Some(spec) = cpu_spec {
            let cpus = cpu_list(topology, spec, n, &format!("{flag}-cpus"))?;
            return Ok((vec![None; n], cpus));
        }
        let nodes = match node_spec {
            Some(spec) => node_list(spec, n, &format!("{flag}-node"))?,
            // With CPUs of its own, the memory's node; else the nearest
            // node that has CPUs.
            None => memory
                .iter()
                .map(|&m| {
                    topology
                        .nodes_by_distance(m)
                        .into_iter()
                        .find(|&c| !cpus_of_node(topology, c).is_empty())
                        .unwrap_or(m)
                })
                .collect(),
        };
        let mut cpus = Vec::new();
        for node in &nodes {
            topology
                .check_cpu_nodes(&NodeSet::single(*node))
                .with_context(|| format!("--{flag}-node={node}"))?;
            cpus.push(cpus_of_node(topology, *node));
        }
        Ok((nodes.into_iter().map(Some).collect(), cpus))
    };
    let (writer_nodes, writer_cpus) = side(&args.writer_node, &args.writer_cpus, "writer")?;
    let (reader_nodes, reader_cpus) = side(&args.reader_node, &args.reader_cpus, "reader")?;
    Ok((0..n)
        .map(|i| StreamPlan {
            memory_node: memory[i],
            writer_node: writer_nodes[i],
            writer_cpus: writer_cpus[i].clone(),
            reader_node: reader_nodes[i],
            reader_cpus: reader_cpus[i].clone(),
        })
        .collect())
}

/// The blog's cells over the machine's first two nodes with CPUs (named 0
/// and 1 in the tables when the machine has fewer).
fn blog_cells(topology: &Topology) -> Vec<CellPlan> {
    let with_cpus: Vec<u32> = topology.nodes_with_cpus().iter().collect();
    let a = with_cpus.first().copied().unwrap_or(0);
    let b = with_cpus.get(1).copied().unwrap_or(a + 1);
    let mut cells = Vec::new();
    for mem in [a, b] {
        for writer in [a, b] {
            for reader in [a, b] {
                cells.push(CellPlan {
                    table: "single-stream",
                    name: format!("memory {mem}, writer {writer}, reader {reader}"),
                    wanted: vec![(mem, writer, reader)],
                });
            }
        }
    }
    for (name, streams) in [
        ("isolated", vec![(a, a, a), (b, b, b)]),
        (&*format!("adjacent on {a}"), vec![(a, a, a), (a, a, a)]),
        (&*format!("adjacent on {b}"), vec![(b, b, b), (b, b, b)]),
        ("crossed", vec![(b, a, a), (a, b, b)]),
    ] {
        cells.push(CellPlan {
            table: "two-stream",
            name: name.to_owned(),
            wanted: streams,
        });
    }
    cells
}

// ---------------------------------------------------------------------------
// Results.
// ---------------------------------------------------------------------------

/// The `numalab.ring` JSON document.
#[derive(Debug, Serialize)]
pub struct RingReport {
    /// Where it was measured.
    pub environment: Environment,
    /// The settings every cell used.
    pub settings: Settings,
    /// The cells, in table order; each says whether it ran.
    pub cells: Vec<CellResult>,
}

/// Settings shared by every cell.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    /// Bytes each stream moves.
    pub volume_bytes: u64,
    /// Bytes per block.
    pub block_size: u64,
    /// Blocks per ring.
    pub blocks: u64,
    /// `copy` or `in-place`.
    pub mode: Mode,
    /// Ring pages.
    pub huge_pages: HugePages,
    /// Readers per stream.
    pub readers_per_stream: usize,
    /// Whether every byte was checked.
    pub verify: bool,
}

/// One cell: streams run at the same time.
#[derive(Debug, Clone, Serialize)]
pub struct CellResult {
    /// `single-stream`, `two-stream` (the blog's tables) or `custom`.
    pub table: String,
    /// The cell's name in its table.
    pub name: String,
    /// `ran`, `skipped` (this machine cannot place it) or `failed`.
    pub status: String,
    /// Why it was skipped or failed.
    pub reason: Option<String>,
    /// Each stream.
    pub streams: Vec<StreamResult>,
    /// Sum of the streams' MB/s.
    pub total_mb_per_s: Option<f64>,
    /// Whether every stream's memory, writer and readers were where asked.
    pub placement_ok: bool,
}

/// One stream of a cell.
#[derive(Debug, Clone, Serialize)]
pub struct StreamResult {
    /// Where its parts were asked to run.
    pub plan: StreamPlan,
    /// Bytes the writer moved (each reader read them all).
    pub bytes: u64,
    /// From the writer's first byte to the last reader's last byte.
    pub seconds: f64,
    /// `bytes / seconds` in MB/s (10^6 bytes per second).
    pub mb_per_s: f64,
    /// The ring's pages against `bind:memory_node`.
    pub memory: PlacementAudit,
    /// The writer process.
    pub writer: ProcessPlacement,
    /// The reader processes.
    pub readers: Vec<ProcessPlacement>,
    /// Memory, writer and readers all where asked.
    pub placement_ok: bool,
    /// The ring's counters at the end: blocks, waits and sleeps of each
    /// side.
    pub counters: numalab::ring::RingStats,
}

/// Where a worker process ran, as it saw itself.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessPlacement {
    /// Process id.
    pub pid: u32,
    /// CPUs it was pinned to (as the kernel reported its affinity).
    pub cpus_allowed: CpuSet,
    /// CPUs it was seen running on (sampled every block).
    pub cpus_seen: CpuSet,
    /// Their nodes.
    pub nodes_seen: NodeSet,
    /// CPU time it used, seconds.
    pub cpu_seconds: f64,
    /// Whether it stayed on the CPUs asked for.
    pub ok: bool,
}

/// What a worker process prints when it is done (one JSON line).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerReport {
    /// `writer` or `reader`.
    pub role: String,
    /// Process id.
    pub pid: u32,
    /// Payload bytes moved.
    pub bytes: u64,
    /// Blocks moved.
    pub blocks: u64,
    /// `CLOCK_MONOTONIC` at the first byte, nanoseconds.
    pub start_ns: u64,
    /// `CLOCK_MONOTONIC` after the last byte, nanoseconds.
    pub end_ns: u64,
    /// CPU time used, seconds.
    pub cpu_seconds: f64,
    /// The CPUs it was pinned to.
    pub cpus_allowed: CpuSet,
    /// CPUs it ran on.
    pub cpus_seen: CpuSet,
    /// Their nodes.
    pub nodes_seen: NodeSet,
    /// Blocks the ring skipped for it (lag mode).
    pub skipped_blocks: u64,
}

/// Schema version of `numalab.ring`.
pub const SCHEMA_VERSION: u32 = 1;

// ---------------------------------------------------------------------------
// Running.
// ---------------------------------------------------------------------------

/// Runs `numalab ring`.
pub fn run(args: &RingArgs) -> Result<()> {
    if args.list {
        return list(args);
    }
    if let Some(name) = &args.cleanup {
        let removed =
            ring::remove(name, args.force).with_context(|| format!("--cleanup {name}"))?;
        for path in removed {
            eprintln!("removed {}", path.display());
        }
        return Ok(());
    }
    let topology = Topology::system()?;
    check_sizes(args)?;
    let cells: Vec<(CellPlan, Result<Vec<StreamPlan>, String>)> = match args.layout {
        Some(Layout::Blog) => blog_cells(&topology)
            .into_iter()
            .map(|cell| {
                let streams = cell
                    .wanted
                    .iter()
                    .map(|&(m, w, r)| {
                        if let Some(why) = unusable(&topology, m, "memory")
                            .or_else(|| unusable(&topology, w, "writer"))
                            .or_else(|| unusable(&topology, r, "reader"))
                        {
                            return Err(why);
                        }
                        Ok(StreamPlan {
                            memory_node: m,
                            writer_node: Some(w),
                            writer_cpus: cpus_of_node(&topology, w),
                            reader_node: Some(r),
                            reader_cpus: cpus_of_node(&topology, r),
                        })
                    })
                    .collect();
                (cell, streams)
            })
            .collect(),
        None => {
            let streams = custom_streams(args, &topology)?;
            let name = streams
                .iter()
                .map(|s| {
                    format!(
                        "memory {}, writer {}, reader {}",
                        s.memory_node,
                        s.writer_node
                            .map_or(format!("cpus {}", s.writer_cpus), |n| n.to_string()),
                        s.reader_node
                            .map_or(format!("cpus {}", s.reader_cpus), |n| n.to_string()),
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            let wanted = streams.iter().map(|s| (s.memory_node, 0, 0)).collect();
            vec![(
                CellPlan {
                    table: "custom",
                    name,
                    wanted,
                },
                Ok(streams),
            )]
        }
    };
    let progress = std::io::stderr().is_terminal();
    // Ctrl-C ends the workers (they restore the default); numalab stays to
    // remove the segments and say so.
    let _shield = numalab::system::InterruptShield::new();
    let mut results = Vec::new();
    for (cell, streams) in cells {
        let result = match streams {
            Err(reason) => CellResult {
                table: cell.table.into(),
                name: cell.name.clone(),
                status: "skipped".into(),
                reason: Some(reason),
                streams: Vec::new(),
                total_mb_per_s: None,
                placement_ok: false,
            },
            Ok(streams) => {
                if progress {
                    eprintln!("running {} cell: {}", cell.table, cell.name);
                }
                match run_cell(args, &streams) {
                    Ok(streams) => {
                        let placement_ok = streams.iter().all(|s| s.placement_ok);
                        CellResult {
                            table: cell.table.into(),
                            name: cell.name.clone(),
                            status: "ran".into(),
                            reason: None,
                            total_mb_per_s: Some(streams.iter().map(|s| s.mb_per_s).sum()),
                            streams,
                            placement_ok,
                        }
                    }
                    Err(err) if args.layout.is_some() && !err.is::<Interrupted>() => CellResult {
                        table: cell.table.into(),
                        name: cell.name.clone(),
                        status: "failed".into(),
                        reason: Some(format!("{err:#}")),
                        streams: Vec::new(),
                        total_mb_per_s: None,
                        placement_ok: false,
                    },
                    Err(err) => return Err(err),
                }
            }
        };
        results.push(result);
    }
    let report = RingReport {
        environment: Environment::current(&topology),
        settings: Settings {
            volume_bytes: args.volume,
            block_size: args.block_size,
            blocks: args.blocks,
            mode: args.mode,
            huge_pages: args.huge_pages,
            readers_per_stream: args.readers,
            verify: args.verify,
        },
        cells: results,
    };
    let text = match args.output.format() {
        Format::Json => output::to_json("numalab.ring", SCHEMA_VERSION, &report)?,
        Format::Csv => csv(&report),
        Format::Table => human(&report, false),
        Format::Markdown => human(&report, true),
    };
    args.output.emit(&text)?;
    if let Some(failed) = report.cells.iter().find(|c| c.status == "failed") {
        bail!(
            "cell {:?} failed: {}",
            failed.name,
            failed.reason.as_deref().unwrap_or("")
        );
    }
    Ok(())
}

fn check_sizes(args: &RingArgs) -> Result<()> {
    let options = RingOptions::new(
        "check",
        (args.block_size * args.blocks) as usize,
        args.block_size as usize,
    );
    if !args.block_size.is_multiple_of(64) || args.block_size < 64 {
        bail!(
            "--block-size={}: must be a multiple of 64 bytes",
            args.block_size
        );
    }
    if args.blocks < 2 {
        bail!("--blocks={}: a ring needs at least 2 blocks", args.blocks);
    }
    if args.readers == 0 || args.readers > 64 {
        bail!(
            "--readers={}: from 1 to 64 readers per stream",
            args.readers
        );
    }
    if args.volume < args.block_size {
        bail!(
            "--volume={}: less than one block ({} bytes)",
            args.volume,
            args.block_size
        );
    }
    if args.verify && !args.block_size.is_multiple_of(8) {
        bail!("--verify needs blocks of a multiple of 8 bytes");
    }
    if !(args.timeout > 0.0 && args.timeout.is_finite()) {
        bail!(
            "--timeout={}: must be a positive number of seconds",
            args.timeout
        );
    }
    let _ = options;
    Ok(())
}

/// A worker was ended by Ctrl-C: the run stops, its segments are removed.
#[derive(Debug)]
struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted (Ctrl-C); the run's ring segments were removed")
    }
}

impl std::error::Error for Interrupted {}

/// Kills and reaps the children on every exit path.
struct Children(Vec<(String, Child)>);

impl Drop for Children {
    fn drop(&mut self) {
        for (_, child) in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn worker_command(args: &RingArgs, role: &str, name: &str, cpus: &CpuSet) -> Result<Command> {
    let exe = std::env::current_exe().context("finding the numalab binary to start workers")?;
    let mut command = Command::new(exe);
    command
        .args(["ring-worker", "--role", role, "--name", name])
        .args(["--cpus", &cpus.to_string()])
        .args(["--mode", args.mode.as_str()])
        .args(["--timeout", &args.timeout.to_string()])
        .args(["--volume", &args.volume.to_string()])
        .args(["--readers", &args.readers.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if args.verify {
        command.arg("--verify");
    }
    Ok(command)
}

fn run_cell(args: &RingArgs, streams: &[StreamPlan]) -> Result<Vec<StreamResult>> {
    let mut rings = Vec::new();
    for (i, stream) in streams.iter().enumerate() {
        let name = format!("run-{}-{i}", std::process::id());
        let options = RingOptions::new(
            &name,
            (args.block_size * args.blocks) as usize,
            args.block_size as usize,
        )
        .node(stream.memory_node)
        .huge_pages(args.huge_pages)
        .lock(args.mlock)
        .backpressure(Backpressure::Block)
        .max_readers(args.readers as u32);
        let ring = Ring::create(&options).with_context(|| {
            format!(
                "making the ring of stream {i} on node {}",
                stream.memory_node
            )
        })?;
        rings.push(ring);
    }
    let audits: Vec<PlacementAudit> = rings.iter().map(Ring::audit).collect();

    let mut children = Children(Vec::new());
    for (stream, ring) in streams.iter().zip(&rings) {
        for r in 0..args.readers {
            let child = worker_command(args, "reader", ring.name(), &stream.reader_cpus)?
                .spawn()
                .context("starting a reader process")?;
            children
                .0
                .push((format!("reader {r} of ring {}", ring.name()), child));
        }
    }
    for (stream, ring) in streams.iter().zip(&rings) {
        let child = worker_command(args, "writer", ring.name(), &stream.writer_cpus)?
            .spawn()
            .context("starting a writer process")?;
        children
            .0
            .push((format!("writer of ring {}", ring.name()), child));
    }
    // Collect every report; the first failure is the error.
    let mut reports = Vec::new();
    let mut failure = None;
    let mut interrupted = false;
    for (what, child) in children.0.drain(..) {
        let output = child
            .wait_with_output()
            .with_context(|| format!("waiting for the {what}"))?;
        {
            use std::os::unix::process::ExitStatusExt;
            interrupted |= matches!(output.status.signal(), Some(2 | 3));
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let parsed = stdout
            .lines()
            .last()
            .and_then(|line| serde_json::from_str::<WorkerReport>(line).ok());
        match parsed {
            Some(report) if output.status.success() => reports.push(report),
            _ => {
                let stderr = String::from_utf8_lossy(&output.stderr);
                let message = stderr
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("no message")
                    .trim_start_matches("numalab: error: ")
                    .to_owned();
                failure.get_or_insert_with(|| {
                    anyhow::anyhow!("the {what} failed ({}): {message}", output.status)
                });
            }
        }
    }
    if interrupted {
        return Err(Interrupted.into());
    }
    if let Some(err) = failure {
        return Err(err);
    }
    let per_stream = 1 + args.readers;
    let mut results = Vec::new();
    for (i, ((stream, audit), ring)) in streams.iter().zip(audits).zip(&rings).enumerate() {
        // Readers were started stream by stream, then the writers.
        let readers: Vec<&WorkerReport> = reports[i * args.readers..(i + 1) * args.readers]
            .iter()
            .collect();
        let writer = &reports[streams.len() * args.readers + i];
        debug_assert_eq!(per_stream, readers.len() + 1);
        let end = readers
            .iter()
            .map(|r| r.end_ns)
            .max()
            .unwrap_or(writer.end_ns);
        let seconds = end.saturating_sub(writer.start_ns) as f64 / 1e9;
        for reader in &readers {
            if reader.bytes != writer.bytes {
                bail!(
                    "stream {i}: a reader got {} bytes of the {} written",
                    reader.bytes,
                    writer.bytes
                );
            }
        }
        let placed = |report: &WorkerReport, cpus: &CpuSet| {
            let ok = report.cpus_seen.is_subset(cpus) && !report.cpus_seen.is_empty();
            ProcessPlacement {
                pid: report.pid,
                cpus_allowed: report.cpus_allowed.clone(),
                cpus_seen: report.cpus_seen.clone(),
                nodes_seen: report.nodes_seen.clone(),
                cpu_seconds: report.cpu_seconds,
                ok,
            }
        };
        let writer_placement = placed(writer, &stream.writer_cpus);
        let reader_placements: Vec<ProcessPlacement> = readers
            .iter()
            .map(|r| placed(r, &stream.reader_cpus))
            .collect();
        let placement_ok = audit.is_match()
            && audit.found.on_node(stream.memory_node) == audit.found.present()
            && writer_placement.ok
            && reader_placements.iter().all(|r| r.ok);
        results.push(StreamResult {
            plan: stream.clone(),
            bytes: writer.bytes,
            seconds,
            mb_per_s: if seconds > 0.0 {
                writer.bytes as f64 / seconds / 1e6
            } else {
                0.0
            },
            memory: audit,
            writer: writer_placement,
            readers: reader_placements,
            placement_ok,
            counters: ring.stats(),
        });
    }
    drop(rings);
    Ok(results)
}

// ---------------------------------------------------------------------------
// Rendering.
// ---------------------------------------------------------------------------

fn mbps(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{v:.0}"))
}

fn stream_cell(stream: &StreamResult) -> String {
    format!(
        "{:.0}{}",
        stream.mb_per_s,
        if stream.placement_ok { "" } else { " (!)" }
    )
}

fn human(report: &RingReport, markdown: bool) -> String {
    let s = &report.settings;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "numalab ring: {} per stream, {} blocks of {}, {}{}, {} reader(s) per stream",
        human_bytes(s.volume_bytes),
        s.blocks,
        human_bytes(s.block_size),
        s.mode.as_str(),
        if s.verify {
            ", every byte verified"
        } else {
            ""
        },
        s.readers_per_stream
    );
    let new_table = |header: Vec<&str>| {
        if markdown {
            output::markdown_table(header)
        } else {
            output::table(header)
        }
    };
    for table_name in ["single-stream", "two-stream", "custom"] {
        let cells: Vec<&CellResult> = report
            .cells
            .iter()
            .filter(|c| c.table == table_name)
            .collect();
        if cells.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\n{table_name}:");
        let mut table = new_table(vec!["cell", "stream MB/s", "total MB/s", "placement"]);
        for cell in &cells {
            let (streams, placement) = match cell.status.as_str() {
                "ran" => (
                    cell.streams
                        .iter()
                        .map(stream_cell)
                        .collect::<Vec<_>>()
                        .join(" + "),
                    if cell.placement_ok {
                        "verified".to_owned()
                    } else {
                        "MISMATCH".to_owned()
                    },
                ),
                status => (status.to_owned(), cell.reason.clone().unwrap_or_default()),
            };
            table.add_row(vec![
                cell.name.clone(),
                streams,
                mbps(cell.total_mb_per_s),
                placement,
            ]);
        }
        out.push_str(&output::render(&table));
    }
    for cell in report.cells.iter().filter(|c| c.status == "ran") {
        for (i, stream) in cell.streams.iter().enumerate() {
            if !stream.placement_ok {
                let _ = writeln!(
                    out,
                    "warning: {} stream {i}: memory {}; writer ran on CPUs {}, readers on {}",
                    cell.name,
                    stream.memory.note,
                    stream.writer.cpus_seen,
                    stream
                        .readers
                        .iter()
                        .map(|r| r.cpus_seen.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
        }
    }
    let skipped = report
        .cells
        .iter()
        .filter(|c| c.status == "skipped")
        .count();
    if skipped > 0 {
        let _ = writeln!(
            out,
            "\n{skipped} cell(s) need nodes this machine does not have; the others ran"
        );
    }
    out
}

fn csv(report: &RingReport) -> String {
    let mut csv = Csv::new(&[
        "table",
        "cell",
        "status",
        "stream",
        "memory_node",
        "writer_cpus",
        "reader_cpus",
        "bytes",
        "seconds",
        "mb_per_s",
        "memory_on_node",
        "placement_ok",
        "reason",
    ]);
    for cell in &report.cells {
        if cell.streams.is_empty() {
            csv.row([
                cell.table.clone(),
                cell.name.clone(),
                cell.status.clone(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                "false".into(),
                cell.reason.clone().unwrap_or_default(),
            ]);
        }
        for (i, stream) in cell.streams.iter().enumerate() {
            csv.row([
                cell.table.clone(),
                cell.name.clone(),
                cell.status.clone(),
                i.to_string(),
                stream.plan.memory_node.to_string(),
                stream.plan.writer_cpus.to_string(),
                stream.plan.reader_cpus.to_string(),
                stream.bytes.to_string(),
                format!("{:.6}", stream.seconds),
                format!("{:.1}", stream.mb_per_s),
                format!("{:.4}", stream.memory.on_expected),
                stream.placement_ok.to_string(),
                String::new(),
            ]);
        }
    }
    csv.finish()
}

fn list(args: &RingArgs) -> Result<()> {
    let entries = ring::list();
    let text = match args.output.format() {
        Format::Json => {
            output::to_json("numalab.ring-list", 1, &ListReport { segments: &entries })?
        }
        Format::Csv => {
            let mut csv = Csv::new(&[
                "name", "path", "bytes", "state", "writer", "readers", "problem",
            ]);
            for e in &entries {
                csv.row([
                    e.name.clone(),
                    e.path.display().to_string(),
                    e.size.to_string(),
                    state_of(e).into(),
                    e.stats
                        .as_ref()
                        .map_or(String::new(), |s| s.writer.state.clone()),
                    e.stats
                        .as_ref()
                        .map_or(String::new(), |s| s.readers.len().to_string()),
                    e.problem.clone().unwrap_or_default(),
                ]);
            }
            csv.finish()
        }
        Format::Table | Format::Markdown => {
            if entries.is_empty() {
                "no numalab ring segments on this machine\n".to_owned()
            } else {
                let mut table = output::table(vec![
                    "name", "size", "state", "writer", "readers", "written", "note",
                ]);
                for e in &entries {
                    let (writer, readers, written) = match &e.stats {
                        Some(s) => (
                            format!("{} (pid {})", s.writer.state, s.writer.pid),
                            s.readers
                                .iter()
                                .map(|r| format!("{}:{} lag {}", r.pid, r.state, r.lag_blocks))
                                .collect::<Vec<_>>()
                                .join(", "),
                            human_bytes(s.writer.bytes),
                        ),
                        None => Default::default(),
                    };
                    table.add_row(vec![
                        e.name.clone(),
                        human_bytes(e.size),
                        state_of(e).into(),
                        writer,
                        readers,
                        written,
                        e.problem.clone().unwrap_or_default(),
                    ]);
                }
                let mut text = output::render(&table);
                if entries.iter().any(SegmentEntry::is_stale) {
                    text.push_str("remove a stale segment with `numalab ring --cleanup NAME`\n");
                }
                text
            }
        }
    };
    args.output.emit(&text)
}

fn state_of(entry: &SegmentEntry) -> &'static str {
    if entry.in_use {
        "in use"
    } else {
        "stale"
    }
}

#[derive(Debug, Serialize)]
struct ListReport<'a> {
    /// Every segment found.
    segments: &'a [SegmentEntry],
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
    pub mode: Mode,
    /// Seconds to wait for the other side
    #[arg(long)]
    pub timeout: f64,
    /// Bytes to write
    #[arg(long)]
    pub volume: u64,
    /// Readers the writer waits for
    #[arg(long)]
    pub readers: usize,
    /// Sequence-numbered words, checked by readers
    #[arg(long)]
    pub verify: bool,
}

/// The word at position `index` of a verified stream.
fn word(index: u64) -> u64 {
    index.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (index >> 29)
}

/// Where the worker ran.
#[derive(Default)]
struct Seen {
    cpus: BTreeSet<u32>,
    nodes: BTreeSet<u32>,
}

impl Seen {
    fn sample(&mut self) {
        let here = affinity::current();
        self.cpus.insert(here.cpu);
        self.nodes.insert(here.node);
    }
}

/// The most a copying writer copies from (without `--verify`).
const SOURCE_MAX: usize = 4 << 20;

fn now_ns() -> u64 {
    numalab::system::monotonic().as_nanos() as u64
}

/// Runs a worker; prints its [`WorkerReport`] as one JSON line.
pub fn worker(args: &WorkerArgs) -> Result<()> {
    // Started under numalab ring's interrupt shield: Ctrl-C must end us.
    numalab::system::default_interrupts();
    let cpus: CpuSet = args
        .cpus
        .parse()
        .with_context(|| format!("--cpus={}", args.cpus))?;
    affinity::bind_thread_to_cpus(&cpus).with_context(|| format!("pinning to CPUs {cpus}"))?;
    let timeout = Duration::from_secs_f64(args.timeout);
    // SAFETY: the ring was made by the `numalab ring` that started this
    // process, and every process touching it is a numalab worker.
    let ring = unsafe { Ring::open(&args.name) }
        .with_context(|| format!("opening ring {:?}", args.name))?;
    let block = ring.block_size();
    let cpu_before = numalab::system::process_cpu_time();
    let mut seen = Seen::default();
    seen.sample();
    let (bytes, blocks, start_ns, end_ns, skipped) = match args.role.as_str() {
        "writer" => {
            let mut writer = ring.writer()?;
            writer.set_timeout(Some(timeout));
            writer.wait_for_readers(args.readers, timeout)?;
            // The source buffer, written here: on this process's node. A
            // block of sequence words with --verify; otherwise at most
            // SOURCE_MAX, copied in as often as a block takes, as
            // PSRDada's dada_junkdb does: a producer's data is usually
            // fresh in its cache, not read back from memory.
            let source_len = if args.verify {
                block
            } else {
                block.min(SOURCE_MAX)
            };
            let mut source = vec![1u8; source_len];
            // An in-place producer stores as the ring's own copy-in would
            // (streaming for blocks too large to stay in the cache).
            let isa = Isa::detect();
            let store = if writer.streams() {
                Store::NonTemporal
            } else {
                Store::Cached
            };
            let mut written = 0u64;
            let mut blocks = 0u64;
            let start = now_ns();
            while written < args.volume {
                let len = (args.volume - written).min(block as u64) as usize;
                let first_word = written / 8;
                match args.mode {
                    Mode::Copy => {
                        if args.verify {
                            fill_words(&mut source[..len], first_word);
                            writer.write(&source[..len])?;
                        } else {
                            source[0] = blocks as u8;
                            let mut left = len;
                            while left > 0 {
                                let part = left.min(source.len());
                                writer.write(&source[..part])?;
                                left -= part;
                            }
                        }
                    }
                    Mode::InPlace => {
                        let mut slot = writer.claim()?;
                        if args.verify {
                            fill_words(&mut slot[..len], first_word);
                        } else {
                            kernels::write(&mut slot[..len], blocks as u8, isa, store);
                        }
                        slot.commit(len)?;
                    }
                }
                written += len as u64;
                blocks += 1;
                if blocks.is_multiple_of(64) {
                    seen.sample();
                }
            }
            writer.finish()?;
            (written, blocks, start, now_ns(), 0)
        }
        "reader" => {
            let mut reader = ring.reader()?;
            reader.set_timeout(Some(timeout));
            // Written here, so its pages are this process's own.
            let mut buf = vec![1u8; block];
            let isa = Isa::detect();
            let mut read = 0u64;
            let mut blocks = 0u64;
            let mut start = None;
            let mut sink = 0u64;
            loop {
                let n = match args.mode {
                    Mode::Copy => {
                        let n = reader.read(&mut buf)?;
                        if n == 0 {
                            // End of the transfer; then the stream's end.
                            if reader.read(&mut buf)? == 0 {
                                break;
                            }
                            bail!("a second transfer arrived; the writer sends one");
                        }
                        if args.verify {
                            check_words(&buf[..n], read / 8)?;
                        } else {
                            sink = sink.wrapping_add(u64::from(buf[n - 1]));
                        }
                        n
                    }
                    Mode::InPlace => {
                        let Some(slot) = reader.borrow()? else { break };
                        if args.verify {
                            check_words(&slot, read / 8)?;
                        } else {
                            // Every byte, with the widest loads there are.
                            sink ^= kernels::read(&slot, isa);
                        }
                        slot.len()
                    }
                };
                start.get_or_insert_with(now_ns);
                read += n as u64;
                blocks += 1;
                if blocks.is_multiple_of(64) {
                    seen.sample();
                }
            }
            std::hint::black_box(sink);
            let end = now_ns();
            (read, blocks, start.unwrap_or(end), end, reader.skipped())
        }
        other => bail!("--role={other}: expected writer or reader"),
    };
    seen.sample();
    let topology_nodes: NodeSet = seen.nodes.iter().copied().collect();
    let report = WorkerReport {
        role: args.role.clone(),
        pid: std::process::id(),
        bytes,
        blocks,
        start_ns,
        end_ns,
        cpu_seconds: (numalab::system::process_cpu_time() - cpu_before).as_secs_f64(),
        cpus_allowed: affinity::thread_cpus().unwrap_or_default(),
        cpus_seen: seen.cpus.iter().copied().collect(),
        nodes_seen: topology_nodes,
        skipped_blocks: skipped,
    };
    output::print_stdout(&format!("{}\n", serde_json::to_string(&report)?))
}

fn fill_words(bytes: &mut [u8], first: u64) {
    for (i, chunk) in bytes.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&word(first + i as u64).to_le_bytes());
    }
}

fn check_words(bytes: &[u8], first: u64) -> Result<()> {
    if !bytes.len().is_multiple_of(8) {
        bail!("verify: a read of {} bytes is not whole words", bytes.len());
    }
    for (i, chunk) in bytes.chunks_exact(8).enumerate() {
        let index = first + i as u64;
        let found = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        if found != word(index) {
            bail!(
                "verify: byte {} of the stream is wrong (word {:#x}, expected {:#x}): lost, repeated or reordered data",
                index * 8,
                found,
                word(index)
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_blog_layout_has_eight_single_and_four_two_stream_cells() {
        let topology = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1").unwrap();
        let cells = blog_cells(&topology);
        assert_eq!(
            cells.iter().filter(|c| c.table == "single-stream").count(),
            8
        );
        let two: Vec<_> = cells.iter().filter(|c| c.table == "two-stream").collect();
        let names: Vec<&str> = two.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["isolated", "adjacent on 0", "adjacent on 1", "crossed"]
        );
        // Crossed: each stream's memory on the other stream's node.
        assert_eq!(two[3].wanted, vec![(1, 0, 0), (0, 1, 1)]);
        let singles: BTreeSet<(u32, u32, u32)> = cells
            .iter()
            .filter(|c| c.table == "single-stream")
            .map(|c| c.wanted[0])
            .collect();
        assert_eq!(singles.len(), 8);
    }

    #[test]
    fn one_node_machines_skip_what_they_cannot_place() {
        let topology = Topology::from_synthetic("pack:1 numa:1 core:2 pu:1").unwrap();
        let runnable: Vec<String> = blog_cells(&topology)
            .into_iter()
            .filter(|c| {
                c.wanted.iter().all(|&(m, w, r)| {
                    unusable(&topology, m, "memory").is_none()
                        && unusable(&topology, w, "writer").is_none()
                        && unusable(&topology, r, "reader").is_none()
                })
            })
            .map(|c| c.name)
            .collect();
        assert_eq!(runnable, ["memory 0, writer 0, reader 0", "adjacent on 0"]);
        let why = unusable(&topology, 1, "memory").unwrap();
        assert!(why.contains("node 1 does not exist"), "{why}");
    }

    #[test]
    fn verified_words_catch_a_repeat() {
        let mut block = vec![0u8; 64];
        fill_words(&mut block, 8);
        check_words(&block, 8).unwrap();
        let err = check_words(&block, 0).unwrap_err().to_string();
        assert!(err.contains("byte 0 of the stream is wrong"), "{err}");
    }
}
