//! `numalab report` for people: its three sections (the machine, what
//! NUMA costs, what placement costs a workload) and its findings, as text
//! or Markdown, or as one self-contained HTML page with the figures
//! inside ([`html_page`]).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use numalab_bench::report::Report;

use super::{Render, Style};
use crate::plot::Drawing;
use crate::render::figures;

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
    let markdown = style == Style::Markdown;
    let heading = |title: &str| {
        if markdown {
            format!("\n## {title}\n\n")
        } else {
            format!("\n== {title}\n\n")
        }
    };
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

/// The report as one HTML page: the findings, the figures as inline SVG,
/// and the text sections as preformatted tables; nothing fetched from
/// elsewhere.
pub fn html_page(report: &Report) -> Result<String> {
    // Drawn in memory: no temporary file, so nothing in a shared /tmp
    // another user could put in numalab's way.
    let mut drawings: Vec<(String, Drawing)> = figures::matrix_drawings(&report.matrix)
        .into_iter()
        .map(|(suffix, drawing)| (format!("matrix-{suffix}"), drawing))
        .collect();
    drawings.push((
        "sweep".to_owned(),
        Drawing::Lines(figures::sweep_chart(&report.sweep)),
    ));
    let mut figures = Vec::new();
    for (name, drawing) in &drawings {
        let title = figure_title(Path::new(&format!("{name}.svg")));
        figures.push((title, drawing.svg()?));
    }

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
            escape(&numalab_bench::document::now_rfc3339()),
            env!("CARGO_PKG_VERSION")
        );
    }
    page.push_str("<h2>Findings</h2>\n<ul>\n");
    for finding in &report.findings {
        let _ = writeln!(page, "<li>{}</li>", escape(&finding.text));
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
        (MACHINE, report.topology.text(Style::Plain)),
        (MATRIX, report.matrix.text(Style::Plain)),
        (SWEEP, report.sweep.text(Style::Plain)),
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
    fn html_is_escaped() {
        assert_eq!(escape("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
    }

    #[test]
    fn figures_have_titles() {
        assert_eq!(
            figure_title(Path::new("/tmp/x/matrix-bandwidth-read.svg")),
            "Read bandwidth, GB/s"
        );
        assert_eq!(figure_title(Path::new("other-figure.svg")), "other figure");
    }
}
