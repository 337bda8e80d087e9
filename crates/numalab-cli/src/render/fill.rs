//! `numalab fill` for people: where the filled memory landed per node,
//! each node's free memory before and after, and the process's memory per
//! node as `numastat -p` shows it.

use std::fmt::Write as _;

use numalab::units::Size;
use numalab_bench::fill::FillReport;

use super::{numa_balancing as balancing, Render, Style};
use crate::output::{self, mib_figure, Csv};

impl Render for FillReport {
    /// The same columns in both styles.
    fn text(&self, _style: Style) -> String {
        human(self)
    }

    fn csv(&self) -> String {
        csv(self)
    }
}

fn human(report: &FillReport) -> String {
    let mut out = String::new();
    let thread = match &report.cpus {
        Some(cpus) => format!("thread on CPUs {cpus} (node {})", report.thread_node),
        None => format!("thread on node {}", report.thread_node),
    };
    let _ = writeln!(
        out,
        "numalab fill: {} under {}, {thread}; numa_balancing {}, transparent huge pages {}",
        Size(report.size_bytes),
        report.policy,
        balancing(report.numa_balancing),
        report.thp_enabled.as_deref().unwrap_or("?"),
    );
    let _ = writeln!(out, "allocated and touched in {:.2} s\n", report.seconds);
    let mut table = output::table(vec![
        "node".to_string(),
        "filled MiB".into(),
        "share".into(),
        "free before MiB".into(),
        "free after MiB".into(),
    ]);
    for node in &report.nodes {
        table.add_row(vec![
            node.node.to_string(),
            mib_figure(node.bytes),
            format!("{:.1}%", 100.0 * node.share),
            node.free_before.map_or("?".into(), mib_figure),
            node.free_after.map_or("?".into(), mib_figure),
        ]);
    }
    out.push_str(&output::render(&table));
    let process = report
        .process_bytes
        .iter()
        .map(|(n, b)| format!("node{n} {}", mib_figure(*b)))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(
        out,
        "\nprocess private memory per node, MiB (numastat -p): {process}"
    );
    if report.pages.not_present > 0 {
        let _ = writeln!(
            out,
            "{} {} not in memory (swapped out)",
            numalab::units::count(report.pages.not_present, "page"),
            if report.pages.not_present == 1 {
                "is"
            } else {
                "are"
            }
        );
    }
    if report.fallback_bytes > 0 {
        let _ = writeln!(
            out,
            "{} ({:.1}%) fell back beyond node {}",
            Size(report.fallback_bytes),
            100.0 * report.fallback_bytes as f64 / report.size_bytes.max(1) as f64,
            report.audit.expected_nodes
        );
    }
    let moved: Vec<String> = report
        .nodes
        .iter()
        .filter_map(|n| n.tiering)
        .flat_map(|t| {
            let demoted = (t.demoted > 0).then(|| {
                format!(
                    "{} demoted off node {}",
                    numalab::units::count(t.demoted, "page"),
                    t.node
                )
            });
            let promoted = (t.promoted > 0).then(|| {
                format!(
                    "{} promoted onto node {}",
                    numalab::units::count(t.promoted, "page"),
                    t.node
                )
            });
            demoted.into_iter().chain(promoted)
        })
        .collect();
    if !moved.is_empty() {
        let _ = writeln!(
            out,
            "memory tiering moved pages during the fill (the whole machine's): {}",
            moved.join(", ")
        );
    }
    let _ = writeln!(out, "placement: {}", report.audit.note);
    out
}

fn csv(report: &FillReport) -> String {
    let mut csv = Csv::new(&[
        "node",
        "bytes",
        "share",
        "free_before",
        "free_after",
        "demoted_pages",
        "promoted_pages",
    ]);
    for node in &report.nodes {
        csv.row([
            node.node.to_string(),
            node.bytes.to_string(),
            format!("{:.4}", node.share),
            node.free_before.map_or(String::new(), |b| b.to_string()),
            node.free_after.map_or(String::new(), |b| b.to_string()),
            node.tiering
                .map_or(String::new(), |t| t.demoted.to_string()),
            node.tiering
                .map_or(String::new(), |t| t.promoted.to_string()),
        ]);
    }
    csv.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balancing_reads_as_a_word() {
        assert_eq!(balancing(Some(0)), "off");
        assert_eq!(balancing(Some(1)), "on");
        assert!(balancing(Some(2)).starts_with("tiering (hot pages"));
        assert!(balancing(Some(3)).starts_with("on+tiering"));
        assert_eq!(balancing(None), "not in this kernel");
    }
}
