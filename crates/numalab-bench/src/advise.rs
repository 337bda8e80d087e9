//! `numalab advise`: run a real command under every placement that makes
//! sense on this machine, several times each, and recommend one on the
//! evidence — its speed against first touch with a confidence interval,
//! and where its pages went.
//!
//! The candidates ([`candidates`]) are first touch (the kernel's default),
//! interleave over every node with memory, bind + cpunodebind per node
//! with CPUs, preferred per node with memory, and weighted interleave with
//! weights from a measured bandwidth matrix ([`weights_from_bandwidth`]).
//! Each runs `warmup` times unmeasured, then `runs` times measured, in
//! rounds that visit every candidate in turn (starting one further along
//! each round), so a machine that slows down over the minutes slows every
//! candidate alike instead of the last one. Each run is placed and audited
//! as `numalab exec` does ([`crate::exec`]).
//!
//! The comparison is [`stats::difference`]: Welch's t-interval on the
//! logarithms of the run times, each at the confidence that keeps all the
//! comparisons with first touch together at 95% ([`each_confidence`]). A
//! placement is recommended only when its interval says it is faster than
//! first touch by at least [`MIN_GAIN`], or when first touch is sometimes
//! slow and the placement never is, on enough runs to tell ([`bimodal`]);
//! otherwise first touch stays, and the report says why.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::Duration;

use numalab::launch::{Exit, LaunchError};
use numalab::{CpuSet, MemPolicy, NodeSet, Support, Topology};
use serde::{Deserialize, Serialize};

use crate::control::Control;
use crate::document::Schema;
use crate::exec::{self, ExecConfig, ExecError};
use crate::matrix::{
    BandwidthMatrix, MatrixConfig, MatrixError, Measurements, NodeSelection, Shape,
};
use crate::message::Message;
use crate::stats::{self, Difference, Summary, Verdict};

/// One placement to try.
///
/// ```
/// use numalab::{MemPolicy, NodeSet};
/// use numalab_bench::advise::Candidate;
/// let bind = Candidate::bind(1, "8-15".parse()?);
/// assert_eq!(bind.name, "bind:1");
/// assert_eq!(bind.policy, Some(MemPolicy::Bind(NodeSet::single(1))));
/// assert_eq!(bind.numactl_options(), "--cpunodebind=1 --membind=1");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Short name: `first-touch`, `interleave:0-1`, `bind:1`,
    /// `preferred:2`, `weighted-interleave:0=3,1=1`.
    pub name: String,
    /// The memory policy; `None` is first touch.
    pub policy: Option<MemPolicy>,
    /// The nodes whose CPUs it runs on, if bound.
    pub cpu_nodes: Option<NodeSet>,
    /// Those CPUs.
    pub cpus: Option<CpuSet>,
    /// Weighted-interleave weights the kernel is given for the run.
    pub weights: Option<BTreeMap<u32, u8>>,
    /// Why it is a candidate, in one sentence.
    pub why: String,
}

impl Candidate {
    /// First touch: the kernel's default, each page on the node of the
    /// CPU that first writes it.
    pub fn first_touch() -> Candidate {
        Candidate {
            name: "first-touch".into(),
            policy: None,
            cpu_nodes: None,
            cpus: None,
            weights: None,
            why: "the kernel's default: each page on the node of the CPU that first touched it"
                .into(),
        }
    }

    /// Pages round-robin over `nodes`.
    pub fn interleave(nodes: NodeSet) -> Candidate {
        Candidate {
            name: format!("interleave:{nodes}"),
            policy: Some(MemPolicy::Interleave(nodes)),
            cpu_nodes: None,
            cpus: None,
            weights: None,
            why: "spreads the pages, so every node's memory controller serves the program".into(),
        }
    }

    /// CPUs and memory of node `node` only (`cpus` are its CPUs).
    pub fn bind(node: u32, cpus: CpuSet) -> Candidate {
        Candidate {
            name: format!("bind:{node}"),
            policy: Some(MemPolicy::Bind(NodeSet::single(node))),
            cpu_nodes: Some(NodeSet::single(node)),
            cpus: Some(cpus),
            weights: None,
            why: format!("everything local to node {node}: no remote access, one node's CPUs"),
        }
    }

    /// Memory from `node` first, from the others when it is full; CPUs
    /// not bound.
    pub fn preferred(node: u32, has_cpus: bool) -> Candidate {
        Candidate {
            name: format!("preferred:{node}"),
            policy: Some(MemPolicy::Preferred(node)),
            cpu_nodes: None,
            cpus: None,
            weights: None,
            why: if has_cpus {
                format!("memory on node {node} while it has room, the threads on every CPU")
            } else {
                format!("memory on node {node}, which has no CPUs (far or expansion memory), while it has room")
            },
        }
    }

    /// Interleave by `weights` (node to weight).
    pub fn weighted(weights: BTreeMap<u32, u8>, source: &str) -> Candidate {
        let policy = MemPolicy::WeightedInterleave(weights.clone());
        Candidate {
            name: policy.to_string(),
            policy: Some(policy),
            cpu_nodes: None,
            cpus: None,
            weights: Some(weights),
            why: format!("spreads the pages in proportion to each node's bandwidth ({source})"),
        }
    }

    /// The `numactl` options that place a command as this candidate does
    /// (empty for first touch). `numalab exec` takes the same ones.
    pub fn numactl_options(&self) -> String {
        let mut options = Vec::new();
        if let Some(nodes) = &self.cpu_nodes {
            options.push(format!("--cpunodebind={nodes}"));
        }
        match &self.policy {
            None | Some(MemPolicy::Default) => {}
            Some(MemPolicy::Local) => options.push("--localalloc".into()),
            Some(MemPolicy::Bind(nodes)) => options.push(format!("--membind={nodes}")),
            Some(MemPolicy::Interleave(nodes)) => options.push(format!("--interleave={nodes}")),
            Some(MemPolicy::Preferred(node)) => options.push(format!("--preferred={node}")),
            Some(MemPolicy::PreferredMany(nodes)) => {
                options.push(format!("--preferred-many={nodes}"))
            }
            Some(MemPolicy::WeightedInterleave(weights)) => options.push(format!(
                "--weighted-interleave={}",
                weights
                    .iter()
                    .map(|(node, weight)| format!("{node}={weight}"))
                    .collect::<Vec<_>>()
                    .join(",")
            )),
            // A policy added to the library later has no numactl spelling
            // here yet.
            Some(_) => {}
        }
        options.join(" ")
    }
}

/// Weighted-interleave weights in proportion to each memory node's read
/// bandwidth, summed over the CPU nodes that read it (the program runs on
/// all of them): the best node gets 20 before the weights are divided by
/// their greatest common divisor, every node at least 1. `None` when the
/// matrix has no read figure, or every node would get the same weight
/// (plain interleave then).
///
/// ```
/// use numalab_bench::advise::weights_from_bandwidth_figures;
/// use std::collections::BTreeMap;
/// // DRAM at 100 GB/s, CXL memory at 33.
/// let weights = weights_from_bandwidth_figures(&BTreeMap::from([(0, 100.0), (1, 33.0)]));
/// assert_eq!(weights, Some(BTreeMap::from([(0, 20), (1, 7)])));
/// // Two equal nodes: plain interleave.
/// assert_eq!(weights_from_bandwidth_figures(&BTreeMap::from([(0, 50.0), (1, 50.0)])), None);
/// ```
pub fn weights_from_bandwidth_figures(gbps: &BTreeMap<u32, f64>) -> Option<BTreeMap<u32, u8>> {
    let best = gbps.values().copied().fold(0.0_f64, f64::max);
    if gbps.len() < 2 || best <= 0.0 || gbps.values().any(|g| !g.is_finite()) {
        return None;
    }
    let mut weights: BTreeMap<u32, u8> = gbps
        .iter()
        .map(|(&node, &g)| (node, ((20.0 * g / best).round() as u8).max(1)))
        .collect();
    let divisor = weights.values().fold(0u8, |a, &b| gcd(a, b));
    if divisor > 1 {
        weights.values_mut().for_each(|w| *w /= divisor);
    }
    let first = *weights.values().next()?;
    if weights.values().all(|&w| w == first) {
        return None;
    }
    Some(weights)
}

fn gcd(a: u8, b: u8) -> u8 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// [`weights_from_bandwidth_figures`] of a measured matrix: each target's
/// read medians summed over the initiators.
pub fn weights_from_bandwidth(matrix: &BandwidthMatrix) -> Option<BTreeMap<u32, u8>> {
    let mut gbps: BTreeMap<u32, f64> = BTreeMap::new();
    for cell in &matrix.cells {
        *gbps.entry(cell.target).or_default() += cell.read_gbps.as_ref()?.median();
    }
    weights_from_bandwidth_figures(&gbps)
}

/// The placements worth trying on `topology`: first touch; and where two
/// or more nodes have memory, interleave over them, bind + cpunodebind
/// to each node with CPUs and memory, preferred on each node with memory,
/// and weighted interleave by `weights` when given.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::advise::candidates;
/// let two = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// let names: Vec<String> = candidates(&two, None).into_iter().map(|c| c.name).collect();
/// assert_eq!(names, ["first-touch", "interleave:0-1", "bind:0", "bind:1", "preferred:0", "preferred:1"]);
/// let one = Topology::from_synthetic("pack:1 numa:1 core:2 pu:1")?;
/// assert_eq!(candidates(&one, None).len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn candidates(
    topology: &Topology,
    weights: Option<(&BTreeMap<u32, u8>, &str)>,
) -> Vec<Candidate> {
    let memory = usable_memory_nodes(topology);
    let with_cpus = topology.nodes_with_cpus();
    let mut list = vec![Candidate::first_touch()];
    if memory.len() < 2 {
        return list;
    }
    list.push(Candidate::interleave(memory.clone()));
    for node in memory.intersection(&with_cpus).iter() {
        let cpus = topology
            .cpus_of(&NodeSet::single(node))
            .intersection(&topology.allowed_cpus);
        if !cpus.is_empty() {
            list.push(Candidate::bind(node, cpus));
        }
    }
    for node in memory.iter() {
        list.push(Candidate::preferred(node, with_cpus.contains(node)));
    }
    if let Some((weights, source)) = weights {
        list.push(Candidate::weighted(weights.clone(), source));
    }
    list
}

/// The placements besides first touch, as `--placements` names them.
///
/// ```
/// use numalab_bench::advise::{Candidate, Kind};
/// assert_eq!("weighted".parse::<Kind>(), Ok(Kind::Weighted));
/// assert_eq!(Kind::of(&Candidate::bind(1, "2-3".parse()?)), Some(Kind::Bind));
/// assert_eq!(Kind::of(&Candidate::first_touch()), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Interleave over every node with memory.
    Interleave,
    /// CPUs and memory of one node.
    Bind,
    /// Memory from one node first.
    Preferred,
    /// Weighted interleave, weights from read bandwidth.
    Weighted,
}

impl Kind {
    /// Every kind, as `--placements` lists them.
    pub const ALL: [Kind; 4] = [
        Kind::Interleave,
        Kind::Bind,
        Kind::Preferred,
        Kind::Weighted,
    ];

    /// The name `--placements` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Interleave => "interleave",
            Kind::Bind => "bind",
            Kind::Preferred => "preferred",
            Kind::Weighted => "weighted",
        }
    }

    /// The kind of `candidate`; `None` for first touch.
    pub fn of(candidate: &Candidate) -> Option<Kind> {
        match candidate.policy.as_ref()? {
            MemPolicy::Interleave(_) => Some(Kind::Interleave),
            MemPolicy::Bind(_) => Some(Kind::Bind),
            MemPolicy::Preferred(_) => Some(Kind::Preferred),
            MemPolicy::WeightedInterleave(_) => Some(Kind::Weighted),
            _ => None,
        }
    }
}

impl std::str::FromStr for Kind {
    type Err = String;

    fn from_str(text: &str) -> Result<Kind, String> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == text)
            .ok_or_else(|| {
                format!("{text}: not a kind of placement (interleave, bind, preferred, weighted)")
            })
    }
}

/// What [`run`] runs: the candidates, first touch first, and the
/// placements left out with why. A list of candidates is a plan that
/// leaves nothing out.
///
/// ```
/// use numalab_bench::advise::{AdvisePlan, Candidate};
/// let plan = AdvisePlan::from(vec![Candidate::first_touch()]);
/// assert_eq!(plan.candidates[0].name, "first-touch");
/// assert!(plan.not_tried.is_empty());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct AdvisePlan {
    /// The candidates, first touch first.
    pub candidates: Vec<Candidate>,
    /// Placements not tried, and why (weighted interleave without root).
    pub not_tried: Vec<String>,
}

impl From<Vec<Candidate>> for AdvisePlan {
    /// Exactly these candidates, nothing left out.
    fn from(candidates: Vec<Candidate>) -> AdvisePlan {
        AdvisePlan {
            candidates,
            not_tried: Vec::new(),
        }
    }
}

/// Plans the candidates on `topology`: first touch and every kind of
/// `kinds` (every kind when empty). Weighted interleave needs the kernel's
/// `MPOL_WEIGHTED_INTERLEAVE` (Linux 6.9) and root (its weights are the
/// kernel's, set for the run); its weights come from `saved`'s read
/// bandwidths, else from a quick bandwidth-only matrix measured now (said
/// through `control`). A kind that cannot be tried is named in
/// `not_tried` with why.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::advise::{plan, Kind};
/// use numalab_bench::control::Control;
/// let two = Topology::from_synthetic("pack:2 numa:1 core:2 pu:1")?;
/// let only = plan(&two, &[Kind::Bind], None, &Control::new())?;
/// let names: Vec<&str> = only.candidates.iter().map(|c| c.name.as_str()).collect();
/// assert_eq!(names, ["first-touch", "bind:0", "bind:1"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn plan(
    topology: &Topology,
    kinds: &[Kind],
    saved: Option<&BandwidthMatrix>,
    control: &Control,
) -> Result<AdvisePlan, AdviseError> {
    let wanted = |kind: Kind| kinds.is_empty() || kinds.contains(&kind);
    let mut not_tried = Vec::new();
    let weights = if topology.nodes_with_memory().len() >= 2 && wanted(Kind::Weighted) {
        weights(topology, saved, control, &mut not_tried)?
    } else {
        None
    };
    let candidates = candidates(
        topology,
        weights.as_ref().map(|(w, source)| (w, source.as_str())),
    )
    .into_iter()
    .filter(|c| Kind::of(c).is_none_or(wanted))
    .collect();
    Ok(AdvisePlan {
        candidates,
        not_tried,
    })
}

/// Weighted interleave's weights (node to weight) and where they came from.
type Weights = (BTreeMap<u32, u8>, String);

/// The weighted-interleave weights and where they came from, or why there
/// are none (into `not_tried`).
fn weights(
    topology: &Topology,
    saved: Option<&BandwidthMatrix>,
    control: &Control,
    not_tried: &mut Vec<String>,
) -> Result<Option<Weights>, AdviseError> {
    if !Support::probe().weighted_interleave {
        not_tried.push(
            "weighted interleave: this kernel lacks MPOL_WEIGHTED_INTERLEAVE (Linux 6.9 or later)"
                .into(),
        );
        return Ok(None);
    }
    if !numalab::system::is_root() {
        not_tried.push(
            "weighted interleave: setting the kernel's weights for the run needs root".into(),
        );
        return Ok(None);
    }
    let (bandwidth, source) = match saved {
        Some(bandwidth) => (
            Some(bandwidth.clone()),
            "read bandwidth from --matrix".to_owned(),
        ),
        None => {
            control.say("measuring the read bandwidth of every node for the weighted-interleave weights (numalab matrix --quick, bandwidth only)");
            let shape = Shape::of(topology, &NodeSelection::default())?;
            let config = MatrixConfig {
                measurements: Measurements {
                    latency: false,
                    bandwidth: true,
                    loaded: false,
                    c2c: false,
                },
                ..MatrixConfig::quick()
            };
            // The weights' measurement is not advising yet: it does not
            // stop for the signals the command's runs pass on.
            let result = crate::matrix::run::run(topology, &shape, &config, &Control::new())?;
            (
                result.bandwidth,
                "read bandwidth measured just now".to_owned(),
            )
        }
    };
    let weights = bandwidth.as_ref().and_then(weights_from_bandwidth);
    if weights.is_none() {
        not_tried.push("weighted interleave: the nodes' read bandwidths give every node the same weight, which is plain interleave".into());
    }
    Ok(weights.map(|w| (w, source)))
}

/// The nodes with memory this process may use (its cpuset's mems): a
/// policy naming another is refused by the kernel (EINVAL).
fn usable_memory_nodes(topology: &Topology) -> NodeSet {
    topology
        .nodes_with_memory()
        .intersection(&topology.allowed_nodes)
}

/// How to advise.
///
/// ```
/// use numalab_bench::advise::AdviseConfig;
/// let config = AdviseConfig::new(["sort", "big.txt"]);
/// assert_eq!((config.runs, config.warmup), (5, 1));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct AdviseConfig {
    /// The program and its arguments.
    pub command: Vec<OsString>,
    /// Measured runs per candidate (at least 2: one run has no spread).
    pub runs: usize,
    /// Unmeasured runs per candidate before them (caches, page cache).
    pub warmup: usize,
    /// Let the command write to the terminal (otherwise its input is
    /// empty and its output discarded, as hyperfine does).
    pub show_output: bool,
    /// Confidence of the intervals (0.95).
    pub confidence: f64,
    /// The longest a run may take before it is ended (`SIGTERM`, then
    /// `SIGKILL`) and counted as failed; `None`: [`run_limit`]'s rule.
    pub timeout: Option<Duration>,
}

/// The longest the first run (under first touch) may take without
/// `--timeout`: an hour.
pub const FIRST_RUN_LIMIT: Duration = Duration::from_secs(3600);

/// Without `--timeout`, a later run may take this many times the first.
pub const LATER_RUN_FACTOR: u32 = 10;

/// Without `--timeout`, a later run may always take at least this long.
pub const LATER_RUN_FLOOR: Duration = Duration::from_secs(60);

/// How long a run may take: `config.timeout` when given; else
/// [`FIRST_RUN_LIMIT`] for the first run, and for the later ones
/// [`LATER_RUN_FACTOR`] times the first run's time (`first`), at least
/// [`LATER_RUN_FLOOR`].
///
/// ```
/// use std::time::Duration;
/// use numalab_bench::advise::{run_limit, AdviseConfig};
/// let config = AdviseConfig::new(["./app"]);
/// assert_eq!(run_limit(&config, None), Duration::from_secs(3600));
/// assert_eq!(run_limit(&config, Some(2.0)), Duration::from_secs(60));
/// assert_eq!(run_limit(&config, Some(30.0)), Duration::from_secs(300));
/// let given = AdviseConfig { timeout: Some(Duration::from_secs(5)), ..config };
/// assert_eq!(run_limit(&given, Some(30.0)), Duration::from_secs(5));
/// ```
pub fn run_limit(config: &AdviseConfig, first: Option<f64>) -> Duration {
    match (config.timeout, first) {
        (Some(limit), _) => limit,
        (None, None) => FIRST_RUN_LIMIT,
        (None, Some(seconds)) => Duration::try_from_secs_f64(seconds * f64::from(LATER_RUN_FACTOR))
            .unwrap_or(Duration::MAX)
            .max(LATER_RUN_FLOOR),
    }
}

/// A duration in words for messages: `90 s`, `1.5 s`.
fn seconds_text(limit: Duration) -> String {
    let s = limit.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s} s")
    }
}

impl AdviseConfig {
    /// `command` with 5 runs and 1 warm-up per candidate, output
    /// discarded.
    pub fn new<I, S>(command: I) -> AdviseConfig
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        AdviseConfig {
            command: command.into_iter().map(Into::into).collect(),
            runs: 5,
            warmup: 1,
            show_output: false,
            confidence: 0.95,
            timeout: None,
        }
    }
}

/// One run of the command under one candidate.
///
/// ```
/// use numalab::launch::Exit;
/// use numalab_bench::advise::AdviseRun;
/// let run = AdviseRun {
///     seconds: 1.25,
///     exit: Exit::Code(0),
///     warmup: false,
///     on_expected: Some(0.97),
///     private_per_node: [(1, 64 << 20)].into(),
///     audit: "97% of present pages on node 1".into(),
///     timed_out: None,
///     round: 0,
///     order: 0,
/// };
/// assert_eq!(run.private_per_node.values().sum::<u64>(), 64 << 20);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdviseRun {
    /// Wall time from start to exit, seconds.
    pub seconds: f64,
    /// How it ended.
    pub exit: Exit,
    /// A warm-up (not in the statistics).
    pub warmup: bool,
    /// The round it belongs to (0 first): every placement runs once a
    /// round, each round starting one placement later, so no placement
    /// always runs right after the same one.
    #[serde(default)]
    pub round: usize,
    /// Its place among all the runs of this advise, in the order they ran
    /// (0 first).
    #[serde(default)]
    pub order: usize,
    /// Share of its private memory at its peak on the nodes the
    /// placement asked for (`None`: it had none).
    pub on_expected: Option<f64>,
    /// Its private memory at its peak, bytes per node.
    pub private_per_node: BTreeMap<u32, u64>,
    /// The placement audit's sentence.
    pub audit: String,
    /// The limit it ran out of, seconds, when it was ended for taking
    /// longer ([`run_limit`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_out: Option<f64>,
}

/// A candidate and its runs.
///
/// ```
/// use numalab::launch::Exit;
/// use numalab_bench::advise::{AdviseRun, Candidate, CandidateResult};
/// let run = |seconds, warmup, code| AdviseRun {
///     seconds, exit: Exit::Code(code), warmup, on_expected: Some(1.0),
///     private_per_node: Default::default(), audit: String::new(), timed_out: None,
///     round: 0, order: 0,
/// };
/// let result = CandidateResult {
///     candidate: Candidate::first_touch(),
///     runs: vec![run(2.0, true, 0), run(1.0, false, 0), run(1.1, false, 0), run(0.1, false, 1)],
///     summary: None,
///     vs_first_touch: None,
///     failed: None,
/// };
/// // Warm-ups and failed runs are not timed.
/// assert_eq!(result.times(), [1.0, 1.1]);
/// assert_eq!(result.on_expected(), Some(1.0));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateResult {
    /// The placement.
    pub candidate: Candidate,
    /// Its runs, warm-ups first.
    pub runs: Vec<AdviseRun>,
    /// The measured runs' times, seconds.
    pub summary: Option<Summary>,
    /// Its time against first touch's (negative: faster).
    pub vs_first_touch: Option<Difference>,
    /// Why it is out of the comparison (the command failed under it).
    pub failed: Option<String>,
}

impl CandidateResult {
    /// The measured (not warm-up) runs' times.
    pub fn times(&self) -> Vec<f64> {
        self.runs
            .iter()
            .filter(|r| !r.warmup && r.exit == Exit::Code(0))
            .map(|r| r.seconds)
            .collect()
    }

    /// Median share of its private memory where asked, over its runs.
    pub fn on_expected(&self) -> Option<f64> {
        let shares: Vec<f64> = self.runs.iter().filter_map(|r| r.on_expected).collect();
        stats::quantile(&shares, 0.5)
    }

    /// How many times faster than first touch (its geometric mean time
    /// over this one's), with the interval's ends: (speed-up, low, high).
    pub fn speedup(&self) -> Option<(f64, f64, f64)> {
        self.vs_first_touch.as_ref().map(|d| {
            (
                1.0 / (1.0 + d.relative),
                1.0 / (1.0 + d.high),
                1.0 / (1.0 + d.low),
            )
        })
    }
}

/// What advise recommends, and on what evidence.
///
/// ```
/// use numalab_bench::advise::Recommendation;
/// let r = Recommendation {
///     name: "interleave:0-1".into(),
///     options: "--interleave=0-1".into(),
///     evidence: "interleave:0-1: 1.31× faster than first touch".into(),
///     runner_up: None,
///     bimodal: None,
/// };
/// println!("numactl {} -- ./app", r.options);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    /// The candidate's name.
    pub name: String,
    /// Its options for `numactl` / `numalab exec` (empty: run the command
    /// as it is).
    pub options: String,
    /// The evidence, one sentence.
    pub evidence: String,
    /// How it compares with the runner-up, one sentence (`None` with one
    /// candidate).
    pub runner_up: Option<String>,
    /// When first touch was sometimes fast and sometimes slow
    /// ([`bimodal`]): what that means for the choice, one sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bimodal: Option<String>,
}

/// The least ratio between one run and the next faster that splits a
/// placement's runs into a fast and a slow mode: 1.5.
pub const BIMODAL_GAP: f64 = 1.5;

/// How far below first touch's slow mode (the median of its slow runs) a
/// placement's slowest run must stay to count as never slow: 1.25 times.
pub const NEVER_SLOW_MARGIN: f64 = 1.25;

/// The least a placement must save over first touch to be recommended:
/// 5% of the time. A smaller gain, even beyond noise, is not worth a
/// command line that stops fitting when the machine or the input
/// changes (and a placement's own cost, pinning or a policy's page
/// faults, can show as a steady gain of a percent or two).
pub const MIN_GAIN: f64 = 0.05;

/// The confidence of each of `compared` comparisons with first touch for
/// all of them together to hold at `confidence` (Bonferroni's
/// correction): with seven placements at 95%, 99.29% each. Without it,
/// one of seven placements no faster than first touch would look faster
/// about a third of the time.
///
/// ```
/// use numalab_bench::advise::each_confidence;
/// assert_eq!(each_confidence(0.95, 1), 0.95);
/// assert!((each_confidence(0.95, 7) - 0.992857).abs() < 1e-6);
/// ```
pub fn each_confidence(confidence: f64, compared: usize) -> f64 {
    1.0 - (1.0 - confidence) / compared.max(1) as f64
}

/// "95% confidence", or with more than one comparison "99.29%
/// confidence each, 95% for all 7 together".
fn confidence_text(confidence: f64, compared: usize) -> String {
    if compared <= 1 {
        format!("{:.0}% confidence", confidence * 100.0)
    } else {
        format!(
            "{:.2}% confidence each, {:.0}% for all {compared} together",
            each_confidence(confidence, compared) * 100.0,
            confidence * 100.0
        )
    }
}

/// Runs that split into a fast mode and a slow one: a command fast under
/// first touch only when the scheduler starts it on the node its data
/// likes.
///
/// ```
/// use numalab_bench::advise::bimodal;
/// // Seen on a three-node machine: cv 74%, level medians.
/// let split = bimodal(&[0.363, 1.178, 0.370]).unwrap();
/// assert_eq!((split.slow_runs, split.runs), (1, 3));
/// assert_eq!((split.fast_up_to, split.slow_from), (0.370, 1.178));
/// assert_eq!(split.slow_median, 1.178);
/// assert!(bimodal(&[0.379, 0.383, 0.381]).is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bimodal {
    /// Runs in the slow mode.
    pub slow_runs: usize,
    /// All runs.
    pub runs: usize,
    /// The slowest run of the fast mode, seconds.
    pub fast_up_to: f64,
    /// The fastest run of the slow mode, seconds.
    pub slow_from: f64,
    /// The median of the slow mode's runs, seconds: its level, which one
    /// fast run stalled into the slow side cannot lower.
    pub slow_median: f64,
}

/// `times` split at their widest gap, when it is at least [`BIMODAL_GAP`].
pub fn bimodal(times: &[f64]) -> Option<Bimodal> {
    let mut sorted: Vec<f64> = times.iter().copied().filter(|t| *t > 0.0).collect();
    sorted.sort_by(f64::total_cmp);
    let (at, gap) = sorted
        .windows(2)
        .enumerate()
        .map(|(i, w)| (i, w[1] / w[0]))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    (gap >= BIMODAL_GAP).then(|| {
        let slow = &sorted[at + 1..];
        let middle = slow.len() / 2;
        let slow_median = if slow.len() % 2 == 1 {
            slow[middle]
        } else {
            (slow[middle - 1] + slow[middle]) / 2.0
        };
        Bimodal {
            slow_runs: slow.len(),
            runs: sorted.len(),
            fast_up_to: sorted[at],
            slow_from: sorted[at + 1],
            slow_median,
        }
    })
}

/// The rule for a first touch that is sometimes slow: a placement that
/// was never slow (its slowest run [`NEVER_SLOW_MARGIN`] below the median
/// of first touch's slow runs, so that one fast run a busy machine
/// stalled into the slow side does not lower the bar) and whose median is not beyond noise slower wins
/// over first touch, once its runs are enough that all of them being
/// fast by luck is unlikely: `(1 - k/n)^m` at most `1 - confidence`
/// shared among the `compared` placements (any of them could have been
/// lucky), for `k` of first touch's `n` runs slow and the placement's `m`
/// runs. With fewer runs it does not win, and the sentence says how many
/// would decide. `None`: first touch is not bimodal, or no placement was
/// never slow. `Some((index, decided, sentence))`.
fn steadier(
    report: &AdviseReport,
    confidence: f64,
    compared: usize,
) -> Option<(usize, bool, String)> {
    let first = report.candidates.first()?;
    let split = bimodal(&first.times())?;
    let (index, worst, m) = report
        .candidates
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(_, r)| r.failed.is_none())
        .filter(|(_, r)| {
            r.vs_first_touch
                .as_ref()
                .is_some_and(|d| d.verdict != Verdict::Higher)
        })
        .filter_map(|(i, r)| {
            let times = r.times();
            let worst = times.iter().copied().fold(0.0, f64::max);
            (times.len() >= 2 && worst * NEVER_SLOW_MARGIN < split.slow_median).then_some((
                i,
                worst,
                times.len(),
            ))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))?;
    let p = split.slow_runs as f64 / split.runs as f64;
    let luck = (1.0 - p).powi(m as i32);
    let allowed = 1.0 - each_confidence(confidence, compared);
    let decided = luck <= allowed;
    let needed = (allowed.ln() / (1.0 - p).ln()).ceil().max(2.0) as usize;
    let shared = if compared > 1 {
        format!(
            " (at most {:.1}%: {:.0}% shared by the {compared} placements compared)",
            allowed * 100.0,
            (1.0 - confidence) * 100.0
        )
    } else {
        String::new()
    };
    let name = &report.candidates[index].candidate.name;
    let seen = format!(
        "first touch was slow in {} of {} runs ({:.3} s or more, against {:.3} s or less otherwise): it depends on where the command starts; {name} was never slow in {m} runs (at most {worst:.3} s)",
        split.slow_runs, split.runs, split.slow_from, split.fast_up_to
    );
    let sentence = if decided {
        format!(
            "{seen}, which luck alone would give {:.1}% of the time{shared}: {name} is recommended for being steady",
            luck * 100.0
        )
    } else {
        format!(
            "{seen}, which luck alone would give {:.0}% of the time{shared}: too few runs to tell; --runs {needed} would decide",
            luck * 100.0
        )
    };
    Some((index, decided, sentence))
}

/// The `numalab.advise` document.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::advise::{run, candidates, AdviseConfig};
/// // One node with memory: nothing is run, and the report says why.
/// let one = Topology::from_synthetic("pack:1 numa:1 core:2 pu:1")?;
/// let config = AdviseConfig::new(["./app"]);
/// let report = run(&one, &config, candidates(&one, None), &mut |_, _| {})?;
/// assert!(report.cannot_matter.unwrap().contains("one node with memory"));
/// assert!(report.candidates.is_empty() && report.recommendation.is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdviseReport {
    /// The command line.
    pub command: Vec<String>,
    /// Nodes with memory on this machine.
    pub memory_nodes: NodeSet,
    /// Measured runs per candidate asked for.
    pub runs: usize,
    /// Warm-ups per candidate.
    pub warmup: usize,
    /// Every candidate tried, first touch first.
    pub candidates: Vec<CandidateResult>,
    /// The recommendation (`None` when nothing could be compared).
    pub recommendation: Option<Recommendation>,
    /// Why placement cannot matter here, when it cannot.
    pub cannot_matter: Option<String>,
    /// Rules from the literature that the measurement bears on, stated
    /// as explanation beside it.
    pub notes: Vec<String>,
    /// Set when a signal ended advising early: the runs so far are kept.
    pub interrupted: Option<i32>,
    /// Placements not tried, and why (weighted interleave without root).
    pub not_tried: Vec<String>,
    /// Set when the command failed under first touch after running under
    /// it before: advising stopped there (nothing to compare with), the
    /// runs so far are kept, and numalab leaves with this exit status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_by_default: Option<i32>,
}

impl Schema for AdviseReport {
    const NAME: &'static str = "numalab.advise";
    const VERSION: u32 = 1;
}

/// Why advise stopped before comparing anything.
///
/// ```
/// use numalab::Topology;
/// use numalab_bench::advise::{run, AdviseConfig, AdviseError};
/// let machine = Topology::from_synthetic("pack:2 numa:1 core:1 pu:1")?;
/// let config = AdviseConfig { runs: 1, ..AdviseConfig::new(["./app"]) };
/// let err = run(&machine, &config, vec![], &mut |_, _| {}).unwrap_err();
/// assert!(matches!(err, AdviseError::TooFewRuns(1)), "{err}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdviseError {
    /// `runs` below 2.
    #[error("{}", self.message().unwrap_or_else(|| Message::new("")))]
    TooFewRuns(usize),
    /// The command could not be started or followed.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// It fails under first touch, the placement every other is compared
    /// with.
    #[error("{}", self.message().unwrap_or_else(|| Message::new("")))]
    FailsByDefault {
        /// How it ended.
        exit: ExitText,
        /// The exit status to leave with.
        code: i32,
    },
    /// The quick matrix measuring the weighted-interleave weights failed.
    #[error(transparent)]
    Matrix(#[from] MatrixError),
    /// Its first run, under first touch, took longer than its limit.
    #[error("{}", self.message().unwrap_or_else(|| Message::new("")))]
    TimesOutByDefault {
        /// The limit ([`run_limit`]).
        limit: Duration,
    },
}

impl AdviseError {
    /// What went wrong, its settings named `«field»` of [`AdviseConfig`]
    /// for the caller to spell ([`Message::spelt`]), where the error
    /// names settings.
    pub fn message(&self) -> Option<Message> {
        Some(Message::new(match self {
            AdviseError::TooFewRuns(runs) => format!(
                "«runs»={runs}: at least 2 runs per placement are needed to judge their spread"
            ),
            AdviseError::FailsByDefault { exit, .. } => format!(
                "the command {exit} under first touch (the default placement), so there is \
                 nothing to compare the other placements with; make it succeed first (its \
                 output is shown with «show_output»)"
            ),
            AdviseError::TimesOutByDefault { limit } => format!(
                "the command did not end within {} under first touch (its first run), so it \
                 was ended and nothing was compared; give a longer «timeout» (or a shorter \
                 workload)",
                seconds_text(*limit)
            ),
            _ => return None,
        }))
    }
}

/// An exit described in words: `exits 3`, `is killed by signal 9`.
///
/// ```
/// use numalab::launch::Exit;
/// use numalab_bench::advise::ExitText;
/// assert_eq!(ExitText(Exit::Signal(9)).to_string(), "is killed by signal 9");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitText(pub Exit);

impl std::fmt::Display for ExitText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Exit::Code(code) => write!(f, "exits {code}"),
            Exit::Signal(signal) => write!(f, "is killed by signal {signal}"),
        }
    }
}

/// Runs `config.command` under every candidate of `plan` (first touch
/// first; [`plan`], or a list of candidates) on `topology`, `config.warmup` + `config.runs` times each,
/// and compares them. `progress` hears of each run as it ends. A signal
/// sent to numalab (passed on to the command) ends advising after that
/// run: the report keeps what was measured and names the signal.
pub fn run(
    topology: &Topology,
    config: &AdviseConfig,
    plan: impl Into<AdvisePlan>,
    progress: &mut dyn FnMut(&Candidate, &AdviseRun),
) -> Result<AdviseReport, AdviseError> {
    let AdvisePlan {
        candidates,
        not_tried,
    } = plan.into();
    if config.runs < 2 {
        return Err(AdviseError::TooFewRuns(config.runs));
    }
    let memory_nodes = usable_memory_nodes(topology);
    let mut report = AdviseReport {
        command: config
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        memory_nodes: memory_nodes.clone(),
        runs: config.runs,
        warmup: config.warmup,
        candidates: candidates
            .into_iter()
            .map(|candidate| CandidateResult {
                candidate,
                runs: Vec::new(),
                summary: None,
                vs_first_touch: None,
                failed: None,
            })
            .collect(),
        recommendation: None,
        cannot_matter: None,
        notes: Vec::new(),
        interrupted: None,
        not_tried,
        failed_by_default: None,
    };
    if memory_nodes.len() < 2 {
        report.cannot_matter = Some(format!(
            "this machine has one node with memory (node {memory_nodes}): every placement puts the memory there and runs on its CPUs, so placement cannot change the command's speed here; run numalab advise on a machine with two or more NUMA nodes"
        ));
        report.candidates.clear();
        return Ok(report);
    }
    let count = report.candidates.len();
    let rounds = config.warmup + config.runs;
    let mut order = 0;
    'rounds: for round in 0..rounds {
        for step in 0..count {
            // First touch runs first in every round's first place once,
            // so a command that fails by default is found at once.
            let index = if round == 0 {
                step
            } else {
                (step + round) % count
            };
            if report.candidates[index].failed.is_some() {
                continue;
            }
            let first = report.candidates[0].runs.first().map(|r| r.seconds);
            let limit = run_limit(config, first);
            let result = &mut report.candidates[index];
            let warmup = round < config.warmup;
            let run = match run_once(topology, config, &result.candidate, warmup, limit) {
                Ok(run) => run,
                // A placement the kernel refuses (a node outside this
                // process's cpuset, a policy it lacks) is left out with
                // why; first touch failing to start is the command's own
                // failure.
                Err(AdviseError::Exec(
                    err @ (ExecError::Launch(LaunchError::Spawn { .. }) | ExecError::Weights(_)),
                )) if index != 0 => {
                    result.failed = Some(format!(
                        "cannot run under {}: {err}; left out of the comparison",
                        result.candidate.name
                    ));
                    continue;
                }
                Err(err) => return Err(err),
            };
            let (mut one, relayed) = run;
            one.round = round;
            one.order = order;
            order += 1;
            progress(&result.candidate, &one);
            let exit = one.exit;
            result.runs.push(one);
            if let Some(signal) = relayed.or(match exit {
                Exit::Signal(signal) if signal == SIGINT => Some(signal),
                _ => None,
            }) {
                report.interrupted = Some(signal);
                break 'rounds;
            }
            if exit != Exit::Code(0) {
                let timed_out = result.runs.last().is_some_and(|r| r.timed_out.is_some());
                let ended = if timed_out {
                    format!("did not end within {}", seconds_text(limit))
                } else {
                    ExitText(exit).to_string()
                };
                if index == 0 && result.runs.len() == 1 && timed_out {
                    return Err(AdviseError::TimesOutByDefault { limit });
                }
                if index == 0 && result.runs.len() == 1 {
                    return Err(AdviseError::FailsByDefault {
                        exit: ExitText(exit),
                        code: exit.shell_code(),
                    });
                }
                if index == 0 {
                    // Failed later under first touch: what was measured is
                    // kept, the run that failed named, nothing compared.
                    result.failed = Some(format!(
                        "the command {ended} under first touch (run {} of {}), after running under it before: advising stopped there, with nothing to compare the other placements with; the runs so far are kept",
                        result.runs.len(),
                        rounds,
                    ));
                    report.failed_by_default = Some(exit.shell_code());
                    break 'rounds;
                }
                result.failed = Some(format!(
                    "the command {ended} under {} (run {} of {}), and exits 0 under first touch; left out of the comparison",
                    result.candidate.name,
                    result.runs.len(),
                    rounds,
                ));
            }
        }
    }
    compare(&mut report, config.confidence);
    report.notes = notes(topology, &report);
    Ok(report)
}

const SIGINT: i32 = 2;

fn run_once(
    topology: &Topology,
    config: &AdviseConfig,
    candidate: &Candidate,
    warmup: bool,
    limit: Duration,
) -> Result<(AdviseRun, Option<i32>), AdviseError> {
    let exec_config = ExecConfig {
        command: config.command.clone(),
        policy: candidate.policy.clone(),
        cpus: candidate.cpus.clone(),
        weights: candidate.weights.clone(),
        quiet: !config.show_output,
        timeout: Some(limit),
    };
    let report = match exec::run(topology, &exec_config) {
        Ok(report) => report,
        Err(ExecError::Launch(LaunchError::Interrupted { signal })) => {
            return Ok((
                AdviseRun {
                    seconds: 0.0,
                    exit: Exit::Signal(signal),
                    warmup,
                    on_expected: None,
                    private_per_node: BTreeMap::new(),
                    audit: format!("not run: signal {signal} arrived first"),
                    timed_out: None,
                    round: 0,
                    order: 0,
                },
                Some(signal),
            ))
        }
        Err(err) => return Err(err.into()),
    };
    let private = report.run.peak.private_per_node();
    let present: u64 = private.values().sum();
    Ok((
        AdviseRun {
            seconds: report.run.elapsed.as_secs_f64(),
            exit: report.run.exit,
            warmup,
            on_expected: (present > 0).then_some(report.audit.on_expected),
            private_per_node: private,
            audit: report.audit.note.clone(),
            timed_out: report.run.timed_out.then_some(limit.as_secs_f64()),
            round: 0,
            order: 0,
        },
        report.run.relayed,
    ))
}

/// Fills in the summaries, the differences against first touch and the
/// recommendation.
fn compare(report: &mut AdviseReport, confidence: f64) {
    let baseline = report
        .candidates
        .first()
        .filter(|first| first.failed.is_none())
        .map(CandidateResult::times);
    // Every placement is compared with first touch: the comparisons
    // hold at `confidence` together, not each alone.
    let compared = report
        .candidates
        .iter()
        .skip(1)
        .filter(|r| r.failed.is_none() && r.times().len() >= 2)
        .count();
    let each = each_confidence(confidence, compared);
    for result in &mut report.candidates {
        let times = result.times();
        result.summary = Summary::of(&times);
        if let Some(baseline) = &baseline {
            if result.candidate.name != "first-touch" && result.failed.is_none() {
                result.vs_first_touch = stats::difference(baseline, &times, each);
            }
        }
    }
    let Some(first) = report.candidates.first().filter(|f| f.failed.is_none()) else {
        return;
    };
    let Some(first_summary) = &first.summary else {
        return;
    };
    let n = first_summary.n;
    // The fastest by geometric mean among those that ran without failing.
    let geomean = |r: &CandidateResult| -> Option<f64> {
        let times = r.times();
        (times.len() >= 2 && r.failed.is_none())
            .then(|| (times.iter().map(|t| t.ln()).sum::<f64>() / times.len() as f64).exp())
    };
    let mut ranked: Vec<(f64, usize)> = report
        .candidates
        .iter()
        .enumerate()
        .filter_map(|(i, r)| geomean(r).map(|g| (g, i)))
        .collect();
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
    let Some(&(_, best)) = ranked.first() else {
        return;
    };
    let placed = |r: &CandidateResult| {
        r.on_expected()
            .map(|share| format!("; {:.0}% of its memory where asked", share * 100.0))
            .unwrap_or_default()
    };
    let best_result = &report.candidates[best];
    let beyond_noise = best_result
        .vs_first_touch
        .as_ref()
        .filter(|d| d.verdict == Verdict::Lower);
    let faster = beyond_noise.is_some_and(|d| -d.relative >= MIN_GAIN);
    let steady = if faster {
        None
    } else {
        steadier(report, confidence, compared)
    };
    let chosen = match &steady {
        _ if faster => best,
        Some((index, true, _)) => *index,
        _ => 0,
    };
    let chosen_result = &report.candidates[chosen];
    let evidence = if let (Some((_, true, why)), false) = (&steady, faster) {
        format!("{}: {why}", chosen_result.candidate.name)
    } else if faster {
        let (speedup, low, high) = chosen_result.speedup().unwrap_or((1.0, 1.0, 1.0));
        format!(
            "{}: {speedup:.2}× faster than first touch ({low:.2}× to {high:.2}× at {}) over {} runs each{}",
            chosen_result.candidate.name,
            confidence_text(confidence, compared),
            n,
            placed(chosen_result),
        )
    } else if let Some(d) = beyond_noise {
        format!(
            "first touch: {} took {:.1}% less time ({:.1}% to {:.1}%), beyond noise but less than the {:.0}% worth changing the placement for, over {n} runs each{}",
            best_result.candidate.name,
            -d.relative * 100.0,
            -d.high * 100.0,
            -d.low * 100.0,
            MIN_GAIN * 100.0,
            placed(chosen_result),
        )
    } else {
        format!(
            "first touch: no other placement was measurably faster over {n} runs each ({compared} compared at {}){}",
            confidence_text(confidence, compared),
            placed(chosen_result),
        )
    };
    // The best two, against each other.
    let runner_up = ranked
        .iter()
        .map(|&(_, i)| i)
        .find(|&i| i != chosen)
        .map(|other| {
            let a = &report.candidates[chosen];
            let b = &report.candidates[other];
            match stats::difference(&a.times(), &b.times(), confidence) {
                Some(d) if d.verdict == Verdict::Higher => format!(
                    "{} takes {:.1}% longer ({:.1}% to {:.1}%): beyond noise",
                    b.candidate.name,
                    d.relative * 100.0,
                    d.low * 100.0,
                    d.high * 100.0
                ),
                Some(d) if d.verdict == Verdict::Lower => format!(
                    "{} took {:.1}% less time than it ({:.1}% to {:.1}%), but was not beyond noise against first touch",
                    b.candidate.name,
                    -d.relative * 100.0,
                    -d.high * 100.0,
                    -d.low * 100.0
                ),
                Some(d) => format!(
                    "{} is within noise of it ({:+.1}% time, {:+.1}% to {:+.1}%): either will do",
                    b.candidate.name,
                    d.relative * 100.0,
                    d.low * 100.0,
                    d.high * 100.0
                ),
                None => format!("{} could not be compared", b.candidate.name),
            }
        });
    report.recommendation = Some(Recommendation {
        name: chosen_result.candidate.name.clone(),
        options: chosen_result.candidate.numactl_options(),
        evidence,
        runner_up,
        bimodal: steady.map(|(_, _, why)| why),
    });
}

/// Rules from the literature the runs bear on: stated as explanation
/// beside the measurement, never instead of it.
fn notes(topology: &Topology, report: &AdviseReport) -> Vec<String> {
    let mut notes = Vec::new();
    let Some(first) = report.candidates.first() else {
        return notes;
    };
    // Where first touch put the memory, over its measured runs' peaks.
    let mut per_node: BTreeMap<u32, u64> = BTreeMap::new();
    for run in first.runs.iter().filter(|r| !r.warmup) {
        for (node, bytes) in &run.private_per_node {
            *per_node.entry(*node).or_default() += bytes;
        }
    }
    let total: u64 = per_node.values().sum();
    let cpu_nodes = topology.nodes_with_cpus();
    if let Some((&node, &most)) = per_node.iter().max_by_key(|(_, &b)| b) {
        let share = most as f64 / total.max(1) as f64;
        if share >= 0.9 && cpu_nodes.len() > 1 {
            notes.push(format!(
                "first touch put {:.0}% of the command's memory on node {node} while it could run on the CPUs of nodes {cpu_nodes}: if its threads run on several nodes, that node's memory controller serves them all and the other nodes' threads read remotely. Carrefour (Dashti et al., ASPLOS 2013) interleaves in this case; the interleave row measures whether it pays here",
                share * 100.0
            ));
        }
    }
    if numalab::system::KernelSettings::current().numa_balancing == Some(0) {
        notes.push("NUMA balancing is off (kernel.numa_balancing = 0): nothing moves pages toward the threads that use them after first touch. Where locality is low, migrating pages (Carrefour's third rule; numa_balancing=1) is the alternative to choosing a placement up front".into());
    }
    notes.push("replication (a copy of read-mostly data on every node, Carrefour's first rule) needs the program's cooperation: numalab::Replicated and ReplicatedPages do it for a program that links numalab; it is not a placement numalab can give an unmodified command, so it is not measured here".into());
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_follow_bandwidth_and_reduce() {
        let w =
            |pairs: &[(u32, f64)]| weights_from_bandwidth_figures(&pairs.iter().copied().collect());
        assert_eq!(
            w(&[(0, 80.0), (1, 40.0)]),
            Some(BTreeMap::from([(0, 2), (1, 1)]))
        );
        assert_eq!(
            w(&[(0, 80.0), (1, 1.0)]),
            Some(BTreeMap::from([(0, 20), (1, 1)]))
        );
        assert_eq!(w(&[(0, 80.0)]), None);
        assert_eq!(w(&[(0, 0.0), (1, 0.0)]), None);
    }

    #[test]
    fn candidates_use_only_the_nodes_this_process_may_use() {
        let mut three = Topology::from_synthetic("pack:3 numa:1 core:2 pu:1").unwrap();
        three.allowed_nodes = "0-1".parse().unwrap();
        let names: Vec<String> = candidates(&three, None)
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(
            names,
            [
                "first-touch",
                "interleave:0-1",
                "bind:0",
                "bind:1",
                "preferred:0",
                "preferred:1"
            ]
        );
    }

    /// Launched commands are followed with waitpid(-1) by the launching
    /// thread: two tests launching at once in this one process would take
    /// each other's children's events. They take turns.
    static LAUNCHING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn a_command_failing_later_under_first_touch_keeps_the_runs_so_far() {
        let _turn = LAUNCHING.lock().unwrap_or_else(|e| e.into_inner());
        let two = Topology::from_synthetic("pack:2 numa:1 core:1 pu:1").unwrap();
        let counter =
            std::env::temp_dir().join(format!("numalab-advise-later-{}", std::process::id()));
        let _ = std::fs::remove_file(&counter);
        // Counts its runs under the default policy (its own numa_maps
        // says "default"), and fails the second.
        let script = format!(
            "read -r address policy rest < /proc/$$/numa_maps\n\
             if [ \"$policy\" = default ]; then\n\
               n=$(cat {0} 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {0}\n\
               [ $n -lt 2 ] || exit 3\n\
             fi\n",
            counter.display()
        );
        let mut config = AdviseConfig::new(["sh", "-c", &script]);
        config.runs = 3;
        config.warmup = 0;
        let report = run(&two, &config, candidates(&two, None), &mut |_, _| {}).unwrap();
        let _ = std::fs::remove_file(&counter);
        assert_eq!(report.failed_by_default, Some(3));
        let first = &report.candidates[0];
        assert_eq!(first.runs.len(), 2, "the good run and the failed one kept");
        let why = first.failed.as_deref().unwrap();
        assert!(
            why.contains("exits 3 under first touch (run 2 of 3)"),
            "{why}"
        );
        assert!(report.recommendation.is_none());
        assert!(report.candidates.iter().skip(1).any(|c| !c.runs.is_empty()));
    }

    #[test]
    fn a_run_that_does_not_end_in_time_is_ended_and_its_placement_left_out() {
        let _turn = LAUNCHING.lock().unwrap_or_else(|e| e.into_inner());
        let two = Topology::from_synthetic("pack:2 numa:1 core:1 pu:1").unwrap();
        // Hangs when bound (its own numa_maps says "bind:0"), ends at once
        // otherwise: only the bound run can meet the limit.
        let script = "read -r address policy rest < /proc/$$/numa_maps\n\
                      case $policy in bind*) exec sleep 100000 ;; esac\n";
        let mut config = AdviseConfig::new(["sh", "-c", script]);
        config.runs = 2;
        config.warmup = 0;
        config.timeout = Some(Duration::from_secs(10));
        let bind0 = |c: &Candidate| c.name == "bind:0";
        let list: Vec<Candidate> = candidates(&two, None)
            .into_iter()
            .filter(|c| c.name == "first-touch" || bind0(c))
            .collect();
        assert_eq!(list.len(), 2);
        let report = run(&two, &config, list, &mut |_, _| {}).unwrap();
        let bound = report
            .candidates
            .iter()
            .find(|c| bind0(&c.candidate))
            .unwrap();
        let why = bound.failed.as_deref().unwrap_or_default();
        assert!(
            why.contains("did not end within 10 s under bind:0 (run 1 of 2)"),
            "{why}"
        );
        assert_eq!(bound.runs.len(), 1, "not run again once it failed");
        assert_eq!(bound.runs[0].timed_out, Some(10.0));
        let first = &report.candidates[0];
        assert_eq!((first.runs.len(), first.failed.as_deref()), (2, None));
        // The rounds, in the JSON: round 1 starts one placement later
        // (with bind:0, left out, skipped).
        let when = |c: &CandidateResult| -> Vec<(usize, usize)> {
            c.runs.iter().map(|r| (r.round, r.order)).collect()
        };
        assert_eq!(when(first), [(0, 0), (1, 2)]);
        assert_eq!(when(bound), [(0, 1)]);
    }

    #[test]
    fn a_command_that_does_not_end_in_its_first_run_stops_advising() {
        let _turn = LAUNCHING.lock().unwrap_or_else(|e| e.into_inner());
        let two = Topology::from_synthetic("pack:2 numa:1 core:1 pu:1").unwrap();
        let mut config = AdviseConfig::new(["sleep", "100000"]);
        config.timeout = Some(Duration::from_millis(200));
        let err = run(&two, &config, candidates(&two, None), &mut |_, _| {}).unwrap_err();
        assert!(
            matches!(err, AdviseError::TimesOutByDefault { .. }),
            "{err}"
        );
        assert!(
            err.to_string()
                .starts_with("the command did not end within 0.2 s under first touch"),
            "{err}"
        );
    }

    #[test]
    fn a_placement_the_kernel_refuses_is_left_out_with_why() {
        let _turn = LAUNCHING.lock().unwrap_or_else(|e| e.into_inner());
        // Two nodes by the topology, one on this machine: the kernel
        // refuses every policy naming node 1 (EINVAL).
        let two = Topology::from_synthetic("pack:2 numa:1 core:1 pu:1").unwrap();
        if numalab::NodeInventory::live().with_memory.contains(1) {
            eprintln!("not run: this machine has a node 1, so nothing is refused");
            return;
        }
        let mut config = AdviseConfig::new(["true"]);
        config.runs = 2;
        config.warmup = 0;
        let report = run(&two, &config, candidates(&two, None), &mut |_, _| {}).unwrap();
        let failed: Vec<(&str, &str)> = report
            .candidates
            .iter()
            .filter_map(|c| Some((c.candidate.name.as_str(), c.failed.as_deref()?)))
            .collect();
        let names: Vec<&str> = failed.iter().map(|(n, _)| *n).collect();
        assert!(
            names.contains(&"bind:1") && names.contains(&"preferred:1"),
            "{failed:?}"
        );
        assert!(
            failed
                .iter()
                .all(|(_, why)| why.contains("cannot run under") && why.contains("left out")),
            "{failed:?}"
        );
        let first = &report.candidates[0];
        assert_eq!(
            (first.candidate.name.as_str(), first.runs.len()),
            ("first-touch", 2)
        );
    }

    #[test]
    fn candidates_of_a_machine_with_a_memory_only_node() {
        let xml = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/topologies/cpuless.xml");
        let topology = Topology::from_xml_file(xml).unwrap();
        let weights = BTreeMap::from([(0, 3), (1, 1)]);
        let list = candidates(&topology, Some((&weights, "test")));
        let names: Vec<&str> = list.iter().map(|c| c.name.as_str()).collect();
        // Node 1 has memory but no CPUs, node 2 CPUs but no memory: one
        // bind (node 0), a preferred on each node with memory.
        assert_eq!(
            names,
            [
                "first-touch",
                "interleave:0-1",
                "bind:0",
                "preferred:0",
                "preferred:1",
                "weighted-interleave:0=3,1=1"
            ]
        );
        assert!(list[4].why.contains("no CPUs"), "{}", list[4].why);
        assert_eq!(list[5].numactl_options(), "--weighted-interleave=0=3,1=1");
        assert_eq!(list[0].numactl_options(), "");
    }

    fn result(name: &str, times: &[f64]) -> CandidateResult {
        CandidateResult {
            candidate: Candidate {
                name: name.into(),
                ..Candidate::first_touch()
            },
            runs: times
                .iter()
                .map(|&seconds| AdviseRun {
                    seconds,
                    exit: Exit::Code(0),
                    warmup: false,
                    on_expected: Some(0.97),
                    private_per_node: BTreeMap::new(),
                    audit: String::new(),
                    timed_out: None,
                    round: 0,
                    order: 0,
                })
                .collect(),
            summary: None,
            vs_first_touch: None,
            failed: None,
        }
    }

    fn report(candidates: Vec<CandidateResult>) -> AdviseReport {
        AdviseReport {
            command: vec![],
            memory_nodes: "0-1".parse().unwrap(),
            runs: 5,
            warmup: 0,
            candidates,
            recommendation: None,
            cannot_matter: None,
            notes: vec![],
            interrupted: None,
            not_tried: vec![],
            failed_by_default: None,
        }
    }

    #[test]
    fn a_placement_is_recommended_only_beyond_noise() {
        let mut clear = report(vec![
            result("first-touch", &[1.31, 1.30, 1.32, 1.29, 1.31]),
            result("interleave:0-1", &[1.00, 1.01, 0.99, 1.00, 1.02]),
            result("bind:0", &[1.30, 1.33, 1.28, 1.31, 1.30]),
        ]);
        compare(&mut clear, 0.95);
        let r = clear.recommendation.unwrap();
        assert_eq!(r.name, "interleave:0-1");
        assert!(
            r.evidence.starts_with("interleave:0-1: 1.30× faster"),
            "{}",
            r.evidence
        );
        assert!(
            r.evidence.contains("97% of its memory where asked"),
            "{}",
            r.evidence
        );
        assert!(r.runner_up.unwrap().contains("beyond noise"));

        let mut noise = report(vec![
            result("first-touch", &[1.0, 1.2, 0.9, 1.1, 1.0]),
            result("interleave:0-1", &[0.98, 1.15, 0.92, 1.05, 1.0]),
        ]);
        compare(&mut noise, 0.95);
        let r = noise.recommendation.unwrap();
        assert_eq!(r.name, "first-touch");
        assert!(
            r.evidence
                .contains("no other placement was measurably faster"),
            "{}",
            r.evidence
        );
    }

    #[test]
    fn a_placement_never_slow_wins_over_a_first_touch_that_sometimes_is() {
        // As seen on a three-node guest: first touch fast when the command
        // starts on the node its data likes, 3.2x slower when not; the
        // medians level.
        let ft = [0.363, 0.370, 1.178];
        let steady = [0.379, 0.383, 0.381];
        let mut three = report(vec![
            result("first-touch", &ft),
            result("preferred:1", &steady),
            result("interleave:0-2", &[0.6, 1.1, 0.7]),
        ]);
        compare(&mut three, 0.95);
        let r = three.recommendation.unwrap();
        // Three runs cannot tell it from luck (2/3 cubed: 30%, against
        // 2.5% allowed with two placements compared).
        assert_eq!(r.name, "first-touch");
        let said = r.bimodal.unwrap();
        assert!(said.contains("slow in 1 of 3 runs"), "{said}");
        assert!(
            said.contains("preferred:1 was never slow in 3 runs"),
            "{said}"
        );
        assert!(
            said.contains("30% of the time (at most 2.5%: 5% shared by the 2 placements compared): too few runs to tell; --runs 10 would decide"),
            "{said}"
        );

        // Ten runs each: 3 of first touch's slow, none of preferred's.
        let ft: Vec<f64> = (0..10)
            .map(|i| if i % 3 == 1 { 1.17 } else { 0.365 })
            .collect();
        let steady: Vec<f64> = (0..10).map(|i| 0.379 + 0.001 * i as f64).collect();
        let mut ten = report(vec![
            result("first-touch", &ft),
            result("preferred:1", &steady),
        ]);
        compare(&mut ten, 0.95);
        let r = ten.recommendation.unwrap();
        assert_steady(&r, "preferred:1");
        assert!(
            r.evidence.contains("luck alone would give 2.8%"),
            "{}",
            r.evidence
        );

        // A placement that is sometimes slow too is no cure.
        let mut both = report(vec![result("first-touch", &ft), result("bind:1", &ft)]);
        compare(&mut both, 0.95);
        let r = both.recommendation.unwrap();
        assert_eq!(r.name, "first-touch");
        assert_eq!(r.bimodal, None);
    }

    /// `name` recommended for being steady.
    fn assert_steady(r: &Recommendation, name: &str) {
        assert_eq!(r.name, name, "{}", r.evidence);
        assert!(
            r.evidence.contains("recommended for being steady"),
            "{}",
            r.evidence
        );
    }

    #[test]
    fn a_stalled_fast_run_does_not_lower_first_touchs_slow_mode() {
        // Seen in a guest on a busy host: first touch 0.2 s when the
        // command starts on the node its data likes, 2.3 s when not, and
        // one fast run stalled to 1.31 s; the bind's own stalled run took
        // 1.05 s. Against the slow mode's lowest run (1.31 s) the bind
        // would not count as never slow; against its level (2.26 s) it does.
        let ft = [2.258, 0.197, 2.255, 0.329, 2.735, 1.308];
        let bind = [0.241, 0.252, 1.05, 0.233, 0.262, 0.244];
        let split = bimodal(&ft).unwrap();
        assert_eq!((split.slow_from, split.slow_median), (1.308, 2.2565));
        let mut six = report(vec![result("first-touch", &ft), result("bind:1", &bind)]);
        compare(&mut six, 0.95);
        assert_steady(&six.recommendation.unwrap(), "bind:1");
        // A bind as slow as first touch's slow mode is still no cure.
        let slow_once = [0.241, 0.252, 2.1, 0.233, 0.262, 0.244];
        let mut no = report(vec![
            result("first-touch", &ft),
            result("bind:1", &slow_once),
        ]);
        compare(&mut no, 0.95);
        assert_eq!(no.recommendation.unwrap().name, "first-touch");
    }

    #[test]
    fn seven_comparisons_hold_at_95_percent_together() {
        // Placement 7 took 6.4% less time: beyond noise for one
        // comparison at 95% (0.8% to 11.7% less), not for seven at once
        // (-3.2% to 15.1% at 99.29%).
        let ft = [1.00, 1.04, 0.98, 1.02, 1.01];
        let lucky = [0.90, 1.00, 0.92, 0.99, 0.92];
        let alone = stats::difference(&ft, &lucky, 0.95).unwrap();
        assert_eq!(alone.verdict, Verdict::Lower);
        let mut seven = report(vec![result("first-touch", &ft)]);
        for i in 0..6 {
            seven.candidates.push(result(
                &format!("preferred:{i}"),
                &[1.01, 1.03, 0.99, 1.0, 1.02],
            ));
        }
        seven.candidates.push(result("bind:1", &lucky));
        compare(&mut seven, 0.95);
        let d = seven.candidates[7].vs_first_touch.as_ref().unwrap();
        assert!((d.confidence - each_confidence(0.95, 7)).abs() < 1e-12);
        assert_eq!(d.verdict, Verdict::Indistinguishable, "{d:?}");
        let r = seven.recommendation.unwrap();
        assert_eq!(r.name, "first-touch");
        assert!(
            r.evidence
                .contains("(7 compared at 99.29% confidence each, 95% for all 7 together)"),
            "{}",
            r.evidence
        );
    }

    #[test]
    fn a_gain_beyond_noise_but_under_five_percent_changes_nothing() {
        // 3% less time every run: beyond noise, not worth a placement.
        let mut small = report(vec![
            result("first-touch", &[1.000, 1.001, 0.999, 1.000, 1.002]),
            result("interleave:0-1", &[0.970, 0.971, 0.969, 0.970, 0.972]),
        ]);
        compare(&mut small, 0.95);
        let d = small.candidates[1].vs_first_touch.as_ref().unwrap();
        assert_eq!(d.verdict, Verdict::Lower);
        let r = small.recommendation.unwrap();
        assert_eq!(r.name, "first-touch");
        assert!(
            r.evidence.starts_with(
                "first touch: interleave:0-1 took 3.0% less time (2.8% to 3.2%), beyond noise but less than the 5% worth changing the placement for"
            ),
            "{}",
            r.evidence
        );
        // 6% less: recommended.
        let mut enough = report(vec![
            result("first-touch", &[1.000, 1.001, 0.999, 1.000, 1.002]),
            result("interleave:0-1", &[0.940, 0.941, 0.939, 0.940, 0.942]),
        ]);
        compare(&mut enough, 0.95);
        assert_eq!(enough.recommendation.unwrap().name, "interleave:0-1");
    }

    #[test]
    fn a_failing_candidate_is_left_out() {
        let mut failing = result("bind:1", &[0.5, 0.5, 0.5]);
        failing.failed = Some("exits 1".into());
        let mut r = report(vec![result("first-touch", &[1.0, 1.01, 0.99]), failing]);
        compare(&mut r, 0.95);
        assert_eq!(r.recommendation.unwrap().name, "first-touch");
        assert!(r.candidates[1].vs_first_touch.is_none());
    }
}
