//! `numalab fleet` for people: the groups of hosts and what sets each
//! apart, the figures flagged, each judged group's figures as box-plot
//! numbers, and the files left out; its CSV (one row per group and cell);
//! a self-contained HTML page with a box plot per cell drawn as inline
//! SVG; and the Slurm batch script `--sbatch` prints.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use numalab::units::count;
use numalab_bench::fleet::{CellSummary, FleetReport, Group, Outlier, MIN_HOSTS};

use super::{escape_html as escape, Render, Style};
use crate::output::{self, Csv};

impl Render for FleetReport {
    fn text(&self, style: Style) -> String {
        text(self, style)
    }

    fn csv(&self) -> String {
        csv(self)
    }
}

/// Host names of `group`, at most `most`, then how many more, for a cell
/// in `style`.
fn host_names(report: &FleetReport, group: usize, most: usize, style: Style) -> String {
    let names: Vec<String> = report
        .hosts
        .iter()
        .filter(|h| h.group == group)
        .map(|h| style.field(&h.host))
        .take(most)
        .collect();
    let count = report.groups.get(group - 1).map_or(0, |g| g.hosts);
    and_more(&names, count)
}

/// A figure with three significant digits or so.
fn figure(value: f64) -> String {
    super::experiment::text::num(value)
}

fn cpus_per_node(group: &Group) -> String {
    let counts: Vec<String> = group
        .fingerprint
        .nodes
        .iter()
        .map(|n| {
            if n.allowed_cpus == n.cpus {
                n.cpus.to_string()
            } else {
                format!("{} ({} allowed)", n.cpus, n.allowed_cpus)
            }
        })
        .collect();
    counts.join("+")
}

/// When the hosts were measured by more than one numalab build: which
/// build measured which hosts (a figure may differ by the build, not the
/// machine).
fn builds_line(report: &FleetReport) -> Option<String> {
    let mut builds: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for host in &report.hosts {
        let build = host
            .numalab_version
            .as_deref()
            .unwrap_or("an unnamed build");
        builds.entry(build).or_default().push(&host.host);
    }
    if builds.len() < 2 {
        return None;
    }
    let each: Vec<String> = builds
        .iter()
        .map(|(build, hosts)| {
            let names: Vec<String> = hosts
                .iter()
                .take(3)
                .map(|h| output::printable_field(h).into_owned())
                .collect();
            let more = if hosts.len() > 3 { ", …" } else { "" };
            format!(
                "{build} ({}: {}{more})",
                count(hosts.len(), "host"),
                names.join(", ")
            )
        })
        .collect();
    Some(format!(
        "Measured by {} numalab builds: {}. A figure that differs between builds may differ by the build, not the machine.",
        builds.len(),
        each.join("; ")
    ))
}

/// The fleet in one sentence: hosts, files, groups, flagged figures and
/// what was left out.
fn summary_line(report: &FleetReport) -> String {
    let left_out = report.left_out.len();
    let missing = match report.expected {
        Some(expected) => format!(
            "; {} of the {expected} expected without a report",
            count(report.missing.len(), "host")
        ),
        None => String::new(),
    };
    format!(
        "{} from {}, in {} of one fingerprint; {} flagged; {} or {} left out{missing}.",
        count(report.hosts.len(), "host"),
        count(report.files, "file"),
        count(report.groups.len(), "group"),
        count(report.outliers.len(), "figure"),
        count(left_out, "file"),
        if left_out == 1 {
            "directory"
        } else {
            "directories"
        }
    )
}

fn text(report: &FleetReport, style: Style) -> String {
    let markdown = style == Style::Markdown;
    let heading = |title: &str| style.section(title);
    let unknown = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".into());
    let mut out = String::new();
    out.push_str(&style.line(&summary_line(report)));

    if let Some(line) = builds_line(report) {
        out.push_str(&style.line(&line));
    }

    out.push_str(&heading("Groups (hosts of one fingerprint, largest first)"));
    let mut table = style.table(vec![
        "group",
        "hosts",
        "CPU",
        "packages",
        "CPUs per node",
        "memory per node",
        "HMAT",
        "kernel",
        "THP",
        "balancing",
    ]);
    for group in &report.groups {
        let f = &group.fingerprint;
        table.add_row(vec![
            group.id.to_string(),
            group.hosts.to_string(),
            unknown(&f.cpu_model),
            f.packages.to_string(),
            cpus_per_node(group),
            f.memory_summary(),
            if f.hmat { "yes" } else { "no" }.to_string(),
            unknown(&f.kernel),
            unknown(&f.thp),
            numalab_bench::host::fingerprint::balancing_word(f.numa_balancing).into_owned(),
        ]);
    }
    out.push_str(&style.render(&table));
    if markdown {
        out.push('\n');
    }
    for group in report.groups.iter().skip(1) {
        let _ = writeln!(
            out,
            "- group {} ({}): against group {}: {}",
            group.id,
            host_names(report, group.id, 5, style),
            group.compared_with.unwrap_or(1),
            group.differences.join("; ")
        );
    }
    for group in report.groups.iter().filter(|g| !g.judged) {
        let _ = writeln!(
            out,
            "- group {}: {}, too few to judge ({MIN_HOSTS} needed)",
            group.id,
            count(group.hosts, "host")
        );
    }

    out.push_str(&heading("Flagged figures"));
    out.push_str(&style.line(&format!("Rule: {}.", report.rule)));
    if report.outliers.is_empty() {
        out.push_str(&style.line("No figure is outside its group's range."));
    } else {
        let mut table = style.table(vec![
            "host",
            "group",
            "cell",
            "figure",
            "group median",
            "ratio",
            "limit",
        ]);
        for o in &report.outliers {
            let unit = o.cell.metric.unit();
            table.add_row(vec![
                style.field(&o.host),
                o.group.to_string(),
                o.cell.to_string(),
                format!("{} {unit}", figure(o.value)),
                format!("{} {unit}", figure(o.median)),
                format!("{:.2}", o.ratio),
                format!("{} {unit}", figure(o.limit)),
            ]);
        }
        out.push_str(&style.render(&table));
    }

    for group in report.groups.iter().filter(|g| g.judged) {
        out.push_str(&heading(&format!(
            "Group {}: each cell across its {} hosts",
            group.id, group.hosts
        )));
        let mut table = style.table(vec![
            "cell", "unit", "hosts", "min", "q1", "median", "q3", "max", "limit", "flagged",
        ]);
        for cell in &group.cells {
            let flagged = report
                .outliers
                .iter()
                .filter(|o| o.group == group.id && o.cell == cell.cell)
                .count();
            table.add_row(vec![
                cell.cell.to_string(),
                cell.unit.clone(),
                cell.hosts.to_string(),
                figure(cell.min),
                figure(cell.q1),
                figure(cell.median),
                figure(cell.q3),
                figure(cell.max),
                cell.limit.map_or("-".into(), figure),
                flagged.to_string(),
            ]);
        }
        out.push_str(&style.render(&table));
    }

    if !report.missing.is_empty() {
        out.push_str(&heading("Expected, no report"));
        let names: Vec<String> = report.missing.iter().map(|n| style.field(n)).collect();
        out.push_str(&style.line(&some_names(&names, 200)));
    }

    if !report.left_out.is_empty() {
        out.push_str(&heading("Left out"));
        for left in &report.left_out {
            let _ = writeln!(out, "- {left}");
        }
    }
    out
}

/// One row per group and cell: the box-plot numbers, the limit and the
/// hosts flagged.
fn csv(report: &FleetReport) -> String {
    let mut csv = Csv::new(&[
        "group",
        "cell",
        "metric",
        "initiator",
        "target",
        "unit",
        "hosts",
        "min",
        "q1",
        "median",
        "q3",
        "max",
        "limit",
        "flagged_hosts",
    ]);
    for group in &report.groups {
        for cell in &group.cells {
            let flagged: Vec<&str> = report
                .outliers
                .iter()
                .filter(|o| o.group == group.id && o.cell == cell.cell)
                .map(|o| o.host.as_str())
                .collect();
            csv.row([
                group.id.to_string(),
                cell.cell.to_string(),
                cell.cell.metric.name().to_string(),
                cell.cell.initiator.to_string(),
                cell.cell.target.to_string(),
                cell.unit.clone(),
                cell.hosts.to_string(),
                cell.min.to_string(),
                cell.q1.to_string(),
                cell.median.to_string(),
                cell.q3.to_string(),
                cell.max.to_string(),
                cell.limit.map_or(String::new(), |l| l.to_string()),
                flagged.join(" "),
            ]);
        }
    }
    csv.finish()
}

/// Box plot width and height, px.
const PLOT: (f64, f64) = (320.0, 36.0);

/// One cell's box plot, drawn by hand as inline SVG: the whiskers from
/// min to max, the box from q1 to q3, the median, the limit (dashed) and
/// each flagged host (a dot, named in its tooltip).
fn box_plot(cell: &CellSummary, flagged: &[&Outlier]) -> String {
    let (width, height) = PLOT;
    let mut low = cell.min;
    let mut high = cell.max;
    if let Some(limit) = cell.limit {
        low = low.min(limit);
        high = high.max(limit);
    }
    let span = if high > low {
        high - low
    } else {
        high.abs().max(1.0)
    };
    let (low, high) = (low - 0.05 * span, high + 0.05 * span);
    let x = |v: f64| 4.0 + (v - low) / (high - low) * (width - 8.0);
    let mid = height / 2.0;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{} box plot">"#,
        escape(&cell.cell.to_string())
    );
    let _ = write!(
        svg,
        r##"<line x1="{:.1}" y1="{mid}" x2="{:.1}" y2="{mid}" stroke="#555"/><line x1="{:.1}" y1="{}" x2="{:.1}" y2="{}" stroke="#555"/><line x1="{:.1}" y1="{}" x2="{:.1}" y2="{}" stroke="#555"/>"##,
        x(cell.min),
        x(cell.max),
        x(cell.min),
        mid - 5.0,
        x(cell.min),
        mid + 5.0,
        x(cell.max),
        mid - 5.0,
        x(cell.max),
        mid + 5.0,
    );
    let _ = write!(
        svg,
        r##"<rect x="{:.1}" y="{}" width="{:.1}" height="{}" fill="#cfe0f3" stroke="#2b5d8a"/><line x1="{:.1}" y1="{}" x2="{:.1}" y2="{}" stroke="#2b5d8a" stroke-width="2"/>"##,
        x(cell.q1),
        mid - 8.0,
        (x(cell.q3) - x(cell.q1)).max(1.0),
        16.0,
        x(cell.median),
        mid - 8.0,
        x(cell.median),
        mid + 8.0,
    );
    if let Some(limit) = cell.limit {
        let _ = write!(
            svg,
            r##"<line x1="{:.1}" y1="1" x2="{:.1}" y2="{}" stroke="#c0392b" stroke-dasharray="3,2"><title>limit {}</title></line>"##,
            x(limit),
            x(limit),
            height - 1.0,
            figure(limit)
        );
    }
    for o in flagged {
        let _ = write!(
            svg,
            r##"<circle cx="{:.1}" cy="{mid}" r="3.5" fill="#c0392b"><title>{}: {} {}</title></circle>"##,
            x(o.value),
            escape(&o.host),
            figure(o.value),
            o.cell.metric.unit()
        );
    }
    svg.push_str("</svg>");
    svg
}

/// The fleet as one self-contained HTML page: the groups, the figures
/// flagged, a table per group with a box plot per cell, the files left
/// out. No script, no external resource.
///
/// `pages` maps a host to its own report page (a link relative to this
/// page): the drill-down for the hosts that stand out.
pub fn html_page(report: &FleetReport, pages: &BTreeMap<String, String>) -> String {
    let mut page = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>numalab fleet</title>\n<style>\n\
         :root { color-scheme: light dark; --fg: #222; --bg: #fff; --rule: #ddd; --bad: #c0392b; }\n\
         @media (prefers-color-scheme: dark) { :root { --fg: #e4e6ea; --bg: #15171b; --rule: #3a3f48; --bad: #ff7b7b; } }\n\
         html, body { background: var(--bg); color: var(--fg); }\n\
         body { font-family: sans-serif; margin: 0 auto; padding: 1em; max-width: 1200px; overflow-wrap: anywhere; }\n\
         .scroll { overflow-x: auto; max-width: 100%; }\n\
         table { border-collapse: collapse; margin: 0.5em 0 1.5em; }\n\
         th, td { border-bottom: 1px solid var(--rule); padding: 0.2em 0.6em; text-align: left; white-space: nowrap; }\n\
         td.n { text-align: right; font-variant-numeric: tabular-nums; }\n\
         .flagged { color: var(--bad); font-weight: bold; }\n\
         a { color: inherit; }\n\
         svg { vertical-align: middle; background: #fff; }\n\
         @media print { .scroll { overflow: visible; } }\n\
         </style>\n</head>\n<body>\n<h1>numalab fleet</h1>\n",
    );
    let host = |name: &str| match pages.get(name) {
        Some(href) => format!("<a href=\"{}\">{}</a>", escape(href), escape(name)),
        None => escape(name),
    };
    let _ = writeln!(
        page,
        "<p>{}</p>\n<p>Rule: {}.</p>",
        summary_line(report),
        escape(&report.rule)
    );
    page.push_str("<h2>Groups</h2>\n<div class=\"scroll\"><table>\n<tr><th>group</th><th>hosts</th><th>CPU</th><th>packages</th><th>CPUs per node</th><th>memory per node</th><th>HMAT</th><th>kernel</th><th>THP</th><th>balancing</th><th>differs from the nearest larger group</th></tr>\n");
    let unknown = |v: &Option<String>| escape(v.as_deref().unwrap_or("unknown"));
    for group in &report.groups {
        let f = &group.fingerprint;
        let _ = writeln!(
            page,
            "<tr><td class=\"n\">{}</td><td class=\"n\" title=\"{}\">{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            group.id,
            escape(&host_names(report, group.id, 20, Style::Plain)),
            group.hosts,
            unknown(&f.cpu_model),
            f.packages,
            escape(&cpus_per_node(group)),
            escape(&f.memory_summary()),
            if f.hmat { "yes" } else { "no" },
            unknown(&f.kernel),
            unknown(&f.thp),
            numalab_bench::host::fingerprint::balancing_word(f.numa_balancing).into_owned(),
            group.compared_with.map_or(String::new(), |g| format!(
                "group {g}: {}",
                escape(&group.differences.join("; "))
            ))
        );
    }
    page.push_str("</table></div>\n<h2>Flagged figures</h2>\n");
    if report.outliers.is_empty() {
        page.push_str("<p>No figure is outside its group's range.</p>\n");
    } else {
        page.push_str("<div class=\"scroll\"><table>\n<tr><th>host</th><th>group</th><th>cell</th><th>figure</th><th>group median</th><th>ratio</th><th>limit</th></tr>\n");
        for o in &report.outliers {
            let unit = o.cell.metric.unit();
            let _ = writeln!(
                page,
                "<tr><td class=\"flagged\">{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{} {unit}</td><td class=\"n\">{} {unit}</td><td class=\"n\">{:.2}</td><td class=\"n\">{} {unit}</td></tr>",
                host(&o.host),
                o.group,
                o.cell,
                figure(o.value),
                figure(o.median),
                o.ratio,
                figure(o.limit)
            );
        }
        page.push_str("</table></div>\n");
    }
    for group in &report.groups {
        let _ = writeln!(
            page,
            "<h2>Group {} ({}{})</h2>",
            group.id,
            count(group.hosts, "host"),
            if group.judged {
                String::new()
            } else {
                format!(", too few to judge: {MIN_HOSTS} needed")
            }
        );
        page.push_str("<div class=\"scroll\"><table>\n<tr><th>cell</th><th>hosts</th><th>min</th><th>q1</th><th>median</th><th>q3</th><th>max</th><th>limit</th><th>box plot (whiskers min to max, box q1 to q3, dashed: limit, dots: flagged)</th></tr>\n");
        for cell in &group.cells {
            let flagged: Vec<&Outlier> = report
                .outliers
                .iter()
                .filter(|o| o.group == group.id && o.cell == cell.cell)
                .collect();
            let unit = &cell.unit;
            let _ = writeln!(
                page,
                "<tr><td>{} ({unit})</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
                cell.cell,
                cell.hosts,
                figure(cell.min),
                figure(cell.q1),
                figure(cell.median),
                figure(cell.q3),
                figure(cell.max),
                cell.limit.map_or("-".into(), figure),
                box_plot(cell, &flagged)
            );
        }
        page.push_str("</table></div>\n");
    }
    if !pages.is_empty() {
        page.push_str("<h2>Hosts that stand out, each with its own report</h2>\n<ul>\n");
        for entry in report.hosts.iter().filter(|h| pages.contains_key(&h.host)) {
            let _ = writeln!(
                page,
                "<li>{} (group {}, {} flagged)</li>",
                host(&entry.host),
                entry.group,
                count(entry.outliers, "figure")
            );
        }
        page.push_str("</ul>\n");
    }
    if !report.missing.is_empty() {
        let _ = writeln!(
            page,
            "<h2>Expected, no report</h2>\n<p>{}</p>",
            escape(&some_names(&report.missing, 200))
        );
    }
    if !report.left_out.is_empty() {
        page.push_str("<h2>Left out</h2>\n<ul>\n");
        for left in &report.left_out {
            let _ = writeln!(page, "<li>{}</li>", escape(&left.to_string()));
        }
        page.push_str("</ul>\n");
    }
    page.push_str("</body>\n</html>\n");
    page
}

/// `text` as one shell word, single-quoted.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// What `numalab fleet --sbatch` writes into its batch script.
pub struct SbatchScript<'a> {
    /// This numalab, as every node runs it.
    pub numalab: &'a Path,
    /// Where the job's directory of reports goes.
    pub out_dir: &'a Path,
    /// The merge's `--threshold`.
    pub threshold: f64,
    /// The merge's `--max-groups`.
    pub max_groups: usize,
    /// Whether each node runs `numalab report --quick`.
    pub quick: bool,
}

/// The Slurm batch script `numalab fleet --sbatch` prints: a report from
/// every node of the job into a directory of the job's own, then the
/// merge, told which nodes to expect, with `--fail-on-outliers` so the
/// job fails when a host is flagged or a node sent nothing.
pub fn sbatch_script(script: &SbatchScript<'_>) -> String {
    let quick = if script.quick { " --quick" } else { "" };
    let numalab = shell_quote(&script.numalab.display().to_string());
    // A directory named like an option (`--out-dir=--html=x`) is written
    // ./--html=x, so mkdir, srun and fleet read it as a path.
    let mut out_dir = script.out_dir.display().to_string();
    if out_dir.starts_with('-') {
        out_dir.insert_str(0, "./");
    }
    let out_dir = shell_quote(&out_dir);
    let (threshold, max_groups) = (script.threshold, script.max_groups);
    format!(
        r#"#!/bin/bash
# numalab fleet: `numalab report` on every node of the job, then the merge.
# Printed by `numalab fleet --sbatch`, not submitted. Submit it with
#   sbatch --nodes=N [--partition=P] numalab-fleet.sbatch
# from a directory every node shares (the reports are written there).
#SBATCH --job-name=numalab-fleet
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --time=00:30:00
#SBATCH --output=numalab-fleet-%j.out
# A node that fails does not end the job: the others' reports are merged,
# and the lost node is named.
#SBATCH --no-kill
set -uo pipefail

numalab={numalab}
# This job's reports, apart from any other job's: a node that writes
# nothing this time cannot be stood in for by its report of last week.
job_dir={out_dir}/"${{SLURM_JOB_ID:-local}}"
mkdir -p "$job_dir" || exit 1

# One task per node, each writing "$job_dir/<hostname>.json" (atomically):
# host, machine fingerprint, the task's Slurm identity, and the figures.
srun --ntasks-per-node=1 --kill-on-bad-exit=0 --no-kill \
    "$numalab" report{quick} --json --out-dir "$job_dir"
measured=$?
if [ "$measured" -ne 0 ]; then
    echo "numalab-fleet: srun exited $measured: some nodes wrote no report; merging those written" >&2
fi

# The merge, once every node is done: groups by fingerprint, flags figures
# outside their group's range, names each node of the job without a
# report, and exits 1 for any of it. The table goes to this job's output,
# the page beside it.
# (Or merge in a job of its own once this one has ended well:
#   sbatch --dependency=afterok:$SLURM_JOB_ID --wrap "$numalab fleet $job_dir --fail-on-outliers")
"$numalab" fleet "$job_dir" --expect "${{SLURM_JOB_NODELIST:-$(hostname -s)}}" \
    --threshold {threshold} --fail-on-outliers --max-groups {max_groups} \
    --html "numalab-fleet-${{SLURM_JOB_ID:-local}}.html"
"#
    )
}

/// The first `most` of `names`, then how many more.
pub fn some_names(names: &[String], most: usize) -> String {
    and_more(&names[..names.len().min(most)], names.len())
}

/// `shown`, the first of `total` names, then how many more there are.
fn and_more(shown: &[String], total: usize) -> String {
    match total.saturating_sub(shown.len()) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_out_dir_named_like_an_option_is_written_as_a_path() {
        let script = sbatch_script(&SbatchScript {
            numalab: Path::new("/usr/bin/numalab"),
            out_dir: Path::new("--html=x"),
            threshold: 0.5,
            max_groups: 1,
            quick: false,
        });
        assert!(
            script.contains(r#"job_dir='./--html=x'/"${SLURM_JOB_ID:-local}""#),
            "{script}"
        );
        assert!(!script.contains("'--html"), "{script}");
    }
    use super::*;

    #[test]
    fn shell_words_survive_quotes() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn html_text_is_escaped() {
        assert_eq!(
            escape("<a href='x'>&\x1b"),
            "&lt;a href=&#39;x&#39;&gt;&amp;\\x1b"
        );
    }
}
