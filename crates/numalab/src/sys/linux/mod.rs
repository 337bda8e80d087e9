//! The only place in numalab that makes raw Linux system calls.
//!
//! Everything here is a thin, typed wrapper: arguments go to the kernel as
//! given and errors come back as [`io::Error`] carrying the errno, so the
//! callers can map each errno to an error that says what to do. Constants
//! that `libc` lacks are defined once, below, with the kernel version that
//! introduced them.
//!
//! This file holds memory: policies, binding, mappings and page
//! queries; [`trace`] process tracing, [`relay`] passing signals on,
//! [`segment`] the ring's shared-memory files, locks and futexes, and
//! [`output`] writing output files safely.

use std::ffi::{c_void, CString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

mod output;
mod relay;
mod segment;
mod trace;

pub use output::*;
pub use relay::*;
pub use segment::*;
pub use trace::*;

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

/// `path` as a C string for a system call; an error when it holds a NUL.
fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} contains a NUL byte", path.display()),
        )
    })
}

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

/// `pread(2)` into raw memory: at most `len` bytes of `fd` from `offset`
/// into `dst`; the bytes read, 0 at the end of the file.
///
/// # Safety
/// `[dst, dst + len)` must be writable memory that nothing else accesses
/// during the call.
pub unsafe fn pread_into(
    fd: BorrowedFd<'_>,
    dst: *mut u8,
    len: usize,
    offset: u64,
) -> io::Result<usize> {
    let offset = libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset past the largest file"))?;
    // SAFETY: the caller guarantees the destination is writable and ours.
    let n = unsafe { libc::pread(fd.as_raw_fd(), dst.cast(), len, offset) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
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

/// `PAGEMAP_SCAN` (Linux 6.7): `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: libc::c_ulong = 0xC060_6610;
/// A page that is present (`PAGE_IS_PRESENT`).
const PAGE_IS_PRESENT: u64 = 1 << 3;
/// A page mapped whole by a transparent huge page or a hugetlb page
/// (`PAGE_IS_HUGE`).
const PAGE_IS_HUGE: u64 = 1 << 6;

/// `struct pm_scan_arg` of `<linux/fs.h>`.
#[repr(C)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region` of `<linux/fs.h>`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

/// The stretches of `[start, end)` in this process that present huge
/// pages map whole (transparent huge pages mapped by one page-table entry,
/// or hugetlb pages), from `PAGEMAP_SCAN` on `/proc/self/pagemap`;
/// `None` where the kernel lacks it (before Linux 6.7). Neighbouring huge
/// pages come as one stretch.
pub fn huge_stretches(start: usize, end: usize) -> io::Result<Option<Vec<(usize, usize)>>> {
    let pagemap = std::fs::File::open("/proc/self/pagemap")?;
    let mut regions = [PageRegion::default(); 64];
    let mut stretches = Vec::new();
    let mut from = start as u64;
    while from < end as u64 {
        let mut arg = PmScanArg {
            size: std::mem::size_of::<PmScanArg>() as u64,
            flags: 0,
            start: from,
            end: end as u64,
            walk_end: 0,
            vec: regions.as_mut_ptr() as u64,
            vec_len: regions.len() as u64,
            max_pages: 0,
            category_inverted: 0,
            category_mask: PAGE_IS_PRESENT | PAGE_IS_HUGE,
            category_anyof_mask: 0,
            return_mask: PAGE_IS_HUGE,
        };
        // SAFETY: arg describes `regions`, which the kernel fills with at
        // most vec_len entries; the scan only reads this process's page
        // tables and changes nothing (no write-protect flags are given).
        let found = unsafe { libc::ioctl(pagemap.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
        if found < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::ENOTTY) {
                return Ok(None);
            }
            return Err(err);
        }
        let found = (found as usize).min(regions.len());
        stretches.extend(
            regions[..found]
                .iter()
                .map(|r| (r.start as usize, r.end as usize)),
        );
        // The walk stops early only when `regions` is full.
        if arg.walk_end <= from {
            break;
        }
        from = arg.walk_end;
    }
    Ok(Some(stretches))
}

/// `mlock(2)`.
pub fn mlock(addr: *const u8, len: usize) -> io::Result<()> {
    // SAFETY: locking pages in memory never changes their contents.
    if unsafe { libc::mlock(addr.cast(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
