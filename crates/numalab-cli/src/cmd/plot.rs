//! `numalab plot`: figures redrawn from a saved result file.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use numalab_bench::document::{Document, Schema};
use numalab_bench::experiment::result::{RunResult, SweepResult, RUN_SCHEMA, SWEEP_SCHEMA};
use numalab_bench::matrix::MatrixResult;

use crate::render::{experiment::text, figures};

/// Redraw the figures of a saved result (numalab sweep/run/matrix --json)
/// as SVG and PNG
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    numalab sweep exp.toml -o sweep.json && numalab plot sweep.json      sweep.svg, sweep.png\n  \
    numalab plot run.json -o figures/run                                 figures/run.svg, .png\n  \
    numalab matrix --json -o m.json && numalab plot m.json               heat maps, loaded-latency curve\n\n\
A sweep is drawn as the time to the last thread against the swept parameter, one line per \
policy; a run as each thread's busy time, one line per repeat; a matrix as heat maps of \
latency and bandwidth and, when measured, the loaded-latency curve.")]
pub struct PlotArgs {
    /// A result file written with --json (numalab.sweep, numalab.run or
    /// numalab.matrix)
    #[arg(value_name = "RESULTS.json")]
    pub results: PathBuf,

    /// Write STEM.svg and STEM.png (default: the results file without its
    /// extension)
    #[arg(long, short = 'o', value_name = "STEM")]
    pub output: Option<PathBuf>,
}

/// Runs `numalab plot`.
pub fn run(args: &PlotArgs) -> Result<()> {
    let path = &args.results;
    let text_in =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let doc: serde_json::Value = serde_json::from_str(&text_in)
        .with_context(|| format!("{} is not JSON", path.display()))?;
    let schema = doc
        .get("schema")
        .and_then(|s| s.as_str())
        .unwrap_or("")
        .to_owned();
    let stem = args
        .output
        .clone()
        .unwrap_or_else(|| path.with_extension(""));
    let load_err = || format!("reading {} as {schema}", path.display());
    // A run or sweep result carries its schema fields itself, so it is
    // read as its type directly; a matrix result is a document of its
    // schema, checked for name and version as it is read.
    let paths = match schema.as_str() {
        SWEEP_SCHEMA => {
            let sweep: SweepResult = serde_json::from_value(doc).with_context(load_err)?;
            figures::draw_sweep(&sweep, &stem)?
        }
        RUN_SCHEMA => {
            let run: RunResult = serde_json::from_value(doc).with_context(load_err)?;
            figures::draw_run(&run, &stem)?
        }
        MatrixResult::NAME => {
            let result = Document::<MatrixResult>::parse(&text_in).with_context(load_err)?;
            figures::draw_matrix(&result, &stem)?
        }
        "" => bail!(
            "{} has no \"schema\" field; numalab plot reads files written by numalab run/sweep/matrix --json",
            path.display()
        ),
        other => bail!(
            "{}: schema {other:?} has no figure; numalab plot draws {SWEEP_SCHEMA}, {RUN_SCHEMA} and {}",
            path.display(),
            MatrixResult::NAME
        ),
    };
    eprintln!("{}", text::wrote(&paths));
    Ok(())
}
