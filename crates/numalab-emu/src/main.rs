//! `numalab-emu`: boot Linux under QEMU with emulated NUMA nodes and check
//! numalab inside.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use numalab_emu::guest::{selected, CHECKS};
use numalab_emu::harness::{default_jobs, default_timeout, run_suite, SuiteEnd};
use numalab_emu::preset::Presets;
use numalab_emu::qemu::BootOptions;

/// Boot Linux under QEMU (TCG) with emulated NUMA nodes, as described in
/// presets.toml, and check numalab's topology and placement inside
#[derive(Debug, Parser)]
#[command(
    name = "numalab-emu",
    max_term_width = 100,
    after_help = "Examples:\n  \
        cargo run -p numalab-emu -- --list\n  \
        cargo run -p numalab-emu -- --preset two-socket\n  \
        cargo run -p numalab-emu -- --all\n  \
        cargo run -p numalab-emu -- --all --kernel 6.12 --jobs 1\n  \
        cargo run -p numalab-emu -- --preset cxl --checks topo,buffer.bind -v\n  \
        cargo run -p numalab-emu -- --preset cxl --shell      then try numalab topo"
)]
struct Cli {
    /// Boot this preset (repeat for several)
    #[arg(long, short = 'p', value_name = "NAME")]
    preset: Vec<String>,

    /// Boot every preset
    #[arg(long, conflicts_with = "preset")]
    all: bool,

    /// List the presets and the checks, then exit
    #[arg(long)]
    list: bool,

    /// Run only these checks: comma-separated names or prefixes (topo,
    /// buffer.bind); `none` with --shell boots straight to the shell
    #[arg(long, value_name = "CHECKS")]
    checks: Option<String>,

    /// After the checks, keep the guest running with a shell on this
    /// terminal (one preset; exit the shell to power off)
    #[arg(long)]
    shell: bool,

    /// Boot only this kernel: a series (6.1, 6.12) or the start of a
    /// release (repeat for several) [default: every kernel found, see
    /// NUMALAB_EMU_KERNEL; with --shell the newest]
    #[arg(long, value_name = "VERSION")]
    kernel: Vec<String>,

    /// Boot this many guests at once [default: 2, or $NUMALAB_EMU_JOBS]
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    jobs: Option<u16>,

    /// Kill a guest that has not powered off after SECONDS [default: 1200,
    /// or $NUMALAB_EMU_TIMEOUT]
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<u64>,

    /// Show each guest's console as it runs
    #[arg(long, short = 'v')]
    verbose: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let presets = match Presets::builtin() {
        Ok(presets) => presets,
        Err(err) => {
            eprintln!("numalab-emu: error: {err}");
            return ExitCode::FAILURE;
        }
    };
    if cli.list {
        println!("presets (crates/numalab-emu/presets.toml):");
        for preset in &presets.presets {
            println!(
                "  {:<12} {}: {}",
                preset.name,
                preset.summary(),
                preset.about
            );
        }
        println!("\nchecks (crates/numalab-emu/src/guest/):");
        for check in CHECKS {
            println!("  {:<28} {}", check.name, check.about);
        }
        return ExitCode::SUCCESS;
    }
    let chosen: Vec<_> = if cli.all {
        presets.presets.iter().collect()
    } else if cli.preset.is_empty() {
        eprintln!(
            "numalab-emu: error: choose --preset NAME or --all; the presets are {}",
            presets.names().join(", ")
        );
        return ExitCode::from(2);
    } else {
        let mut chosen = Vec::new();
        for name in &cli.preset {
            match presets.get(name) {
                Ok(preset) => chosen.push(preset),
                Err(err) => {
                    eprintln!("numalab-emu: error: --preset {name}: {err}");
                    return ExitCode::from(2);
                }
            }
        }
        chosen
    };
    let checks = match cli.checks.as_deref() {
        // No checks: boot straight to the shell.
        Some("none") => Some("none".to_owned()),
        Some(filter) if !CHECKS.iter().any(|c| selected(c.name, Some(filter))) => {
            eprintln!(
                "numalab-emu: error: --checks {filter} selects no check; the checks are {} \
                 (or `none`, with --shell)",
                CHECKS.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")
            );
            return ExitCode::from(2);
        }
        other => other.map(str::to_owned),
    };
    if cli.shell && chosen.len() != 1 {
        eprintln!("numalab-emu: error: --shell opens one guest; name one --preset");
        return ExitCode::from(2);
    }
    let options = BootOptions {
        timeout: cli
            .timeout
            .map_or_else(default_timeout, Duration::from_secs),
        checks,
        shell: cli.shell,
        echo: cli.verbose,
        kernels: cli.kernel,
        jobs: cli.jobs.map_or_else(default_jobs, usize::from),
    };
    match run_suite(&chosen, &options) {
        SuiteEnd::Passed | SuiteEnd::Skipped(_) => ExitCode::SUCCESS,
        SuiteEnd::Failed => ExitCode::FAILURE,
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
}
