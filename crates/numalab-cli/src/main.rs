//! `numalab`: measure what NUMA costs on a machine, find the right memory
//! and thread placement for a workload, and check where pages really went.

mod args;
mod cmd;
mod exit;
mod exp;
mod flags;
mod output;
mod placement;
mod plot;
mod render;
mod saved;
mod signals;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Measure what NUMA costs on this machine, find the right memory and
/// thread placement for a workload, and check where pages really landed.
#[derive(Debug, Parser)]
#[command(
    name = "numalab",
    version = version(),
    propagate_version = true,
    max_term_width = 100
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Report(cmd::report::ReportArgs),
    Topo(cmd::topo::TopoArgs),
    Exec(cmd::exec::ExecArgs),
    Profile(cmd::profile::ProfileArgs),
    Advise(cmd::advise::AdviseArgs),
    Matrix(cmd::matrix::MatrixArgs),
    Fill(cmd::fill::FillArgs),
    Fincore(cmd::fincore::FincoreArgs),
    Fleet(cmd::fleet::FleetArgs),
    Check(cmd::check::CheckArgs),
    Pagecache(cmd::pagecache::PagecacheArgs),
    Run(cmd::run::RunArgs),
    Sweep(cmd::sweep::SweepArgs),
    Plot(cmd::plot::PlotArgs),
    Ring(cmd::ring::RingArgs),
    Completions(cmd::manual::CompletionsArgs),
    /// Write numalab's manual pages into a directory (for packagers)
    #[command(hide = true)]
    Manpages(cmd::manual::ManpagesArgs),
    /// A writer or reader process of `numalab ring`
    #[command(hide = true)]
    RingWorker(cmd::ring::WorkerArgs),
}

/// This build: numalab's version and commit, and `.dirty` when the
/// sources it was built from had uncommitted changes (`0.2.0+3f2c1a9b7d4e`,
/// `0.2.0+3f2c1a9b7d4e.dirty`).
fn version() -> String {
    let dirty = env!("NUMALAB_DIRTY");
    match numalab::VERSION.contains('+') {
        true => format!("{}{dirty}", numalab::VERSION),
        false if dirty.is_empty() => numalab::VERSION.to_owned(),
        false => format!("{}+dirty", numalab::VERSION),
    }
}

/// numalab's command line as clap sees it, for the completions and the
/// manual pages.
fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Parses the command line; a usage error exits 2, or 125 for `exec`,
/// `profile` and `advise`, whose own 1 and 2 belong to the command they
/// run (as `env`, `timeout`, `nice` exit 125).
fn parse() -> Cli {
    Cli::try_parse().unwrap_or_else(|err| {
        let _ = err.print();
        if let Some(hint) = numactl_hint(&err) {
            eprintln!("\ntip: {hint}");
        }
        // `profile` and `advise` run a command too.
        let exec = std::env::args_os()
            .nth(1)
            .is_some_and(|a| a == "exec" || a == "profile" || a == "advise");
        let code = match err.use_stderr() {
            false => 0,
            true if exec => exit::EXIT_OWN_FAILURE,
            true => 2,
        };
        std::process::exit(code)
    })
}

/// Where numalab does what a numactl option a user typed does, for an
/// option numalab does not take: `numactl --hardware`'s table is `numalab
/// topo`, `-m` in `matrix` is `--mem-nodes`.
fn numactl_hint(err: &clap::Error) -> Option<String> {
    if err.kind() != clap::error::ErrorKind::UnknownArgument {
        return None;
    }
    let clap::error::ContextValue::String(arg) = err.get(clap::error::ContextKind::InvalidArg)?
    else {
        return None;
    };
    let option = arg.split('=').next().unwrap_or(arg);
    let command = std::env::args().nth(1).unwrap_or_default();
    numactl_hint_for(&command, option).map(str::to_owned)
}

/// The hint for `option` given to `command` (its first word).
fn numactl_hint_for(command: &str, option: &str) -> Option<&'static str> {
    Some(match (command, option) {
        (_, "--hardware" | "-H") => {
            "numactl --hardware's nodes, CPUs, memory and distances are `numalab topo` (and `numalab topo --json`)"
        }
        ("exec", "--show" | "-s") => {
            "numactl --show prints the policy the shell runs under; numalab exec's report says the policy it ran the command under and where its pages went"
        }
        ("exec", "--all" | "-a") => {
            "numactl --all ignores the process's cpuset; numalab exec keeps to the CPUs and nodes this process may use"
        }
        ("matrix", "-m" | "--membind") => {
            "numalab matrix measures the memory of the nodes given with --mem-nodes (and runs on those of --cpu-nodes)"
        }
        ("matrix", "-N" | "--cpunodebind") => {
            "numalab matrix runs on the CPUs of the nodes given with --cpu-nodes (and measures those of --mem-nodes)"
        }
        _ => return None,
    })
}

/// The error and its causes, each said once: a cause whose text the
/// message before it already holds is left out.
fn describe(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

fn main() -> ExitCode {
    let cli = parse();
    let result = match &cli.command {
        Command::Report(args) => cmd::report::run(args).map_err(|e| (e, 1)),
        Command::Topo(args) => cmd::topo::run(args).map(|()| 0).map_err(|e| (e, 1)),
        Command::Exec(args) => cmd::exec::run(args).map_err(|e| (e, exit::EXIT_OWN_FAILURE)),
        Command::Profile(args) => cmd::profile::run(args).map_err(|e| (e, exit::EXIT_OWN_FAILURE)),
        Command::Advise(args) => cmd::advise::run(args).map_err(|e| (e, exit::EXIT_OWN_FAILURE)),
        Command::Matrix(args) => cmd::matrix::run(args).map_err(|e| (e, 1)),
        Command::Fill(args) => cmd::fill::run(args).map_err(|e| (e, 1)),
        Command::Fincore(args) => cmd::fincore::run(args).map_err(|e| (e, 1)),
        Command::Fleet(args) => cmd::fleet::run(args).map_err(|e| (e, 1)),
        Command::Check(args) => cmd::check::run(args)
            .map(i32::from)
            .map_err(|e| (e, i32::from(cmd::check::EXIT_CANNOT_CHECK))),
        Command::Pagecache(args) => cmd::pagecache::run(args).map_err(|e| (e, 1)),
        Command::Run(args) => cmd::run::run(args).map_err(|e| (e, 1)),
        Command::Sweep(args) => cmd::sweep::run(args).map_err(|e| (e, 1)),
        Command::Plot(args) => cmd::plot::run(args).map(|()| 0).map_err(|e| (e, 1)),
        Command::Ring(args) => cmd::ring::run(args).map_err(|e| (e, 1)),
        Command::Completions(args) => cmd::manual::completions(args, command())
            .map(|()| 0)
            .map_err(|e| (e, 1)),
        Command::Manpages(args) => cmd::manual::manpages(args, command())
            .map(|()| 0)
            .map_err(|e| (e, 1)),
        Command::RingWorker(args) => cmd::ring::worker(args).map(|()| 0).map_err(|e| (e, 1)),
    };
    match result {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err((err, code)) => {
            eprintln!("numalab: error: {}", output::printable(&describe(&err)));
            ExitCode::from(code as u8)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn numactl_options_numalab_lacks_point_to_what_does_their_job() {
        let hint = |args: &[&str]| {
            let err = Cli::try_parse_from(args).unwrap_err();
            let option = match err.get(clap::error::ContextKind::InvalidArg) {
                Some(clap::error::ContextValue::String(arg)) => arg.clone(),
                other => panic!("{args:?}: {other:?}"),
            };
            numactl_hint_for(args[1], option.split('=').next().unwrap())
        };
        assert!(hint(&["numalab", "exec", "-H"])
            .unwrap()
            .contains("`numalab topo`"));
        assert!(hint(&["numalab", "--hardware"])
            .unwrap()
            .contains("`numalab topo`"));
        assert!(hint(&["numalab", "exec", "--show", "--", "true"])
            .unwrap()
            .contains("numactl --show"));
        assert!(hint(&["numalab", "matrix", "-m", "0"])
            .unwrap()
            .contains("--mem-nodes"));
        assert_eq!(hint(&["numalab", "exec", "--bogus", "--", "true"]), None);
        // numactl's older --cpubind is --cpunodebind.
        let cli = Cli::try_parse_from(["numalab", "exec", "--cpubind=0", "--", "true"]).unwrap();
        let Command::Exec(exec) = cli.command else {
            panic!("not exec");
        };
        assert_eq!(exec.placement.cpunodebind.as_deref(), Some("0"));
    }

    #[test]
    fn error_chain_says_each_fact_once() {
        // An error whose message embeds its source, as many thiserror
        // messages do (`"{key} = {value}: {source}"`).
        #[derive(Debug)]
        struct Outer {
            source: std::io::Error,
        }
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "memory.policy = \"bind:7\": {}", self.source)
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.source)
            }
        }
        let inner = std::io::Error::other("node 7 does not exist; this machine has node 0");
        let err = anyhow::Error::new(Outer { source: inner }).context("--set memory.policy=bind:7");
        let text = describe(&err);
        assert_eq!(text.matches("node 7 does not exist").count(), 1, "{text}");
        assert_eq!(
            text,
            "--set memory.policy=bind:7: memory.policy = \"bind:7\": node 7 does not exist; this machine has node 0"
        );
        // Causes that add something are all kept, in order.
        let err = anyhow::anyhow!("inner").context("middle").context("outer");
        assert_eq!(describe(&err), "outer: middle: inner");
    }

    /// The words of a command line as a POSIX shell splits them (quotes
    /// and backslashes), up to a comment, a redirection, a pipe or `&&`.
    fn shell_words(line: &str) -> Vec<String> {
        let mut words = Vec::new();
        let mut word: Option<String> = None;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\'' => {
                    let w = word.get_or_insert_with(String::new);
                    for c in chars.by_ref() {
                        if c == '\'' {
                            break;
                        }
                        w.push(c);
                    }
                }
                '"' => {
                    let w = word.get_or_insert_with(String::new);
                    while let Some(c) = chars.next() {
                        match c {
                            '"' => break,
                            '\\' => w.extend(chars.next()),
                            c => w.push(c),
                        }
                    }
                }
                '\\' => word.get_or_insert_with(String::new).extend(chars.next()),
                c if c.is_whitespace() => words.extend(word.take()),
                '#' if word.is_none() => break,
                '|' | ';' | '>' | '<' | '&' => {
                    // `2>file`: the fd number belongs to the redirection.
                    if c == '>'
                        && word
                            .as_deref()
                            .is_some_and(|w| w.chars().all(|d| d.is_ascii_digit()))
                    {
                        word = None;
                    }
                    break;
                }
                c => word.get_or_insert_with(String::new).push(c),
            }
        }
        words.extend(word);
        words
    }

    #[test]
    fn shell_words_split_as_a_shell_does() {
        assert_eq!(
            shell_words("numalab a 'b c' \"d\\\"e\" f\\ g # h"),
            ["numalab", "a", "b c", "d\"e", "f g"]
        );
        assert_eq!(
            shell_words("numalab exec -m 0 -- ./app 2>r.json"),
            ["numalab", "exec", "-m", "0", "--", "./app"]
        );
        assert_eq!(
            shell_words("numalab topo --json | jq ."),
            ["numalab", "topo", "--json"]
        );
    }

    /// Every `$ numalab …` line of the README and the guides is a command
    /// line numalab accepts: an example whose flag was renamed, removed or
    /// given a value it no longer takes fails the build. (The examples
    /// that measure are run by the tests of their command; this checks
    /// every one of them as a user would type it.)
    /// Every example in a command's help (and so in its manual page's
    /// EXAMPLES) is a command line numalab accepts.
    #[test]
    fn every_example_in_the_help_is_accepted() {
        fn visit(command: &clap::Command, examples: &mut Vec<String>) {
            let help = command
                .get_after_long_help()
                .or_else(|| command.get_after_help())
                .map(|h| h.to_string())
                .unwrap_or_default();
            if let Some((_, after)) = help.split_once("Examples:") {
                let block = after.split("\n\n").next().unwrap_or_default();
                for line in block.lines().map(str::trim) {
                    // `numalab … -- ./app   what it does`: the description
                    // follows two spaces or more.
                    let line = line.split("  ").next().unwrap_or_default();
                    if line.starts_with("numalab ") {
                        examples.push(line.to_owned());
                    }
                }
            }
            for sub in command.get_subcommands() {
                visit(sub, examples);
            }
        }
        let mut examples = Vec::new();
        visit(&Cli::command(), &mut examples);
        assert!(
            examples.len() >= 30,
            "only {} examples: {examples:?}",
            examples.len()
        );
        let refused: Vec<String> = examples
            .iter()
            .filter(|line| {
                let words = shell_words(line);
                !words.iter().any(|w| w.contains('…') || w == "...")
                    && Cli::try_parse_from(&words).is_err_and(|e| e.use_stderr())
            })
            .cloned()
            .collect();
        assert!(refused.is_empty(), "examples refused: {refused:#?}");
    }

    #[test]
    fn every_documented_command_line_is_accepted() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files = vec![root.join("README.md")];
        let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        docs.sort();
        files.extend(docs);
        let mut checked = 0;
        let mut refused = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            for (i, line) in text.lines().enumerate() {
                let Some(command) = line.trim_start().strip_prefix("$ ") else {
                    continue;
                };
                // `mkdir -p figures && numalab plot …`: each numalab of the line.
                for part in command.split("&&") {
                    let words = shell_words(part.trim());
                    if words.first().map(String::as_str) != Some("numalab") {
                        continue;
                    }
                    // Placeholders (`…`, `NAME`, `...`) stand for a user's own words.
                    if words.iter().any(|w| w.contains('…') || w == "...") {
                        continue;
                    }
                    checked += 1;
                    if let Err(err) = Cli::try_parse_from(&words) {
                        if err.use_stderr() {
                            let first = err
                                .to_string()
                                .lines()
                                .next()
                                .unwrap_or_default()
                                .to_owned();
                            refused.push(format!(
                                "{}:{}: {command}\n    {first}",
                                file.display(),
                                i + 1
                            ));
                        }
                    }
                }
            }
        }
        assert!(
            checked >= 60,
            "only {checked} documented command lines found"
        );
        assert!(
            refused.is_empty(),
            "{} of {checked} documented command lines are refused:\n{}",
            refused.len(),
            refused.join("\n")
        );
    }
}
