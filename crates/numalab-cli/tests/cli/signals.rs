//! SIGINT, SIGTERM and SIGHUP for the commands that measure: what was
//! measured is written, and numalab exits 128 + the signal, as a shell
//! reports a command that signal ended.

use crate::common::*;
use serde_json::Value;
use std::process::Command;

/// What a run interrupted by a signal left: its exit status, its result
/// (`Null` if none), its standard error, and the files in its directory.
struct Interrupted {
    code: Option<i32>,
    doc: Value,
    err: String,
    files: Vec<String>,
}

/// Runs a minute-long experiment, sends `signal` once its worker has run
/// a moment, and returns what it left.
fn run_interrupted_by(signal: &str) -> Interrupted {
    let dir = Scratch::new(&format!("signal-{signal}"));
    let exp = dir.path("long.toml");
    std::fs::write(
        &exp,
        "[memory]\nsize = \"4MiB\"\n[access]\nduration = \"60s\"\n[run]\nrepeats = 2\nwarmup = 0\n",
    )
    .unwrap();
    let result = dir.path("r.json");
    let child = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(["run", &exp, "-o", &result])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the pinned worker has measured something: 200 ms of its
    // own CPU time (a pause of wall time failed on a busy host).
    wait_for_worker_cpu(child.id(), std::time::Duration::from_millis(200));
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    let doc = std::fs::read_to_string(&result)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    Interrupted {
        code: out.status.code(),
        doc,
        err: stderr(&out),
        files: dir.files(),
    }
}

#[test]
fn ctrl_c_writes_what_was_measured_marked_interrupted() {
    let Interrupted {
        code,
        doc,
        err,
        files,
    } = run_interrupted_by("INT");
    assert_eq!(code, Some(130), "{err}");
    assert_eq!(doc["interrupted"], true, "{err}");
    assert_eq!(doc["repeats"][0]["interrupted"], true);
    assert!(
        doc["repeats"][0]["ops"].as_u64().unwrap() > 0,
        "what was measured is kept"
    );
    assert_eq!(files, ["long.toml", "r.json"], "no temporary file left");
}

#[test]
fn sigterm_stops_a_run_writes_it_and_exits_143() {
    let Interrupted { code, doc, err, .. } = run_interrupted_by("TERM");
    assert_eq!(code, Some(128 + 15), "{err}");
    assert_eq!(doc["interrupted"], true, "{err}");
}

#[test]
fn sighup_is_treated_like_sigterm_and_exits_129() {
    let Interrupted { code, doc, err, .. } = run_interrupted_by("HUP");
    assert_eq!(code, Some(128 + 1), "{err}");
    assert_eq!(doc["interrupted"], true, "{err}");
}

/// `numalab report` catches Ctrl-C before its first measurement (it used
/// to be caught only from the policy sweep, so a Ctrl-C during the matrix
/// killed it with no word, and one during the sweep exited 1): the step
/// in progress ends, nothing is written, and it exits 130.
#[test]
fn ctrl_c_during_a_report_writes_nothing_and_exits_130() {
    let dir = Scratch::new("signal-report");
    let page = dir.path("r.json");
    let child = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(["report", "--quick", "--json", "-o", &page])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Its signal watcher runs: from here on the report measures.
    wait_for_thread(child.id(), "numalab-signals");
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted: no report written"), "{err}");
    assert_eq!(dir.files(), Vec::<String>::new(), "nothing written: {err}");
}
