//! Stamps numalab with the build it is, so results and `--version` tell
//! builds apart: the crate's version with the commit it was built from as
//! SemVer build metadata, `0.1.0+3f2c1a9b7d4e`.
//!
//! `NUMALAB_BUILD`, when set, is used as it is (a packager's own id, say
//! `deb.0.1.0-1`; letters, digits, dots and hyphens). Otherwise the
//! commit comes from git, when the crate is built from a git checkout
//! that tracks it; a crate built from a tarball is `0.1.0`. The commit
//! is the one checked out: a build from uncommitted changes carries the
//! commit they started from.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=NUMALAB_BUILD");
    let version = std::env::var("CARGO_PKG_VERSION").expect("cargo sets CARGO_PKG_VERSION");
    let build = match std::env::var("NUMALAB_BUILD") {
        Ok(build) if !build.is_empty() => {
            let fits = build.len() <= 64
                && build.split('.').all(|part| {
                    !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                });
            assert!(
                fits,
                "NUMALAB_BUILD={build:?}: at most 64 letters, digits and hyphens in dot-separated parts (SemVer build metadata)"
            );
            Some(build)
        }
        _ => commit(),
    };
    match build {
        Some(build) => println!("cargo:rustc-env=NUMALAB_VERSION={version}+{build}"),
        None => println!("cargo:rustc-env=NUMALAB_VERSION={version}"),
    }
}

/// The checked-out commit (12 hex digits), when this crate is tracked by
/// the git repository around it; watched so that a new commit rebuilds.
fn commit() -> Option<String> {
    // A tarball unpacked inside another repository is not that
    // repository's build.
    git(&["ls-files", "--error-unmatch", "build.rs"])?;
    for path in ["HEAD", "packed-refs"] {
        if let Some(file) = git(&["rev-parse", "--git-path", path]) {
            if Path::new(&file).exists() {
                println!("cargo:rerun-if-changed={file}");
            }
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(file) = git(&["rev-parse", "--git-path", &branch]) {
            if Path::new(&file).exists() {
                println!("cargo:rerun-if-changed={file}");
            }
        }
    }
    git(&["rev-parse", "--short=12", "HEAD"])
        .filter(|hash| hash.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `git ARGS` in this crate's directory: its trimmed output when it
/// succeeds and says something.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(std::env::var_os("CARGO_MANIFEST_DIR")?)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_owned())
}
