//! `numalab exec`: run a command like `numactl` does, then show where its
//! memory actually landed.

use std::ffi::OsString;
use std::fmt::Write as _;

use anyhow::{Context, Result};
use clap::Args;
use numalab::audit::{audit_in_units, PlacementAudit};
use numalab::launch::{Exit, Launch, LaunchReport, Observation};
use numalab::locate::MemoryKind;
use numalab::{InterleaveWeights, MemPolicy, NodeSet, Topology};
use serde::Serialize;

use crate::output::{self, mib, Csv, Format, OutputArgs};
use crate::placement::PlacementArgs;

/// Run a command under a memory policy and CPU binding (numactl's options),
/// then report where its memory landed, per node, as `numastat -p` would
#[derive(Debug, Args)]
#[command(
    after_help = "The report goes to standard error (the command owns standard output), or to \
--output FILE. numalab exits with the command's exit status (128 + N if a signal N killed it); \
125 when numalab itself fails, 126/127 when the command cannot be run.\n\n\
Examples:\n  \
  numalab exec --membind=0 -- ./app           memory on node 0 only\n  \
  numalab exec -N 1 -m 1 -- ./app              CPUs and memory on node 1\n  \
  numalab exec --interleave=all -- ./app       spread over every node\n  \
  numalab exec -w 0:3,1:1 -- ./app             weighted interleave 3:1 (root, Linux 6.9)\n  \
  numalab exec --json -m 0 -- ./app 2>r.json   the report as JSON"
)]
pub struct ExecArgs {
    #[command(flatten)]
    pub placement: PlacementArgs,

    /// Print no report, only run the command
    #[arg(long, short = 'q')]
    pub quiet: bool,

    #[command(flatten)]
    pub output: OutputArgs,

    /// The command and its arguments
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// The `numalab.exec` JSON document.
#[derive(Debug, Serialize)]
pub struct ExecReport {
    /// The command line.
    pub command: Vec<String>,
    /// The policy asked for (`default` when none).
    pub policy: MemPolicy,
    /// The CPUs it was bound to, if any.
    pub cpus: Option<numalab::CpuSet>,
    /// What happened.
    pub run: LaunchReport,
    /// Its private memory at its peak (heap, stack, anonymous, huge pages)
    /// against the policy.
    pub audit: PlacementAudit,
}

/// Schema version of `numalab.exec`.
pub const SCHEMA_VERSION: u32 = 1;

/// Exit status when numalab itself fails, as `env` and `timeout` use.
pub const EXIT_OWN_FAILURE: i32 = 125;

/// Runs `numalab exec`; returns the exit status to leave with.
pub fn run(args: &ExecArgs) -> Result<i32> {
    let topology = Topology::system()?;
    let placement = args.placement.resolve(&topology)?;
    // Installed for the run and restored after (at drop).
    let _weights = match &placement.weights {
        Some(weights) => Some(InterleaveWeights::set(weights)?),
        None => None,
    };
    let (program, rest) = args.command.split_first().context("no command given")?;
    let mut launch = Launch::new(program, rest);
    if let Some(policy) = &placement.policy {
        launch = launch.policy(policy.clone());
    }
    if let Some(cpus) = &placement.cpus {
        launch = launch.cpus(cpus.clone());
    }
    let run = match launch.run() {
        Ok(run) => run,
        Err(numalab::launch::LaunchError::Spawn { program, source }) => {
            eprintln!(
                "numalab exec: cannot run {}: {source}",
                program.to_string_lossy()
            );
            return Ok(if source.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            });
        }
        Err(err) => return Err(err.into()),
    };

    let policy = placement.policy.clone().unwrap_or(MemPolicy::Default);
    // `local` and `default` follow the CPUs the command ran on.
    let ran_on: NodeSet = match &placement.cpus {
        Some(cpus) => topology.nodes_of(cpus),
        None => topology.nodes_of(&topology.allowed_cpus),
    };
    let report = ExecReport {
        command: args
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        audit: audit_in_units(
            &policy,
            &ran_on,
            &run.peak.private_histogram(),
            run.peak.placement_unit_pages(),
        ),
        policy,
        cpus: placement.cpus.clone(),
        run,
    };
    if !args.quiet {
        let text = match args.output.format() {
            Format::Json => output::to_json("numalab.exec", SCHEMA_VERSION, &report)?,
            Format::Csv => csv(&report),
            Format::Table | Format::Markdown => human(&report),
        };
        match &args.output.output {
            Some(path) => output::write_atomically(path, text.as_bytes())?,
            None => eprint!("{text}"),
        }
    }
    Ok(report.run.exit.shell_code())
}

const KINDS: [MemoryKind; 5] = [
    MemoryKind::Private,
    MemoryKind::Heap,
    MemoryKind::Stack,
    MemoryKind::Huge,
    MemoryKind::File,
];

fn kind_name(kind: MemoryKind) -> &'static str {
    match kind {
        MemoryKind::Huge => "huge",
        MemoryKind::Heap => "heap",
        MemoryKind::Stack => "stack",
        MemoryKind::Private => "private",
        MemoryKind::File => "file",
    }
}

fn nodes_seen(report: &ExecReport) -> Vec<u32> {
    let mut nodes: Vec<u32> = report.run.peak.per_node().keys().copied().collect();
    nodes.extend(report.run.memory.per_node().keys());
    nodes.sort_unstable();
    nodes.dedup();
    nodes
}

fn human(report: &ExecReport) -> String {
    let run = &report.run;
    let mut out = String::new();
    let ended = match run.exit {
        Exit::Code(code) => format!("exited {code}"),
        Exit::Signal(signal) => format!("was killed by signal {signal}"),
    };
    let how = match run.observation {
        Observation::AtExit => "",
        Observation::Sampled => " (tracing not permitted here: sampled only)",
    };
    let _ = writeln!(
        out,
        "\nnumalab exec: `{}` {ended} after {:.2} s; {} process(es){how}",
        report.command.join(" "),
        run.elapsed.as_secs_f64(),
        run.processes
    );
    out.push_str("peak resident memory per node, MiB (numastat -p columns):\n");
    let mut header = vec!["node".to_string()];
    header.extend(KINDS.iter().map(|k| kind_name(*k).to_string()));
    header.push("total".into());
    header.push("at exit".into());
    let mut table = output::table(header);
    let peak = run.peak.per_node();
    let at_exit = run.memory.per_node();
    for node in nodes_seen(report) {
        let mut row = vec![node.to_string()];
        for kind in KINDS {
            let bytes = run
                .peak
                .bytes
                .get(&kind)
                .and_then(|m| m.get(&node))
                .copied()
                .unwrap_or(0);
            row.push(mib(bytes));
        }
        row.push(mib(peak.get(&node).copied().unwrap_or(0)));
        row.push(mib(at_exit.get(&node).copied().unwrap_or(0)));
        table.add_row(row);
    }
    out.push_str(&output::render(&table));
    let mark = if report.audit.is_match() {
        ""
    } else {
        "warning: "
    };
    let _ = writeln!(
        out,
        "{mark}placement of private memory at its peak: {}",
        report.audit.note
    );
    out
}

fn csv(report: &ExecReport) -> String {
    let mut csv = Csv::new(&["when", "node", "kind", "bytes"]);
    for (when, memory) in [("peak", &report.run.peak), ("exit", &report.run.memory)] {
        for kind in KINDS {
            if let Some(per_node) = memory.bytes.get(&kind) {
                for (node, bytes) in per_node {
                    csv.row([
                        when.to_string(),
                        node.to_string(),
                        kind_name(kind).into(),
                        bytes.to_string(),
                    ]);
                }
            }
        }
    }
    csv.finish()
}
