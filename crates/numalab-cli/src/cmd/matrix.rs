//! `numalab matrix`: measured latency and bandwidth between every CPU node
//! and every memory node, beside the firmware's SLIT and HMAT.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use numalab::{NodeSet, Topology};
use numalab_bench::matrix::{
    self, run::run_until as measure, Figure, FirmwareCell, MatrixConfig, MatrixError, MatrixResult,
    Measurements, NodeSelection, Shape,
};
use serde::Serialize;

use crate::output::{self, human_bytes, Csv, Format, OutputArgs};
use crate::plot::{self, Heatmap, LineChart, Series};

/// Measure latency and bandwidth from every CPU node to every memory node,
/// beside the firmware's SLIT and HMAT values
#[derive(Debug, Args)]
#[command(
    after_help = "Without a measurement option, measures idle latency and bandwidth.\n\n\
Examples:\n  \
  numalab matrix --quick                      a first look, in seconds\n  \
  numalab matrix                              latency + bandwidth, working set sized from the measured cache\n  \
  numalab matrix --loaded --c2c               latency under load, and core-to-core hand-over\n  \
  numalab matrix --cpu-nodes 0 --mem-nodes 0-3 --json -o m.json --plot figs/m\n  \
  numalab matrix --xml server.xml --plan      another machine's matrix shape and firmware values"
)]
pub struct MatrixArgs {
    /// Idle latency: pointer chase over a random single-cycle permutation
    /// of cache lines, huge pages where available, 4 KiB pages beside
    #[arg(long, help_heading = "Measurements")]
    pub latency: bool,

    /// Bandwidth: read, non-temporal write and copy from every CPU of the
    /// initiator node (or --threads)
    #[arg(long, help_heading = "Measurements")]
    pub bandwidth: bool,

    /// Loaded latency: the chase from one core while the node's other cores
    /// read memory harder and harder (MLC's --loaded_latency)
    #[arg(long, help_heading = "Measurements")]
    pub loaded: bool,

    /// Cache-to-cache latency: a cache line passed between two cores, on
    /// the same node and across nodes
    #[arg(long, help_heading = "Measurements")]
    pub c2c: bool,

    /// Nodes to measure, each in every role it can take (a CPU-less node
    /// is a target only); `0-3,7`, `all`, `!1`
    #[arg(long, value_name = "NODES", help_heading = "Nodes")]
    pub nodes: Option<String>,

    /// Initiator nodes (rows): nodes whose CPUs run the measurements
    #[arg(long, value_name = "NODES", help_heading = "Nodes")]
    pub cpu_nodes: Option<String>,

    /// Target nodes (columns): nodes whose memory is measured
    #[arg(long, value_name = "NODES", help_heading = "Nodes")]
    pub mem_nodes: Option<String>,

    /// Working set of the latency chase (and the least of bandwidth), e.g.
    /// 64M, 1.5G (binary units); default: 4 x the last-level cache as
    /// measured
    #[arg(long, value_name = "SIZE", value_parser = crate::args::size_usize)]
    pub size: Option<usize>,

    /// Threads per initiator node (default: all its CPUs): bandwidth
    /// workers; with --loaded, the chase plus N - 1 load generators
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: Option<u32>,

    /// Samples per figure (default 5, 3 with --quick)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub repeats: Option<u32>,

    /// Seconds, not minutes: a fixed 16 MiB working set (not sized from the cache), short samples,
    /// 4 KiB pages compared on the first cell only, a coarse load curve
    #[arg(long)]
    pub quick: bool,

    /// Pages of every working set: none (4 KiB), thp, 2M (hugetlb pool);
    /// default: 2M when the node's pool has them free, else thp, else none
    #[arg(long, value_name = "PAGES")]
    pub huge_pages: Option<numalab::HugePages>,

    /// Draw the matrices (heat maps) and the loaded-latency curve into
    /// STEM-latency.svg/.png, STEM-bandwidth-read.svg/.png, ...
    #[arg(long, value_name = "STEM")]
    pub plot: Option<PathBuf>,

    /// Show the matrix's shape and firmware values without measuring
    #[arg(long)]
    pub plan: bool,

    /// Plan for a topology exported elsewhere with `lstopo --of xml FILE`
    /// (with --plan)
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "synthetic",
        requires = "plan"
    )]
    pub xml: Option<PathBuf>,

    /// Plan for an hwloc synthetic topology (with --plan)
    #[arg(long, value_name = "DESCRIPTION", requires = "plan")]
    pub synthetic: Option<String>,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// The `--plan` document (`numalab.matrix-plan`): what would be measured.
#[derive(Debug, Serialize)]
pub struct PlanReport {
    /// Where the topology came from.
    pub source: String,
    /// Rows and columns.
    pub shape: Shape,
    /// SLIT and HMAT of every cell.
    pub firmware: Vec<FirmwareCell>,
}

/// Runs `numalab matrix`.
/// Runs `numalab matrix`; returns the exit status (130 when Ctrl-C
/// stopped it, after writing what was measured).
pub fn run(args: &MatrixArgs) -> Result<i32> {
    let topology = super::topo::load(args.xml.as_ref(), args.synthetic.as_deref())?;
    let shape = shape_of(&topology, args)?;
    let config = config_of(args);
    if args.plan {
        let plan = PlanReport {
            source: topology.source.to_string(),
            firmware: matrix::shape::firmware_cells(&topology, &shape),
            shape,
        };
        if topology.is_this_system() {
            matrix::validate(&topology, &plan.shape, &config).map_err(|e| flag_error(args, e))?;
        }
        let text = match args.output.format() {
            Format::Json => output::to_json("numalab.matrix-plan", matrix::SCHEMA_VERSION, &plan)?,
            Format::Csv => firmware_csv(&plan.firmware),
            Format::Table => plan_text(&plan, false),
            Format::Markdown => plan_text(&plan, true),
        };
        args.output.emit(&text)?;
        return Ok(0);
    }
    matrix::validate(&topology, &shape, &config).map_err(|e| flag_error(args, e))?;
    // Measuring takes a while: a result file that cannot be written is
    // refused first.
    if let Some(path) = &args.output.output {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        if let Some(dir) = dir.filter(|d| !d.is_dir()) {
            bail!(
                "-o {}: directory {} does not exist",
                path.display(),
                dir.display()
            );
        }
    }

    let show_progress = std::io::stderr().is_terminal();
    let mut progress = |line: &str| {
        if show_progress {
            eprintln!("numalab matrix: {line}");
        }
    };
    // Ctrl-C: the cell being measured is finished, the rest skipped, and
    // what was measured is written (a second Ctrl-C quits at once).
    let stop = Arc::new(AtomicBool::new(false));
    crate::exp::catch_interrupts(&stop)?;
    let result = measure(&topology, &shape, &config, &mut progress, &stop)
        .map_err(|e| flag_error(args, e))?;
    let format = args.output.format();
    let text = match format {
        Format::Json => output::to_json(matrix::SCHEMA, matrix::SCHEMA_VERSION, &result)?,
        Format::Csv => csv(&result),
        Format::Table => human(&result, false),
        Format::Markdown => human(&result, true),
    };
    // Tables carry the warnings; machine formats carry them in the data,
    // and the person running the command sees them here.
    if matches!(format, Format::Json | Format::Csv) || args.output.output.is_some() {
        for warning in &result.warnings {
            eprintln!("numalab matrix: warning: {warning}");
        }
    }
    args.output.emit(&text)?;
    if let Some(stem) = &args.plot {
        for path in draw(&result, stem)? {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(if result.interrupted {
        crate::cmd::run::EXIT_INTERRUPTED
    } else {
        0
    })
}

/// Names the option behind an error.
fn flag_error(args: &MatrixArgs, err: MatrixError) -> anyhow::Error {
    let context = match &err {
        MatrixError::TooManyThreads { threads, .. } => Some(format!("--threads {threads}")),
        MatrixError::TooLarge { .. } | MatrixError::TooSmall { .. } => args
            .size
            .map(|s| format!("--size {}", human_bytes(s as u64))),
        MatrixError::HugePagesUnavailable { .. } => {
            args.huge_pages.map(|p| format!("--huge-pages {p}"))
        }
        _ => None,
    };
    match context {
        Some(context) => anyhow::Error::new(err).context(context),
        None => anyhow::Error::new(err),
    }
}

fn shape_of(topology: &Topology, args: &MatrixArgs) -> Result<Shape> {
    let nodes = |flag: &str, spec: &Option<String>| -> Result<Option<NodeSet>> {
        spec.as_ref()
            .map(|s| {
                topology
                    .parse_nodes(s)
                    .with_context(|| format!("--{flag}={s}"))
            })
            .transpose()
    };
    let selection = NodeSelection {
        nodes: nodes("nodes", &args.nodes)?,
        cpu_nodes: nodes("cpu-nodes", &args.cpu_nodes)?,
        mem_nodes: nodes("mem-nodes", &args.mem_nodes)?,
    };
    // `all` and `!list` mean the nodes that can take the role.
    let selection = NodeSelection {
        cpu_nodes: selection.cpu_nodes.map(|set| {
            if is_wide(&args.cpu_nodes) {
                set.intersection(&topology.nodes_with_cpus())
            } else {
                set
            }
        }),
        mem_nodes: selection.mem_nodes.map(|set| {
            if is_wide(&args.mem_nodes) {
                set.intersection(&topology.nodes_with_memory())
            } else {
                set
            }
        }),
        ..selection
    };
    Shape::of(topology, &selection).map_err(|err| {
        let flag = match &err {
            MatrixError::Spec(numalab::SpecError::NodeWithoutCpus { .. })
            | MatrixError::NoUsableCpus { .. } => args.cpu_nodes.as_ref().map(|s| ("cpu-nodes", s)),
            MatrixError::Spec(numalab::SpecError::NodeWithoutMemory { .. }) => {
                args.mem_nodes.as_ref().map(|s| ("mem-nodes", s))
            }
            MatrixError::NoInitiators { .. } | MatrixError::NoTargets { .. } => args
                .nodes
                .as_ref()
                .map(|s| ("nodes", s))
                .or(args.cpu_nodes.as_ref().map(|s| ("cpu-nodes", s)))
                .or(args.mem_nodes.as_ref().map(|s| ("mem-nodes", s))),
            _ => None,
        };
        match flag {
            Some((flag, spec)) => anyhow::Error::new(err).context(format!("--{flag}={spec}")),
            None => anyhow::Error::new(err),
        }
    })
}

fn is_wide(spec: &Option<String>) -> bool {
    spec.as_deref()
        .is_some_and(|s| s.trim() == "all" || s.trim().starts_with('!'))
}

fn config_of(args: &MatrixArgs) -> MatrixConfig {
    let base = if args.quick {
        MatrixConfig::quick()
    } else {
        MatrixConfig::full()
    };
    let any = args.latency || args.bandwidth || args.loaded || args.c2c;
    MatrixConfig {
        measurements: if any {
            Measurements {
                latency: args.latency,
                bandwidth: args.bandwidth,
                loaded: args.loaded,
                c2c: args.c2c,
            }
        } else {
            Measurements::default()
        },
        size: args.size,
        threads: args.threads.map(|t| t as usize),
        repeats: args.repeats.map_or(base.repeats, |r| r as usize),
        huge_pages: args.huge_pages,
        ..base
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
        "matrix plan for {}: {} CPU node(s) {:?} x {} memory node(s) {:?}",
        plan.source,
        shape.initiators.len(),
        shape.initiators,
        shape.targets.len(),
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
pub(crate) fn human(result: &MatrixResult, markdown: bool) -> String {
    let mut out = String::new();
    let shape = &result.shape;
    let s = &result.settings;
    if let Some(env) = &result.environment {
        let _ = writeln!(
            out,
            "numalab matrix on {} ({}), Linux {}",
            env.host.hostname,
            env.host.cpu_model.as_deref().unwrap_or("unknown CPU"),
            env.host.kernel
        );
    }
    let m = s.measurements;
    let mut sets = Vec::new();
    if m.latency || m.loaded {
        sets.push(format!("chase {}", human_bytes(s.latency_bytes as u64)));
    }
    if m.bandwidth || m.loaded {
        sets.push(format!("streams {}", human_bytes(s.bandwidth_bytes as u64)));
    }
    let _ = writeln!(
        out,
        "{} CPU node(s) x {} memory node(s); working sets: {} ({}); {} sample(s) of ~{} ms per figure",
        shape.initiators.len(),
        shape.targets.len(),
        if sets.is_empty() {
            "none".to_owned()
        } else {
            sets.join(", ")
        },
        s.size_source,
        s.repeats,
        s.sample_ms
    );
    for note in &shape.notes {
        let _ = writeln!(out, "  {note}");
    }
    if let Some(sweep) = &result.cache_sweep {
        let points = sweep
            .points
            .iter()
            .map(|p| format!("{} {:.0}", human_bytes(p.bytes as u64), p.ns))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            out,
            "cache sweep (ns per load by working set, CPU {} on node {}): {points}; knee at {}",
            sweep.cpu,
            sweep.node,
            sweep
                .knee_bytes
                .map_or("none found".into(), |k| human_bytes(k as u64))
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
            human_bytes(s.bandwidth_bytes as u64)
        );
        out.push_str(&output::render(&table));
    }

    if let Some(curves) = &result.loaded {
        for curve in curves {
            let _ = writeln!(
                out,
                "\nloaded latency {} -> {}: chase on CPU {}, load from CPU(s) {}",
                curve.initiator,
                curve.target,
                curve.chase_cpu,
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
fn csv(result: &MatrixResult) -> String {
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

// ---------------------------------------------------------------------
// Figures

/// Redraws the figures of a saved `numalab matrix --json` document (the
/// whole document, envelope included) under `stem`; returns the files
/// written. `numalab plot RESULTS.json` calls this for matrix results.
pub fn figures(document: &serde_json::Value, stem: &Path) -> Result<Vec<PathBuf>> {
    let schema = document["schema"].as_str().unwrap_or("");
    if schema != matrix::SCHEMA {
        bail!(
            "not a matrix result: schema {schema:?}, expected {:?}",
            matrix::SCHEMA
        );
    }
    let version = document["schema_version"].as_u64().unwrap_or(0);
    if version != u64::from(matrix::SCHEMA_VERSION) {
        bail!(
            "matrix result schema version {version}; this numalab reads version {}",
            matrix::SCHEMA_VERSION
        );
    }
    let result: MatrixResult =
        serde_json::from_value(document.clone()).context("reading the matrix result")?;
    draw(&result, stem)
}

/// `stem` with `-suffix` appended to its file name.
fn suffixed(stem: &Path, suffix: &str) -> PathBuf {
    let name = stem
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "matrix".into());
    stem.with_file_name(format!("{name}-{suffix}"))
}

/// Draws every figure `result` has data for: a heat map per matrix and
/// the loaded-latency curves.
pub fn draw(result: &MatrixResult, stem: &Path) -> Result<Vec<PathBuf>> {
    if let Some(dir) = stem.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let shape = &result.shape;
    let names = |nodes: &[u32]| nodes.iter().map(|n| format!("node {n}")).collect();
    let matrix_of = |value: &dyn Fn(u32, u32) -> Option<f64>| -> Vec<Vec<Option<f64>>> {
        shape
            .initiators
            .iter()
            .map(|&i| shape.targets.iter().map(|&t| value(i, t)).collect())
            .collect()
    };
    let heat = |title: String, unit: &str, values| Heatmap {
        title,
        row_label: "CPU node".into(),
        col_label: "memory node".into(),
        rows: names(&shape.initiators),
        cols: names(&shape.targets),
        values,
        unit: unit.into(),
    };
    let mut written = Vec::new();
    if let Some(latency) = &result.latency {
        let values = matrix_of(&|i, t| {
            latency
                .cells
                .iter()
                .find(|c| c.initiator == i && c.target == t)
                .map(|c| c.latency_ns.median())
        });
        let map = heat(
            format!(
                "idle latency, ns ({} working set)",
                human_bytes(result.settings.latency_bytes as u64)
            ),
            "ns",
            values,
        );
        written.extend(plot::heatmap(&map, &suffixed(stem, "latency"))?);
    }
    if let Some(bandwidth) = &result.bandwidth {
        type Pick = fn(&matrix::BandwidthCell) -> Option<&Figure>;
        let kernels: [(&str, &str, Pick); 3] = [
            ("read", "read", |c| c.read_gbps.as_ref()),
            ("write", "write (non-temporal)", |c| c.write_gbps.as_ref()),
            ("copy", "copy (non-temporal)", |c| c.copy_gbps.as_ref()),
        ];
        for (suffix, title, pick) in kernels {
            let values = matrix_of(&|i, t| {
                bandwidth
                    .cells
                    .iter()
                    .find(|c| c.initiator == i && c.target == t)
                    .and_then(pick)
                    .map(Figure::median)
            });
            let map = heat(format!("{title} bandwidth, GB/s"), "GB/s", values);
            written.extend(plot::heatmap(
                &map,
                &suffixed(stem, &format!("bandwidth-{suffix}")),
            )?);
        }
    }
    if let Some(curves) = result.loaded.as_ref().filter(|c| !c.is_empty()) {
        let chart = LineChart {
            title: "loaded latency".into(),
            x_label: "load bandwidth, GB/s".into(),
            y_label: "latency, ns".into(),
            series: curves
                .iter()
                .map(|c| Series {
                    name: format!("CPU node {} -> memory node {}", c.initiator, c.target),
                    points: c
                        .points
                        .iter()
                        .map(|p| (p.load_gbps, p.latency_ns.median()))
                        .collect(),
                })
                .collect(),
        };
        written.extend(plot::line_chart(&chart, &suffixed(stem, "loaded"))?);
    }
    if let Some(c2c) = result.c2c.as_ref().filter(|c| !c.cells.is_empty()) {
        let values = c2c
            .nodes
            .iter()
            .map(|&a| {
                c2c.nodes
                    .iter()
                    .map(|&b| {
                        c2c.cells
                            .iter()
                            .find(|c| c.node_a == a && c.node_b == b)
                            .map(|c| c.latency_ns.median())
                    })
                    .collect()
            })
            .collect();
        let map = Heatmap {
            title: "cache-to-cache latency, ns per hand-over".into(),
            row_label: "node of the first core".into(),
            col_label: "node of the second core".into(),
            rows: names(&c2c.nodes),
            cols: names(&c2c.nodes),
            values,
            unit: "ns".into(),
        };
        written.extend(plot::heatmap(&map, &suffixed(stem, "c2c"))?);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small real run of every measurement on this machine's first node.
    fn small_run() -> MatrixResult {
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
        measure(
            &topology,
            &shape,
            &config,
            &mut |_| {},
            &AtomicBool::new(false),
        )
        .unwrap()
    }

    #[test]
    fn figures_are_redrawn_from_the_saved_document() {
        let result = small_run();
        let text = output::to_json(matrix::SCHEMA, matrix::SCHEMA_VERSION, &result).unwrap();
        let document: serde_json::Value = serde_json::from_str(&text).unwrap();
        let dir = std::env::temp_dir().join(format!("numalab-figures-{}", std::process::id()));
        let written = figures(&document, &dir.join("sub/run.1")).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for expected in [
            "run.1-latency.svg",
            "run.1-bandwidth-read.png",
            "run.1-bandwidth-copy.svg",
        ] {
            assert!(names.contains(&expected.to_string()), "{names:?}");
        }
        let two_cpus = result.loaded.as_ref().is_some_and(|c| !c.is_empty());
        assert_eq!(names.contains(&"run.1-loaded.svg".to_string()), two_cpus);
        assert_eq!(
            names.contains(&"run.1-c2c.svg".to_string()),
            result.c2c.as_ref().is_some_and(|c| !c.cells.is_empty())
        );
        for path in &written {
            assert!(
                std::fs::metadata(path).unwrap().len() > 0,
                "{}",
                path.display()
            );
        }
        let svg = std::fs::read_to_string(dir.join("sub/run.1-latency.svg")).unwrap();
        assert!(svg.contains("idle latency"), "titled");
        std::fs::remove_dir_all(&dir).unwrap();

        let mut other = document.clone();
        other["schema"] = "numalab.topo".into();
        let err = figures(&other, &dir.join("x")).unwrap_err().to_string();
        assert!(err.contains("not a matrix result"), "{err}");
        let mut newer = document;
        newer["schema_version"] = 99.into();
        let err = figures(&newer, &dir.join("x")).unwrap_err().to_string();
        assert!(err.contains("version 99"), "{err}");
    }

    #[test]
    fn every_format_shows_every_measurement() {
        let result = small_run();
        let table = human(&result, false);
        for needle in [
            "idle latency, ns (median)",
            "bandwidth, GB/s (median)",
            "placement: ",
        ] {
            assert!(table.contains(needle), "{needle}:\n{table}");
        }
        let markdown = human(&result, true);
        assert!(markdown.contains("| CPU \\ mem"), "{markdown}");
        let csv = csv(&result);
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

    #[test]
    fn stems_keep_their_dots() {
        assert_eq!(
            suffixed(Path::new("out/run.1"), "latency"),
            PathBuf::from("out/run.1-latency")
        );
    }
}
