//! Tells `numalab --version` whether the sources it was built from had
//! uncommitted changes: `numalab 0.2.0+3f2c1a9b7d4e.dirty`. (The commit
//! itself comes from the numalab crate's own build script.)
//!
//! The sources are watched so that the answer follows every edit: the
//! workspace's crates, its manifest and lock file, and git's index for
//! what is staged. Only this crate is rebuilt when they change.

use std::process::Command;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(&dir)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .map(|text| text.trim().to_owned())
            .filter(|text| !text.is_empty())
    };
    let tracked = git(&["ls-files", "--error-unmatch", "build.rs"]).is_some();
    let mut dirty = false;
    if tracked {
        if let Some(top) = git(&["rev-parse", "--show-toplevel"]) {
            for path in ["crates", "Cargo.toml", "Cargo.lock"] {
                println!("cargo:rerun-if-changed={top}/{path}");
            }
        }
        for path in ["index", "HEAD"] {
            if let Some(file) = git(&["rev-parse", "--git-path", path]) {
                println!("cargo:rerun-if-changed={file}");
            }
        }
        dirty = Command::new("git")
            .args(["diff-index", "--quiet", "HEAD", "--"])
            .current_dir(&dir)
            .status()
            .is_ok_and(|s| s.code() == Some(1));
    } else {
        println!("cargo:rerun-if-changed=build.rs");
    }
    println!("cargo:rerun-if-env-changed=NUMALAB_BUILD");
    let packaged = std::env::var("NUMALAB_BUILD").is_ok_and(|b| !b.is_empty());
    let suffix = if dirty && !packaged { ".dirty" } else { "" };
    println!("cargo:rustc-env=NUMALAB_DIRTY={suffix}");
}
