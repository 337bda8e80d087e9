//! `numalab fleet`: many hosts' reports merged, grouped by machine
//! fingerprint, and the figures outside their group's range flagged
//! ([`numalab_bench::fleet`]); its tables, page and batch script are in
//! `render/fleet.rs`. Also where `numalab report --out-dir` finds its
//! file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::Args;
use numalab::files::{OutputDir, OutputError};
use numalab_bench::document::Document;
use numalab_bench::fleet::baseline::Baseline;
use numalab_bench::fleet::{
    fleet, FleetError, FleetOptions, FleetReport, LeftOut, DEFAULT_THRESHOLD,
};
use numalab_bench::report::Report;

use crate::output::{self, OutputArgs};
use crate::render::fleet::{html_page, sbatch_script, SbatchScript};
use crate::render::{self, page};
use crate::saved::parse_saved;

/// Merge the reports of many hosts (one `numalab report --json --out-dir
/// DIR` per host, e.g. under Slurm): group the hosts by machine
/// fingerprint, flag the figures outside their group's range, list the
/// files left out
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("judging").args(["fail_on_outliers", "sbatch"]).multiple(true)))]
#[command(after_help = "Examples:\n  \
    srun --ntasks-per-node=1 numalab report --json --out-dir results   on every node, then:\n  \
    numalab fleet results                          the groups, the hosts flagged, the files left out\n  \
    numalab fleet results --fail-on-outliers       exit 1 when a host is flagged: a health check\n  \
    numalab fleet results --expect 'node[001-128]'   name the nodes that sent no report\n  \
    numalab fleet results --json -o fleet.json     box-plot numbers of every cell, per group\n  \
    numalab fleet results --html fleet.html        one page, a box plot per cell\n  \
    numalab fleet good-nodes --baseline baseline.json   what healthy hosts look like, for numalab check\n  \
    numalab fleet --sbatch > fleet.sbatch          a Slurm batch script doing all of it\n\n\
Rule (Intel Cluster Checker's, on the median): within a group of 3 or more hosts of one \
fingerprint, a bandwidth below THRESHOLD x the group's median for its cell, or a latency above \
the median / THRESHOLD, is flagged. A fingerprint is the CPU model, packages, CPUs and memory \
per node (within 2%: a missing DIMM differs, firmware reservations do not), SLIT, whether HMAT is \
there, kernel release, THP and numa_balancing, and whether the report was --quick. Files of \
another schema or version, cut short or not JSON, a second report of one host (the later is \
kept), an empty directory: one line each on standard error, listed in the output too; the \
rest is merged.")]
pub struct FleetArgs {
    /// Directories of report files (their *.json files, not walked
    /// further), or report files
    #[arg(value_name = "DIR", required_unless_present = "sbatch")]
    pub dirs: Vec<PathBuf>,

    /// Flag a bandwidth below THRESHOLD x its group's median, and a latency
    /// above the median / THRESHOLD (above 0, at most 1)
    #[arg(long, value_name = "THRESHOLD", default_value_t = DEFAULT_THRESHOLD, value_parser = threshold)]
    pub threshold: f64,

    /// Exit 1 when a figure is flagged, or when the hosts fall into more
    /// groups than --max-groups (a health check)
    #[arg(long)]
    pub fail_on_outliers: bool,

    /// With --fail-on-outliers (or --sbatch, whose merge fails on
    /// outliers): how many machine fingerprints the fleet may have (2 for
    /// a cluster of two kinds of node)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = groups, requires = "judging")]
    pub max_groups: usize,

    /// Also write one self-contained HTML page to FILE: the groups, the
    /// figures flagged, a box plot per cell
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,

    /// The hosts that should have sent a report, as Slurm lists them
    /// (`node[01-16],gpu[1-4]`, `$SLURM_JOB_NODELIST`; repeatable): each
    /// one no report answers to (by its Slurm node name, host name or
    /// short host name) is named as missing, and fails
    /// --fail-on-outliers
    #[arg(long, value_name = "HOSTS", value_parser = hostlist)]
    pub expect: Vec<Vec<String>>,

    /// Also write what a healthy host of each fingerprint looks like to
    /// FILE (`numalab.baseline`: each group's fingerprint, hosts, and
    /// every cell's median and limit by the rule below), for `numalab
    /// check --baseline FILE` on each host later. Merge known-good hosts
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,

    /// Threads reading files [default: the CPUs, at most 8]
    #[arg(long, value_name = "N", value_parser = threads)]
    pub threads: Option<usize>,

    /// Print a Slurm batch script that runs `numalab report` on every
    /// node of the job and merges the reports (printed, not submitted)
    #[arg(long, conflicts_with_all = ["dirs", "html", "baseline", "expect", "fail_on_outliers", "json", "csv", "markdown", "output"])]
    pub sbatch: bool,

    /// With --sbatch: each node runs `numalab report --quick` (seconds
    /// instead of a minute, less precise)
    #[arg(long, requires = "sbatch")]
    pub quick: bool,

    /// With --sbatch: where the script's reports go [default: results]
    #[arg(long, value_name = "DIR", requires = "sbatch")]
    pub out_dir: Option<PathBuf>,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// `--threshold`: above 0, at most 1.
fn threshold(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|t| *t > 0.0 && *t <= 1.0)
        .ok_or_else(|| {
            format!(
                "give a threshold above 0 and at most 1 (0.9: 90% of the median), not \"{text}\""
            )
        })
}

/// `--max-groups`: at least 1.
fn groups(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("give 1 or more groups, not 0".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "\"{text}\" is not a number of groups (a whole number from 1)"
        )),
    }
}

/// `--expect`: a host list as Slurm writes it.
fn hostlist(text: &str) -> Result<Vec<String>, String> {
    numalab_bench::fleet::hostlist::expand(text).map_err(|err| err.to_string())
}

/// `--threads`: 1 to 64.
fn threads(text: &str) -> Result<usize, String> {
    const MOST: usize = numalab_bench::fleet::read::MAX_THREADS;
    text.parse()
        .ok()
        .filter(|n| (1..=MOST).contains(n))
        .ok_or_else(|| format!("give 1 to {MOST} threads, not \"{text}\""))
}

/// Runs `numalab fleet`; returns the exit status: 1 with
/// `--fail-on-outliers` when a figure is flagged or there are more groups
/// than `--max-groups`, else 0 once anything was merged.
pub fn run(args: &FleetArgs) -> Result<i32> {
    if args.sbatch {
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("numalab"));
        let out_dir = args.out_dir.clone().unwrap_or_else(|| "results".into());
        let script = SbatchScript {
            numalab: &exe,
            out_dir: &out_dir,
            threshold: args.threshold,
            max_groups: args.max_groups,
            quick: args.quick,
        };
        output::print_stdout(&sbatch_script(&script))?;
        return Ok(0);
    }
    args.output.check()?;
    if let Some(page) = &args.html {
        output::check_page_target(page)?;
    }
    if let Some(baseline) = &args.baseline {
        if baseline == Path::new("-") {
            bail!("--baseline -: the baseline is written to a file; name one");
        }
        output::check_target(baseline)?;
    }
    let mut outputs = output::file_and_page(args.output.file(), args.html.as_deref());
    outputs.extend(args.baseline.as_deref().map(|b| ("--baseline", b)));
    output::distinct_targets(&outputs)?;
    let mut options = FleetOptions {
        threshold: args.threshold,
        ..FleetOptions::default()
    };
    if let Some(threads) = args.threads {
        options.threads = threads;
    }
    let expected: Vec<String> = {
        let mut seen = std::collections::HashSet::new();
        let all = args.expect.iter().flatten();
        all.filter(|name| seen.insert(name.as_str()))
            .cloned()
            .collect()
    };
    if expected.len() > numalab_bench::fleet::hostlist::MAX_HOSTS {
        bail!(
            "--expect names {} hosts; at most {} are merged",
            expected.len(),
            numalab_bench::fleet::hostlist::MAX_HOSTS
        );
    }
    let mut report = match fleet(&args.dirs, &options) {
        Ok(report) => report,
        Err(FleetError::NoReports { left_out }) => {
            say_left_out(&left_out);
            bail!("no report to merge: every file and directory named was left out");
        }
        Err(err) => return Err(err.into()),
    };
    // Nothing written over a file named, merged or read and left out: a
    // host's report lost to the fleet's page could not be made again.
    let inputs: Vec<(String, (u64, u64))> = args
        .dirs
        .iter()
        .filter_map(|path| output::input("", path))
        .chain(
            report
                .left_out
                .iter()
                .filter_map(|left| output::input("", Path::new(&left.path))),
        )
        .chain(report.hosts.iter().filter_map(|host| {
            let source = host.source.as_ref()?;
            let (name, file) = (
                output::printable_field(&host.host),
                output::printable_field(&host.file),
            );
            Some((format!("host {name}'s report {file}"), source.id()))
        }))
        .collect();
    output::not_an_input(&outputs, &inputs)?;
    if !args.expect.is_empty() {
        report.expect(&expected);
    }
    say_left_out(&report.left_out);
    say_missing(&report);
    render::emit(&report, &args.output)?;
    if let Some(page) = &args.html {
        let pages = host_pages(&report, page, &inputs);
        output::write_atomically(page, html_page(&report, &pages).as_bytes())?;
    }
    if let Some(path) = &args.baseline {
        let baseline = Baseline::of(&report);
        let text = Document::new(&baseline).to_json()?;
        output::write_atomically(path, text.as_bytes())?;
        eprintln!(
            "numalab: baseline of {} written to {}",
            numalab::units::count(baseline.groups.len(), "group"),
            output::printable(&path.display().to_string())
        );
    }
    if !args.fail_on_outliers {
        return Ok(0);
    }
    let flagged_hosts = report.hosts.iter().filter(|h| h.outliers > 0).count();
    let mut failed = Vec::new();
    if flagged_hosts > 0 {
        failed.push(format!(
            "{} of {} flagged",
            numalab::units::count(report.outliers.len(), "figure"),
            numalab::units::count(flagged_hosts, "host")
        ));
    }
    if !report.missing.is_empty() {
        failed.push(format!(
            "{} expected without a report",
            numalab::units::count(report.missing.len(), "host")
        ));
    }
    if report.groups.len() > args.max_groups {
        failed.push(format!(
            "{} of hosts, more than --max-groups {}",
            numalab::units::count(report.groups.len(), "group"),
            args.max_groups
        ));
    }
    if failed.is_empty() {
        return Ok(0);
    }
    eprintln!(
        "numalab: {}: exit status 1 (--fail-on-outliers)",
        failed.join("; ")
    );
    Ok(1)
}

/// The most hosts that get a report page of their own beside the fleet's.
pub const MAX_HOST_PAGES: usize = 200;

/// The drill-down of the fleet page `page`: each host that stands out
/// (a figure flagged, or in a group too small to judge: one or two hosts
/// unlike the rest) gets its own report
/// page, `<page stem>-hosts/<host>.html`, made as `numalab report --from`
/// makes it from the very bytes merged (read again from the descriptor
/// they were read through, never by path); at most [`MAX_HOST_PAGES`], flagged hosts
/// first. Returns host → link relative to the fleet page; a page that
/// cannot be made is said on standard error and left out.
fn host_pages(
    report: &FleetReport,
    page: &Path,
    inputs: &[(String, (u64, u64))],
) -> BTreeMap<String, String> {
    let mut standing_out = report.standing_out();
    let mut links = BTreeMap::new();
    if standing_out.is_empty() {
        return links;
    }
    if standing_out.len() > MAX_HOST_PAGES {
        eprintln!(
            "numalab fleet: {} hosts stand out; report pages for the first {MAX_HOST_PAGES} (flagged first)",
            standing_out.len()
        );
        standing_out.truncate(MAX_HOST_PAGES);
    }
    let stem = page
        .file_stem()
        .map_or("fleet".into(), |s| s.to_string_lossy().into_owned());
    let dir_name = format!("{stem}-hosts");
    let dir = page.with_file_name(&dir_name);
    // Held open from here on: the pages go into this directory whatever
    // another user renames in its parent meanwhile.
    let held = match OutputDir::open_or_create(&dir) {
        Ok(held) => held,
        Err(OutputError::NotAFile { .. } | OutputError::NotADirectory { .. }) => {
            eprintln!(
                "numalab fleet: {} is not a directory: no report pages for the hosts",
                dir.display()
            );
            return links;
        }
        Err(err) => {
            eprintln!("numalab fleet: cannot make {}: {err}", dir.display());
            return links;
        }
    };
    let mut used = std::collections::BTreeSet::new();
    for entry in standing_out {
        let mut name: String = entry
            .host
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if name.is_empty() || name.starts_with('.') {
            name.insert(0, 'h');
        }
        let mut file = format!("{name}.html");
        let mut n = 2;
        while !used.insert(file.clone()) {
            file = format!("{name}-{n}.html");
            n += 1;
        }
        // A page never replaces a file this fleet read.
        let target = dir.join(&file);
        if let Err(err) = output::not_an_input(&[("a host page", &target)], inputs) {
            eprintln!(
                "numalab fleet: no report page for {}: {err:#}",
                output::printable_field(&entry.host)
            );
            continue;
        }
        let bytes = entry
            .source
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("{}: not read in this run", entry.file))
            .and_then(|source| source.read_again().map_err(anyhow::Error::msg));
        let made = bytes
            .and_then(|bytes| parse_saved::<Report>(bytes, Path::new(&entry.file)))
            .and_then(|host_report| {
                let host_report = host_report
                    .from_saved()
                    .map_err(|why| anyhow::anyhow!("{}: {why}", entry.file))?;
                page::html_page(&host_report, &[])
            })
            .and_then(|html| Ok(held.write(&file, html.as_bytes())?));
        match made {
            Ok(()) => {
                links.insert(entry.host.clone(), format!("{dir_name}/{file}"));
            }
            Err(err) => eprintln!(
                "numalab fleet: no report page for {}: {err:#}",
                output::printable_field(&entry.host)
            ),
        }
    }
    links
}

/// The hosts expected that sent no report, in one line on standard
/// error (the first 20 named).
fn say_missing(report: &FleetReport) {
    if report.missing.is_empty() {
        return;
    }
    eprintln!(
        "numalab: no report from {} of the {} expected: {}",
        numalab::units::count(report.missing.len(), "host"),
        report.expected.unwrap_or_default(),
        output::printable_field(&render::fleet::some_names(&report.missing, 20))
    );
}

/// Each file or directory left out, one line each on standard error.
fn say_left_out(left_out: &[LeftOut]) {
    for left in left_out {
        eprintln!(
            "numalab: left out {}",
            output::printable_field(&left.to_string())
        );
    }
}
