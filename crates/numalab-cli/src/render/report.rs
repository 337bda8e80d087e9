//! `numalab report` for people: its three sections (the machine, what
//! NUMA costs, what placement costs a workload) and its findings, as text
//! or Markdown; the HTML page is [`super::page`].

use std::fmt::Write as _;

use numalab_bench::report::Report;

use super::{Render, Style};

impl Render for Report {
    fn text(&self, style: Style) -> String {
        text(self, style)
    }

    /// The report has no rows of its own: its plain text.
    fn csv(&self) -> String {
        text(self, Style::Plain)
    }
}

const MACHINE: &str = "What this machine is (numalab topo)";
const MATRIX: &str = "What NUMA costs here (numalab matrix)";
const SWEEP: &str = "What placement costs a workload (numalab sweep)";

fn text(report: &Report, style: Style) -> String {
    let heading = |title: &str| style.section(title);
    let mut out = String::new();
    out.push_str(&heading(MACHINE));
    out.push_str(&report.topology.text(style));
    out.push_str(&heading(MATRIX));
    out.push_str(&report.matrix.text(style));
    out.push_str(&heading(SWEEP));
    out.push_str(&report.sweep.text(style));
    out.push_str(&heading("Findings"));
    for finding in &report.findings {
        let _ = writeln!(out, "- {finding}");
    }
    out
}
