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
