//! Shared-memory segments, for the ring: files on tmpfs or hugetlbfs opened
//! without following links, locked with open-file-description locks, mapped
//! shared, and waited on with futexes.

use super::*;

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
