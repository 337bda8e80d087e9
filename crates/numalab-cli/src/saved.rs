//! Saved results read back and written per host: one reader for every
//! saved document (`report --from`, its `--profile`, `fleet`'s host files,
//! `advise --matrix`), each read bounded, and the file `report --out-dir`
//! writes.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use numalab_bench::document::{Document, ReadError, Schema};

use crate::output;

/// The largest result file read back (`numalab plot`, `report --from`): a
/// sweep of a few hundred cells with every thread's figures is a few
/// megabytes.
pub const MAX_RESULT_BYTES: u64 = 256 << 20;

/// Reads a saved document of schema `T` of at most `limit` bytes
/// ([`Document::read`]), naming the file in every error: a report or
/// profile read back ([`MAX_RESULT_BYTES`]), a fleet's host file.
pub fn read_saved<T: Schema + serde::de::DeserializeOwned>(
    path: &Path,
    limit: u64,
    what: &'static str,
) -> Result<T> {
    Document::<T>::read(path, limit, what).map_err(with_hint)
}

/// [`read_saved`] of bytes already read from `path`.
pub fn parse_saved<T: Schema + serde::de::DeserializeOwned>(
    bytes: Vec<u8>,
    path: &Path,
) -> Result<T> {
    Document::<T>::from_bytes(bytes, path).map_err(with_hint)
}

/// The error, with what to give instead when it was a report's page.
fn with_hint(err: ReadError) -> anyhow::Error {
    match err {
        ReadError::Html { path, .. } => anyhow::anyhow!(
            "{} is an HTML page, not a saved result: give the file written with --json (numalab report --json -o r.json), from which --from makes the page again",
            path.display()
        ),
        other => other.into(),
    }
}

/// The file `numalab report --out-dir DIR` writes: `DIR/HOSTNAME.json`.
/// Refused before anything is measured: a DIR that does not exist or is
/// not a directory, a host name that cannot be a file name, a link or
/// anything but a regular file at the path.
pub fn host_file(dir: &Path) -> Result<PathBuf> {
    match std::fs::metadata(dir) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            bail!(
                "--out-dir {}: the directory does not exist; create it first (mkdir -p)",
                dir.display()
            )
        }
        Err(err) => bail!("--out-dir {}: {err}", dir.display()),
        Ok(m) if !m.is_dir() => bail!(
            "--out-dir {}: not a directory; name the directory the reports go to",
            dir.display()
        ),
        Ok(_) => {}
    }
    let host = numalab::system::Host::current().hostname;
    if host.is_empty()
        || host == "."
        || host == ".."
        || host.len() > 255
        || host.contains(['/', '\0'])
    {
        bail!(
            "--out-dir: this host's name {:?} cannot name a file; write with -o FILE instead",
            host
        );
    }
    let path = dir.join(format!("{host}.json"));
    output::check_target(&path)?;
    Ok(path)
}
