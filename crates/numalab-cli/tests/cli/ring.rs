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

/// `--ramp` moves whole blocks first, untimed: the run's figures count
/// the volume only, the ring's own counters (the library's, not the
/// workers') show the ramp moved as well, and every word of both is
/// checked across the ramp's end, in both modes.
#[test]
fn ring_ramp_moves_whole_blocks_first_and_is_left_out_of_the_figures() {
    for mode in ["copy", "in-place"] {
        let out = numalab(&[
            "ring",
            "--mode",
            mode,
            "--verify",
            "--json",
            "--volume",
            "3M",
            "--block-size",
            "1M",
            "--blocks",
            "2",
            "--ramp",
            "2500K",
        ]);
        assert!(out.status.success(), "{mode}: {}", stderr(&out));
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        // 2500 KiB rounded up to whole blocks of 1 MiB.
        assert_eq!(doc["settings"]["ramp_bytes"], 3 << 20, "{mode}");
        let stream = &doc["cells"][0]["streams"][0];
        assert_eq!(stream["bytes"], 3 << 20, "{mode}");
        let writer = &stream["counters"]["writer"];
        assert_eq!(writer["bytes"], 6 << 20, "{mode}: {writer}");
        // Three blocks of ramp, three of volume and the empty block that
        // ends the stream: the ramp is no transfer of its own.
        assert_eq!(writer["blocks"], 7, "{mode}: {writer}");
        assert_eq!(writer["state"], "finished", "{mode}");
    }
    let out = numalab(&[
        "ring",
        "--volume",
        "1M",
        "--block-size",
        "1M",
        "--ramp",
        "lots",
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--ramp"), "{}", stderr(&out));
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
            "3 values for 2 streams",
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
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted by SIGINT"), "{err}");
    assert!(!std::path::Path::new(&path).exists(), "{path} left behind");
}

// ---------------------------------------------------------------------------
// Hardening (issue 12): limits, files others plant in /dev/shm, signals.
// ---------------------------------------------------------------------------

/// Runs numalab with `args`, killing it and failing the test if it has not
/// finished within a minute (what these tests guard against is a hang).
fn numalab_within_a_minute(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read while it runs: a long output must not fill the pipe.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("numalab {args:?} did not finish within 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// A file under a segment's name, removed when the guard drops.
struct Planted(std::path::PathBuf);

impl Drop for Planted {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn ring_list_and_cleanup_skip_a_fifo_named_like_a_segment() {
    let name = format!("clitest-{}-fifo", std::process::id());
    let fifo = Planted(format!("/dev/shm/numalab-ring.{name}").into());
    let made = Command::new("mkfifo").arg(&fifo.0).status().unwrap();
    assert!(made.success(), "mkfifo");
    let out = numalab_within_a_minute(&["ring", "--list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let line = stdout(&out)
        .lines()
        .find(|l| l.contains(&name))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("the FIFO is not listed: {}", stdout(&out)));
    assert!(line.contains("not a ring segment: FIFO"), "{line}");
    let out = numalab_within_a_minute(&["ring", "--list", "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let entry = doc["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name.as_str())
        .expect("listed")
        .clone();
    assert_eq!(entry["problem"], "not a ring segment: FIFO", "{entry}");
    for force in [false, true] {
        let mut args = vec!["ring", "--cleanup", name.as_str()];
        if force {
            args.push("--force");
        }
        let out = numalab_within_a_minute(&args);
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains("not a ring segment: FIFO"),
            "{}",
            stderr(&out)
        );
        let kind = std::fs::symlink_metadata(&fifo.0).unwrap().file_type();
        assert!(std::os::unix::fs::FileTypeExt::is_fifo(&kind), "removed");
    }
}

#[test]
fn ring_list_shows_another_users_segment_without_failing() {
    let mut ring = TestRing::new("others", 4, 4096, 1);
    let path = std::path::PathBuf::from(format!("/dev/shm/numalab-ring.{}", ring.name));
    if std::os::unix::fs::chown(&path, Some(65534), Some(65534)).is_err() {
        numalab::testing::cannot_check("chown to another user needs root");
        return;
    }
    if let Some(mut handle) = ring.ring.take() {
        handle.keep();
    }
    let _planted = Planted(path);
    let out = numalab_within_a_minute(&["ring", "--list", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let entry = doc["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == ring.name.as_str())
        .expect("listed")
        .clone();
    assert!(
        entry["problem"].as_str().unwrap().contains("user 65534"),
        "{entry}"
    );
    let out = numalab_within_a_minute(&["ring", "--list"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn ring_counts_sizes_and_timeouts_are_range_checked_with_their_limits() {
    for (args, needle) in [
        (
            vec!["--streams", "100000"],
            "--streams=100000 is more than 256, the most streams",
        ),
        (
            vec!["--timeout", "1e20"],
            "is more than 86400, the most seconds",
        ),
        (vec!["--timeout", "0"], "--timeout=0 must be a positive"),
        (vec!["--timeout", "NaN"], "must be a positive"),
        (vec!["--blocks", "99999999"], "is not from 2 to 1048576"),
        (vec!["--readers", "65"], "is not from 1 to 64"),
        (
            vec!["--streams", "200", "--readers", "10"],
            "starts 2200 writer and reader processes, more than 1024",
        ),
        (vec!["--block-size", "2T"], "the largest block"),
    ] {
        let mut full = vec!["ring", "--volume", "1M"];
        full.extend(&args);
        let out = numalab_within_a_minute(&full);
        assert_eq!(out.status.code(), Some(1), "{full:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{full:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    }
}

fn mem_total() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("MemTotal in /proc/meminfo")
        * 1024
}

#[test]
fn ring_total_memory_of_all_streams_is_checked_before_any_ring_is_made() {
    // Each ring a third of the machine's memory: one would fit, four
    // cannot, whatever else runs.
    let block = (mem_total() / 3 / 8) & !((1 << 20) - 1);
    let block = block.to_string();
    let out = numalab_within_a_minute(&[
        "ring",
        "--streams",
        "4",
        "--blocks",
        "8",
        "--block-size",
        &block,
        "--volume",
        &block,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("4 rings need"), "{err}");
    assert!(err.contains("together"), "{err}");
    assert!(!err.contains("making the ring"), "{err}");
}

#[test]
fn ring_of_tiny_blocks_reports_its_segment_size_and_keeps_header_room_small() {
    let out = numalab(&[
        "ring",
        "--block-size",
        "64",
        "--blocks",
        "1048576",
        "--volume",
        "64K",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let segment = doc["settings"]["segment_bytes"].as_u64().unwrap();
    let data = 64u64 << 20;
    // A 32-byte descriptor and a 64-byte transfer-header slot per block,
    // not the library's default 4 KiB slot (which made this 4.3 GB).
    assert!(segment >= data + (1 << 20) * 96, "{segment}");
    assert!(segment < data + (1 << 20) * 96 + (1 << 20), "{segment}");
    let out = numalab(&[
        "ring",
        "--block-size",
        "64",
        "--blocks",
        "1048576",
        "--volume",
        "64K",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("segment per ring: 96.0 MiB more than the data"),
        "{}",
        stdout(&out)
    );
}

/// `(pid, start time)` of every process whose parent is `parent`, from
/// /proc.
fn children_of(parent: u32) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command name, which may hold spaces: state, ppid, …
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(parent) {
            // Field 22 of stat, the start time, tells a reused pid apart.
            found.push((pid, fields.get(19).unwrap_or(&"").to_string()));
        }
    }
    found
}

/// Whether the process `(pid, start time)` is still running (a zombie
/// waiting to be reaped has ended).
fn running(process: &(u32, String)) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", process.0)) else {
        return false;
    };
    let Some((_, rest)) = stat.rsplit_once(") ") else {
        return false;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields.get(19).copied() == Some(process.1.as_str()) && !matches!(fields[0], "Z" | "X")
}

/// Waits up to a minute for `what`.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "after 60 s: {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Starts `numalab ring ARGS` in its own process group (as a shell puts a
/// job) and waits until ring `run-PID-{stream}` has moved some blocks.
fn start_ring_run(args: &[&str], stdout: std::process::Stdio) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let run = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .arg("ring")
        .args(args)
        .process_group(0)
        .stdout(stdout)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let name = format!("run-{}-0", run.id());
    eventually("the run moves data", || {
        numalab::ring::RingMonitor::open(&name)
            .map(|m| m.stats().writer.blocks > 16)
            .unwrap_or(false)
    });
    run
}

#[test]
fn ring_workers_end_and_remove_the_segment_when_numalab_is_killed() {
    let mut run = start_ring_run(
        &["--volume", "1T", "--block-size", "64K"],
        std::process::Stdio::null(),
    );
    let path = format!("/dev/shm/numalab-ring.run-{}-0", run.id());
    // Whatever happens, no segment is left for other tests to find.
    let _cleanup = Planted(path.clone().into());
    let workers = children_of(run.id());
    assert_eq!(workers.len(), 2, "a writer and a reader: {workers:?}");
    run.kill().unwrap(); // SIGKILL: no handler runs in numalab
    run.wait().unwrap();
    eventually("the workers end after numalab was killed", || {
        workers.iter().all(|w| !running(w))
    });
    eventually("the workers remove the segment", || {
        std::fs::symlink_metadata(&path).is_err()
    });
}

#[test]
fn ring_sigterm_and_sighup_end_the_workers_and_exit_128_plus_the_signal() {
    for (signal, code, name) in [("TERM", 143, "SIGTERM"), ("HUP", 129, "SIGHUP")] {
        let run = start_ring_run(
            &["--volume", "1T", "--block-size", "64K", "--json"],
            std::process::Stdio::piped(),
        );
        let path = format!("/dev/shm/numalab-ring.run-{}-0", run.id());
        let workers = children_of(run.id());
        assert_eq!(workers.len(), 2, "{workers:?}");
        // To numalab only, as `kill` or a service manager does.
        let sent = Command::new("kill")
            .args([format!("-{signal}"), run.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let out = run.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(code), "{}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("interrupted by {name}")),
            "{}",
            stderr(&out)
        );
        assert!(workers.iter().all(|w| !running(w)), "{workers:?}");
        assert!(std::fs::symlink_metadata(&path).is_err(), "{path} left");
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["interrupted"], true);
        assert_eq!(doc["cells"][0]["status"], "interrupted", "{doc}");
    }
}

#[test]
fn ring_ctrl_c_during_a_table_writes_the_finished_cells_and_exits_130() {
    let scratch = Scratch::new("ring-ctrl-c");
    let out_file = scratch.path("r.json");
    let mut run = start_ring_run(
        &[
            "--layout",
            "blog",
            "--volume",
            "1GiB",
            "--block-size",
            "1MiB",
            "-o",
            &out_file,
        ],
        std::process::Stdio::null(),
    );
    // The two-stream table's first runnable cell has a second ring: every
    // single-stream cell before it has finished. Its writer is stopped so
    // that the cell cannot finish before Ctrl-C.
    let second = format!("run-{}-1", run.id());
    let mut writer = 0;
    eventually("the two-stream table starts", || {
        writer = numalab::ring::RingMonitor::open(&second)
            .ok()
            .map(|m| m.stats().writer)
            .filter(|w| w.state == "active")
            .map_or(0, |w| w.pid);
        writer != 0
    });
    let stopped = Command::new("kill")
        .args(["-STOP", &writer.to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let ctrl_c = Command::new("kill")
        .args(["-INT", "--", &format!("-{}", run.id())])
        .status()
        .unwrap();
    assert!(ctrl_c.success());
    let status = run.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut run.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    assert_eq!(doc["schema"], "numalab.ring");
    assert_eq!(doc["interrupted"], true);
    let cells = doc["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 12);
    let ran: Vec<&Value> = cells.iter().filter(|c| c["status"] == "ran").collect();
    assert!(!ran.is_empty(), "no finished cell kept: {doc}");
    for cell in &ran {
        assert_eq!(cell["streams"][0]["bytes"], 1u64 << 30, "{cell}");
    }
    let cut = cells
        .iter()
        .find(|c| c["table"] == "two-stream" && c["status"] == "interrupted")
        .expect("the two-stream cell is marked interrupted");
    assert!(cut["reason"].as_str().unwrap().contains("SIGINT"), "{cut}");
    for ring in [format!("run-{}-0", run.id()), second] {
        let path = format!("/dev/shm/numalab-ring.{ring}");
        assert!(std::fs::symlink_metadata(&path).is_err(), "{path} left");
    }
}
