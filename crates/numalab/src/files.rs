//! Reading the files a user names, safely for a tool that often runs as
//! root on a shared machine: every read is bounded by a limit the error
//! states, and nothing but a regular file (or a pipe, for `<(command)`) is
//! read, so `/dev/zero`, a terminal or a FIFO nobody writes to cannot
//! exhaust memory or hang numalab.
//!
//! ```
//! use numalab::files::{read_input_text, InputError};
//!
//! let err = read_input_text("/dev/zero".as_ref(), 1 << 20).unwrap_err();
//! assert!(matches!(err, InputError::NotAFile { .. }));
//! assert!(err.to_string().contains("character device"));
//! ```

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileTypeExt;
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
    let fd = linux::open_input(path, true).map_err(|source| InputError::Open {
        path: path.to_owned(),
        source,
    })?;
    let file = File::from(fd);
    let read_err = |source| InputError::Read {
        path: path.to_owned(),
        source,
    };
    let kind = file.metadata().map_err(read_err)?.file_type();
    let not_a_file = |kind| InputError::NotAFile {
        path: path.to_owned(),
        kind,
    };
    if kind.is_dir() {
        return Err(not_a_file("directory"));
    } else if kind.is_char_device() {
        return Err(not_a_file("character device"));
    } else if kind.is_block_device() {
        return Err(not_a_file("block device"));
    } else if kind.is_socket() {
        return Err(not_a_file("socket"));
    } else if kind.is_fifo() {
        // A pipe with no writer reads as end of file: no hang.
        linux::set_blocking(&std::os::fd::OwnedFd::from(
            file.try_clone().map_err(read_err)?,
        ))
        .map_err(read_err)?;
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > limit {
        return Err(InputError::TooLarge {
            path: path.to_owned(),
            limit,
            what,
        });
    }
    Ok(bytes)
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

    #[test]
    fn human_limits() {
        assert_eq!(human(64 << 20), "64 MiB");
        assert_eq!(human(1000), "1000 bytes");
        assert_eq!(human(1536), "1536 bytes");
    }
}
