//! A new preset with a wrong expectation fails, and says where: the
//! two-socket machine booted with the guest expecting distance 31 between
//! its nodes where the firmware (and QEMU) say 21. The run must fail, on
//! that check only, with the expected-versus-found row that names it.
//!
//! Without QEMU, a kernel image or busybox it prints `skipped: …` and
//! passes, except when `CI` is set, where it fails.

use std::process::ExitCode;
use std::time::Duration;

use numalab_emu::harness::{boot_with_expectations, is_ci, ExpectationRun};
use numalab_emu::preset::{Presets, PRESETS_TOML};
use numalab_emu::qemu::BootOptions;

fn main() -> ExitCode {
    if std::env::args().any(|a| a == "--list") {
        println!("wrong_expectation: test");
        return ExitCode::SUCCESS;
    }
    let presets = Presets::builtin().expect("presets.toml is valid");
    let machine = presets.get("two-socket").expect("two-socket is a preset");
    let right = "distances = [\n    [10, 21],\n    [21, 10],\n]";
    assert!(
        PRESETS_TOML.contains(right),
        "two-socket's distances moved in presets.toml"
    );
    let wrong = PRESETS_TOML.replacen(right, "distances = [\n    [10, 31],\n    [31, 10],\n]", 1);
    let options = BootOptions {
        timeout: Duration::from_secs(120),
        checks: Some("topo.distances".into()),
        shell: false,
        echo: false,
        kernels: Vec::new(),
        jobs: 1,
    };
    let text = match boot_with_expectations(machine, &wrong, &options) {
        ExpectationRun::Ran { passed, text } => {
            print!("{text}");
            if passed {
                println!("wrong_expectation: FAILED: a wrong distance passed");
                return ExitCode::FAILURE;
            }
            text
        }
        ExpectationRun::Skipped(missing) if is_ci() => {
            println!("wrong_expectation: error: {missing} (CI is set, so this is a failure)");
            return ExitCode::FAILURE;
        }
        ExpectationRun::Skipped(missing) => {
            println!("skipped: {missing}");
            return ExitCode::SUCCESS;
        }
        ExpectationRun::Failed(err) => {
            println!("wrong_expectation: error: {err}");
            return ExitCode::FAILURE;
        }
    };
    // The diff row, as a reader meets it: marked, expected, found.
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("! distance 0 -> 1"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>());
    let wanted = ["!", "distance", "0", "->", "1", "31", "21"];
    let checks_failed = text.contains("1 failed") && text.contains("FAIL topo.distances");
    if row.as_deref() == Some(&wanted[..]) && checks_failed {
        println!("wrong_expectation: ok: the wrong distance failed topo.distances, row {wanted:?}");
        ExitCode::SUCCESS
    } else {
        println!(
            "wrong_expectation: FAILED: expected one failed check with the row {wanted:?}, found {row:?}"
        );
        ExitCode::FAILURE
    }
}
