//! The emulated-NUMA suite as part of `cargo test`: boots every preset of
//! presets.toml under QEMU and fails on any check that fails inside.
//!
//! Without QEMU, a kernel image or busybox it prints `skipped: …` and
//! passes, except when `CI` is set, where it fails. Arguments not starting
//! with `-` select presets by name
//! (`cargo test -p numalab-emu --test emulated -- cxl`).

use std::process::ExitCode;

use numalab_emu::harness::{default_jobs, default_timeout, run_suite, SuiteEnd};
use numalab_emu::preset::Presets;
use numalab_emu::qemu::BootOptions;

fn main() -> ExitCode {
    let presets = Presets::builtin().expect("presets.toml is valid");
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        for preset in &presets.presets {
            println!("emulated::{}: test", preset.name);
        }
        return ExitCode::SUCCESS;
    }
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let chosen: Vec<_> = presets
        .presets
        .iter()
        .filter(|p| filters.is_empty() || filters.iter().any(|f| p.name.contains(f.as_str())))
        .collect();
    if chosen.is_empty() {
        println!("emulated: no preset matches {filters:?}; 0 booted");
        return ExitCode::SUCCESS;
    }
    let options = BootOptions {
        timeout: default_timeout(),
        checks: None,
        shell: false,
        echo: false,
        kernels: Vec::new(),
        jobs: default_jobs(),
    };
    match run_suite(&chosen, &options) {
        SuiteEnd::Passed | SuiteEnd::Skipped(_) => ExitCode::SUCCESS,
        SuiteEnd::Failed => ExitCode::FAILURE,
    }
}
