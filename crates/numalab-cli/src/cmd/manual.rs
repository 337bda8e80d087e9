//! `numalab completions SHELL` and `numalab manpages DIR`: the shell
//! completions and the manual pages, both made from the same clap
//! definitions as `--help`, so none of the three can say something the
//! others do not.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use clap_mangen::roff::{roman, Roff};
use clap_mangen::Man;

use crate::output;

/// Print the completion script of a shell to standard output
#[derive(Debug, Args)]
#[command(after_help = "Install it where the shell looks:\n  \
    numalab completions bash > /etc/bash_completion.d/numalab\n  \
    numalab completions zsh > /usr/local/share/zsh/site-functions/_numalab\n  \
    numalab completions fish > ~/.config/fish/completions/numalab.fish\n\
    The Debian package installs all three.")]
pub struct CompletionsArgs {
    /// The shell
    #[arg(value_enum)]
    pub shell: Shell,
}

/// A shell numalab completes in.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// Write numalab's manual pages, one per command, into a directory
#[derive(Debug, Args)]
pub struct ManpagesArgs {
    /// The directory (made if missing); existing pages are replaced
    pub dir: PathBuf,
}

pub fn completions(args: &CompletionsArgs, mut command: clap::Command) -> Result<()> {
    let mut script = Vec::new();
    let name = command.get_name().to_owned();
    match args.shell {
        Shell::Bash => {
            clap_complete::generate(clap_complete::Shell::Bash, &mut command, name, &mut script)
        }
        Shell::Zsh => {
            clap_complete::generate(clap_complete::Shell::Zsh, &mut command, name, &mut script)
        }
        Shell::Fish => {
            clap_complete::generate(clap_complete::Shell::Fish, &mut command, name, &mut script)
        }
    }
    let mut script = String::from_utf8(script).context("the completion script")?;
    if let Shell::Bash = args.shell {
        script = complete_nodes_in_bash(&script, &node_flags(&command));
    }
    output::print_stdout(&script)
}

/// The long flags that take node numbers (their value is `NODE…` in
/// every command that has them), each with whether it takes a set of
/// nodes (`NODES`: `all` is one).
fn node_flags(command: &clap::Command) -> Vec<(String, bool)> {
    type Seen = std::collections::BTreeMap<String, Option<bool>>;
    fn visit(command: &clap::Command, flags: &mut Seen) {
        for arg in command.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let names = arg.get_value_names().unwrap_or_default();
            let nodes = !names.is_empty() && names.iter().all(|n| n.starts_with("NODE"));
            let sets = names.iter().all(|n| n.starts_with("NODES"));
            let this = nodes.then_some(sets);
            let seen = flags.entry(long.to_owned()).or_insert(this);
            if *seen != this {
                *seen = None;
            }
        }
        for sub in command.get_subcommands() {
            visit(sub, flags);
        }
    }
    let mut flags = Seen::new();
    visit(command, &mut flags);
    flags
        .into_iter()
        .filter_map(|(flag, sets)| sets.map(|sets| (flag, sets)))
        .collect()
}

/// clap's bash script completes every value as a file name; for a flag
/// that takes nodes, offer this machine's node numbers instead (read from
/// /sys when Tab is pressed), and `all` where a set of nodes is taken.
fn complete_nodes_in_bash(script: &str, flags: &[(String, bool)]) -> String {
    const FILES: &str = r#"COMPREPLY=($(compgen -f "${cur}"))"#;
    let mut out = String::with_capacity(script.len() + 512);
    let mut node_flag: Option<bool> = None;
    for line in script.lines() {
        match node_flag {
            Some(sets) if line.trim() == FILES => {
                let words = if sets {
                    "$(_numalab_nodes) all"
                } else {
                    "$(_numalab_nodes)"
                };
                let nodes = format!(r#"COMPREPLY=($(compgen -W "{words}" -- "${{cur}}"))"#);
                out.push_str(&line.replace(FILES, &nodes));
            }
            _ => out.push_str(line),
        }
        out.push('\n');
        node_flag = line
            .trim()
            .strip_suffix(')')
            .and_then(|t| t.strip_prefix("--"))
            .and_then(|flag| flags.iter().find(|(f, _)| f == flag))
            .map(|(_, sets)| *sets);
    }
    out.push_str(
        "\n# The node numbers of this machine, for the flags that take nodes.\n\
         _numalab_nodes() {\n    \
             local n\n    \
             for n in /sys/devices/system/node/node[0-9]*; do\n        \
                 [[ -e $n ]] && echo \"${n##*/node}\"\n    \
             done\n\
         }\n",
    );
    out
}

pub fn manpages(args: &ManpagesArgs, command: clap::Command) -> Result<()> {
    std::fs::create_dir_all(&args.dir).with_context(|| format!("making {}", args.dir.display()))?;
    let mut command = command.disable_help_subcommand(true);
    command.build();
    let mut written = 0;
    for (name, page) in pages(&command)? {
        output::write_atomically(&args.dir.join(format!("{name}.1")), &page)?;
        written += 1;
    }
    eprintln!(
        "numalab: wrote {written} manual pages into {}",
        args.dir.display()
    );
    Ok(())
}

/// Every page: `numalab` and one per visible command (`numalab-exec`, and
/// `numalab-fleet-collect` for a command's own commands), each with its
/// rendered roff.
pub fn pages(command: &clap::Command) -> Result<Vec<(String, Vec<u8>)>> {
    let mut pages = Vec::new();
    collect(command, &mut Vec::new(), &mut pages)?;
    Ok(pages)
}

fn collect(
    command: &clap::Command,
    path: &mut Vec<String>,
    pages: &mut Vec<(String, Vec<u8>)>,
) -> Result<()> {
    path.push(command.get_name().to_owned());
    let name = path.join("-");
    pages.push((name.clone(), page(command, path)?));
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        collect(sub, path, pages)?;
    }
    path.pop();
    Ok(())
}

/// One page: clap's sections (name, synopsis, description, options,
/// commands), the command's notes and examples from its help, then its
/// exit status and where the guide is.
fn page(command: &clap::Command, path: &[String]) -> Result<Vec<u8>> {
    let name = path.join("-");
    let top = path.len() == 1;
    let man = Man::new(command.clone().name(name.clone()))
        .title(name.to_uppercase())
        .section("1")
        .source(format!("numalab {}", numalab::VERSION))
        .manual("numalab manual");
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if command.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if command.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut out)?;
    }
    let mut roff = Roff::default();
    if let Some(notes) = command
        .get_after_long_help()
        .or_else(|| command.get_after_help())
    {
        // "Examples:" and its indented lines are the examples; the text
        // around them, the notes.
        let notes = notes.to_string();
        let (notes, examples) = match notes.split_once("Examples:") {
            Some((before, after)) => {
                let (examples, rest) = after.split_once("\n\n").unwrap_or((after, ""));
                (
                    format!("{}\n\n{}", before.trim(), rest.trim()),
                    Some(examples),
                )
            }
            None => (notes, None),
        };
        let notes = notes.trim();
        if !notes.is_empty() {
            roff.control("SH", ["NOTES"]);
            paragraphs(&mut roff, notes);
        }
        if let Some(examples) = examples {
            roff.control("SH", ["EXAMPLES"]);
            for line in examples.lines().map(str::trim).filter(|l| !l.is_empty()) {
                roff.control("PP", []);
                roff.text([roman(line)]);
            }
        }
    }
    roff.control("SH", ["EXIT STATUS"]);
    for (status, meaning) in exit_status(&path[1..]) {
        roff.control("TP", []);
        roff.text([roman(status)]);
        roff.text([roman(meaning)]);
    }
    roff.control("SH", ["SEE ALSO"]);
    let guide = path.get(1).map_or("README".to_owned(), |c| guide(c));
    let mut see = if top {
        "numactl(8), numastat(8), lstopo(1), fincore(1)".to_owned()
    } else {
        "numalab(1)".to_owned()
    };
    see.push_str(&format!(
        ". The guide: /usr/share/doc/numalab/docs/{guide}.md (docs/{guide}.md in the sources)."
    ));
    roff.text([roman(see)]);
    roff.control("SH", ["VERSION"]);
    roff.text([roman(numalab::VERSION)]);
    roff.to_writer(&mut out)?;
    if out.is_empty() {
        bail!("the page of {name} came out empty");
    }
    out.flush()?;
    Ok(out)
}

/// Text as roff paragraphs: a blank line starts a new one, and a line
/// indented in `--help` keeps its own line.
fn paragraphs(roff: &mut Roff, text: &str) {
    for (i, block) in text.split("\n\n").enumerate() {
        if i > 0 {
            roff.control("PP", []);
        }
        for line in block.lines() {
            if line.starts_with(' ') {
                roff.control("br", []);
            }
            roff.text([roman(line.trim())]);
        }
    }
}

/// The guide a command's page points to (docs/NAME.md).
fn guide(command: &str) -> String {
    match command {
        "run" | "sweep" | "plot" => "experiments",
        "fincore" => "pagecache",
        "check" => "fleet",
        "advise" | "exec" | "fill" | "fleet" | "matrix" | "pagecache" | "profile" | "report"
        | "ring" | "topo" => command,
        _ => "README",
    }
    .to_owned()
}

/// The exit statuses of a command (its path below `numalab`), as
/// docs/exit-status.md gives them.
fn exit_status(path: &[String]) -> Vec<(&'static str, &'static str)> {
    let first = path.first().map(String::as_str).unwrap_or("");
    if matches!(first, "exec" | "profile" | "advise") {
        let mut statuses = vec![
            ("125", "numalab failed, or its command line was wrong (in place of 1 and 2, which belong to the command it runs)."),
            ("126", "The command was found but could not be run."),
            ("127", "The command was not found."),
        ];
        statuses.push(if first == "advise" {
            (
                "0",
                "Advice was given, whatever the command's own statuses.",
            )
        } else {
            (
                "other",
                "The command's own status, as soon as it exits (128 + N when signal N killed it).",
            )
        });
        if first == "advise" {
            statuses.push(("128 + N", "Signal N stopped the measurement; what was measured is written, marked interrupted."));
        }
        return statuses;
    }
    if first == "check" {
        return vec![
            ("0", "The host is healthy by the baseline."),
            ("1", "The host is not: one line names what is wrong."),
            ("2", "numalab could not check: its command line, a baseline that does not read, a measurement that failed."),
        ];
    }
    let mut statuses = vec![
        ("0", "Done."),
        ("1", "numalab read the command line but refused what it asks or could not do it (a node this machine lacks, an output it may not write, a measurement that failed)."),
        ("2", "The command line could not be read: an unknown flag, a missing or malformed value."),
    ];
    if matches!(
        first,
        "matrix" | "report" | "run" | "sweep" | "pagecache" | "ring" | "fill"
    ) {
        statuses.push(("128 + N", "Signal N (Ctrl-C: 130) stopped a measurement; what was measured until then is written, marked interrupted."));
    }
    statuses
}
