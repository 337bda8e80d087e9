//! `numalab fill`: the node-fill scenario.

use crate::common::*;
use serde_json::Value;

#[test]
fn fill_reports_where_the_memory_went() {
    let out = numalab(&["fill", "--size", "32M", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["schema"], "numalab.fill");
    assert_eq!(doc["size_bytes"], 32 << 20);
    assert_eq!(doc["policy"], "default");
    let page = doc["pages"]["page_size"].as_u64().unwrap();
    let queried = doc["pages"]["queried"].as_u64().unwrap();
    assert_eq!(queried, (32 << 20) / page);
    let present: u64 = doc["pages"]["per_node"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(present, queried, "every page touched");
    assert_eq!(doc["audit"]["verdict"], "match", "{}", stdout(&out));
    assert_eq!(doc["fallback_bytes"], 0);
    let nodes = doc["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), sysfs_nodes().len());
    let filled: u64 = nodes.iter().map(|n| n["bytes"].as_u64().unwrap()).sum();
    assert_eq!(filled, 32 << 20);
    // numastat -p's view of the process holds at least the buffer.
    let process: u64 = doc["process_bytes"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert!(process >= 32 << 20, "{process}");
    let balancing = std::fs::read_to_string("/proc/sys/kernel/numa_balancing")
        .ok()
        .map(|v| v.trim().parse::<u64>().unwrap());
    assert_eq!(doc["numa_balancing"].as_u64(), balancing);

    let out = numalab(&["fill", "--size", "16M", "--membind=0"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("numalab fill: 16 MiB under bind:0"), "{text}");
    assert!(text.contains("numastat -p"), "{text}");
    assert!(
        text.contains("placement: bind:0: 4096 pages, as asked"),
        "{text}"
    );
}

#[test]
fn fill_refuses_a_bind_its_nodes_cannot_hold() {
    let out = numalab(&["fill", "--size", "1T", "--membind=0"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("cannot fill 1 TiB under bind:0"), "{err}");
    assert!(
        err.contains("requested on node 0, which has") && err.contains("MiB) free"),
        "{err}"
    );
    assert!(stdout(&out).is_empty());

    for (args, code, needle) in [
        (vec!["fill", "--size", "0"], 2, "at least one byte"),
        (vec!["fill", "--size", "1.5X"], 2, "unknown unit \"X\""),
        (vec!["fill"], 2, "--size"),
        (
            vec!["fill", "--size", "1M", "--membind=7"],
            1,
            "node 7 does not exist",
        ),
        (
            vec!["fill", "--size", "1M", "--cpunodebind=9"],
            1,
            "node 9 does not exist",
        ),
    ] {
        let out = numalab(&args);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
    }
}

/// A SIGTERM during the fill waits until the pages are counted: the report
/// is written whole and numalab exits 143. No thread runs beside the fill
/// meanwhile (a signal watcher would change what NUMA balancing does to
/// the pages counted).
#[test]
fn sigterm_during_a_fill_writes_the_report_and_exits_143() {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(["fill", "--size", "1G", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Wait until numalab holds SIGTERM back (SigBlk in /proc), as the
    // kernel reports it, then send it.
    let sigterm_bit = 1u64 << (15 - 1);
    let mut threads_during_fill = None;
    loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let blocked = status
            .lines()
            .find_map(|l| l.strip_prefix("SigBlk:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok());
        match blocked {
            Some(mask) if mask & sigterm_bit != 0 => {
                threads_during_fill = status
                    .lines()
                    .find_map(|l| l.strip_prefix("Threads:"))
                    .and_then(|v| v.trim().parse::<u32>().ok());
                break;
            }
            None => break, // it ended: the assertions below say how
            _ => std::thread::sleep(std::time::Duration::from_millis(1)),
        }
    }
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("the whole report");
    assert_eq!(doc["size_bytes"], 1u64 << 30);
    assert_eq!(threads_during_fill, Some(1), "a thread ran beside the fill");
}
