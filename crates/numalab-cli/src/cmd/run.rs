//! `numalab run`: one experiment (the slide deck's simulator, generalised).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use clap::Args;
use numalab::Topology;
use numalab_bench::control::Control;
use numalab_bench::experiment::Plan;

use crate::exp::{self, ProgressDisplay};
use crate::output::{self, OutputArgs};
use crate::render;

/// Run an experiment file: pinned threads access placed memory; prints the
/// time until the last thread finished, GB/s, Mops/s, latency
/// percentiles, per-thread rows and where the pages really were
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    numalab run examples/deck-exp1-small.toml\n  \
    numalab run exp.toml --set threads.count=8 --set access.op_size=64\n  \
    numalab run exp.toml --set memory.policy=remote --json -o remote.json\n\n\
Before running, numalab measures this machine's noise floor (the shortest run it times well); \
without access.ops or access.duration, runs under it are lengthened, otherwise warned about \
(run.min_time sets the floor; docs/experiments.md, \"Enough work per run\").\n\n\
Ctrl-C (or SIGTERM, SIGHUP) stops the workers after their current chunk of operations; what \
was measured is written, marked interrupted, and numalab exits with 128 + the signal (130 for \
Ctrl-C, 143 for SIGTERM); a second signal quits at once.")]
pub struct RunArgs {
    /// The experiment file (TOML; every key is described in
    /// docs/experiment-file.md)
    #[arg(value_name = "EXPERIMENT.toml")]
    pub experiment: PathBuf,

    /// Override a key of the file, e.g. threads.count=8 (repeatable)
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Runs `numalab run`; returns the exit status.
pub fn run(args: &RunArgs) -> Result<i32> {
    // Before anything is measured: a bad -o would lose the measurement.
    args.output.check()?;
    // The experiment file is not to be replaced by its result.
    output::not_over_input(args.output.file(), "the experiment", &args.experiment)?;
    let control = Control::default();
    let interrupts = crate::signals::Interrupts::catch(&control)?;
    let experiment = exp::load(&args.experiment, &args.sets)?;
    if !experiment.sweep.is_empty() {
        eprintln!(
            "numalab: note: {} has a [sweep] grid, which `numalab run` ignores (it runs the file's own values); `numalab sweep` runs the grid",
            args.experiment.display()
        );
    }
    let topology = Topology::system()?;
    // Refused here, before anything is allocated.
    let plan = Plan::resolve(&experiment, &topology)?;
    let display = ProgressDisplay::start(Arc::clone(&control.progress));
    let result = numalab_bench::experiment::run_plan(&experiment, &topology, plan, &control);
    display.finish();
    let mut result = result?;
    result.created = numalab_bench::document::now_rfc3339();
    render::emit(&result, &args.output)?;
    Ok(if result.interrupted {
        interrupts.exit_status().unwrap_or(1)
    } else if result.figures.is_none() {
        // A run without a single measured repeat measured nothing.
        eprintln!(
            "numalab run: no repeat completed (run.repeats = {}), so there is no figure",
            result.experiment.run.repeats
        );
        1
    } else {
        0
    })
}
