//! `numalab profile`: a program's memory by node over time, for a command
//! numalab runs or a process already running
//! ([`numalab_bench::profile`]); its tables are in `render/profile.rs`.

use std::ffi::OsString;

use anyhow::{Context, Result};
use clap::Args;
use numalab::launch::LaunchError;
use numalab::profile::ProfileOptions;
use numalab_bench::control::Control;
use numalab_bench::experiment::values::Seconds;
use numalab_bench::profile::{self as engine, EmitMachine, ProfileReport};

use crate::exit::{after_signal, cannot_run, EXIT_OWN_FAILURE};
use crate::output::{self, OutputArgs};
use crate::render;
use crate::signals::Interrupts;

/// Watch a program's memory node by node over time (numa_maps sampled like
/// mpstat), with its faults, CPU migrations, NUMA balancing's moves, the
/// nodes its threads ran on and, where the machine has a PMU, its loads,
/// stores and remote memory accesses
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("watched").args(["pid", "command"]).required(true)))]
#[command(after_help = "Examples:\n  \
    numalab profile -- sort -S 2G big.txt        run sort and watch it to its end\n  \
    numalab profile --pid 4242 --duration 30s    watch a running process for 30 s\n  \
    numalab profile --interval 1s --json -- ./app > profile.json\n\n\
Memory by node is read from /proc: each sample is exact for that moment (numastat -p's numbers), \
memory allocated and freed between two samples is not seen. Loads, stores and local/remote \
memory accesses are counted by the PMU (perf's generic events, the whole run) where there is one; \
the report says when there is not. The samples are spaced out so the sampling takes about 1% of \
a CPU (--max-overhead) after its first sample, which pages numalab's own code in and is not \
charged: more over the first seconds, 1.2% over a minute of a 1 GiB program here; what it took \
is printed. With a command, the report goes \
to standard error (the command owns standard output) or to --output, and numalab exits with the \
command's status (128 + N if signal N killed it; 125 when numalab fails, 126/127 when the command \
cannot be run). With --pid, Ctrl-C ends the watch and the samples so far are reported.")]
pub struct ProfileArgs {
    /// Watch this running process (all its threads, and the processes it
    /// starts) instead of running a command
    #[arg(long, value_name = "PID", conflicts_with = "command")]
    pub pid: Option<i32>,

    /// Time between samples (e.g. 200ms, 1s) [default: 100ms at first,
    /// half as long again after each sample, up to 1s]
    #[arg(long, value_name = "DURATION")]
    pub interval: Option<Seconds>,

    /// Stop watching after this long (with --pid; a command is watched to
    /// its end)
    #[arg(long, value_name = "DURATION")]
    pub duration: Option<Seconds>,

    /// Also count the pages written between samples (soft-dirty bits: an
    /// estimate of the write share; costs the program one page fault per
    /// page it writes per sample)
    #[arg(long)]
    pub writes: bool,

    /// The most of one CPU the sampling may take, in percent: samples
    /// are spaced out when reading costs more (a large program's page
    /// tables, --writes' clearing) [default: 1]
    #[arg(long, value_name = "PERCENT", value_parser = parse_percent)]
    pub max_overhead: Option<f64>,

    /// Also write an experiment file (TOML) that mimics what was seen —
    /// threads, footprint, huge pages, write share, run time — with a
    /// sweep over the placements worth trying (numalab sweep FILE)
    #[arg(long, value_name = "FILE")]
    pub emit: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub output: OutputArgs,

    /// The command and its arguments
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Runs `numalab profile`; returns the exit status to leave with.
pub fn run(args: &ProfileArgs) -> Result<i32> {
    args.output.check()?;
    if let Some(path) = &args.emit {
        output::check_target(path).with_context(|| format!("--emit {}", path.display()))?;
        if let Some(out) = args.output.file() {
            output::distinct_targets(&[("--output", out), ("--emit", path)])?;
        }
    }
    let mut options = ProfileOptions {
        duration: args.duration.map(|d| d.0),
        writes: args.writes,
        ..ProfileOptions::default()
    };
    if let Some(percent) = args.max_overhead {
        options.max_share = percent / 100.0;
    }
    if let Some(interval) = args.interval {
        options.interval = interval.0;
        options.grow_to = interval.0;
    }
    let Some(pid) = args.pid else {
        if args.duration.is_some() {
            anyhow::bail!("--duration is for --pid: a command is watched to its end");
        }
        return run_command(args, options);
    };
    if pid <= 0 {
        anyhow::bail!("--pid {pid}: a process id is a positive number");
    }
    let control = Control::new();
    let interrupts = Interrupts::catch(&control)?;
    let report = engine::run_pid(pid, options, &control).map_err(|err| {
        let why = match err.kind() {
            std::io::ErrorKind::NotFound => "no such process".to_owned(),
            std::io::ErrorKind::PermissionDenied if numalab::system::is_root() => {
                "permission denied although numalab runs as root: the kernel does not show this process's memory to it (Yama's ptrace_scope, a security module, or lockdown)"
                    .to_owned()
            }
            std::io::ErrorKind::PermissionDenied => {
                "permission denied (another user's process: run numalab as that user or as root)"
                    .to_owned()
            }
            _ => err.to_string(),
        };
        anyhow::anyhow!("--pid {pid}: {why}")
    })?;
    render::emit(&report, &args.output)?;
    emit_experiment(args, &report)?;
    Ok(interrupts.exit_status().unwrap_or(0))
}

fn run_command(args: &ProfileArgs, options: ProfileOptions) -> Result<i32> {
    let report = match engine::run(&args.command, options) {
        Ok(report) => report,
        Err(LaunchError::Interrupted { signal }) => {
            eprintln!("numalab profile: signal {signal} arrived before the command started; it was not run");
            return Ok(after_signal(signal));
        }
        Err(LaunchError::Spawn { program, source }) => {
            return Ok(cannot_run("profile", &program, &source));
        }
        Err(err) => return Err(err).context("numalab profile"),
    };
    let text = render::to_string(&report, args.output.format())?;
    args.output.emit_report(&text)?;
    emit_experiment(args, &report)?;
    Ok(report
        .exit
        .map_or(EXIT_OWN_FAILURE, |exit| exit.shell_code()))
}

/// Writes the experiment that mimics `report` to `--emit FILE`, if asked.
fn emit_experiment(args: &ProfileArgs, report: &ProfileReport) -> Result<()> {
    let Some(path) = &args.emit else {
        return Ok(());
    };
    let topology = numalab::Topology::system()?;
    let machine = EmitMachine {
        cpu_nodes: topology.nodes_with_cpus(),
        memory_nodes: topology.nodes_with_memory().len(),
        date: numalab_bench::document::now_rfc3339()[..10].to_owned(),
    };
    output::write_atomically(path, report.experiment(&machine).as_bytes())
        .with_context(|| format!("--emit {}", path.display()))?;
    eprintln!(
        "numalab profile: wrote {} (numalab run {0} runs it; numalab sweep {0} tries every placement)",
        path.display()
    );
    Ok(())
}

/// `--max-overhead`: a percentage from 0.1 to 50.
fn parse_percent(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("{text:?} is not a percentage (e.g. 1, 5, 0.5)"))?;
    if (0.1..=50.0).contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "{}% is outside 0.1 to 50",
            text.trim().trim_end_matches('%')
        ))
    }
}
