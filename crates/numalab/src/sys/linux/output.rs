//! Output files: written as an unnamed file (or under a random name created
//! exclusively), then renamed over the target by `numalab::files`.

use super::*;

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
