//! `numalab fincore` and `numalab pagecache` against util-linux `fincore`
//! on the same files.

use std::fs;
use std::os::unix::fs::FileExt;
use std::process::Command;

use crate::common::*;
use serde_json::Value;

/// util-linux `fincore`'s count of a file's cached pages; `None` (said
/// why) where it cannot run, which fails under CI.
pub fn fincore_pages(path: &str) -> Option<u64> {
    match Command::new("fincore")
        .args([
            "--bytes",
            "--noheadings",
            "--raw",
            "--output",
            "PAGES",
            path,
        ])
        .output()
    {
        Ok(out) if out.status.success() => Some(
            String::from_utf8(out.stdout)
                .unwrap()
                .trim()
                .parse()
                .unwrap(),
        ),
        Ok(out) => panic!("fincore {path}: {}", String::from_utf8_lossy(&out.stderr)),
        Err(err) => {
            cannot_check(format!("fincore (util-linux) cannot run here: {err}"));
            None
        }
    }
}

/// A directory with a written file, a sparse one with one page written
/// in a subdirectory, a link and a FIFO.
fn tree(scratch: &Scratch) {
    fs::write(scratch.0.join("a"), vec![1u8; 64 << 10]).unwrap();
    fs::create_dir(scratch.0.join("sub")).unwrap();
    let sparse = fs::File::create(scratch.0.join("sub/b")).unwrap();
    sparse.set_len(10 << 20).unwrap();
    sparse.write_all_at(b"x", 5 << 20).unwrap();
    std::os::unix::fs::symlink(scratch.0.join("a"), scratch.0.join("link")).unwrap();
    let made = Command::new("mkfifo")
        .arg(scratch.0.join("fifo"))
        .status()
        .unwrap();
    assert!(made.success());
}

#[test]
fn fincore_counts_as_util_linux_fincore_does_and_walks_directories() {
    let scratch = Scratch::new("fincore-tree");
    tree(&scratch);
    let out = numalab(&["fincore", "--json", scratch.0.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["schema"], "numalab.fincore");
    let files = doc["files"].as_array().unwrap();
    let names: Vec<&str> = files.iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(names, [scratch.path("a"), scratch.path("sub/b")]);
    // The link is not followed (a would count twice), the FIFO not opened.
    assert_eq!(doc["skipped"]["links"], 1);
    assert_eq!(doc["skipped"]["special"], 1);
    for file in files {
        let path = file["path"].as_str().unwrap();
        let Some(expected) = fincore_pages(path) else {
            return;
        };
        let cache = &file["cache"];
        assert_eq!(cache["cached"], expected, "{path}: {file}");
        let on_nodes: u64 = cache["per_node"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(on_nodes + cache["unknown"].as_u64().unwrap(), expected);
    }
    assert_eq!(
        files[1]["cache"]["cached"], 1,
        "one page of the sparse file written"
    );
    assert_eq!(files[1]["cache"]["size"], 10 << 20);
    // Every node with memory has its page cache beside the files.
    assert_eq!(doc["nodes"].as_array().unwrap().len(), sysfs_nodes().len());
    // The table: fincore's columns with one per node, and a total.
    let table = numalab(&["fincore", scratch.0.to_str().unwrap()]);
    let text = stdout(&table);
    assert!(text.lines().next().unwrap().contains("RES"), "{text}");
    assert!(text.contains("node0"), "{text}");
    assert!(text.contains("total of 2 files"), "{text}");
    assert!(
        text.contains("1 symbolic link (not followed), 1 FIFO, device or socket"),
        "{text}"
    );
}

#[test]
fn fincore_summarize_adds_up_each_path_as_util_linux_counts_its_files() {
    let scratch = Scratch::new("fincore-summary");
    tree(&scratch);
    let dir = scratch.0.to_str().unwrap();
    let single = scratch.path("a");
    let out = numalab(&["fincore", "-s", "--json", dir, &single]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = doc["files"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(names, [dir, single.as_str()]);
    assert_eq!(
        (rows[0]["files"].as_u64(), rows[1]["files"].as_u64()),
        (Some(2), Some(1))
    );
    // The directory's row is its two files as util-linux counts them.
    let (Some(a), Some(b)) = (
        fincore_pages(&single),
        fincore_pages(&scratch.path("sub/b")),
    ) else {
        return;
    };
    assert_eq!(rows[0]["cache"]["cached"], a + b, "{}", rows[0]);
    assert_eq!(rows[0]["cache"]["size"], (64 << 10) + (10 << 20));
    let table = stdout(&numalab(&["fincore", "--summarize", dir]));
    assert!(table.contains(&format!("{dir} (2 files)")), "{table}");
    assert_eq!(
        table.lines().filter(|l| l.contains(dir)).count(),
        1,
        "{table}"
    );
}

#[test]
fn fincore_names_what_it_cannot_count_counts_the_rest_and_exits_1() {
    let scratch = Scratch::new("fincore-bad");
    tree(&scratch);
    let missing = scratch.path("missing");
    let (fifo, a) = (scratch.path("fifo"), scratch.path("a"));
    // A FIFO named directly is opened without waiting for a writer.
    let out = numalab(&["fincore", &missing, &fifo, &a]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{missing}: No such file or directory")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{fifo}: is a FIFO, not a regular file")),
        "{err}"
    );
    let text = stdout(&out);
    assert!(
        text.contains(&a),
        "the readable file is still counted: {text}"
    );
}

/// Whether process `pid` is blocked opening a file (`/proc/PID/syscall`
/// names `openat`, 257 on x86-64, or `open`, 2).
fn blocked_in_open(pid: u32) -> bool {
    let syscall = fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
    matches!(syscall.split_whitespace().next(), Some("257" | "2"))
}

#[test]
fn fincore_and_pagecache_refuse_a_fifo_or_device_without_opening_it() {
    // A writer opening a FIFO waits until a reader opens it: it is still
    // waiting after numalab ends exactly when numalab did not open it.
    let scratch = Scratch::new("fincore-no-open");
    let fifo = scratch.path("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let mut writer = Command::new("sh")
        .args(["-c", &format!("exec 3> '{fifo}'")])
        .spawn()
        .unwrap();
    while !blocked_in_open(writer.id()) {
        assert!(writer.try_wait().unwrap().is_none(), "the writer ended");
        std::thread::yield_now();
    }
    for args in [
        vec!["fincore", fifo.as_str()],
        vec!["pagecache", "drop", fifo.as_str()],
        vec!["pagecache", "load", fifo.as_str(), "--node", "0"],
    ] {
        let out = numalab(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("{fifo}: is a FIFO, not a regular file")),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(
            writer.try_wait().unwrap().is_none() && blocked_in_open(writer.id()),
            "numalab {args:?} opened the FIFO"
        );
    }
    // A device named directly: refused by its kind alone.
    let out = numalab(&["fincore", "/dev/null"]);
    assert!(
        stderr(&out).contains("/dev/null: is a character device, not a regular file"),
        "{}",
        stderr(&out)
    );
    writer.kill().unwrap();
    writer.wait().unwrap();
}

#[test]
fn fincore_reports_the_same_with_one_thread_or_several() {
    let scratch = Scratch::new("fincore-threads");
    tree(&scratch);
    for i in 0..50 {
        fs::write(
            scratch.0.join(format!("sub/f{i:02}")),
            vec![3u8; 4096 * (i % 4)],
        )
        .unwrap();
    }
    let dir = scratch.0.to_str().unwrap();
    let files = |threads: &str| {
        let out = numalab(&["fincore", "--json", "--threads", threads, dir]);
        assert!(out.status.success(), "{}", stderr(&out));
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        (doc["files"].clone(), doc["total"].clone())
    };
    let one = files("1");
    assert_eq!(one.0.as_array().unwrap().len(), 52, "{}", one.0);
    assert_eq!(files("3"), one);
    // In walk order: a, then sub/ by name.
    assert_eq!(one.0[1]["path"], scratch.path("sub/b"));
    assert_eq!(one.0[2]["path"], scratch.path("sub/f00"));
    for bad in ["0", "1025"] {
        let out = numalab(&["fincore", "--threads", bad, dir]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "--threads {bad}: {}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains("give 1 to 1024 threads"),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn pagecache_drop_and_load_move_a_files_cache_as_fincore_sees_it() {
    let scratch = Scratch::new("pagecache");
    let path = scratch.path("data");
    fs::write(&path, vec![7u8; 4 << 20]).unwrap();
    fs::File::open(&path).unwrap().sync_all().unwrap();
    let pages = (4 << 20) / 4096;
    let drop = numalab(&["pagecache", "drop", "--json", &path]);
    assert!(drop.status.success(), "{}", stderr(&drop));
    let doc: Value = serde_json::from_slice(&drop.stdout).unwrap();
    assert_eq!(doc["schema"], "numalab.pagecache");
    assert_eq!(doc["action"]["kind"], "drop");
    let Some(after_drop) = fincore_pages(&path) else {
        return;
    };
    assert_eq!(doc["files"][0]["after"]["cached"], after_drop);
    assert_eq!(after_drop, 0, "a clean file no one maps leaves the cache");
    let node = sysfs_nodes()[0].to_string();
    let load = numalab(&["pagecache", "load", "--json", "--node", &node, &path]);
    assert!(load.status.success(), "{}", stderr(&load));
    let doc: Value = serde_json::from_slice(&load.stdout).unwrap();
    let file = &doc["files"][0];
    assert_eq!(file["before"]["cached"], 0);
    assert_eq!(file["read_bytes"], 4 << 20);
    assert_eq!(fincore_pages(&path), Some(pages));
    assert_eq!(file["after"]["cached"], pages);
    assert_eq!(file["after"]["per_node"][&node], pages, "{file}");
    // A node without memory is refused before the file is touched.
    let drop = numalab(&["pagecache", "drop", &path]);
    assert!(drop.status.success());
    let refused = numalab(&["pagecache", "load", "--node", "1000", &path]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("node 1000 does not exist; this machine has node"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(fincore_pages(&path), Some(0), "nothing was read");
}

#[test]
fn pagecache_load_refuses_a_file_larger_than_the_nodes_memory_unread() {
    let scratch = Scratch::new("pagecache-sparse");
    let node = sysfs_nodes()[0];
    let memory = node_memory_total(node);
    // Sparse: a user makes one in a second; reading it would pull its
    // holes into the cache for ever after the node is full.
    let path = scratch.path("sparse");
    let file = fs::File::create(&path).unwrap();
    file.set_len(memory + (1 << 20)).unwrap();
    file.write_all_at(b"x", 0).unwrap();
    let small = scratch.path("small");
    fs::write(&small, vec![1u8; 1 << 20]).unwrap();
    let node = node.to_string();
    let out = numalab(&[
        "pagecache",
        "load",
        "--json",
        "--node",
        &node,
        &path,
        &small,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("sparse: is ") && err.contains(&format!("more than node {node}'s")),
        "{err}"
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["files"].as_array().unwrap().len(),
        1,
        "the small file is loaded"
    );
    if let Some(pages) = fincore_pages(&path) {
        assert!(pages <= 1, "nothing read: {pages} pages cached");
    }
}

#[test]
fn a_file_name_with_a_newline_cannot_forge_a_row_or_a_line() {
    let scratch = Scratch::new("fincore-newline");
    std::fs::write(scratch.0.join("x\nnumalab: forged"), b"a").unwrap();
    let dir = scratch.path("");
    let out = numalab(&["fincore", &dir]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(table.contains("x\\nnumalab: forged"), "{table}");
    assert!(
        !table.lines().any(|l| l.starts_with("numalab: forged")),
        "{table}"
    );
    let missing = scratch.path("y\nnumalab: forged");
    let out = numalab(&["fincore", &missing]);
    let err = stderr(&out);
    assert!(err.contains("y\\nnumalab: forged: No such file"), "{err}");
    assert!(
        !err.lines().any(|l| l.starts_with("numalab: forged")),
        "{err}"
    );
}

/// In Markdown a `|` in a name closed its cell: `fincore --markdown` of
/// `data.bin|x | 999 GiB |` showed a file `data.bin` and cells of the
/// name's making. It is `\|` in a cell now (and `pagecache load|drop`'s
/// tables the same), so every row keeps its five cells.
#[test]
fn a_bar_in_a_file_name_cannot_forge_markdown_cells() {
    let scratch = Scratch::new("fincore-bar");
    let name = "pi|pe | 999 GiB | 1 |";
    std::fs::write(scratch.0.join(name), b"p").unwrap();
    let path = scratch.path(name);
    for args in [
        vec!["fincore", "--markdown", path.as_str()],
        vec!["pagecache", "drop", "--markdown", path.as_str()],
    ] {
        let out = numalab(&args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let table = stdout(&out);
        assert!(table.contains("pi\\|pe \\| 999 GiB \\| 1 \\|"), "{table}");
        let row = table.lines().find(|l| l.contains("pi\\|pe")).unwrap();
        let header = table.lines().find(|l| l.starts_with('|')).unwrap();
        let cells = |line: &str| line.replace("\\|", "").matches('|').count();
        assert_eq!(cells(row), cells(header), "{args:?}: {table}");
    }
}

#[test]
fn pagecache_drop_of_a_file_in_memory_says_so() {
    let path = format!("/dev/shm/numalab-test-drop-{}", std::process::id());
    fs::write(&path, vec![1u8; 8192]).unwrap();
    let out = numalab(&["pagecache", "drop", &path]);
    let _ = fs::remove_file(&path);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        said.contains("2 pages stayed: it lives in memory (tmpfs or shared memory)"),
        "{said}"
    );
}

/// A 1 MiB file just written, so all 256 pages cached by util-linux
/// fincore's count; `None` (and why) where fincore cannot run.
fn cached_file(scratch: &Scratch) -> Option<String> {
    let path = scratch.path("data");
    fs::write(&path, vec![7u8; 1 << 20]).unwrap();
    fs::File::open(&path).unwrap().sync_all().unwrap();
    let cached = fincore_pages(&path)?;
    assert_eq!(cached, 256, "written, so cached");
    Some(path)
}

#[test]
fn a_refused_load_with_drop_first_drops_nothing() {
    let scratch = Scratch::new("pagecache-refused-drop");
    let Some(path) = cached_file(&scratch) else {
        return;
    };
    let out = numalab(&["pagecache", "load", "--drop-first", "--node", "1000", &path]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("node 1000 does not exist; this machine has node"),
        "{}",
        stderr(&out)
    );
    assert_eq!(fincore_pages(&path), Some(256), "the cache was not dropped");
    // Accepted, it drops and reads again.
    let node = sysfs_nodes()[0].to_string();
    let out = numalab(&[
        "pagecache",
        "load",
        "--drop-first",
        "--node",
        &node,
        "--json",
        &path,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["files"][0]["read_bytes"], 1 << 20);
    assert_eq!(fincore_pages(&path), Some(256));
}

#[test]
fn every_refused_pagecache_command_leaves_the_cache_alone() {
    let scratch = Scratch::new("pagecache-refusals");
    let Some(path) = cached_file(&scratch) else {
        return;
    };
    let node = sysfs_nodes()[0].to_string();
    let link = scratch.path("link");
    std::os::unix::fs::symlink(scratch.path("elsewhere"), &link).unwrap();
    let refusals: [&[&str]; 8] = [
        &["load", "--node", "4096", &path],
        &["load", "--node", "1000", &path],
        &["load", "--drop-first", "--node", "4096", &path],
        &["load", "--drop-first", "--node", "0-1", &path],
        &[
            "load",
            "--drop-first",
            "--node",
            &node,
            "-o",
            "/dev/null",
            &path,
        ],
        &["load", "--drop-first", "--node", &node, "-o", &link, &path],
        &["drop", "-o", "/dev/null", &path],
        &["drop", "--json", "--csv", &path],
    ];
    for args in refusals {
        let mut all = vec!["pagecache"];
        all.extend(args);
        let out = numalab(&all);
        assert!(!out.status.success(), "{args:?} ran");
        assert!(!stderr(&out).trim().is_empty(), "{args:?}: no reason given");
        assert_eq!(
            fincore_pages(&path),
            Some(256),
            "{args:?} changed the cache: {}",
            stderr(&out)
        );
    }
}

#[test]
fn a_path_that_cannot_be_read_gets_its_error_not_an_empty_table() {
    let node = sysfs_nodes()[0].to_string();
    let commands: [&[&str]; 3] = [
        &["fincore", "/nonexistent/numalab"],
        &["pagecache", "load", "--node", &node, "/nonexistent/numalab"],
        &["pagecache", "drop", "/nonexistent/numalab"],
    ];
    for args in commands {
        let out = numalab(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(stdout(&out), "", "{args:?}: nothing counted, no table");
        assert!(
            stderr(&out).contains("/nonexistent/numalab: No such file or directory"),
            "{args:?}: {}",
            stderr(&out)
        );
        // A script asking for JSON still gets the document, naming it.
        let mut json = args.to_vec();
        json.push("--json");
        let out = numalab(&json);
        assert_eq!(out.status.code(), Some(1), "{json:?}");
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["failed"][0]["path"], "/nonexistent/numalab", "{doc}");
    }
}
