//! The exit statuses numalab leaves with beside 0 and 1, as `env`,
//! `timeout` and a shell use them (docs/exit-status.md): 125 when numalab
//! itself fails in a command that runs another, 126 and 127 when that
//! command cannot be run, 128 + N after signal N.

use numalab::launch::Exit;

/// The exit status after signal `signal` stopped the work: 128 + its
/// number (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP).
pub fn after_signal(signal: i32) -> i32 {
    Exit::Signal(signal).shell_code()
}

/// Says that `program` could not be run by `numalab COMMAND`; the exit
/// status a shell gives then: 127 when it does not exist, 126 otherwise.
pub fn cannot_run(command: &str, program: &std::ffi::OsStr, source: &std::io::Error) -> i32 {
    // Said as a shell (and advise, which looks first) says it: "not
    // found in PATH", "not an executable file", not the raw errno.
    let why = match numalab::launch::find_program(program) {
        Err(found) => found.to_string(),
        Ok(_) => source.to_string(),
    };
    eprintln!(
        "numalab {command}: cannot run {}: {why}",
        crate::output::printable_field(&program.to_string_lossy())
    );
    if source.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

/// Exit status when numalab itself fails, as `env` and `timeout` use.
pub const EXIT_OWN_FAILURE: i32 = 125;
