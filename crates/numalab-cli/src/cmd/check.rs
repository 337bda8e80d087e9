//! `numalab check`: this host against a baseline of healthy hosts
//! ([`numalab_bench::fleet::check`]), as a scheduler's node health check
//! runs it.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use numalab_bench::fleet::baseline::Baseline;
use numalab_bench::fleet::check::{check, CheckError};

use crate::output::OutputArgs;
use crate::render;
use crate::saved::{read_saved, MAX_RESULT_BYTES};

/// Check this host against a baseline of healthy hosts (`numalab fleet
/// DIR --baseline B.json`): its machine fingerprint, then the figures of
/// its group measured here. Exit 0 healthy, 1 unhealthy with one line
/// that names what is wrong, 2 when numalab could not check
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    numalab fleet good-nodes --baseline baseline.json   once, from reports of known-good hosts\n  \
    numalab check --baseline baseline.json              on each host: 0 healthy, 1 unhealthy\n  \
    numalab check --baseline baseline.json --json       every figure against its limit\n  \
    numalab check --baseline baseline.json --drain      as Slurm's HealthCheckProgram\n\n\
The host's fingerprint (CPU model, packages, CPUs and memory per node, SLIT, HMAT, kernel, THP, \
numa_balancing, --quick) must be one of the baseline's groups; else nothing is measured and the \
line says what differs from the nearest group (a DIMM missing, sub-NUMA clustering switched, THP \
changed). Then the matrix the group's reports measured (--quick or full, as they were) is \
measured here, and each figure is held to its group's limit: a bandwidth below threshold x the \
group's median, or a latency above the median / threshold, fails. A group of one or two hosts \
has no limits: only its fingerprint is checked.")]
pub struct CheckArgs {
    /// The baseline: a numalab.baseline file written by `numalab fleet
    /// DIR --baseline FILE`
    #[arg(long, value_name = "FILE")]
    pub baseline: PathBuf,

    /// For Slurm's HealthCheckProgram: when unhealthy, drain this node
    /// (`scontrol update … State=DRAIN`) with the line as its reason;
    /// when healthy, resume it if numalab drained it (a drain an
    /// administrator set is never touched, nor its reason replaced)
    #[arg(long)]
    pub drain: bool,

    /// With --drain: this node's name in Slurm [default: $SLURMD_NODENAME,
    /// else the host name up to its first dot]
    #[arg(long, value_name = "NAME", requires = "drain")]
    pub node: Option<String>,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// How numalab's own drain reasons begin, so that only those are resumed.
pub const REASON_PREFIX: &str = "numalab check: ";

/// The longest drain reason given to Slurm.
const MAX_REASON: usize = 200;

/// Exit status when the host is not healthy.
pub const EXIT_UNHEALTHY: u8 = 1;
/// Exit status when numalab could not check (a baseline that does not
/// read, a measurement that failed): 2, as the issue of a health check
/// is told apart from the host's.
pub const EXIT_CANNOT_CHECK: u8 = 2;

/// Runs the check; the exit status is 0 when healthy, else
/// [`EXIT_UNHEALTHY`]. Errors are numalab's own ([`EXIT_CANNOT_CHECK`]).
pub fn run(args: &CheckArgs) -> Result<u8> {
    args.output.check()?;
    let baseline: Baseline = read_saved(&args.baseline, MAX_RESULT_BYTES, "baseline")?;
    let topology = numalab::Topology::system()?;
    let control = crate::signals::control_for_terminal("numalab check: ");
    let _interrupts = crate::signals::Interrupts::catch(&control)?;
    let report = match check(&baseline, &topology, &control) {
        Ok(report) => report,
        Err(CheckError::Interrupted) => {
            anyhow::bail!("interrupted: nothing checked")
        }
        Err(err) => return Err(err.into()),
    };
    render::emit(&report, &args.output)?;
    if !report.healthy && !args.output.table_on_stdout() {
        eprintln!("{}", render::check::verdict(&report));
    }
    if args.drain {
        let node = match &args.node {
            Some(node) => node.clone(),
            None => std::env::var("SLURMD_NODENAME")
                .ok()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| {
                    let host = report.host.clone();
                    host.split('.').next().unwrap_or(&host).to_owned()
                }),
        };
        drain_or_resume(&node, &report)?;
    }
    Ok(if report.healthy { 0 } else { EXIT_UNHEALTHY })
}

/// What Slurm says of `node`: its state (`IDLE+DRAIN`) and reason.
fn node_state(node: &str) -> Result<(String, String)> {
    let out = scontrol(&["show", "node", node, "--oneliner"])?;
    let field = |name: &str| -> String {
        out.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .unwrap_or_default()
            .to_owned()
    };
    // The reason runs to the end of its field list: it holds spaces.
    let reason = out
        .split_once(" Reason=")
        .map(|(_, rest)| rest.trim_end().to_owned())
        .unwrap_or_default();
    Ok((field("State="), reason))
}

/// Drains `node` with the check's line when it is unhealthy and not
/// drained already; resumes it when healthy and drained by numalab.
fn drain_or_resume(node: &str, report: &numalab_bench::fleet::check::CheckReport) -> Result<()> {
    let (state, reason) = node_state(node)?;
    let drained = state
        .split('+')
        .any(|s| s == "DRAIN" || s == "DRAINED" || s == "DRAINING");
    let ours = reason.starts_with(REASON_PREFIX);
    let name = format!("NodeName={node}");
    if !report.healthy {
        if drained && !ours {
            eprintln!(
                "numalab: {node} is drained already ({}): left as the administrator set it",
                crate::output::printable(&reason)
            );
            return Ok(());
        }
        let mut line: String = format!("{REASON_PREFIX}{}", report.reason)
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        if line.len() > MAX_REASON {
            let mut end = MAX_REASON;
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            line.truncate(end);
        }
        scontrol(&["update", &name, "State=DRAIN", &format!("Reason={line}")])?;
        eprintln!("numalab: drained {node}");
    } else if drained && ours {
        scontrol(&["update", &name, "State=RESUME"])?;
        eprintln!("numalab: resumed {node} (numalab had drained it)");
    }
    Ok(())
}

/// `scontrol ARGS`: its output, or an error with what it said.
fn scontrol(args: &[&str]) -> Result<String> {
    let out = std::process::Command::new("scontrol")
        .args(args)
        .output()
        .map_err(|err| anyhow::anyhow!("--drain: cannot run scontrol: {err}"))?;
    if !out.status.success() {
        anyhow::bail!(
            "--drain: scontrol {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
