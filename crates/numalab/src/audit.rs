//! Did the pages land where the policy asked? Every measurement numalab
//! makes carries a [`PlacementAudit`], so a result taken with `remote`
//! memory on a one-node machine says so instead of passing for remote.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::locate::PageHistogram;
use crate::policy::MemPolicy;
use crate::sets::NodeSet;

/// How the pages found compare with the policy.
///
/// ```
/// use numalab::audit::{audit, Verdict};
/// use numalab::locate::PageHistogram;
/// use numalab::{MemPolicy, NodeSet};
///
/// let pages = |per_node: &[(u32, u64)]| PageHistogram {
///     page_size: 4096,
///     queried: per_node.iter().map(|(_, n)| n).sum(),
///     per_node: per_node.iter().copied().collect(),
///     ..Default::default()
/// };
/// let touched_from = NodeSet::single(0);
/// let three_in_four = pages(&[(1, 75), (0, 25)]);
/// // `preferred` may fall back to other nodes when node 1 is full ...
/// let preferred = audit(&MemPolicy::Preferred(1), &touched_from, &three_in_four);
/// assert_eq!(preferred.verdict, Verdict::Spilled);
/// // ... `bind` may not.
/// let bind = audit(&MemPolicy::Bind(NodeSet::single(1)), &touched_from, &three_in_four);
/// assert_eq!(bind.verdict, Verdict::Mismatch);
/// // Memory never touched has no page to check.
/// assert_eq!(audit(&MemPolicy::Local, &touched_from, &pages(&[])).verdict, Verdict::Empty);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every present page is where the policy puts it (and interleaved
    /// pages are split as the policy splits them).
    Match,
    /// The policy allows what was found but it is not what it prefers:
    /// pages fell back to other nodes (`preferred`, `default` or `local`
    /// with the preferred node full).
    Spilled,
    /// Pages are where the policy would not have put them.
    Mismatch,
    /// No page was present to check.
    Empty,
}

/// The placement check of one memory region.
///
/// ```
/// use std::collections::BTreeMap;
/// use numalab::audit::audit;
/// use numalab::locate::PageHistogram;
/// use numalab::{MemPolicy, NodeSet};
///
/// let found = PageHistogram { page_size: 4096, queried: 8,
///     per_node: BTreeMap::from([(1, 6), (0, 2)]), ..Default::default() };
/// // `local` expects the node of the thread that first touched the pages.
/// let check = audit(&MemPolicy::Local, &NodeSet::single(1), &found);
/// assert_eq!(check.expected_nodes, NodeSet::single(1));
/// assert_eq!(check.on_expected, 0.75);
/// assert!(!check.is_match());
/// assert_eq!(check.to_string(), check.note);
/// assert_eq!(check.note, "local: 75% of 8 pages on node 1; found node0 2 (25.0%), node1 6 (75.0%)");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacementAudit {
    /// The policy asked for.
    pub policy: MemPolicy,
    /// Where the policy should put the pages: its nodes, or for `local` and
    /// `default` the nodes of the threads that first touched them.
    pub expected_nodes: NodeSet,
    /// Where they are.
    pub found: PageHistogram,
    /// Share of present pages on the expected nodes.
    pub on_expected: f64,
    /// The verdict.
    pub verdict: Verdict,
    /// One sentence saying what was found, for tables and warnings.
    pub note: String,
}

impl PlacementAudit {
    /// Whether the placement is what the policy prefers.
    pub fn is_match(&self) -> bool {
        self.verdict == Verdict::Match
    }
}

impl fmt::Display for PlacementAudit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.note)
    }
}

/// Checks `found` against `policy`. `touched_from` are the nodes whose
/// memory `local` and `default` follow: the nodes of the threads that
/// first touched the memory, each memory-less one replaced by the nearest
/// node with memory ([`local_memory_node`](crate::system::local_memory_node)).
///
/// ```
/// use std::collections::BTreeMap;
/// use numalab::audit::{audit, Verdict};
/// use numalab::locate::PageHistogram;
/// use numalab::{MemPolicy, NodeSet};
///
/// let found = PageHistogram { page_size: 4096, queried: 100,
///     per_node: BTreeMap::from([(0, 100)]), ..Default::default() };
/// // Asked for node 1, got node 0: what `remote` gives on a one-node machine.
/// let check = audit(&MemPolicy::Bind(NodeSet::single(1)), &NodeSet::single(0), &found);
/// assert_eq!(check.verdict, Verdict::Mismatch);
/// assert_eq!(check.note, "bind:1: 0% of 100 pages on node 1; found node0 100 (100.0%)");
/// ```
pub fn audit(policy: &MemPolicy, touched_from: &NodeSet, found: &PageHistogram) -> PlacementAudit {
    audit_in_units(policy, touched_from, found, 1)
}

/// As [`audit`], for memory Linux placed `unit_pages` base pages at a time
/// (512 for memory backed by 2 MiB huge pages on x86-64): an interleave
/// then deals out whole huge pages, and is even only to within one of them
/// per node.
///
/// ```
/// use std::collections::BTreeMap;
/// use numalab::audit::{audit, audit_in_units, Verdict};
/// use numalab::locate::PageHistogram;
/// use numalab::{MemPolicy, NodeSet};
///
/// // 7 huge pages over 4 nodes: 2, 2, 2 and 1 of them.
/// let found = PageHistogram { page_size: 4096, queried: 3584,
///     per_node: BTreeMap::from([(0, 1024), (1, 1024), (2, 1024), (3, 512)]),
///     ..Default::default() };
/// let interleave: MemPolicy = "interleave:0-3".parse()?;
/// let nodes = NodeSet::single(0);
/// assert_eq!(audit(&interleave, &nodes, &found).verdict, Verdict::Mismatch);
/// assert_eq!(audit_in_units(&interleave, &nodes, &found, 512).verdict, Verdict::Match);
/// # Ok::<(), numalab::PolicyError>(())
/// ```
pub fn audit_in_units(
    policy: &MemPolicy,
    touched_from: &NodeSet,
    found: &PageHistogram,
    unit_pages: u64,
) -> PlacementAudit {
    let (expected_nodes, strict) = match policy {
        MemPolicy::Default | MemPolicy::Local => (touched_from.clone(), false),
        MemPolicy::Preferred(_) | MemPolicy::PreferredMany(_) => (policy.nodes(), false),
        MemPolicy::Bind(_) | MemPolicy::Interleave(_) | MemPolicy::WeightedInterleave(_) => {
            (policy.nodes(), true)
        }
    };
    let present = found.present();
    let on_expected_pages = found.on_nodes(&expected_nodes);
    let on_expected = if present == 0 {
        0.0
    } else {
        on_expected_pages as f64 / present as f64
    };
    let shares = match policy {
        MemPolicy::Interleave(nodes) => Some(nodes.iter().map(|n| (n, 1u32)).collect()),
        MemPolicy::WeightedInterleave(weights) => {
            Some(weights.iter().map(|(n, w)| (*n, u32::from(*w))).collect())
        }
        _ => None,
    };
    let uneven = shares
        .as_ref()
        .and_then(|shares: &BTreeMap<u32, u32>| uneven_split(shares, found, unit_pages.max(1)));

    let verdict = if present == 0 {
        Verdict::Empty
    } else if on_expected_pages == present && uneven.is_none() {
        Verdict::Match
    } else if strict || expected_nodes.is_empty() || uneven.is_some() {
        Verdict::Mismatch
    } else {
        Verdict::Spilled
    };
    let expected_text = if expected_nodes.len() == 1 {
        format!("node {expected_nodes}")
    } else {
        format!("nodes {expected_nodes}")
    };
    let note = match verdict {
        Verdict::Empty => format!("{policy}: no page present to check"),
        Verdict::Match => format!(
            "{policy}: {}, as asked ({found})",
            crate::units::count(present, "page")
        ),
        _ => match uneven {
            Some(detail) => format!("{policy}: uneven split, {detail}; found {found}"),
            None => format!(
                "{policy}: {:.0}% of {} on {expected_text}; found {found}",
                100.0 * on_expected,
                crate::units::count(present, "page")
            ),
        },
    };
    PlacementAudit {
        policy: policy.clone(),
        expected_nodes,
        found: found.clone(),
        on_expected,
        verdict,
        note,
    }
}

/// For an interleave: a description of the first node whose share is off
/// by more than a unit or two (or 1% of the pages, for large regions).
fn uneven_split(
    weights: &BTreeMap<u32, u32>,
    found: &PageHistogram,
    unit_pages: u64,
) -> Option<String> {
    let present = found.present() as f64;
    let total_weight: u32 = weights.values().sum();
    // Round-robin leaves each node within one unit (a page, or a huge
    // page; times the weight) of its share; allow a page more for pages
    // allocated out of turn (page tables, the first touch of a sampled
    // page).
    let max_weight = weights.values().copied().max().unwrap_or(1) as f64;
    let tolerance = (max_weight * (unit_pages as f64 + 1.0)).max(0.01 * present);
    weights.iter().find_map(|(node, weight)| {
        let expected = present * f64::from(*weight) / f64::from(total_weight);
        let got = found.on_node(*node) as f64;
        ((got - expected).abs() > tolerance)
            .then(|| format!("node {node} has {got} pages where {expected:.0} were expected"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(pairs: &[(u32, u64)]) -> PageHistogram {
        PageHistogram {
            page_size: 4096,
            queried: pairs.iter().map(|p| p.1).sum(),
            per_node: pairs.iter().copied().collect(),
            ..Default::default()
        }
    }

    fn nodes(s: &str) -> NodeSet {
        s.parse().unwrap()
    }

    #[test]
    fn bind_matches_only_on_its_nodes() {
        let bind = MemPolicy::Bind(nodes("1"));
        assert_eq!(
            audit(&bind, &nodes("0"), &hist(&[(1, 10)])).verdict,
            Verdict::Match
        );
        assert_eq!(
            audit(&bind, &nodes("0"), &hist(&[(1, 9), (0, 1)])).verdict,
            Verdict::Mismatch
        );
        assert_eq!(
            audit(&bind, &nodes("0"), &hist(&[])).verdict,
            Verdict::Empty
        );
    }

    #[test]
    fn preferred_and_local_spill() {
        let preferred = MemPolicy::Preferred(1);
        let check = audit(&preferred, &nodes("0"), &hist(&[(1, 75), (0, 25)]));
        assert_eq!(check.verdict, Verdict::Spilled);
        assert_eq!(check.on_expected, 0.75);
        let local = audit(&MemPolicy::Local, &nodes("1"), &hist(&[(1, 10)]));
        assert_eq!(local.verdict, Verdict::Match);
        let default = audit(&MemPolicy::Default, &nodes("0"), &hist(&[(0, 5), (1, 5)]));
        assert_eq!(default.verdict, Verdict::Spilled);
    }

    #[test]
    fn interleave_must_be_even() {
        let interleave = MemPolicy::Interleave(nodes("0-3"));
        let even = hist(&[(0, 250), (1, 251), (2, 249), (3, 250)]);
        assert_eq!(
            audit(&interleave, &nodes("0"), &even).verdict,
            Verdict::Match
        );
        let skewed = hist(&[(0, 400), (1, 200), (2, 200), (3, 200)]);
        let check = audit(&interleave, &nodes("0"), &skewed);
        assert_eq!(check.verdict, Verdict::Mismatch);
        assert!(check.note.contains("uneven split"), "{}", check.note);
        let missing = hist(&[(0, 500), (1, 500)]);
        assert_eq!(
            audit(&interleave, &nodes("0"), &missing).verdict,
            Verdict::Mismatch
        );
    }

    #[test]
    fn huge_pages_interleave_a_huge_page_at_a_time() {
        // dd's 16 MiB buffer under interleave:0-3 with THP, as found on a
        // 4-node Linux 6.1: 7 huge pages dealt 2, 2, 1, 2 plus base pages
        // at the unaligned ends.
        let interleave = MemPolicy::Interleave(nodes("0-3"));
        let found = hist(&[(0, 1154), (1, 1154), (2, 642), (3, 1155)]);
        let base = audit(&interleave, &nodes("0"), &found);
        assert_eq!(base.verdict, Verdict::Mismatch, "{}", base.note);
        let huge = audit_in_units(&interleave, &nodes("0"), &found, 512);
        assert_eq!(huge.verdict, Verdict::Match, "{}", huge.note);
        // Two huge pages off is still uneven.
        let skewed = hist(&[(0, 2048), (1, 1024), (2, 512), (3, 512)]);
        let check = audit_in_units(&interleave, &nodes("0"), &skewed, 512);
        assert_eq!(check.verdict, Verdict::Mismatch, "{}", check.note);
    }

    #[test]
    fn weighted_interleave_follows_weights() {
        let weighted: MemPolicy = "weighted-interleave:0=3,1=1".parse().unwrap();
        let good = hist(&[(0, 750), (1, 250)]);
        assert_eq!(audit(&weighted, &nodes("0"), &good).verdict, Verdict::Match);
        let flat = hist(&[(0, 500), (1, 500)]);
        assert_eq!(
            audit(&weighted, &nodes("0"), &flat).verdict,
            Verdict::Mismatch
        );
    }
}
