//! What every command shares: help, pipes.

use crate::common::*;
use std::process::Command;

#[test]
fn help_explains_every_command() {
    for cmd in [
        vec!["--help"],
        vec!["topo", "--help"],
        vec!["exec", "--help"],
        vec!["ring", "--help"],
        vec!["matrix", "--help"],
        vec!["report", "--help"],
        vec!["fill", "--help"],
        vec!["fincore", "--help"],
        vec!["pagecache", "--help"],
        vec!["pagecache", "load", "--help"],
    ] {
        let out = numalab(&cmd);
        assert!(out.status.success(), "{cmd:?}");
        assert!(stdout(&out).contains("Usage:"), "{cmd:?}");
    }
    let help = stdout(&numalab(&["exec", "--help"]));
    for flag in [
        "--membind",
        "--interleave",
        "--preferred",
        "--preferred-many",
        "--weighted-interleave",
        "--localalloc",
        "--cpunodebind",
        "--physcpubind",
    ] {
        assert!(help.contains(flag), "{flag} missing from exec --help");
    }
}

#[test]
fn closed_pipe_is_not_an_error() {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(["topo", "--xml"])
        .arg(topologies().join("96em64t-4n4d3ca2co-pci.xml"))
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // stdout is now closed.
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{err}");
}

#[test]
fn version_names_the_commit_it_was_built_from_and_results_carry_it() {
    let out = numalab(&["--version"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let version = text
        .trim()
        .strip_prefix("numalab ")
        .unwrap_or_else(|| panic!("{text}"));
    let (release, build) = version.split_once('+').unwrap_or((version, ""));
    assert_eq!(release, env!("CARGO_PKG_VERSION"));
    // Built from a git checkout (and not given a packager's id): the
    // commit git says is checked out.
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    match (option_env!("NUMALAB_BUILD"), head) {
        (Some(id), _) if !id.is_empty() => assert_eq!(build, id),
        (_, Some(head)) => {
            // `git diff-index` exits 1 when tracked files differ from the
            // commit: a build from them says `.dirty`.
            let dirty = Command::new("git")
                .args(["diff-index", "--quiet", "HEAD", "--"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .is_ok_and(|s| s.code() == Some(1));
            let expected = format!("{head}{}", if dirty { ".dirty" } else { "" });
            assert_eq!(build, expected, "--version: {version}")
        }
        (_, None) => {
            println!("not a git checkout: --version is {version}, with no commit to compare")
        }
    }
    // Every subcommand says the same, and so does every result.
    let sub = numalab(&["topo", "--version"]);
    assert_eq!(
        String::from_utf8(sub.stdout).unwrap(),
        format!("numalab-topo {version}\n")
    );
    let topo = numalab(&["topo", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&topo.stdout).unwrap();
    // Results carry the commit (the library's version), not `.dirty`.
    assert_eq!(doc["numalab_version"], version.trim_end_matches(".dirty"));
}

#[test]
fn every_command_follows_one_exit_status_rule() {
    // docs/exit-status.md: 2 when the command line cannot be read, 1 when
    // numalab refuses what it asks; 125 for both in the commands that run
    // a command; 2 for both in `check`, whose 1 says the host is unhealthy. Each refusal here comes before anything is measured.
    let scratch = Scratch::new("exit-status");
    let missing = scratch.path("missing.toml");
    let cases: [(&[&str], i32); 16] = [
        (&["report", "-o", "/dev/null"], 1),
        (&["topo", "-o", "/dev/null"], 1),
        (&["matrix", "--mem-nodes", "4096"], 1),
        (&["fill", "--cpunodebind", "4096", "--size", "1M"], 1),
        (&["fincore", "-o", "/dev/null", "/etc/hostname"], 1),
        (&["pagecache", "load", "/etc/hostname", "--node", "4096"], 1),
        (&["fleet", &missing], 1),
        (&["run", &missing], 1),
        (&["sweep", &missing], 1),
        (&["plot", &missing], 1),
        (&["ring", "-o", "/dev/null"], 1),
        (&["exec", "-m", "4096", "--", "true"], 125),
        (&["profile", "-o", "/dev/null", "--", "true"], 125),
        (&["advise", "-o", "/dev/null", "--", "true"], 125),
        // A health check's own trouble is 2, never the unhealthy 1.
        (&["check", "--baseline", &missing], 2),
        (&["check", "--baseline", &missing, "-o", "/dev/null"], 2),
    ];
    for (args, refused) in cases {
        let out = numalab(args);
        assert_eq!(
            out.status.code(),
            Some(refused),
            "numalab {}: {}",
            args.join(" "),
            stderr(&out)
        );
        assert!(
            stderr(&out).contains("numalab: error: "),
            "numalab {}: {}",
            args.join(" "),
            stderr(&out)
        );
        let mut typo = vec![args[0], "--no-such-flag"];
        typo.extend(&args[1..]);
        let usage = if refused == 125 { 125 } else { 2 };
        let out = numalab(&typo);
        assert_eq!(
            out.status.code(),
            Some(usage),
            "numalab {}: {}",
            typo.join(" "),
            stderr(&out)
        );
    }
}
