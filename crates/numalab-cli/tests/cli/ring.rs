//! `numalab ring`: the shared-memory ring between processes.

use crate::common::*;
use serde_json::Value;
use std::process::{Command, Output};

/// A ring made by the test process (its creator), removed when the guard
/// drops even when the test fails.
struct TestRing {
    name: String,
    ring: Option<numalab::ring::Ring>,
}

impl TestRing {
    fn new(tag: &str, blocks: usize, block_size: usize, readers: u32) -> TestRing {
        let name = format!("clitest-{}-{tag}", std::process::id());
        let options = numalab::ring::RingOptions::new(&name, blocks * block_size, block_size)
            .max_readers(readers);
        let ring = numalab::ring::Ring::create(&options).expect("ring made");
        TestRing {
            name,
            ring: Some(ring),
        }
    }

    fn stats(&self) -> numalab::ring::RingStats {
        numalab::ring::RingMonitor::open(&self.name)
            .unwrap()
            .stats()
    }
}

impl Drop for TestRing {
    fn drop(&mut self) {
        drop(self.ring.take());
        let _ = numalab::ring::remove(&self.name, true);
    }
}

/// Starts a `numalab ring-worker` on every CPU this test may use.
fn ring_worker(
    role: &str,
    ring: &str,
    mode: &str,
    volume: u64,
    readers: usize,
) -> std::process::Child {
    let cpus = numalab::affinity::thread_cpus().unwrap().to_string();
    Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args([
            "ring-worker",
            "--role",
            role,
            "--name",
            ring,
            "--cpus",
            &cpus,
        ])
        .args(["--mode", mode, "--timeout", "20", "--verify"])
        .args([
            "--volume",
            &volume.to_string(),
            "--readers",
            &readers.to_string(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("worker starts")
}

fn worker_bytes(out: &Output) -> u64 {
    let report: Value = serde_json::from_str(stdout(out).lines().last().unwrap_or("{}"))
        .unwrap_or_else(|_| panic!("no report: {}", stderr(out)));
    report["bytes"].as_u64().unwrap()
}

/// Waits until the ring's writer has committed `blocks` blocks.
fn wait_for_progress(ring: &TestRing, blocks: u64) {
    let start = std::time::Instant::now();
    while ring.stats().writer.blocks < blocks {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "no progress: {:?}",
            ring.stats()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn ring_every_byte_arrives_once_and_in_order_with_one_to_four_readers() {
    let scale = if cfg!(miri) { 1 } else { 16 };
    for readers in 1..=4usize {
        for mode in ["copy", "in-place"] {
            let ring = TestRing::new(&format!("stress{readers}{mode}"), 4, 64 << 10, 4);
            // Not a whole number of blocks: the last block is partial.
            let volume = scale * (1 << 20) + 4096 + 8 * readers as u64;
            let children: Vec<_> = (0..readers)
                .map(|_| ring_worker("reader", &ring.name, mode, volume, readers))
                .collect();
            let writer = ring_worker("writer", &ring.name, mode, volume, readers);
            let out = writer.wait_with_output().unwrap();
            assert!(out.status.success(), "writer: {}", stderr(&out));
            assert_eq!(worker_bytes(&out), volume);
            for child in children {
                let out = child.wait_with_output().unwrap();
                assert!(
                    out.status.success(),
                    "{readers} readers, {mode}: {}",
                    stderr(&out)
                );
                assert_eq!(worker_bytes(&out), volume, "{readers} readers, {mode}");
            }
            let stats = ring.stats();
            assert_eq!(stats.writer.state, "finished");
            assert_eq!(stats.writer.bytes, volume);
        }
    }
}

#[test]
fn ring_survives_a_reader_killed_mid_stream() {
    let ring = TestRing::new("killreader", 4, 64 << 10, 4);
    let volume = 1u64 << 40; // far more than the test lets it write
    let mut victim = ring_worker("reader", &ring.name, "copy", volume, 2);
    let survivor = ring_worker("reader", &ring.name, "copy", 0, 2);
    let writer_volume = 256u64 << 20;
    let writer = ring_worker("writer", &ring.name, "copy", writer_volume, 2);
    wait_for_progress(&ring, 64);
    victim.kill().unwrap(); // SIGKILL
    victim.wait().unwrap();
    let out = writer.wait_with_output().unwrap();
    assert!(out.status.success(), "writer: {}", stderr(&out));
    assert_eq!(worker_bytes(&out), writer_volume);
    let out = survivor.wait_with_output().unwrap();
    assert!(out.status.success(), "surviving reader: {}", stderr(&out));
    assert_eq!(worker_bytes(&out), writer_volume);
    let stats = ring.stats();
    assert_eq!(stats.writer.dropped_readers, 1, "{stats:?}");
}

#[test]
fn ring_readers_stop_with_an_error_when_the_writer_is_killed() {
    let mut ring = TestRing::new("killwriter", 4, 64 << 10, 4);
    let readers: Vec<_> = (0..2)
        .map(|_| ring_worker("reader", &ring.name, "in-place", 1 << 40, 2))
        .collect();
    let mut writer = ring_worker("writer", &ring.name, "in-place", 1 << 40, 2);
    wait_for_progress(&ring, 64);
    writer.kill().unwrap();
    writer.wait().unwrap();
    for reader in readers {
        let out = reader.wait_with_output().unwrap();
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(err.contains("died without ending the stream"), "{err}");
    }
    assert_eq!(ring.stats().writer.state, "dead");
    // The creator goes too, leaving a stale segment: found and removed.
    if let Some(mut handle) = ring.ring.take() {
        handle.keep();
    }
    let out = numalab(&["ring", "--list", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let entry = doc["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == ring.name.as_str())
        .expect("listed")
        .clone();
    assert_eq!(entry["in_use"], false, "{entry}");
    let out = numalab(&["ring", "--cleanup", &ring.name]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!std::path::Path::new(&format!("/dev/shm/numalab-ring.{}", ring.name)).exists());
    let out = numalab(&["ring", "--cleanup", &ring.name]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("no ring named"), "{}", stderr(&out));
    ring.name = String::new();
}

#[test]
fn ring_blog_layout_reports_every_cell_with_its_placement() {
    let out = numalab(&[
        "ring",
        "--layout",
        "blog",
        "--volume",
        "32MiB",
        "--block-size",
        "1MiB",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["schema"], "numalab.ring");
    let cells = doc["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 12);
    let tables: Vec<&str> = cells.iter().map(|c| c["table"].as_str().unwrap()).collect();
    assert_eq!(tables.iter().filter(|t| **t == "single-stream").count(), 8);
    assert_eq!(tables.iter().filter(|t| **t == "two-stream").count(), 4);
    for cell in cells {
        match cell["status"].as_str().unwrap() {
            "ran" => {
                assert_eq!(cell["placement_ok"], true, "{cell}");
                for stream in cell["streams"].as_array().unwrap() {
                    let node = stream["plan"]["memory_node"].as_u64().unwrap();
                    let found = &stream["memory"]["found"]["per_node"];
                    let pages = found[node.to_string()].as_u64().unwrap();
                    assert_eq!(
                        pages,
                        stream["memory"]["found"]["queried"].as_u64().unwrap()
                    );
                    assert!(stream["mb_per_s"].as_f64().unwrap() > 0.0);
                    assert_eq!(stream["bytes"], 32u64 << 20);
                }
            }
            "skipped" => assert!(cell["reason"].as_str().unwrap().contains("node"), "{cell}"),
            other => panic!("cell {other}: {cell}"),
        }
    }
    if sysfs_nodes().len() == 1 {
        let ran: Vec<&str> = cells
            .iter()
            .filter(|c| c["status"] == "ran")
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(ran, ["memory 0, writer 0, reader 0", "adjacent on 0"]);
    }
    // The table says which cells this machine cannot run.
    let out = numalab(&[
        "ring",
        "--layout",
        "blog",
        "--volume",
        "8MiB",
        "--block-size",
        "1MiB",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("single-stream:") && text.contains("two-stream:"),
        "{text}"
    );
    if sysfs_nodes().len() == 1 {
        assert!(text.contains("does not exist"), "{text}");
    }
}

#[test]
fn ring_csv_and_bad_input() {
    let out = numalab(&[
        "ring",
        "--volume",
        "16MiB",
        "--block-size",
        "256KiB",
        "--csv",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("table,cell,status,stream,"), "{text}");
    assert_eq!(text.lines().count(), 2, "{text}");
    for (args, needle) in [
        (vec!["--memory-node", "7"], "node 7 does not exist"),
        (vec!["--block-size", "100"], "multiple of 64"),
        (vec!["--volume", "12 parsecs"], "unknown unit"),
        (
            vec!["--streams", "2", "--memory-node", "0,0,0"],
            "3 values for 2 stream(s)",
        ),
        (vec!["--writer-cpus", "99"], "CPU 99 does not exist"),
    ] {
        let mut full = vec!["ring"];
        full.extend(args);
        let out = numalab(&full);
        assert!(!out.status.success(), "{full:?}");
        assert!(stderr(&out).contains(needle), "{full:?}: {}", stderr(&out));
    }
    // Nothing left behind: no stale segment of a `numalab ring` run.
    let out = numalab(&["ring", "--list", "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let stale: Vec<&Value> = doc["segments"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"].as_str().unwrap().starts_with("run-") && e["in_use"] == false)
        .collect();
    assert!(stale.is_empty(), "{stale:?}");
}

#[test]
fn ring_ctrl_c_stops_the_run_and_removes_its_segments() {
    use std::os::unix::process::CommandExt;
    let mut run = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(["ring", "--volume", "1T", "--block-size", "64K"])
        .process_group(0) // as a shell puts a job in its own group
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let name = format!("run-{}-0", run.id());
    let path = format!("/dev/shm/numalab-ring.{name}");
    let start = std::time::Instant::now();
    loop {
        let moving = numalab::ring::RingMonitor::open(&name)
            .map(|m| m.stats().writer.blocks > 16)
            .unwrap_or(false);
        if moving {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the run never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // What the terminal does on Ctrl-C: SIGINT to the whole job.
    let killed = Command::new("kill")
        .args(["-INT", "--", &format!("-{}", run.id())])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = run.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut run.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success());
    assert!(err.contains("interrupted"), "{err}");
    assert!(!std::path::Path::new(&path).exists(), "{path} left behind");
}
