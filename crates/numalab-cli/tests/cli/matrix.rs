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
    // Once the workers have measured a while (their CPU time, not the
    // host's clock).
    wait_for_worker_cpu(child.id(), std::time::Duration::from_millis(500));
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

/// hwloc's `lstopo` without graphics, or why it cannot run here (a failure
/// under CI).
fn lstopo() -> Option<&'static str> {
    for program in ["lstopo-no-graphics", "lstopo"] {
        if Command::new(program).arg("--version").output().is_ok() {
            return Some(program);
        }
    }
    let why = "lstopo (Debian's hwloc package) is not installed";
    numalab::testing::cannot_check(why);
    None
}

fn run_lstopo(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(out.status.success(), "{program} {args:?}: {}", stderr(&out));
    stdout(&out)
}

#[test]
fn matrix_hwloc_xml_gives_hwloc_the_figures_of_the_json() {
    let Some(lstopo) = lstopo() else { return };
    let dir = Scratch::new("matrix-hwloc-xml");
    let xml = dir.path("m.xml");
    // One run, both outputs: the same figures.
    let out = numalab(&[
        "matrix",
        "--quick",
        "--size",
        "8M",
        "--json",
        "--hwloc-xml",
        &xml,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();

    // What the JSON says, in hwloc's integer units: ns, and MiB/s from
    // GB/s (10^9 bytes); Bandwidth is hwloc's mean of read and write.
    let mib = |gbps: f64| (gbps * 1e9 / (1u64 << 20) as f64).round() as u64;
    let median = |cell: &Value, figure: &str| cell[figure]["median"].as_f64().unwrap();
    let mut expected = std::collections::BTreeMap::new();
    let mut pair = |attribute: &str, cell: &Value, value: u64| {
        let (i, t) = (
            cell["initiator"].as_u64().unwrap(),
            cell["target"].as_u64().unwrap(),
        );
        expected.insert((attribute.to_owned(), i, t), value);
    };
    for cell in doc["latency"]["cells"].as_array().unwrap() {
        assert_eq!(cell["placement"]["verdict"], "match", "{cell}");
        let ns = median(cell, "latency_ns").round() as u64;
        pair("Latency", cell, ns);
        pair("ReadLatency", cell, ns);
    }
    for cell in doc["bandwidth"]["cells"].as_array().unwrap() {
        assert_eq!(cell["placement"]["verdict"], "match", "{cell}");
        let (read, write) = (median(cell, "read_gbps"), median(cell, "write_gbps"));
        pair("ReadBandwidth", cell, mib(read));
        pair("WriteBandwidth", cell, mib(write));
        pair("Bandwidth", cell, mib((read + write) / 2.0));
    }
    let (with_cpus, with_memory) = sysfs_roles();
    assert_eq!(expected.len(), 5 * with_cpus.len() * with_memory.len());

    // What hwloc reads from the file. Initiators are cpusets: each is the
    // cpuset of a CPU node, as hwloc itself lists the nodes.
    let mut node_of_cpuset = std::collections::HashMap::new();
    for line in run_lstopo(lstopo, &["-i", &xml, "--only", "numa", "-c", "-p"]).lines() {
        // NUMANode P#0 (18GB) cpuset=0x00000003
        let node: u64 = line["NUMANode P#".len()..]
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let cpuset = line.rsplit_once("cpuset=").unwrap().1.to_owned();
        if with_cpus.contains(&(node as u32)) {
            node_of_cpuset.insert(cpuset, node);
        }
    }
    let memattrs = run_lstopo(lstopo, &["-i", &xml, "--memattrs", "-p"]);
    let mut found = std::collections::BTreeMap::new();
    let mut attribute = String::new();
    for line in memattrs.lines() {
        // Memory attribute #3 name `Latency' flags 6
        if let Some(rest) = line.strip_prefix("Memory attribute #") {
            attribute = rest
                .split('`')
                .nth(1)
                .unwrap()
                .split('\'')
                .next()
                .unwrap()
                .into();
            continue;
        }
        //   NUMANode P#0 = 199 from cpuset 0x00000003 (Machine P#0)
        let Some((target, rest)) = line
            .trim()
            .strip_prefix("NUMANode P#")
            .and_then(|l| l.split_once(" = "))
        else {
            continue;
        };
        let Some((value, initiator)) = rest.split_once(" from cpuset ") else {
            continue; // Capacity, Locality: no initiator
        };
        let cpuset = initiator.split(' ').next().unwrap();
        let initiator = node_of_cpuset[cpuset];
        found.insert(
            (attribute.clone(), initiator, target.parse().unwrap()),
            value.parse::<u64>().unwrap(),
        );
    }
    assert_eq!(found, expected, "lstopo --memattrs:\n{memattrs}");

    // The topology is this machine's, as lstopo sees it.
    let count = |xml: &str, ty: &str| xml.matches(&format!("<object type=\"{ty}\"")).count();
    let written = run_lstopo(lstopo, &["-i", &xml, "--of", "xml"]);
    let live = run_lstopo(lstopo, &["--of", "xml"]);
    for ty in ["NUMANode", "Package", "Core", "PU"] {
        assert_eq!(count(&written, ty), count(&live, ty), "{ty} objects");
    }
    assert_eq!(count(&written, "NUMANode"), sysfs_nodes().len());
    assert_eq!(dir.files(), ["m.xml"], "no temporary file left");
}

#[test]
fn matrix_hwloc_xml_refuses_a_file_it_cannot_write_before_measuring() {
    let dir = Scratch::new("matrix-hwloc-xml-refused");
    let victim = dir.path("victim");
    std::fs::write(&victim, "precious").unwrap();
    let link = dir.path("link.xml");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let missing = dir.path("missing/m.xml");
    let target = dir.path("m.xml");
    for (args, needles) in [
        (
            vec!["--hwloc-xml", dir.0.to_str().unwrap()],
            vec!["is a directory", "name a file in it"],
        ),
        (
            vec!["--hwloc-xml", &link],
            vec!["is a symbolic link", "numalab writes only regular files"],
        ),
        (
            vec!["--hwloc-xml", &missing],
            vec!["does not exist", "create it first"],
        ),
        (
            vec!["-o", &target, "--hwloc-xml", &target],
            vec!["-o names the same file"],
        ),
        (
            vec!["--c2c", "--hwloc-xml", &target],
            vec!["neither is measured", "add --latency or --bandwidth"],
        ),
    ] {
        let out = numalab(&[&["matrix", "--quick"][..], &args].concat());
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{args:?}: one error: {err}");
        assert!(err.starts_with("numalab: error: --hwloc-xml "), "{err}");
        for needle in needles {
            assert!(
                err.contains(needle),
                "{args:?}: {needle} missing from: {err}"
            );
        }
        assert!(stdout(&out).is_empty(), "{args:?}: nothing measured");
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert_eq!(dir.files(), ["link.xml", "victim"], "nothing written");
    // Nothing is measured with --plan, so there is nothing to write.
    let out = numalab(&["matrix", "--plan", "--hwloc-xml", &target]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot be used with"),
        "{}",
        stderr(&out)
    );
}
