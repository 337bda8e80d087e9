//! `numalab advise` for people: one row per placement (its median time,
//! spread, speed against first touch with the interval, where its memory
//! went), then the recommendation with its evidence and the exact command
//! lines, then the rules of thumb the measurement bears on.

use std::fmt::Write as _;

use numalab_bench::advise::{AdviseReport, CandidateResult};

use super::profile::command_line;
use super::{Render, Style};
use crate::output::Csv;

impl Render for AdviseReport {
    fn text(&self, style: Style) -> String {
        human(self, style)
    }

    fn csv(&self) -> String {
        let mut csv = Csv::new(&[
            "candidate",
            "options",
            "runs",
            "median_s",
            "min_s",
            "max_s",
            "cv",
            "speedup_vs_first_touch",
            "speedup_low",
            "speedup_high",
            "on_expected",
            "failed",
        ]);
        for result in &self.candidates {
            let summary = result.summary.as_ref();
            let speedup = result.speedup();
            let number = |v: Option<f64>| v.map(|v| format!("{v:.6}")).unwrap_or_default();
            csv.row([
                result.candidate.name.clone(),
                result.candidate.numactl_options(),
                summary.map(|s| s.n.to_string()).unwrap_or_default(),
                number(summary.map(|s| s.median)),
                number(summary.map(|s| s.min)),
                number(summary.map(|s| s.max)),
                number(summary.map(|s| s.cv)),
                number(speedup.map(|s| s.0)),
                number(speedup.map(|s| s.1)),
                number(speedup.map(|s| s.2)),
                number(result.on_expected()),
                result.failed.clone().unwrap_or_default(),
            ]);
        }
        csv.finish()
    }

    fn warnings(&self) -> Vec<String> {
        let mut warnings: Vec<String> = self
            .candidates
            .iter()
            .filter_map(|r| r.failed.clone())
            .collect();
        if let Some(signal) = self.interrupted {
            warnings.push(format!(
                "signal {signal} ended advising early: the figures are of the runs made so far"
            ));
        }
        warnings
    }
}

fn speed(result: &CandidateResult) -> String {
    if result.candidate.name == "first-touch" {
        return "1 (baseline)".into();
    }
    // Two or three runs under a family-wise level give intervals of ten
    // digits; past 100× either way the table says so instead (the JSON
    // keeps the figures).
    let end = |v: f64| {
        if v < 0.01 {
            "<0.01".to_owned()
        } else if v > 100.0 {
            ">100".to_owned()
        } else {
            format!("{v:.2}")
        }
    };
    match result.speedup() {
        Some((speedup, low, high)) => format!("{speedup:.2}× ({}–{})", end(low), end(high)),
        None => "–".into(),
    }
}

fn human(report: &AdviseReport, style: Style) -> String {
    let mut out = String::new();
    let command = command_line(&report.command);
    if let Some(why) = &report.cannot_matter {
        out.push_str(&style.line(&format!("numalab advise: `{command}`: {why}.")));
        return out;
    }
    out.push_str(&style.heading(&format!(
        "numalab advise: `{command}`, {} per placement after {}, on memory nodes {}",
        numalab::units::count(report.runs, "run"),
        numalab::units::count(report.warmup, "warm-up"),
        report.memory_nodes
    )));
    // Each interval at the confidence that keeps them all together at
    // 95%: 99.29% each for seven placements.
    let level = report
        .candidates
        .iter()
        .find_map(|r| r.vs_first_touch.as_ref())
        .map_or(0.95, |d| d.confidence);
    let speed_heading = if level > 0.9501 {
        format!("speed vs first touch ({:.2}% each)", level * 100.0)
    } else {
        format!("speed vs first touch ({:.0}%)", level * 100.0)
    };
    let mut table = style.table(vec![
        "placement",
        "median s",
        "min–max s",
        "cv",
        &speed_heading,
        "memory where asked",
        "note",
    ]);
    for result in &report.candidates {
        let summary = result.summary.as_ref();
        table.add_row(vec![
            result.candidate.name.clone(),
            summary.map_or("–".into(), |s| format!("{:.3}", s.median)),
            summary.map_or("–".into(), |s| format!("{:.3}–{:.3}", s.min, s.max)),
            summary.map_or("–".into(), |s| format!("{:.1}%", s.cv * 100.0)),
            speed(result),
            result
                .on_expected()
                .map_or("–".into(), |share| format!("{:.0}%", share * 100.0)),
            match &result.failed {
                Some(_) => "failed (below)".into(),
                None if summary.is_some_and(|s| s.is_noisy()) => "noisy".into(),
                None => String::new(),
            },
        ]);
    }
    out.push_str(&style.render(&table));
    if style == Style::Markdown {
        out.push('\n');
    }
    for failed in report.candidates.iter().filter_map(|r| r.failed.as_ref()) {
        out.push_str(&style.warning(failed));
    }
    if let Some(signal) = report.interrupted {
        out.push_str(&style.warning(&format!(
            "signal {signal} ended advising early: the figures are of the runs made so far"
        )));
    }
    if let Some(recommendation) = &report.recommendation {
        out.push_str(&style.line(&format!("recommended: {}", recommendation.evidence)));
        if let Some(runner_up) = &recommendation.runner_up {
            out.push_str(&style.line(&format!("runner-up: {runner_up}")));
        }
        if let Some(bimodal) = recommendation
            .bimodal
            .as_ref()
            .filter(|b| !recommendation.evidence.ends_with(b.as_str()))
        {
            out.push_str(&style.warning(bimodal));
        }
        let options = &recommendation.options;
        let lines = if options.is_empty() {
            format!("run it as it is: {command}")
        } else {
            format!(
                "run it with:\n  numactl {options} -- {command}\n  numalab exec {options} -- {command}   (the same, and reports where its memory went)"
            )
        };
        let _ = write!(out, "{}", style.line(&lines));
    }
    for note in &report.not_tried {
        out.push_str(&style.line(&format!("not tried: {note}")));
    }
    if !report.notes.is_empty() {
        out.push_str(
            &style.line("why (rules of thumb, beside the measurement, not instead of it):"),
        );
        for note in &report.notes {
            out.push_str(&style.line(&format!("- {note}")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use numalab::launch::Exit;
    use numalab_bench::advise::{AdviseRun, Candidate};
    use std::collections::BTreeMap;

    /// A measured run of `seconds` that ended with `exit`.
    fn run(seconds: f64, exit: Exit) -> AdviseRun {
        AdviseRun {
            seconds,
            exit,
            warmup: false,
            on_expected: None,
            private_per_node: BTreeMap::new(),
            audit: String::new(),
            timed_out: None,
            round: 0,
            order: 0,
        }
    }

    #[test]
    fn one_node_says_why_and_nothing_else() {
        let report = AdviseReport {
            command: vec!["sort".into(), "a file".into()],
            memory_nodes: "0".parse().unwrap(),
            runs: 5,
            warmup: 1,
            candidates: vec![],
            recommendation: None,
            cannot_matter: Some("one node".into()),
            notes: vec![],
            interrupted: None,
            not_tried: vec![],
            failed_by_default: None,
        };
        let text = human(&report, Style::Plain);
        assert_eq!(text, "numalab advise: `sort 'a file'`: one node.\n");
    }

    #[test]
    fn a_failed_candidate_is_named_in_table_and_warning() {
        let report = AdviseReport {
            command: vec!["app".into()],
            memory_nodes: "0-1".parse().unwrap(),
            runs: 2,
            warmup: 0,
            candidates: vec![
                CandidateResult {
                    candidate: Candidate::first_touch(),
                    runs: vec![run(1.0, Exit::Code(0)), run(1.1, Exit::Code(0))],
                    summary: numalab_bench::stats::Summary::of(&[1.0, 1.1]),
                    vs_first_touch: None,
                    failed: None,
                },
                CandidateResult {
                    candidate: Candidate::bind(1, "1".parse().unwrap()),
                    runs: vec![run(0.1, Exit::Code(1))],
                    summary: None,
                    vs_first_touch: None,
                    failed: Some("the command exits 1 under bind:1".into()),
                },
            ],
            recommendation: None,
            cannot_matter: None,
            notes: vec![],
            interrupted: None,
            not_tried: vec![],
            failed_by_default: None,
        };
        let text = human(&report, Style::Plain);
        assert!(text.contains("failed (below)"), "{text}");
        assert!(
            text.contains("WARNING: the command exits 1 under bind:1"),
            "{text}"
        );
        assert_eq!(report.warnings().len(), 1);
        assert!(report
            .csv()
            .lines()
            .nth(2)
            .unwrap()
            .starts_with("bind:1,--cpunodebind=1 --membind=1,,"));
    }

    #[test]
    fn an_interval_past_a_hundredfold_is_shown_as_such() {
        let result = |name: &str, times: &[f64]| CandidateResult {
            candidate: Candidate {
                name: name.into(),
                ..Candidate::first_touch()
            },
            runs: times.iter().map(|&t| run(t, Exit::Code(0))).collect(),
            summary: None,
            vs_first_touch: None,
            failed: None,
        };
        // Two runs each, seven placements compared: 99.29% each.
        let mut wide = result("bind:0", &[0.087, 0.089]);
        wide.vs_first_touch = numalab_bench::stats::difference(
            &[0.052, 0.087],
            &wide.times(),
            numalab_bench::advise::each_confidence(0.95, 7),
        );
        assert_eq!(speed(&wide), "0.76× (<0.01–>100)");
        let mut narrow = result("bind:1", &[0.50, 0.51, 0.49, 0.50, 0.50]);
        narrow.vs_first_touch =
            numalab_bench::stats::difference(&[1.0, 1.01, 0.99, 1.0, 1.0], &narrow.times(), 0.95);
        assert!(
            speed(&narrow).starts_with("2.00× (1.9"),
            "{}",
            speed(&narrow)
        );
    }
}
