//! Tables for people: a run's figures, threads and regions, a sweep's
//! cells and each policy's difference from `local` — on a terminal
//! (plain columns) or as Markdown. They read a saved result, never live
//! state.

use std::fmt::Write as _;

use numalab::units::count;
use numalab_bench::experiment::result::{Comparison, Figures, RunReport, SweepReport};
use numalab_bench::experiment::{Experiment, PolicySpec, Warning};
use numalab_bench::stats::Summary;

use crate::output;
pub use crate::render::Style;
use numalab::units::format_size;

/// Seconds with a unit that keeps three or four digits: `845 µs`,
/// `12.3 ms`, `1.234 s`.
pub fn time(seconds: f64) -> String {
    if seconds >= 1.0 {
        format!("{seconds:.3} s")
    } else if seconds >= 1e-3 {
        format!("{:.1} ms", seconds * 1e3)
    } else {
        format!("{:.0} µs", seconds * 1e6)
    }
}

/// A number with about three significant digits.
pub fn num(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn percent(fraction: f64) -> String {
    format!("{:.1}%", 100.0 * fraction)
}

/// One line describing what an experiment does.
pub fn describe(exp: &Experiment, regions: usize) -> String {
    let a = &exp.access;
    let amount = match (a.total_ops(), a.duration) {
        (Some(ops), _) => format!("{ops} ops"),
        (None, Some(d)) => format!("{d} per thread"),
        (None, None) => String::new(),
    };
    use numalab_bench::experiment::values::{PolicySpec, Replication, Sync};
    let replicated = matches!(exp.memory.policy, PolicySpec::Replicate(_));
    let sync = match (replicated, exp.memory.replication, a.sync) {
        (true, Replication::Broadcast | Replication::Log, _) => format!(
            ", through numalab::replicated ({} mode, its own locks)",
            exp.memory.replication
        ),
        (true, Replication::Copies, Sync::Rwlock) => format!(
            ", every write to all copies, under {} per copy",
            count(a.lock_stripes, "RW lock")
        ),
        (true, Replication::Copies, Sync::None) => ", every write to all copies, no locks".into(),
        (false, _, Sync::None) => String::new(),
        (false, _, Sync::Rwlock) => {
            format!(", under {} per region", count(a.lock_stripes, "RW lock"))
        }
    };
    format!(
        "{} ({}), {} x {} {} {}, {}, {} {} ops, R:W {}, {}{}; {} after {}",
        count(exp.threads.count, "thread"),
        exp.threads.placement,
        regions,
        format_size(exp.memory.size.0),
        exp.memory.sharing,
        if regions == 1 { "region" } else { "regions" },
        exp.memory.policy,
        a.pattern,
        format_size(a.op_size.0),
        a.mix(),
        amount,
        sync,
        count(exp.run.repeats, "repeat"),
        count(exp.run.warmup, "warm-up"),
    )
}

fn environment_line(env: &numalab::system::Environment) -> String {
    let balancing = match env.kernel.numa_balancing {
        Some(0) => "off".to_owned(),
        Some(1) => "on".to_owned(),
        Some(n) => n.to_string(),
        None => "-".to_owned(),
    };
    format!(
        "{} · Linux {} · {} · {}, {} · numa_balancing {} · THP {}",
        env.host.hostname,
        env.host.kernel,
        env.host.cpu_model.as_deref().unwrap_or("unknown CPU"),
        count(env.topology.nodes, "node"),
        count(env.topology.cpus, "CPU"),
        balancing,
        env.kernel.thp_enabled.as_deref().unwrap_or("-"),
    )
}

fn summary_row(name: &str, s: &Summary, fmt: &dyn Fn(f64) -> String) -> Vec<String> {
    vec![
        name.to_owned(),
        fmt(s.median),
        fmt(s.min),
        fmt(s.max),
        percent(s.cv),
    ]
}

fn figures_table(style: Style, f: &Figures) -> String {
    let mut table = style.table(
        ["figure", "median", "min", "max", "CV"]
            .map(String::from)
            .to_vec(),
    );
    table.add_row(summary_row("time to last thread", &f.time_to_last_s, &time));
    table.add_row(summary_row("GB/s", &f.gb_per_s, &num));
    table.add_row(summary_row("Mops/s", &f.mops_per_s, &num));
    let ns = |x: f64| format!("{x:.0} ns");
    for (name, s) in [
        ("read latency p50", &f.read_p50_ns),
        ("read latency p99", &f.read_p99_ns),
        ("write latency p50", &f.write_p50_ns),
        ("write latency p99", &f.write_p99_ns),
    ] {
        if let Some(s) = s {
            table.add_row(summary_row(name, s, &ns));
        }
    }
    for (name, s) in &f.counters {
        table.add_row(summary_row(&format!("{name} (all threads)"), s, &|x| {
            format!("{x:.0}")
        }));
    }
    style.render(&table)
}

/// When the threads kept fewer latency timings than they took (each
/// keeps a bounded, uniform sample), how many the percentiles are of.
fn latency_sample_note(r: &RunReport) -> Option<String> {
    let (mut kept, mut timed) = (0u64, 0u64);
    for p in r
        .repeats
        .iter()
        .flat_map(|rep| [rep.read_latency_ns, rep.write_latency_ns])
        .flatten()
    {
        kept += p.samples;
        timed += p.timed.max(p.samples);
    }
    (kept < timed).then(|| {
        format!(
            "latency percentiles are of {kept} timings kept of {timed} taken over the repeats (each thread keeps a uniform sample of at most {} of each kind)",
            numalab_bench::experiment::config::SAMPLES_PER_THREAD
        )
    })
}

fn warnings(style: Style, warnings: &[Warning]) -> String {
    warnings.iter().map(|w| style.warning(&w.message)).collect()
}

/// A run as tables.
pub fn run_report(r: &RunReport, style: Style) -> String {
    let mut out = String::new();
    out.push_str(&style.heading(&format!(
        "{}: {}",
        output::printable_field(&r.experiment.name),
        describe(&r.experiment, r.plan.regions.len())
    )));
    out.push_str(&style.line(&environment_line(&r.environment)));
    if style == Style::Plain {
        out.push('\n');
    }

    match &r.figures {
        Some(f) => out.push_str(&figures_table(style, f)),
        None => out.push_str(&style.line("no repeat completed")),
    }
    if let Some(note) = latency_sample_note(r) {
        out.push_str(&style.line(&note));
    }
    out.push('\n');

    let mut threads = style.table(
        [
            "thread", "cpu", "node", "region", "mem node", "ops", "busy", "CV", "Mops/s", "GB/s",
            "read p50", "read p99",
        ]
        .map(String::from)
        .to_vec(),
    );
    for t in &r.threads {
        threads.add_row(vec![
            t.thread.to_string(),
            t.cpu.to_string(),
            t.node.to_string(),
            t.region.to_string(),
            t.memory_nodes.clone(),
            format!("{:.0}", t.ops),
            time(t.busy_s.median),
            percent(t.busy_s.cv),
            num(t.mops_per_s),
            num(t.gb_per_s),
            t.read_p50_ns.map_or("-".into(), |x| format!("{x:.0} ns")),
            t.read_p99_ns.map_or("-".into(), |x| format!("{x:.0} ns")),
        ]);
    }
    out.push_str(&threads_heading(style));
    out.push_str(&style.render(&threads));
    out.push('\n');

    let mut regions = style.table(
        [
            "region",
            "size",
            "used from",
            "asked",
            "kernel policy",
            "pages found",
            "as asked",
        ]
        .map(String::from)
        .to_vec(),
    );
    let yes = |ok: bool| if ok { "yes" } else { "NO" }.to_owned();
    for c in &r.regions {
        if c.replicas.is_empty() {
            regions.add_row(vec![
                c.region.to_string(),
                format_size(c.bytes),
                c.thread_nodes.to_string(),
                c.requested.to_string(),
                c.policy.to_string(),
                c.audit.found.to_string(),
                yes(c.as_requested),
            ]);
        }
        // A replicated region: a row per copy, each checked on its node.
        for copy in &c.replicas {
            regions.add_row(vec![
                format!("{} copy {}", c.region, copy.replica),
                format_size(c.bytes),
                if copy.thread_nodes.is_empty() {
                    "-".to_owned()
                } else {
                    copy.thread_nodes.to_string()
                },
                c.requested.to_string(),
                copy.audit.policy.to_string(),
                copy.audit.found.to_string(),
                yes(copy.as_requested),
            ]);
        }
    }
    out.push_str(&style.render(&regions));
    out.push('\n');

    if !r.counters.events.is_empty() {
        out.push_str(&style.line(&format!(
            "counters read per thread: {}",
            r.counters.events.join(", ")
        )));
    }
    let e = &r.engine;
    let loop_cost = match (e.loop_ns_per_op, e.share) {
        (Some(l), Some(s)) => format!(
            "access loop {l:.1} ns/op in cache ({} of the time per op)",
            percent(s)
        ),
        (Some(l), None) => format!("access loop {l:.1} ns/op in cache"),
        _ => "access loop not measured (operations too large to run in cache)".to_owned(),
    };
    let sampling = if e.sample_every == 0 {
        "no operation timed".to_owned()
    } else {
        format!(
            "1 op in {} timed with the {} clock ({:.0} ns per reading pair, subtracted)",
            e.sample_every, e.clock, e.clock_overhead_ns
        )
    };
    out.push_str(&style.line(&format!("engine: {loop_cost}; {sampling}")));
    out.push_str(&warnings(style, &r.warnings));
    out
}

fn threads_heading(style: Style) -> String {
    match style {
        Style::Plain => {
            "per thread (medians over the repeats; busy = start to its last op):\n".to_owned()
        }
        Style::Markdown => {
            "Per thread (medians over the repeats; busy = start to its last op):\n\n".to_owned()
        }
    }
}

/// The cell table and its differences: against `local`, or against the
/// first value of the first axis.
pub fn sweep_report(s: &SweepReport, style: Style) -> String {
    let mut out = String::new();
    let axes: Vec<&str> = s.axes.iter().map(|(k, _)| k.as_str()).collect();
    out.push_str(&style.heading(&format!(
        "{} sweep: {} over {}",
        output::printable_field(&s.experiment.name),
        count(s.cells.len(), "cell"),
        axes.join(" x ")
    )));
    out.push_str(&style.line(&environment_line(&s.environment)));
    if style == Style::Plain {
        out.push('\n');
    }
    let mut header: Vec<String> = axes.iter().map(|a| a.to_string()).collect();
    header.extend(
        [
            "time to last",
            "CV",
            "GB/s",
            "Mops/s",
            "read p50",
            "placement",
        ]
        .map(String::from),
    );
    let mut table = style.table(header);
    for cell in &s.cells {
        let mut row: Vec<String> = cell
            .settings
            .iter()
            .map(|(k, v)| {
                if cell.control && k == "memory.policy" {
                    format!("{v} (A/A)")
                } else {
                    v.clone()
                }
            })
            .collect();
        match cell
            .result
            .as_ref()
            .and_then(|r| r.figures.as_ref().map(|f| (r, f)))
        {
            Some((r, f)) => row.extend([
                time(f.time_to_last_s.median),
                percent(f.time_to_last_s.cv),
                num(f.gb_per_s.median),
                num(f.mops_per_s.median),
                f.read_p50_ns
                    .as_ref()
                    .map_or("-".into(), |p| format!("{:.0} ns", p.median)),
                if r.placement_as_requested() {
                    "as asked".into()
                } else {
                    "NOT as asked".into()
                },
            ]),
            None if cell.error.is_some() => {
                row.extend(["failed (see below)", "", "", "", "", ""].map(String::from))
            }
            None => row.extend(["not run", "", "", "", "", ""].map(String::from)),
        }
        table.add_row(row);
    }
    out.push_str(&style.render(&table));
    out.push('\n');
    if !s.comparison.is_empty() {
        out.push_str(&comparison_table(style, s));
        out.push('\n');
    }
    if !s.differences.is_empty() {
        out.push_str(&differences_table(style, s));
        out.push('\n');
    }
    if let Some(line) = looks_line(s) {
        out.push_str(&style.line(&line));
        out.push('\n');
    }
    out.push_str(&warnings(style, &s.warnings));
    out
}

/// `+69%` / `-37%`.
pub fn signed_percent(p: f64) -> String {
    if p.round() == 0.0 {
        // Neither "+0%" nor "-0%".
        return "0%".into();
    }
    format!("{p:+.0}%")
}

/// Rows: the other axes; columns: each policy against local.
fn comparison_table(style: Style, s: &SweepReport) -> String {
    // The swept policies as written, each with its parsed form.
    let policies: Vec<(String, Option<PolicySpec>)> = s
        .axes
        .iter()
        .find(|(k, _)| k == "memory.policy")
        .map(|(_, v)| v.iter().map(|p| (p.clone(), p.parse().ok())).collect())
        .unwrap_or_default();
    let policies: Vec<(String, Option<PolicySpec>)> = policies
        .into_iter()
        .filter(|(_, p)| *p != Some(PolicySpec::Local))
        .collect();
    let controlled = s.comparison.iter().any(|c| c.control);
    let mut keys: Vec<Vec<(String, String)>> = Vec::new();
    for c in &s.comparison {
        if !keys.contains(&c.settings) {
            keys.push(c.settings.clone());
        }
    }
    let other_axes: Vec<String> = keys
        .first()
        .map(|k| k.iter().map(|(a, _)| a.clone()).collect())
        .unwrap_or_default();
    let mut header = other_axes.clone();
    header.push("local".into());
    if controlled {
        header.push("local again (A/A)".into());
    }
    header.extend(policies.iter().map(|(text, _)| text.clone()));
    let mut table = style.table(header);
    for key in &keys {
        let mut row: Vec<String> = key.iter().map(|(_, v)| v.clone()).collect();
        let find = |p: &Option<PolicySpec>| -> Option<&Comparison> {
            s.comparison
                .iter()
                .find(|c| &c.settings == key && Some(&c.policy) == p.as_ref() && !c.control)
        };
        row.push(
            s.comparison
                .iter()
                .find(|c| &c.settings == key)
                .map_or("-".into(), |c| time(c.local_s)),
        );
        if controlled {
            let again = s
                .comparison
                .iter()
                .find(|c| &c.settings == key && c.control);
            row.push(again.map_or("-".into(), against_local));
        }
        for (_, p) in &policies {
            row.push(find(p).map_or("-".into(), against_local));
        }
        table.add_row(row);
    }
    let compared = s.comparison.first().map(|c| c.compared).unwrap_or_default();
    let mut out = style.line(&format!(
        "{} against local (+69% = 69% slower than local):",
        compared.what()
    ));
    out.push_str(&style.render(&table));
    if matches!(style, Style::Markdown) {
        // A paragraph right under a Markdown table would join it.
        out.push('\n');
    }
    out.push_str(&style.line(INTERVALS));
    if let Some(line) = noise_floor(s) {
        out.push_str(&style.line(&line));
    }
    out
}

/// How far a sweep that could look at its differences more than once
/// (`run.max_repeats`) went, and why it stopped.
fn looks_line(s: &SweepReport) -> Option<String> {
    use numalab_bench::experiment::result::Stopped;
    let looks = s.looks?;
    let most = looks.planned * looks.every;
    let ran = looks.taken * looks.every;
    let why = match looks.stopped {
        Stopped::Decided => format!("every difference was told apart after {ran} repeats per cell"),
        Stopped::MostRepeats => format!(
            "{ran} repeats per cell (run.max_repeats) left some difference ≈: smaller than this machine can tell in that many"
        ),
        Stopped::Interrupted => format!("interrupted after {ran} repeats per cell"),
    };
    Some(format!(
        "looked at the differences every {} repeats, up to {} times ({most} repeats): {why}; the intervals are repeated intervals for {} looks (Pocock's boundary), so they hold at 95% wherever the sweep stopped",
        looks.every, looks.planned, looks.planned
    ))
}

/// How the differences tables' intervals were made.
const INTERVALS: &str =
    "[low, high]: intervals that hold together at 95% (Welch's t on the repeats' logarithms, \
     Bonferroni over the table); ≈ within noise (the interval holds 0); ? one repeat, no interval";

/// Rows: the other axes; columns: each value of the first axis against
/// its first value.
fn differences_table(style: Style, s: &SweepReport) -> String {
    let Some(first) = s.differences.first() else {
        return String::new();
    };
    let (axis, baseline) = (&first.axis, &first.baseline);
    let values: Vec<&String> = s
        .axes
        .iter()
        .find(|(k, _)| k == axis)
        .map(|(_, v)| v.iter().filter(|v| *v != baseline).collect())
        .unwrap_or_default();
    let mut keys: Vec<&Vec<(String, String)>> = Vec::new();
    for d in &s.differences {
        if !keys.contains(&&d.settings) {
            keys.push(&d.settings);
        }
    }
    let mut header: Vec<String> = first.settings.iter().map(|(a, _)| a.clone()).collect();
    header.push(baseline.clone());
    header.extend(values.iter().map(|v| v.to_string()));
    let mut table = style.table(header);
    for key in keys {
        let mut row: Vec<String> = key.iter().map(|(_, v)| v.clone()).collect();
        let line = |value: &str| {
            s.differences
                .iter()
                .find(|d| &d.settings == key && d.value == value)
        };
        row.push(
            s.differences
                .iter()
                .find(|d| &d.settings == key)
                .map_or("-".into(), |d| time(d.baseline_s)),
        );
        for value in &values {
            row.push(line(value).map_or("-".into(), |d| {
                with_interval(d.percent, d.difference.as_ref())
            }));
        }
        table.add_row(row);
    }
    let compared = s
        .differences
        .first()
        .map(|d| d.compared)
        .unwrap_or_default();
    let mut out = style.line(&format!(
        "{} against {axis} = {baseline} (+10% = 10% slower):",
        compared.what()
    ));
    out.push_str(&style.render(&table));
    if matches!(style, Style::Markdown) {
        out.push('\n');
    }
    out.push_str(&style.line(INTERVALS));
    out
}

/// What the A/A controls say: the widest half of their intervals, as
/// the smallest difference this run could tell; and whether local
/// differed from itself (a noisy or drifting machine).
fn noise_floor(s: &SweepReport) -> Option<String> {
    use numalab_bench::stats::Verdict;
    let controls: Vec<&Comparison> = s.comparison.iter().filter(|c| c.control).collect();
    if controls.is_empty() {
        return None;
    }
    let intervals: Vec<_> = controls
        .iter()
        .filter_map(|c| c.difference.as_ref())
        .collect();
    if intervals.is_empty() {
        return Some(
            "A/A control: one repeat per cell gives no interval; run at least 2 repeats (run.repeats) to see the noise floor".into(),
        );
    }
    let floor = intervals
        .iter()
        .map(|d| d.low.abs().max(d.high.abs()))
        .fold(0.0, f64::max);
    let apart = intervals
        .iter()
        .filter(|d| d.verdict != Verdict::Indistinguishable)
        .count();
    let mut line = format!(
        "A/A control: local measured twice; differences under about {:.0}% cannot be told apart here (more repeats narrow it: run.repeats)",
        100.0 * floor
    );
    if apart > 0 {
        let _ = write!(
            line,
            "; in {apart} of {} local differed from itself beyond its interval: the machine drifted or is busy, so trust no difference near that size",
            count(intervals.len(), "row")
        );
    }
    Some(line)
}

/// `+69% [+60, +78]`, `≈ +11% [-3, +27]` or `+11% ?`.
pub fn against_local(c: &Comparison) -> String {
    with_interval(c.vs_local_percent, c.difference.as_ref())
}

/// A difference in percent with its interval and verdict, as
/// [`against_local`].
fn with_interval(percent: f64, difference: Option<&numalab_bench::stats::Difference>) -> String {
    use numalab_bench::stats::Verdict;
    match difference {
        None => format!("{} ?", signed_percent(percent)),
        Some(d) => {
            let interval = format!(
                "[{}, {}]",
                signed_number(d.low * 100.0),
                signed_number(d.high * 100.0)
            );
            match d.verdict {
                Verdict::Indistinguishable => {
                    format!("≈ {} {interval}", signed_percent(percent))
                }
                Verdict::Higher | Verdict::Lower => {
                    format!("{} {interval}", signed_percent(percent))
                }
            }
        }
    }
}

/// `+60` / `-3` / `0`.
fn signed_number(p: f64) -> String {
    let rounded = p.round();
    if rounded == 0.0 {
        "0".into()
    } else {
        format!("{rounded:+.0}")
    }
}

/// What numalab prints after the table: the files it wrote.
pub fn wrote(paths: &[std::path::PathBuf]) -> String {
    let mut out = String::from("wrote");
    for (i, p) in paths.iter().enumerate() {
        let path = output::printable_field(&p.display().to_string()).into_owned();
        let _ = write!(out, "{} {path}", if i == 0 { "" } else { "," });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::fixtures;
    use super::*;

    #[test]
    fn the_table_says_when_latency_percentiles_are_of_a_sample() {
        let mut r = fixtures::run("[access]\nread_write = \"2:1\"\nops = 100_000\n");
        assert_eq!(latency_sample_note(&r), None, "every timing kept");
        for repeat in &mut r.repeats {
            if let Some(p) = &mut repeat.read_latency_ns {
                (p.samples, p.timed) = (1000, 5000);
            }
        }
        let note = latency_sample_note(&r).unwrap();
        let kept = 1000 * r.repeats.len();
        assert!(
            note.starts_with(&format!(
                "latency percentiles are of {kept} timings kept of {} taken",
                5 * kept
            )),
            "{note}"
        );
        assert!(run_report(&r, Style::Plain).contains(&note));
    }
}
