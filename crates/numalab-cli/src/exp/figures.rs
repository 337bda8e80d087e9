//! Figures drawn from saved results: a sweep's figure of merit against
//! its swept parameter, one line per policy (and per value of the other
//! axes); a run's busy time per thread, one line per repeat.

use std::path::{Path, PathBuf};

use anyhow::Result;
use numalab_bench::experiment::result::{RunResult, SweepResult};

use crate::plot::{line_chart, LineChart, Series};

/// The axis to put on x: `threads.count` when swept, else the first axis
/// whose values are all numbers; `None` when no axis is numeric.
pub fn x_axis(s: &SweepResult) -> Option<String> {
    let numeric = |values: &[String]| values.iter().all(|v| v.parse::<f64>().is_ok());
    s.axes
        .iter()
        .find(|(k, v)| k == "threads.count" && numeric(v))
        .or_else(|| s.axes.iter().find(|(_, v)| numeric(v)))
        .map(|(k, _)| k.clone())
}

/// The sweep's chart: median time to the last thread against the swept
/// parameter (or against the thread count when nothing numeric is swept).
pub fn sweep_chart(s: &SweepResult) -> LineChart {
    let x_key = x_axis(s);
    let mut series: Vec<Series> = Vec::new();
    for cell in &s.cells {
        let Some(result) = &cell.result else { continue };
        let Some(time) = result.time_to_last() else {
            continue;
        };
        let x = match &x_key {
            Some(key) => cell
                .setting(key)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0),
            None => f64::from(result.experiment.threads.count),
        };
        // One line per combination of the other axes, policy first.
        let mut others: Vec<&(String, String)> = cell
            .settings
            .iter()
            .filter(|(k, _)| Some(k) != x_key.as_ref())
            .collect();
        others.sort_by_key(|(k, _)| k != "memory.policy");
        let name = others
            .iter()
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let name = if name.is_empty() {
            result.experiment.memory.policy.to_string()
        } else {
            name
        };
        let placed = if result.placement_as_requested() {
            ""
        } else {
            " (placement not as asked)"
        };
        let name = format!("{name}{placed}");
        match series.iter_mut().find(|s| s.name == name) {
            Some(line) => line.points.push((x, time * 1e3)),
            None => series.push(Series {
                name,
                points: vec![(x, time * 1e3)],
            }),
        }
    }
    for line in &mut series {
        line.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    LineChart {
        title: format!("{}: time to last thread", s.experiment.name),
        x_label: x_key.unwrap_or_else(|| "threads.count".to_owned()),
        y_label: "time to last thread (ms, median)".to_owned(),
        series,
    }
}

/// A run's chart: each thread's busy time, one line per repeat (an
/// uneven split or a remote node shows as a step).
pub fn run_chart(r: &RunResult) -> LineChart {
    let series = r
        .repeats
        .iter()
        .map(|repeat| Series {
            name: format!("repeat {}", repeat.index),
            points: repeat
                .threads
                .iter()
                .map(|t| (t.thread as f64, t.busy_s * 1e3))
                .collect(),
        })
        .collect();
    LineChart {
        title: format!("{}: busy time per thread", r.experiment.name),
        x_label: "thread".to_owned(),
        y_label: "busy time (ms)".to_owned(),
        series,
    }
}

/// Writes the sweep's figure to `<stem>.svg` and `<stem>.png`.
pub fn draw_sweep(s: &SweepResult, stem: &Path) -> Result<Vec<PathBuf>> {
    line_chart(&sweep_chart(s), stem)
}

/// Writes the run's figure to `<stem>.svg` and `<stem>.png`.
pub fn draw_run(r: &RunResult, stem: &Path) -> Result<Vec<PathBuf>> {
    line_chart(&run_chart(r), stem)
}
