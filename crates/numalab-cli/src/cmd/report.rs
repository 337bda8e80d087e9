//! `numalab report`: the main job on a machine. What the machine is
//! (`topo`), what NUMA costs on it (`matrix`: latency and bandwidth from
//! every CPU node to every memory node, beside the firmware's claims),
//! what placement costs a workload (`sweep`: random operations from 1 to
//! a node's worth of threads under local, remote and interleaved memory),
//! and a few sentences saying what it all means. As a table on the
//! terminal, a JSON document, or one self-contained HTML page with the
//! figures inside.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use clap::Args;
use numalab::Topology;
use numalab_bench::experiment::sweep::{plan_sweep, run_sweep};
use numalab_bench::experiment::{Control, Experiment, SweepResult};
use numalab_bench::matrix::{self, MatrixConfig, MatrixResult, NodeSelection, Shape};
use serde::Serialize;

use super::topo::{self, TopoArgs};
use crate::exp::text::Style;
use crate::exp::{self, figures, ProgressDisplay};
use crate::output::{self, Format, OutputArgs};
use crate::render::Render;
use numalab_bench::topo::TopoReport;

/// Report on this machine: topology, node-to-node latency and bandwidth
/// beside the firmware's values, what memory placement costs a workload,
/// and what that means
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    numalab report                      tables on the terminal (about half a minute)\n  \
    numalab report -o report.html       one HTML page with the figures inside\n  \
    numalab report --html report.html   the tables here, and the page too\n  \
    numalab report --json -o r.json     everything measured, for merging results of many machines\n  \
    numalab report --quick              seconds: small working sets, fewer operations")]
pub struct ReportArgs {
    /// Small working sets and fewer operations: seconds instead of a
    /// minute, less precise
    #[arg(long)]
    pub quick: bool,

    /// Write the report to FILE: .html gives one page with the figures
    /// inside; otherwise as --json/--csv/--markdown or the extension say
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Also write the report as one self-contained HTML page to FILE
    /// (while printing the tables as usual)
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,

    /// Print JSON (schema numalab.report) instead of tables
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,

    /// Print Markdown
    #[arg(long)]
    pub markdown: bool,
}

/// The `numalab.report` JSON document.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The machine.
    pub topology: TopoReport,
    /// Latency and bandwidth between nodes.
    pub matrix: MatrixResult,
    /// The policy sweep.
    pub sweep: SweepResult,
    /// What the figures mean, one sentence each.
    pub findings: Vec<String>,
}

/// Schema version of `numalab.report`.
pub const SCHEMA_VERSION: u32 = 1;

/// The workload of the policy sweep: the slide deck's simulator with
/// cache-line-sized random operations, 2 reads to 1 write, over regions
/// far larger than any last-level cache.
const POLICY_SWEEP: &str = r#"
name = "report-policies"
description = "random 64-byte operations, 2 reads to 1 write, one region per node, time to last thread"

[threads]
count = 1
placement = "balanced"

[memory]
size = "256MiB"
policy = "local"
sharing = "per-node"
huge_pages = "thp"

[access]
pattern = "random"
op_size = 64
read_write = "2:1"
ops = 4_000_000

[run]
repeats = 3
warmup = 1
"#;

/// The sweep's experiment for this machine: thread counts from one to a
/// node's CPUs; `remote` and `interleave` only where there is another node
/// with memory to be remote from.
fn policy_sweep(topology: &Topology, quick: bool) -> Result<Experiment> {
    let per_node = topology
        .nodes
        .iter()
        .filter(|n| topology.allowed_nodes.contains(n.id))
        .map(|n| n.cpus.intersection(&topology.allowed_cpus).len())
        .max()
        .unwrap_or(1)
        .max(1);
    let mut threads = vec![1];
    let mut t = 2;
    while t < per_node {
        threads.push(t);
        t *= 2;
    }
    if per_node > 1 {
        threads.push(per_node);
    }
    let policies = if topology.nodes_with_memory().len() > 1 {
        r#"["local", "remote", "interleave"]"#
    } else {
        r#"["local"]"#
    };
    let list = threads
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let text = format!(
        "{POLICY_SWEEP}\n[sweep]\n\"threads.count\" = [{list}]\n\"memory.policy\" = {policies}\n"
    );
    let experiment = Experiment::from_toml_str(&text, "numalab report's policy sweep")?;
    let mut sets = Vec::new();
    if quick {
        sets.push("memory.size=\"64MiB\"".to_string());
        sets.push("access.ops=500_000".to_string());
    }
    Ok(experiment.with_overrides(&sets)?)
}

/// Runs `numalab report`.
pub fn run(args: &ReportArgs) -> Result<()> {
    let html = args
        .output
        .as_ref()
        .is_some_and(|p| p.extension().is_some_and(|e| e == "html"));
    let out = OutputArgs {
        json: args.json,
        csv: false,
        markdown: args.markdown,
        output: args.output.clone(),
    };
    for path in args.output.iter().chain(&args.html) {
        if let Some(dir) = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty() && !d.is_dir())
        {
            bail!(
                "-o {}: directory {} does not exist",
                path.display(),
                dir.display()
            );
        }
    }

    // Everything planned and checked before anything is measured.
    let topology = Topology::system()?;
    let shape = Shape::of(&topology, &NodeSelection::default())?;
    let config = if args.quick {
        MatrixConfig::quick()
    } else {
        MatrixConfig::full()
    };
    matrix::validate(&topology, &shape, &config)?;
    let experiment = policy_sweep(&topology, args.quick)?;
    plan_sweep(&experiment, &topology)?;

    let topology_report = topo::report(&TopoArgs {
        xml: None,
        synthetic: None,
        output: out.clone(),
    })?;
    let talk = std::io::stderr().is_terminal();
    let mut progress = |line: &str| {
        if talk {
            eprintln!("numalab report: {line}");
        }
    };
    progress("measuring latency and bandwidth between nodes");
    let matrix = matrix::run::run(&topology, &shape, &config, &mut progress)?;

    progress("running the policy sweep");
    let control = Control::default();
    exp::catch_interrupts(&control.stop)?;
    let label = Arc::new(Mutex::new(String::new()));
    let display = ProgressDisplay::start(Arc::clone(&control.progress), Arc::clone(&label));
    let sweep = run_sweep(&experiment, &topology, &control, |i, n, cell| {
        if let Ok(mut label) = label.lock() {
            *label = format!("cell {}/{n} ({cell}): ", i + 1);
        }
    });
    display.finish();
    let mut sweep = sweep?;
    sweep.created = output::now_rfc3339();
    if sweep.interrupted {
        bail!("interrupted: no report written");
    }

    let report = Report {
        findings: findings(&topology_report, &matrix, &sweep),
        topology: topology_report,
        matrix,
        sweep,
    };
    let text = if html {
        html_page(&report)?
    } else {
        match out.format() {
            Format::Json => output::to_json("numalab.report", SCHEMA_VERSION, &report)?,
            Format::Markdown => text(&report, true),
            Format::Table | Format::Csv => text(&report, false),
        }
    };
    if let Some(path) = &args.html {
        output::write_atomically(path, html_page(&report)?.as_bytes())?;
    }
    out.emit(&text)
}

fn text(report: &Report, markdown: bool) -> String {
    let style = if markdown {
        Style::Markdown
    } else {
        Style::Plain
    };
    let heading = |title: &str| {
        if markdown {
            format!("\n## {title}\n\n")
        } else {
            format!("\n== {title}\n\n")
        }
    };
    let mut out = String::new();
    out.push_str(&heading("What this machine is (numalab topo)"));
    out.push_str(&report.topology.text(if markdown {
        Style::Markdown
    } else {
        Style::Plain
    }));
    out.push_str(&heading("What NUMA costs here (numalab matrix)"));
    out.push_str(&super::matrix::human(&report.matrix, markdown));
    out.push_str(&heading("What placement costs a workload (numalab sweep)"));
    out.push_str(&crate::exp::text::sweep_report(&report.sweep, style));
    out.push_str(&heading("Findings"));
    for finding in &report.findings {
        let _ = writeln!(out, "- {finding}");
    }
    out
}

/// The medians behind the findings, picked out of the results.
fn findings(topo: &TopoReport, matrix: &MatrixResult, sweep: &SweepResult) -> Vec<String> {
    let mut found = Vec::new();
    let t = &topo.topology;
    let summary = t.summary();
    let memory_nodes = t.nodes_with_memory().len();
    found.push(format!(
        "{} NUMA node(s){}, {} CPUs, {} of memory.",
        summary.nodes,
        if summary.memory_only_nodes > 0 {
            format!(
                " ({} without CPUs: memory-only tiers)",
                summary.memory_only_nodes
            )
        } else {
            String::new()
        },
        summary.cpus,
        output::human_bytes(summary.memory_bytes)
    ));

    if let Some(latency) = &matrix.latency {
        for initiator in &matrix.shape.initiators {
            let row: Vec<_> = latency
                .cells
                .iter()
                .filter(|c| c.initiator == *initiator)
                .collect();
            let local = row.iter().find(|c| c.ratio_to_local == Some(1.0));
            let worst = row
                .iter()
                .filter(|c| c.ratio_to_local.is_some_and(|r| r != 1.0))
                .max_by(|a, b| {
                    a.latency_ns
                        .summary
                        .median
                        .total_cmp(&b.latency_ns.summary.median)
                });
            match (local, worst) {
                (Some(local), Some(worst)) => {
                    let measured = worst.ratio_to_local.unwrap_or(1.0);
                    let claim = worst
                        .firmware
                        .slit_ratio
                        .map(|r| format!("; the firmware's SLIT says {r:.2}x"))
                        .unwrap_or_else(|| "; the firmware gives no SLIT".into());
                    found.push(format!(
                        "From node {initiator}, memory on node {} costs {:.0} ns per dependent load against {:.0} ns on node {}: {measured:.2}x{claim}.",
                        worst.target,
                        worst.latency_ns.summary.median,
                        local.latency_ns.summary.median,
                        local.target,
                    ));
                }
                (Some(local), None) => found.push(format!(
                    "Node {initiator}'s own memory: {:.0} ns per dependent load{}.",
                    local.latency_ns.summary.median,
                    if memory_nodes == 1 {
                        "; with one memory node every access is local, so placement cannot cost anything here"
                    } else {
                        ""
                    }
                )),
                _ => {}
            }
            if let Some(base) = local.and_then(|l| l.base_pages.as_ref()) {
                if base.inflation > 0.05 {
                    found.push(format!(
                        "4 KiB pages make those loads {:.0}% slower than huge pages (TLB misses): large working sets want transparent or explicit huge pages.",
                        100.0 * base.inflation
                    ));
                }
            }
        }
    }
    if let Some(bandwidth) = &matrix.bandwidth {
        for cell in bandwidth
            .cells
            .iter()
            .filter(|c| c.read_ratio_to_local == Some(1.0))
        {
            if let Some(read) = &cell.read_gbps {
                found.push(format!(
                    "{} thread(s) of node {} read their own memory at {:.1} GB/s{}.",
                    cell.cpus.len(),
                    cell.initiator,
                    read.summary.median,
                    bandwidth
                        .cells
                        .iter()
                        .filter(|c| c.initiator == cell.initiator && c.target != cell.target)
                        .filter_map(|c| c.read_gbps.as_ref().map(|f| (c.target, f.summary.median)))
                        .min_by(|a, b| a.1.total_cmp(&b.1))
                        .map(|(node, gbps)| format!(", node {node}'s at {gbps:.1} GB/s"))
                        .unwrap_or_default()
                ));
            }
        }
    }

    // The sweep: each policy against local at the largest thread count.
    let largest = sweep
        .comparison
        .iter()
        .filter_map(|c| {
            c.settings
                .iter()
                .find(|(k, _)| k == "threads.count")
                .and_then(|(_, v)| v.parse::<u32>().ok())
        })
        .max();
    for comparison in sweep.comparison.iter().filter(|c| {
        c.policy != "local"
            && c.settings
                .iter()
                .any(|(k, v)| k == "threads.count" && v.parse::<u32>().ok() == largest)
    }) {
        found.push(format!(
            "With {} thread(s) doing random 64-byte operations, {} memory takes {:+.0}% of local's time to the last thread.",
            largest.unwrap_or(1),
            comparison.policy,
            comparison.vs_local_percent
        ));
    }
    if memory_nodes == 1 {
        found.push(
            "The policy sweep ran local memory only: remote and interleaved memory need a second node with memory.".into(),
        );
    }

    let mismatched: Vec<_> = matrix
        .audits()
        .into_iter()
        .filter(|(_, a)| !a.is_match())
        .map(|(what, _)| what)
        .collect();
    let sweep_mismatch = sweep
        .cells
        .iter()
        .filter_map(|c| c.result.as_ref())
        .filter(|r| !r.placement_as_requested())
        .count();
    if mismatched.is_empty() && sweep_mismatch == 0 {
        found.push("Every working set measured was on the node asked for (checked page by page with move_pages).".into());
    } else {
        found.push(format!(
            "Pages were not where asked in {} matrix cell(s) ({}) and {sweep_mismatch} sweep cell(s): those figures do not measure what they say.",
            mismatched.len(),
            mismatched.join(", ")
        ));
    }
    if let Some(kernel) = &topo.kernel {
        if kernel.numa_balancing.unwrap_or(0) > 0 {
            found.push("Automatic NUMA balancing is on: the kernel migrates pages towards the threads using them while programs run, which moves results between runs.".into());
        }
    }
    let noisy = matrix
        .warnings
        .iter()
        .filter(|w| w.contains("noisy"))
        .count()
        + sweep
            .cells
            .iter()
            .filter_map(|c| c.result.as_ref()?.figures.as_ref())
            .filter(|f| f.time_to_last_s.is_noisy())
            .count();
    if noisy > 0 {
        found.push(format!(
            "{noisy} figure(s) varied by more than 5% between repeats: the machine was busy; re-run on a quiet machine before trusting small differences."
        ));
    }
    found
}

/// One HTML page: the text sections as preformatted tables, the figures
/// as inline SVG, nothing fetched from elsewhere.
fn html_page(report: &Report) -> Result<String> {
    let dir = std::env::temp_dir().join(format!("numalab-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let figures = (|| -> Result<Vec<(String, String)>> {
        let mut svgs = Vec::new();
        let mut paths = super::matrix::draw(&report.matrix, &dir.join("matrix"))?;
        paths.extend(figures::draw_sweep(&report.sweep, &dir.join("sweep"))?);
        for path in paths
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "svg"))
        {
            let title = figure_title(path);
            svgs.push((title, std::fs::read_to_string(path)?));
        }
        Ok(svgs)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    let figures = figures?;

    let host = report.matrix.environment.as_ref().map(|e| &e.host);
    let title = format!(
        "numalab report: {}",
        host.map_or("this machine".into(), |h| h.hostname.clone())
    );
    let mut page = String::new();
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>\n\
         body {{ font-family: sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; color: #222; }}\n\
         pre {{ background: #f6f6f6; padding: 1em; overflow-x: auto; font-size: 13px; }}\n\
         figure {{ margin: 1.5em 0; }} figure svg {{ max-width: min(100%, 760px); height: auto; }}\n\
         li {{ margin: .4em 0; }}\n</style>\n</head>\n<body>\n<h1>{}</h1>\n",
        escape(&title),
        escape(&title)
    );
    if let Some(host) = host {
        let _ = writeln!(
            page,
            "<p>{} · Linux {} · written {} by numalab {}</p>",
            escape(host.cpu_model.as_deref().unwrap_or("unknown CPU")),
            escape(&host.kernel),
            escape(&output::now_rfc3339()),
            env!("CARGO_PKG_VERSION")
        );
    }
    page.push_str("<h2>Findings</h2>\n<ul>\n");
    for finding in &report.findings {
        let _ = writeln!(page, "<li>{}</li>", escape(finding));
    }
    page.push_str("</ul>\n<h2>Figures</h2>\n");
    for (caption, svg) in &figures {
        let svg = svg.trim_start_matches(|c| c != '<');
        let svg = svg.strip_prefix("<?xml").map_or(svg, |rest| {
            rest.split_once("?>").map_or(rest, |(_, after)| after)
        });
        let _ = writeln!(
            page,
            "<figure>{svg}<figcaption>{}</figcaption></figure>",
            escape(caption)
        );
    }
    for (heading, body) in [
        (
            "What this machine is (numalab topo)",
            report.topology.text(Style::Plain),
        ),
        (
            "What NUMA costs here (numalab matrix)",
            super::matrix::human(&report.matrix, false),
        ),
        (
            "What placement costs a workload (numalab sweep)",
            crate::exp::text::sweep_report(&report.sweep, Style::Plain),
        ),
    ] {
        let _ = writeln!(
            page,
            "<h2>{}</h2>\n<pre>{}</pre>",
            escape(heading),
            escape(&body)
        );
    }
    page.push_str("</body>\n</html>\n");
    Ok(page)
}

fn figure_title(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    match stem.as_str() {
        "matrix-latency" => "Idle latency, ns: CPU node (rows) to memory node (columns)".into(),
        "matrix-bandwidth-read" => "Read bandwidth, GB/s".into(),
        "matrix-bandwidth-write" => "Non-temporal write bandwidth, GB/s".into(),
        "matrix-bandwidth-copy" => "Copy bandwidth, GB/s (bytes read + written)".into(),
        "sweep" => {
            "Policy sweep: time to the last thread against threads, one line per policy".into()
        }
        other => other.replace('-', " "),
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_fits_the_machine() {
        let two = Topology::from_synthetic("pack:2 numa:1 core:4 pu:2").unwrap();
        let exp = policy_sweep(&two, false).unwrap();
        let axes: Vec<_> = exp
            .cells()
            .unwrap()
            .iter()
            .map(|(s, _)| format!("{s:?}"))
            .collect();
        // threads 1, 2, 4, 8 x three policies
        assert_eq!(axes.len(), 12, "{axes:?}");
        let one = Topology::from_synthetic("core:2 pu:1").unwrap();
        let exp = policy_sweep(&one, true).unwrap();
        assert_eq!(exp.cells().unwrap().len(), 2, "threads 1 and 2, local only");
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(escape("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
    }
}
