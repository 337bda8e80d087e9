//! `numalab pagecache bench`: readers where the kernel says their CPUs
//! are, the whole file read, the cache where util-linux `fincore` counts
//! it, groups started apart by the clock, bad input refused before
//! anything is written, and nothing left behind.

use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use crate::fincore::fincore_pages;
use serde_json::Value;

/// The first node with CPUs and memory, and its CPUs, as sysfs lists them.
fn first_node() -> (u32, Vec<u32>) {
    let (with_cpus, with_memory) = sysfs_roles();
    let node = *with_cpus
        .iter()
        .find(|n| with_memory.contains(n))
        .expect("a node with CPUs and memory");
    (
        node,
        sysfs_list(&format!("/sys/devices/system/node/node{node}/cpulist")),
    )
}

/// `numalab pagecache bench ARGS --json`, which must succeed, as JSON.
fn bench_json(args: &[&str]) -> Value {
    let mut all = vec!["pagecache", "bench", "--json"];
    all.extend_from_slice(args);
    let out = numalab(&all);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A file of `mib` MiB at `path`, flushed so its pages are clean.
fn clean_file(path: &str, mib: usize) {
    fs::write(path, vec![3u8; mib << 20]).unwrap();
    fs::File::open(path).unwrap().sync_all().unwrap();
}

#[test]
fn readers_run_on_the_nodes_cpus_read_the_whole_file_and_start_in_groups() {
    let scratch = Scratch::new("pcbench");
    let path = scratch.path("data");
    clean_file(&path, 16);
    let (node, cpus) = first_node();
    let readers = cpus.len().min(2);
    let doc = bench_json(&[
        &path,
        "--cache-node",
        &node.to_string(),
        "--reader-node",
        "same",
        "--readers",
        &readers.to_string(),
        "--group",
        "1",
        "--stagger",
        "150ms",
        "--repeats",
        "2",
    ]);
    assert_eq!(doc["schema"], "numalab.pagecache-bench");
    let cell = &doc["cells"][0];
    assert_eq!(cell["status"], "ran");
    assert_eq!(cell["repeats"].as_array().unwrap().len(), 2);
    for repeat in cell["repeats"].as_array().unwrap() {
        let last = repeat["time_to_last_s"].as_f64().unwrap();
        for (i, reader) in repeat["readers"].as_array().unwrap().iter().enumerate() {
            let cpu = reader["cpu"].as_u64().unwrap() as u32;
            assert!(cpus.contains(&cpu), "CPU {cpu} is not on node {node}");
            assert_eq!(
                reader["node"], node,
                "the kernel's node of the CPU it ran on"
            );
            assert_eq!(reader["bytes"], 16 << 20, "the whole file");
            let started = reader["started_s"].as_f64().unwrap();
            // Reader i of a group of one starts i × 150 ms after the first.
            assert!(
                started >= 0.15 * i as f64 - 0.001,
                "reader {i} started at {started} s"
            );
            assert!(started + reader["read_s"].as_f64().unwrap() <= last + 1e-6);
        }
    }
    // The cache the bench says it left is what util-linux counts.
    if let Some(pages) = fincore_pages(&path) {
        assert_eq!(cell["cache_after"]["cached"], pages);
        assert_eq!(cell["cache_after"]["per_node"][node.to_string()], pages);
    }
    assert_eq!(doc["settings"]["created"], false);
}

#[test]
fn a_dropped_file_is_read_in_again_on_the_cache_node_first() {
    let scratch = Scratch::new("pcbench-drop");
    let path = scratch.path("data");
    clean_file(&path, 8);
    let dropped = numalab(&["pagecache", "drop", &path]);
    assert!(dropped.status.success(), "{}", stderr(&dropped));
    match fincore_pages(&path) {
        Some(0) => {}
        // Said why (a panic under CI).
        None => return,
        Some(kept) => {
            cannot_check(format!(
                "the kernel kept {kept} pages of a clean file no one maps after pagecache drop"
            ));
            return;
        }
    }
    let (node, _) = first_node();
    let doc = bench_json(&[&path, "--repeats", "1", "--reader-node", "same"]);
    let cell = &doc["cells"][0];
    assert_eq!(cell["placed"], true);
    assert_eq!(cell["cache_before"]["per_node"][node.to_string()], 2048);
    assert_eq!(fincore_pages(&path), Some(2048));
}

#[test]
fn a_file_numalab_makes_is_gone_when_it_ends_also_on_ctrl_c() {
    let scratch = Scratch::new("pcbench-made");
    let dir = scratch.0.to_str().unwrap();
    let out = numalab(&[
        "pagecache",
        "bench",
        "--size",
        "8M",
        "--dir",
        dir,
        "--repeats",
        "1",
        "--reader-node",
        "same",
        "--csv",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("readers,place,"));
    assert_eq!(scratch.files(), Vec::<String>::new(), "nothing left behind");
    // Readers waiting for their group's start when Ctrl-C comes.
    let child = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args([
            "pagecache",
            "bench",
            "--size",
            "8M",
            "--dir",
            dir,
            "--readers",
            "2",
            "--oversubscribe",
            "--group",
            "1",
            "--stagger",
            "30s",
            "--reader-node",
            "same",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    wait_for_worker(child.id());
    std::thread::sleep(Duration::from_millis(300));
    let out = ctrl_c(child);
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "it stopped at once"
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["interrupted"], true);
    assert_eq!(doc["cells"][0]["status"], "interrupted");
    assert_eq!(scratch.files(), Vec::<String>::new(), "nothing left behind");
}

#[test]
fn bad_input_is_one_sentence_before_anything_is_written() {
    let scratch = Scratch::new("pcbench-bad");
    let dir = scratch.0.to_str().unwrap();
    fs::write(scratch.path("empty"), b"").unwrap();
    fs::write(scratch.path("small"), b"read, never written").unwrap();
    // 8 TiB, sparse: larger than any node here, read for ever if read.
    fs::File::create(scratch.path("sparse"))
        .unwrap()
        .set_len(8 << 40)
        .unwrap();
    Command::new("mkfifo")
        .arg(scratch.path("fifo"))
        .status()
        .unwrap();
    let (node, cpus) = first_node();
    let too_many = (cpus.len() + 1).to_string();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--block-size".into(), "0".into()], "at least one byte"),
        (vec![scratch.path("missing")], "No such file"),
        (vec![scratch.path("fifo")], "FIFO"),
        (vec!["/dev/null".into()], "character device"),
        (vec![dir.into()], "directory"),
        (vec![scratch.path("empty")], "is empty"),
        (
            vec![scratch.path("sparse")],
            "of memory: its cache cannot all be there",
        ),
        (
            vec!["--cache-node".into(), "4096".into()],
            "--cache-node 4096: node 4096 is out of range",
        ),
        (
            vec![
                "--readers".into(),
                too_many,
                "--reader-node".into(),
                "same".into(),
            ],
            "--oversubscribe",
        ),
        (vec!["--readers".into(), "0".into()], "1 to 1024"),
        (vec!["--repeats".into(), "0".into()], "--repeats"),
        (vec!["--stagger".into(), "2m".into()], "--stagger"),
        (vec!["--size".into(), "2T".into()], "--size"),
        // Every reader's buffer together, before any is allocated (this
        // asked for 1 TiB).
        (
            ["--size", "1G", "--readers", "1024", "--oversubscribe"]
                .into_iter()
                .chain(["--block-size", "1G"])
                .map(String::from)
                .collect(),
            "of buffers on node",
        ),
        // Every staggered start together (this asked for 71 days).
        (
            ["--readers", "1024", "--group", "1", "--stagger", "60s"]
                .into_iter()
                .chain(["--repeats", "100", "--oversubscribe"])
                .map(String::from)
                .collect(),
            "hours of waiting; at most 1.0 hours",
        ),
        (
            vec!["--reader-node".into(), "4096".into()],
            "--reader-node 4096: node 4096 is out of range",
        ),
        (
            vec!["--reader-node".into(), "far".into()],
            "same, other or a node",
        ),
        (
            vec!["--replicate".into(), "--mmap".into()],
            "cannot be combined with --mmap",
        ),
        (
            vec!["--replicate".into(), "--copy-chunk".into(), "1000".into()],
            "power of two",
        ),
        (
            vec![
                scratch.path("small"),
                "--replicate".into(),
                "--write-every".into(),
                "1ms".into(),
            ],
            "never to the FILE given",
        ),
    ];
    for (args, says) in cases {
        let mut all = vec!["pagecache", "bench", "--dir", dir];
        let given = args.iter().any(|a| a.starts_with('/'));
        if given {
            all = vec!["pagecache", "bench"];
        }
        all.extend(args.iter().map(String::as_str));
        let out = numalab(&all);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?} ran");
        assert!(err.contains(says), "{args:?}: {err}");
        let said: Vec<&str> = err
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with("For more information"))
            .collect();
        assert_eq!(said.len(), 1, "{args:?}: one sentence: {err}");
    }
    let mut left = scratch.files();
    left.retain(|f| !["empty", "fifo", "small", "sparse"].contains(&f.as_str()));
    assert!(left.is_empty(), "{left:?}");
    let _ = node;
}

#[test]
fn a_file_truncated_while_read_is_named() {
    let scratch = Scratch::new("pcbench-trunc");
    let path = scratch.path("data");
    for mmap in [false, true] {
        fs::write(&path, vec![3u8; 8 << 20]).unwrap();
        let mut args = vec![
            "pagecache",
            "bench",
            &path,
            "--readers",
            "2",
            "--oversubscribe",
            "--group",
            "1",
            "--stagger",
            "2s",
            "--repeats",
            "1",
            "--reader-node",
            "same",
        ];
        if mmap {
            args.push("--mmap");
        }
        let mut child = Command::new(env!("CARGO_BIN_EXE_numalab"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Truncated once the bench is reading, by its own progress (a
        // fixed second was too short for a busy host to even plan): with
        // read(2), once it has read the file's 8 MiB (the first reader;
        // the second starts 2 s later); with --mmap, once its readers have
        // the file mapped.
        let pid = child.id();
        let reading = || {
            if mmap {
                fs::read_to_string(format!("/proc/{pid}/maps"))
                    .is_ok_and(|maps| maps.contains(path.as_str()))
            } else {
                fs::read_to_string(format!("/proc/{pid}/io")).is_ok_and(|io| {
                    io.lines()
                        .find_map(|l| l.strip_prefix("rchar: "))
                        .and_then(|n| n.trim().parse::<u64>().ok())
                        .is_some_and(|n| n >= 8 << 20)
                })
            }
        };
        while !reading() && child.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(5));
        }
        fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(4096)
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "mmap {mmap}: {err}");
        assert!(err.contains("was truncated while"), "mmap {mmap}: {err}");
        assert!(err.contains(path.as_str()), "{err}");
    }
}

#[test]
fn reading_through_copies_makes_them_on_the_readers_node_and_survives_writes() {
    let scratch = Scratch::new("pcbench-copies");
    let dir = scratch.0.to_str().unwrap();
    let (node, _) = first_node();
    let doc = bench_json(&[
        "--dir",
        dir,
        "--size",
        "8M",
        "--reader-node",
        "same",
        "--repeats",
        "3",
        "--replicate",
        "--write-every",
        "1ms",
        "--no-matrix",
    ]);
    let cells = doc["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2, "the cell, then the cell through copies");
    assert_eq!(cells[0]["copies"], false);
    let copies = &cells[1];
    assert_eq!(
        (copies["copies"].as_bool(), copies["status"].as_str()),
        (Some(true), Some("ran"))
    );
    let repeats = copies["repeats"].as_array().unwrap();
    let first = &repeats[0]["readers"][0];
    assert_eq!(first["bytes"], 8 << 20, "the whole file");
    // Every 64 KiB chunk, read once, is copied once: 128 copies in the
    // first repeat. A write lands on a chunk while it is read at most
    // once per write, and then either the chunk is served from the file
    // that time (seen on a fresh machine: 127 copies) or its copy, found
    // stale as it was made, is made again (seen beside stress-ng: 129
    // with 28 writes): at most one fewer or one more per write. Copying
    // per block or never would be far outside.
    let first_writes = repeats[0]["writes"].as_u64().unwrap();
    let made = first["copies_made"].as_u64().unwrap();
    assert!(
        (128u64.saturating_sub(first_writes)..=128 + first_writes).contains(&made),
        "8 MiB in 64 KiB copies, each made once, give or take one per write ({first_writes}): {first}"
    );
    for repeat in &repeats[1..] {
        let reader = &repeat["readers"][0];
        assert_eq!(reader["bytes"], 8 << 20);
        assert!(
            reader["from_copies"].as_u64().unwrap() > 4 << 20,
            "later repeats read the copies: {reader}"
        );
    }
    // The readers of a repeat start after the writer's first write.
    let writes: Vec<u64> = repeats
        .iter()
        .map(|r| r["writes"].as_u64().unwrap())
        .collect();
    assert!(
        writes.iter().all(|&w| w >= 1),
        "the writer wrote during every repeat: {writes:?}"
    );
    // Where the kernel says the copies' pages are: all on the readers'
    // node, as sysfs names it.
    let page = copies["cache_before"]["page_size"].as_u64().unwrap();
    let pages = &copies["copy_audit"]["pages"];
    assert_eq!(
        pages[node.to_string()].as_u64(),
        Some((8 << 20) / page),
        "{pages}"
    );
    assert_eq!(doc["gains"][0]["memory_bytes"], 8 << 20);
    assert!(scratch.files().is_empty(), "{:?}", scratch.files());
}

/// Bytes process `pid` has read with read(2) and the like, all its
/// threads together (`rchar` of `/proc/PID/io`); `None` once it has
/// ended (a zombie, or gone).
fn bytes_read(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    if stat.rsplit_once(')')?.1.split_whitespace().next() == Some("Z") {
        return None;
    }
    let io = fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))?
        .trim()
        .parse()
        .ok()
}

#[test]
fn one_ctrl_c_ends_the_set_up_of_a_huge_file() {
    // Holes on tmpfs, as large as the node allows (at most 16 GiB):
    // reading them in copies zeros for seconds and allocates nothing.
    let (node, _) = first_node();
    let memory = node_memory_total(node);
    let size = (memory - (memory >> 3)).min(16 << 30);
    let path = format!("/dev/shm/numalab-setup-{}", std::process::id());
    let file = fs::File::create(&path).unwrap();
    file.set_len(size).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(["pagecache", "bench", &path, "--reader-node", "same"])
        .args(["--cache-node", &node.to_string()])
        .args(["--repeats", "1", "--no-matrix", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Reading it in (its own progress, not the clock): 64 MiB read.
    loop {
        match bytes_read(child.id()) {
            Some(n) if n >= 64 << 20 => break,
            Some(_) => std::thread::sleep(Duration::from_millis(5)),
            None => {
                let out = child.wait_with_output().unwrap();
                let _ = fs::remove_file(&path);
                panic!("ended before reading 64 MiB: {}", stderr(&out));
            }
        }
    }
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    // One signal ends it: it must not read on. Counted in bytes read,
    // not time: a reader stops at its next MiB.
    let at_signal = bytes_read(child.id());
    let mut last = at_signal;
    while let Some(now) = bytes_read(child.id()) {
        last = Some(now);
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output().unwrap();
    let _ = fs::remove_file(&path);
    let after = last.unwrap_or(0).saturating_sub(at_signal.unwrap_or(0));
    assert!(
        after <= 256 << 20,
        "numalab read {} MiB more of a {} MiB file after one Ctrl-C",
        after >> 20,
        size >> 20
    );
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["interrupted"], true);
    assert_eq!(doc["cells"][0]["status"], "interrupted");
}

#[test]
fn a_node_typed_wrong_is_refused_in_the_words_of_every_command() {
    // A node past this machine's last, and one past Linux's: each flag
    // that takes a node says it as `exec -m` does, the flag named first.
    let absent = sysfs_nodes().into_iter().max().unwrap() + 1;
    for node in [absent.to_string(), "4096".to_owned()] {
        let exec = numalab(&["exec", "-m", &node, "--", "true"]);
        let said = stderr(&exec);
        let reason = said
            .trim()
            .strip_prefix(&format!("numalab: error: --membind={node}: "))
            .unwrap_or_else(|| panic!("{said}"))
            .to_owned();
        for (flag, args) in [
            (
                "--cache-node",
                vec!["pagecache", "bench", "--size", "1M", "--cache-node", &node],
            ),
            (
                "--reader-node",
                vec!["pagecache", "bench", "--size", "1M", "--reader-node", &node],
            ),
            (
                "--node",
                vec!["pagecache", "load", "/etc/hostname", "--node", &node],
            ),
        ] {
            let out = numalab(&args);
            assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
            assert_eq!(
                stderr(&out).trim(),
                format!("numalab: error: {flag} {node}: {reason}"),
                "{args:?}"
            );
        }
    }
}
