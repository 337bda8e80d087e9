//! SIGINT, SIGTERM and SIGHUP for the commands that measure: what was
//! measured is written, and numalab exits 128 + the signal, as a shell
//! reports a command that signal ended.

use crate::common::*;
use serde_json::Value;
use std::process::Command;

/// Runs a minute-long experiment, sends `signal` once its worker runs,
/// and returns numalab's exit status and result.
fn run_interrupted_by(signal: &str) -> (Option<i32>, Value, String) {
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
    wait_for_worker(child.id());
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
    (out.status.code(), doc, stderr(&out))
}

#[test]
fn sigterm_stops_a_run_writes_it_and_exits_143() {
    let (code, doc, err) = run_interrupted_by("TERM");
    assert_eq!(code, Some(128 + 15), "{err}");
    assert_eq!(doc["interrupted"], true, "{err}");
}

#[test]
fn sighup_is_treated_like_sigterm_and_exits_129() {
    let (code, doc, err) = run_interrupted_by("HUP");
    assert_eq!(code, Some(128 + 1), "{err}");
    assert_eq!(doc["interrupted"], true, "{err}");
}
