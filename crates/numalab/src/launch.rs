//! Run a command under a memory policy and CPU binding, as `numactl` does,
//! and report where its memory was when it exited.
//!
//! The command is traced (`ptrace` exit events only, no per-syscall cost):
//! when each of its processes exits, its `/proc/PID/numa_maps` is read
//! before the kernel frees its memory, so even a short-lived command gets
//! a full account. Meanwhile a sampler thread reads every process's memory
//! (every 20 ms at most, never more than
//! [`MAX_SHARE`](crate::profile::MAX_SHARE) of a CPU), so memory freed
//! before exit still shows in the peak. Where tracing is not permitted
//! (some containers), only the samples are reported and the report says
//! so.
//!
//! The command is followed until it exits, not its descendants: whatever
//! it leaves running (a daemon it started) is let go, untraced, as soon as
//! it exits. Signals another process sends to the caller while it runs
//! (`SIGINT`, `SIGTERM`, `SIGHUP`, `SIGQUIT`) are passed on to the command
//! ([`SignalRelay`]); the terminal's Ctrl-C already reaches it. If the
//! caller dies, the command is killed (`PR_SET_PDEATHSIG`).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::locate::ProcessMemory;
use crate::policy::MemPolicy;
use crate::profile::{Recorder, Timeline};
use crate::sets::CpuSet;
use crate::sys::{linux, procfs};

/// How the command ended.
///
/// ```
/// use numalab::launch::{Exit, Launch};
/// let report = Launch::new("sh", ["-c", "kill -KILL $$"]).run()?;
/// assert_eq!(report.exit, Exit::Signal(9));
/// assert_eq!(report.exit.shell_code(), 137); // what a shell's `$?` says
/// assert_eq!(Exit::Code(3).shell_code(), 3);
/// # Ok::<(), numalab::launch::LaunchError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exit {
    /// Exited with this status.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl Exit {
    /// The shell's convention: the code, or 128 + the signal.
    pub fn shell_code(self) -> i32 {
        match self {
            Exit::Code(code) => code,
            Exit::Signal(signal) => 128 + signal,
        }
    }
}

/// A signal's name for messages, as `kill -l` spells it (`SIGTERM`), or
/// `signal N` for one without a name.
///
/// ```
/// use numalab::launch::signal_name;
/// assert_eq!(signal_name(15), "SIGTERM");
/// assert_eq!(signal_name(2), "SIGINT");
/// assert_eq!(signal_name(1), "SIGHUP");
/// assert_eq!(signal_name(40), "signal 40");
/// ```
pub fn signal_name(signal: i32) -> String {
    linux::signal_name(signal).map_or_else(|| format!("signal {signal}"), str::to_owned)
}

/// How the memory of the command was observed.
///
/// ```
/// use numalab::launch::{Launch, Observation};
/// let report = Launch::new("true", std::iter::empty::<&str>()).run()?;
/// match report.observation {
///     // Read as the process exited: even a command this short is seen.
///     Observation::AtExit => assert!(!report.memory.bytes.is_empty()),
///     // A container that forbids tracing: it may have ended unseen.
///     Observation::Sampled => eprintln!("only sampled: {:?}", report.peak.per_node()),
/// }
/// # Ok::<(), numalab::launch::LaunchError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Observation {
    /// Read at the exit of every process of the command (exact), and
    /// sampled while it ran.
    AtExit,
    /// Only sampled while it ran (tracing was not permitted); the last
    /// sample stands for the memory at exit.
    Sampled,
}

/// What happened to a launched command.
///
/// ```
/// use numalab::launch::{Exit, Launch};
/// use numalab::{MemPolicy, NodeSet};
/// // The shell and the `sort` it starts, their memory bound to node 0.
/// let report = Launch::new("sh", ["-c", "seq 100000 | sort -n > /dev/null; exit 3"])
///     .policy(MemPolicy::Bind(NodeSet::single(0)))
///     .run()?;
/// assert_eq!(report.exit, Exit::Code(3));
/// assert!(report.processes >= 1);
/// assert!(report.memory.private_per_node().keys().all(|&node| node == 0));
/// assert!(report.peak.private_per_node().keys().all(|&node| node == 0));
/// # Ok::<(), numalab::launch::LaunchError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchReport {
    /// Process id of the command.
    pub pid: i32,
    /// How it ended.
    pub exit: Exit,
    /// Its memory as each process exited, summed over processes, per kind
    /// and node. Memory a process freed before exiting is not here.
    pub memory: ProcessMemory,
    /// The largest memory each process held while it ran (sampled, and at
    /// exit), summed over processes: where the bulk of its memory was.
    pub peak: ProcessMemory,
    /// How many processes (the command and its descendants) were counted.
    pub processes: usize,
    /// How the memory was observed.
    pub observation: Observation,
    /// Wall time from start to exit.
    pub elapsed: Duration,
    /// The first signal another process sent to the caller while the
    /// command ran, which was passed on to it ([`SignalRelay`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relayed: Option<i32>,
    /// Samples of the command's processes while it ran, when asked for
    /// ([`Launch::timeline`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Timeline>,
    /// Whether it ran out of its [`Launch::timeout`] and was ended.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
}

/// Why a command could not be run.
///
/// ```
/// use numalab::launch::{Launch, LaunchError};
/// match Launch::new("numalab-no-such-program", std::iter::empty::<&str>()).run() {
///     Err(LaunchError::Spawn { program, source }) => {
///         assert_eq!(program, "numalab-no-such-program");
///         assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
///     }
///     other => panic!("expected a spawn error, got {other:?}"),
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The command could not be started.
    #[error("cannot run {program:?}: {source}")]
    Spawn {
        /// The program.
        program: OsString,
        /// Why.
        source: io::Error,
    },
    /// Waiting for the command failed.
    #[error("lost track of the command: {0}")]
    Wait(io::Error),
    /// A signal arrived before the command started; it was not started.
    #[error("signal {signal} arrived before the command started; it was not run")]
    Interrupted {
        /// The signal.
        signal: i32,
    },
    /// The signals to pass on could not be caught.
    #[error("cannot catch signals to pass them on to the command: {0}")]
    Signals(io::Error),
    /// The command could not be held by a handle its timeout can end it
    /// with (`pidfd_open(2)`, Linux 5.3); it was ended at once.
    #[error("cannot hold the command to end it at its timeout (pidfd_open, Linux 5.3): {0}; it was ended")]
    Timeout(io::Error),
}

/// Signals that are passed on to the command.
const RELAYED: [i32; 4] = [linux::SIGINT, linux::SIGTERM, linux::SIGHUP, linux::SIGQUIT];

/// Whether a [`SignalRelay`] is installed.
static RELAYING: AtomicBool = AtomicBool::new(false);

/// While it lives, `SIGINT`, `SIGTERM`, `SIGHUP` and `SIGQUIT` sent to
/// this process by another process (`kill`) do not end it: they are
/// recorded, and passed on to the command [`Launch::run`] is running.
/// Signals from the terminal (Ctrl-C, Ctrl-\, hang-up) are left to the
/// command, which gets them too. Signals this process ignores (`nohup`)
/// stay ignored. [`Launch::run`] installs one for its own duration; a
/// caller installs one first to cover what it does before and after the
/// command (setting and restoring [`InterleaveWeights`](crate::InterleaveWeights)).
///
/// ```
/// use numalab::launch::{Exit, Launch, SignalRelay};
/// let relay = SignalRelay::install()?;
/// // The command sends SIGTERM to its parent, this process: the relay
/// // passes it back to the command, which it ends.
/// let report = Launch::new("sh", ["-c", "kill -TERM $PPID; sleep 30"]).run()?;
/// assert_eq!(report.relayed, Some(15));
/// assert_eq!(report.exit, Exit::Signal(15));
/// assert_eq!(relay.arrived(), Some(15));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A command that does not end on the signal passed on (it ignores or
/// handles it) is killed (`SIGKILL`) at the second one, so that whoever
/// sends them (a batch system's `scancel`, a supervisor) can always end
/// it through numalab:
///
/// ```
/// use numalab::launch::{Exit, Launch, SignalRelay};
/// let _relay = SignalRelay::install()?;
/// // The command handles SIGTERM by sending another: the second comes
/// // only once the first was passed on (two sent at once may arrive as
/// // one). TERM both times: HUP, INT and QUIT may be ignored from the
/// // start (nohup, a background job), and an ignored signal is not
/// // caught.
/// // At most a minute: a shell left behind can never hold the test.
/// let script = "trap 'kill -TERM $PPID' TERM; kill -TERM $PPID; \
///               i=0; while [ $i -lt 60 ]; do sleep 1; i=$((i + 1)); done";
/// let report = Launch::new("sh", ["-c", script]).run()?;
/// assert_eq!(report.relayed, Some(15));
/// assert_eq!(report.exit, Exit::Signal(9));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct SignalRelay {
    saved: Vec<linux::SavedAction>,
    owner: bool,
}

impl SignalRelay {
    /// Starts catching the signals (a relay already installed in this
    /// process is shared: this one then restores nothing).
    pub fn install() -> io::Result<SignalRelay> {
        if RELAYING.swap(true, Ordering::SeqCst) {
            return Ok(SignalRelay {
                saved: Vec::new(),
                owner: false,
            });
        }
        linux::reset_relay();
        let mut relay = SignalRelay {
            saved: Vec::new(),
            owner: true,
        };
        for signal in RELAYED {
            if let Some(saved) = linux::relay_signal(signal)? {
                relay.saved.push(saved);
            }
        }
        Ok(relay)
    }

    /// The first signal another process sent since the relay was
    /// installed.
    pub fn arrived(&self) -> Option<i32> {
        linux::relayed_signal()
    }
}

impl Drop for SignalRelay {
    fn drop(&mut self) {
        if !self.owner {
            return;
        }
        for saved in &self.saved {
            linux::restore_signal(saved);
        }
        linux::reset_relay();
        RELAYING.store(false, Ordering::SeqCst);
    }
}

/// A command with its placement.
///
/// ```
/// use numalab::launch::{Exit, Launch};
/// use numalab::{affinity, CpuSet, MemPolicy, NodeSet};
/// // As `numactl --membind=0 --physcpubind=N sort …`.
/// let cpu = affinity::thread_cpus()?.first().expect("a CPU to run on");
/// let report = Launch::new("sort", ["-o", "/dev/null", "/proc/self/maps"])
///     .policy(MemPolicy::Bind(NodeSet::single(0)))
///     .cpus(CpuSet::single(cpu))
///     .run()?;
/// assert_eq!(report.exit, Exit::Code(0));
/// println!("{:?}", report.memory.private_per_node());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Launch {
    program: OsString,
    args: Vec<OsString>,
    policy: Option<MemPolicy>,
    cpus: Option<CpuSet>,
    timeline: Option<(Duration, Duration)>,
    share: f64,
    writes: bool,
    quiet: bool,
    timeout: Option<Duration>,
}

/// How long a command that ran out of its [`Launch::timeout`] has to end
/// after `SIGTERM` before it is sent `SIGKILL`.
pub const KILL_GRACE: Duration = Duration::from_secs(5);

impl Launch {
    /// `program` with `args`, placed as the calling process is.
    pub fn new<I, S>(program: impl Into<OsString>, args: I) -> Launch
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        Launch {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            policy: None,
            cpus: None,
            timeline: None,
            share: crate::profile::MAX_SHARE,
            writes: false,
            quiet: false,
            timeout: None,
        }
    }

    /// Ends the command once it has run for `limit`, as `timeout(1)`
    /// does: `SIGTERM`, then `SIGKILL` [`KILL_GRACE`] later if it still
    /// runs; its descendants still traced then are killed too. The
    /// command is held by a pidfd, so no other process that is later
    /// given its number is signalled. [`LaunchReport::timed_out`] says
    /// whether it came to that.
    ///
    /// ```
    /// use std::time::Duration;
    /// use numalab::launch::{Exit, Launch};
    /// let report = Launch::new("sleep", ["600"]).timeout(Duration::from_millis(100)).run()?;
    /// assert!(report.timed_out);
    /// assert_eq!(report.exit, Exit::Signal(15));
    /// let quick = Launch::new("true", None::<&str>).timeout(Duration::from_secs(600)).run()?;
    /// assert!(!quick.timed_out);
    /// // A shell that ignores SIGTERM, and the sleep it started: both end.
    /// let pids = std::env::temp_dir().join(format!("numalab-timeout-doc-{}", std::process::id()));
    /// let script = format!("trap '' TERM; sleep 600 & echo $! > {}; wait", pids.display());
    /// let report = Launch::new("sh", ["-c", &script]).timeout(Duration::from_millis(100)).run()?;
    /// assert!(report.timed_out);
    /// assert_eq!(report.exit, Exit::Signal(9));
    /// let sleep: i32 = std::fs::read_to_string(&pids)?.trim().parse()?;
    /// std::fs::remove_file(&pids)?;
    /// let state = std::fs::read_to_string(format!("/proc/{sleep}/stat")).unwrap_or_default();
    /// assert!(!state.contains(") S ") && !state.contains(") R "), "still running: {state}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// With [`timeline`](Self::timeline): count each sample's pages
    /// written since the sample before
    /// ([`WriteTracker`](crate::profile::WriteTracker)), where the kernel
    /// keeps soft-dirty bits.
    pub fn track_writes(mut self) -> Self {
        self.writes = true;
        self
    }

    /// Gives the command nothing on standard input and discards what it
    /// writes to standard output and error (as `hyperfine` runs what it
    /// times: a terminal's speed is not part of the command's).
    pub fn quiet(mut self) -> Self {
        self.quiet = true;
        self
    }

    /// Samples the command's processes while it runs
    /// ([`sample`](crate::profile::sample)) into
    /// [`LaunchReport::timeline`]: first every `interval`, then half as
    /// long again after each sample up to `grow_to`, stretched so the
    /// sampling takes at most [`MAX_SHARE`](crate::profile::MAX_SHARE) of
    /// a CPU.
    pub fn timeline(mut self, interval: Duration, grow_to: Duration) -> Self {
        self.timeline = Some((interval, grow_to));
        self
    }

    /// Lets the sampling take up to `share` of a CPU (0 to 1) instead of
    /// [`MAX_SHARE`](crate::profile::MAX_SHARE).
    pub fn sampling_share(mut self, share: f64) -> Self {
        self.share = share;
        self
    }

    /// Runs it under `policy` (checked by the caller, e.g. with
    /// [`MemPolicy::check`]).
    pub fn policy(mut self, policy: MemPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Runs it on `cpus` (checked by the caller).
    pub fn cpus(mut self, cpus: CpuSet) -> Self {
        self.cpus = Some(cpus);
        self
    }

    /// Runs the command to completion: until it exits, not what it leaves
    /// running. Ctrl-C and Ctrl-\ go to the command, not to the caller;
    /// signals other processes send to the caller are passed on to it
    /// ([`SignalRelay`]). The command is killed if the calling thread
    /// ends before it (`PR_SET_PDEATHSIG`): call this from a thread that
    /// lives as long as the command should.
    pub fn run(&self) -> Result<LaunchReport, LaunchError> {
        self.run_with(|_| {})
    }

    /// [`run`](Self::run), calling `at_start` with the command's pid
    /// once it runs the program: traced, after its `exec` and before the
    /// program's first instruction (so counters opened there see all of
    /// it); untraced, just after it was started.
    ///
    /// ```
    /// use numalab::launch::{Exit, Launch};
    /// let mut seen = None;
    /// let report = Launch::new("true", None::<&str>).run_with(|pid| seen = Some(pid))?;
    /// assert_eq!((seen, report.exit), (Some(report.pid), Exit::Code(0)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run_with(&self, at_start: impl FnOnce(i32)) -> Result<LaunchReport, LaunchError> {
        let relay = SignalRelay::install().map_err(LaunchError::Signals)?;
        if let Some(signal) = relay.arrived() {
            return Err(LaunchError::Interrupted { signal });
        }
        let mut report = match self.spawn(true) {
            Ok(pid) => self.trace(pid, at_start),
            Err(err) if err.raw_os_error() == Some(libc::EPERM) => self
                .spawn(false)
                .map_err(|source| self.spawn_error(source))
                .and_then(|pid| {
                    at_start(pid);
                    self.sample(pid)
                }),
            Err(source) => Err(self.spawn_error(source)),
        };
        linux::relay_to(0);
        if let Ok(report) = &mut report {
            report.relayed = relay.arrived();
        }
        report
    }

    fn spawn_error(&self, source: io::Error) -> LaunchError {
        LaunchError::Spawn {
            program: self.program.clone(),
            source,
        }
    }

    fn spawn(&self, traced: bool) -> io::Result<i32> {
        let mut command = Command::new(&self.program);
        command.args(&self.args);
        if self.quiet {
            command
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
        }
        // Everything the child needs is computed here: between fork and
        // exec it may only make system calls.
        let policy = self.policy.as_ref().map(|p| (p.kernel_mode(), p.nodes()));
        let cpus = self.cpus.clone();
        let parent = linux::process_id();
        let apply = move || -> io::Result<()> {
            // Killed if the caller dies (even by SIGKILL), as the command
            // would be under numactl, which it replaces. If the caller
            // died before this, the command is not started.
            linux::set_parent_death_signal(linux::SIGKILL)?;
            if linux::parent_process_id() != parent {
                return Err(io::Error::from(io::ErrorKind::Other));
            }
            if let Some(cpus) = &cpus {
                linux::set_affinity(0, cpus.as_words())?;
            }
            if let Some((mode, nodes)) = &policy {
                linux::set_mempolicy(*mode, nodes.as_words())?;
            }
            if traced {
                linux::trace_me()?;
            }
            Ok(())
        };
        // SAFETY: the closure only makes system calls (no allocation, no
        // locks), which is what may run between fork and exec.
        let child = unsafe { command.pre_exec(apply) }.spawn()?;
        let pid = child.id() as i32;
        // A signal that arrived before the pid was known is passed on now.
        linux::relay_to(pid);
        if let Some(signal) = linux::relayed_signal() {
            let _ = linux::send_signal(pid, signal);
        }
        Ok(pid)
    }

    /// Follows a traced command and its descendants until the command
    /// exits, then lets the descendants still running go.
    fn trace(&self, pid: i32, at_start: impl FnOnce(i32)) -> Result<LaunchReport, LaunchError> {
        let start = Instant::now();
        // The exec stops the child with SIGTRAP before its first instruction.
        linux::wait_any(pid).map_err(LaunchError::Wait)?;
        linux::trace_set_options(pid).map_err(LaunchError::Wait)?;
        at_start(pid);
        let deadline = match Deadline::start(pid, self.timeout) {
            Ok(deadline) => deadline,
            Err(err) => {
                let _ = linux::send_signal(pid, linux::SIGKILL);
                let _ = linux::trace_continue(pid, 0);
                let _ = linux::wait_any(pid);
                return Err(err);
            }
        };
        let sampler = Sampler::start(pid, self.timeline, self.writes, self.share);
        linux::trace_continue(pid, 0).map_err(LaunchError::Wait)?;

        let mut at_exit: BTreeMap<i32, ProcessMemory> = BTreeMap::new();
        let mut known = BTreeSet::from([pid]);
        // Tracees not yet exited.
        let mut live = BTreeSet::from([pid]);
        // Fork events whose new tracee has not made its first stop yet:
        // if the command ends first, `release` must still wait for that
        // stop, or the tracee would keep ptrace's SIGSTOP once this
        // process is gone and stay stopped for ever.
        let mut unseen: i64 = 0;
        let exit = loop {
            let (tid, event) = match linux::wait_any(-1) {
                Ok(found) => found,
                Err(err) if err.raw_os_error() == Some(linux::ECHILD) => break Exit::Code(0),
                Err(err) => return Err(LaunchError::Wait(err)),
            };
            let first_stop = known.insert(tid);
            if first_stop {
                sampler.watch(tid);
                live.insert(tid);
                unseen -= 1;
            }
            match event {
                linux::WaitEvent::TraceEvent(linux::PTRACE_EVENT_EXIT) => {
                    // The task is exiting but still holds its memory. The
                    // last thread of a process to get here sees its final
                    // state, so keep the newest snapshot per process.
                    if let Ok(tgid) = procfs::tgid_of(tid) {
                        if let Ok(memory) = ProcessMemory::of_process(tid) {
                            sampler.offer(tgid, &memory);
                            at_exit.insert(tgid, memory);
                        }
                    }
                    let _ = linux::trace_continue(tid, 0);
                }
                linux::WaitEvent::TraceEvent(event) => {
                    if FORK_EVENTS.contains(&event) {
                        unseen += 1;
                    }
                    let _ = linux::trace_continue(tid, 0);
                }
                linux::WaitEvent::Stopped(signal) => {
                    // New tracees start with a SIGSTOP of ptrace's own; any
                    // other signal is the command's and is passed on.
                    let deliver = if first_stop && signal == linux::SIGSTOP {
                        0
                    } else {
                        signal
                    };
                    let _ = linux::trace_continue(tid, deliver);
                }
                // The command's own end ends the run (as numactl, which
                // becomes the command, would end): what it leaves running
                // is let go below, not waited for.
                // Reaped: its number is free from here on and may be given
                // to a process that is none of the command's, so it is no
                // longer watched (until reaped, a tracee keeps it).
                linux::WaitEvent::Exited(code) => {
                    live.remove(&tid);
                    sampler.forget(tid);
                    if tid == pid {
                        break Exit::Code(code);
                    }
                }
                linux::WaitEvent::Signaled(signal) => {
                    live.remove(&tid);
                    sampler.forget(tid);
                    if tid == pid {
                        break Exit::Signal(signal);
                    }
                }
                linux::WaitEvent::Other => {}
            }
        };
        let elapsed = start.elapsed();
        let timed_out = deadline.finish();
        if timed_out {
            // What the command left running is ended with it: these are
            // its traced descendants, not yet reaped, so their numbers are
            // still theirs.
            for &tid in &live {
                let _ = linux::send_signal(tid, linux::SIGKILL);
            }
        }
        let (peak, timeline) = sampler.finish();
        release(live, unseen.max(0));
        let mut memory = ProcessMemory::default();
        for process in at_exit.values() {
            memory.merge(process);
        }
        Ok(LaunchReport {
            pid,
            exit,
            memory,
            peak,
            processes: at_exit.len(),
            observation: Observation::AtExit,
            elapsed,
            relayed: None,
            timeline,
            timed_out,
        })
    }

    /// Samples an untraced command's memory until it exits.
    fn sample(&self, pid: i32) -> Result<LaunchReport, LaunchError> {
        let start = Instant::now();
        let deadline = match Deadline::start(pid, self.timeout) {
            Ok(deadline) => deadline,
            Err(err) => {
                let _ = linux::send_signal(pid, linux::SIGKILL);
                let _ = linux::wait_any(pid);
                return Err(err);
            }
        };
        let sampler = Sampler::start(pid, self.timeline, self.writes, self.share);
        let exit = loop {
            match linux::wait_nohang(pid).map_err(LaunchError::Wait)? {
                Some(linux::WaitEvent::Exited(code)) => break Exit::Code(code),
                Some(linux::WaitEvent::Signaled(signal)) => break Exit::Signal(signal),
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        };
        let last = sampler.last(pid);
        let elapsed = start.elapsed();
        let timed_out = deadline.finish();
        let (peak, timeline) = sampler.finish();
        Ok(LaunchReport {
            pid,
            exit,
            memory: last,
            peak,
            processes: 1,
            observation: Observation::Sampled,
            elapsed,
            relayed: None,
            timeline,
            timed_out,
        })
    }
}

/// Finds `program` as `execvp` would: a name with a `/` as it is, any
/// other in the directories of `PATH` (`/usr/local/bin:/usr/bin:/bin`
/// when unset). Fails with `NotFound` when there is no such file, and
/// `PermissionDenied` when the file found is not an executable regular
/// file: the two cases a shell exits 127 and 126 for, found before
/// anything runs.
///
/// ```
/// use numalab::launch::find_program;
/// assert!(find_program("sh".as_ref())?.is_absolute());
/// let missing = find_program("no-such-program-anywhere".as_ref()).unwrap_err();
/// assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
/// let plain = std::env::temp_dir().join(format!("numalab-doc-{}", std::process::id()));
/// std::fs::write(&plain, "not a program")?; // mode 0644: not executable
/// let not_executable = find_program(plain.as_os_str()).unwrap_err();
/// std::fs::remove_file(&plain)?;
/// assert_eq!(not_executable.kind(), std::io::ErrorKind::PermissionDenied);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn find_program(program: &std::ffi::OsStr) -> io::Result<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    let executable = |path: &std::path::Path| -> io::Result<()> {
        let meta = std::fs::metadata(path)?;
        if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "not an executable file",
            ))
        }
    };
    if program.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "an empty program name",
        ));
    }
    if program.as_bytes().contains(&b'/') {
        let path = std::path::PathBuf::from(program);
        executable(&path)?;
        return Ok(path);
    }
    let search = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut denied = None;
    for dir in std::env::split_paths(&search) {
        let dir = if dir.as_os_str().is_empty() {
            ".".into()
        } else {
            dir
        };
        let path = dir.join(program);
        match executable(&path) {
            Ok(()) => return Ok(path),
            Err(err) if err.kind() == io::ErrorKind::PermissionDenied => denied = Some(err),
            Err(_) => {}
        }
    }
    Err(denied.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "not found in PATH")))
}

/// The ptrace events of a traced task making a new one.
const FORK_EVENTS: [i32; 3] = [
    linux::PTRACE_EVENT_FORK,
    linux::PTRACE_EVENT_VFORK,
    linux::PTRACE_EVENT_CLONE,
];

/// How long [`release`] waits for the tracees to stop before leaving the
/// rest to the kernel (which lets them go when this process ends).
const RELEASE_WAIT: Duration = Duration::from_secs(2);

/// Lets the tracees still running (what the command left behind: a daemon,
/// a process in the background) go on untraced. A tracee can only be
/// detached while stopped: each is sent a SIGSTOP of its own, detached at
/// that stop with the SIGSTOP withheld, and so never really stops. Other
/// stops on the way are passed through. `unseen` new tracees (forked,
/// their first stop not yet waited for) are waited for too and detached
/// at that stop, its SIGSTOP withheld.
fn release(live: BTreeSet<i32>, unseen: i64) {
    let mut waiting: BTreeSet<i32> = BTreeSet::new();
    for tid in live {
        // A zombie (a thread-group leader whose threads still run) never
        // stops; it is let go with its process.
        let running = procfs::task_state(tid).is_ok_and(|state| state != 'Z' && state != 'X');
        let asked = running
            && procfs::tgid_of(tid)
                .and_then(|tgid| linux::signal_thread(tgid, tid, linux::SIGSTOP))
                .is_ok();
        if asked {
            waiting.insert(tid);
        }
    }
    // Tracees that appear meanwhile (forks) are detached at their first
    // stop; `unseen` counts the fork events whose new tracee has not
    // stopped yet.
    let mut unseen = unseen;
    let deadline = Instant::now() + RELEASE_WAIT;
    while (!waiting.is_empty() || unseen > 0) && Instant::now() < deadline {
        let (tid, event) = match linux::wait_any_nohang(-1) {
            Ok(Some(found)) => found,
            Ok(None) => {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            Err(_) => break,
        };
        let ours = waiting.contains(&tid);
        match event {
            linux::WaitEvent::Exited(_) | linux::WaitEvent::Signaled(_) => {
                waiting.remove(&tid);
            }
            linux::WaitEvent::Stopped(linux::SIGSTOP) if ours => {
                let _ = linux::trace_detach(tid, 0);
                waiting.remove(&tid);
            }
            linux::WaitEvent::Stopped(signal) if ours => {
                let _ = linux::trace_continue(tid, signal);
            }
            linux::WaitEvent::Stopped(signal) => {
                // A new tracee's first stop is ptrace's own SIGSTOP.
                unseen -= 1;
                let deliver = if signal == linux::SIGSTOP { 0 } else { signal };
                let _ = linux::trace_detach(tid, deliver);
            }
            linux::WaitEvent::TraceEvent(event) => {
                if FORK_EVENTS.contains(&event) {
                    unseen += 1;
                }
                let _ = linux::trace_continue(tid, 0);
            }
            linux::WaitEvent::Other => {}
        }
    }
}

/// A command's [`Launch::timeout`]: a thread that sends it `SIGTERM` when
/// the time is up and `SIGKILL` [`KILL_GRACE`] later, through a pidfd;
/// [`finish`](Self::finish) ends the thread.
struct Deadline {
    /// Dropped to end the wait early.
    cancel: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    fired: Arc<AtomicBool>,
}

impl Deadline {
    /// Starts the clock on `pid` (a child not yet reaped) when there is a
    /// `limit`.
    fn start(pid: i32, limit: Option<Duration>) -> Result<Deadline, LaunchError> {
        let fired = Arc::new(AtomicBool::new(false));
        let Some(limit) = limit else {
            return Ok(Deadline {
                cancel: None,
                thread: None,
                fired,
            });
        };
        let pidfd = linux::pidfd_open(pid).map_err(LaunchError::Timeout)?;
        let (cancel, wait) = std::sync::mpsc::channel::<()>();
        let shared = Arc::clone(&fired);
        let thread = std::thread::Builder::new()
            .name("numalab-timeout".into())
            .spawn(move || {
                use std::os::fd::AsFd;
                use std::sync::mpsc::RecvTimeoutError;
                if wait.recv_timeout(limit) != Err(RecvTimeoutError::Timeout) {
                    return;
                }
                shared.store(true, Ordering::SeqCst);
                let _ = linux::pidfd_signal(pidfd.as_fd(), linux::SIGTERM);
                if wait.recv_timeout(KILL_GRACE) == Err(RecvTimeoutError::Timeout) {
                    let _ = linux::pidfd_signal(pidfd.as_fd(), linux::SIGKILL);
                }
            })
            .map_err(LaunchError::Timeout)?;
        Ok(Deadline {
            cancel: Some(cancel),
            thread: Some(thread),
            fired,
        })
    }

    /// Stops the clock; whether the time ran out.
    fn finish(mut self) -> bool {
        drop(self.cancel.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.fired.load(Ordering::SeqCst)
    }
}

/// The shortest time between two reads of the command's memory for its
/// peak (when no timeline is asked for).
const PEAK_INTERVAL: Duration = Duration::from_millis(20);

/// Reads the memory of the command's processes in the background and keeps
/// each one's largest snapshot (by private memory) and latest snapshot.
struct Sampler {
    shared: Arc<SamplerState>,
    /// The sampling thread; it hands back the timeline, when one was
    /// asked for.
    thread: Option<std::thread::JoinHandle<Option<Timeline>>>,
    /// The timeline asked for: `(interval, grow_to)`.
    timeline: Option<(Duration, Duration)>,
}

#[derive(Default)]
struct SamplerState {
    stop: AtomicBool,
    watched: Mutex<BTreeSet<i32>>,
    peak: Mutex<BTreeMap<i32, ProcessMemory>>,
    last: Mutex<BTreeMap<i32, ProcessMemory>>,
}

impl SamplerState {
    fn offer(&self, pid: i32, memory: &ProcessMemory) {
        let mut peak = lock(&self.peak);
        let entry = peak.entry(pid).or_default();
        if memory.private_total() >= entry.private_total() {
            *entry = memory.clone();
        }
        lock(&self.last).insert(pid, memory.clone());
    }
}

/// Locks a mutex, ignoring poisoning (the sampler's data stays valid).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Sampler {
    fn start(
        pid: i32,
        timeline: Option<(Duration, Duration)>,
        writes: bool,
        share: f64,
    ) -> Sampler {
        let shared = Arc::new(SamplerState::default());
        lock(&shared.watched).insert(pid);
        let state = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("numalab-sampler".into())
            .spawn(move || {
                let mut recorder = timeline
                    .map(|(interval, grow_to)| Recorder::new(interval, grow_to, writes, share));
                while !state.stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let cpu = crate::system::thread_cpu_time();
                    // Threads share their process's memory; read each
                    // process once, through its leader.
                    let pids: Vec<i32> = lock(&state.watched)
                        .iter()
                        .copied()
                        .filter(|&pid| procfs::tgid_of(pid).ok() == Some(pid))
                        .collect();
                    let pause = match recorder.as_mut() {
                        Some(recorder) => {
                            let now = recorder.sample(&pids, |pid, memory| {
                                if !memory.bytes.is_empty() {
                                    state.offer(pid, memory);
                                }
                            });
                            recorder.keep(now, started)
                        }
                        None => {
                            for pid in pids {
                                if let Ok(memory) = ProcessMemory::of_process(pid) {
                                    if !memory.bytes.is_empty() {
                                        state.offer(pid, &memory);
                                    }
                                }
                            }
                            // Reading numa_maps walks page tables: every
                            // 20 ms at most, and never more than the
                            // profile's share of a CPU.
                            Timeline::pause(
                                PEAK_INTERVAL,
                                started.elapsed(),
                                crate::system::thread_cpu_time() - cpu,
                                share,
                            )
                        }
                    };
                    // Sleep in steps, to stop soon when asked.
                    let wake = Instant::now() + pause;
                    while !state.stop.load(Ordering::Relaxed) && Instant::now() < wake {
                        std::thread::sleep((wake - Instant::now()).min(Duration::from_millis(10)));
                    }
                }
                recorder.map(Recorder::finish)
            })
            .ok();
        Sampler {
            shared,
            thread,
            timeline,
        }
    }

    fn watch(&self, pid: i32) {
        lock(&self.shared.watched).insert(pid);
    }

    /// Stops watching `pid`, once reaped.
    fn forget(&self, pid: i32) {
        lock(&self.shared.watched).remove(&pid);
    }

    fn offer(&self, pid: i32, memory: &ProcessMemory) {
        self.shared.offer(pid, memory);
    }

    fn last(&self, pid: i32) -> ProcessMemory {
        lock(&self.shared.last)
            .get(&pid)
            .cloned()
            .unwrap_or_default()
    }

    fn finish(mut self) -> (ProcessMemory, Option<Timeline>) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let recorded = self
            .thread
            .take()
            .and_then(|thread| thread.join().ok())
            .flatten();
        // A sampling thread that could not start recorded nothing.
        let timeline = recorded.or_else(|| {
            self.timeline.map(|(interval, _)| Timeline {
                interval_s: interval.as_secs_f64(),
                ..Timeline::default()
            })
        });
        let mut total = ProcessMemory::default();
        for memory in lock(&self.shared.peak).values() {
            total.merge(memory);
        }
        (total, timeline)
    }
}
