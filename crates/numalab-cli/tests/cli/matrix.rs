//! `numalab matrix`: measured node-by-node latency and bandwidth.

use crate::common::*;
use serde_json::Value;
use std::process::Command;

#[test]
fn matrix_ctrl_c_finishes_the_cell_and_writes_what_was_measured() {
    let dir = Scratch::new("matrix-interrupt");
    let result = dir.path("m.json");
    // A latency cell of a few seconds (20 samples, huge and 4 KiB pages),
    // then bandwidth: Ctrl-C during the first must skip the second.
    let child = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args([
            "matrix",
            "--latency",
            "--bandwidth",
            "--size",
            "64MiB",
            "--repeats",
            "20",
            "-o",
            &result,
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let out = ctrl_c(child);
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("interrupted (Ctrl-C, SIGTERM or SIGHUP)"),
        "{}",
        stderr(&out)
    );
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&result).unwrap()).unwrap();
    assert_eq!(doc["interrupted"], true);
    let cells = doc["latency"]["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 1, "the cell under way was finished");
    assert_eq!(
        cells[0]["latency_ns"]["samples"].as_array().unwrap().len(),
        20
    );
    assert!(doc["bandwidth"].is_null(), "bandwidth was not started");
    assert_eq!(dir.files(), ["m.json"], "no temporary file left");
}

#[test]
fn matrix_quick_measures_every_pair_with_placement_checked() {
    let dir = std::env::temp_dir().join(format!("numalab-matrix-{}", std::process::id()));
    let json = dir.join("m.json");
    let stem = dir.join("figs/m");
    // A result file in a directory that does not exist is refused before
    // anything is measured.
    let out = numalab(&["matrix", "--quick", "-o", json.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "nothing measured");
    std::fs::create_dir_all(dir.join("figs")).unwrap();
    let out = numalab(&[
        "matrix",
        "--quick",
        "--size",
        "8M",
        "-o",
        json.to_str().unwrap(),
        "--plot",
        stem.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(doc["schema"], "numalab.matrix");
    assert_eq!(doc["schema_version"], 1);

    // The shape is the machine's: CPU nodes x memory nodes.
    let (with_cpus, with_memory) = sysfs_roles();
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_u64().unwrap() as u32)
            .collect()
    };
    assert_eq!(ids(&doc["shape"]["initiators"]), with_cpus);
    assert_eq!(ids(&doc["shape"]["targets"]), with_memory);
    let cells = with_cpus.len() * with_memory.len();
    assert_eq!(doc["firmware"].as_array().unwrap().len(), cells);
    assert_eq!(doc["settings"]["latency_bytes"], 8 << 20);

    for (matrix, figure) in [("latency", "latency_ns"), ("bandwidth", "read_gbps")] {
        let list = doc[matrix]["cells"].as_array().unwrap();
        assert_eq!(list.len(), cells, "{matrix}");
        for cell in list {
            assert_eq!(cell["placement"]["verdict"], "match", "{matrix}: {cell}");
            let target = cell["target"].as_u64().unwrap();
            let found = &cell["placement"]["found"]["per_node"];
            assert!(
                found[target.to_string()].as_u64().unwrap() > 0,
                "{matrix}: pages counted on node {target}: {found}"
            );
            assert!(cell[figure]["median"].as_f64().unwrap() > 0.0, "{cell}");
            assert_eq!(cell[figure]["samples"].as_array().unwrap().len(), 3);
            assert!(cell.get("firmware").is_some());
        }
    }
    for cell in doc["latency"]["cells"].as_array().unwrap() {
        let i = cell["initiator"].as_u64().unwrap();
        if cell["target"] == cell["initiator"] {
            assert_eq!(cell["ratio_to_local"], 1.0, "a node is its own reference");
        }
        assert!(with_cpus.contains(&(i as u32)));
    }
    assert_eq!(
        doc["placement_summary"]["all_match"], true,
        "{}",
        doc["warnings"]
    );
    assert!(doc["environment"]["host"]["kernel"].is_string());

    // The figures were drawn, and the saved JSON is all they need.
    for suffix in [
        "latency",
        "bandwidth-read",
        "bandwidth-write",
        "bandwidth-copy",
    ] {
        for ext in ["svg", "png"] {
            let path = dir.join(format!("figs/m-{suffix}.{ext}"));
            assert!(path.exists(), "{} missing", path.display());
        }
    }
    // `numalab plot` redraws them from the saved result alone.
    let again = dir.join("again");
    let out = numalab(&[
        "plot",
        json.to_str().unwrap(),
        "-o",
        again.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(dir.join("again-latency.svg").exists(), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn matrix_tables_and_csv_carry_every_cell() {
    let out = numalab(&[
        "matrix",
        "--quick",
        "--latency",
        "--size",
        "4M",
        "--cpu-nodes",
        "0",
        "--mem-nodes",
        "0",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for needle in [
        "idle latency, ns (median)",
        "remote/local latency: measured | firmware SLIT/10",
        "idle latency in detail",
        "placement: ",
    ] {
        assert!(text.contains(needle), "{needle} missing:\n{text}");
    }
    assert!(!text.contains("bandwidth"), "--latency alone: {text}");
    let out = numalab(&[
        "matrix",
        "--quick",
        "--bandwidth",
        "--size",
        "4M",
        "--threads",
        "1",
        "--cpu-nodes",
        "0",
        "--mem-nodes",
        "0",
        "--csv",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let csv = stdout(&out);
    let mut lines = csv.lines();
    assert!(lines
        .next()
        .unwrap()
        .starts_with("measurement,initiator,target,cpus,variant"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let variants: Vec<&str> = rows.iter().map(|r| r[4]).collect();
    assert_eq!(variants, ["read", "write-nt", "copy-nt"], "{csv}");
    for row in &rows {
        assert_eq!(row[0], "bandwidth");
        assert_eq!(row[3].split(' ').count(), 1, "--threads 1: {row:?}");
        assert_eq!(row[19], "match", "{row:?}");
    }
}

#[test]
fn matrix_refuses_bad_input_before_measuring() {
    let cpus = sysfs_list("/sys/devices/system/node/node0/cpulist").len();
    let too_many = (cpus + 1).to_string();
    for (args, needles) in [
        (
            vec!["matrix", "--nodes", "7"],
            vec!["--nodes=7", "node 7 does not exist"],
        ),
        (
            vec!["matrix", "--mem-nodes", "0,9"],
            vec!["--mem-nodes=0,9", "node 9 does not exist"],
        ),
        (
            vec!["matrix", "--cpu-nodes", "0", "--threads", &too_many],
            vec![&*format!("--threads {too_many}"), "node 0 has"],
        ),
        (
            vec!["matrix", "--size", "64T"],
            vec!["--size 64 TiB", "on node 0, which has", "free"],
        ),
        (vec!["matrix", "--size", "1K"], vec!["too small"]),
        (
            vec!["matrix", "--size", "12Q"],
            vec!["invalid size \"12Q\""],
        ),
        (vec!["matrix", "--threads", "0"], vec!["--threads"]),
        (vec!["matrix", "--xml", "x.xml"], vec!["--plan"]),
    ] {
        let out = numalab(&args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = stderr(&out);
        for needle in needles {
            assert!(
                err.contains(needle),
                "{args:?}: {needle} missing from: {err}"
            );
        }
        assert!(stdout(&out).is_empty(), "{args:?}: nothing measured");
    }
}

#[test]
fn matrix_plan_shows_another_machines_shape_and_firmware() {
    let xml = topologies().join("cpuless.xml");
    let out = numalab(&["matrix", "--plan", "--xml", xml.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["schema"], "numalab.matrix-plan");
    let topo = numalab::Topology::from_xml_file(&xml).unwrap();
    let expect = |set: numalab::NodeSet| -> Value { set.iter().collect::<Vec<_>>().into() };
    assert_eq!(doc["shape"]["initiators"], expect(topo.nodes_with_cpus()));
    assert_eq!(doc["shape"]["targets"], expect(topo.nodes_with_memory()));
    let cells = doc["firmware"].as_array().unwrap();
    assert_eq!(
        cells.len(),
        topo.nodes_with_cpus().len() * topo.nodes_with_memory().len()
    );
    for cell in cells {
        let (i, t) = (
            cell["initiator"].as_u64().unwrap() as u32,
            cell["target"].as_u64().unwrap() as u32,
        );
        assert_eq!(cell["slit"].as_u64(), topo.distance(i, t), "{cell}");
    }
    let out = numalab(&["matrix", "--plan", "--xml", xml.to_str().unwrap()]);
    let text = stdout(&out);
    assert!(text.contains("has no CPUs: a target only"), "{text}");
    assert!(text.contains("has no memory: an initiator only"), "{text}");
    assert!(
        text.contains("firmware distances (SLIT, 10 = local)"),
        "{text}"
    );
    // A CPU-less node cannot run the measurements.
    let cpuless = topo
        .nodes_with_memory()
        .difference(&topo.nodes_with_cpus())
        .first()
        .unwrap()
        .to_string();
    let out = numalab(&[
        "matrix",
        "--plan",
        "--xml",
        xml.to_str().unwrap(),
        "--cpu-nodes",
        &cpuless,
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("has no CPUs"), "{}", stderr(&out));
}
