//! `numalab exec`: placement as numactl does it, and where pages landed.

use crate::common::*;
use serde_json::Value;

#[test]
fn exec_counts_the_pages_of_a_command() {
    // dd allocates one 48 MiB block and fills it: 48 MiB of private memory.
    let out = numalab(&[
        "exec",
        "--json",
        "--membind=0",
        "--",
        "dd",
        "if=/dev/zero",
        "of=/dev/null",
        "bs=48M",
        "count=2",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    let json_start = err
        .find('{')
        .unwrap_or_else(|| panic!("no JSON report:\n{err}"));
    let doc: Value = serde_json::from_str(&err[json_start..]).unwrap();
    assert_eq!(doc["schema"], "numalab.exec");
    assert_eq!(doc["policy"], "bind:0");
    assert_eq!(doc["run"]["exit"]["code"], 0);
    let private = doc["run"]["peak"]["bytes"]["private"]["0"]
        .as_u64()
        .unwrap_or(0)
        + doc["run"]["peak"]["bytes"]["heap"]["0"]
            .as_u64()
            .unwrap_or(0);
    assert!(
        private >= 48 << 20,
        "dd's 48 MiB block not counted: {private} bytes\n{err}"
    );
    assert_eq!(doc["audit"]["verdict"], "match", "{err}");
}

#[test]
fn exec_binds_cpus_and_keeps_the_exit_status() {
    let out = numalab(&[
        "exec",
        "--physcpubind=0",
        "--",
        "sh",
        "-c",
        "grep Cpus_allowed_list /proc/self/status; exit 3",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("Cpus_allowed_list:\t0\n"),
        "{}",
        stdout(&out)
    );
    assert!(stderr(&out).contains("exited 3"), "{}", stderr(&out));

    let out = numalab(&["exec", "-q", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(out.status.code(), Some(128 + 15));
    assert!(
        stderr(&out).is_empty(),
        "--quiet prints nothing: {}",
        stderr(&out)
    );

    let out = numalab(&["exec", "--", "/nonexistent/command"]);
    assert_eq!(out.status.code(), Some(127));
    assert!(stderr(&out).contains("/nonexistent/command"));
}

#[test]
fn exec_refuses_nodes_that_do_not_exist() {
    let out = numalab(&["exec", "--membind=7", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    let err = stderr(&out);
    let nodes: numalab::NodeSet = sysfs_nodes().into_iter().collect();
    assert!(err.contains("--membind=7"), "{err}");
    assert!(err.contains("node 7 does not exist"), "{err}");
    assert!(
        err.contains(&format!("this machine has nodes {nodes}")),
        "{err}"
    );

    for (args, needle) in [
        (
            vec!["exec", "--interleave=0,,1", "--", "true"],
            "not a number or a range",
        ),
        (
            vec!["exec", "--physcpubind=4096", "--", "true"],
            "CPU 4096 does not exist",
        ),
        (
            vec!["exec", "--cpunodebind=9", "--", "true"],
            "node 9 does not exist",
        ),
        (
            vec!["exec", "--preferred=0-1", "--", "true"],
            "--preferred-many",
        ),
    ] {
        let out = numalab(&args);
        assert_eq!(out.status.code(), Some(125), "{args:?}");
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
    }
    // Two policies at once is a usage error.
    let out = numalab(&["exec", "-m", "0", "-i", "0", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
}
