//! `numalab advise` as a user meets it on this machine: on one node with
//! memory it says placement cannot matter and runs nothing; on more, every
//! candidate runs and its pages are where the kernel's node list says they
//! should be. Bad input gets one sentence and the shell's exit status.
//! (Every candidate's placement on two, three and lopsided nodes is the
//! emulated suite's `advise.placements`.)

use crate::common::*;
use serde_json::Value;

#[test]
fn advise_runs_every_placement_or_says_why_placement_cannot_matter() {
    let scratch = Scratch::new("advise");
    let marker = scratch.path("ran");
    let (with_cpus, with_memory) = sysfs_roles();
    let out = numalab(&[
        "advise",
        "--runs",
        "2",
        "--warmup",
        "0",
        "--json",
        "--",
        "sh",
        "-c",
        &format!("echo x >> {marker}; dd if=/dev/zero of=/dev/null bs=8M count=1"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: Value = serde_json::from_str(&stdout(&out)).expect("JSON on stdout");
    assert_eq!(doc["schema"], "numalab.advise");
    let runs_made = std::fs::read_to_string(&marker)
        .unwrap_or_default()
        .lines()
        .count();
    if with_memory.len() < 2 {
        // One node: nothing run, and the reason given.
        let why = doc["cannot_matter"].as_str().expect("a reason");
        assert!(why.contains("one node with memory"), "{why}");
        assert_eq!(
            runs_made, 0,
            "the command ran on a machine where it cannot matter"
        );
        assert!(doc["candidates"].as_array().unwrap().is_empty());
        let text = numalab(&["advise", "--", "true"]);
        assert_eq!(text.status.code(), Some(0));
        assert!(stdout(&text).contains("placement cannot change the command's speed here"));
        return;
    }
    // Several nodes: first touch, interleave, a bind per node with CPUs
    // and memory, a preferred per node with memory (weighted interleave
    // only as root on Linux 6.9+).
    let candidates = doc["candidates"].as_array().unwrap();
    let names: Vec<&str> = candidates
        .iter()
        .map(|c| c["candidate"]["name"].as_str().unwrap())
        .collect();
    let binds = with_cpus.iter().filter(|n| with_memory.contains(n)).count();
    let expected = 2 + binds + with_memory.len();
    assert!(
        names.len() == expected || names.len() == expected + 1,
        "{names:?}"
    );
    assert_eq!(runs_made, 2 * names.len(), "every candidate ran twice");
    for candidate in candidates {
        let name = candidate["candidate"]["name"].as_str().unwrap();
        if let Some(node) = name.strip_prefix("bind:") {
            // Every page of dd's buffer on the bound node (the kernel's count).
            for run in candidate["runs"].as_array().unwrap() {
                let per_node = run["private_per_node"].as_object().unwrap();
                assert_eq!(
                    per_node.keys().collect::<Vec<_>>(),
                    [node],
                    "{name}: {per_node:?}"
                );
            }
        }
    }
    assert!(doc["recommendation"]["name"].is_string());
}

#[test]
fn advise_says_what_went_wrong_in_one_sentence() {
    let out = numalab(&["advise", "--", "numalab-no-such-program"]);
    assert_eq!(out.status.code(), Some(127));
    assert_eq!(
        stderr(&out).trim(),
        "numalab advise: cannot run numalab-no-such-program: not found in PATH"
    );
    let scratch = Scratch::new("advise-bad");
    let plain = scratch.path("plain");
    std::fs::write(&plain, "not a program").unwrap();
    let out = numalab(&["advise", "--", &plain]);
    assert_eq!(out.status.code(), Some(126));
    assert!(
        stderr(&out).contains("not an executable file"),
        "{}",
        stderr(&out)
    );

    let out = numalab(&["advise", "--runs", "1", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("1 is not in 2..=1000"),
        "{}",
        stderr(&out)
    );
    let out = numalab(&["advise", "--placements", "spread", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("[possible values: interleave, bind, preferred, weighted]"));

    let junk = scratch.path("junk.json");
    std::fs::write(&junk, "{\"schema\": \"numalab.topo\"}").unwrap();
    let out = numalab(&["advise", "--matrix", &junk, "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("not a numalab matrix --json result"),
        "{}",
        stderr(&out)
    );
    let out = numalab(&[
        "advise",
        "--matrix",
        &scratch.path("missing.json"),
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("missing.json"), "{}", stderr(&out));
}
