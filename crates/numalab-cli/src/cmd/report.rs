//! `numalab report`: the main job on a machine — what it is, what NUMA
//! costs on it, what placement costs a workload, and what that means. The
//! plan, the measurements and the findings are [`numalab_bench::report`];
//! the text and the HTML page are in `render/report.rs`; this module holds
//! the flags, the progress shown while measuring, and where the report
//! goes.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use clap::Args;
use numalab::Topology;
use numalab_bench::experiment::Control;
use numalab_bench::report::{Report, ReportPlan};
use numalab_bench::topo::TopoReport;

use crate::exp::ProgressDisplay;
use crate::output::{self, OutputArgs};
use crate::render::{self, report::html_page};

/// Report on this machine: topology, node-to-node latency and bandwidth
/// beside the firmware's values, what memory placement costs a workload,
/// and what that means
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    numalab report                      tables on the terminal (about half a minute)\n  \
    numalab report -o report.html       one HTML page with the figures inside\n  \
    numalab report --html report.html   the tables here, and the page too\n  \
    numalab report --json -o r.json     everything measured, for merging results of many machines\n  \
    numalab report --quick              seconds: small working sets, fewer operations")]
pub struct ReportArgs {
    /// Small working sets and fewer operations: seconds instead of a
    /// minute, less precise
    #[arg(long)]
    pub quick: bool,

    /// Write the report to FILE: .html gives one page with the figures
    /// inside; otherwise as --json/--markdown or the extension say
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Also write the report as one self-contained HTML page to FILE
    /// (while printing the tables as usual)
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,

    /// Print JSON (schema numalab.report) instead of tables
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,

    /// Print Markdown
    #[arg(long)]
    pub markdown: bool,
}

/// Runs `numalab report`; returns the exit status (128 + the signal when
/// Ctrl-C, SIGTERM or SIGHUP stopped the policy sweep, after writing the
/// report of what was measured).
pub fn run(args: &ReportArgs) -> Result<i32> {
    let html = args
        .output
        .as_ref()
        .is_some_and(|p| p.extension().is_some_and(|e| e == "html"));
    let out = OutputArgs {
        json: args.json,
        csv: false,
        markdown: args.markdown,
        output: args.output.clone(),
    };
    // Before anything is measured: a bad target would lose the report.
    for path in args.output.iter().chain(&args.html) {
        output::check_target(path)?;
    }

    // Everything planned and checked before anything is measured.
    let topology = Topology::system()?;
    let plan = ReportPlan::new(&topology, args.quick)?;

    let machine = TopoReport::gather(Topology::system()?);
    let talk = std::io::stderr().is_terminal();
    let mut progress = |line: &str| {
        if talk {
            eprintln!("numalab report: {line}");
        }
    };
    progress("measuring latency and bandwidth between nodes");
    let matrix = plan.measure_matrix(&topology, &mut progress)?;

    progress("running the policy sweep");
    let control = Control::default();
    let interrupts = crate::signals::Interrupts::catch(&control.stop)?;
    let label = Arc::new(Mutex::new(String::new()));
    let display = ProgressDisplay::start(Arc::clone(&control.progress), Arc::clone(&label));
    let sweep = plan.run_sweep(&topology, &control, |i, n, cell| {
        if let Ok(mut label) = label.lock() {
            *label = format!("cell {}/{n} ({cell}): ", i + 1);
        }
    });
    display.finish();

    let report = Report::new(machine, matrix, sweep?);
    let text = if html {
        html_page(&report)?
    } else {
        render::to_string(&report, out.format())?
    };
    if let Some(path) = &args.html {
        output::write_atomically(path, html_page(&report)?.as_bytes())?;
    }
    out.emit(&text)?;
    Ok(interrupts.exit_status().unwrap_or(0))
}
