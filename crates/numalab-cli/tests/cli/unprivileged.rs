//! Every subcommand run by an unprivileged local user against files and
//! ring segments another user owns, and root run against links that user
//! planted: nothing of the other user's is read, replaced, removed or
//! changed in mode or owner, and every refusal is a clear error, never a
//! panic. The users are two uids with no account (the kernel needs none).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{is_root, stderr, Scratch};

/// The user whose files are at stake.
const OWNER: u32 = 61_001;
/// The local user trying things.
const INTRUDER: u32 = 61_002;

/// True when this test can act as other users; says why not otherwise
/// (and fails under CI, where the suite runs as root).
fn can_switch_users() -> bool {
    let root = is_root();
    if !root {
        numalab::testing::cannot_check("acting as two other users needs root");
    }
    root
}

/// What the owner's files look like: content, mode, owner.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot(Vec<(PathBuf, Vec<u8>, u32, u32)>);

fn snapshot(paths: &[&Path]) -> Snapshot {
    Snapshot(
        paths
            .iter()
            .map(|p| {
                let meta = std::fs::symlink_metadata(p)
                    .unwrap_or_else(|e| panic!("{} is gone: {e}", p.display()));
                assert!(
                    meta.file_type().is_file(),
                    "{} is no longer a file",
                    p.display()
                );
                (
                    p.to_path_buf(),
                    std::fs::read(p).unwrap(),
                    meta.mode(),
                    meta.uid(),
                )
            })
            .collect(),
    )
}

/// Runs numalab as `uid` (root for 0) with no supplementary groups, through
/// util-linux's setpriv.
/// The other users run a copy of numalab in the shared directory: the
/// build's own may sit under a directory only root can enter (`/root`),
/// and numalab must reach itself to start ring workers.
fn as_user(uid: u32, dir: &Path, args: &[&str]) -> Output {
    let exe = dir.join("numalab");
    if !exe.exists() {
        std::fs::copy(env!("CARGO_BIN_EXE_numalab"), &exe).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut cmd = if uid == 0 {
        Command::new(&exe)
    } else {
        let mut cmd = Command::new("setpriv");
        cmd.arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"))
            .arg("--clear-groups")
            .arg("--")
            .arg(&exe);
        cmd
    };
    cmd.args(args).current_dir(dir).env("HOME", dir);
    cmd.output()
        .expect("numalab runs (setpriv is util-linux's)")
}

/// A refusal or a success, but never a crash, and a refusal says so.
fn clean(args: &[&str], out: &Output) {
    let err = stderr(out);
    assert!(
        !err.contains("panicked"),
        "numalab {args:?} panicked: {err}"
    );
    assert_ne!(out.status.code(), Some(101), "numalab {args:?}: {err}");
    assert!(
        out.status.code().is_some(),
        "numalab {args:?} died by a signal: {err}"
    );
    if !out.status.success() {
        assert!(
            err.contains("numalab: error:"),
            "numalab {args:?} failed without an error: {err}"
        );
    }
}

fn refused(args: &[&str], out: &Output, why: &str) {
    clean(args, out);
    assert!(
        !out.status.success(),
        "numalab {args:?} succeeded; expected a refusal"
    );
    let err = stderr(out).to_lowercase();
    assert!(
        err.contains(why),
        "numalab {args:?}: expected {why:?} in {err}"
    );
}

#[test]
fn another_users_files_and_segments_survive_every_subcommand() {
    if !can_switch_users() {
        return;
    }
    let scratch = Scratch::new("unprivileged");
    let dir = scratch.0.clone();
    // A shared directory like /tmp: everyone may create, nobody may replace
    // or remove another user's files.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let own = |path: &Path, mode: u32| {
        std::os::unix::fs::chown(path, Some(OWNER), Some(OWNER)).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    let topo = as_user(0, &dir, &["topo", "--json"]);
    assert!(topo.status.success(), "{}", stderr(&topo));
    // A private result, a shared one and the figure drawn from it, a
    // private experiment file, a directory only the owner writes to.
    let private = dir.join("private.json");
    std::fs::write(&private, &topo.stdout).unwrap();
    own(&private, 0o600);
    let shared = dir.join("shared.json");
    std::fs::write(&shared, &topo.stdout).unwrap();
    own(&shared, 0o644);
    let figure = dir.join("shared.svg");
    std::fs::write(&figure, "<svg/>").unwrap();
    own(&figure, 0o644);
    let experiment = dir.join("private.toml");
    std::fs::write(&experiment, "name = \"secret\"\n[access]\nops = 1000\n").unwrap();
    own(&experiment, 0o600);
    let owner_dir = dir.join("owner");
    std::fs::create_dir(&owner_dir).unwrap();
    own(&owner_dir, 0o755);
    let segment = PathBuf::from(format!(
        "/dev/shm/numalab-ring.owned-elsewhere-{}",
        std::process::id()
    ));
    std::fs::write(&segment, vec![0u8; 4096]).unwrap();
    let _segment = Removed(segment.clone());
    own(&segment, 0o600);
    // The intruder's own, harmless experiment.
    let tiny = dir.join("tiny.toml");
    std::fs::write(
        &tiny,
        "name = \"tiny\"\n[memory]\nsize = \"1MiB\"\n[access]\nops = 1000\n[run]\nrepeats = 1\nwarmup = 0\n",
    )
    .unwrap();
    std::fs::set_permissions(&tiny, std::fs::Permissions::from_mode(0o644)).unwrap();
    let owner_files = [
        private.as_path(),
        shared.as_path(),
        figure.as_path(),
        experiment.as_path(),
        segment.as_path(),
    ];
    let before = snapshot(&owner_files);

    let private_s = private.to_str().unwrap();
    let segment_name = segment
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .trim_start_matches("numalab-ring.")
        .to_owned();
    let denied = "permission denied";
    // Reading what the intruder may not read.
    for args in [
        &["topo", "--xml", private_s][..],
        &["run", experiment.to_str().unwrap()],
        &["sweep", experiment.to_str().unwrap()],
        &["plot", private_s],
    ] {
        refused(args, &as_user(INTRUDER, &dir, args), denied);
    }
    // Replacing what the intruder may not replace: refused before anything
    // is measured or started.
    for args in [
        &["topo", "-o", private_s][..],
        &["exec", "-o", private_s, "--", "true"],
        &["fill", "--size", "1M", "-o", private_s],
        &["matrix", "--quick", "-o", private_s],
        &["run", "tiny.toml", "-o", private_s],
        &["sweep", "tiny.toml", "-o", private_s],
        &["report", "--quick", "-o", private_s],
        &[
            "ring",
            "--volume",
            "8M",
            "--block-size",
            "1M",
            "-o",
            private_s,
        ],
        &["topo", "-o", "owner/new.json"],
        // The figure beside the shared result belongs to its owner.
        &["plot", "shared.json"],
    ] {
        let out = as_user(INTRUDER, &dir, args);
        clean(args, &out);
        assert!(
            !out.status.success(),
            "numalab {args:?} replaced the owner's file"
        );
    }
    // Removing the owner's ring segment.
    let args = ["ring", "--cleanup", &segment_name];
    let out = as_user(INTRUDER, &dir, &args);
    clean(&args, &out);
    assert!(
        !out.status.success(),
        "the intruder removed another user's segment"
    );
    let args = ["ring", "--cleanup", &segment_name, "--force"];
    clean(&args, &as_user(INTRUDER, &dir, &args));
    // Listing segments works with a segment it cannot open among them.
    let args = ["ring", "--list"];
    let out = as_user(INTRUDER, &dir, &args);
    clean(&args, &out);
    assert!(out.status.success(), "ring --list: {}", stderr(&out));
    // What the intruder may do, it can: its own results, its own ring.
    for args in [
        &["topo", "-o", "mine.json"][..],
        &["exec", "--", "true"],
        &["run", "tiny.toml", "--json"],
        &[
            "ring",
            "--volume",
            "8M",
            "--block-size",
            "1M",
            "--blocks",
            "4",
        ],
    ] {
        let out = as_user(INTRUDER, &dir, args);
        clean(args, &out);
        assert!(out.status.success(), "numalab {args:?}: {}", stderr(&out));
    }
    let mine = std::fs::metadata(dir.join("mine.json")).unwrap();
    assert_eq!(
        mine.uid(),
        INTRUDER,
        "the intruder's result is the intruder's"
    );

    // Root writing where the intruder planted links: the link is refused,
    // not followed, and the owner's file is untouched.
    let trap = dir.join("trap.json");
    std::os::unix::fs::symlink(&private, &trap).unwrap();
    std::os::unix::fs::lchown(&trap, Some(INTRUDER), Some(INTRUDER)).unwrap();
    let args = ["topo", "-o", "trap.json"];
    let out = as_user(0, &dir, &args);
    clean(&args, &out);
    assert!(
        !out.status.success(),
        "root wrote through a link the intruder planted"
    );
    assert!(std::fs::symlink_metadata(&trap)
        .unwrap()
        .file_type()
        .is_symlink());

    assert_eq!(snapshot(&owner_files), before, "the owner's files changed");
}

/// A file outside the scratch directory, removed however the test ends.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
