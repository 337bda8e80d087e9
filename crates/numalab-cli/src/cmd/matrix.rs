//! `numalab matrix`: measured latency and bandwidth between every CPU node
//! and every memory node, beside the firmware's SLIT and HMAT.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use numalab::topology::hwloc_xml;
use numalab::{NodeSet, Role, Topology};
use numalab_bench::matrix::{
    self, hwloc, run::run as measure, MatrixConfig, MatrixError, MatrixReport, Measurements,
    NodeSelection, PlanReport, Shape,
};

use crate::output::{self, OutputArgs};
use crate::render;
use numalab::units::format_size;

// The rendering's former paths, still used by `numalab report`.

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
  numalab matrix --hwloc-xml m.xml            the figures for hwloc: lstopo -i m.xml --memattrs\n  \
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

    /// Seconds, not minutes: fixed working sets (32 MiB chase, 128 MiB
    /// streams; 4 MiB on an emulated CPU), not sized from the cache; 10 ms
    /// samples, 3 per figure; 4 KiB pages compared on the first cell only;
    /// a 3-point load curve for the first CPU node only
    #[arg(long)]
    pub quick: bool,

    /// Pages of every working set: none (4 KiB), thp, 2M (hugetlb pool);
    /// default: 2M when the node's pool has them free, else thp, else none
    #[arg(long, value_name = "PAGES")]
    pub huge_pages: Option<numalab::HugePages>,

    /// Draw the matrices (heat maps) and the loaded-latency curve into
    /// STEM-latency.svg/.png, STEM-bandwidth-read.svg/.png, ... (STEM's
    /// directory must exist)
    #[arg(long, value_name = "STEM")]
    pub plot: Option<PathBuf>,

    /// Also write this machine's topology as hwloc XML (as `lstopo --of
    /// xml` writes it) with the measured figures as hwloc memory
    /// attributes, from each CPU node's cpuset to each memory node: Latency
    /// and ReadLatency = the idle latency, ns; ReadBandwidth = read,
    /// WriteBandwidth = non-temporal write, Bandwidth = their mean
    /// (hwloc's definition), MiB/s; medians, rounded. Firmware (HMAT)
    /// values for the measured pairs are replaced, others kept. Read it
    /// with `lstopo -i FILE --memattrs`, or give it to hwloc-based
    /// runtimes with HWLOC_XMLFILE=FILE. Needs latency or bandwidth
    /// measured
    #[arg(long, value_name = "FILE", conflicts_with = "plan")]
    pub hwloc_xml: Option<PathBuf>,

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

/// Runs `numalab matrix`; returns the exit status (128 + the signal when
/// Ctrl-C, SIGTERM or SIGHUP stopped it, after writing what was measured).
pub fn run(args: &MatrixArgs) -> Result<i32> {
    args.output.check()?;
    let topology = crate::args::topology(args.xml.as_ref(), args.synthetic.as_deref())?;
    let shape = shape_of(&topology, args)?;
    let config = config_of(args);
    if args.plan {
        let plan = PlanReport::of(&topology, shape);
        if topology.is_this_system() {
            matrix::validate(&topology, &plan.shape, &config).map_err(|e| flag_error(args, e))?;
        }
        render::emit(&plan, &args.output)?;
        return Ok(0);
    }
    matrix::validate(&topology, &shape, &config).map_err(|e| flag_error(args, e))?;
    // Measuring takes a while: figures that cannot be written are refused
    // first (the -o file was checked above).
    if let Some(stem) = &args.plot {
        crate::plot::check_stem(stem)?;
    }
    if let Some(path) = &args.hwloc_xml {
        check_hwloc_xml(path, &config.measurements, &args.output)?;
    }

    // Ctrl-C, SIGTERM, SIGHUP: the cell being measured is finished, the
    // rest skipped, and what was measured is written (a second signal
    // quits at once).
    let control = crate::signals::control_for_terminal("numalab matrix: ");
    let interrupts = crate::signals::Interrupts::catch(&control)?;
    let result = measure(&topology, &shape, &config, &control).map_err(|e| flag_error(args, e))?;
    // Tables carry the warnings; machine formats carry them in the data,
    // and the person running the command sees them on standard error.
    render::emit(&result, &args.output)?;
    if let Some(stem) = &args.plot {
        for path in render::figures::draw_matrix(&result, stem)? {
            eprintln!(
                "wrote {}",
                output::printable_field(&path.display().to_string())
            );
        }
    }
    if let Some(path) = &args.hwloc_xml {
        if write_hwloc_xml(path, &topology, &result)? {
            eprintln!(
                "wrote {}",
                output::printable_field(&path.display().to_string())
            );
        }
    }
    Ok(if result.interrupted {
        interrupts.exit_status().unwrap_or(1)
    } else {
        0
    })
}

/// Refuses an `--hwloc-xml` file that could not be written (the checks of
/// [`crate::output::check_target`], with hints for this flag rather than
/// for `-o`), that is the `-o` file too, or that would carry no figure.
fn check_hwloc_xml(path: &Path, measurements: &Measurements, output: &OutputArgs) -> Result<()> {
    use numalab::files::OutputError;
    let flag = format!("--hwloc-xml {}", path.display());
    if !measurements.latency && !measurements.bandwidth {
        bail!(
            "{flag}: the file carries idle latency and bandwidth, and neither is measured; \
             add --latency or --bandwidth"
        );
    }
    if output.file() == Some(path) {
        bail!("{flag}: -o names the same file; name another for one of them");
    }
    numalab::files::check_output(path).map_err(|err| {
        let hint = match &err {
            OutputError::NotAFile {
                kind: "directory", ..
            } => "; name a file in it",
            OutputError::NotAFile { .. } => "; name a regular file, or a new one",
            OutputError::NoDirectory { .. } => "; create it first",
            _ => "",
        };
        anyhow!("{flag}: {err}{hint}")
    })?;
    Ok(())
}

/// Writes `result`'s figures into hwloc's XML of `topology`, atomically;
/// says whether it did (a run stopped before its first figure writes
/// nothing, and keeps its exit status).
fn write_hwloc_xml(path: &Path, topology: &Topology, result: &MatrixReport) -> Result<bool> {
    let flag = format!("--hwloc-xml {}", path.display());
    let (values, left_out) = hwloc::values(result);
    for cell in &left_out {
        eprintln!(
            "numalab: warning: {flag}: {cell} left out: its pages were not all on the target node"
        );
    }
    if values.is_empty() && result.interrupted {
        eprintln!("numalab: warning: {flag}: not written: stopped before any figure was measured");
        return Ok(false);
    }
    if values.is_empty() {
        bail!("{flag}: no figure to write: no working set was on its target node");
    }
    let xml = hwloc_xml::export(topology, &values).with_context(|| flag.clone())?;
    crate::output::write_atomically(path, xml.as_bytes()).with_context(|| flag)?;
    Ok(true)
}

/// Names the option behind an error.
fn flag_error(args: &MatrixArgs, err: MatrixError) -> anyhow::Error {
    let context = match &err {
        MatrixError::TooManyThreads { threads, .. } => Some(format!("--threads {threads}")),
        MatrixError::TooLarge { .. } | MatrixError::TooSmall { .. } => args
            .size
            .map(|s| format!("--size {}", format_size(s as u64))),
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
    // `all` and `!list` mean the nodes that can take the role.
    let nodes = |flag: &str, spec: &Option<String>, role: Role| -> Result<Option<NodeSet>> {
        spec.as_ref()
            .map(|s| {
                topology
                    .resolve_nodes(s, role)
                    .with_context(|| format!("--{flag}={s}"))
            })
            .transpose()
    };
    let selection = NodeSelection {
        nodes: nodes("nodes", &args.nodes, Role::Any)?,
        cpu_nodes: nodes("cpu-nodes", &args.cpu_nodes, Role::Cpus)?,
        mem_nodes: nodes("mem-nodes", &args.mem_nodes, Role::Memory)?,
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

#[cfg(test)]
mod tests {
    use super::*;
    use numalab::units::format_size;
    use numalab_bench::matrix::run::{EMULATED_QUICK_SIZE, QUICK_SIZE, QUICK_STREAM_SIZE};

    #[test]
    fn quick_help_names_the_sizes_it_uses() {
        let command = MatrixArgs::augment_args(clap::Command::new("matrix"));
        let quick = command
            .get_arguments()
            .find(|a| a.get_id() == "quick")
            .unwrap();
        let help = quick.get_help().unwrap().to_string();
        for size in [QUICK_SIZE, QUICK_STREAM_SIZE, EMULATED_QUICK_SIZE] {
            let size = format_size(size as u64);
            assert!(help.contains(&size), "{size} missing from: {help}");
        }
    }

    fn args(flags: &[&str]) -> MatrixArgs {
        use clap::FromArgMatches as _;
        let command = MatrixArgs::augment_args(clap::Command::new("matrix"));
        let matches =
            command.get_matches_from(std::iter::once("matrix").chain(flags.iter().copied()));
        MatrixArgs::from_arg_matches(&matches).unwrap()
    }

    #[test]
    fn node_flags_mean_the_nodes_that_can_play_the_role() {
        // CPUs on nodes 0 and 2, memory on nodes 0 and 1 (a CXL node).
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/topologies/cpuless.xml"
        );
        let topology = Topology::from_xml_file(path).unwrap();
        let shape = shape_of(
            &topology,
            &args(&["--cpu-nodes", "all", "--mem-nodes", "!0"]),
        )
        .unwrap();
        assert_eq!(shape.initiators, [0, 2]);
        assert_eq!(shape.targets, [1]);
        let err = shape_of(&topology, &args(&["--mem-nodes", "2"])).unwrap_err();
        assert_eq!(
            format!("{err:#}"),
            "--mem-nodes=2: node 2 has no memory; nodes with memory: 0-1"
        );
        let err = shape_of(&topology, &args(&["--cpu-nodes", "1"])).unwrap_err();
        assert_eq!(
            format!("{err:#}"),
            "--cpu-nodes=1: node 1 has no CPUs (a memory-only node) and cannot run threads; nodes with CPUs: 0,2"
        );
    }
}
