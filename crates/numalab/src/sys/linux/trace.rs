//! Process tracing, for `numalab exec` to read a command's pages at its exit.

use super::*;

/// `ptrace(PTRACE_TRACEME)`: called in a child between fork and exec, so
/// the exec stops it for the parent.
pub fn trace_me() -> io::Result<()> {
    // SAFETY: PTRACE_TRACEME takes no pointers.
    check(unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) })?;
    Ok(())
}

/// Tracing options: report fork, vfork, clone, exec and exit of every
/// tracee (an exec reported as an event does not raise SIGTRAP in it).
/// The tracees are not killed if numalab dies (no `PTRACE_O_EXITKILL`):
/// the command itself gets a parent-death signal
/// ([`set_parent_death_signal`]), and what it started outlives it, as
/// under `numactl`.
pub fn trace_set_options(pid: i32) -> io::Result<()> {
    let options = libc::PTRACE_O_TRACEEXIT
        | libc::PTRACE_O_TRACEFORK
        | libc::PTRACE_O_TRACEVFORK
        | libc::PTRACE_O_TRACECLONE
        | libc::PTRACE_O_TRACEEXEC;
    // SAFETY: PTRACE_SETOPTIONS takes the options as the data value.
    check(unsafe { libc::ptrace(libc::PTRACE_SETOPTIONS, pid, 0, options as libc::c_long) })?;
    Ok(())
}

/// `ptrace(PTRACE_CONT)`, delivering `signal` (0: none).
pub fn trace_continue(pid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: PTRACE_CONT takes the signal as the data value.
    check(unsafe { libc::ptrace(libc::PTRACE_CONT, pid, 0, signal as libc::c_long) })?;
    Ok(())
}

/// `ptrace(PTRACE_DETACH)` of a stopped tracee, delivering `signal` (0:
/// none): it runs on untraced.
pub fn trace_detach(tid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: PTRACE_DETACH takes the signal as the data value.
    check(unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0, signal as libc::c_long) })?;
    Ok(())
}

/// `prctl(PR_SET_PDEATHSIG)`: `signal` is sent to the calling process when
/// the thread that started it ends. Called between fork and exec; it
/// survives the exec (of anything but a set-user-ID program).
pub fn set_parent_death_signal(signal: i32) -> io::Result<()> {
    // SAFETY: PR_SET_PDEATHSIG takes the signal as an integer argument.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0) }.into())?;
    Ok(())
}

/// `getppid(2)`.
pub fn parent_process_id() -> u32 {
    // SAFETY: getppid has no arguments and cannot fail.
    unsafe { libc::getppid() as u32 }
}

/// `kill(2)`: sends `signal` to process `pid`.
pub fn send_signal(pid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: kill takes no pointers.
    check(unsafe { libc::kill(pid, signal) }.into())?;
    Ok(())
}

/// `pidfd_open(2)` (Linux 5.3): a descriptor that names process `pid`
/// itself, which a later process given the same number is not.
pub fn pidfd_open(pid: i32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags.
    let fd = check(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// `pidfd_send_signal(2)`: sends `signal` to the process `pidfd` names;
/// `ESRCH` once it has exited, whatever process has its number since.
pub fn pidfd_signal(pidfd: std::os::fd::BorrowedFd<'_>, signal: i32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: no siginfo is passed (null), flags 0.
    check(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    })?;
    Ok(())
}

/// `tgkill(2)`: sends `signal` to thread `tid` of process `tgid`.
pub fn signal_thread(tgid: i32, tid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: tgkill takes three integers.
    check(unsafe { libc::syscall(libc::SYS_tgkill, tgid, tid, signal) })?;
    Ok(())
}

/// What `waitpid` reported for one tracee or child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitEvent {
    /// Exited with a status code.
    Exited(i32),
    /// Killed by a signal.
    Signaled(i32),
    /// Stopped at a ptrace event (`PTRACE_EVENT_*`).
    TraceEvent(i32),
    /// Stopped by a signal (delivery stop or group stop).
    Stopped(i32),
    /// Something else (continued, …).
    Other,
}

fn wait_event(status: libc::c_int) -> WaitEvent {
    if libc::WIFEXITED(status) {
        WaitEvent::Exited(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        WaitEvent::Signaled(libc::WTERMSIG(status))
    } else if libc::WIFSTOPPED(status) {
        let event = status >> 16;
        if libc::WSTOPSIG(status) == libc::SIGTRAP && event != 0 {
            WaitEvent::TraceEvent(event)
        } else {
            WaitEvent::Stopped(libc::WSTOPSIG(status))
        }
    } else {
        WaitEvent::Other
    }
}

/// `waitpid(pid, __WALL)`; `pid` -1 waits for any child or tracee.
pub fn wait_any(pid: i32) -> io::Result<(i32, WaitEvent)> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: status is valid for writes.
        let ret = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if ret < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        return Ok((ret, wait_event(status)));
    }
}

/// `waitpid(pid, __WALL | WNOHANG)`: an event of any child or tracee
/// (`pid` -1) if one is waiting, else `None`.
pub fn wait_any_nohang(pid: i32) -> io::Result<Option<(i32, WaitEvent)>> {
    let mut status: libc::c_int = 0;
    // SAFETY: status is valid for writes.
    let ret = unsafe { libc::waitpid(pid, &mut status, libc::__WALL | libc::WNOHANG) };
    match ret {
        0 => Ok(None),
        ret if ret < 0 => Err(io::Error::last_os_error()),
        ret => Ok(Some((ret, wait_event(status)))),
    }
}

/// `waitpid(pid, WNOHANG)`: the child's end if it has ended, else `None`.
pub fn wait_nohang(pid: i32) -> io::Result<Option<WaitEvent>> {
    let mut status: libc::c_int = 0;
    // SAFETY: status is valid for writes.
    let ret = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    if ret == 0 {
        return Ok(None);
    }
    Ok(Some(if libc::WIFEXITED(status) {
        WaitEvent::Exited(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        WaitEvent::Signaled(libc::WTERMSIG(status))
    } else {
        WaitEvent::Other
    }))
}

/// Sets how the calling process treats `signal`: ignored (`true`) or
/// default (`false`). Used by `exec` so that Ctrl-C reaches the command,
/// not numalab.
pub fn ignore_signal(signal: i32, ignore: bool) {
    let handler = if ignore { libc::SIG_IGN } else { libc::SIG_DFL };
    // SAFETY: SIG_IGN and SIG_DFL are valid dispositions for any catchable
    // signal.
    unsafe {
        libc::signal(signal, handler);
    }
}

/// Blocks (`true`) or unblocks `signals` for the calling thread
/// (`pthread_sigmask`). A blocked signal stays pending until unblocked;
/// threads started meanwhile inherit the mask.
pub fn block_signals(signals: &[i32], block: bool) -> io::Result<()> {
    // SAFETY: a zeroed sigset_t is valid storage for sigemptyset to fill.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is valid for writes.
    unsafe { libc::sigemptyset(&mut set) };
    for &signal in signals {
        // SAFETY: set was initialised by sigemptyset.
        check(unsafe { libc::sigaddset(&mut set, signal) }.into())?;
    }
    let how = if block {
        libc::SIG_BLOCK
    } else {
        libc::SIG_UNBLOCK
    };
    // SAFETY: set is initialised; a null old set is allowed.
    let ret = unsafe { libc::pthread_sigmask(how, &set, ptr::null_mut()) };
    if ret != 0 {
        return Err(io::Error::from_raw_os_error(ret));
    }
    Ok(())
}

/// The first of `signals` pending for the calling thread or the process
/// (`sigpending`), if any.
pub fn pending_signal(signals: &[i32]) -> Option<i32> {
    // SAFETY: a zeroed sigset_t is valid storage for sigpending to fill.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is valid for writes.
    if unsafe { libc::sigpending(&mut set) } != 0 {
        return None;
    }
    // SAFETY: set was filled by sigpending.
    signals
        .iter()
        .copied()
        .find(|&s| unsafe { libc::sigismember(&set, s) } == 1)
}

pub use libc::{ECHILD, SIGHUP, SIGINT, SIGKILL, SIGQUIT, SIGSTOP, SIGTERM};

/// The name of signal `signal` as `kill -l` spells it, for Linux's
/// standard signals; None for a real-time or unknown one.
pub fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSTKFLT => "SIGSTKFLT",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGCONT => "SIGCONT",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGTSTP => "SIGTSTP",
        libc::SIGTTIN => "SIGTTIN",
        libc::SIGTTOU => "SIGTTOU",
        libc::SIGURG => "SIGURG",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        libc::SIGWINCH => "SIGWINCH",
        libc::SIGIO => "SIGIO",
        libc::SIGPWR => "SIGPWR",
        libc::SIGSYS => "SIGSYS",
        _ => return None,
    })
}
pub use libc::{PTRACE_EVENT_CLONE, PTRACE_EVENT_EXIT, PTRACE_EVENT_FORK, PTRACE_EVENT_VFORK};
