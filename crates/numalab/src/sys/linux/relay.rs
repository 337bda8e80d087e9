//! Relaying signals to a command, for `numalab exec`.

use super::*;

/// The process signals are relayed to (0: none yet).
static RELAY_TO: AtomicI32 = AtomicI32::new(0);
/// The first signal another process sent while relaying (0: none).
static RELAY_ARRIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn relay_handler(signal: libc::c_int, info: *mut libc::siginfo_t, _: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    // A signal the kernel sent (the terminal's Ctrl-C, Ctrl-\, hang-up)
    // went to the whole foreground process group: the command has it
    // already, and it decides what it means. Only signals another process
    // sent to numalab are passed on (as sudo does).
    if code == libc::SI_KERNEL {
        return;
    }
    // The first is passed on; a second means the command did not end on
    // it (it ignores or handles it) and whoever sends them wants it gone:
    // it is killed.
    let first = RELAY_ARRIVED
        .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok();
    let pid = RELAY_TO.load(Ordering::SeqCst);
    if pid > 0 {
        let send = if first { signal } else { libc::SIGKILL };
        // SAFETY: errno is thread-local; kill(2) is async-signal-safe and
        // may change errno, which the interrupted code must see unchanged.
        unsafe {
            let errno = *libc::__errno_location();
            libc::kill(pid, send);
            *libc::__errno_location() = errno;
        }
    }
}

/// A signal's disposition as it was before [`relay_signal`].
#[derive(Clone, Copy)]
pub struct SavedAction {
    signal: i32,
    action: libc::sigaction,
}

impl std::fmt::Debug for SavedAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SavedAction")
            .field("signal", &self.signal)
            .finish_non_exhaustive()
    }
}

/// Catches `signal` to pass it on to the process named by
/// [`relay_to`] and record it ([`relayed_signal`]), unless it is ignored:
/// an ignored signal stays ignored (`nohup`) and `None` is returned.
pub fn relay_signal(signal: i32) -> io::Result<Option<SavedAction>> {
    // SAFETY: a zeroed sigaction is a valid argument to fill in.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action only reads the current one into `old`.
    check(unsafe { libc::sigaction(signal, ptr::null(), &mut old) }.into())?;
    if old.sa_sigaction == libc::SIG_IGN {
        return Ok(None);
    }
    install_handler(
        signal,
        relay_handler as *const () as libc::sighandler_t,
        libc::SA_SIGINFO | libc::SA_RESTART,
    )
    .map(Some)
}

/// Makes `handler` (a function whose calls are all async-signal-safe)
/// `signal`'s handler with `flags`, nothing blocked while it runs;
/// returns the disposition it replaced.
fn install_handler(
    signal: i32,
    handler: libc::sighandler_t,
    flags: libc::c_int,
) -> io::Result<SavedAction> {
    // SAFETY: a zeroed sigaction is a valid value to fill in.
    let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
    new.sa_sigaction = handler;
    new.sa_flags = flags;
    // SAFETY: sa_mask is a valid sigset to empty.
    unsafe { libc::sigemptyset(&mut new.sa_mask) };
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `new` is a complete action whose handler only makes
    // async-signal-safe calls (the caller's word); `old` is valid for
    // writes.
    check(unsafe { libc::sigaction(signal, &new, &mut old) }.into())?;
    Ok(SavedAction {
        signal,
        action: old,
    })
}

/// Gives a signal back the disposition it had before [`relay_signal`].
pub fn restore_signal(saved: &SavedAction) {
    // SAFETY: `saved.action` is what sigaction(2) returned for this signal.
    unsafe {
        libc::sigaction(saved.signal, &saved.action, ptr::null_mut());
    }
}

/// The message [`exit_on_bus_error`]'s handler writes: a leaked buffer
/// and its length (null: none).
static BUS_MESSAGE: AtomicPtr<u8> = AtomicPtr::new(ptr::null_mut());
static BUS_MESSAGE_LEN: AtomicUsize = AtomicUsize::new(0);

extern "C" fn bus_error_exit(_: libc::c_int) {
    let message = BUS_MESSAGE.load(Ordering::SeqCst);
    let len = BUS_MESSAGE_LEN.load(Ordering::SeqCst);
    // SAFETY: write(2) and _exit(2) are async-signal-safe; the message is
    // a leaked buffer of `len` bytes that is never freed.
    unsafe {
        if !message.is_null() {
            libc::write(2, message.cast(), len);
        }
        libc::_exit(1);
    }
}

/// Catches `SIGBUS` (a mapped file's page past its end, after the file
/// was truncated under the mapping) to write `message` to standard error
/// and end the process with status 1, instead of dying of "Bus error"
/// with nothing said. Returns the disposition to put back with
/// [`restore_signal`].
pub fn exit_on_bus_error(message: &str) -> io::Result<SavedAction> {
    let text: &'static mut [u8] = Box::leak(message.as_bytes().to_vec().into_boxed_slice());
    BUS_MESSAGE_LEN.store(text.len(), Ordering::SeqCst);
    BUS_MESSAGE.store(text.as_mut_ptr(), Ordering::SeqCst);
    install_handler(
        libc::SIGBUS,
        bus_error_exit as *const () as libc::sighandler_t,
        0,
    )
}

/// Names the process relayed signals go to (0: none, they are only
/// recorded).
pub fn relay_to(pid: i32) {
    RELAY_TO.store(pid, Ordering::SeqCst);
}

/// The first signal relayed since [`reset_relay`], if any.
pub fn relayed_signal() -> Option<i32> {
    match RELAY_ARRIVED.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// Forgets the relayed signal and the process to relay to.
pub fn reset_relay() {
    RELAY_TO.store(0, Ordering::SeqCst);
    RELAY_ARRIVED.store(0, Ordering::SeqCst);
}
