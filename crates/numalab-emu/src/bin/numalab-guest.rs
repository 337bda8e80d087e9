//! The guest side of the emulated-NUMA suite: run as the emulated
//! machine's init's child, it runs the checks for the preset named on the
//! kernel command line and reports on the second serial port.

fn main() -> std::process::ExitCode {
    numalab_emu::guest::main()
}
