//! `numalab`: measure what NUMA costs on a machine, find the right memory
//! and thread placement for a workload, and check where pages really went.

mod args;
mod cmd;
mod exp;
mod output;
mod placement;
mod plot;
mod render;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Measure what NUMA costs on this machine, find the right memory and
/// thread placement for a workload, and check where pages really landed.
#[derive(Debug, Parser)]
#[command(
    name = "numalab",
    version,
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
    Matrix(cmd::matrix::MatrixArgs),
    Fill(cmd::fill::FillArgs),
    Run(cmd::run::RunArgs),
    Sweep(cmd::sweep::SweepArgs),
    Plot(cmd::plot::PlotArgs),
    Ring(cmd::ring::RingArgs),
    /// A writer or reader process of `numalab ring`
    #[command(hide = true)]
    RingWorker(cmd::ring::WorkerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Report(args) => cmd::report::run(args).map(|()| 0).map_err(|e| (e, 1)),
        Command::Topo(args) => cmd::topo::run(args).map(|()| 0).map_err(|e| (e, 1)),
        Command::Exec(args) => cmd::exec::run(args).map_err(|e| (e, cmd::exec::EXIT_OWN_FAILURE)),
        Command::Matrix(args) => cmd::matrix::run(args).map_err(|e| (e, 1)),
        Command::Fill(args) => cmd::fill::run(args).map(|()| 0).map_err(|e| (e, 1)),
        Command::Run(args) => cmd::run::run(args).map_err(|e| (e, 1)),
        Command::Sweep(args) => cmd::sweep::run(args).map_err(|e| (e, 1)),
        Command::Plot(args) => cmd::plot::run(args).map(|()| 0).map_err(|e| (e, 1)),
        Command::Ring(args) => cmd::ring::run(args).map_err(|e| (e, 1)),
        Command::RingWorker(args) => cmd::ring::worker(args).map(|()| 0).map_err(|e| (e, 1)),
    };
    match result {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err((err, code)) => {
            eprintln!("numalab: error: {err:#}");
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
}
