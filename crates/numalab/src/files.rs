//! Reading and writing the files a user names, safely for a tool that
//! often runs as root on a shared machine.
//!
//! Reading: every read is bounded by a limit the error states, and nothing
//! but a regular file (or a pipe, for `<(command)`) is read, so
//! `/dev/zero`, a terminal or a FIFO nobody writes to cannot exhaust memory
//! or hang numalab.
//!
//! Writing ([`write_output`]): only regular files are written, each
//! replaced whole. The new contents go to an unnamed file in the target's
//! directory (or, where the file system cannot make one, to a new file
//! under an unpredictable name, created exclusively without following
//! links), take the mode (and, for root, the owner) of the file they
//! replace, and are renamed over it: a reader sees the old file or the new
//! one, never half of one; a failure leaves nothing behind; a symbolic
//! link, a device (`/dev/null`), a FIFO or a directory at the target is
//! refused, never followed or replaced. [`check_output`] makes the same
//! checks without writing, so a command can refuse a bad target before it
//! spends minutes measuring.
//!
//! ```
//! use numalab::files::{read_input_text, InputError};
//!
//! let err = read_input_text("/dev/zero".as_ref(), 1 << 20).unwrap_err();
//! assert!(matches!(err, InputError::NotAFile { .. }));
//! assert!(err.to_string().contains("character device"));
//! ```

use std::fs::{File, Metadata};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::sys::linux;

/// Why a file could not be read.
///
/// ```
/// use numalab::files::{read_input, InputError};
///
/// let err = read_input("/nonexistent/r.json".as_ref(), 1024).unwrap_err();
/// assert!(matches!(err, InputError::Open { .. }));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// The file could not be opened (missing, not permitted, a loop).
    #[error("cannot open {}: {source}", path.display())]
    Open {
        /// The file named.
        path: PathBuf,
        /// What the kernel said.
        source: io::Error,
    },
    /// The path names something other than a regular file or a pipe.
    #[error("{} is a {kind}, not a file numalab can read", path.display())]
    NotAFile {
        /// The file named.
        path: PathBuf,
        /// What it is: "directory", "character device", ...
        kind: &'static str,
    },
    /// The file holds more than the limit for its kind of input.
    #[error("{} is larger than {}, the limit for {what}", path.display(), human(*limit))]
    TooLarge {
        /// The file named.
        path: PathBuf,
        /// The limit, in bytes.
        limit: u64,
        /// What kind of input was expected, e.g. "an experiment file".
        what: &'static str,
    },
    /// The file is not UTF-8 text.
    #[error("{} is not UTF-8 text (invalid byte at offset {offset})", path.display())]
    NotUtf8 {
        /// The file named.
        path: PathBuf,
        /// The offset of the first invalid byte.
        offset: usize,
    },
    /// Reading failed part-way.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file named.
        path: PathBuf,
        /// What the kernel said.
        source: io::Error,
    },
}

/// Reads at most `limit` bytes of `path`, a regular file or a pipe; more
/// than `limit` bytes is an error ([`InputError::TooLarge`]), as is a
/// directory, a device or a socket. Symbolic links are followed, as `cat`
/// does: the user named the path. `what` names the input in the error.
///
/// ```
/// use numalab::files::read_input_limited;
///
/// let dir = std::env::temp_dir().join(format!("numalab-doc-files-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("big.toml");
/// std::fs::write(&path, vec![b'#'; 2048]).unwrap();
/// let err = read_input_limited(&path, 1024, "an experiment file").unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     format!("{} is larger than 1 KiB, the limit for an experiment file", path.display())
/// );
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn read_input_limited(
    path: &Path,
    limit: u64,
    what: &'static str,
) -> Result<Vec<u8>, InputError> {
    read_input_at(None, path, limit, what).map(|input| input.bytes)
}

/// A file read by [`read_input_at`]: its bytes, and which file they are.
///
/// ```
/// use numalab::files::{read_input_at, TreeDir};
/// let dir = std::env::temp_dir().join(format!("numalab-doc-input-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// std::fs::write(dir.join("a.json"), b"{}")?;
/// std::fs::hard_link(dir.join("a.json"), dir.join("b.json"))?;
/// let held = TreeDir::open(&dir)?;
/// let a = read_input_at(Some(&held), "a.json".as_ref(), 1024, "a report")?;
/// let b = read_input_at(Some(&held), "b.json".as_ref(), 1024, "a report")?;
/// std::fs::remove_dir_all(&dir)?;
/// assert_eq!(a.bytes, b"{}");
/// assert_eq!(a.id, b.id, "two names of one file");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputFile {
    /// Everything it held (at most the limit).
    pub bytes: Vec<u8>,
    /// Its device and inode, from the descriptor it was read through: two
    /// names of one file (hard links) have the same.
    pub id: (u64, u64),
}

/// [`read_input_limited`] of a file named by the user (`at` none: a link
/// followed, a pipe read) or of the entry `path` of a directory a walk
/// holds (`at`): opened from the directory's descriptor, never through a
/// symbolic link (one there is [`InputError::NotAFile`] `"symbolic
/// link"`), and only a regular file read. The kind is checked on the
/// descriptor that is then read, so nothing swapped in at the name
/// meanwhile is opened. Also says which file was read ([`InputFile::id`]).
///
/// ```
/// use numalab::files::{read_input_at, InputError, TreeDir};
///
/// let dir = std::env::temp_dir().join(format!("numalab-doc-input-at-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// std::fs::write(dir.join("r.json"), "{}")?;
/// std::os::unix::fs::symlink("/etc/hostname", dir.join("link.json"))?;
/// let held = TreeDir::open(&dir)?;
/// let read = read_input_at(Some(&held), "r.json".as_ref(), 1024, "a report file").unwrap();
/// assert_eq!(read.bytes, b"{}");
/// let err = read_input_at(Some(&held), "link.json".as_ref(), 1024, "a report file").unwrap_err();
/// assert!(matches!(err, InputError::NotAFile { kind: "symbolic link", .. }));
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn read_input_at(
    at: Option<&TreeDir>,
    path: &Path,
    limit: u64,
    what: &'static str,
) -> Result<InputFile, InputError> {
    use std::os::fd::AsFd;
    let open_err = |source| InputError::Open {
        path: path.to_owned(),
        source,
    };
    let read_err = |source| InputError::Read {
        path: path.to_owned(),
        source,
    };
    let named =
        linux::open_path_at(at.map(|dir| dir.as_fd()), path, at.is_none()).map_err(open_err)?;
    let stat = linux::stat_fd(&named).map_err(read_err)?;
    let fifo = stat.mode & libc::S_IFMT == libc::S_IFIFO && at.is_none();
    if !stat.regular && !fifo {
        return Err(InputError::NotAFile {
            path: path.to_owned(),
            kind: kind_of(stat.mode),
        });
    }
    // A regular file says its size: one past the limit is refused before
    // a byte is read (a pipe, or a file growing meanwhile, is bounded by
    // the read below).
    if stat.regular && stat.size > limit {
        return Err(InputError::TooLarge {
            path: path.to_owned(),
            limit,
            what,
        });
    }
    let file = File::from(linux::reopen_read(named.as_fd(), false).map_err(open_err)?);
    if fifo {
        // A pipe with no writer reads as end of file: no hang.
        linux::set_blocking(&file).map_err(read_err)?;
    }
    let mut bytes = Vec::new();
    (&file)
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > limit {
        return Err(InputError::TooLarge {
            path: path.to_owned(),
            limit,
            what,
        });
    }
    Ok(InputFile { bytes, id: stat.id })
}

/// [`read_input_limited`] for an unnamed kind of input.
///
/// ```
/// let bytes = numalab::files::read_input("/proc/self/stat".as_ref(), 1 << 20).unwrap();
/// assert!(!bytes.is_empty());
/// ```
pub fn read_input(path: &Path, limit: u64) -> Result<Vec<u8>, InputError> {
    read_input_limited(path, limit, "this input")
}

/// [`read_input`] of UTF-8 text.
///
/// ```
/// let text = numalab::files::read_input_text("/proc/self/status".as_ref(), 1 << 20).unwrap();
/// assert!(text.starts_with("Name:"));
/// ```
pub fn read_input_text(path: &Path, limit: u64) -> Result<String, InputError> {
    read_text_limited(path, limit, "this input")
}

/// [`read_input_limited`] of UTF-8 text.
///
/// ```
/// let text = numalab::files::read_text_limited("/proc/self/status".as_ref(), 1 << 20, "a status file").unwrap();
/// assert!(text.contains("Pid:"));
/// ```
pub fn read_text_limited(
    path: &Path,
    limit: u64,
    what: &'static str,
) -> Result<String, InputError> {
    let bytes = read_input_limited(path, limit, what)?;
    String::from_utf8(bytes).map_err(|e| InputError::NotUtf8 {
        path: path.to_owned(),
        offset: e.utf8_error().valid_up_to(),
    })
}

/// Why an output file could not be written (or would not be, for
/// [`check_output`]).
///
/// ```
/// use numalab::files::{check_output, OutputError};
///
/// let err = check_output("/dev/null".as_ref()).unwrap_err();
/// assert!(matches!(err, OutputError::NotAFile { kind: "character device", .. }));
/// let err = check_output("/nonexistent/r.json".as_ref()).unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "cannot write /nonexistent/r.json: directory /nonexistent does not exist"
/// );
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// The path names no file: empty, `/`, `..`, or ending in `/`.
    #[error("{:?} names no file to write", path.display().to_string())]
    NoFileName {
        /// The path named.
        path: PathBuf,
    },
    /// The directory the file would be in does not exist.
    #[error("cannot write {}: directory {} does not exist", path.display(), dir.display())]
    NoDirectory {
        /// The file named.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
    },
    /// What would be the file's directory is something else.
    #[error("cannot write {}: {} is not a directory", path.display(), dir.display())]
    NotADirectory {
        /// The file named.
        path: PathBuf,
        /// What should be its directory.
        dir: PathBuf,
    },
    /// numalab may not create files in the directory (permissions, a
    /// read-only file system).
    #[error("cannot write {}: cannot create files in {}: {source}", path.display(), dir.display())]
    DirectoryNotWritable {
        /// The file named.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
        /// What the kernel said.
        source: io::Error,
    },
    /// The path names something other than a regular file: numalab
    /// neither follows nor replaces it.
    #[error("{} is a {kind}: numalab writes only regular files", path.display())]
    NotAFile {
        /// The file named.
        path: PathBuf,
        /// What it is: "symbolic link", "character device", "FIFO", ...
        kind: &'static str,
    },
    /// The path or its directory could not be looked at (not permitted,
    /// a loop, ...).
    #[error("cannot write {}: {source}", path.display())]
    Inspect {
        /// The file named.
        path: PathBuf,
        /// What the kernel said.
        source: io::Error,
    },
    /// Writing or renaming into place failed; nothing was left behind.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file named.
        path: PathBuf,
        /// What the kernel said.
        source: io::Error,
    },
}

/// An output path that [`check_output`] found writable: its directory
/// exists and takes new files, and nothing but a regular file (or
/// nothing) is at the path.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("numalab-doc-target-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let target = numalab::files::check_output(&dir.join("r.json")).unwrap();
/// assert!(!target.exists());
/// assert_eq!(target.path(), dir.join("r.json"));
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct OutputTarget {
    path: PathBuf,
    dir: PathBuf,
    existing: Option<Metadata>,
}

impl OutputTarget {
    /// The path named.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a regular file is there now (and would be replaced).
    pub fn exists(&self) -> bool {
        self.existing.is_some()
    }
}

/// A directory held open by a walk that must stay inside its tree
/// whatever another user does meanwhile: each level is opened from the
/// descriptor of the one above it, never through a path and never through
/// a link ([`open_child`](Self::open_child)), so a directory renamed or
/// swapped for a link during the walk cannot lead it out of the tree;
/// files are opened from it the same way
/// ([`pagecache::open_for_cache_at`](crate::pagecache::open_for_cache_at)).
///
/// ```
/// use numalab::files::TreeDir;
/// let dir = std::env::temp_dir().join(format!("numalab-treedir-doc-{}", std::process::id()));
/// std::fs::create_dir_all(dir.join("sub"))?;
/// std::os::unix::fs::symlink("/dev", dir.join("link"))?;
/// let root = TreeDir::open(&dir)?;
/// let names: Vec<_> = root.entries()?.map(|e| e.map(|e| e.file_name())).collect::<Result<_, _>>()?;
/// assert_eq!(names.len(), 2);
/// assert!(root.open_child("sub".as_ref())?.is_some());
/// assert!(root.open_child("link".as_ref())?.is_none(), "a link is not followed");
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct TreeDir {
    fd: std::os::fd::OwnedFd,
    id: (u64, u64),
}

impl TreeDir {
    /// The walk's root, as the user named it (a link there is followed,
    /// as `find -H` does).
    pub fn open(path: &Path) -> io::Result<TreeDir> {
        TreeDir::held(linux::open_dir_at(None, path, true)?)
    }

    /// The directory `name` inside this one; `None` when a symbolic link
    /// is there (it is not followed); an error when anything else but a
    /// directory is.
    pub fn open_child(&self, name: &Path) -> io::Result<Option<TreeDir>> {
        use std::os::fd::AsFd;
        linux::open_child_dir(self.fd.as_fd(), name)?
            .map(TreeDir::held)
            .transpose()
    }

    fn held(fd: std::os::fd::OwnedFd) -> io::Result<TreeDir> {
        let id = linux::stat_fd(&fd)?.id;
        Ok(TreeDir { fd, id })
    }

    /// Device and inode: a walk that has seen it once need not list it
    /// again (a bind mount of a directory inside itself cannot loop).
    pub fn id(&self) -> (u64, u64) {
        self.id
    }

    /// Its entries, read through the descriptor held (not its path).
    pub fn entries(&self) -> io::Result<std::fs::ReadDir> {
        use std::os::fd::AsRawFd;
        std::fs::read_dir(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }
}

impl std::os::fd::AsFd for TreeDir {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// What a file of mode `mode` (its `st_mode`) is called in messages:
/// `regular file`, `directory`, `FIFO`, `character device`, ….
pub(crate) fn kind_of(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFREG => "regular file",
        libc::S_IFDIR => "directory",
        libc::S_IFIFO => "FIFO",
        libc::S_IFCHR => "character device",
        libc::S_IFBLK => "block device",
        libc::S_IFSOCK => "socket",
        libc::S_IFLNK => "symbolic link",
        _ => "special file",
    }
}

/// [`kind_of`] anything but a regular file; `None` for one.
pub(crate) fn special_kind(mode: u32) -> Option<&'static str> {
    (mode & libc::S_IFMT != libc::S_IFREG).then(|| kind_of(mode))
}

/// Checks that `path` can be written by [`write_output`]: its directory
/// exists and numalab may create files in it, and the path is free or a
/// regular file (not a symbolic link, a device, a FIFO, a socket or a
/// directory). Nothing is created.
///
/// ```
/// use numalab::files::{check_output, OutputError};
///
/// // `-o /dev/stdout` is a symbolic link, `/dev/null` a device: refused.
/// for (path, kind) in [("/dev/stdout", "symbolic link"), ("/dev/null", "character device")] {
///     match check_output(path.as_ref()) {
///         Err(OutputError::NotAFile { kind: found, .. }) => assert_eq!(found, kind),
///         other => panic!("{path}: {other:?}"),
///     }
/// }
/// assert!(matches!(check_output("/".as_ref()), Err(OutputError::NoFileName { .. })));
/// ```
pub fn check_output(path: &Path) -> Result<OutputTarget, OutputError> {
    let bytes = path.as_os_str().as_bytes();
    let no_name = || OutputError::NoFileName {
        path: path.to_owned(),
    };
    if bytes.is_empty() || bytes.ends_with(b"/") {
        return Err(no_name());
    }
    if path.file_name().is_none() {
        return Err(no_name());
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    match std::fs::metadata(&dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(OutputError::NotADirectory {
                path: path.to_owned(),
                dir,
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(OutputError::NoDirectory {
                path: path.to_owned(),
                dir,
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
            return Err(OutputError::NotADirectory {
                path: path.to_owned(),
                dir,
            })
        }
        Err(source) => {
            return Err(OutputError::Inspect {
                path: path.to_owned(),
                source,
            })
        }
    }
    if let Err(source) = linux::may_create_in(&dir) {
        return Err(OutputError::DirectoryNotWritable {
            path: path.to_owned(),
            dir,
            source,
        });
    }
    let existing = match std::fs::symlink_metadata(path) {
        Ok(meta) => match special_kind(meta.mode()) {
            None => Some(meta),
            Some(kind) => {
                return Err(OutputError::NotAFile {
                    path: path.to_owned(),
                    kind,
                })
            }
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(OutputError::Inspect {
                path: path.to_owned(),
                source,
            })
        }
    };
    Ok(OutputTarget {
        path: path.to_owned(),
        dir,
        existing,
    })
}

/// Permission bits of a new output file, before the umask: as `cp` or a
/// shell's `>` would give, less group and other write.
const NEW_FILE_MODE: u32 = 0o644;

/// How many unpredictable names are tried before giving up on `EEXIST`.
const NAME_TRIES: usize = 16;

/// Replaces the file at `path` with `bytes`, or creates it, after the
/// checks of [`check_output`].
///
/// The bytes are written to an unnamed file in the target's directory
/// (`O_TMPFILE`; where the file system has none, a new file under an
/// unpredictable name, created exclusively and without following links).
/// A replacement is owner-only until it is complete, then gets the mode of
/// the file it replaces (and, when numalab runs as root, its owner and
/// group); a new file has mode 0644 less the umask. The file is flushed to
/// disk, named under an unpredictable name and renamed over the target,
/// which is looked at once more just before: a symbolic link or a device
/// put there meanwhile is refused. The rename replaces a name and never
/// follows a link. On any failure nothing is left behind and the old file
/// is untouched.
///
/// ```
/// use std::os::unix::fs::PermissionsExt;
/// use numalab::files::write_output;
///
/// let dir = std::env::temp_dir().join(format!("numalab-doc-write-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("r.json");
/// std::fs::write(&path, "old").unwrap();
/// std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
///
/// write_output(&path, b"{}\n").unwrap();
/// assert_eq!(std::fs::read(&path).unwrap(), b"{}\n");
/// let mode = std::fs::metadata(&path).unwrap().permissions().mode();
/// assert_eq!(mode & 0o777, 0o600, "the replaced file's mode is kept");
/// assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "nothing else is left");
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn write_output(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    let target = check_output(path)?;
    let write_err = |source| OutputError::Write {
        path: path.to_owned(),
        source,
    };
    let staged = stage(&target, bytes).map_err(write_err)?;
    // Looked at once more: what is there now is what the rename replaces.
    let result = match check_output(path) {
        Ok(_) => std::fs::rename(&staged, path).map_err(write_err),
        Err(err) => Err(err),
    };
    if result.is_err() {
        let _ = linux::unlink(&staged);
    } else {
        // The rename itself made durable; a failure here loses nothing.
        let _ = linux::sync_dir(&target.dir);
    }
    result
}

/// Writes `bytes` into a new file in the target's directory, complete with
/// its final mode and owner, and returns the unpredictable name it has.
fn stage(target: &OutputTarget, bytes: &[u8]) -> io::Result<PathBuf> {
    // A replacement is owner-only until it has the old file's mode; a new
    // file has its final mode (the kernel applies the umask) from the start.
    let create_mode = if target.existing.is_some() {
        0o600
    } else {
        NEW_FILE_MODE
    };
    match linux::open_unnamed_mode(&target.dir, create_mode) {
        Ok(fd) => {
            let file = File::from(fd);
            fill(&file, target, bytes)?;
            let fd = std::os::fd::OwnedFd::from(file);
            let mut tries = 0;
            loop {
                let name = random_name(&target.dir)?;
                match linux::link_fd(&fd, &name) {
                    Ok(()) => return Ok(name),
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < NAME_TRIES => {
                        tries += 1;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Err(e) if linux::unnamed_unsupported(&e) => stage_named(target, bytes, create_mode),
        Err(e) => Err(e),
    }
}

/// [`stage`] where the file system cannot make unnamed files: a new file
/// under an unpredictable name, created exclusively without following
/// links, removed again if anything fails.
fn stage_named(target: &OutputTarget, bytes: &[u8], create_mode: u32) -> io::Result<PathBuf> {
    let (name, file) = create_unpredictable(&target.dir, create_mode)?;
    match fill(&file, target, bytes) {
        Ok(()) => Ok(name),
        Err(e) => {
            let _ = linux::unlink(&name);
            Err(e)
        }
    }
}

/// Writes the contents, gives the file the replaced file's owner (as root)
/// and mode, and flushes it to disk.
fn fill(mut file: &File, target: &OutputTarget, bytes: &[u8]) -> io::Result<()> {
    file.write_all(bytes)?;
    if let Some(old) = &target.existing {
        if linux::effective_uid() == 0 {
            std::os::unix::fs::fchown(file, Some(old.uid()), Some(old.gid()))?;
        } else if old.gid() != file.metadata()?.gid() {
            // A member of the old file's group keeps it; anyone else gets
            // their own group, as for any new file.
            let _ = std::os::unix::fs::fchown(file, None, Some(old.gid()));
        }
        file.set_permissions(std::fs::Permissions::from_mode(old.mode() & 0o777))?;
    }
    file.sync_all()
}

/// A directory held open to write files into: whatever happens to its
/// name afterwards (renamed, swapped for a link to somewhere else), the
/// files go into the directory that was opened. For a directory numalab
/// chooses and fills with many files (`numalab fleet --html`'s host
/// pages), where another user renaming things in its parent must not lead
/// root's writes elsewhere.
///
/// ```
/// use numalab::files::OutputDir;
///
/// let base = std::env::temp_dir().join(format!("numalab-doc-outdir-{}", std::process::id()));
/// let (pages, elsewhere) = (base.join("pages"), base.join("elsewhere"));
/// std::fs::create_dir_all(&elsewhere)?;
/// let dir = OutputDir::open_or_create(&pages)?;
/// // Meanwhile the name is swapped for a link to another directory...
/// std::fs::rename(&pages, base.join("moved"))?;
/// std::os::unix::fs::symlink(&elsewhere, &pages)?;
/// dir.write("a.html", b"<p>a</p>")?;
/// // ...and the page still goes into the directory that was opened.
/// assert_eq!(std::fs::read(base.join("moved/a.html"))?, b"<p>a</p>");
/// assert_eq!(std::fs::read_dir(&elsewhere)?.count(), 0);
/// // A link where the directory should be is refused, not followed.
/// assert!(OutputDir::open_or_create(&pages).is_err());
/// std::fs::remove_dir_all(&base)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct OutputDir {
    fd: std::os::fd::OwnedFd,
    path: PathBuf,
}

impl OutputDir {
    /// Opens the directory `path`, making it first (mode 0777 less the
    /// umask) when nothing is there; a symbolic link there (or at the
    /// moment it is opened) is refused, never followed.
    pub fn open_or_create(path: &Path) -> Result<OutputDir, OutputError> {
        let inspect = |source| OutputError::Inspect {
            path: path.to_owned(),
            source,
        };
        match std::fs::create_dir(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(source) => return Err(inspect(source)),
        }
        match linux::open_dir_at(None, path, false) {
            Ok(fd) => Ok(OutputDir {
                fd,
                path: path.to_owned(),
            }),
            // Not opened as a directory: a link (not followed), a file, or
            // something else, said by what it is.
            Err(source) => match std::fs::symlink_metadata(path) {
                Ok(meta) if !meta.is_dir() => Err(match special_kind(meta.mode()) {
                    Some(kind) => OutputError::NotAFile {
                        path: path.to_owned(),
                        kind,
                    },
                    None => OutputError::NotADirectory {
                        path: path.to_owned(),
                        dir: path.to_owned(),
                    },
                }),
                _ => Err(inspect(source)),
            },
        }
    }

    /// The path it was opened by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `name` (a file name, no `/`) in the directory held, as
    /// [`write_output`] writes a path: atomically, never over a link or
    /// a special file. Errors name the file by the directory's path.
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<(), OutputError> {
        let shown = self.path.join(name);
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(OutputError::NoFileName { path: shown });
        }
        use std::os::fd::AsRawFd;
        // The held directory by its descriptor: /proc/self/fd/N names the
        // directory opened, not whatever has its name now.
        let held = PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()));
        write_output(&held.join(name), bytes).map_err(|err| err.shown_as(&shown, &self.path))
    }
}

impl OutputError {
    /// The same error naming `path` in `dir` (what the user knows them
    /// by) instead of the paths it was made with.
    fn shown_as(self, path: &Path, dir: &Path) -> OutputError {
        let (path, dir) = (path.to_owned(), dir.to_owned());
        match self {
            OutputError::NoFileName { .. } => OutputError::NoFileName { path },
            OutputError::NoDirectory { .. } => OutputError::NoDirectory { path, dir },
            OutputError::NotADirectory { .. } => OutputError::NotADirectory { path, dir },
            OutputError::DirectoryNotWritable { source, .. } => {
                OutputError::DirectoryNotWritable { path, dir, source }
            }
            OutputError::NotAFile { kind, .. } => OutputError::NotAFile { path, kind },
            OutputError::Inspect { source, .. } => OutputError::Inspect { path, source },
            OutputError::Write { source, .. } => OutputError::Write { path, source },
        }
    }
}

/// Bytes an unprivileged process can still write on the file system
/// holding `path` (`statvfs(2)`).
///
/// ```
/// assert!(numalab::files::available_bytes(&std::env::temp_dir())? > 0);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn available_bytes(path: &Path) -> io::Result<u64> {
    linux::fs_available_bytes(path)
}

/// A new, empty file in `dir` that no name reaches, readable and
/// writable, for data a command makes and measures (a file to read
/// through the page cache): an unnamed file (`O_TMPFILE`, mode 0600), or,
/// where the file system cannot make one, a file created exclusively
/// under an unpredictable name without following links and unlinked at
/// once. Either way the kernel frees it when the last descriptor closes,
/// however numalab ends (Ctrl-C, a panic, `kill -9`): nothing is left in
/// `dir`.
///
/// ```
/// use std::io::{Read, Seek, Write};
/// use std::os::unix::fs::MetadataExt;
/// let dir = std::env::temp_dir();
/// let mut file = numalab::files::scratch_file(&dir)?;
/// file.write_all(b"cached")?;
/// file.rewind()?;
/// let mut back = String::new();
/// file.read_to_string(&mut back)?;
/// assert_eq!(back, "cached");
/// assert_eq!(file.metadata()?.nlink(), 0, "no name reaches it");
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn scratch_file(dir: &Path) -> io::Result<File> {
    match linux::open_unnamed_mode(dir, 0o600) {
        Ok(fd) => Ok(File::from(fd)),
        Err(e) if linux::unnamed_unsupported(&e) => {
            let (name, file) = create_unpredictable(dir, 0o600)?;
            linux::unlink(&name)?;
            Ok(file)
        }
        Err(e) => Err(e),
    }
}

/// A new file in `dir` under an unpredictable name ([`random_name`]),
/// created exclusively without following links (another name is drawn
/// when one is taken, up to [`NAME_TRIES`] times).
fn create_unpredictable(dir: &Path, mode: u32) -> io::Result<(PathBuf, File)> {
    let mut tries = 0;
    loop {
        let name = random_name(dir)?;
        match linux::create_new(&name, mode) {
            Ok(fd) => return Ok((name, File::from(fd))),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < NAME_TRIES => {
                tries += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// `DIR/.numalab-XXXXXXXXXXXXXXXX.tmp`, from the kernel's random generator.
fn random_name(dir: &Path) -> io::Result<PathBuf> {
    Ok(dir.join(format!(".numalab-{:016x}.tmp", linux::random_u64()?)))
}

/// `limit` bytes in the largest whole binary unit: "64 MiB", "1 KiB".
fn human(limit: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut value = limit;
    let mut unit = 0;
    while value >= 1024 && value.is_multiple_of(1024) && unit < UNITS.len() - 1 {
        value /= 1024;
        unit += 1;
    }
    format!("{value} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    #[test]
    fn refuses_devices_and_directories_before_reading() {
        for (path, kind) in [
            ("/dev/zero", "character device"),
            ("/dev/urandom", "character device"),
            ("/dev/null", "character device"),
            ("/", "directory"),
        ] {
            match read_input(path.as_ref(), 1 << 20) {
                Err(InputError::NotAFile { kind: got, .. }) => assert_eq!(got, kind, "{path}"),
                other => panic!("{path}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_fifo_without_a_writer_reads_as_empty_instead_of_hanging() {
        let dir = std::env::temp_dir().join(format!("numalab-files-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("f");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        assert_eq!(read_input(&fifo, 1024).unwrap(), b"");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_limit_is_exact() {
        let dir = std::env::temp_dir().join(format!("numalab-files-limit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        std::fs::write(&path, [b'x'; 100]).unwrap();
        assert_eq!(read_input(&path, 100).unwrap().len(), 100);
        assert!(matches!(
            read_input(&path, 99),
            Err(InputError::TooLarge { limit: 99, .. })
        ));
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        assert!(matches!(
            read_input_text(&path, 100),
            Err(InputError::NotUtf8 { offset: 0, .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A scratch directory for one test.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("numalab-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn output_to_a_device_never_replaces_it() {
        let before = std::fs::symlink_metadata("/dev/null").unwrap();
        assert!(before.file_type().is_char_device());
        match write_output("/dev/null".as_ref(), b"x") {
            Err(OutputError::NotAFile { kind, .. }) => assert_eq!(kind, "character device"),
            other => panic!("{other:?}"),
        }
        let after = std::fs::symlink_metadata("/dev/null").unwrap();
        assert!(after.file_type().is_char_device());
        assert_eq!((after.dev(), after.ino()), (before.dev(), before.ino()));
        assert!(matches!(
            check_output("/dev/stdout".as_ref()),
            Err(OutputError::NotAFile {
                kind: "symbolic link",
                ..
            })
        ));
    }

    #[test]
    fn output_through_a_symlink_is_refused_and_its_target_untouched() {
        let dir = scratch("symlink");
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = dir.join("r.json");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let err = write_output(&link, b"{}").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{} is a symbolic link: numalab writes only regular files",
                link.display()
            )
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(names(&dir), ["r.json", "victim"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn output_keeps_the_replaced_files_mode() {
        let dir = scratch("mode");
        let path = dir.join("r.json");
        std::fs::write(&path, "old").unwrap();
        for mode in [0o600, 0o640, 0o444] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            write_output(&path, format!("{mode:o}").as_bytes()).unwrap();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            assert_eq!(meta.mode() & 0o7777, mode, "{mode:o}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{mode:o}"));
        }
        assert_eq!(names(&dir), ["r.json"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_new_output_file_is_0644_less_the_umask() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let umask = status
            .lines()
            .find_map(|l| l.strip_prefix("Umask:"))
            .map(|v| u32::from_str_radix(v.trim(), 8).unwrap())
            .unwrap();
        let dir = scratch("new");
        let path = dir.join("r.json");
        write_output(&path, b"{}").unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(meta.mode() & 0o7777, 0o644 & !umask);
        assert_eq!(meta.uid(), linux::effective_uid());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn output_as_root_keeps_the_replaced_files_owner() {
        if linux::effective_uid() != 0 {
            crate::testing::cannot_check("not root, cannot give a file to another user");
            return;
        }
        let dir = scratch("owner");
        let path = dir.join("r.json");
        std::fs::write(&path, "old").unwrap();
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        write_output(&path, b"new").unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn output_targets_that_are_not_files_are_refused_by_name() {
        let dir = scratch("kinds");
        let fifo = dir.join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::fs::write(dir.join("file"), "").unwrap();
        let kind = |p: &Path| match check_output(p) {
            Err(OutputError::NotAFile { kind, .. }) => kind.to_string(),
            Err(OutputError::NoFileName { .. }) => "no name".into(),
            Err(OutputError::NoDirectory { .. }) => "no directory".into(),
            Err(OutputError::NotADirectory { .. }) => "not a directory".into(),
            other => format!("{other:?}"),
        };
        assert_eq!(kind(&fifo), "FIFO");
        assert_eq!(kind(&dir.join("sub")), "directory");
        assert_eq!(kind(&dir.join("sub/")), "no name");
        assert_eq!(kind(Path::new("")), "no name");
        assert_eq!(kind(&dir.join("missing/r.json")), "no directory");
        assert_eq!(kind(&dir.join("file/r.json")), "not a directory");
        assert!(check_output(&dir.join("file")).unwrap().exists());
        assert!(!check_output(&dir.join("free")).unwrap().exists());
        let err = write_output(&dir.join("missing/r.json"), b"x").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "cannot write {0}/missing/r.json: directory {0}/missing does not exist",
                dir.display()
            )
        );
        assert_eq!(names(&dir), ["fifo", "file", "sub"]);
        // A directory this process may not create files in (root may
        // create files anywhere but on a read-only file system; the CLI
        // tests check this as another user).
        if linux::effective_uid() != 0 {
            let locked = dir.join("locked");
            std::fs::create_dir(&locked).unwrap();
            std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).unwrap();
            assert!(matches!(
                check_output(&locked.join("r.json")),
                Err(OutputError::DirectoryNotWritable { .. })
            ));
            std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_named_fallback_keeps_the_mode_and_leaves_one_file() {
        let dir = scratch("named");
        let path = dir.join("r.json");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let target = check_output(&path).unwrap();
        let staged = stage_named(&target, b"new", 0o600).unwrap();
        let name = staged.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with(".numalab-") && name.len() == ".numalab-".len() + 16 + 4);
        let meta = std::fs::symlink_metadata(&staged).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(meta.mode() & 0o777, 0o600);
        std::fs::rename(&staged, &path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(names(&dir), ["r.json"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn output_goes_through_no_predictable_name() {
        // Whatever an attacker plants beside the target, the write creates
        // its file exclusively under a name from the kernel's generator.
        let dir = scratch("planted");
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        for name in [
            format!(".r.json.tmp-{}", std::process::id()),
            ".r.json.tmp".to_string(),
            "r.json.tmp".to_string(),
        ] {
            std::os::unix::fs::symlink(&victim, dir.join(name)).unwrap();
        }
        write_output(&dir.join("r.json"), b"{}").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read(dir.join("r.json")).unwrap(), b"{}");
        assert_eq!(names(&dir).len(), 5, "nothing else left: {:?}", names(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn human_limits() {
        assert_eq!(human(64 << 20), "64 MiB");
        assert_eq!(human(1000), "1000 bytes");
        assert_eq!(human(1536), "1536 bytes");
    }
}
