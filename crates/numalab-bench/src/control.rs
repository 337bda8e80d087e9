//! How a caller steers a measurement that takes a while: one [`Control`]
//! for every engine (`run`, `sweep`, `report`, `matrix`, `pagecache
//! bench`, `ring`, `profile --pid`).
//!
//! A control carries three things: the stop request and the signal that
//! made it (Ctrl-C's handler calls [`Control::stop_by`]; the engine looks
//! at [`Control::is_stopped`] between its chunks of work, finishes the one
//! it is in, and marks its result interrupted), the progress counters a
//! progress bar reads from another thread ([`Progress`]), and where the
//! engine's one-line progress messages go ([`Control::say`]; nowhere by
//! default).

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Progress of a run, for a progress bar (updated by the workers once per
/// chunk of operations).
///
/// ```
/// use std::sync::atomic::Ordering::Relaxed;
/// use numalab::Topology;
/// use numalab_bench::control::Control;
/// use numalab_bench::experiment::{run, Experiment};
/// let exp = Experiment::from_toml_str(
///     "[memory]\nsize = \"1MiB\"\n[access]\nops = 10_000\n[run]\nrepeats = 2\nwarmup = 1\ncounters = false",
///     "x")?;
/// let control = Control::new();
/// run(&exp, &Topology::system()?, &control)?;
/// // Another thread (a progress bar) can read these while the run goes on.
/// let progress = &control.progress;
/// assert_eq!((progress.runs_done.load(Relaxed), progress.runs_total.load(Relaxed)), (3, 3));
/// assert_eq!(progress.ops_total.load(Relaxed), 30_000, "warm-up included");
/// assert_eq!(progress.ops_done.load(Relaxed), 30_000);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default)]
pub struct Progress {
    /// Operations done, all runs so far.
    pub ops_done: AtomicU64,
    /// Operations expected over all runs (0 when the runs are timed).
    pub ops_total: AtomicU64,
    /// Runs finished (warm-ups and repeats).
    pub runs_done: AtomicU32,
    /// Runs planned.
    pub runs_total: AtomicU32,
    /// What is running, for a bar's label: a sweep's cell ("cell 2/6
    /// (threads.count=2, memory.policy=local)"); empty outside a sweep.
    label: Mutex<String>,
}

impl Progress {
    /// What is running now (see [`Progress::set_label`]).
    pub fn label(&self) -> String {
        self.label.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Says what is running now.
    pub fn set_label(&self, label: String) {
        if let Ok(mut now) = self.label.lock() {
            *now = label;
        }
    }
}

/// The stop request, the progress counters and the message sink of one
/// measurement. Clones share all three: give one to the signal handler,
/// one to the progress bar, and a reference to the engine.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use numalab_bench::control::Control;
///
/// let said = Arc::new(Mutex::new(Vec::<String>::new()));
/// let log = Arc::clone(&said);
/// let control = Control::new().with_messages(move |line| log.lock().unwrap().push(line.into()));
/// control.say("measuring latency");
/// assert!(!control.is_stopped());
///
/// let handler = control.clone(); // what a signal handler holds
/// handler.stop_by(2); // SIGINT
/// handler.stop_by(15); // a second signal does not replace the first
/// assert!(control.is_stopped());
/// assert_eq!(control.signal(), Some(2));
/// assert_eq!(*said.lock().unwrap(), ["measuring latency"]);
/// ```
#[derive(Clone, Default)]
pub struct Control {
    stop: Arc<AtomicBool>,
    /// The signal that asked for the stop; 0 for none (yet, or a stop
    /// asked without one).
    signal: Arc<AtomicI32>,
    /// Updated while running.
    pub progress: Arc<Progress>,
    messages: Option<Say>,
}

/// Where progress lines go.
type Say = Arc<dyn Fn(&str) + Send + Sync>;

impl Control {
    /// A control that is not stopped and says nothing.
    pub fn new() -> Control {
        Control::default()
    }

    /// The same control, its progress messages given to `say`.
    pub fn with_messages(mut self, say: impl Fn(&str) + Send + Sync + 'static) -> Control {
        self.messages = Some(Arc::new(say));
        self
    }

    /// Asks the engine to stop after the chunk it is in.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Asks the engine to stop because `signal` arrived. The first signal
    /// is the one kept: a later one does not replace it.
    pub fn stop_by(&self, signal: i32) {
        let _ = self
            .signal
            .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
        self.stop();
    }

    /// Whether a stop was asked.
    pub fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// The signal that asked for the stop, if one did.
    pub fn signal(&self) -> Option<i32> {
        match self.signal.load(Ordering::SeqCst) {
            0 => None,
            signal => Some(signal),
        }
    }

    /// The stop request as the flag the library's long calls take
    /// (`numalab::pagecache::load_on_until` and the like).
    pub fn stop_flag(&self) -> &AtomicBool {
        &self.stop
    }

    /// Passes one line of progress ("measuring latency between nodes")
    /// to where the caller wants it.
    pub fn say(&self, line: &str) {
        if let Some(say) = &self.messages {
            say(line);
        }
    }
}

impl fmt::Debug for Control {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Control")
            .field("stopped", &self.is_stopped())
            .field("signal", &self.signal())
            .field("progress", &self.progress)
            .field("messages", &self.messages.is_some())
            .finish()
    }
}
