//! `numalab plot`: figures redrawn from a saved result file.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use numalab_bench::document::{Document, DocumentError, Schema};
use numalab_bench::experiment::result::{
    RunResult, SweepResult, RUN_SCHEMA, SCHEMA_VERSION, SWEEP_SCHEMA,
};
use numalab_bench::matrix::MatrixResult;
use numalab_bench::profile::ProfileReport;

use crate::render::{experiment::text, figures};

/// Redraw the figures of a saved result (numalab sweep/run/matrix/profile
/// --json) as SVG and PNG
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    numalab sweep exp.toml -o sweep.json && numalab plot sweep.json      sweep.svg, sweep.png\n  \
    numalab plot run.json -o figures/run                                 figures/run.svg, .png\n  \
    numalab matrix --json -o m.json && numalab plot m.json               heat maps, loaded-latency curve\n  \
    numalab profile -o p.json -- ./app && numalab plot p.json            memory per node over time\n\n\
A sweep is drawn as the time to the last thread against the swept parameter, one line per \
policy; a run as each thread's busy time, one line per repeat; a matrix as heat maps of \
latency and bandwidth and, when measured, the loaded-latency curve; a profile as the program's \
memory on each node over time.")]
pub struct PlotArgs {
    /// A result file written with --json (numalab.sweep, numalab.run,
    /// numalab.matrix or numalab.profile)
    #[arg(value_name = "RESULTS.json")]
    pub results: PathBuf,

    /// Write STEM.svg and STEM.png, in a directory that exists (default:
    /// the results file without its extension)
    #[arg(long, short = 'o', value_name = "STEM")]
    pub output: Option<PathBuf>,
}

/// The largest result file `numalab plot` reads: a sweep of a few hundred
/// cells with every thread's figures is a few megabytes.
pub const MAX_RESULT_BYTES: u64 = 256 << 20;

/// Runs `numalab plot`.
pub fn run(args: &PlotArgs) -> Result<()> {
    let path = &args.results;
    let stem = args
        .output
        .clone()
        .unwrap_or_else(|| path.with_extension(""));
    crate::plot::check_stem(&stem)?;
    let text_in =
        numalab::files::read_text_limited(path, MAX_RESULT_BYTES, "result files numalab plots")?;
    let doc: serde_json::Value = serde_json::from_str(&text_in)
        .with_context(|| format!("{} is not JSON", path.display()))?;
    let schema = doc
        .get("schema")
        .and_then(|s| s.as_str())
        .unwrap_or("")
        .to_owned();
    let load_err = || format!("reading {} as {schema}", path.display());
    // A run or sweep result is read as its type directly (below), so its
    // version is checked here: a newer numalab's result may mean something
    // else in the same fields.
    if schema == SWEEP_SCHEMA || schema == RUN_SCHEMA {
        let version = doc.get("schema_version").and_then(|v| v.as_u64());
        if version != Some(u64::from(SCHEMA_VERSION)) {
            let name = if schema == RUN_SCHEMA {
                RUN_SCHEMA
            } else {
                SWEEP_SCHEMA
            };
            let Some(found) = version.and_then(|v| u32::try_from(v).ok()) else {
                bail!(
                    "{}: {name} without a schema_version numalab can read; this numalab reads version {SCHEMA_VERSION}",
                    path.display()
                );
            };
            let err = DocumentError::OtherVersion {
                schema: name,
                expected: SCHEMA_VERSION,
                found,
            };
            bail!("{}: {err}", path.display());
        }
    }
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
        ProfileReport::NAME => {
            let report = Document::<ProfileReport>::parse(&text_in).with_context(load_err)?;
            figures::draw_profile(&report, &stem)?
        }
        "" => bail!(
            "{} has no \"schema\" field; numalab plot reads files written by numalab run/sweep/matrix/profile --json",
            path.display()
        ),
        other => bail!(
            "{}: schema {other:?} has no figure; numalab plot draws {SWEEP_SCHEMA}, {RUN_SCHEMA}, {} and {}",
            path.display(),
            MatrixResult::NAME,
            ProfileReport::NAME
        ),
    };
    eprintln!("{}", text::wrote(&paths));
    Ok(())
}
