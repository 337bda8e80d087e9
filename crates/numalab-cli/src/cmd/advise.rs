//! `numalab advise`: run a command under every placement that makes sense
//! here and recommend one on the evidence ([`numalab_bench::advise`]); its
//! tables are in `render/advise.rs`.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use numalab::launch::LaunchError;
use numalab::Topology;
use numalab_bench::advise::{self, AdviseConfig, AdviseError, Candidate, Kind};
use numalab_bench::control::Control;
use numalab_bench::exec::ExecError;
use numalab_bench::experiment::values::Seconds;
use numalab_bench::matrix::MatrixReport;

use crate::exit::{after_signal, cannot_run};
use crate::flags::{self, Flags};
use crate::output::{self, OutputArgs};
use crate::render;

/// Run a command under every placement that makes sense on this machine,
/// several times each, and recommend one on the evidence
#[derive(Debug, Args)]
#[command(
    after_help = "The placements: first touch (the default, and the baseline), interleave \
over every node with memory, --cpunodebind=N --membind=N for each node with CPUs, --preferred=N \
for each node with memory, and weighted interleave with weights from the measured read bandwidth \
of each node (root: the kernel's weights are set for the run and restored). Each runs --warmup \
times unmeasured, then --runs times, in rounds that visit every placement in turn. A placement is \
recommended only when its interval (Welch's t on the logarithms of the times, as hyperfine's \
welch_ttest; 95% for all placements together, Bonferroni) says it is faster than first touch, \
and by 5% or more; a placement never slow beside a first touch that sometimes is wins once the \
runs are enough to tell. The exact numactl and numalab exec lines are printed. On a machine with one node with memory, nothing is run: placement cannot matter there.\n\n\
The command gets no input and its output is discarded (--show-output keeps it). It must succeed \
under first touch; a placement under which it fails is named and left out. A run that takes \
longer than --timeout is ended (SIGTERM, then SIGKILL 5 s later, with what it started) and \
counted as failed. numalab exits 0 when advice was given, 128 + N when signal N ended it early \
(the runs so far are reported), the command's status when it fails under first touch, 124 when \
its first run there does not end in time, 126/127 when it cannot be run, 125 when numalab \
fails.\n\n\
Examples:\n  \
  numalab advise -- ./app --size 8G               every placement, 5 runs each\n  \
  numalab advise --runs 10 --placements interleave,bind -- ./app\n  \
  numalab advise --timeout 2m -- ./app            a run over 2 minutes fails\n  \
  numalab advise --matrix matrix.json --json -- ./app > advice.json"
)]
pub struct AdviseArgs {
    /// Measured runs per placement (2 to 1000)
    #[arg(long, short = 'r', default_value_t = 5, value_name = "N",
          value_parser = clap::value_parser!(u32).range(2..=1000))]
    pub runs: u32,

    /// Unmeasured runs per placement before the measured ones (0 to 100)
    #[arg(long, short = 'w', default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u32).range(0..=100))]
    pub warmup: u32,

    /// Which placements besides first touch: interleave, bind, preferred,
    /// weighted (comma-separated) [default: all]
    #[arg(long, value_name = "KINDS", value_delimiter = ',', value_parser = kinds())]
    pub placements: Vec<Kind>,

    /// Weighted-interleave weights from this `numalab matrix --json`
    /// result's read bandwidths, instead of measuring them first
    #[arg(long, value_name = "FILE")]
    pub matrix: Option<PathBuf>,

    /// Let the command read the terminal and write to it
    #[arg(long)]
    pub show_output: bool,

    /// The longest one run may take (`90s`, `10m`; at most 24h) before
    /// it is ended and counted as failed [default: 10 times the first
    /// run under first touch, at least 1 minute; the first run 1 hour]
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<Seconds>,

    #[command(flatten)]
    pub output: OutputArgs,

    /// The command and its arguments
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// `--placements`' kinds, listed as its possible values.
fn kinds() -> impl clap::builder::TypedValueParser<Value = Kind> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Kind::ALL.map(Kind::name))
        .try_map(|name| name.parse::<Kind>())
}

/// The engine's settings as `numalab advise` spells them.
const FLAGS: &Flags = &[
    ("runs", "--runs"),
    ("warmup", "--warmup"),
    ("show_output", "--show-output"),
    ("timeout", "--timeout"),
];

/// The engine's error as this command shows it, settings spelt as flags.
fn shown(err: &AdviseError) -> String {
    err.message()
        .map_or_else(|| err.to_string(), |m| flags::spell(&m, FLAGS))
}

/// The largest matrix result read with --matrix.
const MAX_MATRIX_BYTES: u64 = 64 << 20;

/// Runs `numalab advise`; returns the exit status to leave with.
pub fn run(args: &AdviseArgs) -> Result<i32> {
    args.output.check()?;
    if let Some(matrix) = &args.matrix {
        output::not_over_input(args.output.file(), "--matrix", matrix)?;
    }
    // Before anything is measured: a shell's 127 or 126.
    if let Err(source) = numalab::launch::find_program(&args.command[0]) {
        return Ok(cannot_run("advise", &args.command[0], &source));
    }
    let topology = Topology::system()?;
    let saved = match &args.matrix {
        Some(path) => Some(read_matrix(path)?),
        None => None,
    };
    let config = AdviseConfig {
        runs: args.runs as usize,
        warmup: args.warmup as usize,
        show_output: args.show_output,
        timeout: args.timeout.map(|t| t.0),
        ..AdviseConfig::new(args.command.clone())
    };
    let control = Control::new().with_messages(|line| eprintln!("numalab advise: {line}"));
    let plan = advise::plan(
        &topology,
        &args.placements,
        saved.as_ref().and_then(|m| m.bandwidth.as_ref()),
        &control,
    )?;
    let tty = std::io::stderr().is_terminal();
    let total = (config.warmup + config.runs) * plan.candidates.len();
    let mut done = 0;
    let mut progress = |candidate: &Candidate, run: &numalab_bench::advise::AdviseRun| {
        done += 1;
        let line = format!(
            "numalab advise: {done}/{total} {} {}{:.3} s",
            candidate.name,
            if run.warmup { "(warm-up) " } else { "" },
            run.seconds
        );
        if tty {
            eprint!("\r\x1b[K{line}");
        } else {
            eprintln!("{line}");
        }
    };
    let result = advise::run(&topology, &config, plan, &mut progress);
    if tty && total > 0 {
        eprintln!();
    }
    let report = match result {
        Ok(report) => report,
        Err(AdviseError::Exec(ExecError::Launch(LaunchError::Spawn { program, source }))) => {
            return Ok(cannot_run("advise", &program, &source));
        }
        Err(AdviseError::Exec(ExecError::Launch(LaunchError::Interrupted { signal }))) => {
            eprintln!("numalab advise: signal {signal} arrived before the command started; it was not run");
            return Ok(after_signal(signal));
        }
        Err(err @ AdviseError::FailsByDefault { code, .. }) => {
            eprintln!("numalab advise: {}", shown(&err));
            return Ok(code);
        }
        Err(err @ AdviseError::TimesOutByDefault { .. }) => {
            eprintln!("numalab advise: {}", shown(&err));
            return Ok(124);
        }
        Err(err) => {
            let message = err.message();
            return Err(flags::with_flags(err, message, FLAGS));
        }
    };
    render::emit(&report, &args.output)?;
    if let Some(code) = report.failed_by_default {
        return Ok(code);
    }
    Ok(report.interrupted.map_or(0, after_signal))
}

fn read_matrix(path: &std::path::Path) -> Result<MatrixReport> {
    let bytes = numalab::files::read_input_limited(path, MAX_MATRIX_BYTES, "matrix results")
        .with_context(|| format!("--matrix {}", path.display()))?;
    let result: MatrixReport = crate::saved::parse_saved(bytes, path).with_context(|| {
        format!(
            "--matrix {}: not a numalab matrix --json result",
            path.display()
        )
    })?;
    if result.bandwidth.is_none() {
        bail!(
            "--matrix {}: has no bandwidth figures (measured with --no-bandwidth?)",
            path.display()
        );
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use numalab::launch::Exit;
    use numalab_bench::advise::ExitText;

    use super::*;

    /// The engine's refusals name settings this command spells as flags
    /// it has.
    #[test]
    fn every_setting_the_engine_names_is_spelt_as_a_flag_it_has() {
        let errors = [
            AdviseError::TooFewRuns(1),
            AdviseError::FailsByDefault {
                exit: ExitText(Exit::Code(3)),
                code: 3,
            },
            AdviseError::TimesOutByDefault {
                limit: Duration::from_secs(60),
            },
        ];
        let texts: Vec<String> = errors.iter().map(shown).collect();
        assert!(texts[0].starts_with("--runs=1: "), "{}", texts[0]);
        assert!(texts[1].ends_with("(its output is shown with --show-output)"));
        assert!(texts[2].contains("give a longer --timeout"), "{}", texts[2]);
        for err in &errors {
            let message = err.message().unwrap();
            assert_eq!(flags::unspelt(&message, FLAGS), Vec::<&str>::new());
        }
        let longs = flags::longs_of::<AdviseArgs>();
        for (_, flag) in FLAGS {
            assert!(
                longs.iter().any(|l| l == flag),
                "{flag} is not a flag of advise"
            );
        }
    }
}
