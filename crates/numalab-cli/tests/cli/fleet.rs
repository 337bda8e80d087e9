//! `numalab report --out-dir` on every host, and `numalab fleet` merging
//! the files: synthetic fleets made from real reports (`numalab report
//! --quick --json` saved in the emulated two-socket, CXL and lopsided
//! machines, and this machine, measured once here) with figures perturbed
//! and outliers planted.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::common::*;
use serde_json::Value;

fn saved(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/results")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// This machine's report, measured once with `report --quick --out-dir`
/// as a Slurm task would: its file name and its document.
fn this_machine() -> &'static (String, Value) {
    static REPORT: OnceLock<(String, Value)> = OnceLock::new();
    REPORT.get_or_init(|| {
        let dir = Scratch::new("fleet-this-machine");
        let out = Command::new(env!("CARGO_BIN_EXE_numalab"))
            .args(["report", "--quick", "--out-dir"])
            .arg(&dir.0)
            .env("SLURM_JOB_ID", "4242")
            .env("SLURM_PROCID", "3")
            .env("SLURM_NODEID", "3")
            .env("SLURM_JOB_NODELIST", "node[001-128]")
            .env("OMPI_COMM_WORLD_RANK", "3")
            .env("OMPI_COMM_WORLD_SIZE", "128")
            .env("PMIX_RANK", "3")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("JOB_COMPLETION_INDEX")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(out.stdout.is_empty(), "the report goes to the file only");
        let files = dir.files();
        assert_eq!(files.len(), 1, "{files:?}");
        let text = std::fs::read_to_string(dir.0.join(&files[0])).unwrap();
        (files[0].clone(), serde_json::from_str(&text).unwrap())
    })
}

/// A tiny deterministic generator: numbers in [0, 1).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Every figure the fleet compares, in place: (latency or read/write/copy
/// GB/s, initiator, target, the median).
fn for_each_figure(doc: &mut Value, mut change: impl FnMut(&str, u64, u64, &mut Value)) {
    let matrix = &mut doc["matrix"];
    if let Some(cells) = matrix["latency"]["cells"].as_array_mut() {
        for cell in cells {
            let (i, t) = (
                cell["initiator"].as_u64().unwrap(),
                cell["target"].as_u64().unwrap(),
            );
            change("latency", i, t, &mut cell["latency_ns"]["median"]);
        }
    }
    if let Some(cells) = matrix["bandwidth"]["cells"].as_array_mut() {
        for cell in cells {
            let (i, t) = (
                cell["initiator"].as_u64().unwrap(),
                cell["target"].as_u64().unwrap(),
            );
            for metric in ["read", "write", "copy"] {
                let figure = &mut cell[format!("{metric}_gbps")]["median"];
                if figure.is_number() {
                    change(metric, i, t, figure);
                }
            }
        }
    }
}

fn scale(figure: &mut Value, by: f64) {
    *figure = (figure.as_f64().unwrap() * by).into();
}

/// A copy of `template` as host `name`, every figure moved by up to ±3%.
fn host(template: &Value, name: &str, seed: u64) -> Value {
    let mut doc = template.clone();
    doc["host"] = name.into();
    let mut rng = Rng(seed);
    for_each_figure(&mut doc, |_, _, _, figure| {
        scale(figure, 0.97 + 0.06 * rng.next())
    });
    doc
}

fn write(dir: &Path, name: &str, doc: &Value) {
    std::fs::write(
        dir.join(format!("{name}.json")),
        serde_json::to_vec(doc).unwrap(),
    )
    .unwrap();
}

/// How much memory the planted host lacks on node 0: 8 GiB, or half the
/// node on a machine with less than 16 GiB there.
fn short_by(doc: &Value) -> u64 {
    let memory = doc["topology"]["topology"]["nodes"][0]["memory_bytes"]
        .as_u64()
        .unwrap();
    (8 << 30).min(memory / 2)
}

/// THP off, or on where this machine has it off.
fn other_thp(doc: &Value) -> &'static str {
    match doc["topology"]["kernel"]["thp_enabled"].as_str() {
        Some("never") => "always",
        _ => "never",
    }
}

fn fleet(args: &[&str]) -> (std::process::Output, Value) {
    let mut all = vec!["fleet", "--json"];
    all.extend(args);
    let out = numalab(&all);
    let doc = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out, doc)
}

#[test]
fn report_out_dir_writes_one_self_describing_file_per_host() {
    let (file, doc) = this_machine();
    let host = doc["host"].as_str().unwrap();
    assert_eq!(file, &format!("{host}.json"));
    assert_eq!(doc["schema"], "numalab.report");
    let task = &doc["task"];
    assert_eq!(task["slurm"]["SLURM_JOB_ID"], "4242");
    assert_eq!(task["slurm"]["SLURM_JOB_NODELIST"], "node[001-128]");
    assert_eq!(task["open_mpi"]["OMPI_COMM_WORLD_SIZE"], "128");
    assert_eq!(task["pmix"]["PMIX_RANK"], "3");
    assert!(task.get("kubernetes").is_none(), "{task}");
    let fingerprint = &doc["fingerprint"];
    assert_eq!(
        fingerprint["nodes"].as_array().unwrap().len(),
        sysfs_nodes().len()
    );
    assert!(fingerprint["kernel"]
        .as_str()
        .is_some_and(|k| !k.is_empty()));
    assert_eq!(fingerprint["quick"], true);

    let dir = Scratch::new("fleet-out-dir");
    let out = numalab(&["report", "--quick", "--out-dir", &dir.path("missing")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("the directory does not exist"),
        "{}",
        stderr(&out)
    );
    std::fs::write(dir.path("plain"), "").unwrap();
    let out = numalab(&["report", "--quick", "--out-dir", &dir.path("plain")]);
    assert!(stderr(&out).contains("not a directory"), "{}", stderr(&out));
    // A link where the host's file goes is refused, not followed.
    std::fs::create_dir(dir.path("links")).unwrap();
    std::fs::write(dir.path("victim"), "precious").unwrap();
    std::os::unix::fs::symlink(dir.path("victim"), dir.0.join("links").join(file)).unwrap();
    let out = numalab(&["report", "--quick", "--out-dir", &dir.path("links")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(dir.path("victim")).unwrap(),
        "precious"
    );
}

#[test]
fn planted_outliers_are_each_found_and_named_and_nothing_else() {
    let (_, vm) = this_machine();
    let two_socket = saved("report-two-socket.json");
    let cxl = saved("report-cxl.json");
    let dir = Scratch::new("fleet-planted");
    let mut seed = 1;
    let mut made = |template: &Value, prefix: &str, count: usize| {
        for i in 0..count {
            let name = format!("{prefix}{i:03}");
            let mut doc = host(template, &name, seed);
            seed += 1;
            match name.as_str() {
                // A bandwidth cell at 70% of its figure.
                "ts010" => for_each_figure(&mut doc, |metric, i, t, figure| {
                    if (metric, i, t) == ("read", 0, 1) {
                        scale(figure, 0.7)
                    }
                }),
                // A latency 1.3 times its figure.
                "cx020" => for_each_figure(&mut doc, |metric, i, t, figure| {
                    if (metric, i, t) == ("latency", 1, 3) {
                        scale(figure, 1.3)
                    }
                }),
                // A node 8 GiB short, a DIMM or two (its saved
                // fingerprint still says otherwise: fleet computes its own).
                "vm030" => {
                    let memory = &mut doc["topology"]["topology"]["nodes"][0]["memory_bytes"];
                    *memory = (memory.as_u64().unwrap() - short_by(vm)).into();
                }
                // Transparent huge pages off (or on, if this machine has
                // them off).
                "vm040" => {
                    let other = other_thp(vm);
                    doc["topology"]["kernel"]["thp_enabled"] = other.into();
                    doc["matrix"]["environment"]["kernel"]["thp_enabled"] = other.into();
                }
                _ => {}
            }
            write(&dir.0, &name, &doc);
        }
    };
    made(&two_socket, "ts", 70);
    made(&cxl, "cx", 70);
    made(vm, "vm", 60);

    let (out, doc) = fleet(&[dir.0.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    assert_eq!(doc["schema"], "numalab.fleet");
    assert_eq!(doc["files"], 200);
    let found: Vec<(String, String, f64)> = doc["outliers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let cell = &o["cell"];
            (
                o["host"].as_str().unwrap().to_owned(),
                format!(
                    "{} {}->{}",
                    cell["metric"].as_str().unwrap(),
                    cell["initiator"],
                    cell["target"]
                ),
                o["ratio"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(found.len(), 2, "no false alarm: {found:?}");
    // By group: the CXL hosts (named first) make group 1.
    assert_eq!(
        (found[0].0.as_str(), found[0].1.as_str()),
        ("cx020", "latency 1->3")
    );
    assert_eq!(
        (found[1].0.as_str(), found[1].1.as_str()),
        ("ts010", "read 0->1")
    );
    assert!((1.25..1.35).contains(&found[0].2), "{found:?}");
    assert!((0.65..0.75).contains(&found[1].2), "{found:?}");

    // Three groups of the three machines, and the two odd hosts alone.
    let groups = doc["groups"].as_array().unwrap();
    let sizes: Vec<u64> = groups
        .iter()
        .map(|g| g["hosts"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [70, 70, 58, 1, 1]);
    let group_of = |name: &str| {
        doc["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["host"] == name)
            .unwrap()["group"]
            .as_u64()
            .unwrap() as usize
    };
    let differences = |name: &str| -> Vec<String> {
        groups[group_of(name) - 1]["differences"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap().to_owned())
            .collect()
    };
    // Each odd host against its own machine's group: what differs, only.
    let vm_group = group_of("vm000");
    for odd in ["vm030", "vm040"] {
        assert!(group_of(odd) > 3, "{odd} alone");
        assert_eq!(
            groups[group_of(odd) - 1]["compared_with"].as_u64(),
            Some(vm_group as u64)
        );
    }
    let thp = vm["topology"]["kernel"]["thp_enabled"]
        .as_str()
        .unwrap_or("unknown");
    assert_eq!(
        differences("vm040"),
        [format!("THP {} instead of {thp}", other_thp(vm))]
    );
    let short = differences("vm030");
    let gib = |bytes: u64| format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64);
    let memory = vm["topology"]["topology"]["nodes"][0]["memory_bytes"]
        .as_u64()
        .unwrap();
    assert_eq!(
        short,
        [format!(
            "node 0: memory {} instead of {}",
            gib(memory - short_by(vm)),
            gib(memory)
        )]
    );

    // For people: the hosts and cells named, with the group's median.
    let out = numalab(&["fleet", dir.0.to_str().unwrap()]);
    let text = stdout(&out);
    for name in [
        "ts010",
        "cx020",
        "vm030",
        "vm040",
        "read 0->1",
        "latency 1->3",
    ] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    // A health check fails on them.
    let out = numalab(&[
        "fleet",
        dir.0.to_str().unwrap(),
        "--fail-on-outliers",
        "--max-groups",
        "5",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("2 figures of 2 hosts flagged"),
        "{}",
        stderr(&out)
    );

    // The page: a table and a box plot per cell of every group.
    let page = dir.path("fleet.html");
    let out = numalab(&["fleet", dir.0.to_str().unwrap(), "--html", &page, "--csv"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let html = std::fs::read_to_string(&page).unwrap();
    let cells: usize = groups
        .iter()
        .map(|g| g["cells"].as_array().unwrap().len())
        .sum();
    assert_eq!(html.matches("<svg").count(), cells);
    assert_eq!(html.matches("<table>").count(), 2 + groups.len());
    assert_eq!(
        html.matches("<div class=\"scroll\"><table>").count(),
        2 + groups.len()
    );
    assert!(html.contains("<circle") && html.contains("ts010"));
    // The drill-down: the flagged hosts and the two odd ones alone in
    // their groups, each linked to its own report page, and no other.
    let hosts_dir = dir.0.join("fleet-hosts");
    let mut pages: Vec<String> = std::fs::read_dir(&hosts_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    assert_eq!(
        pages,
        ["cx020.html", "ts010.html", "vm030.html", "vm040.html"]
    );
    for page in &pages {
        assert!(
            html.contains(&format!("href=\"fleet-hosts/{page}\"")),
            "{page}"
        );
        let own = std::fs::read_to_string(hosts_dir.join(page)).unwrap();
        assert!(own.contains("<h2>Findings</h2>"), "{page} is a report page");
    }
    // CSV: a row per group and cell, flagged hosts named.
    let csv = stdout(&out);
    assert_eq!(csv.lines().count(), 1 + cells);
    assert!(csv
        .lines()
        .any(|l| l.starts_with("1,") || l.starts_with("2,")));
    assert!(
        csv.contains(",ts010\n") && csv.contains(",cx020\n"),
        "{csv}"
    );
}

#[test]
fn real_reports_of_different_machines_form_groups_of_their_own() {
    let (_, vm) = this_machine();
    let dir = Scratch::new("fleet-real");
    let names = ["two-socket", "cxl", "lopsided"];
    let docs = names.map(|name| saved(&format!("report-{name}.json")));
    for (name, mut doc) in names.iter().zip(docs) {
        // The emulated guests are all called "(none)": as many hosts.
        doc["host"] = (*name).into();
        write(&dir.0, name, &doc);
    }
    write(&dir.0, "this", vm);
    let (out, doc) = fleet(&[dir.0.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let groups = doc["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 4, "{}", doc["groups"]);
    for group in &groups[1..] {
        assert!(!group["differences"].as_array().unwrap().is_empty());
        assert_eq!(group["judged"], false, "one host is not judged");
    }
    assert!(doc["outliers"].as_array().unwrap().is_empty());
}

#[test]
fn bad_input_is_named_one_line_each_and_the_rest_merges() {
    let template = saved("report-two-socket.json");
    let dir = Scratch::new("fleet-bad");
    let reports = dir.0.join("results");
    let empty = dir.0.join("empty");
    std::fs::create_dir(&reports).unwrap();
    std::fs::create_dir(&empty).unwrap();
    for i in 0..5 {
        write(
            &reports,
            &format!("n{i}"),
            &host(&template, &format!("n{i}"), i),
        );
    }
    let mut future = host(&template, "future", 9);
    future["schema_version"] = 2.into();
    write(&reports, "future", &future);
    let text = serde_json::to_string(&host(&template, "cut", 10)).unwrap();
    std::fs::write(reports.join("cut.json"), &text[..text.len() / 3]).unwrap();
    std::fs::write(reports.join("foreign.json"), r#"{"jobs": [1, 2, 3]}"#).unwrap();
    let mut topo = template["topology"].clone();
    topo["schema"] = "numalab.topo".into();
    topo["schema_version"] = 1.into();
    write(&reports, "topo", &topo);
    // The second report of n1, written earlier: left out.
    let mut again = host(&template, "n1", 11);
    again["created"] = "2000-01-01T00:00:00Z".into();
    write(&reports, "n1-old", &again);
    std::fs::write(reports.join("notes.txt"), "not a report, not read").unwrap();

    let (out, doc) = fleet(&[reports.to_str().unwrap(), empty.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(doc["hosts"].as_array().unwrap().len(), 5);
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 6, "{err}");
    let said = |file: &str, why: &str| {
        assert!(
            lines.iter().any(|l| l.starts_with("numalab: left out ")
                && l.contains(file)
                && l.contains(why)),
            "{file}: {why} not said:\n{err}"
        )
    };
    said(
        "future.json",
        "numalab.report version 2; this numalab reads version 1",
    );
    said("cut.json", "truncated: the JSON ends at line");
    said(
        "foreign.json",
        "not a numalab document: it has no \"schema\" field",
    );
    said("topo.json", "a numalab.topo document, not numalab.report");
    said("n1-old.json", "a second report of host n1: kept");
    said("empty", "no *.json file in this directory");
    // The output lists them too.
    let left: Vec<&str> = doc["left_out"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["path"].as_str().unwrap())
        .collect();
    assert_eq!(left.len(), 6, "{left:?}");

    // Nothing readable at all: an error, after the reasons.
    let out = numalab(&["fleet", empty.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("no *.json file") && err.contains("no report to merge"),
        "{err}"
    );
    let out = numalab(&["fleet", &dir.path("nonexistent")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("cannot read"), "{}", stderr(&out));
    let out = numalab(&["fleet", reports.to_str().unwrap(), "--threshold", "1.5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("above 0 and at most 1"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn sbatch_prints_a_script_that_parses() {
    let out = numalab(&["fleet", "--sbatch", "--out-dir", "node results/it's"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let script = stdout(&out);
    assert!(script.starts_with("#!/bin/bash\n"));
    for line in [
        "#SBATCH --ntasks-per-node=1",
        "srun --ntasks-per-node=1",
        "report --json --out-dir \"$job_dir\"",
        "fleet \"$job_dir\" --expect \"${SLURM_JOB_NODELIST:-$(hostname -s)}\"",
        "--threshold 0.9 --fail-on-outliers --max-groups 1",
        "--dependency=afterok:$SLURM_JOB_ID",
        r#"job_dir='node results/it'\''s'/"${SLURM_JOB_ID:-local}""#,
        "#SBATCH --no-kill",
    ] {
        assert!(script.contains(line), "{line} missing:\n{script}");
    }
    let dir = Scratch::new("fleet-sbatch");
    let path = dir.path("fleet.sbatch");
    std::fs::write(&path, &script).unwrap();
    let bash = Command::new("bash").args(["-n", &path]).output().unwrap();
    assert!(bash.status.success(), "{}", stderr(&bash));
    let out = numalab(&["fleet", "--sbatch", "results"]);
    assert_eq!(out.status.code(), Some(2), "--sbatch takes no directory");
}

#[test]
fn hosts_measured_by_different_builds_are_named_by_build() {
    let (_, vm) = this_machine();
    let dir = Scratch::new("fleet-builds");
    for (i, build) in [
        "0.1.0+aaaaaaaaaaaa",
        "0.1.0+aaaaaaaaaaaa",
        "0.1.0+bbbbbbbbbbbb",
    ]
    .iter()
    .enumerate()
    {
        let mut doc = host(vm, &format!("n{i}"), i as u64);
        doc["numalab_version"] = (*build).into();
        write(&dir.0, &format!("n{i}"), &doc);
    }
    // A version that is not one is not printed.
    let mut forged = host(vm, "n3", 3);
    forged["numalab_version"] = "0.1.0\nWARNING: forged".into();
    write(&dir.0, "n3", &forged);
    let (out, doc) = fleet(&[dir.0.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let hosts = doc["hosts"].as_array().unwrap();
    let build_of =
        |name: &str| hosts.iter().find(|h| h["host"] == name).unwrap()["numalab_version"].clone();
    assert_eq!(build_of("n0"), "0.1.0+aaaaaaaaaaaa");
    assert_eq!(build_of("n2"), "0.1.0+bbbbbbbbbbbb");
    assert_eq!(build_of("n3"), Value::Null);
    let text = numalab(&["fleet", dir.0.to_str().unwrap()]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("Measured by 3 numalab builds: 0.1.0+aaaaaaaaaaaa (2 hosts: n0, n1); 0.1.0+bbbbbbbbbbbb (1 host: n2); an unnamed build (1 host: n3)."),
        "{text}"
    );
    assert!(!text.contains("forged"), "{text}");
}

/// `-o` or `--html` naming a host's report in the directory merged is
/// refused before anything is written (it used to replace that host's
/// report with the fleet's document or page, exit 0).
#[test]
fn an_output_over_a_merged_report_is_refused_and_the_report_kept() {
    let dir = Scratch::new("fleet-output-input");
    let template = saved("report-two-socket.json");
    for host in ["a1", "a2"] {
        let mut doc = template.clone();
        doc["host"] = host.into();
        std::fs::write(dir.0.join(format!("{host}.json")), doc.to_string()).unwrap();
    }
    let target = dir.0.join("a1.json");
    let before = std::fs::read(&target).unwrap();
    for flag in ["-o", "--html"] {
        let out = Command::new(env!("CARGO_BIN_EXE_numalab"))
            .args(["fleet", "--json"])
            .arg(&dir.0)
            .arg(flag)
            .arg(&target)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{flag}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("host a1's report") && stderr(&out).contains("would replace it"),
            "{}",
            stderr(&out)
        );
        assert_eq!(std::fs::read(&target).unwrap(), before, "{flag}");
    }
    // A file read and left out (not a report) is an input all the same.
    let notes = dir.0.join("notes.json");
    std::fs::write(&notes, "{}").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(["fleet", "--json"])
        .arg(&dir.0)
        .arg("-o")
        .arg(&notes)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("would replace it"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read(&notes).unwrap(), b"{}");
}

/// `--max-groups` means something only with `--fail-on-outliers`; alone
/// it was accepted and ignored.
#[test]
fn max_groups_without_fail_on_outliers_is_a_usage_error() {
    let out = numalab(&["fleet", ".", "--max-groups", "3"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--fail-on-outliers"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn baseline_holds_each_groups_fingerprint_hosts_and_limits() {
    // Five hosts of one machine whose read 0->0 figures are 1x to 5x a
    // saved report's, and two hosts of another (THP changed): the
    // baseline's medians and limits come from those files, by the rule
    // (median x 0.9 for a bandwidth, / 0.9 for a latency).
    let dir = Scratch::new("fleet-baseline");
    let template = saved("report-two-socket.json");
    let mut base_read = 0.0;
    for_each_figure(&mut template.clone(), |metric, i, t, figure| {
        if (metric, i, t) == ("read", 0, 0) {
            base_read = figure.as_f64().unwrap();
        }
    });
    for n in 1..=5u32 {
        let mut doc = template.clone();
        doc["host"] = format!("n{n}").into();
        for_each_figure(&mut doc, |metric, i, t, figure| {
            if (metric, i, t) == ("read", 0, 0) {
                scale(figure, f64::from(n));
            }
        });
        write(&dir.0, &format!("n{n}"), &doc);
    }
    for n in 6..=7 {
        let mut doc = template.clone();
        doc["host"] = format!("n{n}").into();
        doc["topology"]["kernel"]["thp_enabled"] = other_thp(&template).into();
        write(&dir.0, &format!("n{n}"), &doc);
    }
    let out_dir = Scratch::new("fleet-baseline-out");
    let path = out_dir.path("baseline.json");
    let (out, _) = fleet(&[dir.0.to_str().unwrap(), "--baseline", &path]);
    assert!(out.status.success(), "{}", stderr(&out));
    let baseline: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(baseline["schema"], "numalab.baseline");
    let groups = baseline["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2);
    let hosts = |g: &Value| -> Vec<String> {
        g["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(hosts(&groups[0]), ["n1", "n2", "n3", "n4", "n5"]);
    assert_eq!(hosts(&groups[1]), ["n6", "n7"]);
    assert_eq!(groups[1]["fingerprint"]["thp"], other_thp(&template));
    let cell = |g: &Value, metric: &str| -> Value {
        g["cells"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| {
                c["cell"]["metric"] == metric
                    && c["cell"]["initiator"] == 0
                    && c["cell"]["target"] == 0
            })
            .unwrap()
            .clone()
    };
    let read = cell(&groups[0], "read");
    let median = read["median"].as_f64().unwrap();
    assert!((median - 3.0 * base_read).abs() < 1e-9 * median, "{read}");
    assert!((read["limit"].as_f64().unwrap() - 0.9 * median).abs() < 1e-9 * median);
    let latency = cell(&groups[0], "latency");
    let median = latency["median"].as_f64().unwrap();
    assert!((latency["limit"].as_f64().unwrap() - median / 0.9).abs() < 1e-9 * median);
    // Two hosts cannot be judged: their group keeps its fingerprint, no limits.
    assert!(groups[1]["cells"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["limit"].is_null()));
    // A baseline over one of the reports merged is refused, the report kept.
    let report = dir.path("n1.json");
    let before = std::fs::read(&report).unwrap();
    let (out, _) = fleet(&[dir.0.to_str().unwrap(), "--baseline", &report]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("--baseline"), "{}", stderr(&out));
    assert_eq!(std::fs::read(&report).unwrap(), before);
}

/// A baseline from three copies of this machine's report, each changed by
/// `change`, merged with `threshold`; returns its path.
fn baseline_of_this_machine(dir: &Scratch, threshold: &str, change: impl Fn(&mut Value)) -> String {
    let reports = dir.0.join("reports");
    std::fs::create_dir_all(&reports).unwrap();
    let memory = fix_memory(dir);
    for n in 1..=3 {
        let mut doc = this_machine().1.clone();
        doc["host"] = format!("good{n}").into();
        for node in doc["topology"]["topology"]["nodes"].as_array_mut().unwrap() {
            let id = node["id"].as_u64().unwrap();
            let (_, bytes) = memory.iter().find(|(n, _)| *n == id).unwrap();
            node["memory_bytes"] = (*bytes).into();
        }
        change(&mut doc);
        write(&reports, &format!("good{n}"), &doc);
    }
    let path = dir.path("baseline.json");
    let (out, _) = fleet(&[
        reports.to_str().unwrap(),
        "--threshold",
        threshold,
        "--baseline",
        &path,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    path
}

/// Takes a copy of each NUMA node's `meminfo` into `dir` and returns the
/// memory each gives, by node. A VM may online memory as it is used (this
/// development VM's node 0 grows under load), so a check made seconds
/// after its baseline would see another machine: the baselines of the
/// check tests hold these figures, and [`check_in`] shows the check these
/// copies.
fn fix_memory(dir: &Scratch) -> Vec<(u64, u64)> {
    let copies = dir.0.join("meminfo");
    std::fs::create_dir_all(&copies).unwrap();
    let mut memory = Vec::new();
    for id in sysfs_nodes() {
        let name = format!("node{id}");
        let text =
            std::fs::read_to_string(format!("/sys/devices/system/node/{name}/meminfo")).unwrap();
        std::fs::write(copies.join(&name), &text).unwrap();
        memory.push((u64::from(id), meminfo_total(&text)));
    }
    memory
}

/// `numalab` for a check against a baseline of `dir`: as root, in a mount
/// namespace of its own where each node's `meminfo` is the copy
/// [`fix_memory`] took, so that the machine it checks is the one its
/// baseline describes; otherwise as it is (memory onlined between the
/// copy and the check would then be seen).
fn check_in(dir: &Scratch) -> Command {
    let numalab = env!("CARGO_BIN_EXE_numalab");
    let found = |name: &str| {
        ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
            .iter()
            .any(|d| Path::new(d).join(name).is_file())
    };
    if !(is_root() && found("unshare") && found("mount")) {
        return Command::new(numalab);
    }
    // `/sys` made private in the new namespace, so that the bind mounts
    // stay there (not `--propagation private`, which changes `/` and
    // fails where `/` is no mount point: in a chroot).
    let mut script = String::from("mount --make-rprivate /sys && ");
    for entry in std::fs::read_dir(dir.0.join("meminfo")).unwrap() {
        let copy = entry.unwrap().path();
        let node = copy.file_name().unwrap().to_string_lossy().into_owned();
        script += &format!(
            "mount --bind '{}' /sys/devices/system/node/{node}/meminfo && ",
            copy.display()
        );
    }
    script += "exec \"$0\" \"$@\"";
    let mut command = Command::new("unshare");
    command
        .args(["--mount", "--propagation", "unchanged", "--", "sh", "-c"])
        .arg(script)
        .arg(numalab);
    command
}

#[test]
fn check_is_healthy_within_limits_and_names_the_figure_past_one() {
    // Limits at 1% of the median (a bandwidth) and 100x (a latency): this
    // machine, measured again now, is within them however busy it is.
    let dir = Scratch::new("check-healthy");
    let baseline = baseline_of_this_machine(&dir, "0.01", |_| {});
    let out = check_in(&dir)
        .args(["check", "--baseline", &baseline])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out)
            .lines()
            .next()
            .unwrap()
            .contains(" healthy (baseline group 1, "),
        "{}",
        stdout(&out)
    );
    let out = check_in(&dir)
        .args(["check", "--baseline", &baseline, "--json"])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (doc["schema"].as_str(), doc["healthy"].as_bool()),
        (Some("numalab.check"), Some(true))
    );
    let cells = doc["cells"].as_array().unwrap();
    assert!(
        !cells.is_empty()
            && cells
                .iter()
                .all(|c| c["failed"] == false && c["value"].is_number())
    );

    // The same machine with a baseline whose read 0->0 was 100x what it
    // measures: that figure is named, below its limit.
    let dir = Scratch::new("check-slow");
    let baseline = baseline_of_this_machine(&dir, "0.9", |doc| {
        for_each_figure(doc, |metric, i, t, figure| {
            if (metric, i, t) == ("read", 0, 0) {
                scale(figure, 100.0);
            }
        })
    });
    let out = check_in(&dir)
        .args(["check", "--baseline", &baseline])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let line = stdout(&out).lines().next().unwrap().to_owned();
    assert!(
        line.contains(" unhealthy: ")
            && line.contains("read 0->0 ")
            && line.contains("below the limit"),
        "{line}"
    );
}

#[test]
fn check_names_what_differs_from_the_nearest_group_and_measures_nothing() {
    // The healthy hosts had twice this machine's memory on node 0 (a DIMM
    // missing here, as the check sees it).
    let dir = Scratch::new("check-fingerprint");
    let baseline = baseline_of_this_machine(&dir, "0.9", |doc| {
        let memory = &mut doc["topology"]["topology"]["nodes"][0]["memory_bytes"];
        *memory = (memory.as_u64().unwrap() * 2).into();
    });
    let out = numalab(&["check", "--baseline", &baseline, "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let reason = doc["reason"].as_str().unwrap();
    assert!(
        reason.contains("no baseline group has this machine's fingerprint")
            && reason.contains("node 0: memory "),
        "{reason}"
    );
    assert!(
        doc["cells"].as_array().unwrap().is_empty(),
        "nothing measured"
    );
    assert!(
        stderr(&out).contains(reason),
        "the line on stderr too when stdout is JSON: {}",
        stderr(&out)
    );

    // numalab's own trouble is 2: a file that is not a baseline.
    let report = dir.0.join("reports/good1.json");
    let out = numalab(&["check", "--baseline", report.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("numalab.baseline") || stderr(&out).contains("schema"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn check_drains_through_scontrol_and_resumes_only_its_own_drain() {
    use std::os::unix::fs::PermissionsExt;
    // A stand-in scontrol: logs every call, and shows the node as the
    // test's state file says.
    let dir = Scratch::new("check-drain");
    let bin = dir.0.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("scontrol");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho \"$*\" >> \"$SCONTROL_LOG\"\n[ \"$1\" = show ] && cat \"$SCONTROL_STATE\"\nexit 0\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (log, state) = (dir.0.join("log"), dir.0.join("state"));
    let (good, bad) = (
        Scratch::new("check-drain-healthy"),
        Scratch::new("check-drain-unhealthy"),
    );
    let healthy = baseline_of_this_machine(&good, "0.01", |_| {});
    let unhealthy = baseline_of_this_machine(&bad, "0.9", |doc| {
        let memory = &mut doc["topology"]["topology"]["nodes"][0]["memory_bytes"];
        *memory = (memory.as_u64().unwrap() * 2).into();
    });
    let run = |baseline: &str, shown: &str, node_env: Option<&str>| -> (i32, String) {
        std::fs::write(&state, format!("NodeName=n1 Arch=x86_64 {shown}\n")).unwrap();
        let _ = std::fs::remove_file(&log);
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
        let mut command = check_in(&good);
        command
            .args(["check", "--baseline", baseline, "--drain"])
            .env("PATH", path)
            .env("SCONTROL_LOG", &log)
            .env("SCONTROL_STATE", &state);
        match node_env {
            Some(name) => command.env("SLURMD_NODENAME", name),
            None => command.args(["--node", "n1"]),
        };
        let out = command.output().unwrap();
        let calls = std::fs::read_to_string(&log).unwrap_or_default();
        (
            out.status.code().unwrap(),
            format!("{calls}\n(stderr: {})", stderr(&out)),
        )
    };
    // Unhealthy and up: drained, the line as the reason.
    let (code, calls) = run(&unhealthy, "State=IDLE Reason=", None);
    assert_eq!(code, 1, "{calls}");
    let drain = calls
        .lines()
        .find(|l| l.starts_with("update "))
        .unwrap_or_else(|| panic!("{calls}"));
    assert!(
        drain.starts_with("update NodeName=n1 State=DRAIN Reason=numalab check: no baseline group"),
        "{drain}"
    );
    assert!(drain.contains("node 0: memory "), "{drain}");
    // Healthy and drained by numalab: resumed (the node's name from slurmd).
    let (code, calls) = run(
        &healthy,
        "State=IDLE+DRAIN Reason=numalab check: read 0->0 1.0 GB/s below the limit [root@2026-11-27T22:00:00]",
        Some("n1"),
    );
    assert_eq!(code, 0, "{calls}");
    assert!(
        calls
            .lines()
            .any(|l| l == "update NodeName=n1 State=RESUME"),
        "{calls}"
    );
    // An administrator's drain is never resumed, nor its reason replaced.
    for baseline in [&healthy, &unhealthy] {
        let (_, calls) = run(
            baseline,
            "State=IDLE+DRAIN Reason=bad DIMM, ticket 4242 [admin@2026-11-27T21:00:00]",
            None,
        );
        assert!(!calls.contains("update"), "{calls}");
        assert!(calls.contains("show node n1"), "{calls}");
    }
    // Healthy and up: nothing changed.
    let (_, calls) = run(&healthy, "State=IDLE Reason=", None);
    assert!(!calls.contains("update"), "{calls}");
}

/// `--expect` names each host of a Slurm host list without a report, by
/// the report's Slurm node name, host name or short host name; fails
/// `--fail-on-outliers`; and refuses a list that does not read before
/// reading anything.
#[test]
fn expect_names_the_hosts_without_a_report() {
    let template = saved("report-two-socket.json");
    let dir = Scratch::new("fleet-expect");
    // node002 wrote its report under its full name, node004 under a name
    // of its own with Slurm's node name in its task.
    write(&dir.0, "a", &host(&template, "node001", 1));
    write(&dir.0, "b", &host(&template, "node002.cluster.example", 2));
    let mut renamed = host(&template, "c4", 4);
    renamed["task"]["slurm"]["SLURMD_NODENAME"] = "node004".into();
    write(&dir.0, "c", &renamed);
    let path = dir.0.to_str().unwrap();

    let (out, doc) = fleet(&[path, "--expect", "node[001-004]", "--expect", "gpu1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(doc["expected"], 5);
    assert_eq!(doc["missing"], serde_json::json!(["node003", "gpu1"]));
    assert!(
        stderr(&out).contains("numalab: no report from 2 hosts of the 5 expected: node003, gpu1"),
        "{}",
        stderr(&out)
    );

    let out = numalab(&[
        "fleet",
        path,
        "--expect",
        "node[001-004]",
        "--fail-on-outliers",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("1 host of the 4 expected without a report.")
            && text.contains("Expected, no report"),
        "{text}"
    );
    assert!(
        stderr(&out).contains("1 host expected without a report: exit status 1"),
        "{}",
        stderr(&out)
    );

    // Every host there: nothing missing, and no failure for it.
    let (out, doc) = fleet(&[path, "--expect", "node001,node002 node004"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(doc["missing"], serde_json::json!([]));
    // Without --expect, nothing is said of hosts expected.
    let (_, doc) = fleet(&[path]);
    assert!(doc.get("expected").is_none(), "{doc}");

    for (list, why) in [
        ("node[4-1]", "the range 4-1 runs backwards"),
        ("node[1-4", "its brackets do not pair up"),
        ("n[0-9999999]", "more than 1000000 hosts"),
        (",", "names no host"),
    ] {
        let out = numalab(&["fleet", "/nonexistent", "--expect", list]);
        assert_eq!(out.status.code(), Some(2), "{list}: {}", stderr(&out));
        assert!(stderr(&out).contains(why), "{list}: {}", stderr(&out));
    }
}
