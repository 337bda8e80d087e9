//! What `numalab ring` found: the `numalab.ring` document, and the
//! `numalab.ring-list` document of `numalab ring --list`.

use numalab::audit::PlacementAudit;
use numalab::ring::{RingStats, SegmentEntry};
use numalab::system::Environment;
use numalab::{CpuSet, HugePages, NodeSet};
use serde::{Deserialize, Serialize};

use super::config::Mode;
use super::plan::StreamPlan;
use super::worker::WorkerReport;
use crate::document::Schema;

/// The `numalab.ring` document.
///
/// ```
/// use numalab::system::Environment;
/// use numalab::{HugePages, Topology};
/// use numalab_bench::document::{Document, Schema};
/// use numalab_bench::ring::{Mode, RingReport, Settings};
///
/// assert_eq!(RingReport::NAME, "numalab.ring");
/// let topology = Topology::from_synthetic("pack:1 numa:1 core:1 pu:1").unwrap();
/// let report = RingReport {
///     environment: Environment::current(&topology),
///     settings: Settings { volume_bytes: 1 << 20, block_size: 64 << 10, blocks: 8,
///         mode: Mode::InPlace, huge_pages: HugePages::None, readers_per_stream: 1,
///         verify: false, segment_bytes: 8 * (64 << 10) + 8192, ramp_bytes: 0 },
///     cells: Vec::new(),
///     interrupted: false,
/// };
/// let text = Document::new(&report).to_json().unwrap();
/// assert!(text.contains(r#""mode": "in-place""#));
/// let back: RingReport = Document::parse(&text).unwrap();
/// assert_eq!(back.settings, report.settings);
/// assert!(back.failed_cell().is_none());
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RingReport {
    /// Where it was measured.
    pub environment: Environment,
    /// The settings every cell used.
    pub settings: Settings,
    /// The cells, in table order; each says whether it ran.
    pub cells: Vec<CellResult>,
    /// A signal (Ctrl-C, `SIGTERM`, `SIGHUP`) stopped the run: the cells
    /// that finished have their figures, the others are `interrupted`.
    #[serde(default)]
    pub interrupted: bool,
}

impl Schema for RingReport {
    const NAME: &'static str = "numalab.ring";
    const VERSION: u32 = 1;
}

impl RingReport {
    /// The first cell that failed, if one did.
    pub fn failed_cell(&self) -> Option<&CellResult> {
        self.cells.iter().find(|c| c.status == CellStatus::Failed)
    }
}

/// Settings shared by every cell.
///
/// ```
/// use numalab::HugePages;
/// use numalab_bench::ring::{Mode, Settings};
///
/// let settings = Settings { volume_bytes: 1 << 30, block_size: 4 << 20, blocks: 8,
///     mode: Mode::Copy, huge_pages: HugePages::Transparent, readers_per_stream: 2,
///     verify: true, segment_bytes: (32 << 20) + (2 << 20), ramp_bytes: 64 << 20 };
/// let json = serde_json::to_value(&settings)?;
/// assert_eq!(json["mode"], "copy");
/// assert_eq!(serde_json::from_value::<Settings>(json)?, settings);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Bytes of each ring's segment: its `blocks × block_size` of data,
    /// and a descriptor and transfer-header slot per block, control words
    /// and page rounding (0 in documents from before it was recorded).
    #[serde(default)]
    pub segment_bytes: u64,
    /// Bytes each stream moved first, untimed (`--ramp`), in whole blocks
    /// (0 in documents from before it was recorded).
    #[serde(default)]
    pub ramp_bytes: u64,
}

/// Whether a cell ran.
///
/// ```
/// use numalab_bench::ring::CellStatus;
/// assert_eq!(CellStatus::Skipped.as_str(), "skipped");
/// assert_eq!(serde_json::to_string(&CellStatus::Failed)?, r#""failed""#);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CellStatus {
    /// It ran; its streams have figures.
    Ran,
    /// This machine cannot place it.
    Skipped,
    /// It was started and failed.
    Failed,
    /// A signal stopped the run before it finished (or started).
    Interrupted,
}

impl CellStatus {
    /// `ran`, `skipped`, `failed` or `interrupted`, as the JSON spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            CellStatus::Ran => "ran",
            CellStatus::Skipped => "skipped",
            CellStatus::Failed => "failed",
            CellStatus::Interrupted => "interrupted",
        }
    }
}

/// One cell: streams run at the same time.
///
/// ```
/// use numalab_bench::ring::{CellResult, CellStatus};
///
/// // What a one-node machine reports for a cell it cannot place.
/// let cell = CellResult {
///     table: "single-stream".into(), name: "memory 1, writer 0, reader 0".into(),
///     status: CellStatus::Skipped, reason: Some("node 1 does not exist".into()),
///     streams: Vec::new(), total_mb_per_s: None, placement_ok: false,
/// };
/// let json = serde_json::to_value(&cell)?;
/// assert_eq!(json["status"], "skipped");
/// assert!(json["total_mb_per_s"].is_null());
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CellResult {
    /// `single-stream`, `two-stream` (the blog's tables) or `custom`.
    pub table: String,
    /// The cell's name in its table.
    pub name: String,
    /// `ran`, `skipped` (this machine cannot place it), `failed` or
    /// `interrupted`.
    pub status: CellStatus,
    /// Why it was skipped, failed or interrupted.
    pub reason: Option<String>,
    /// Each stream.
    pub streams: Vec<StreamResult>,
    /// Sum of the streams' MB/s.
    pub total_mb_per_s: Option<f64>,
    /// Whether every stream's memory, writer and readers were where asked.
    pub placement_ok: bool,
}

/// One stream of a cell.
///
/// ```
/// use numalab::audit::audit;
/// use numalab::locate::PageHistogram;
/// use numalab::ring::{Ring, RingOptions};
/// use numalab::{MemPolicy, NodeSet, Topology};
/// use numalab_bench::ring::{ProcessPlacement, StreamPlan, StreamResult, WorkerReport};
/// # let name = format!("doc-stream-result-{}", std::process::id());
/// # let ring = Ring::create(&RingOptions::new(&name, 4 * 4096, 4096).node(0))?;
/// # let topology = Topology::from_synthetic("pack:1 numa:1 core:2 pu:1")?;
/// # let writer: WorkerReport = serde_json::from_str(r#"{"role":"writer","pid":7,
/// #   "bytes":2000000000,"blocks":477,"start_ns":0,"end_ns":500000000,"cpu_seconds":0.5,
/// #   "cpus_allowed":[0,1],"cpus_seen":[1],"nodes_seen":[0],"skipped_blocks":0}"#)?;
/// # let reader = writer.clone();
/// # let pages = PageHistogram { page_size: 4096, queried: 4,
/// #     per_node: [(0, 4)].into(), ..Default::default() };
///
/// let plan = StreamPlan::on_nodes(&topology, 0, 0, 0);
/// let memory = audit(&MemPolicy::Bind(NodeSet::single(0)), &NodeSet::new(), &pages);
/// let stream = StreamResult {
///     writer: ProcessPlacement::of(&writer, &plan.writer_cpus),
///     readers: vec![ProcessPlacement::of(&reader, &plan.reader_cpus)],
///     bytes: writer.bytes, seconds: 0.5, mb_per_s: writer.bytes as f64 / 0.5 / 1e6,
///     placement_ok: memory.is_match(), memory, counters: ring.stats(), plan,
/// };
/// assert_eq!(stream.mb_per_s, 4000.0);
/// assert!(stream.placement_ok && stream.writer.ok && stream.readers[0].ok);
/// assert_eq!(stream.counters.policy, "bind:0");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    pub counters: RingStats,
}

/// Where a worker process ran, as it saw itself.
///
/// ```
/// use numalab_bench::ring::{ProcessPlacement, WorkerReport};
///
/// let line = r#"{"role":"writer","pid":7,"bytes":64,"blocks":1,"start_ns":0,"end_ns":9,
///   "cpu_seconds":0.25,"cpus_allowed":[0,1],"cpus_seen":[0,1],"nodes_seen":[0],
///   "skipped_blocks":0}"#;
/// let report: WorkerReport = serde_json::from_str(line)?;
/// // Asked to stay on CPU 0, it was also seen on CPU 1.
/// let placed = ProcessPlacement::of(&report, &"0".parse()?);
/// assert!(!placed.ok);
/// assert_eq!((placed.pid, placed.nodes_seen.to_string()), (7, "0".to_string()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

impl ProcessPlacement {
    /// The placement `report` shows against the CPUs it was asked to
    /// stay on.
    pub fn of(report: &WorkerReport, cpus: &CpuSet) -> ProcessPlacement {
        ProcessPlacement {
            pid: report.pid,
            cpus_allowed: report.cpus_allowed.clone(),
            cpus_seen: report.cpus_seen.clone(),
            nodes_seen: report.nodes_seen.clone(),
            cpu_seconds: report.cpu_seconds,
            ok: report.cpus_seen.is_subset(cpus) && !report.cpus_seen.is_empty(),
        }
    }
}

/// The `numalab.ring-list` document: the ring segments on this machine.
///
/// ```
/// use numalab_bench::document::{Document, Schema};
/// use numalab_bench::ring::RingListReport;
///
/// assert_eq!(RingListReport::NAME, "numalab.ring-list");
/// let text = Document::new(&RingListReport { segments: Vec::new() }).to_json().unwrap();
/// let back: RingListReport = Document::parse(&text).unwrap();
/// assert!(back.segments.is_empty());
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RingListReport {
    /// Every segment found.
    pub segments: Vec<SegmentEntry>,
}

impl Schema for RingListReport {
    const NAME: &'static str = "numalab.ring-list";
    const VERSION: u32 = 1;
}

impl RingListReport {
    /// The ring segments on this machine now, live and stale.
    pub fn current() -> RingListReport {
        RingListReport {
            segments: numalab::ring::list(),
        }
    }
}
