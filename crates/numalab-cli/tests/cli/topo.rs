//! `numalab topo` against sysfs, numactl and hwloc.

use crate::common::*;
use serde_json::Value;
use std::process::Command;

#[test]
fn topo_json_matches_sysfs() {
    let out = numalab(&["topo", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["schema"], "numalab.topo");
    assert_eq!(doc["schema_version"], 1);
    let ids: Vec<u32> = doc["topology"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(ids, sysfs_nodes());
    for node in doc["topology"]["nodes"].as_array().unwrap() {
        let id = node["id"].as_u64().unwrap();
        let meminfo =
            std::fs::read_to_string(format!("/sys/devices/system/node/node{id}/meminfo")).unwrap();
        let total_kb: u64 = meminfo
            .lines()
            .find(|l| l.contains("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(3))
            .unwrap()
            .parse()
            .unwrap();
        let reported = node["memory_bytes"].as_u64().unwrap();
        let diff = (reported as f64 - (total_kb * 1024) as f64).abs();
        assert!(
            diff <= 0.01 * (total_kb * 1024) as f64,
            "node {id}: {reported} vs {total_kb} kB"
        );
    }
    let memory_now = doc["memory_now"].as_array().unwrap();
    assert_eq!(memory_now.len(), ids.len());
    assert!(doc["kernel"]["thp_enabled"].is_string() || doc["kernel"]["thp_enabled"].is_null());
}

#[test]
fn topo_table_agrees_with_numactl_hardware() {
    let Ok(numactl) = Command::new("numactl").arg("--hardware").output() else {
        numalab::testing::cannot_check("numactl not installed (apt-get install numactl)");
        return;
    };
    let numactl = stdout(&numactl);
    let out = numalab(&["topo"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    // "node 0 cpus: 0 1" and "node 0 size: 5082 MB" in numactl's words.
    for line in numactl.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let ["node", id, "size:", mb, "MB"] = words[..] {
            let row = table
                .lines()
                .find(|l| l.split_whitespace().next() == Some(id))
                .unwrap_or_else(|| panic!("no row for node {id}:\n{table}"));
            assert!(
                row.contains(&format!("{mb} MiB")),
                "node {id} size {mb} MB, row: {row}"
            );
        }
        if let ["node", id, "cpus:", cpus @ ..] = &words[..] {
            let ours: numalab::CpuSet = cpus.iter().map(|c| c.parse::<u32>().unwrap()).collect();
            let row = table
                .lines()
                .find(|l| l.split_whitespace().next() == Some(id))
                .unwrap();
            let listed = if ours.is_empty() {
                "-".to_string()
            } else {
                ours.to_string()
            };
            assert_eq!(
                row.split_whitespace().nth(1),
                Some(listed.as_str()),
                "{row}"
            );
        }
    }
}

#[test]
fn topo_shows_other_machines() {
    let out = numalab(&["topo", "--synthetic", "pack:2 numa:2 core:4 pu:2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("4 NUMA nodes"), "{text}");
    assert!(
        !text.contains("kernel:"),
        "kernel settings are this machine's, not the synthetic one's"
    );

    let xml = topologies().join("24em64t-2n6c2t-pci.xml");
    let out = numalab(&["topo", "--xml", xml.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["topology"]["nodes"].as_array().unwrap().len(), 2);
    assert_eq!(doc["topology"]["distances"]["values"][0][1], 20);
    assert!(doc["memory_now"].is_null());

    let out = numalab(&["topo", "--xml", "/nonexistent.xml"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("/nonexistent.xml"),
        "{}",
        stderr(&out)
    );
    let out = numalab(&["topo", "--synthetic", "bogus:3"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("bogus:3"), "{}", stderr(&out));
}

#[test]
fn topo_csv_and_output_file() {
    let out = numalab(&["topo", "--csv"]);
    assert!(out.status.success());
    let csv = stdout(&out);
    assert!(
        csv.starts_with("node,cpus,memory_bytes,free_bytes"),
        "{csv}"
    );
    assert_eq!(csv.lines().count(), 1 + sysfs_nodes().len());

    let dir = std::env::temp_dir().join(format!("numalab-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("topo.json");
    let out = numalab(&["topo", "-o", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(doc["schema"], "numalab.topo");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        1,
        "no temporary left"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
