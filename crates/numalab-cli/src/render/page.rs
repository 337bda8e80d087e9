//! `numalab report`'s HTML page: one self-contained file (no network,
//! light and dark, printable) with the findings, a picture of the machine,
//! the figures that say something on this machine, and every table of the
//! terminal report as an HTML table.
//!
//! Which figures: the topology always; heat maps only from two CPU nodes
//! and two memory nodes up (a 1×1 heat map is one coloured square); the
//! latency by working set through the caches with their sizes marked
//! (when the report measured it: not with `--quick`); what 4 KiB pages
//! cost against huge pages; read bandwidth by thread count; loaded latency
//! where measured; the policy sweep where it has more than one point; the
//! timelines of profiles given with `--profile`.

use std::fmt::Write as _;

use anyhow::Result;
use numalab::units::count;
use numalab_bench::profile::ProfileReport;
use numalab_bench::report::Report;

use super::figures;
use super::svg::{self, escape, Chart, Line};
use super::{Render, Style};
use crate::plot::{Drawing, LineChart};
use numalab::units::format_size;

/// Tables longer than this can be sorted by a click on a column heading.
pub const SORTABLE_ROWS: usize = 8;

/// One figure on the page: SVG text and a caption.
struct Figure {
    svg: String,
    caption: String,
    /// Drawn by plotters on a white background (kept white in dark mode).
    plotted: bool,
}

fn plotted(drawing: &Drawing, caption: impl Into<String>) -> Result<Figure> {
    let svg = drawing.svg()?;
    let svg = svg.trim_start_matches(|c| c != '<');
    let svg = svg.strip_prefix("<?xml").map_or(svg, |rest| {
        rest.split_once("?>").map_or(rest, |(_, after)| after)
    });
    Ok(Figure {
        svg: svg.trim().to_owned(),
        caption: caption.into(),
        plotted: true,
    })
}

fn drawn(svg: Option<String>, caption: impl Into<String>) -> Option<Figure> {
    Some(Figure {
        svg: svg?,
        caption: caption.into(),
        plotted: false,
    })
}

/// The report as one HTML page, with the timelines of `profiles`.
pub fn html_page(report: &Report, profiles: &[ProfileReport]) -> Result<String> {
    let topology = &report.topology.topology;
    let matrix = &report.matrix;
    let host = topology
        .host
        .clone()
        .unwrap_or_else(|| "this machine".into());
    let title = format!("numalab report: {host}");
    let mut page = String::new();
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<meta name=\"color-scheme\" content=\"light dark\">\n<title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<header><h1>{}</h1>\n",
        escape(&title),
        escape(&title)
    );
    let kernel = report
        .topology
        .support
        .as_ref()
        .map(|s| s.kernel.clone())
        .unwrap_or_default();
    let _ = writeln!(
        page,
        "<p class=\"meta\">{} · Linux {} · {} · measured {} by numalab {}{}</p>",
        escape(topology.cpu_model.as_deref().unwrap_or("unknown CPU")),
        escape(&kernel),
        escape(&summary_line(report)),
        escape(&report.sweep.created),
        escape(&report.sweep.numalab_version),
        if matrix.settings.quick {
            " · <strong>--quick</strong>: small working sets, fewer samples"
        } else {
            ""
        }
    );
    page.push_str("<nav><a href=\"#findings\">Findings</a> <a href=\"#machine\">The machine</a> <a href=\"#cost\">What NUMA costs</a> <a href=\"#placement\">Placement and a workload</a>");
    if !profiles.is_empty() {
        page.push_str(" <a href=\"#profiles\">Programs</a>");
    }
    page.push_str("</nav></header>\n<main>\n");

    page.push_str("<section id=\"findings\"><h2>Findings</h2>\n<ul class=\"findings\">\n");
    for finding in &report.findings {
        let _ = writeln!(page, "<li>{}</li>", inline(&escape(&finding.text)));
    }
    page.push_str("</ul></section>\n");

    // The machine.
    page.push_str("<section id=\"machine\"><h2>What this machine is</h2>\n");
    figure(
        &mut page,
        &Figure {
            svg: svg::topology(topology),
            caption: "The machine: packages, NUMA nodes with their memory, CPUs, last-level caches and the devices nearest each; the firmware's distances (SLIT) on the arcs, both ways where they differ".into(),
            plotted: false,
        },
    );
    if topology.nodes.len() > svg::ARC_NODES {
        page.push_str(
            "<p>More nodes than the picture can link: the distances are in the table below.</p>\n",
        );
    }
    page.push_str(&markdown(&report.topology.text(Style::Markdown)));
    page.push_str("</section>\n");

    // What NUMA costs.
    page.push_str("<section id=\"cost\"><h2>What NUMA costs here</h2>\n");
    for fig in cost_figures(report)? {
        figure(&mut page, &fig);
    }
    if let Some(table) = slit_ratio_table(report) {
        page.push_str(&table);
    }
    page.push_str(&markdown(&matrix.text(Style::Markdown)));
    page.push_str("</section>\n");

    // The policy sweep.
    page.push_str("<section id=\"placement\"><h2>What placement costs a workload</h2>\n");
    let sweep_points = report
        .sweep
        .axes
        .iter()
        .find(|(k, _)| k == "threads.count")
        .map_or(0, |(_, v)| v.len());
    if sweep_points > 1 {
        let mut chart = page_chart(figures::sweep_chart(&report.sweep));
        // The caption says what the bars are; the axes say only units.
        chart.x_label = "threads".into();
        chart.y_label = "ms (median)".into();
        if let Some(fig) = drawn(
            svg::line_chart(&chart),
            "The policy sweep: time to the last thread against threads, one line per policy, each point the median with a bar from the fastest to the slowest repeat (lower is better)",
        ) {
            figure(&mut page, &fig);
        }
    }
    page.push_str(&markdown(&report.sweep.text(Style::Markdown)));
    page.push_str("</section>\n");

    if !profiles.is_empty() {
        page.push_str("<section id=\"profiles\"><h2>Programs profiled</h2>\n");
        for profile in profiles {
            let chart = profile_chart(profile);
            if let Some(fig) = drawn(
                svg::line_chart(&chart),
                format!(
                    "numalab profile of `{}`: memory per node over time",
                    profile.command.join(" ")
                ),
            ) {
                figure(&mut page, &fig);
            }
            page.push_str(&markdown(&profile.text(Style::Markdown)));
        }
        page.push_str("</section>\n");
    }

    let _ = write!(
        page,
        "</main>\n<footer><p>Written by numalab {} on {}. The same report as text: <code>numalab report</code>; as data: <code>numalab report --json</code>; this page again from saved data: <code>numalab report --from report.json -o report.html</code>.</p></footer>\n<script>{SCRIPT}</script>\n</body>\n</html>\n",
        numalab::VERSION,
        escape(&numalab_bench::document::now_rfc3339())
    );
    Ok(page)
}

fn summary_line(report: &Report) -> String {
    let topology = &report.topology.topology;
    let summary = topology.summary();
    format!(
        "{}, {}{}, {}, {} of memory",
        count(summary.packages, "package"),
        count(summary.nodes, "node"),
        if summary.memory_only_nodes > 0 {
            format!(" ({} without CPUs)", summary.memory_only_nodes)
        } else {
            String::new()
        },
        count(summary.cpus, "CPU"),
        format_size(summary.memory_bytes)
    )
}

fn figure(page: &mut String, fig: &Figure) {
    let _ = writeln!(
        page,
        "<figure class=\"{}\">{}<figcaption>{}</figcaption></figure>",
        if fig.plotted { "plot" } else { "drawn" },
        fig.svg,
        inline(&escape(&fig.caption))
    );
}

/// The figures of the matrix section that say something on this machine.
fn cost_figures(report: &Report) -> Result<Vec<Figure>> {
    let matrix = &report.matrix;
    let topology = &report.topology.topology;
    let mut out = Vec::new();
    let square = matrix.shape.initiators.len() >= 2 && matrix.shape.targets.len() >= 2;
    for (suffix, drawing) in figures::matrix_drawings(matrix) {
        let caption = match suffix.as_str() {
            "latency" => "Idle latency, ns: CPU node (rows) to memory node (columns)",
            "bandwidth-read" => "Read bandwidth, GB/s",
            "bandwidth-write" => "Non-temporal write bandwidth, GB/s",
            "bandwidth-copy" => "Copy bandwidth, GB/s (bytes read + written)",
            "loaded" => "Loaded latency: latency against the bandwidth other threads draw",
            "c2c" => "Cache-to-cache latency between nodes, ns",
            _ => "",
        };
        let is_map = matches!(drawing, Drawing::Heat(_));
        if is_map && !square {
            continue;
        }
        out.push(plotted(&drawing, caption)?);
    }
    if let Some(sweep) = &matrix.cache_sweep {
        let marks: Vec<(f64, String)> = topology
            .cache_sizes
            .iter()
            .map(|(level, bytes)| (*bytes as f64, format!("L{level} {}", format_size(*bytes))))
            .chain(
                sweep
                    .knee_bytes
                    .map(|k| (k as f64, format!("knee {}", format_size(k as u64)))),
            )
            .collect();
        let chart = Chart {
            title: format!(
                "Latency by working set, CPU {} on node {} ({})",
                sweep.cpu, sweep.node, sweep.huge_pages
            ),
            x_label: "working set (log scale)".into(),
            y_label: "ns per dependent load".into(),
            lines: vec![Line {
                name: format!("node {}", sweep.node),
                points: sweep
                    .points
                    .iter()
                    .map(|p| (p.bytes as f64, p.ns))
                    .collect(),
                ranges: Vec::new(),
            }],
            log_x: true,
            marks,
            x_format: svg::bytes,
        };
        out.extend(drawn(
            svg::line_chart(&chart),
            "Latency through the caches: each step up is a cache level running out; the dashed lines are the cache sizes the hardware reports",
        ));
    }
    if let Some(latency) = &matrix.latency {
        let mut bars = Vec::new();
        for cell in latency.cells.iter().filter(|c| c.base_pages.is_some()) {
            if bars.len() >= 16 {
                break;
            }
            let base = cell.base_pages.as_ref().map(|b| b.latency_ns.median());
            bars.push((
                format!("{}→{} {}", cell.initiator, cell.target, cell.pages.label()),
                cell.latency_ns.median(),
            ));
            if let Some(base) = base {
                bars.push((format!("{}→{} 4K", cell.initiator, cell.target), base));
            }
        }
        out.extend(drawn(
            svg::bar_chart("Idle latency: huge pages against 4 KiB pages", "ns", &bars),
            "What 4 KiB pages cost: the same chase on base pages misses the TLB (CPU node → memory node, the pages each ran on)",
        ));
    }
    if let Some(scaling) = &report.scaling {
        let chart = Chart {
            title: format!(
                "Read bandwidth by threads: node {} reading node {}",
                scaling.initiator, scaling.target
            ),
            x_label: "threads".into(),
            y_label: "GB/s".into(),
            lines: vec![Line {
                name: "read".into(),
                points: scaling
                    .points
                    .iter()
                    .map(|p| (p.threads as f64, p.read_gbps.median()))
                    .collect(),
                ranges: scaling
                    .points
                    .iter()
                    .map(|p| {
                        let s = &p.read_gbps.summary;
                        (p.threads as f64, s.min, s.max)
                    })
                    .collect(),
            }],
            log_x: false,
            marks: Vec::new(),
            x_format: svg::plain,
        };
        out.extend(drawn(
            svg::line_chart(&chart),
            "How many threads it takes to draw the memory's bandwidth (median of the samples at each count)",
        ));
    }
    Ok(out)
}

/// Measured remote/local latency against the firmware's SLIT/10, per
/// cell: how far the firmware's claim is from what was measured.
fn slit_ratio_table(report: &Report) -> Option<String> {
    let latency = report.matrix.latency.as_ref()?;
    let shape = &report.matrix.shape;
    if shape.targets.len() < 2 {
        return None;
    }
    let mut out = String::from("<h3>Measured against the firmware</h3>\n<p>Per cell: the measured remote/local latency ratio divided by the SLIT's (distance/10). 1.00 means the firmware's distance predicts the cost; below 1 it overstates it, above 1 it understates it.</p>\n<div class=\"scroll\"><table>\n<thead><tr><th>CPU \\ memory</th>");
    for t in &shape.targets {
        let _ = write!(out, "<th>node {t}</th>");
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for i in &shape.initiators {
        let _ = write!(out, "<tr><th>node {i}</th>");
        for t in &shape.targets {
            let cell = latency
                .cells
                .iter()
                .find(|c| c.initiator == *i && c.target == *t);
            // Every cell says what it is: a ratio, or why there is none.
            let text = match cell {
                None => "not measured".to_owned(),
                Some(c) => match (c.ratio_to_local, c.firmware.slit_ratio) {
                    (Some(measured), Some(slit)) if slit > 0.0 => {
                        format!("{:.2} ({measured:.2}× vs {slit:.1}×)", measured / slit)
                    }
                    (None, _) => "no local cell to compare with".to_owned(),
                    _ => "no SLIT distance".to_owned(),
                },
            };
            let _ = write!(out, "<td>{text}</td>");
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table></div>\n");
    Some(out)
}

/// A profile's memory per node over time as a page chart: the lines
/// `numalab plot` draws for it ([`figures::profile_chart`]).
fn profile_chart(profile: &ProfileReport) -> Chart {
    page_chart(figures::profile_chart(profile))
}

/// A chart `numalab plot` draws, as a page chart: drawn in the page's
/// colours (light and dark), its text sized for the page, whole numbers
/// on a whole-number axis.
fn page_chart(chart: LineChart) -> Chart {
    Chart {
        title: chart.title,
        x_label: chart.x_label,
        y_label: chart.y_label,
        lines: chart
            .series
            .into_iter()
            .map(|s| Line {
                name: s.name,
                points: s.points,
                ranges: s.ranges,
            })
            .collect(),
        log_x: false,
        marks: Vec::new(),
        x_format: svg::plain,
    }
}

/// Markdown as numalab's renderers write it — headings, pipe tables,
/// paragraphs, `> **Warning:**` quotes, `warning:` lines — as HTML.
/// Tables scroll sideways inside their own box, never the page.
pub fn markdown(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    let mut paragraph: Vec<String> = Vec::new();
    let flush = |out: &mut String, paragraph: &mut Vec<String>| {
        if !paragraph.is_empty() {
            let _ = writeln!(out, "<p>{}</p>", paragraph.join("<br>\n"));
            paragraph.clear();
        }
    };
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if trimmed.starts_with('|') {
            flush(&mut out, &mut paragraph);
            let mut rows = vec![cells(trimmed)];
            while let Some(next) = lines.peek() {
                if !next.trim().starts_with('|') {
                    break;
                }
                let row = lines.next().unwrap_or_default().trim().to_owned();
                if row.chars().all(|c| matches!(c, '|' | '-' | ':' | ' ')) {
                    continue;
                }
                rows.push(cells(&row));
            }
            table(&mut out, &rows);
        } else if let Some(heading) = trimmed.strip_prefix("#") {
            flush(&mut out, &mut paragraph);
            let _ = writeln!(
                out,
                "<h3>{}</h3>",
                inline(&escape(heading.trim_start_matches('#').trim()))
            );
        } else if let Some(quote) = trimmed.strip_prefix('>') {
            flush(&mut out, &mut paragraph);
            let _ = writeln!(
                out,
                "<p class=\"warn\">{}</p>",
                inline(&escape(quote.trim()))
            );
        } else if trimmed.starts_with("warning:") {
            flush(&mut out, &mut paragraph);
            let _ = writeln!(out, "<p class=\"warn\">{}</p>", inline(&escape(trimmed)));
        } else if trimmed.is_empty() {
            flush(&mut out, &mut paragraph);
        } else {
            paragraph.push(inline(&escape(trimmed)));
        }
    }
    flush(&mut out, &mut paragraph);
    out
}

fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(|c| c.trim().to_owned()).collect()
}

fn table(out: &mut String, rows: &[Vec<String>]) {
    let Some((head, body)) = rows.split_first() else {
        return;
    };
    let sortable = body.len() > SORTABLE_ROWS;
    let _ = write!(
        out,
        "<div class=\"scroll\"><table{}>\n<thead><tr>",
        if sortable { " class=\"sortable\"" } else { "" }
    );
    for cell in head {
        let _ = write!(out, "<th>{}</th>", inline(&escape(cell)));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in body {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{}</td>", inline(&escape(cell)));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table></div>\n");
}

/// `**bold**` and `` `code` `` in already escaped text.
fn inline(text: &str) -> String {
    let mut out = String::new();
    for (i, part) in text.split("**").enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<strong>{part}</strong>");
        } else {
            out.push_str(part);
        }
    }
    let mut result = String::new();
    for (i, part) in out.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(result, "<code>{part}</code>");
        } else {
            result.push_str(part);
        }
    }
    result
}

const CSS: &str = r#"
:root { color-scheme: light dark; --fg: #1d1f23; --bg: #ffffff; --muted: #5b6270; --rule: #d9dce1;
  --panel: #f5f6f8; --warn: #8a5300; --warn-bg: #fff4e0; --accent: #1f5fbf;
  --s0: #1f77b4; --s1: #d62728; --s2: #2ca02c; --s3: #9467bd; --s4: #ff7f0e; --s5: #17becf; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e4e6ea; --bg: #15171b; --muted: #a3a9b4; --rule: #3a3f48; --panel: #1f2228;
    --warn: #ffc46b; --warn-bg: #3a2c12; --accent: #7fb0ff;
    --s0: #6cb4ff; --s1: #ff7b7b; --s2: #6fdc6f; --s3: #c5a3ff; --s4: #ffb060; --s5: #5fe0ee; }
}
* { box-sizing: border-box; }
html { background: var(--bg); }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg);
  max-width: 1120px; margin: 0 auto; padding: 1rem; overflow-wrap: anywhere; }
h1 { font-size: 1.6rem; margin: .2rem 0; } h2 { margin-top: 2.2rem; border-bottom: 1px solid var(--rule); }
h3 { font-size: 1.05rem; margin: 1.4rem 0 .4rem; }
.meta { color: var(--muted); margin: 0 0 .5rem; }
nav a { margin-right: 1rem; color: var(--accent); }
a { color: var(--accent); }
ul.findings li { margin: .45rem 0; }
.scroll { overflow-x: auto; max-width: 100%; margin: .4rem 0 1rem; }
table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid var(--rule); padding: .25rem .5rem; text-align: left; white-space: nowrap; }
thead th { background: var(--panel); position: sticky; top: 0; }
table.sortable thead th { cursor: pointer; }
table.sortable thead th[aria-sort]::after { content: attr(data-arrow); color: var(--muted); }
p.warn { color: var(--warn); background: var(--warn-bg); padding: .3rem .6rem; border-radius: 4px; }
code { font-size: 90%; }
figure { margin: 1.2rem 0; max-width: 100%; }
figure svg { display: block; max-width: 100%; height: auto; }
figure.plot svg { background: #fff; border-radius: 6px; max-width: min(100%, 720px); }
@media (prefers-color-scheme: dark) {
  /* Heat maps are drawn on white: turned dark with their hues kept. */
  figure.plot svg { filter: invert(0.88) hue-rotate(180deg); }
}
@media (max-width: 600px) {
  /* On a phone a figure keeps a width its text can be read at, and
     scrolls sideways in its own box, never the page. */
  figure { overflow-x: auto; }
  figure svg { max-width: none; }
  figure svg.chart { width: 560px; }
  figure.plot svg { width: 640px; max-width: none; }
  svg .tick { font-size: 15px; } svg .label { font-size: 15px; } svg .title { font-size: 17px; }
}
figcaption { color: var(--muted); font-size: 13px; margin-top: .3rem; }
svg .title { font-size: 15px; font-weight: 600; fill: var(--fg); }
svg .tick { font-size: 12px; fill: var(--fg); }
svg .label { font-size: 13px; fill: var(--muted); }
svg .grid { stroke: var(--rule); stroke-width: 1; }
svg .axis { stroke: var(--muted); stroke-width: 1; }
svg .mark { stroke: var(--muted); stroke-dasharray: 4 3; }
svg .mark-label { font-size: 11px; fill: var(--muted); }
svg .series { stroke-width: 2; }
svg circle.series { stroke: none; }
svg .range { stroke-width: 1.5; opacity: .7; }
svg .s0 { stroke: var(--s0); } svg circle.s0, svg rect.s0 { fill: var(--s0); }
svg .s1 { stroke: var(--s1); } svg circle.s1, svg rect.s1 { fill: var(--s1); }
svg .s2 { stroke: var(--s2); } svg circle.s2, svg rect.s2 { fill: var(--s2); }
svg .s3 { stroke: var(--s3); } svg circle.s3, svg rect.s3 { fill: var(--s3); }
svg .s4 { stroke: var(--s4); } svg circle.s4, svg rect.s4 { fill: var(--s4); }
svg .s5 { stroke: var(--s5); } svg circle.s5, svg rect.s5 { fill: var(--s5); }
svg rect.package { fill: none; stroke: var(--muted); stroke-dasharray: 6 4; }
svg rect.node { fill: var(--panel); stroke: var(--s0); stroke-width: 1.5; }
svg rect.memory-only { stroke: var(--s4); }
svg .node-name { font-size: 14px; font-weight: 600; fill: var(--fg); }
svg .link { stroke: var(--s1); stroke-width: 1.5; }
svg .link-label { font-size: 12px; fill: var(--s1); font-weight: 600; }
footer { color: var(--muted); font-size: 13px; margin-top: 2.5rem; border-top: 1px solid var(--rule); }
@media print {
  :root { --fg: #000; --bg: #fff; --muted: #333; --rule: #999; --panel: #eee; --warn: #000; --warn-bg: #fff; }
  nav, footer { display: none; } body { max-width: none; font-size: 11px; }
  .scroll { overflow: visible; } figure, table { break-inside: avoid; }
}
"#;

/// Click-to-sort for long tables: numbers by value, text by text.
const SCRIPT: &str = r#"
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('thead th').forEach(function (th, column) {
    th.addEventListener('click', function () {
      var body = table.tBodies[0];
      var up = th.getAttribute('aria-sort') !== 'ascending';
      table.querySelectorAll('thead th').forEach(function (other) { other.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', up ? 'ascending' : 'descending');
      th.setAttribute('data-arrow', up ? ' \u25B2' : ' \u25BC');
      var key = function (row) {
        var text = row.cells[column] ? row.cells[column].textContent.trim() : '';
        var number = parseFloat(text.replace(/[^0-9.eE+-]/g, ''));
        return isNaN(number) ? text : number;
      };
      Array.from(body.rows).sort(function (a, b) {
        var x = key(a), y = key(b);
        var order = (typeof x === 'number' && typeof y === 'number') ? x - y : String(x).localeCompare(String(y));
        return up ? order : -order;
      }).forEach(function (row) { body.appendChild(row); });
    });
  });
});
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_tables_become_html_tables_in_a_scrolling_box() {
        let html = markdown(
            "heading line\n\n| node | cpus |\n|------|------|\n| 0    | 0-1  |\n\n> **Warning:** noisy\nwarning: busy <machine>",
        );
        assert!(html.contains("<p>heading line</p>"), "{html}");
        assert!(html.contains("<div class=\"scroll\"><table>"), "{html}");
        assert!(html.contains("<th>node</th><th>cpus</th>"), "{html}");
        assert!(html.contains("<td>0</td><td>0-1</td>"), "{html}");
        assert!(!html.contains("------"), "the rule line is dropped: {html}");
        assert!(html.contains("<p class=\"warn\"><strong>Warning:</strong> noisy</p>"));
        assert!(html.contains("busy &lt;machine&gt;"), "escaped: {html}");
    }

    #[test]
    fn long_tables_are_sortable() {
        let mut text = String::from("| a |\n|---|\n");
        for i in 0..=SORTABLE_ROWS {
            let _ = writeln!(text, "| {i} |");
        }
        assert!(markdown(&text).contains("class=\"sortable\""));
        assert!(!markdown("| a |\n|---|\n| 1 |").contains("sortable"));
    }
}
