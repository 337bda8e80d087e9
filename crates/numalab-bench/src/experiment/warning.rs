//! What every output shows beside the figures: a [`Warning`], its
//! [`WarningKind`] and, when it is about one region, key or sweep cell,
//! its [`Cause`]. The plan makes the first ones, the run and the sweep add
//! theirs; code matches on the kind and cause, people read the message.

use serde::{Deserialize, Serialize};

/// What a warning is about.
///
/// Code matches on the kind; JSON spells it in snake case.
///
/// ```
/// use numalab_bench::experiment::{Warning, WarningKind};
/// let w = Warning::new(WarningKind::NoPmu, "software events only");
/// assert!(matches!(w.kind, WarningKind::NoPmu));
/// assert_eq!(serde_json::to_string(&w.kind)?, r#""no_pmu""#);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WarningKind {
    /// The pages or threads are not where the experiment asked.
    Placement,
    /// Threads share CPUs.
    Oversubscribed,
    /// The repeats disagree more than [`crate::stats::NOISY_CV`].
    Noisy,
    /// No hardware performance counters.
    NoPmu,
    /// The engine's own loop is a visible share of the time.
    Overhead,
    /// Stopped before the end (Ctrl-C).
    Interrupted,
    /// The run is as asked but cannot show what the experiment compares
    /// on this machine (replication with one node).
    Inconclusive,
    /// A sweep cell failed while running; the sweep went on.
    Failed,
    /// Runs were shorter than the machine's noise floor and the count or
    /// duration was given, so they were kept short.
    ShortRuns,
    /// Runs were shorter than the machine's noise floor and numalab
    /// lengthened them (a note, not a fault).
    Lengthened,
    /// A region asked for huge pages and the kernel backed less than nine
    /// tenths of it with them.
    FewHugePages,
}

/// What exactly a warning is about: the region, copy, key or sweep cell
/// involved, for code and tests to match on (the message is for people).
///
/// Written in JSON as `"cause": {"no_remote_node": {"region": 0}}`.
///
/// ```
/// use numalab_bench::experiment::Cause;
/// let cause: Cause = serde_json::from_str(r#"{"node_without_memory":{"region":1,"node":2}}"#)?;
/// assert_eq!(cause.region(), Some(1));
/// let what = match &cause {
///     Cause::NodeWithoutMemory { node, .. } => format!("node {node} has no memory"),
///     Cause::Key { key } => format!("cannot honour {key}"),
///     _ => "something else".to_owned(),
/// };
/// assert_eq!(what, "node 2 has no memory");
/// assert_eq!(Cause::OneCopy.region(), None);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Cause {
    /// `remote` asked on a machine with one node with memory: the
    /// region's pages are local.
    NoRemoteNode {
        /// The region.
        region: usize,
    },
    /// A region shared by threads on several nodes: `local` or `remote`
    /// can hold for one node's threads only.
    SharedRegion {
        /// The region.
        region: usize,
    },
    /// The threads' node has no memory: `local` pages went to the nearest
    /// node with memory.
    NodeWithoutMemory {
        /// The region.
        region: usize,
        /// The threads' node.
        node: u32,
    },
    /// A region's pages, found after the run, are not where asked.
    Mismatch {
        /// The region.
        region: usize,
    },
    /// A key of the experiment that could not be honoured as written
    /// (e.g. `threads.placement` naming more nodes than have CPUs).
    Key {
        /// The key, e.g. `threads.placement`.
        key: String,
    },
    /// Replication with one copy: nothing to compare.
    OneCopy,
    /// Replicated regions each read by one node's threads only
    /// (`memory.sharing` other than `shared`).
    CopiesNeverRead,
    /// Every thread of a replicated region reads the same copy.
    OneCopyRead {
        /// The region.
        region: usize,
    },
    /// A sweep cell, by its settings.
    Cell {
        /// The cell's (key, value) settings.
        settings: Vec<(String, String)>,
    },
}

impl Cause {
    /// The region it is about, if one.
    pub fn region(&self) -> Option<usize> {
        match self {
            Cause::NoRemoteNode { region }
            | Cause::SharedRegion { region }
            | Cause::NodeWithoutMemory { region, .. }
            | Cause::Mismatch { region }
            | Cause::OneCopyRead { region } => Some(*region),
            _ => None,
        }
    }
}

/// Something every output shows beside the figures.
///
/// ```
/// use numalab_bench::experiment::warning::{Cause, Warning, WarningKind};
/// let w = Warning::new(WarningKind::Placement, "region 0's pages are local")
///     .because(Cause::NoRemoteNode { region: 0 });
/// assert_eq!(w.cause.as_ref().and_then(Cause::region), Some(0));
/// let json = serde_json::to_string(&w).unwrap();
/// assert!(json.contains(r#""cause":{"no_remote_node":{"region":0}}"#), "{json}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Warning {
    /// What it is about.
    pub kind: WarningKind,
    /// The region, key or cell involved, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
    /// One sentence for people.
    pub message: String,
}

impl Warning {
    /// A warning.
    pub fn new(kind: WarningKind, message: impl Into<String>) -> Warning {
        Warning {
            kind,
            cause: None,
            message: message.into(),
        }
    }

    /// The warning, naming what it is about.
    pub fn because(mut self, cause: Cause) -> Warning {
        self.cause = Some(cause);
        self
    }

    /// Whether it is about `region`.
    pub fn is_about_region(&self, region: usize) -> bool {
        self.cause.as_ref().and_then(Cause::region) == Some(region)
    }
}
