//! `numalab sweep`: a grid of experiments, each placement-checked, with a
//! table, each policy's difference from `local`, and a figure.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Result};
use clap::Args;
use numalab::Topology;
use numalab_bench::control::Control;
use numalab_bench::experiment::sweep::{plan_sweep, run_sweep};

use crate::exp::{self, ProgressDisplay};
use crate::output::{self, OutputArgs};
use crate::render::{self, experiment::text, figures};

/// Run every cell of an experiment file's `[sweep]` grid (e.g. threads x
/// policy); prints a table and each policy's difference from local, and
/// draws the time to the last thread against the swept parameter
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    numalab sweep examples/deck-exp1-small.toml\n  \
    numalab sweep examples/deck-exp1.toml -o deck.json         (also deck.svg, deck.png)\n  \
    numalab sweep exp.toml --plot figures/exp                   (figures/exp.svg, .png)\n  \
    numalab sweep exp.toml --set access.ops=1_000_000 --markdown\n  \
    numalab sweep examples/deck-exp1-small.toml --control       (local twice: the noise floor)\n  \
    numalab sweep exp.toml --max-repeats 20                     (more rounds while a difference is ≈)\n  \
    numalab plot deck.json                                      redraws the figure\n\n\
Every cell is planned before the first runs: a cell this machine cannot place stops the \
sweep before anything is allocated. --set on a swept key fixes it (the axis is dropped). \
Without access.ops or access.duration, every cell is lengthened by one factor when the \
shortest falls under this machine's noise floor, so times still compare.")]
pub struct SweepArgs {
    /// The experiment file, with a `[sweep]` table of lists
    #[arg(value_name = "EXPERIMENT.toml")]
    pub experiment: PathBuf,

    /// Override a key of the file, e.g. access.ops=1000000 (repeatable)
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,

    /// Write the figure to STEM.svg and STEM.png, in a directory that
    /// exists (with -o FILE the figure goes beside it, FILE's name without
    /// its extension; with neither, no file is written)
    #[arg(long, value_name = "STEM")]
    pub plot: Option<PathBuf>,

    /// Draw no figure, even beside -o FILE
    #[arg(long, conflicts_with = "plot")]
    pub no_plot: bool,

    /// Run every local cell twice, the second as an A/A control: its
    /// difference from local is this machine's noise, so the table says
    /// how small a difference can be told here (same as --set
    /// run.control=true)
    #[arg(long)]
    pub control: bool,

    /// While some difference of the table is still ≈, run run.repeats
    /// more rounds, up to N repeats per cell (a multiple of run.repeats),
    /// with intervals that hold at 95% wherever it stops (same as --set
    /// run.max_repeats=N)
    #[arg(long, value_name = "N")]
    pub max_repeats: Option<u32>,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Runs `numalab sweep`; returns the exit status.
pub fn run(args: &SweepArgs) -> Result<i32> {
    // Before anything is measured: a bad -o would lose the measurement.
    args.output.check()?;
    // The experiment file is not to be replaced by its result.
    output::not_over_input(args.output.file(), "the experiment", &args.experiment)?;
    let control = Control::default();
    let interrupts = crate::signals::Interrupts::catch(&control)?;
    let mut experiment = exp::load(&args.experiment, &args.sets)?;
    experiment.run.control |= args.control;
    if let Some(most) = args.max_repeats {
        experiment.run.max_repeats = Some(most);
    }
    // A figure only where a file was asked for: --plot, or beside -o.
    let stem = (!args.no_plot)
        .then(|| exp::figure_stem(args.plot.as_deref(), args.output.file()))
        .flatten();
    if let Some(stem) = &stem {
        crate::plot::check_stem(stem)?;
    }
    if experiment.sweep.is_empty() {
        bail!(
            "{} has no [sweep] table (or --set fixed every swept key); add one, e.g.\n[sweep]\n\"threads.count\" = [1, 2, 4]\n\"memory.policy\" = [\"local\", \"remote\", \"interleave\"]\nor use `numalab run` for a single experiment",
            args.experiment.display()
        );
    }
    let topology = Topology::system()?;
    // Every cell checked before the first one runs.
    plan_sweep(&experiment, &topology)?;
    let display = ProgressDisplay::start(Arc::clone(&control.progress));
    let result = run_sweep(&experiment, &topology, &control);
    display.finish();
    let mut result = result?;
    result.created = numalab_bench::document::now_rfc3339();
    render::emit(&result, &args.output)?;
    match &stem {
        Some(stem) if result.cells.iter().any(|c| c.result.is_some()) => {
            let paths = figures::draw_sweep(&result, stem)?;
            eprintln!("{}", text::wrote(&paths));
        }
        None if !args.no_plot && std::io::stderr().is_terminal() => {
            eprintln!("numalab sweep: no figure written (--plot STEM, or -o FILE to save the result and draw it beside)");
        }
        _ => {}
    }
    // A cell that ran without completing a repeat measured nothing.
    let failed = result
        .cells
        .iter()
        .filter(|c| c.error.is_some() || c.result.as_ref().is_some_and(|r| r.figures.is_none()))
        .count();
    Ok(if result.interrupted {
        interrupts.exit_status().unwrap_or(1)
    } else if failed > 0 {
        eprintln!(
            "numalab sweep: {failed} of {} failed while running ({} above and in the results); the others ran",
            numalab::units::count(result.cells.len(), "cell"),
            if failed == 1 {
                "its error is"
            } else {
                "their errors are"
            }
        );
        1
    } else {
        0
    })
}
