//! `numalab check` for people: one line, healthy or what is wrong, then
//! each cell against its baseline.

use std::fmt::Write as _;

use numalab_bench::fleet::check::CheckReport;

use super::{Render, Style};
use crate::output::{self, Csv};

impl Render for CheckReport {
    fn text(&self, _style: Style) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{}", verdict(self));
        if self.cells.is_empty() {
            return out;
        }
        let mut table = output::table(vec![
            "cell".to_string(),
            "unit".into(),
            "here".into(),
            "baseline median".into(),
            "limit".into(),
            "".into(),
        ]);
        for cell in &self.cells {
            table.add_row(vec![
                format!(
                    "{} {}->{}",
                    cell.cell.metric.name(),
                    cell.cell.initiator,
                    cell.cell.target
                ),
                cell.unit.clone(),
                cell.value.map_or("-".into(), |v| format!("{v:.1}")),
                format!("{:.1}", cell.median),
                cell.limit.map_or("-".into(), |l| format!("{l:.1}")),
                if cell.failed { "FAIL" } else { "ok" }.into(),
            ]);
        }
        let _ = writeln!(out, "\n{table}");
        out
    }

    fn csv(&self) -> String {
        let mut csv = Csv::new(&[
            "metric",
            "initiator",
            "target",
            "unit",
            "value",
            "median",
            "limit",
            "failed",
        ]);
        for cell in &self.cells {
            csv.row([
                cell.cell.metric.name().to_string(),
                cell.cell.initiator.to_string(),
                cell.cell.target.to_string(),
                cell.unit.clone(),
                cell.value.map_or(String::new(), |v| v.to_string()),
                cell.median.to_string(),
                cell.limit.map_or(String::new(), |v| v.to_string()),
                cell.failed.to_string(),
            ]);
        }
        csv.finish()
    }
}

/// The line a health check prints: `healthy: …` or `unhealthy: <reason>`.
pub fn verdict(report: &CheckReport) -> String {
    if report.healthy {
        let group = report
            .group
            .map_or(String::new(), |g| format!("baseline group {g}, "));
        format!(
            "numalab check: {} healthy ({group}{} within limits, measured in {:.1} s)",
            report.host,
            numalab::units::count(report.cells.len(), "figure"),
            report.seconds
        )
    } else {
        format!(
            "numalab check: {} unhealthy: {}",
            report.host, report.reason
        )
    }
}
