//! The only place in numalab that makes raw Linux system calls.
//!
//! Everything here is a thin, typed wrapper: arguments go to the kernel as
//! given and errors come back as [`io::Error`] carrying the errno, so the
//! callers can map each errno to an error that says what to do. Constants
//! that `libc` lacks are defined once, below, with the kernel version that
//! introduced them.

use std::ffi::c_void;
use std::io;
use std::ptr;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicUsize, Ordering};

// Memory policy modes (include/uapi/linux/mempolicy.h).
pub const MPOL_DEFAULT: i32 = 0;
pub const MPOL_PREFERRED: i32 = 1;
pub const MPOL_BIND: i32 = 2;
pub const MPOL_INTERLEAVE: i32 = 3;
pub const MPOL_LOCAL: i32 = 4;
/// Linux 5.15.
pub const MPOL_PREFERRED_MANY: i32 = 5;
/// Linux 6.9.
pub const MPOL_WEIGHTED_INTERLEAVE: i32 = 6;

// Mode flags, or-ed into the mode.
pub const MPOL_F_STATIC_NODES: i32 = 1 << 15;
pub const MPOL_F_RELATIVE_NODES: i32 = 1 << 14;
pub const MPOL_MODE_FLAGS: i32 = MPOL_F_STATIC_NODES | MPOL_F_RELATIVE_NODES | (1 << 13);

// get_mempolicy flags.
pub const MPOL_F_ADDR: u64 = 2;
pub const MPOL_F_MEMS_ALLOWED: u64 = 4;

// mbind / move_pages flags.
pub const MPOL_MF_STRICT: u32 = 1;
pub const MPOL_MF_MOVE: u32 = 2;

/// The largest node mask numalab passes to the kernel, in 64-bit words
/// (1024 nodes: Linux's largest `CONFIG_NODES_SHIFT`).
pub const NODE_MASK_WORDS: usize = 16;

fn check(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `(pointer, maxnode)` for a node mask argument: the kernel reads
/// `maxnode - 1` bits.
fn mask_arg(mask: &[u64]) -> (*const u64, libc::c_ulong) {
    if mask.is_empty() {
        (ptr::null(), 0)
    } else {
        (mask.as_ptr(), (mask.len() * 64 + 1) as libc::c_ulong)
    }
}

/// `set_mempolicy(2)`: the calling thread's policy for future allocations.
pub fn set_mempolicy(mode: i32, mask: &[u64]) -> io::Result<()> {
    let (mask, maxnode) = mask_arg(mask);
    // SAFETY: the mask pointer is valid for `maxnode - 1` bits or null with
    // maxnode 0; the kernel only reads it.
    check(unsafe { libc::syscall(libc::SYS_set_mempolicy, mode, mask, maxnode) })?;
    Ok(())
}

/// `mbind(2)` on `[addr, addr + len)`.
///
/// Changing the policy of a range (and, with [`MPOL_MF_MOVE`], migrating its
/// pages) never changes its contents, so this is safe even on memory the
/// caller does not own; an unmapped range is an `ENOMEM`/`EFAULT` error.
pub fn mbind(addr: *const u8, len: usize, mode: i32, mask: &[u64], flags: u32) -> io::Result<()> {
    let (mask, maxnode) = mask_arg(mask);
    // SAFETY: the kernel validates the address range itself; the mask
    // pointer is valid as for set_mempolicy.
    check(unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr as *mut c_void,
            len as libc::c_ulong,
            mode,
            mask,
            maxnode,
            flags,
        )
    })?;
    Ok(())
}

/// `get_mempolicy(2)` for the calling thread: `(mode with flags, node mask)`.
pub fn get_thread_mempolicy() -> io::Result<(i32, Vec<u64>)> {
    get_mempolicy_raw(ptr::null(), 0)
}

/// `get_mempolicy(2)` with `MPOL_F_ADDR`: the policy governing `addr`.
pub fn get_range_mempolicy(addr: *const u8) -> io::Result<(i32, Vec<u64>)> {
    get_mempolicy_raw(addr, MPOL_F_ADDR)
}

fn get_mempolicy_raw(addr: *const u8, flags: u64) -> io::Result<(i32, Vec<u64>)> {
    let mut mode: libc::c_int = 0;
    let mut mask = vec![0u64; NODE_MASK_WORDS];
    // SAFETY: mode and mask are valid for writes of the sizes passed.
    check(unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            mask.as_mut_ptr(),
            (NODE_MASK_WORDS * 64) as libc::c_ulong,
            addr as *mut c_void,
            flags as libc::c_ulong,
        )
    })?;
    Ok((mode, mask))
}

/// The nodes this thread may allocate from (its cpuset's `mems`).
pub fn mems_allowed() -> io::Result<Vec<u64>> {
    let mut mask = vec![0u64; NODE_MASK_WORDS];
    // SAFETY: mask is valid for writes of NODE_MASK_WORDS words.
    check(unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            ptr::null_mut::<libc::c_int>(),
            mask.as_mut_ptr(),
            (NODE_MASK_WORDS * 64) as libc::c_ulong,
            ptr::null_mut::<c_void>(),
            MPOL_F_MEMS_ALLOWED as libc::c_ulong,
        )
    })?;
    Ok(mask)
}

/// `move_pages(2)` in query mode for the calling process: writes each page's
/// node, or a negative errno (`-ENOENT`: not present; `-EFAULT`: not mapped),
/// into `status`.
pub fn query_pages(pages: &[*const u8], status: &mut [i32]) -> io::Result<()> {
    assert_eq!(pages.len(), status.len());
    // SAFETY: pages and status have `len` elements; nodes is null, which
    // asks the kernel for the current node of each page without moving it.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            pages.len() as libc::c_ulong,
            pages.as_ptr(),
            ptr::null::<libc::c_int>(),
            status.as_mut_ptr(),
            0,
        )
    })?;
    Ok(())
}

/// `move_pages(2)` for the calling process: moves the page holding each
/// address of `pages` to the node at the same index of `nodes`, and writes
/// into `status` the node it is on afterwards, or a negative errno
/// (`-ENOENT`: not present, so nothing to move; `-EBUSY`, `-EACCES`: it
/// could not move). Only pages this process maps alone are moved
/// (`MPOL_MF_MOVE`). Moving a page never changes its contents.
pub fn move_pages_to(pages: &[*const u8], nodes: &[i32], status: &mut [i32]) -> io::Result<()> {
    assert_eq!(pages.len(), nodes.len());
    assert_eq!(pages.len(), status.len());
    // SAFETY: pages, nodes and status have `len` elements; the kernel
    // reads the first two and writes the third. The addresses themselves
    // are only looked up in this process's page tables.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            pages.len() as libc::c_ulong,
            pages.as_ptr(),
            nodes.as_ptr(),
            status.as_mut_ptr(),
            MPOL_MF_MOVE as libc::c_int,
        )
    })?;
    Ok(())
}

/// `sched_setaffinity(2)` for thread `tid` (0: the calling thread).
pub fn set_affinity(tid: i32, mask: &[u64]) -> io::Result<()> {
    // SAFETY: mask is valid for reads of its byte length.
    check(unsafe {
        libc::syscall(
            libc::SYS_sched_setaffinity,
            tid,
            std::mem::size_of_val(mask),
            mask.as_ptr(),
        )
    })?;
    Ok(())
}

/// `sched_getaffinity(2)` for thread `tid` (0: the calling thread).
pub fn get_affinity(tid: i32) -> io::Result<Vec<u64>> {
    let mut words = 16;
    loop {
        let mut mask = vec![0u64; words];
        // SAFETY: mask is valid for writes of its byte length.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_sched_getaffinity,
                tid,
                std::mem::size_of_val(mask.as_slice()),
                mask.as_mut_ptr(),
            )
        };
        match check(ret) {
            Ok(_) => return Ok(mask),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && words < 1 << 14 => words *= 2,
            Err(e) => return Err(e),
        }
    }
}

/// `getcpu(2)`: `(cpu, node)` the calling thread is running on now.
pub fn getcpu() -> (u32, u32) {
    let mut cpu: libc::c_uint = 0;
    let mut node: libc::c_uint = 0;
    // SAFETY: both pointers are valid for writes; the cache argument is
    // unused since Linux 2.6.24 and may be null. getcpu cannot fail with
    // valid pointers.
    unsafe {
        libc::syscall(
            libc::SYS_getcpu,
            &mut cpu as *mut libc::c_uint,
            &mut node as *mut libc::c_uint,
            ptr::null_mut::<c_void>(),
        );
    }
    (cpu, node)
}

/// The CPU the calling thread is running on now, from glibc's
/// `sched_getcpu` (read from the thread's rseq area or the vDSO: a few
/// nanoseconds, no system call). Falls back to `getcpu(2)` if it fails.
pub fn current_cpu() -> u32 {
    // SAFETY: sched_getcpu takes no arguments and has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    if cpu >= 0 {
        cpu as u32
    } else {
        getcpu().0
    }
}

// membarrier(2) commands (include/uapi/linux/membarrier.h), Linux 4.14.
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: i32 = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: i32 = 1 << 4;

/// `membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED)`: allows this
/// process to use [`membarrier_private_expedited`].
pub fn membarrier_register_private_expedited() -> io::Result<()> {
    // SAFETY: membarrier takes no pointers.
    check(unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
            0,
            0,
        )
    })?;
    Ok(())
}

/// `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`: when it returns, every
/// thread of this process that was running has executed a full memory
/// barrier (the heavy side of an asymmetric fence; the light side is a
/// compiler fence).
pub fn membarrier_private_expedited() -> io::Result<()> {
    // SAFETY: membarrier takes no pointers.
    check(unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) })?;
    Ok(())
}

/// The base page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as usize
    } else {
        4096
    }
}

/// How an anonymous mapping is backed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// Base pages.
    Base,
    /// Explicit 2 MiB huge pages from the hugetlb pool.
    Huge2M,
}

/// `mmap(2)` of `len` bytes of private anonymous memory, not yet touched.
pub fn map_anonymous(len: usize, backing: Backing) -> io::Result<*mut u8> {
    // Base pages are not reserved against overcommit (as malloc's); hugetlb
    // pages are reserved at mmap time so a fault never finds the pool empty.
    let flags = libc::MAP_PRIVATE
        | libc::MAP_ANONYMOUS
        | match backing {
            Backing::Base => libc::MAP_NORESERVE,
            Backing::Huge2M => libc::MAP_HUGETLB | libc::MAP_HUGE_2MB,
        };
    // SAFETY: a fresh anonymous mapping at an address the kernel chooses
    // aliases nothing.
    let addr = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(addr.cast())
    }
}

/// [`map_anonymous`] of base pages at an address that is a multiple of
/// `align` (a power of two): a larger mapping is made and its ends cut
/// off.
pub fn map_anonymous_aligned(len: usize, align: usize) -> io::Result<*mut u8> {
    let raw = map_anonymous(len + align, Backing::Base)?;
    let start = (raw as usize).next_multiple_of(align);
    let head = start - raw as usize;
    let tail = align - head;
    // SAFETY: head and tail are the unused ends of the mapping just made;
    // nothing refers to them.
    unsafe {
        if head > 0 {
            unmap(raw, head)?;
        }
        if tail > 0 {
            unmap((start + len) as *mut u8, tail)?;
        }
    }
    Ok(start as *mut u8)
}

/// `munmap(2)`.
///
/// # Safety
/// `[addr, addr + len)` must be a mapping this process owns that nothing
/// will access again.
pub unsafe fn unmap(addr: *mut u8, len: usize) -> io::Result<()> {
    // SAFETY: the caller guarantees the range is unused from now on.
    if unsafe { libc::munmap(addr.cast(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Advice for [`madvise`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// Back the range with transparent huge pages.
    HugePage,
    /// Never back the range with transparent huge pages.
    NoHugePage,
    /// Fault every page in for writing now (Linux 5.14), following the
    /// range's policy; fails with an error instead of `SIGBUS` when a
    /// hugetlb page cannot be had.
    PopulateWrite,
    /// Gather the range's pages into transparent huge pages now, contents
    /// kept (Linux 6.1), on the node most of them are on.
    Collapse,
}

/// `madvise(2)`; the advice given here never changes memory contents.
pub fn madvise(addr: *mut u8, len: usize, advice: Advice) -> io::Result<()> {
    let advice = match advice {
        Advice::HugePage => libc::MADV_HUGEPAGE,
        Advice::NoHugePage => libc::MADV_NOHUGEPAGE,
        Advice::PopulateWrite => libc::MADV_POPULATE_WRITE,
        // Not in the libc crate yet; the same on every architecture.
        Advice::Collapse => 25,
    };
    // SAFETY: MADV_(NO)HUGEPAGE only changes how the range is backed, and
    // MADV_COLLAPSE moves its pages into huge pages with their contents;
    // MADV_POPULATE_WRITE allocates zeroed pages where none are present and
    // leaves present pages untouched (in a shared mapping of pages that
    // exist, it only fills the page tables).
    if unsafe { libc::madvise(addr.cast(), len, advice) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `madvise(MADV_DONTNEED)`: gives the pages of a private anonymous
/// range back to the kernel; they read as zeros afterwards and are faulted
/// in again (following the range's policy) when next touched.
///
/// # Safety
/// `[addr, addr + len)` must be private anonymous memory this process owns,
/// page-aligned, and nothing may be reading or writing it concurrently or
/// rely on its contents afterwards.
pub unsafe fn discard(addr: *mut u8, len: usize) -> io::Result<()> {
    // SAFETY: the caller guarantees the range is unused; dropping private
    // anonymous pages only replaces their contents with zeros.
    if unsafe { libc::madvise(addr.cast(), len, libc::MADV_DONTNEED) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `mlock(2)`.
pub fn mlock(addr: *const u8, len: usize) -> io::Result<()> {
    // SAFETY: locking pages in memory never changes their contents.
    if unsafe { libc::mlock(addr.cast(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Process tracing, for `numalab exec` to read a command's pages at its exit.
// ---------------------------------------------------------------------------

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
pub use libc::{PTRACE_EVENT_CLONE, PTRACE_EVENT_EXIT, PTRACE_EVENT_FORK, PTRACE_EVENT_VFORK};

// ---------------------------------------------------------------------------
// Relaying signals to a command, for `numalab exec`.
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Shared-memory segments, for the ring: files on tmpfs or hugetlbfs opened
// without following links, locked with open-file-description locks, mapped
// shared, and waited on with futexes.
// ---------------------------------------------------------------------------

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} contains a NUL byte", path.display()),
        )
    })
}

/// How [`open_segment`] opens a segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentOpen {
    /// An existing file, read and write.
    ReadWrite,
    /// An existing file, read only.
    ReadOnly,
    /// A new file, owner-only (0600), failing with `EEXIST` if the name is
    /// taken (by anything, a symbolic link included).
    CreateExclusive,
}

/// `open(2)` of a segment file; never follows a symbolic link in the last
/// component (`O_NOFOLLOW`: `ELOOP`), never waits (`O_NONBLOCK`: a FIFO
/// opens at once), and the descriptor is close-on-exec.
pub fn open_segment(path: &Path, how: SegmentOpen) -> io::Result<OwnedFd> {
    let path = c_path(path)?;
    // O_NONBLOCK: a FIFO planted under a segment's name (anyone can make
    // one in /dev/shm) opens at once instead of waiting for a writer; the
    // caller then sees with `stat_fd` that it is not a regular file. It
    // changes nothing for the regular files segments are.
    let base = libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY;
    let flags = match how {
        SegmentOpen::ReadWrite => base | libc::O_RDWR,
        SegmentOpen::ReadOnly => base | libc::O_RDONLY,
        SegmentOpen::CreateExclusive => base | libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
    };
    // SAFETY: path is a NUL-terminated string; the mode argument is read
    // only with O_CREAT.
    let fd = unsafe { libc::open(path.as_ptr(), flags, 0o600 as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor this function owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `open(2)` with `O_TMPFILE`: an unnamed owner-only (0600) file in `dir`,
/// which [`link_fd`] later gives a name. `EOPNOTSUPP`/`EISDIR` when the
/// file system cannot make unnamed files.
pub fn open_unnamed(dir: &Path) -> io::Result<OwnedFd> {
    let dir = c_path(dir)?;
    // SAFETY: dir is NUL-terminated; the mode is read with O_TMPFILE.
    let fd = unsafe {
        libc::open(
            dir.as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor this function owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Gives the file behind `fd` the name `path`, atomically: `EEXIST` if the
/// name is taken (a link at `path` is not followed). Works for unnamed
/// files from [`open_unnamed`] through `/proc/self/fd`.
pub fn link_fd(fd: &OwnedFd, path: &Path) -> io::Result<()> {
    let from =
        CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(io::Error::other)?;
    let to = c_path(path)?;
    // SAFETY: both paths are NUL-terminated strings.
    let ret = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Opens the file behind `fd` again, as a new open file description (its
/// own [`lock`]s), through `/proc/self/fd`.
pub fn reopen_fd(fd: &OwnedFd, how: SegmentOpen) -> io::Result<OwnedFd> {
    let flags = libc::O_CLOEXEC
        | match how {
            SegmentOpen::ReadOnly => libc::O_RDONLY,
            SegmentOpen::CreateExclusive | SegmentOpen::ReadWrite => libc::O_RDWR,
        };
    open_through_proc(fd.as_fd(), flags)
}

/// `open(2)` of `/proc/self/fd/N` for `fd`: the very file `fd` names,
/// whatever has been renamed or replaced at its path since. The path is a
/// magic link: opened without `O_NOFOLLOW`, it leads nowhere else.
fn open_through_proc(fd: BorrowedFd<'_>, flags: libc::c_int) -> io::Result<OwnedFd> {
    let path =
        CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(io::Error::other)?;
    // SAFETY: path is NUL-terminated; no mode argument without O_CREAT.
    let new = unsafe { libc::open(path.as_ptr(), flags) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: new is a fresh descriptor this function owns.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// `unlink(2)`.
pub fn unlink(path: &Path) -> io::Result<()> {
    let path = c_path(path)?;
    // SAFETY: path is NUL-terminated.
    if unsafe { libc::unlink(path.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `memfd_create(2)`: an anonymous shared-memory file (tmpfs), close-on-exec;
/// `name` shows in `/proc/PID/fd` and `/proc/PID/maps` only.
pub fn memfd(name: &str) -> io::Result<OwnedFd> {
    let name = CString::new(name).map_err(io::Error::other)?;
    // SAFETY: name is NUL-terminated.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor this function owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fallocate(2)` with `FALLOC_FL_PUNCH_HOLE`: frees `len` bytes of `fd`'s
/// storage from `offset` (for tmpfs, gives the memory back); the file's
/// length stays and the range reads as zeros.
pub fn punch_hole(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    let offset = libc::off_t::try_from(offset).map_err(io::Error::other)?;
    let len = libc::off_t::try_from(len).map_err(io::Error::other)?;
    // SAFETY: fallocate takes no pointers.
    let ret = unsafe {
        libc::fallocate(
            fd.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset,
            len,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `ftruncate(2)`: sets the file's length.
pub fn set_len(fd: &OwnedFd, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len).map_err(io::Error::other)?;
    // SAFETY: ftruncate takes no pointers.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What [`stat_fd`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    /// Length in bytes.
    pub size: u64,
    /// Bytes of storage allocated to it (`st_blocks` × 512): less than
    /// `size` for a sparse file.
    pub allocated: u64,
    /// Permission bits and file type (`st_mode`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Whether it is a regular file.
    pub regular: bool,
    /// Device and inode: the file's identity.
    pub id: (u64, u64),
}

/// `fstat(2)`.
pub fn stat_fd(fd: impl AsFd) -> io::Result<FileStat> {
    // SAFETY: an all-zero stat is a valid value of a plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is valid for writes.
    if unsafe { libc::fstat(fd.as_fd().as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(FileStat {
        size: st.st_size as u64,
        allocated: (st.st_blocks as u64).saturating_mul(512),
        mode: st.st_mode,
        uid: st.st_uid,
        regular: st.st_mode & libc::S_IFMT == libc::S_IFREG,
        id: (st.st_dev, st.st_ino),
    })
}

/// The calling process's effective user id.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// The calling process's id.
pub fn process_id() -> u32 {
    std::process::id()
}

/// `statvfs(2)`: bytes an unprivileged process can still write on the file
/// system holding `path` (`f_bavail × f_frsize`).
pub fn fs_available_bytes(path: &Path) -> io::Result<u64> {
    let path = c_path(path)?;
    // SAFETY: an all-zero statvfs is a valid value of a plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: path is NUL-terminated and st valid for writes.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// `mmap(2)` of the first `len` bytes of `fd`, shared with every process
/// that maps the file; writable unless `read_only`.
pub fn map_shared(fd: &OwnedFd, len: usize, read_only: bool) -> io::Result<*mut u8> {
    let prot = if read_only {
        libc::PROT_READ
    } else {
        libc::PROT_READ | libc::PROT_WRITE
    };
    // SAFETY: a new mapping at an address the kernel chooses aliases no
    // Rust object; what other processes do to the file is the caller's
    // contract with them.
    let addr = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            prot,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(addr.cast())
    }
}

/// Address space reserved for mapping many small files side by side
/// (inaccessible until a file is mapped over part of it), unmapped when
/// dropped: one `pagemap` read and one reset cover them all, where a
/// mapping per file costs an `munmap` (and, in a process with other
/// threads, a TLB shootdown) each.
#[derive(Debug)]
pub struct FileSlots {
    addr: *mut u8,
    len: usize,
}

impl FileSlots {
    /// Reserves `len` bytes (a multiple of the page size); no memory is
    /// committed.
    pub fn reserve(len: usize) -> io::Result<FileSlots> {
        // SAFETY: a new inaccessible mapping at an address the kernel
        // chooses aliases no Rust object.
        let addr = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(FileSlots {
            addr: addr.cast(),
            len,
        })
    }

    /// The reservation's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Maps `len` bytes of `fd` from offset 0 read-only at byte `at` of
    /// the reservation (page-aligned), every page mapped in the call
    /// (`MAP_POPULATE`: for a file all cached, since a page that is not
    /// is read from disk). The file may be closed afterwards.
    pub fn map_populated(&self, at: usize, fd: BorrowedFd<'_>, len: usize) -> io::Result<()> {
        if !at.is_multiple_of(page_size()) || at.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: MAP_FIXED replaces only pages of this reservation,
        // which no Rust object references.
        let addr = unsafe {
            libc::mmap(
                self.addr.add(at).cast(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_FIXED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Makes the first `len` bytes inaccessible again, every file mapped
    /// there unmapped in one call.
    pub fn reset(&self, len: usize) -> io::Result<()> {
        let len = len.min(self.len);
        if len == 0 {
            return Ok(());
        }
        // SAFETY: as in `map_populated`: only this reservation's pages.
        let addr = unsafe {
            libc::mmap(
                self.addr.cast(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The address of byte `at` (never dereferenced here).
    pub fn at(&self, at: usize) -> *const u8 {
        self.addr.wrapping_add(at)
    }
}

impl Drop for FileSlots {
    fn drop(&mut self) {
        // SAFETY: the reservation is this value's alone.
        unsafe { libc::munmap(self.addr.cast(), self.len) };
    }
}

// SAFETY: the reservation belongs to the value alone and its pages are
// never touched from Rust, only mapped and unmapped.
unsafe impl Send for FileSlots {}

/// A read-only shared mapping of part of a file, unmapped when dropped:
/// for asking which of its pages are cached and where, and for copying
/// out of it ([`FileWindow::copy_to`]).
#[derive(Debug)]
pub struct FileWindow {
    addr: *mut u8,
    len: usize,
}

impl FileWindow {
    /// `mmap(2)` of `len` bytes of `fd` from `offset` (a multiple of the
    /// page size), shared and read-only; nothing is read until touched.
    pub fn map(fd: BorrowedFd<'_>, offset: u64, len: usize) -> io::Result<FileWindow> {
        FileWindow::map_with(fd, offset, len, 0)
    }

    /// [`FileWindow::map`] with every page mapped in the same call
    /// (`MAP_POPULATE`): for a window whose pages are all cached, since a
    /// page that is not is read from disk.
    pub fn map_populated(fd: BorrowedFd<'_>, offset: u64, len: usize) -> io::Result<FileWindow> {
        FileWindow::map_with(fd, offset, len, libc::MAP_POPULATE)
    }

    fn map_with(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        flags: libc::c_int,
    ) -> io::Result<FileWindow> {
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        // SAFETY: a new mapping at an address the kernel chooses aliases
        // no Rust object, and it is only ever read through the kernel.
        let addr = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED | flags,
                fd.as_raw_fd(),
                offset,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(FileWindow {
            addr: addr.cast(),
            len,
        })
    }

    /// `mincore(2)` of `len` bytes from `start` (page-aligned): one byte
    /// per page, bit 0 set where the page is in the page cache. `vec`
    /// holds at least a byte per page.
    pub fn mincore(&self, start: usize, len: usize, vec: &mut [u8]) -> io::Result<()> {
        let page = page_size();
        if !start.is_multiple_of(page)
            || start.checked_add(len).is_none_or(|end| end > self.len)
            || vec.len() < len.div_ceil(page)
        {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: the range lies in the window, which is mapped, and vec
        // has a byte per page of it.
        if unsafe { libc::mincore(self.addr.add(start).cast(), len, vec.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// `madvise(MADV_POPULATE_READ)` (Linux 5.14) on `len` bytes from
    /// `start`: page-table entries for those pages, each read in if it is
    /// not cached; an error instead of `SIGBUS` past the end of the file.
    pub fn populate(&self, start: usize, len: usize) -> io::Result<()> {
        if start.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: the range lies in the window; populating read-only
        // page-table entries changes no memory.
        let ret =
            unsafe { libc::madvise(self.addr.add(start).cast(), len, libc::MADV_POPULATE_READ) };
        if ret != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Copies the window's bytes from `offset` into `dst` (as many as
    /// fit and the window has); returns how many. Touching a page past the
    /// file's end (a file truncated under the window) raises `SIGBUS`.
    pub fn copy_to(&self, offset: usize, dst: &mut [u8]) -> usize {
        let n = self.len.saturating_sub(offset).min(dst.len());
        if n > 0 {
            // SAFETY: [offset, offset + n) lies in the mapping, which is
            // readable, and `dst` is a distinct Rust buffer of at least n
            // bytes; bytes another process changes meanwhile are copied
            // as they are, never referenced.
            unsafe { ptr::copy_nonoverlapping(self.addr.add(offset), dst.as_mut_ptr(), n) };
        }
        n
    }

    /// The window's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The address of byte `offset` of the window (for `move_pages`;
    /// never dereferenced here).
    pub fn at(&self, offset: usize) -> *const u8 {
        self.addr.wrapping_add(offset)
    }
}

// SAFETY: the mapping belongs to the value alone and is only read (by
// the kernel or by copying out), so it may move to and be shared by
// other threads.
unsafe impl Send for FileWindow {}
// SAFETY: as above.
unsafe impl Sync for FileWindow {}

impl Drop for FileWindow {
    fn drop(&mut self) {
        // SAFETY: the window is this value's own mapping, and no
        // reference into it outlives the value.
        unsafe {
            libc::munmap(self.addr.cast(), self.len);
        }
    }
}

/// `posix_fadvise(POSIX_FADV_DONTNEED)` over the whole file: its clean,
/// unmapped pages leave the page cache; dirty ones are queued for
/// writeback and stay.
pub fn drop_file_cache(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: the advice concerns only the kernel's cache of the file.
    match unsafe { libc::posix_fadvise(fd.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) } {
        0 => Ok(()),
        err => Err(io::Error::from_raw_os_error(err)),
    }
}

/// What `cachestat(2)` (Linux 6.5) counts for a whole file, in pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStat {
    pub cached: u64,
    pub dirty: u64,
    pub writeback: u64,
    pub evicted: u64,
    pub recently_evicted: u64,
}

/// `cachestat(2)` over the whole file; `ENOSYS` before Linux 6.5.
pub fn cache_stat(fd: BorrowedFd<'_>) -> io::Result<CacheStat> {
    // Length 0: to the end of the file.
    cache_stat_range(fd, 0, 0)
}

/// `cachestat(2)` over `len` bytes from `offset` (0: to the end of the
/// file); `ENOSYS` before Linux 6.5.
pub fn cache_stat_range(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<CacheStat> {
    // The same number on every architecture (the unified table of system
    // calls from 424 on); the libc crate does not name it on x86-64.
    const SYS_CACHESTAT: libc::c_long = 451;
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    let range = Range { off: offset, len };
    let mut stat = Stat::default();
    // SAFETY: range and stat are valid for the call, laid out as the
    // kernel's struct cachestat_range and struct cachestat.
    let ret = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd.as_raw_fd(),
            &range as *const Range,
            &mut stat as *mut Stat,
            0u32,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(CacheStat {
        cached: stat.nr_cache,
        dirty: stat.nr_dirty,
        writeback: stat.nr_writeback,
        evicted: stat.nr_evicted,
        recently_evicted: stat.nr_recently_evicted,
    })
}

/// Kind of an open-file-description lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// Shared (read) lock.
    Shared,
    /// Exclusive (write) lock.
    Exclusive,
}

fn flock_struct(kind: libc::c_short, start: u64, len: u64) -> libc::flock {
    // SAFETY: an all-zero flock is a valid value of a plain C struct.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start as libc::off_t;
    fl.l_len = len as libc::off_t;
    // OFD locks require l_pid 0.
    fl.l_pid = 0;
    fl
}

/// `fcntl(F_OFD_SETLK)`: locks bytes `[start, start + len)` of the file for
/// this open file description, without waiting. `Ok(false)` when another
/// description holds a conflicting lock. The kernel drops the lock when the
/// last descriptor of the description closes — when its process dies too.
pub fn lock(fd: &OwnedFd, start: u64, len: u64, kind: LockKind) -> io::Result<bool> {
    let kind = match kind {
        LockKind::Shared => libc::F_RDLCK,
        LockKind::Exclusive => libc::F_WRLCK,
    };
    let fl = flock_struct(kind as libc::c_short, start, len);
    // SAFETY: fl is a valid flock the kernel only reads.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &fl) } != 0 {
        let err = io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
            _ => Err(err),
        };
    }
    Ok(true)
}

/// `fcntl(F_OFD_GETLK)`: whether another open file description holds a
/// lock on some byte of `[start, start + len)` that an exclusive lock would
/// conflict with (locks of `fd`'s own description are not reported).
pub fn is_locked(fd: &OwnedFd, start: u64, len: u64) -> io::Result<bool> {
    let mut fl = flock_struct(libc::F_WRLCK as libc::c_short, start, len);
    // SAFETY: fl is a valid flock the kernel reads and overwrites.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
}

/// How a [`futex_wait`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FutexWake {
    /// Woken by [`futex_wake`], by a signal, or the word no longer held the
    /// expected value: look again.
    Woken,
    /// The timeout passed.
    TimedOut,
}

/// `futex(FUTEX_WAIT)` on a word that may live in memory shared between
/// processes (so not `FUTEX_PRIVATE_FLAG`): sleeps while `*word ==
/// expected`, at most `timeout`.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) -> io::Result<FutexWake> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: word is a valid, aligned u32 for the duration of the call; the
    // kernel only reads it and the timespec.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            ptr::null::<u32>(),
            0u32,
        )
    };
    if ret == 0 {
        return Ok(FutexWake::Woken);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::ETIMEDOUT) => Ok(FutexWake::TimedOut),
        Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(FutexWake::Woken),
        _ => Err(err),
    }
}

/// `futex(FUTEX_WAKE)`: wakes up to `count` waiters of `word`, in any
/// process; returns how many woke.
pub fn futex_wake(word: &AtomicU32, count: u32) -> io::Result<u32> {
    let count = count.min(i32::MAX as u32);
    // SAFETY: word is a valid, aligned u32; FUTEX_WAKE only uses its
    // address as a key.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            count,
            ptr::null::<libc::timespec>(),
            ptr::null::<u32>(),
            0u32,
        )
    };
    check(ret).map(|woken| woken as u32)
}

/// `clock_gettime(2)` of `clock`, as a duration since the clock's epoch.
fn clock(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is valid for writes; the clocks used here always exist.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU time the calling thread has used.
pub fn thread_cpu_time() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time the calling process (all its threads) has used.
pub fn process_cpu_time() -> Duration {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// `CLOCK_MONOTONIC`: the same clock in every process of the machine, so
/// instants taken in two processes can be compared.
pub fn monotonic() -> Duration {
    clock(libc::CLOCK_MONOTONIC)
}

/// The file systems numalab tells apart, by `statfs(2)`'s magic number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileSystemKind {
    /// tmpfs, and the shared memory of `/dev/shm` and memfds.
    Tmpfs,
    /// ramfs.
    Ramfs,
    /// hugetlbfs (explicit huge pages).
    Hugetlbfs,
    /// Any other.
    Other,
}

impl FileSystemKind {
    fn of(st: &libc::statfs) -> FileSystemKind {
        const TMPFS: i64 = 0x0102_1994;
        const RAMFS: i64 = 0x8584_58f6;
        // f_type's C type differs between targets.
        #[allow(clippy::unnecessary_cast)]
        let magic = st.f_type as i64;
        match magic {
            TMPFS => FileSystemKind::Tmpfs,
            RAMFS => FileSystemKind::Ramfs,
            libc::HUGETLBFS_MAGIC => FileSystemKind::Hugetlbfs,
            _ => FileSystemKind::Other,
        }
    }

    /// The file system of the file `fd` holds (`fstatfs`); `None` when it
    /// cannot be asked.
    pub fn of_fd(fd: BorrowedFd<'_>) -> Option<FileSystemKind> {
        // SAFETY: an all-zero statfs is a valid value of a plain C struct.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: fd is an open descriptor and st valid for writes.
        (unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) } == 0).then(|| Self::of(&st))
    }

    /// The file system `path` is on (`statfs`); `None` when it cannot be
    /// asked.
    pub fn of_path(path: &Path) -> Option<FileSystemKind> {
        let path = c_path(path).ok()?;
        // SAFETY: an all-zero statfs is a valid value of a plain C struct.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: path is NUL-terminated and st valid for writes.
        (unsafe { libc::statfs(path.as_ptr(), &mut st) } == 0).then(|| Self::of(&st))
    }

    /// Whether its files are memory (tmpfs and shared memory, ramfs,
    /// hugetlbfs): their pages are not a cache of anything and cannot be
    /// dropped.
    pub fn is_memory(self) -> bool {
        self != FileSystemKind::Other
    }
}

/// Whether the file system of the file `fd` holds is one whose files are
/// memory ([`FileSystemKind::is_memory`]).
pub fn in_memory_file_system(fd: BorrowedFd<'_>) -> bool {
    FileSystemKind::of_fd(fd).is_some_and(FileSystemKind::is_memory)
}

/// Whether the path's file system is a hugetlbfs (explicit huge pages).
pub fn is_hugetlbfs(dir: &Path) -> bool {
    FileSystemKind::of_path(dir) == Some(FileSystemKind::Hugetlbfs)
}

/// A file to read, opened only once its kind is known: a regular file or
/// a FIFO comes back open for reading (close-on-exec, non-blocking, so a
/// FIFO nobody writes to reads as its end instead of hanging); anything
/// else comes back as an `O_PATH` descriptor, never opened (no device
/// driver's open runs), for the caller to refuse by its kind
/// ([`stat_fd`]). Symbolic links are followed unless `follow` is false
/// (`O_NOFOLLOW`: a link at `path` comes back as itself).
pub fn open_input(path: &Path, follow: bool) -> io::Result<OwnedFd> {
    let named = open_path_at(None, path, follow)?;
    let kind = stat_fd(&named)?.mode & libc::S_IFMT;
    if kind != libc::S_IFREG && kind != libc::S_IFIFO {
        return Ok(named);
    }
    reopen_read(named.as_fd(), false)
}

/// `openat(2)` with `O_PATH`: a descriptor that names a file without
/// opening it (no device driver's open runs, a FIFO is not waited on,
/// nothing can be read through it), so that its kind can be checked
/// ([`stat_fd`]) before [`reopen_read`] opens that same file. `path` is
/// relative to the directory `at` holds (or absolute, or relative to the
/// working directory without one); a symbolic link at its last component
/// is followed only when `follow` (otherwise the descriptor names the
/// link itself).
pub fn open_path_at(at: Option<BorrowedFd<'_>>, path: &Path, follow: bool) -> io::Result<OwnedFd> {
    let nofollow = if follow { 0 } else { libc::O_NOFOLLOW };
    open_at(at, path, libc::O_PATH | libc::O_CLOEXEC | nofollow)
}

/// `openat(2)` of `path` with `flags` (no `O_CREAT`), relative to the
/// directory `at` holds, or to the working directory without one.
fn open_at(at: Option<BorrowedFd<'_>>, path: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
    let path = c_path(path)?;
    let dir = at.map_or(libc::AT_FDCWD, |fd| fd.as_raw_fd());
    // SAFETY: path is NUL-terminated; no mode argument without O_CREAT.
    let fd = unsafe { libc::openat(dir, path.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor this function owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens for reading the very file an [`open_path_at`] descriptor names,
/// through `/proc/self/fd` (whatever has been renamed or replaced at its
/// path since): read-only, close-on-exec, non-blocking, never as a
/// controlling terminal; with `noatime` without updating its access time
/// where the caller may ask that (its owner, or root).
pub fn reopen_read(named: BorrowedFd<'_>, noatime: bool) -> io::Result<OwnedFd> {
    let flags = libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY;
    if !noatime {
        return open_through_proc(named, flags);
    }
    open_through_proc(named, flags | libc::O_NOATIME).or_else(|err| match err.raw_os_error() {
        // O_NOATIME is for the file's owner and root only.
        Some(libc::EPERM) => open_through_proc(named, flags),
        _ => Err(err),
    })
}

/// `openat(2)` of a directory to list: `path` relative to the directory
/// `at` holds (or absolute, or relative to the working directory without
/// one); a symbolic link at its last component is refused unless
/// `follow` (`ELOOP`, or `ENOTDIR`), as is anything but a directory
/// (`ENOTDIR`).
pub fn open_dir_at(at: Option<BorrowedFd<'_>>, path: &Path, follow: bool) -> io::Result<OwnedFd> {
    let nofollow = if follow { 0 } else { libc::O_NOFOLLOW };
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NONBLOCK;
    open_at(at, path, flags | nofollow)
}

/// [`open_dir_at`] of `name` inside the directory `at` holds, a link
/// never followed: `None` when a symbolic link is there, an error when
/// anything else but a directory is. A walk that opens each level from
/// the one it holds cannot be led out of its tree by a directory swapped
/// for a link meanwhile.
pub fn open_child_dir(at: BorrowedFd<'_>, name: &Path) -> io::Result<Option<OwnedFd>> {
    // A name that is swapped between a directory and a link while it is
    // looked at may be each at one of the two looks: asked again, a few
    // times, before its error stands.
    let mut tries = 0;
    loop {
        match open_dir_at(Some(at), name, false) {
            Ok(fd) => return Ok(Some(fd)),
            // A link there: ELOOP, or ENOTDIR (O_DIRECTORY is checked first
            // on some kernels); told apart from a file by its kind.
            Err(err) if matches!(err.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
                let named = open_path_at(Some(at), name, false)?;
                match stat_fd(&named)?.mode & libc::S_IFMT {
                    libc::S_IFLNK => return Ok(None),
                    libc::S_IFDIR if tries < 3 => tries += 1,
                    _ => return Err(err),
                }
            }
            Err(err) => return Err(err),
        }
    }
}

/// Clears `O_NONBLOCK` on `fd` (`fcntl(2)` `F_SETFL`), once the caller
/// knows what it opened.
pub fn set_blocking(fd: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: fd is an open descriptor; F_GETFL takes no argument.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is an open descriptor; F_SETFL takes the new flags.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Output files: written as an unnamed file (or under a random name created
// exclusively), then renamed over the target by `numalab::files`.
// ---------------------------------------------------------------------------

/// `open(2)` with `O_TMPFILE`: an unnamed file in `dir` with permission
/// bits `mode` less the umask, which [`link_fd`] later gives a name.
/// `EOPNOTSUPP` (or `EISDIR`, `EINVAL` on old kernels) when the file system
/// cannot make unnamed files.
pub fn open_unnamed_mode(dir: &Path, mode: u32) -> io::Result<OwnedFd> {
    let dir = c_path(dir)?;
    // SAFETY: dir is NUL-terminated; the mode is read with O_TMPFILE.
    let fd = unsafe {
        libc::open(
            dir.as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor this function owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `open(2)` of a new file at `path` with permission bits `mode` less the
/// umask: `O_CREAT | O_EXCL | O_NOFOLLOW`, so `EEXIST` if the name is
/// taken by anything, a symbolic link included (which is never followed).
pub fn create_new(path: &Path, mode: u32) -> io::Result<OwnedFd> {
    let path = c_path(path)?;
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: path is NUL-terminated; the mode is read with O_CREAT.
    let fd = unsafe { libc::open(path.as_ptr(), flags, mode as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor this function owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `getrandom(2)`: 64 unpredictable bits from the kernel's generator.
pub fn random_u64() -> io::Result<u64> {
    let mut bytes = [0u8; 8];
    let mut filled = 0;
    while filled < bytes.len() {
        // SAFETY: the pointer and length describe the unfilled tail of
        // `bytes`, valid for writes.
        let ret = unsafe {
            libc::getrandom(bytes[filled..].as_mut_ptr().cast(), bytes.len() - filled, 0)
        };
        if ret < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        filled += ret as usize;
    }
    Ok(u64::from_ne_bytes(bytes))
}

/// Whether an [`open_unnamed_mode`] error means the file system (or the
/// kernel) cannot make unnamed files, so a named file must do.
pub fn unnamed_unsupported(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
    )
}

/// `fsync(2)` of the directory `dir` (opened `O_DIRECTORY`, so anything
/// else there is refused rather than opened), making a rename in it
/// durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    let dir = c_path(dir)?;
    // SAFETY: dir is NUL-terminated; no mode argument without O_CREAT.
    let fd = unsafe {
        libc::open(
            dir.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor this function owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: fsync takes no pointers.
    if unsafe { libc::fsync(fd.as_raw_fd()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `faccessat(2)` with `AT_EACCESS`: whether this process, with its
/// effective ids, may create files in the directory `dir` (write and
/// search permission; `EROFS` on a read-only file system).
pub fn may_create_in(dir: &Path) -> io::Result<()> {
    let dir = c_path(dir)?;
    // SAFETY: dir is NUL-terminated; faccessat only reads it.
    let ret = unsafe {
        libc::faccessat(
            libc::AT_FDCWD,
            dir.as_ptr(),
            libc::W_OK | libc::X_OK,
            libc::AT_EACCESS,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
