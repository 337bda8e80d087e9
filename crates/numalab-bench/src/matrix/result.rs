//! The result of `numalab matrix`, as saved in JSON (schema
//! `numalab.matrix`) and read back to draw figures.
//!
//! A consumer checking a run needs only a few fields: `shape.initiators`
//! and `shape.targets` (the matrix's rows and columns), each cell's
//! `placement.verdict` (`match` when every page was on the target node),
//! `placement_summary.all_match`, and each cell's `firmware` (SLIT, HMAT).

use numalab::audit::PlacementAudit;
use numalab::system::Environment;
use serde::{Deserialize, Serialize};

use super::latency::Pages;
use super::llc::CacheSweep;
use super::{Firmware, FirmwareCell, Measurements, Shape};
use crate::kernels::Isa;
use crate::stats::Summary;

/// A repeated figure: median and spread of its samples, and the samples.
///
/// ```
/// use numalab_bench::matrix::Figure;
/// let f = Figure::of(&[100.0, 101.0, 99.0]);
/// assert_eq!(f.summary.median, 100.0);
/// assert!(!f.noisy);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// Median, min, max, mean, CV and outliers of the samples.
    #[serde(flatten)]
    pub summary: Summary,
    /// Whether the spread says the machine was noisy: more than its
    /// number of samples shows by chance on a quiet machine
    /// ([`Summary::is_noisy_for_its_samples`]).
    pub noisy: bool,
    /// Every sample, in the order taken.
    pub samples: Vec<f64>,
}

impl Figure {
    /// Summarises `samples` (an empty or NaN-holding list gives a figure
    /// of zeros with `n` = 0).
    pub fn of(samples: &[f64]) -> Figure {
        let summary = Summary::of(samples).unwrap_or(Summary {
            n: 0,
            median: 0.0,
            min: 0.0,
            max: 0.0,
            mean: 0.0,
            stddev: 0.0,
            cv: 0.0,
            outliers: Vec::new(),
        });
        Figure {
            noisy: summary.is_noisy_for_its_samples(),
            summary,
            samples: samples.to_vec(),
        }
    }

    /// The median.
    pub fn median(&self) -> f64 {
        self.summary.median
    }
}

/// How the run was set up.
///
/// ```
/// # use numalab::{HugePages, NodeSet, Topology};
/// # use numalab_bench::control::Control;
/// # use numalab_bench::matrix::{run::run, MatrixConfig, Measurements, NodeSelection, Shape};
/// # let topo = Topology::system()?;
/// # let node = numalab::affinity::current().node;
/// # let here = NodeSelection { nodes: Some(NodeSet::single(node)), ..Default::default() };
/// # let shape = Shape::of(&topo, &here)?;
/// let measurements = Measurements { latency: true, bandwidth: false, ..Measurements::default() };
/// let config = MatrixConfig { measurements, size: Some(1 << 20), huge_pages: Some(HugePages::None),
///     ..MatrixConfig::quick() };
/// let result = run(&topo, &shape, &config, &Control::new())?;
/// let settings = &result.settings;
/// assert_eq!(settings.measurements, measurements);
/// assert_eq!((settings.latency_bytes, settings.repeats, settings.quick), (1 << 20, 3, true));
/// assert_eq!(settings.huge_pages, Some(HugePages::None));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// What was measured.
    pub measurements: Measurements,
    /// Working set of the idle-latency chase, bytes.
    pub latency_bytes: usize,
    /// Where that size came from: `--size`, the measured knee, or the
    /// `--quick` default.
    pub size_source: String,
    /// Working set of each bandwidth cell (all threads together), bytes.
    pub bandwidth_bytes: usize,
    /// Bandwidth threads per initiator node (`None`: all its CPUs).
    pub threads: Option<usize>,
    /// Samples per figure.
    pub repeats: usize,
    /// Target duration of one sample, ms.
    pub sample_ms: u64,
    /// Whether this was a `--quick` run.
    pub quick: bool,
    /// Pages asked for (`None`: chosen per target node, see each cell's
    /// `pages`).
    pub huge_pages: Option<numalab::HugePages>,
    /// Vector instructions of the bandwidth kernels.
    pub isa: Isa,
    /// CPU frequency used to turn ns into cycles (MHz, `/proc/cpuinfo`),
    /// when known.
    pub cpu_mhz: Option<f64>,
}

/// Every cell's placement, in brief.
///
/// ```
/// # use numalab::{HugePages, NodeSet, Topology};
/// # use numalab_bench::control::Control;
/// # use numalab_bench::matrix::{run::run, MatrixConfig, Measurements, NodeSelection, Shape};
/// # let topo = Topology::system()?;
/// # let node = numalab::affinity::current().node;
/// # let here = NodeSelection { nodes: Some(NodeSet::single(node)), ..Default::default() };
/// # let shape = Shape::of(&topo, &here)?;
/// let measurements = Measurements { latency: true, bandwidth: false, ..Measurements::default() };
/// let config = MatrixConfig { measurements, size: Some(1 << 20), huge_pages: Some(HugePages::None),
///     ..MatrixConfig::quick() };
/// let result = run(&topo, &shape, &config, &Control::new())?;
/// let summary = result.placement_summary;
/// assert_eq!(summary.checked, result.audits().len());
/// assert_eq!(summary.all_match, summary.checked == summary.matching);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PlacementSummary {
    /// Working sets checked.
    pub checked: usize,
    /// Of those, how many had every page on the target node.
    pub matching: usize,
    /// `checked == matching`.
    pub all_match: bool,
}

/// The idle-latency matrix.
///
/// ```
/// # use numalab::{HugePages, NodeSet, Topology};
/// # use numalab_bench::control::Control;
/// # use numalab_bench::matrix::{run::run, MatrixConfig, Measurements, NodeSelection, Shape};
/// # let topo = Topology::system()?;
/// # let node = numalab::affinity::current().node;
/// # let here = NodeSelection { nodes: Some(NodeSet::single(node)), ..Default::default() };
/// # let shape = Shape::of(&topo, &here)?;
/// let measurements = Measurements { latency: true, bandwidth: false, ..Measurements::default() };
/// let config = MatrixConfig { measurements, size: Some(1 << 20), huge_pages: Some(HugePages::None),
///     ..MatrixConfig::quick() };
/// let result = run(&topo, &shape, &config, &Control::new())?;
/// let matrix = result.latency.as_ref().unwrap();
/// // One cell per (initiator, target): 1 x 1 here.
/// assert_eq!(matrix.cells.len(), shape.initiators.len() * shape.targets.len());
/// assert!(result.bandwidth.is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyMatrix {
    /// One cell per (initiator, target), row by row.
    pub cells: Vec<LatencyCell>,
}

/// Idle latency from one CPU node to one memory node.
///
/// ```
/// # use numalab::{HugePages, NodeSet, Topology};
/// # use numalab_bench::control::Control;
/// # use numalab_bench::matrix::{run::run, MatrixConfig, Measurements, NodeSelection, Shape};
/// # let topo = Topology::system()?;
/// # let node = numalab::affinity::current().node;
/// # let here = NodeSelection { nodes: Some(NodeSet::single(node)), ..Default::default() };
/// # let shape = Shape::of(&topo, &here)?;
/// let measurements = Measurements { latency: true, bandwidth: false, ..Measurements::default() };
/// let config = MatrixConfig { measurements, size: Some(1 << 20), huge_pages: Some(HugePages::None),
///     ..MatrixConfig::quick() };
/// let result = run(&topo, &shape, &config, &Control::new())?;
/// let cell = &result.latency.as_ref().unwrap().cells[0];
/// assert_eq!((cell.initiator, cell.target, cell.size_bytes), (node, node, 1 << 20));
/// assert_eq!(cell.latency_ns.samples.len(), 3);
/// assert_eq!(cell.ratio_to_local, Some(1.0), "its own node is the reference");
/// assert!(cell.base_pages.is_none(), "no huge pages to compare with");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyCell {
    /// CPU node.
    pub initiator: u32,
    /// Memory node.
    pub target: u32,
    /// The CPU that chased.
    pub cpu: u32,
    /// Working set, bytes.
    pub size_bytes: usize,
    /// Pages that backed the working set.
    pub pages: Pages,
    /// Nanoseconds per dependent load.
    pub latency_ns: Figure,
    /// The median in CPU cycles, when the frequency is known.
    pub cycles: Option<f64>,
    /// The same chase on 4 KiB pages, when huge pages were used and the
    /// comparison was made.
    pub base_pages: Option<BasePages>,
    /// Median over the median of the initiator's reference (local) cell:
    /// what remote memory really costs, to set beside `firmware.slit_ratio`.
    pub ratio_to_local: Option<f64>,
    /// What the firmware says about this pair.
    pub firmware: Firmware,
    /// Where the working set's pages were.
    pub placement: PlacementAudit,
}

/// The idle-latency chase repeated on 4 KiB pages.
///
/// ```
/// use numalab::audit::audit;
/// use numalab::locate::PageHistogram;
/// use numalab::{MemPolicy, NodeSet};
/// use numalab_bench::matrix::{BasePages, Figure};
/// # let pages = PageHistogram { page_size: 4096, queried: 256,
/// #     per_node: [(0, 256)].into(), ..Default::default() };
///
/// let on_huge_pages = Figure::of(&[80.0, 80.0, 80.0]);
/// let latency_ns = Figure::of(&[100.0, 100.0, 100.0]);
/// let base = BasePages {
///     inflation: latency_ns.median() / on_huge_pages.median() - 1.0,
///     latency_ns,
///     placement: audit(&MemPolicy::Bind(NodeSet::single(0)), &NodeSet::new(), &pages),
/// };
/// assert_eq!(base.inflation, 0.25, "25% slower on 4 KiB pages");
/// assert!(base.placement.is_match());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BasePages {
    /// Nanoseconds per dependent load.
    pub latency_ns: Figure,
    /// How much slower than on huge pages: base median / huge median − 1.
    pub inflation: f64,
    /// Where its pages were.
    pub placement: PlacementAudit,
}

/// The bandwidth matrix.
///
/// ```
/// # use numalab::{HugePages, NodeSet, Topology};
/// # use numalab_bench::control::Control;
/// # use numalab_bench::matrix::{run::run, MatrixConfig, Measurements, NodeSelection, Shape};
/// # let topo = Topology::system()?;
/// # let node = numalab::affinity::current().node;
/// # let here = NodeSelection { nodes: Some(NodeSet::single(node)), ..Default::default() };
/// # let shape = Shape::of(&topo, &here)?;
/// let measurements = Measurements { latency: false, bandwidth: true, ..Measurements::default() };
/// let config = MatrixConfig { measurements, size: Some(1 << 20), threads: Some(1), huge_pages: Some(HugePages::None),
///     ..MatrixConfig::quick() };
/// let result = run(&topo, &shape, &config, &Control::new())?;
/// let matrix = result.bandwidth.as_ref().unwrap();
/// assert_eq!(matrix.cells.len(), shape.initiators.len() * shape.targets.len());
/// assert!(result.latency.is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BandwidthMatrix {
    /// One cell per (initiator, target), row by row.
    pub cells: Vec<BandwidthCell>,
}

/// Bandwidth from the CPUs of one node to the memory of another.
///
/// ```
/// # use numalab::{HugePages, NodeSet, Topology};
/// # use numalab_bench::control::Control;
/// # use numalab_bench::matrix::{run::run, MatrixConfig, Measurements, NodeSelection, Shape};
/// # let topo = Topology::system()?;
/// # let node = numalab::affinity::current().node;
/// # let here = NodeSelection { nodes: Some(NodeSet::single(node)), ..Default::default() };
/// # let shape = Shape::of(&topo, &here)?;
/// let measurements = Measurements { latency: false, bandwidth: true, ..Measurements::default() };
/// let config = MatrixConfig { measurements, size: Some(1 << 20), threads: Some(1), huge_pages: Some(HugePages::None),
///     ..MatrixConfig::quick() };
/// let result = run(&topo, &shape, &config, &Control::new())?;
/// let cell = &result.bandwidth.as_ref().unwrap().cells[0];
/// assert_eq!((cell.initiator, cell.target, cell.cpus.len()), (node, node, 1));
/// for gbps in [&cell.read_gbps, &cell.write_gbps, &cell.copy_gbps] {
///     assert!(gbps.as_ref().unwrap().median() > 0.0);
/// }
/// assert_eq!(cell.read_ratio_to_local, Some(1.0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BandwidthCell {
    /// CPU node.
    pub initiator: u32,
    /// Memory node.
    pub target: u32,
    /// The CPUs that streamed, one thread each.
    pub cpus: Vec<u32>,
    /// Working set of all threads together, bytes.
    pub size_bytes: usize,
    /// Pages that backed it.
    pub pages: Pages,
    /// Sequential reads, GB/s.
    pub read_gbps: Option<Figure>,
    /// Non-temporal writes, GB/s.
    pub write_gbps: Option<Figure>,
    /// Copy with non-temporal stores (bytes read + written), GB/s.
    pub copy_gbps: Option<Figure>,
    /// Read median over the reference (local) cell's.
    pub read_ratio_to_local: Option<f64>,
    /// What the firmware says about this pair.
    pub firmware: Firmware,
    /// Where the working set's pages were.
    pub placement: PlacementAudit,
}

/// Latency under load, from one initiator to one target.
///
/// ```
/// # use numalab::{HugePages, NodeSet, Topology};
/// # use numalab_bench::control::Control;
/// # use numalab_bench::matrix::{run::run, MatrixConfig, Measurements, NodeSelection, Shape};
/// # let topo = Topology::system()?;
/// # let node = numalab::affinity::current().node;
/// # let here = NodeSelection { nodes: Some(NodeSet::single(node)), ..Default::default() };
/// # let shape = Shape::of(&topo, &here)?;
/// let measurements = Measurements { latency: false, bandwidth: false, loaded: true, ..Measurements::default() };
/// let config = MatrixConfig { measurements, size: Some(1 << 20), huge_pages: Some(HugePages::None),
///     ..MatrixConfig::quick() };
/// let result = run(&topo, &shape, &config, &Control::new())?;
/// let curve = &result.loaded.as_ref().unwrap()[0];
/// assert_eq!((curve.initiator, curve.target), (node, node));
/// assert!(!curve.load_cpus.contains(&curve.chase_cpu));
/// assert_eq!(curve.points[0].delay, None, "the idle point comes first");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadedCurve {
    /// CPU node.
    pub initiator: u32,
    /// Memory node (the initiator's reference target).
    pub target: u32,
    /// The CPU that chased.
    pub chase_cpu: u32,
    /// The CPUs that generated load.
    pub load_cpus: Vec<u32>,
    /// Working set of the chase, bytes.
    pub size_bytes: usize,
    /// Pages that backed the chase.
    pub pages: Pages,
    /// Idle first, then from light to full load.
    pub points: Vec<LoadedPoint>,
    /// Where the chased pages were.
    pub placement: PlacementAudit,
    /// Where the generators' pages were.
    pub load_placement: PlacementAudit,
}

/// One point of a loaded-latency curve.
///
/// ```
/// # use numalab::{HugePages, NodeSet, Topology};
/// # use numalab_bench::control::Control;
/// # use numalab_bench::matrix::{run::run, MatrixConfig, Measurements, NodeSelection, Shape};
/// # let topo = Topology::system()?;
/// # let node = numalab::affinity::current().node;
/// # let here = NodeSelection { nodes: Some(NodeSet::single(node)), ..Default::default() };
/// # let shape = Shape::of(&topo, &here)?;
/// let measurements = Measurements { latency: false, bandwidth: false, loaded: true, ..Measurements::default() };
/// let config = MatrixConfig { measurements, size: Some(1 << 20), huge_pages: Some(HugePages::None),
///     ..MatrixConfig::quick() };
/// let result = run(&topo, &shape, &config, &Control::new())?;
/// let points = &result.loaded.as_ref().unwrap()[0].points;
/// // Idle, then from the longest delay to none.
/// let delays: Vec<Option<u64>> = points.iter().map(|p| p.delay).collect();
/// assert_eq!(delays, [None, Some(1_000), Some(60), Some(0)]);
/// assert_eq!(points[0].load_gbps, 0.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadedPoint {
    /// Spin iterations between the generators' 4 KiB blocks; `None` for
    /// the idle point.
    pub delay: Option<u64>,
    /// Read bandwidth the generators reached, GB/s.
    pub load_gbps: f64,
    /// The chase's nanoseconds per load meanwhile.
    pub latency_ns: Figure,
}

/// Cache-to-cache hand-over latency between nodes.
///
/// ```
/// # use numalab::{HugePages, NodeSet, Topology};
/// # use numalab_bench::control::Control;
/// # use numalab_bench::matrix::{run::run, MatrixConfig, Measurements, NodeSelection, Shape};
/// # let topo = Topology::system()?;
/// # let node = numalab::affinity::current().node;
/// # let here = NodeSelection { nodes: Some(NodeSet::single(node)), ..Default::default() };
/// # let shape = Shape::of(&topo, &here)?;
/// let measurements = Measurements { latency: false, bandwidth: false, c2c: true, ..Measurements::default() };
/// let config = MatrixConfig { measurements, size: Some(1 << 20), huge_pages: Some(HugePages::None),
///     ..MatrixConfig::quick() };
/// let result = run(&topo, &shape, &config, &Control::new())?;
/// let c2c = result.c2c.as_ref().unwrap();
/// assert_eq!(c2c.nodes, [node]);
/// // A pair of cores on the node, or a note saying why there is none.
/// assert_eq!(c2c.cells.len() + c2c.notes.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct C2cMatrix {
    /// Nodes whose cores took part (rows and columns).
    pub nodes: Vec<u32>,
    /// One cell per measured pair.
    pub cells: Vec<C2cCell>,
    /// Pairs that could not be measured, and why.
    pub notes: Vec<String>,
}

/// One pair of cores passing a line.
///
/// ```
/// # use numalab::{HugePages, NodeSet, Topology};
/// # use numalab_bench::control::Control;
/// # use numalab_bench::matrix::{run::run, MatrixConfig, Measurements, NodeSelection, Shape};
/// # let topo = Topology::system()?;
/// # let node = numalab::affinity::current().node;
/// # let here = NodeSelection { nodes: Some(NodeSet::single(node)), ..Default::default() };
/// # let shape = Shape::of(&topo, &here)?;
/// let measurements = Measurements { latency: false, bandwidth: false, c2c: true, ..Measurements::default() };
/// let config = MatrixConfig { measurements, size: Some(1 << 20), huge_pages: Some(HugePages::None),
///     ..MatrixConfig::quick() };
/// let result = run(&topo, &shape, &config, &Control::new())?;
/// for cell in &result.c2c.as_ref().unwrap().cells {
///     assert_eq!((cell.node_a, cell.node_b), (node, node));
///     assert_ne!(cell.cpu_a, cell.cpu_b);
///     assert!(cell.latency_ns.median() > 0.0);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct C2cCell {
    /// Node of the first core (the line's home).
    pub node_a: u32,
    /// Node of the second core.
    pub node_b: u32,
    /// First CPU.
    pub cpu_a: u32,
    /// Second CPU.
    pub cpu_b: u32,
    /// Nanoseconds per one-way hand-over.
    pub latency_ns: Figure,
    /// Where the line's page was.
    pub placement: PlacementAudit,
}

/// What a matrix warning is about.
///
/// ```
/// use numalab_bench::matrix::{MatrixWarning, MatrixWarningKind};
/// let json = r#"{"kind":"placement","message":"latency 0->1: 10% of pages on node 0"}"#;
/// let warning: MatrixWarning = serde_json::from_str(json)?;
/// let serious = match warning.kind {
///     MatrixWarningKind::Noisy | MatrixWarningKind::Other => false,
///     MatrixWarningKind::Placement | MatrixWarningKind::Emulated => true,
///     _ => false,
/// };
/// assert!(serious);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum MatrixWarningKind {
    /// The CPU is emulated: the timings say nothing about memory.
    Emulated,
    /// The working set is not the one planned (no cache knee found, cut
    /// to fit the free memory).
    WorkingSet,
    /// Huge pages missing or only partly given.
    HugePages,
    /// A measurement could not be made as asked (no CPU left to generate
    /// load, no pair of cores on a node).
    Skipped,
    /// Stopped by Ctrl-C.
    Interrupted,
    /// A working set's pages are not where asked.
    Placement,
    /// A figure's samples spread more than the noise threshold.
    Noisy,
    /// Read from a result written before warnings had kinds.
    Other,
}

/// Something the reader of a matrix should know, with what it is about.
///
/// Written in JSON as `{"kind": "noisy", "message": "…"}`; a result
/// written when warnings were bare strings still reads (as
/// [`MatrixWarningKind::Other`]).
///
/// ```
/// use numalab_bench::matrix::{MatrixWarning, MatrixWarningKind};
/// let w = MatrixWarning::new(MatrixWarningKind::Noisy, "latency 0->1: noisy");
/// assert!(w.is_noise());
/// assert_eq!(w.to_string(), "latency 0->1: noisy");
/// let json = serde_json::to_string(&w).unwrap();
/// assert_eq!(json, r#"{"kind":"noisy","message":"latency 0->1: noisy"}"#);
/// let old: MatrixWarning = serde_json::from_str(r#""a warning of old""#).unwrap();
/// assert_eq!(old.kind, MatrixWarningKind::Other);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MatrixWarning {
    /// What it is about.
    pub kind: MatrixWarningKind,
    /// One sentence for people.
    pub message: String,
}

impl MatrixWarning {
    /// A warning.
    pub fn new(kind: MatrixWarningKind, message: impl Into<String>) -> MatrixWarning {
        MatrixWarning {
            kind,
            message: message.into(),
        }
    }

    /// Whether it says a figure was noisy (the machine was busy).
    pub fn is_noise(&self) -> bool {
        self.kind == MatrixWarningKind::Noisy
    }
}

impl std::fmt::Display for MatrixWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl<'de> Deserialize<'de> for MatrixWarning {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Typed {
                kind: MatrixWarningKind,
                message: String,
            },
            Text(String),
        }
        Ok(match Either::deserialize(deserializer)? {
            Either::Typed { kind, message } => MatrixWarning { kind, message },
            Either::Text(message) => MatrixWarning::new(MatrixWarningKind::Other, message),
        })
    }
}

/// Everything `numalab matrix` measured.
///
/// Measuring a 1 x 1 matrix from the library (a 1 MiB working set, to keep
/// the example short):
///
/// ```
/// use numalab::{NodeSet, Topology};
/// use numalab_bench::control::Control;
/// use numalab_bench::matrix::{run::run, MatrixConfig, NodeSelection, Shape};
/// let topo = Topology::system()?;
/// let node = NodeSet::single(numalab::affinity::current().node);
/// let one = NodeSelection { cpu_nodes: Some(node.clone()), mem_nodes: Some(node), ..Default::default() };
/// let shape = Shape::of(&topo, &one)?;
/// let config = MatrixConfig { size: Some(1 << 20), ..MatrixConfig::quick() };
/// let control = Control::new().with_messages(|line| eprintln!("{line}"));
/// let result = run(&topo, &shape, &config, &control)?;
/// let cell = &result.latency.as_ref().unwrap().cells[0];
/// println!("{:.1} ns, pages: {}", cell.latency_ns.median(), cell.placement);
/// assert!(result.placement_summary.all_match, "{:?}", result.warnings);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatrixReport {
    /// The machine, kernel and settings it was measured on.
    pub environment: Option<Environment>,
    /// Rows (initiators) and columns (targets).
    pub shape: Shape,
    /// SLIT and HMAT for every cell, row by row.
    pub firmware: Vec<FirmwareCell>,
    /// How the run was set up.
    pub settings: Settings,
    /// The latency-versus-size sweep that sized the working set.
    pub cache_sweep: Option<CacheSweep>,
    /// Idle latency.
    pub latency: Option<LatencyMatrix>,
    /// Bandwidth.
    pub bandwidth: Option<BandwidthMatrix>,
    /// Loaded latency, one curve per initiator.
    pub loaded: Option<Vec<LoadedCurve>>,
    /// Cache-to-cache latency.
    pub c2c: Option<C2cMatrix>,
    /// Every working set's placement, in brief.
    pub placement_summary: PlacementSummary,
    /// Everything the reader should know: pages not where asked, noisy
    /// figures, huge pages missing.
    pub warnings: Vec<MatrixWarning>,
    /// Stopped by Ctrl-C: cells not in the result were not measured.
    #[serde(default)]
    pub interrupted: bool,
}

impl MatrixReport {
    /// Every figure of the run, with what it is (`latency 0->1`,
    /// `bandwidth 0->1 read`).
    pub fn figures(&self) -> Vec<(String, &Figure)> {
        let mut all = Vec::new();
        for c in self.latency.iter().flat_map(|m| &m.cells) {
            all.push((
                format!("latency {}->{}", c.initiator, c.target),
                &c.latency_ns,
            ));
        }
        for c in self.bandwidth.iter().flat_map(|m| &m.cells) {
            for (kernel, figure) in [
                ("read", &c.read_gbps),
                ("write", &c.write_gbps),
                ("copy", &c.copy_gbps),
            ] {
                if let Some(figure) = figure {
                    all.push((
                        format!("bandwidth {}->{} {kernel}", c.initiator, c.target),
                        figure,
                    ));
                }
            }
        }
        for c in self.c2c.iter().flat_map(|m| &m.cells) {
            all.push((
                format!("cache-to-cache {}<->{}", c.node_a, c.node_b),
                &c.latency_ns,
            ));
        }
        all
    }

    /// Every placement audit of the run, with what it belongs to.
    pub fn audits(&self) -> Vec<(String, &PlacementAudit)> {
        let mut all = Vec::new();
        for c in self.latency.iter().flat_map(|m| &m.cells) {
            let what = format!("latency {}->{}", c.initiator, c.target);
            all.push((what.clone(), &c.placement));
            if let Some(base) = &c.base_pages {
                all.push((format!("{what} (4 KiB pages)"), &base.placement));
            }
        }
        for c in self.bandwidth.iter().flat_map(|m| &m.cells) {
            all.push((
                format!("bandwidth {}->{}", c.initiator, c.target),
                &c.placement,
            ));
        }
        for c in self.loaded.iter().flatten() {
            let what = format!("loaded latency {}->{}", c.initiator, c.target);
            all.push((format!("{what} (chase)"), &c.placement));
            all.push((format!("{what} (load)"), &c.load_placement));
        }
        for c in self.c2c.iter().flat_map(|m| &m.cells) {
            all.push((
                format!("cache-to-cache {}<->{}", c.node_a, c.node_b),
                &c.placement,
            ));
        }
        all
    }
}
