//! `numalab report`: the main job on a machine — what it is, what NUMA
//! costs on it, what placement costs a workload, and what that means. The
//! plan, the measurements and the findings are [`numalab_bench::report`];
//! the text and the HTML page are in `render/report.rs`; this module holds
//! the flags, the progress shown while measuring, and where the report
//! goes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Result};
use clap::Args;
use numalab::Topology;
use numalab_bench::profile::{ProfileReport, MAX_SAVED_PROFILE_FIGURES};
use numalab_bench::report::{Report, ReportError, ReportPlan};

use crate::exp::ProgressDisplay;
use crate::output::{self, OutputArgs};
use crate::render::{self, page::html_page};
use crate::saved::{read_saved, MAX_RESULT_BYTES};
use crate::signals::{control_for_terminal, Interrupts};

/// Report on this machine: topology, node-to-node latency and bandwidth
/// beside the firmware's values, what memory placement costs a workload,
/// and what that means
#[derive(Debug, Clone, Args)]
#[command(after_help = "Examples:\n  \
    numalab report                      tables on the terminal (about half a minute)\n  \
    numalab report -o report.html       one HTML page with the figures inside\n  \
    numalab report --html report.html   the tables here, and the page too\n  \
    numalab report --json -o r.json     everything measured, for merging results of many machines\n  \
    numalab report --quick              seconds: small working sets, fewer operations\n  \
    numalab report --from r.json -o r.html --open\n                                        the page again from saved results, opened in a browser\n  \
    numalab report -o r.html --profile app.json\n                                        with a program's timeline (numalab profile --json)")]
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

    /// Measure nothing: report the results saved in FILE (`numalab report
    /// --json`), e.g. to make its HTML page on another machine
    #[arg(long, value_name = "FILE")]
    pub from: Option<PathBuf>,

    /// Add a program's memory timeline to the HTML page, from FILE
    /// written by `numalab profile --json` (repeat for several)
    #[arg(long, value_name = "FILE")]
    pub profile: Vec<PathBuf>,

    /// Open the HTML page in a browser once written ($BROWSER, else
    /// xdg-open, else the first of chromium, firefox found)
    #[arg(long)]
    pub open: bool,

    /// Write the JSON report to DIR/HOSTNAME.json, DIR checked before
    /// measuring: one file per host when every node of a cluster job runs
    /// it (`srun --ntasks-per-node=1`); merge them with numalab fleet DIR
    #[arg(long, value_name = "DIR", conflicts_with_all = ["output", "markdown", "from"])]
    pub out_dir: Option<PathBuf>,
}

/// Opens `page` in a browser without waiting for it; says so when none
/// is found.
fn open_in_browser(page: &Path) {
    let page = std::fs::canonicalize(page).unwrap_or_else(|_| page.to_owned());
    let mut candidates: Vec<String> = std::env::var("BROWSER")
        .ok()
        .into_iter()
        .flat_map(|b| b.split(':').map(str::to_owned).collect::<Vec<_>>())
        .filter(|b| !b.is_empty())
        .collect();
    candidates.extend(["xdg-open", "sensible-browser", "chromium", "firefox"].map(String::from));
    for browser in candidates {
        if numalab::launch::find_program(std::ffi::OsStr::new(&browser)).is_err() {
            continue;
        }
        let spawned = std::process::Command::new(&browser)
            .arg(&page)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if spawned.is_ok() {
            eprintln!("numalab report: opened {} with {browser}", page.display());
            return;
        }
    }
    eprintln!(
        "numalab report: no browser found ($BROWSER, xdg-open, chromium, firefox): open {} yourself",
        page.display()
    );
}

/// Runs `numalab report`; returns the exit status (128 + the signal when
/// Ctrl-C, SIGTERM or SIGHUP stopped the policy sweep, after writing the
/// report of what was measured).
pub fn run(args: &ReportArgs) -> Result<i32> {
    // `--out-dir DIR` is `--json -o DIR/HOSTNAME.json`.
    let mut args = args.clone();
    if let Some(dir) = args.out_dir.take() {
        (args.output, args.json) = (Some(crate::saved::host_file(&dir)?), true);
    }
    let args = &args;
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
    if let Some(path) = out.file() {
        output::check_target(path)?;
    }
    if let Some(page) = &args.html {
        output::check_page_target(page)?;
    }
    let outputs = output::file_and_page(out.file(), args.html.as_deref());
    output::distinct_targets(&outputs)?;
    let inputs: Vec<(String, (u64, u64))> = args
        .from
        .iter()
        .map(|path| ("--from", path))
        .chain(args.profile.iter().map(|path| ("--profile", path)))
        .filter_map(|(flag, path)| output::input(flag, path))
        .collect();
    output::not_an_input(&outputs, &inputs)?;
    let page_path = args
        .html
        .clone()
        .or_else(|| args.output.clone().filter(|_| html));
    if args.open && page_path.is_none() {
        bail!("--open opens the HTML page: give it a file with --html FILE or -o FILE.html");
    }
    let profiles = read_profiles(&args.profile)?;
    let write = |report: &Report| -> Result<()> {
        // The page is made once, whether it goes to -o, --html or both.
        let page = if html || args.html.is_some() {
            Some(html_page(report, &profiles)?)
        } else {
            None
        };
        let text = match &page {
            Some(page) if html => page.clone(),
            _ => render::to_string(report, out.format())?,
        };
        if let (Some(path), Some(page)) = (&args.html, &page) {
            output::write_atomically(path, page.as_bytes())?;
        }
        out.emit(&text)?;
        if let (true, Some(page)) = (args.open, &page_path) {
            open_in_browser(page);
        }
        Ok(())
    };
    if let Some(saved) = &args.from {
        let report = read_saved::<Report>(saved, MAX_RESULT_BYTES, "saved reports")?
            .from_saved()
            .map_err(|why| anyhow::anyhow!("{}: {why}", saved.display()))?;
        write(&report)?;
        return Ok(0);
    }

    // Everything planned and checked before anything is measured; Ctrl-C
    // (SIGTERM, SIGHUP) from then on ends the step in progress and writes
    // nothing, as half a report would mislead.
    let topology = Topology::system()?;
    let plan = ReportPlan::new(&topology, args.quick)?;
    let control = control_for_terminal("numalab report: ");
    let interrupts = Interrupts::catch(&control)?;
    let display = ProgressDisplay::start(Arc::clone(&control.progress));
    let report = numalab_bench::report::run(&plan, &topology, &control);
    display.finish();
    let report = match (report, interrupts.exit_status()) {
        (Ok(report), _) => report,
        (Err(ReportError::Interrupted), Some(status)) => {
            eprintln!("numalab report: {}", ReportError::Interrupted);
            return Ok(status);
        }
        (Err(err), _) => return Err(err.into()),
    };
    write(&report)?;
    Ok(interrupts.exit_status().unwrap_or(0))
}

/// The profiles `--profile` names, each bounded as a saved profile is and
/// all together bounded as one: what the page draws is at most
/// [`MAX_SAVED_PROFILE_FIGURES`] figures, however many files are given.
/// A file given twice is refused.
fn read_profiles(paths: &[PathBuf]) -> Result<Vec<ProfileReport>> {
    read_profiles_within(paths, MAX_SAVED_PROFILE_FIGURES)
}

/// [`read_profiles`] with at most `limit` figures in all.
fn read_profiles_within(paths: &[PathBuf], limit: usize) -> Result<Vec<ProfileReport>> {
    let mut profiles = Vec::new();
    let mut total = 0usize;
    let mut seen = Vec::new();
    for path in paths {
        let shown = output::printable_field(&path.display().to_string()).into_owned();
        if let Some((_, id)) = output::input("", path) {
            if seen.contains(&id) {
                bail!("--profile {shown} is given twice: name each profile once");
            }
            seen.push(id);
        }
        let profile: ProfileReport =
            read_saved(path, MAX_RESULT_BYTES, "profiles numalab report draws")?;
        profile
            .check_saved_size()
            .map_err(|why| anyhow::anyhow!("{shown}: {why}"))?;
        total = total.saturating_add(profile.figures());
        if total > limit {
            bail!(
                "--profile {shown}: the profiles given hold {total} figures (samples × nodes) so far, more than the {limit} one page draws; give fewer profiles, or shorter ones"
            );
        }
        profiles.push(profile);
    }
    Ok(profiles)
}

#[cfg(test)]
mod tests {
    use super::*;
    use numalab_bench::document::Document;

    #[test]
    fn the_profiles_drawn_are_bounded_together_and_each_named_once() {
        let dir =
            std::env::temp_dir().join(format!("numalab-report-profiles-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Two profiles of 1000 samples that name no node: 1000 figures each.
        let paths: Vec<PathBuf> = ["a.json", "b.json"].iter().map(|n| dir.join(n)).collect();
        for path in &paths {
            let mut profile = ProfileReport::empty(vec!["app".into()], 1);
            profile.timeline.samples = vec![Default::default(); 1000];
            std::fs::write(path, Document::new(&profile).to_json().unwrap()).unwrap();
        }
        assert_eq!(read_profiles_within(&paths, 2000).unwrap().len(), 2);
        let err = read_profiles_within(&paths, 1999).unwrap_err().to_string();
        assert!(err.contains("b.json: the profiles given hold 2000 figures (samples × nodes) so far, more than the 1999"), "{err}");
        let twice = [paths[0].clone(), paths[0].clone()];
        let err = read_profiles_within(&twice, 2000).unwrap_err().to_string();
        assert!(
            err.ends_with("a.json is given twice: name each profile once"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
