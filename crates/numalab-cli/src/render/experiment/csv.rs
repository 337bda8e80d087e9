//! CSV: every raw figure, one row per thread per run (`numalab run`), or
//! one row per cell (`numalab sweep`).

use numalab_bench::experiment::result::{Compared, Percentiles, RunReport, SweepReport};
use numalab_bench::experiment::PolicySpec;

use crate::output::Csv;

fn opt(value: Option<f64>) -> String {
    value.map_or(String::new(), |v| format!("{v}"))
}

fn p50(p: &Option<Percentiles>) -> String {
    opt(p.map(|p| p.p50))
}

fn p99(p: &Option<Percentiles>) -> String {
    opt(p.map(|p| p.p99))
}

/// A run: one row per thread of every warm-up and repeat.
pub fn run(r: &RunReport) -> String {
    let mut csv = Csv::new(&[
        "run",
        "warmup",
        "repeat_interrupted",
        "thread",
        "cpu",
        "node",
        "region",
        "memory_as_requested",
        "ops",
        "reads",
        "writes",
        "bytes",
        "busy_s",
        "time_to_last_s",
        "read_p50_ns",
        "read_p99_ns",
        "write_p50_ns",
        "write_p99_ns",
    ]);
    let runs = r
        .warmups
        .iter()
        .map(|x| (x, true))
        .chain(r.repeats.iter().map(|x| (x, false)));
    for (repeat, warmup) in runs {
        for t in &repeat.threads {
            let region = r.plan.threads.get(t.thread).map_or(0, |p| p.region);
            let as_requested = r.regions.get(region).is_some_and(|c| c.as_requested);
            csv.row([
                repeat.index.to_string(),
                warmup.to_string(),
                repeat.interrupted.to_string(),
                t.thread.to_string(),
                t.cpu.to_string(),
                t.node.to_string(),
                region.to_string(),
                as_requested.to_string(),
                t.ops.to_string(),
                t.reads.to_string(),
                t.writes.to_string(),
                t.bytes.to_string(),
                format!("{}", t.busy_s),
                format!("{}", repeat.time_to_last_s),
                p50(&t.read_latency_ns),
                p99(&t.read_latency_ns),
                p50(&t.write_latency_ns),
                p99(&t.write_latency_ns),
            ]);
        }
    }
    csv.finish()
}

/// A sweep: one row per cell, its figures' medians and spread.
pub fn sweep(s: &SweepReport) -> String {
    let mut header: Vec<&str> = s.axes.iter().map(|(k, _)| k.as_str()).collect();
    header.extend([
        "repeats",
        "time_to_last_s",
        "time_to_last_min_s",
        "time_to_last_max_s",
        "time_to_last_cv",
        "gb_per_s",
        "mops_per_s",
        "read_p50_ns",
        "read_p99_ns",
        "compared",
        "vs_local_percent",
        "vs_local_low_percent",
        "vs_local_high_percent",
        "vs_local_verdict",
        "vs_baseline_percent",
        "vs_baseline_low_percent",
        "vs_baseline_high_percent",
        "vs_baseline_verdict",
        "control",
        "placement_as_requested",
        "interrupted",
        "error",
    ]);
    // What the vs_ columns compare: time to last thread, or per million
    // operations for runs of a fixed duration.
    let compared = match Compared::of_cells(&s.cells) {
        Compared::TimeToLast => "time_to_last",
        Compared::TimePerMillionOps => "time_per_million_ops",
    };
    let mut csv = Csv::new(&header);
    for cell in &s.cells {
        let mut row: Vec<String> = cell.settings.iter().map(|(_, v)| v.clone()).collect();
        let others: Vec<(String, String)> = cell
            .settings
            .iter()
            .filter(|(k, _)| k != "memory.policy")
            .cloned()
            .collect();
        let vs_local = s.comparison.iter().find(|c| {
            c.control == cell.control
                && cell
                    .setting("memory.policy")
                    .and_then(|p| p.parse::<PolicySpec>().ok())
                    .as_ref()
                    == Some(&c.policy)
                && c.settings == others
        });
        let local_difference = vs_local.and_then(|c| c.difference.as_ref());
        let vs_local = vs_local.map(|c| c.vs_local_percent).or_else(|| {
            let policy = cell.setting("memory.policy").and_then(|p| p.parse().ok());
            (policy == Some(PolicySpec::Local)).then_some(0.0)
        });
        let against_local = difference_columns(vs_local, local_difference);
        // Against the first value of the first axis, where the sweep
        // compares with that instead of local.
        let vs_baseline = s.differences.iter().find(|d| {
            !cell.control
                && cell.setting(&d.axis) == Some(d.value.as_str())
                && cell
                    .settings
                    .iter()
                    .filter(|(k, _)| k != &d.axis)
                    .eq(d.settings.iter())
        });
        let baseline_difference = vs_baseline.and_then(|d| d.difference.as_ref());
        let vs_baseline = vs_baseline.map(|d| d.percent).or_else(|| {
            let first = s.differences.first()?;
            (!cell.control && cell.setting(&first.axis) == Some(first.baseline.as_str()))
                .then_some(0.0)
        });
        let against_baseline = difference_columns(vs_baseline, baseline_difference);
        match cell.result.as_ref() {
            Some(r) => {
                let f = r.figures.as_ref();
                row.extend([
                    f.map_or(0, |f| f.time_to_last_s.n).to_string(),
                    opt(f.map(|f| f.time_to_last_s.median)),
                    opt(f.map(|f| f.time_to_last_s.min)),
                    opt(f.map(|f| f.time_to_last_s.max)),
                    opt(f.map(|f| f.time_to_last_s.cv)),
                    opt(f.map(|f| f.gb_per_s.median)),
                    opt(f.map(|f| f.mops_per_s.median)),
                    opt(f.and_then(|f| f.read_p50_ns.as_ref().map(|s| s.median))),
                    opt(f.and_then(|f| f.read_p99_ns.as_ref().map(|s| s.median))),
                    compared.to_owned(),
                ]);
                row.extend(against_local);
                row.extend(against_baseline);
                row.extend([
                    cell.control.to_string(),
                    r.placement_as_requested().to_string(),
                    r.interrupted.to_string(),
                    String::new(),
                ]);
            }
            None => {
                let (interrupted, error) = match &cell.error {
                    Some(error) => ("false", error.as_str()),
                    None => ("true", ""),
                };
                row.extend(["0", "", "", "", "", "", "", "", ""].map(String::from));
                row.push(compared.to_owned());
                row.extend(std::iter::repeat_n(String::new(), 4));
                row.extend(std::iter::repeat_n(String::new(), 4));
                row.push(cell.control.to_string());
                row.push(String::new());
                row.extend([interrupted.to_owned(), error.to_owned()]);
            }
        }
        csv.row(row);
    }
    csv.finish()
}

/// A difference's four columns: percent, interval's low and high ends
/// in percent, verdict; empty where there is none.
fn difference_columns(
    percent: Option<f64>,
    difference: Option<&numalab_bench::stats::Difference>,
) -> [String; 4] {
    [
        opt(percent),
        opt(difference.map(|d| d.low * 100.0)),
        opt(difference.map(|d| d.high * 100.0)),
        difference.map_or(String::new(), |d| verdict_word(d.verdict).into()),
    ]
}

/// Of a time: `slower`, `faster` or `same` (within noise).
fn verdict_word(verdict: numalab_bench::stats::Verdict) -> &'static str {
    use numalab_bench::stats::Verdict;
    match verdict {
        Verdict::Higher => "slower",
        Verdict::Lower => "faster",
        Verdict::Indistinguishable => "same",
    }
}
