//! `numalab matrix` for people: the measured matrices beside the
//! firmware's SLIT and HMAT, each figure in detail, and the `--plan`
//! document (shape and firmware values, nothing measured).

use std::fmt::Write as _;

use numalab::units::count;
use numalab_bench::matrix::{self, Figure, FirmwareCell, MatrixReport, PlanReport, Shape};

use super::{Render, Style};
use crate::output::{self, Csv};
use numalab::units::format_size;

impl Render for MatrixReport {
    fn text(&self, style: Style) -> String {
        human(self, style == Style::Markdown)
    }

    fn csv(&self) -> String {
        csv(self)
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.iter().map(|w| w.to_string()).collect()
    }
}

impl Render for PlanReport {
    fn text(&self, style: Style) -> String {
        plan_text(self, style == Style::Markdown)
    }

    fn csv(&self) -> String {
        firmware_csv(&self.firmware)
    }
}

// ---------------------------------------------------------------------
// Tables

fn new_table(markdown: bool, header: Vec<String>) -> comfy_table::Table {
    if markdown {
        output::markdown_table(header)
    } else {
        output::table(header)
    }
}

fn opt<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or("-".into(), |v| v.to_string())
}

fn ratio(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{v:.2}x"))
}

fn cv(figure: &Figure) -> String {
    format!(
        "{:.1}%{}",
        figure.summary.cv * 100.0,
        if figure.noisy { " noisy" } else { "" }
    )
}

fn verdict(audit: &numalab::audit::PlacementAudit) -> String {
    serde_json::to_value(audit.verdict)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// A rows x columns view of one figure per cell.
fn grid(
    markdown: bool,
    rows: &[u32],
    cols: &[u32],
    value: impl Fn(u32, u32) -> Option<String>,
) -> String {
    let mut header = vec!["CPU \\ mem".to_string()];
    header.extend(cols.iter().map(|c| format!("node {c}")));
    let mut table = new_table(markdown, header);
    for &r in rows {
        let mut row = vec![format!("node {r}")];
        row.extend(cols.iter().map(|&c| value(r, c).unwrap_or("-".into())));
        table.add_row(row);
    }
    output::render(&table)
}

/// The plan: shape and firmware values, nothing measured.
fn plan_text(plan: &PlanReport, markdown: bool) -> String {
    let mut out = String::new();
    let shape = &plan.shape;
    let _ = writeln!(
        out,
        "matrix plan for {}: {} {:?} x {} {:?}",
        plan.source,
        count(shape.initiators.len(), "CPU node"),
        shape.initiators,
        count(shape.targets.len(), "memory node"),
        shape.targets
    );
    for note in &shape.notes {
        let _ = writeln!(out, "  {note}");
    }
    out.push_str(&firmware_text(&plan.firmware, shape, markdown));
    out
}

fn firmware_text(firmware: &[FirmwareCell], shape: &Shape, markdown: bool) -> String {
    let mut out = String::new();
    let find = |i: u32, t: u32| firmware.iter().find(|c| c.initiator == i && c.target == t);
    if firmware.iter().any(|c| c.firmware.slit.is_some()) {
        out.push_str("\nfirmware distances (SLIT, 10 = local)\n");
        out.push_str(&grid(
            markdown,
            &shape.initiators,
            &shape.targets,
            |i, t| find(i, t)?.firmware.slit.map(|d| d.to_string()),
        ));
    } else {
        out.push_str("\nfirmware distances (SLIT): none\n");
    }
    if firmware
        .iter()
        .any(|c| c.firmware.latency_ns().is_some() || c.firmware.bandwidth_mib_s().is_some())
    {
        out.push_str("\nfirmware HMAT: latency ns / bandwidth MiB/s\n");
        out.push_str(&grid(
            markdown,
            &shape.initiators,
            &shape.targets,
            |i, t| {
                let f = &find(i, t)?.firmware;
                Some(format!(
                    "{} / {}",
                    opt(f.latency_ns()),
                    opt(f.bandwidth_mib_s())
                ))
            },
        ));
    } else {
        out.push_str("\nfirmware HMAT: none\n");
    }
    out
}

/// The human report.
pub fn human(result: &MatrixReport, markdown: bool) -> String {
    let mut out = String::new();
    let shape = &result.shape;
    let s = &result.settings;
    if let Some(env) = &result.environment {
        let _ = writeln!(
            out,
            "numalab matrix on {} ({}), Linux {}",
            output::printable_field(&env.host.hostname),
            output::printable_field(env.host.cpu_model.as_deref().unwrap_or("unknown CPU")),
            output::printable_field(&env.host.kernel)
        );
    }
    let m = s.measurements;
    let mut sets = Vec::new();
    if m.latency || m.loaded {
        sets.push(format!("chase {}", format_size(s.latency_bytes as u64)));
    }
    if m.bandwidth || m.loaded {
        sets.push(format!("streams {}", format_size(s.bandwidth_bytes as u64)));
    }
    let _ = writeln!(
        out,
        "{} x {}; working sets: {} ({}); {} of ~{} ms per figure",
        count(shape.initiators.len(), "CPU node"),
        count(shape.targets.len(), "memory node"),
        if sets.is_empty() {
            "none".to_owned()
        } else {
            sets.join(", ")
        },
        s.size_source,
        count(s.repeats, "sample"),
        s.sample_ms
    );
    for note in &shape.notes {
        let _ = writeln!(out, "  {note}");
    }
    if let Some(sweep) = &result.cache_sweep {
        let points = sweep
            .points
            .iter()
            .map(|p| format!("{} {:.0}", format_size(p.bytes as u64), p.ns))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            out,
            "cache sweep (ns per load by working set, CPU {} on node {}): {points}; knee at {}",
            sweep.cpu,
            sweep.node,
            sweep
                .knee_bytes
                .map_or("none found".into(), |k| format_size(k as u64))
        );
    }
    let mut firmware_shown = false;

    if let Some(latency) = &result.latency {
        let find = |i: u32, t: u32| {
            latency
                .cells
                .iter()
                .find(|c| c.initiator == i && c.target == t)
        };
        out.push_str("\nidle latency, ns (median), CPU node -> memory node\n");
        out.push_str(&grid(
            markdown,
            &shape.initiators,
            &shape.targets,
            |i, t| find(i, t).map(|c| format!("{:.1}", c.latency_ns.median())),
        ));
        out.push_str("\nremote/local latency: measured | firmware SLIT/10\n");
        out.push_str(&grid(
            markdown,
            &shape.initiators,
            &shape.targets,
            |i, t| {
                let c = find(i, t)?;
                Some(format!(
                    "{} | {}",
                    ratio(c.ratio_to_local),
                    ratio(c.firmware.slit_ratio)
                ))
            },
        ));
        firmware_shown = true;
        let mut table = new_table(
            markdown,
            [
                "cpu node",
                "mem node",
                "CPU",
                "pages",
                "ns",
                "CV",
                "cycles",
                "4K pages ns",
                "4K +",
                "remote/local",
                "SLIT",
                "SLIT/10",
                "HMAT ns",
                "placement",
            ]
            .map(String::from)
            .to_vec(),
        );
        for c in &latency.cells {
            table.add_row(vec![
                c.initiator.to_string(),
                c.target.to_string(),
                c.cpu.to_string(),
                c.pages.label(),
                format!("{:.1}", c.latency_ns.median()),
                cv(&c.latency_ns),
                c.cycles.map_or("-".into(), |v| format!("{v:.0}")),
                c.base_pages
                    .as_ref()
                    .map_or("-".into(), |b| format!("{:.1}", b.latency_ns.median())),
                c.base_pages
                    .as_ref()
                    .map_or("-".into(), |b| format!("{:+.0}%", b.inflation * 100.0)),
                ratio(c.ratio_to_local),
                opt(c.firmware.slit),
                ratio(c.firmware.slit_ratio),
                opt(c.firmware.latency_ns()),
                verdict(&c.placement),
            ]);
        }
        out.push_str("\nidle latency in detail\n");
        out.push_str(&output::render(&table));
    }

    if let Some(bandwidth) = &result.bandwidth {
        let find = |i: u32, t: u32| {
            bandwidth
                .cells
                .iter()
                .find(|c| c.initiator == i && c.target == t)
        };
        let median = |f: &Option<Figure>| f.as_ref().map(|f| format!("{:.1}", f.median()));
        out.push_str(
            "\nbandwidth, GB/s (median): read / write (non-temporal) / copy, CPU node -> memory node\n",
        );
        out.push_str(&grid(
            markdown,
            &shape.initiators,
            &shape.targets,
            |i, t| {
                let c = find(i, t)?;
                Some(format!(
                    "{} / {} / {}",
                    median(&c.read_gbps).unwrap_or("-".into()),
                    median(&c.write_gbps).unwrap_or("-".into()),
                    median(&c.copy_gbps).unwrap_or("-".into())
                ))
            },
        ));
        let mut table = new_table(
            markdown,
            [
                "cpu node",
                "mem node",
                "threads",
                "read",
                "CV",
                "write",
                "CV",
                "copy",
                "CV",
                "read remote/local",
                "SLIT/10",
                "HMAT MiB/s",
                "placement",
            ]
            .map(String::from)
            .to_vec(),
        );
        for c in &bandwidth.cells {
            let fig = |f: &Option<Figure>| {
                f.as_ref().map_or(("-".into(), "-".into()), |f| {
                    (format!("{:.1}", f.median()), cv(f))
                })
            };
            let (r, rcv) = fig(&c.read_gbps);
            let (w, wcv) = fig(&c.write_gbps);
            let (k, kcv) = fig(&c.copy_gbps);
            table.add_row(vec![
                c.initiator.to_string(),
                c.target.to_string(),
                c.cpus.len().to_string(),
                r,
                rcv,
                w,
                wcv,
                k,
                kcv,
                ratio(c.read_ratio_to_local),
                ratio(c.firmware.slit_ratio),
                opt(c.firmware.bandwidth_mib_s()),
                verdict(&c.placement),
            ]);
        }
        let _ = writeln!(
            out,
            "\nbandwidth in detail (GB/s; {} working set per cell; copy counts bytes read + written)",
            format_size(s.bandwidth_bytes as u64)
        );
        out.push_str(&output::render(&table));
    }

    if let Some(curves) = &result.loaded {
        for curve in curves {
            let _ = writeln!(
                out,
                "\nloaded latency {} -> {}: chase on CPU {}, load from {} {}",
                curve.initiator,
                curve.target,
                curve.chase_cpu,
                if curve.load_cpus.len() == 1 {
                    "CPU"
                } else {
                    "CPUs"
                },
                curve
                    .load_cpus
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            );
            let mut table = new_table(
                markdown,
                ["injected delay", "load GB/s", "latency ns", "CV"]
                    .map(String::from)
                    .to_vec(),
            );
            for p in &curve.points {
                table.add_row(vec![
                    p.delay.map_or("idle".into(), |d| d.to_string()),
                    format!("{:.2}", p.load_gbps),
                    format!("{:.1}", p.latency_ns.median()),
                    cv(&p.latency_ns),
                ]);
            }
            out.push_str(&output::render(&table));
        }
    }

    if let Some(c2c) = &result.c2c {
        out.push_str("\ncache-to-cache latency, ns per hand-over (median)\n");
        let find = |a: u32, b: u32| c2c.cells.iter().find(|c| c.node_a == a && c.node_b == b);
        out.push_str(&grid(markdown, &c2c.nodes, &c2c.nodes, |a, b| {
            find(a, b).map(|c| {
                format!(
                    "{:.1} (CPUs {},{})",
                    c.latency_ns.median(),
                    c.cpu_a,
                    c.cpu_b
                )
            })
        }));
    }

    if !firmware_shown {
        out.push_str(&firmware_text(&result.firmware, shape, markdown));
    }
    let p = &result.placement_summary;
    let _ = writeln!(
        out,
        "\nplacement: {} of {} working sets entirely on their target node",
        p.matching, p.checked
    );
    for warning in &result.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
    out
}

// ---------------------------------------------------------------------
// CSV

const CSV_HEADER: [&str; 21] = [
    "measurement",
    "initiator",
    "target",
    "cpus",
    "variant",
    "pages",
    "size_bytes",
    "unit",
    "median",
    "min",
    "max",
    "cv",
    "n",
    "noisy",
    "ratio_to_local",
    "slit",
    "slit_ratio",
    "hmat",
    "load_gbps",
    "placement",
    "samples",
];

#[allow(clippy::too_many_arguments)]
fn csv_row(
    csv: &mut Csv,
    measurement: &str,
    (initiator, target): (u32, u32),
    cpus: &[u32],
    variant: String,
    pages: String,
    size: usize,
    unit: &str,
    figure: &Figure,
    ratio: Option<f64>,
    firmware: Option<&matrix::Firmware>,
    hmat: Option<u64>,
    load_gbps: Option<f64>,
    placement: &numalab::audit::PlacementAudit,
) {
    csv.row([
        measurement.to_string(),
        initiator.to_string(),
        target.to_string(),
        cpus.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(" "),
        variant,
        pages,
        size.to_string(),
        unit.to_string(),
        format!("{:.3}", figure.summary.median),
        format!("{:.3}", figure.summary.min),
        format!("{:.3}", figure.summary.max),
        format!("{:.4}", figure.summary.cv),
        figure.summary.n.to_string(),
        figure.noisy.to_string(),
        ratio.map_or(String::new(), |r| format!("{r:.4}")),
        firmware
            .and_then(|f| f.slit)
            .map_or(String::new(), |d| d.to_string()),
        firmware
            .and_then(|f| f.slit_ratio)
            .map_or(String::new(), |r| format!("{r:.4}")),
        hmat.map_or(String::new(), |h| h.to_string()),
        load_gbps.map_or(String::new(), |g| format!("{g:.3}")),
        verdict(placement),
        figure
            .samples
            .iter()
            .map(|s| format!("{s:.3}"))
            .collect::<Vec<_>>()
            .join(" "),
    ]);
}

/// One row per figure: latency cells (and their 4 KiB comparison),
/// bandwidth per kernel, loaded-latency points, cache-to-cache pairs.
fn csv(result: &MatrixReport) -> String {
    let mut csv = Csv::new(&CSV_HEADER);
    for c in result.latency.iter().flat_map(|m| &m.cells) {
        let cell = (c.initiator, c.target);
        csv_row(
            &mut csv,
            "latency",
            cell,
            &[c.cpu],
            "idle".into(),
            c.pages.label(),
            c.size_bytes,
            "ns",
            &c.latency_ns,
            c.ratio_to_local,
            Some(&c.firmware),
            c.firmware.latency_ns(),
            None,
            &c.placement,
        );
        if let Some(base) = &c.base_pages {
            csv_row(
                &mut csv,
                "latency",
                cell,
                &[c.cpu],
                "idle-4k-pages".into(),
                "4K".into(),
                c.size_bytes,
                "ns",
                &base.latency_ns,
                None,
                Some(&c.firmware),
                c.firmware.latency_ns(),
                None,
                &base.placement,
            );
        }
    }
    for c in result.bandwidth.iter().flat_map(|m| &m.cells) {
        for (kernel, figure) in [
            ("read", &c.read_gbps),
            ("write-nt", &c.write_gbps),
            ("copy-nt", &c.copy_gbps),
        ] {
            let Some(figure) = figure else { continue };
            csv_row(
                &mut csv,
                "bandwidth",
                (c.initiator, c.target),
                &c.cpus,
                kernel.into(),
                c.pages.label(),
                c.size_bytes,
                "GB/s",
                figure,
                (kernel == "read")
                    .then_some(c.read_ratio_to_local)
                    .flatten(),
                Some(&c.firmware),
                c.firmware.bandwidth_mib_s(),
                None,
                &c.placement,
            );
        }
    }
    for curve in result.loaded.iter().flatten() {
        for p in &curve.points {
            let mut cpus = vec![curve.chase_cpu];
            cpus.extend(&curve.load_cpus);
            csv_row(
                &mut csv,
                "loaded-latency",
                (curve.initiator, curve.target),
                &cpus,
                p.delay.map_or("idle".into(), |d| format!("delay={d}")),
                curve.pages.label(),
                curve.size_bytes,
                "ns",
                &p.latency_ns,
                None,
                None,
                None,
                Some(p.load_gbps),
                &curve.placement,
            );
        }
    }
    for c in result.c2c.iter().flat_map(|m| &m.cells) {
        csv_row(
            &mut csv,
            "cache-to-cache",
            (c.node_a, c.node_b),
            &[c.cpu_a, c.cpu_b],
            "ping-pong".into(),
            String::new(),
            64,
            "ns",
            &c.latency_ns,
            None,
            None,
            None,
            None,
            &c.placement,
        );
    }
    csv.finish()
}

fn firmware_csv(firmware: &[FirmwareCell]) -> String {
    let mut csv = Csv::new(&[
        "initiator",
        "target",
        "slit",
        "slit_ratio",
        "hmat_latency_ns",
        "hmat_bandwidth_mib_s",
    ]);
    for c in firmware {
        csv.row([
            c.initiator.to_string(),
            c.target.to_string(),
            opt(c.firmware.slit),
            c.firmware
                .slit_ratio
                .map_or("-".into(), |r| format!("{r:.3}")),
            opt(c.firmware.latency_ns()),
            opt(c.firmware.bandwidth_mib_s()),
        ]);
    }
    csv.finish()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use numalab::{NodeSet, Topology};
    use numalab_bench::control::Control;
    use numalab_bench::matrix::{run::run, MatrixConfig, Measurements, NodeSelection};

    /// A small real run of every measurement on this machine's first node.
    pub(crate) fn small_run() -> MatrixReport {
        let topology = Topology::system().unwrap();
        let first: NodeSet = topology.nodes_with_cpus().iter().take(1).collect();
        let home = topology.nodes_with_memory().first().unwrap();
        let shape = Shape::of(
            &topology,
            &NodeSelection {
                cpu_nodes: Some(first),
                mem_nodes: Some(NodeSet::single(home)),
                ..Default::default()
            },
        )
        .unwrap();
        let config = MatrixConfig {
            measurements: Measurements {
                latency: true,
                bandwidth: true,
                loaded: true,
                c2c: true,
            },
            size: Some(1 << 20),
            repeats: 2,
            ..MatrixConfig::quick()
        };
        run(&topology, &shape, &config, &Control::new()).unwrap()
    }

    #[test]
    fn every_format_shows_every_measurement() {
        let result = small_run();
        let table = result.text(Style::Plain);
        for needle in [
            "idle latency, ns (median)",
            "bandwidth, GB/s (median)",
            "placement: ",
        ] {
            assert!(table.contains(needle), "{needle}:\n{table}");
        }
        let markdown = result.text(Style::Markdown);
        assert!(markdown.contains("| CPU \\ mem"), "{markdown}");
        let csv = result.csv();
        let measurements: Vec<&str> = csv
            .lines()
            .skip(1)
            .map(|l| l.split(',').next().unwrap())
            .collect();
        let latency_rows = 1 + usize::from(
            result.latency.as_ref().unwrap().cells[0]
                .base_pages
                .is_some(),
        );
        assert_eq!(
            measurements.iter().filter(|m| **m == "latency").count(),
            latency_rows
        );
        assert_eq!(
            measurements.iter().filter(|m| **m == "bandwidth").count(),
            3
        );
        let points: usize = result.loaded.iter().flatten().map(|c| c.points.len()).sum();
        assert_eq!(
            measurements
                .iter()
                .filter(|m| **m == "loaded-latency")
                .count(),
            points
        );
        for line in csv.lines() {
            assert_eq!(line.split(',').count(), CSV_HEADER.len(), "{line}");
        }
    }
}
