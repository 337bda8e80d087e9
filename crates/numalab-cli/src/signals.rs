//! SIGINT, SIGTERM and SIGHUP for every command that measures for a while
//! (`run`, `sweep`, `matrix`, `report`, `fill`; `ring` can use it the same
//! way): the first signal asks the work to stop at its next chunk (a stop
//! flag the workers look at), what was measured is written, and numalab
//! exits 128 + that signal, as a shell reports a command the signal ended
//! (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP). A second signal ends
//! numalab at once, after putting back the kernel's interleave weights
//! ([`InterleaveWeights::restore_all`]); the workers' guards restore
//! everything else on the normal path.
//!
//! `numalab exec` is different: it passes signals on to the command it
//! runs ([`numalab::launch::SignalRelay`]).
//!
//! ```text
//! let control = Control::new();
//! let interrupts = Interrupts::catch(&control)?;
//! let result = measure(&control)?; // stops early if a signal arrives
//! render::emit(&result, &args.output)?;
//! Ok(interrupts.exit_status().unwrap_or(0))
//! ```

use std::io::IsTerminal;

use anyhow::{Context, Result};
use numalab::InterleaveWeights;
use numalab_bench::control::Control;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// The signals that stop a measurement.
pub const STOPPING: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

/// The signals caught for a command, and the first that arrived.
#[derive(Debug, Clone)]
pub struct Interrupts {
    control: Control,
}

impl Interrupts {
    /// Catches SIGINT, SIGTERM and SIGHUP from now on: the first stops
    /// `control` (which keeps its number), a second ends numalab at once
    /// with 128 + it.
    pub fn catch(control: &Control) -> Result<Interrupts> {
        let mut signals = Signals::new(STOPPING).context("catching SIGINT, SIGTERM and SIGHUP")?;
        let first = control.clone();
        std::thread::Builder::new()
            .name("numalab-signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    if first.signal().is_none() {
                        first.stop_by(signal);
                        continue;
                    }
                    // The second: the work did not stop soon enough.
                    if let Err(err) = InterleaveWeights::restore_all() {
                        eprintln!("numalab: warning: {err}");
                    }
                    eprintln!(
                        "numalab: {} again: stopping at once, without writing results",
                        numalab::launch::signal_name(signal)
                    );
                    signal_hook::low_level::exit(crate::exit::after_signal(signal));
                }
            })
            .context("starting the signal watcher")?;
        Ok(Interrupts {
            control: control.clone(),
        })
    }

    /// The first signal that arrived, if any.
    pub fn arrived(&self) -> Option<i32> {
        self.control.signal()
    }

    /// 128 + the first signal that arrived: the exit status of a command
    /// it interrupted.
    pub fn exit_status(&self) -> Option<i32> {
        self.arrived().map(crate::exit::after_signal)
    }
}

/// A control for a measuring command: its progress lines go to standard
/// error, after `prefix`, when that is a terminal (and nowhere in a pipe or
/// a log, where they would only be noise).
pub fn control_for_terminal(prefix: &'static str) -> Control {
    let control = Control::new();
    if std::io::stderr().is_terminal() {
        control.with_messages(move |line| eprintln!("{prefix}{line}"))
    } else {
        control
    }
}
