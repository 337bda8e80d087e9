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
    numalab check --baseline baseline.json --json       every figure against its limit\n\n\
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

    #[command(flatten)]
    pub output: OutputArgs,
}

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
    Ok(if report.healthy { 0 } else { EXIT_UNHEALTHY })
}
