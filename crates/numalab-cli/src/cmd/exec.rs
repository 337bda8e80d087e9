//! `numalab exec`: run a command like `numactl` does, then show where its
//! memory actually landed. The run and its report are
//! [`numalab_bench::exec`]; its tables are in `render/exec.rs`; this
//! module turns flags into the run and the run into an exit status.

use std::ffi::OsString;

use anyhow::Result;
use clap::Args;
use numalab::launch::LaunchError;
use numalab::{InterleaveWeights, Topology};
use numalab_bench::exec::{self as engine, ExecConfig, ExecError};

use crate::output::OutputArgs;
use crate::placement::PlacementArgs;
use crate::render;

/// Run a command under a memory policy and CPU binding (numactl's options),
/// then report where its memory landed, per node, as `numastat -p` would
#[derive(Debug, Args)]
#[command(
    after_help = "The report goes to standard error (the command owns standard output), or to \
--output FILE, or with -o - to standard output (JSON unless --csv or --markdown: for a pipe, \
after the command's own output). numalab exits with the command's exit status (128 + N if a signal N killed it) as \
soon as the command exits (what it leaves running is not waited for); 125 when numalab itself \
fails or its options are wrong, 126/127 when the command cannot be run. SIGINT, SIGTERM, SIGHUP \
and SIGQUIT sent to numalab with kill are passed on to the command (the terminal's Ctrl-C reaches \
it directly); numalab waits for it, restores the interleave weights, and exits 128 + that signal. If numalab is killed (SIGKILL), so is the \
command; weights set with -w stay set, and numalab prints at the start how to restore them.\n\n\
Examples:\n  \
  numalab exec --membind=0 -- ./app           memory on node 0 only\n  \
  numalab exec -N 1 -m 1 -- ./app              CPUs and memory on node 1\n  \
  numalab exec --interleave=all -- ./app       spread over every node\n  \
  numalab exec -w 0=3,1=1 -- ./app             weighted interleave 3:1 (root, Linux 6.9)\n  \
  numalab exec --json -m 0 -- ./app 2>r.json   the report as JSON\n  \
  numalab exec -o - -m 0 -- ./app | jq .        the report on a pipe"
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

/// Runs `numalab exec`; returns the exit status to leave with.
pub fn run(args: &ExecArgs) -> Result<i32> {
    // Before the command runs: its exit status is not lost to a bad -o.
    args.output.check()?;
    let topology = Topology::system()?;
    let placement = args.placement.resolve(&topology)?;
    let config = ExecConfig {
        command: args.command.clone(),
        policy: placement.policy,
        cpus: placement.cpus,
        weights: placement.weights,
        quiet: false,
        timeout: None,
    };
    if let Some(commands) = config
        .weights
        .as_ref()
        .and_then(InterleaveWeights::restore_commands)
    {
        eprintln!(
            "numalab exec: changing the kernel's weighted-interleave weights (for every process) until the command ends; if numalab is killed before, restore them with: {commands}"
        );
    }
    let report = match engine::run(&topology, &config) {
        Ok(report) => report,
        Err(ExecError::Launch(LaunchError::Interrupted { signal })) => {
            eprintln!(
                "numalab exec: signal {signal} arrived before the command started; it was not run"
            );
            return Ok(crate::exit::after_signal(signal));
        }
        Err(ExecError::Launch(LaunchError::Spawn { program, source })) => {
            return Ok(crate::exit::cannot_run("exec", &program, &source));
        }
        Err(err) => return Err(err.into()),
    };
    for warning in &report.warnings {
        eprintln!("numalab exec: warning: {warning}");
    }
    if !args.quiet {
        let text = render::to_string(&report, args.output.format())?;
        args.output.emit_report(&text)?;
    }
    // Interrupted by a signal sent to numalab: 128 + it, as a shell says
    // of a command a signal ended, whatever the command made of it.
    Ok(match report.run.relayed {
        Some(signal) => crate::exit::after_signal(signal),
        None => report.run.exit.shell_code(),
    })
}
