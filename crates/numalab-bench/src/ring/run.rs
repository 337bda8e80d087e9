//! Running `numalab ring`: for each cell, one ring per stream on its
//! memory node, readers and then writers started as processes of the
//! worker executable and pinned to their CPUs, every report collected and
//! every placement audited.

use std::error::Error as _;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use numalab::audit::PlacementAudit;
use numalab::ring::{self, Ring, RingError, RingOptions};
use numalab::system::Environment;
use numalab::{CpuSet, Topology};

use super::config::{ConfigError, RingConfig};
use super::plan::{self, PlanError, StreamPlan};
use super::result::{CellResult, CellStatus, ProcessPlacement, RingReport, Settings, StreamResult};
use super::worker::{Role, WorkerConfig, WorkerReport};
use crate::control::Control;
use crate::message::Message;

/// Why `numalab ring` stopped.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::control::Control;
/// use numalab_bench::ring::{run, ConfigError, PlanError, RingConfig, RunError};
///
/// let topology = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// let mut config = RingConfig::new("numalab");
/// config.streams = 0;
/// // The plan is checked before any ring or process is made.
/// let err = run(&config, &topology, &Control::new()).unwrap_err();
/// assert!(
///     matches!(err, RunError::Plan(PlanError::Config(ConfigError::NoStreams))),
///     "{err}"
/// );
/// assert_eq!(err.to_string(), "streams=0: at least one stream is needed");
/// // `numalab ring` spells the setting as its flag.
/// let flag = |name: &str| (name == "streams").then_some("--streams");
/// assert_eq!(
///     err.message().unwrap().spelt(flag),
///     "--streams=0: at least one stream is needed"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The node or CPU choices cannot be planned, or a count or size is
    /// out of range.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The rings of a cell do not fit in memory together (checked before
    /// any is made).
    #[error("{}", no_room(*streams, *blocks, *block_size))]
    NoRoom {
        /// Streams of the cell, one ring each.
        streams: usize,
        /// Blocks per ring.
        blocks: u64,
        /// Bytes per block.
        block_size: u64,
        /// The total, and where it does not fit.
        #[source]
        source: RingError,
    },
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
}

impl From<ConfigError> for RunError {
    fn from(err: ConfigError) -> RunError {
        RunError::Plan(err.into())
    }
}

impl RunError {
    /// What went wrong, its settings named `«field»` for the caller to
    /// spell ([`Message::spelt`]), where the error names settings.
    pub fn message(&self) -> Option<Message> {
        match self {
            RunError::Plan(err) => Some(err.message()),
            RunError::NoRoom {
                streams,
                blocks,
                block_size,
                ..
            } => Some(no_room(*streams, *blocks, *block_size)),
            _ => None,
        }
    }
}

fn no_room(streams: usize, blocks: u64, block_size: u64) -> Message {
    Message::new(format!(
        "«streams»={streams} «blocks»={blocks} «block_size»={block_size}"
    ))
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
/// topology). `control` hears one line as each cell starts.
///
/// `control` is how the caller asks the run to end: a signal handler calls
/// [`Control::stop_by`] with the signal that arrived (Ctrl-C's `SIGINT`,
/// `SIGTERM`, `SIGHUP`), or the caller [`Control::stop`]. The run then ends its workers, removes its
/// segments, and returns the report with the cells that finished and the
/// others marked `interrupted` ([`RingReport::interrupted`]). A worker
/// ended by Ctrl-C (the terminal sends it to the whole job) stops the run
/// the same way. Without handlers installed, a signal ends the calling
/// process at once, but not the workers' rings: each worker is told by the
/// kernel when the thread that started it ends (so call this from a
/// thread that lives until it returns), and removes its ring then.
///
/// In a preset table a cell that fails is reported as failed and the
/// others still run; a custom cell's failure is the error.
pub fn run(
    config: &RingConfig,
    topology: &Topology,
    control: &Control,
) -> Result<RingReport, RunError> {
    config.check().map_err(PlanError::from)?;
    let cells = plan::cells(config, topology)?;
    let segment_bytes = config
        .ring_options("check", 0)
        .segment_size()
        .map_err(|source| PlanError::from(ConfigError::Ring { source }))?;
    // Auto's rule for blocks that may stream, settled here, where the
    // run may use two CPUs to measure a writer and a reader together;
    // the workers, each pinned to its own CPUs, read it back from the
    // cache file instead of measuring one core alone.
    if config.block_size >= ring::streaming_threshold() as u64 {
        ring::auto_stores();
    }
    let mut results = Vec::new();
    let mut stopped_by = None;
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
        if stopped_by.is_none() {
            stopped_by = StoppedBy::asked(control);
        }
        let result = match (&cell.streams, stopped_by) {
            (Err(reason), _) => not_ran(CellStatus::Skipped, reason.clone()),
            (Ok(_), Some(by)) => not_ran(
                CellStatus::Interrupted,
                format!("not run: {by} stopped the run"),
            ),
            (Ok(streams), None) => {
                control.say(&format!("running {} cell: {}", cell.table, cell.name));
                match run_cell(config, streams, control) {
                    Ok(CellRun::Done(streams)) => CellResult {
                        table: cell.table.into(),
                        name: cell.name.clone(),
                        status: CellStatus::Ran,
                        reason: None,
                        total_mb_per_s: Some(streams.iter().map(|s| s.mb_per_s).sum()),
                        placement_ok: streams.iter().all(|s| s.placement_ok),
                        streams,
                    },
                    Ok(CellRun::Stopped(by)) => {
                        stopped_by = Some(by);
                        not_ran(
                            CellStatus::Interrupted,
                            format!(
                                "{by} stopped it; its workers were ended and its rings removed"
                            ),
                        )
                    }
                    Err(err) if config.layout.is_some() => {
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
            segment_bytes,
            ramp_bytes: config.ramp_bytes(),
        },
        cells: results,
        interrupted: stopped_by.is_some(),
    })
}

/// How a cell's run ended, when it did not fail.
enum CellRun {
    /// Every worker finished.
    Done(Vec<StreamResult>),
    /// The caller or a signal stopped it.
    Stopped(StoppedBy),
}

/// What stopped a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoppedBy {
    /// A signal (its number), given to the control or seen ending a worker.
    Signal(i32),
    /// The caller, without a signal.
    Caller,
}

impl StoppedBy {
    /// What stopped the run through `control`, if anything did.
    fn asked(control: &Control) -> Option<StoppedBy> {
        control.is_stopped().then(|| {
            control
                .signal()
                .map_or(StoppedBy::Caller, StoppedBy::Signal)
        })
    }
}

impl std::fmt::Display for StoppedBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoppedBy::Signal(signal) => f.write_str(&numalab::launch::signal_name(*signal)),
            StoppedBy::Caller => f.write_str("the caller"),
        }
    }
}

/// A worker process, its output read by two threads so that it never
/// blocks on a full pipe while it is not waited for.
struct Worker {
    what: String,
    child: Child,
    stdout: Option<JoinHandle<Vec<u8>>>,
    stderr: Option<JoinHandle<Vec<u8>>>,
    status: Option<ExitStatus>,
}

impl Worker {
    /// What it wrote on a stream, once it has exited.
    fn take(handle: &mut Option<JoinHandle<Vec<u8>>>) -> Vec<u8> {
        handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

/// Kills and reaps the workers still running on every exit path.
struct Workers(Vec<Worker>);

impl Drop for Workers {
    fn drop(&mut self) {
        for worker in &mut self.0 {
            if worker.status.is_none() {
                let _ = worker.child.kill();
                let _ = worker.child.wait();
            }
        }
    }
}

/// How often the run looks at its workers and at `stop`.
const POLL: Duration = Duration::from_millis(20);

fn drain(pipe: Option<impl Read + Send + 'static>) -> Option<JoinHandle<Vec<u8>>> {
    let mut pipe = pipe?;
    std::thread::Builder::new()
        .stack_size(64 << 10)
        .spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
        .ok()
}

fn start_worker(
    config: &RingConfig,
    role: Role,
    name: &str,
    cpus: &CpuSet,
    what: String,
) -> Result<Worker, RunError> {
    let worker = WorkerConfig {
        role,
        name: name.to_owned(),
        cpus: cpus.clone(),
        mode: config.mode,
        timeout: config.timeout,
        volume: config.volume,
        ramp: config.ramp,
        readers: config.readers,
        verify: config.verify,
    };
    let parent = std::process::id();
    let mut command = Command::new(&config.worker_exe);
    command
        .args(worker.args())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: end_with_parent makes two system calls and allocates
    // nothing, as code between fork and exec must. It makes the worker
    // get SIGTERM when this thread ends, however it ends (kill -9
    // included), and fails the start if this process is gone already.
    unsafe {
        command.pre_exec(move || numalab::system::end_with_parent(parent));
    }
    let mut child = command.spawn().map_err(|source| RunError::Process {
        what: format!("starting a {} process", role.as_str()),
        source,
    })?;
    Ok(Worker {
        what,
        stdout: drain(child.stdout.take()),
        stderr: drain(child.stderr.take()),
        child,
        status: None,
    })
}

/// Waits for every worker; when `control` is stopped, kills them. What
/// stopped the cell, if anything did.
fn wait_all(workers: &mut Workers, control: &Control) -> Result<Option<StoppedBy>, RunError> {
    let mut stopped = None;
    loop {
        let mut running = 0;
        for worker in workers.0.iter_mut().filter(|w| w.status.is_none()) {
            match worker.child.try_wait() {
                Ok(Some(status)) => worker.status = Some(status),
                Ok(None) => running += 1,
                Err(source) => {
                    return Err(RunError::Process {
                        what: format!("waiting for the {}", worker.what),
                        source,
                    })
                }
            }
        }
        if stopped.is_none() {
            stopped = StoppedBy::asked(control);
            if stopped.is_some() {
                for worker in workers.0.iter_mut().filter(|w| w.status.is_none()) {
                    let _ = worker.child.kill();
                }
            }
        }
        if running == 0 {
            break;
        }
        std::thread::sleep(POLL);
    }
    // Ctrl-C reaches the workers (the terminal signals the whole job)
    // maybe before this process's handler has run: a worker ended by it
    // stops the run too.
    Ok(stopped.or_else(|| {
        workers
            .0
            .iter()
            .filter_map(|w| w.status.and_then(|s| s.signal()))
            .find(|&signal| signal == 2 || signal == 3)
            .map(StoppedBy::Signal)
    }))
}

/// How long a stream took to move its volume, nanoseconds: until its
/// last reader had read everything, from the writer's first byte; with a
/// ramp, from when every reader had read the ramp. The writer starts its
/// clock when it has written the ramp, and up to a ring's worth of it is
/// unread then (2 GiB with 8 blocks of 256 MiB): counting its reading
/// made a 2 GiB volume at 256 MiB blocks look half as fast as it was.
fn timed_ns(ramp: bool, writer: &WorkerReport, readers: &[WorkerReport]) -> u64 {
    let end = readers
        .iter()
        .map(|r| r.end_ns)
        .max()
        .unwrap_or(writer.end_ns);
    let start = match readers.iter().map(|r| r.start_ns).max() {
        Some(read_ramp) if ramp => read_ramp,
        _ => writer.start_ns,
    };
    end.saturating_sub(start)
}

fn run_cell(
    config: &RingConfig,
    streams: &[StreamPlan],
    control: &Control,
) -> Result<CellRun, RunError> {
    let names: Vec<String> = (0..streams.len())
        .map(|i| format!("run-{}-{i}", std::process::id()))
        .collect();
    let options: Vec<RingOptions> = streams
        .iter()
        .zip(&names)
        .map(|(stream, name)| config.ring_options(name, stream.memory_node))
        .collect();
    // All the cell's rings, before the first is made: each fitting alone
    // is not enough.
    ring::check_room(&options).map_err(|source| RunError::NoRoom {
        streams: streams.len(),
        blocks: config.blocks,
        block_size: config.block_size,
        source,
    })?;
    let mut rings = Vec::new();
    for (i, (stream, options)) in streams.iter().zip(&options).enumerate() {
        let ring = Ring::create(options).map_err(|source| RunError::MakeRing {
            stream: i,
            node: stream.memory_node,
            source,
        })?;
        rings.push(ring);
    }
    let audits: Vec<PlacementAudit> = rings.iter().map(Ring::audit).collect();

    let mut workers = Workers(Vec::new());
    for (stream, ring) in streams.iter().zip(&rings) {
        for r in 0..config.readers {
            let what = format!("reader {r} of ring {}", ring.name());
            let worker =
                start_worker(config, Role::Reader, ring.name(), &stream.reader_cpus, what)?;
            workers.0.push(worker);
        }
    }
    for (stream, ring) in streams.iter().zip(&rings) {
        let what = format!("writer of ring {}", ring.name());
        let worker = start_worker(config, Role::Writer, ring.name(), &stream.writer_cpus, what)?;
        workers.0.push(worker);
    }
    if let Some(by) = wait_all(&mut workers, control)? {
        // `workers` has reaped them all; dropping `rings` removes the
        // segments.
        return Ok(CellRun::Stopped(by));
    }
    // Collect every report; the first failure is the error.
    let mut reports = Vec::new();
    let mut failure = None;
    for worker in &mut workers.0 {
        let status = worker.status.expect("every worker was waited for");
        let stdout = Worker::take(&mut worker.stdout);
        let stdout = String::from_utf8_lossy(&stdout);
        let parsed = stdout
            .lines()
            .last()
            .and_then(|line| serde_json::from_str::<WorkerReport>(line).ok());
        match parsed {
            Some(report) if status.success() => reports.push(report),
            _ => {
                let stderr = Worker::take(&mut worker.stderr);
                let stderr = String::from_utf8_lossy(&stderr);
                let message = stderr
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("no message")
                    .trim_start_matches("numalab: error: ")
                    .to_owned();
                failure.get_or_insert_with(|| RunError::Worker {
                    what: worker.what.clone(),
                    status: status.to_string(),
                    message,
                });
            }
        }
    }
    if let Some(err) = failure {
        return Err(err);
    }
    let mut results = Vec::new();
    for (i, ((stream, audit), ring)) in streams.iter().zip(audits).zip(&rings).enumerate() {
        // Readers were started stream by stream, then the writers.
        let readers = &reports[i * config.readers..(i + 1) * config.readers];
        let writer = &reports[streams.len() * config.readers + i];
        let seconds = timed_ns(config.ramp_bytes() > 0, writer, readers) as f64 / 1e9;
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
    Ok(CellRun::Done(results))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(role: Role, start_ns: u64, end_ns: u64) -> WorkerReport {
        WorkerReport {
            role,
            pid: 1,
            bytes: 1 << 30,
            blocks: 4,
            start_ns,
            end_ns,
            cpu_seconds: 0.0,
            cpus_allowed: CpuSet::single(0),
            cpus_seen: CpuSet::single(0),
            nodes_seen: Default::default(),
            skipped_blocks: 0,
        }
    }

    #[test]
    fn a_ramp_still_in_the_ring_is_not_timed() {
        // The writer finished the ramp at 100 and its volume at 700; the
        // readers were still reading the ramp until 400 and 450, and read
        // the volume until 1000 and 1100.
        let writer = report(Role::Writer, 100, 700);
        let readers = [
            report(Role::Reader, 400, 1000),
            report(Role::Reader, 450, 1100),
        ];
        assert_eq!(timed_ns(true, &writer, &readers), 1100 - 450);
        // Without a ramp, from the writer's first byte to the last read.
        assert_eq!(timed_ns(false, &writer, &readers), 1100 - 100);
        assert_eq!(timed_ns(true, &writer, &[]), 700 - 100);
    }

    /// The reasons of the cells `run` did not run when stopped first.
    fn stopped_first(control: &Control) -> Vec<String> {
        let topology = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1").unwrap();
        let report = run(&RingConfig::new("numalab"), &topology, control).unwrap();
        assert!(report.interrupted);
        let reasons: Vec<String> = report
            .cells
            .iter()
            .filter(|c| c.status == CellStatus::Interrupted)
            .filter_map(|c| c.reason.clone())
            .collect();
        assert!(!reasons.is_empty(), "{:?}", report.cells);
        assert!(report.cells.iter().all(|c| c.status != CellStatus::Ran));
        reasons
    }

    #[test]
    fn a_stop_runs_no_cell_and_names_what_asked_for_it() {
        let control = Control::new();
        control.stop_by(15);
        for reason in stopped_first(&control) {
            assert_eq!(reason, "not run: SIGTERM stopped the run");
        }
        let control = Control::new();
        control.stop();
        for reason in stopped_first(&control) {
            assert_eq!(reason, "not run: the caller stopped the run");
        }
    }
}
