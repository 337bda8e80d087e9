//! Running `numalab ring`: for each cell, one ring per stream on its
//! memory node, readers and then writers started as processes of the
//! worker executable and pinned to their CPUs, every report collected and
//! every placement audited.

use std::error::Error as _;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};

use numalab::audit::PlacementAudit;
use numalab::ring::{Ring, RingError};
use numalab::system::{Environment, InterruptShield};
use numalab::{CpuSet, Topology};

use super::config::RingConfig;
use super::plan::{self, PlanError, StreamPlan};
use super::result::{
    CellResult, CellStatus, ProcessPlacement, RingReport, Settings, StreamResult, WorkerReport,
};
use super::worker::{Role, WorkerConfig};

/// Why `numalab ring` stopped.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::ring::{run, PlanError, RingConfig, RunError};
///
/// let topology = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// let mut config = RingConfig::new("numalab");
/// config.streams = 0;
/// // The plan is checked before any ring or process is made.
/// let err = run(&config, &topology, &mut |_| {}).unwrap_err();
/// assert!(matches!(err, RunError::Plan(PlanError::NoStreams)), "{err}");
/// assert_eq!(err.to_string(), "--streams=0: at least one stream is needed");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The node or CPU choices cannot be planned.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A stream's ring could not be made.
    #[error("making the ring of stream {stream} on node {node}")]
    MakeRing {
        /// The stream.
        stream: usize,
        /// Its memory node.
        node: u32,
        /// Why.
        #[source]
        source: RingError,
    },
    /// A worker process could not be started or waited for.
    #[error("{what}")]
    Process {
        /// What was being done.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A worker process failed; its last line of standard error.
    #[error("the {what} failed ({status}): {message}")]
    Worker {
        /// Which worker.
        what: String,
        /// How it exited.
        status: String,
        /// What it said last.
        message: String,
    },
    /// A reader got fewer (or more) bytes than the writer wrote.
    #[error("stream {stream}: a reader got {read} bytes of the {written} written")]
    ShortRead {
        /// The stream.
        stream: usize,
        /// Bytes the reader read.
        read: u64,
        /// Bytes the writer wrote.
        written: u64,
    },
    /// A worker was ended by Ctrl-C: the run stops, its segments are
    /// removed.
    #[error("interrupted (Ctrl-C); the run's ring segments were removed")]
    Interrupted,
}

/// `err` and every error under it, joined by `: `.
fn with_sources(err: &RunError) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Runs every cell `config` asks for on this machine (`topology` is its
/// topology). `progress` hears one line as each cell starts. Ctrl-C ends
/// the workers and the run ([`RunError::Interrupted`]), removing its
/// segments. In a preset table a cell that fails is reported as failed and
/// the others still run; a custom cell's failure is the error.
pub fn run(
    config: &RingConfig,
    topology: &Topology,
    progress: &mut dyn FnMut(&str),
) -> Result<RingReport, RunError> {
    let cells = plan::cells(config, topology)?;
    // Ctrl-C ends the workers (they restore the default); numalab stays to
    // remove the segments and say so.
    let _shield = InterruptShield::new();
    let mut results = Vec::new();
    for cell in cells {
        let not_ran = |status, reason| CellResult {
            table: cell.table.into(),
            name: cell.name.clone(),
            status,
            reason: Some(reason),
            streams: Vec::new(),
            total_mb_per_s: None,
            placement_ok: false,
        };
        let result = match &cell.streams {
            Err(reason) => not_ran(CellStatus::Skipped, reason.clone()),
            Ok(streams) => {
                progress(&format!("running {} cell: {}", cell.table, cell.name));
                match run_cell(config, streams) {
                    Ok(streams) => CellResult {
                        table: cell.table.into(),
                        name: cell.name.clone(),
                        status: CellStatus::Ran,
                        reason: None,
                        total_mb_per_s: Some(streams.iter().map(|s| s.mb_per_s).sum()),
                        placement_ok: streams.iter().all(|s| s.placement_ok),
                        streams,
                    },
                    Err(err)
                        if config.layout.is_some() && !matches!(err, RunError::Interrupted) =>
                    {
                        not_ran(CellStatus::Failed, with_sources(&err))
                    }
                    Err(err) => return Err(err),
                }
            }
        };
        results.push(result);
    }
    Ok(RingReport {
        environment: Environment::current(topology),
        settings: Settings {
            volume_bytes: config.volume,
            block_size: config.block_size,
            blocks: config.blocks,
            mode: config.mode,
            huge_pages: config.huge_pages,
            readers_per_stream: config.readers,
            verify: config.verify,
        },
        cells: results,
    })
}

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

fn start_worker(
    config: &RingConfig,
    role: Role,
    name: &str,
    cpus: &CpuSet,
) -> Result<Child, RunError> {
    let worker = WorkerConfig {
        role,
        name: name.to_owned(),
        cpus: cpus.clone(),
        mode: config.mode,
        timeout: config.timeout,
        volume: config.volume,
        readers: config.readers,
        verify: config.verify,
    };
    Command::new(&config.worker_exe)
        .args(worker.args())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| RunError::Process {
            what: format!("starting a {} process", role.as_str()),
            source,
        })
}

fn run_cell(config: &RingConfig, streams: &[StreamPlan]) -> Result<Vec<StreamResult>, RunError> {
    let mut rings = Vec::new();
    for (i, stream) in streams.iter().enumerate() {
        let name = format!("run-{}-{i}", std::process::id());
        let options = config.ring_options(&name, stream.memory_node);
        let ring = Ring::create(&options).map_err(|source| RunError::MakeRing {
            stream: i,
            node: stream.memory_node,
            source,
        })?;
        rings.push(ring);
    }
    let audits: Vec<PlacementAudit> = rings.iter().map(Ring::audit).collect();

    let mut children = Children(Vec::new());
    for (stream, ring) in streams.iter().zip(&rings) {
        for r in 0..config.readers {
            let child = start_worker(config, Role::Reader, ring.name(), &stream.reader_cpus)?;
            children
                .0
                .push((format!("reader {r} of ring {}", ring.name()), child));
        }
    }
    for (stream, ring) in streams.iter().zip(&rings) {
        let child = start_worker(config, Role::Writer, ring.name(), &stream.writer_cpus)?;
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
            .map_err(|source| RunError::Process {
                what: format!("waiting for the {what}"),
                source,
            })?;
        interrupted |= matches!(output.status.signal(), Some(2 | 3));
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
                failure.get_or_insert_with(|| RunError::Worker {
                    what,
                    status: output.status.to_string(),
                    message,
                });
            }
        }
    }
    if interrupted {
        return Err(RunError::Interrupted);
    }
    if let Some(err) = failure {
        return Err(err);
    }
    let mut results = Vec::new();
    for (i, ((stream, audit), ring)) in streams.iter().zip(audits).zip(&rings).enumerate() {
        // Readers were started stream by stream, then the writers.
        let readers = &reports[i * config.readers..(i + 1) * config.readers];
        let writer = &reports[streams.len() * config.readers + i];
        let end = readers
            .iter()
            .map(|r| r.end_ns)
            .max()
            .unwrap_or(writer.end_ns);
        let seconds = end.saturating_sub(writer.start_ns) as f64 / 1e9;
        for reader in readers {
            if reader.bytes != writer.bytes {
                return Err(RunError::ShortRead {
                    stream: i,
                    read: reader.bytes,
                    written: writer.bytes,
                });
            }
        }
        let writer_placement = ProcessPlacement::of(writer, &stream.writer_cpus);
        let reader_placements: Vec<ProcessPlacement> = readers
            .iter()
            .map(|r| ProcessPlacement::of(r, &stream.reader_cpus))
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
