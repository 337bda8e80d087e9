//! The `numalab` binary as users run it.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn numalab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(args)
        .output()
        .expect("numalab runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn topologies() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/topologies")
}

fn sysfs_nodes() -> Vec<u32> {
    let online = std::fs::read_to_string("/sys/devices/system/node/online").unwrap();
    let set: numalab::NodeSet = online.trim().parse().unwrap();
    set.iter().collect()
}

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
        if std::env::var_os("CI").is_some() {
            panic!("numactl is missing in CI (apt-get install numactl)");
        }
        eprintln!("skipped: numactl not installed (apt-get install numactl)");
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
    assert!(text.contains("4 NUMA node(s)"), "{text}");
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
        err.contains("requested on node(s) 0, which have") && err.contains("MiB) free"),
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

#[test]
fn help_explains_every_command() {
    for cmd in [
        vec!["--help"],
        vec!["topo", "--help"],
        vec!["exec", "--help"],
        vec!["ring", "--help"],
        vec!["matrix", "--help"],
        vec!["report", "--help"],
        vec!["fill", "--help"],
    ] {
        let out = numalab(&cmd);
        assert!(out.status.success(), "{cmd:?}");
        assert!(stdout(&out).contains("Usage:"), "{cmd:?}");
    }
    let help = stdout(&numalab(&["exec", "--help"]));
    for flag in [
        "--membind",
        "--interleave",
        "--preferred",
        "--preferred-many",
        "--weighted-interleave",
        "--localalloc",
        "--cpunodebind",
        "--physcpubind",
    ] {
        assert!(help.contains(flag), "{flag} missing from exec --help");
    }
}

#[test]
fn closed_pipe_is_not_an_error() {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(["topo", "--xml"])
        .arg(topologies().join("96em64t-4n4d3ca2co-pci.xml"))
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // stdout is now closed.
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{err}");
}

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// A scratch directory removed at the end of the test.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("numalab-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    fn path(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_owned()
    }
    fn files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn small() -> String {
    examples()
        .join("deck-exp1-small.toml")
        .to_str()
        .unwrap()
        .to_owned()
}

#[test]
fn run_reports_threads_regions_and_invariants_as_json() {
    let out = numalab(&[
        "run",
        &small(),
        "--set",
        "access.ops=30000",
        "--set",
        "run.repeats=2",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["schema"], "numalab.run");
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["interrupted"], false);
    assert_eq!(doc["experiment"]["access"]["ops"], 30000);
    // What the emulated-NUMA suite checks: each thread's node, each
    // region's pages per node.
    let nodes = sysfs_nodes();
    for thread in doc["plan"]["threads"].as_array().unwrap() {
        let node = thread["node"].as_u64().unwrap() as u32;
        assert!(nodes.contains(&node), "{thread}");
    }
    for region in doc["regions"].as_array().unwrap() {
        let pages: u64 = region["audit"]["found"]["per_node"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(pages, (64 << 20) / 4096, "{region}");
        assert!(region["as_requested"].is_boolean());
    }
    for repeat in doc["repeats"].as_array().unwrap() {
        let time = repeat["time_to_last_s"].as_f64().unwrap();
        let mut ops = 0;
        for t in repeat["threads"].as_array().unwrap() {
            let (o, b) = (t["ops"].as_u64().unwrap(), t["bytes"].as_u64().unwrap());
            assert_eq!(b, o * 128, "bytes = ops x op size");
            assert_eq!(
                t["writes"].as_u64().unwrap() * 3 / o,
                1,
                "a third are writes (2:1)"
            );
            assert!(t["busy_s"].as_f64().unwrap() <= time);
            ops += o;
        }
        assert_eq!(ops, 30000);
    }
    assert!(doc["figures"]["time_to_last_s"]["median"].as_f64().unwrap() > 0.0);
    assert!(
        stderr(&out).contains("ignores"),
        "a note about the ignored [sweep]"
    );
}

#[test]
fn run_table_says_when_placement_did_not_match() {
    let out = numalab(&[
        "run",
        &small(),
        "--set",
        "access.ops=10000",
        "--set",
        "run.repeats=1",
        "--set",
        "memory.policy=remote",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(table.contains("time to last thread"), "{table}");
    assert!(
        table.contains(" thread  cpu  node"),
        "per-thread rows: {table}"
    );
    if sysfs_nodes().len() == 1 {
        assert!(
            table.contains("WARNING: memory.policy = \"remote\""),
            "{table}"
        );
        assert!(table.contains("cannot be remote"), "{table}");
        assert!(
            table
                .lines()
                .any(|l| l.contains("remote") && l.trim_end().ends_with("NO")),
            "{table}"
        );
    }
    let out = numalab(&[
        "run",
        &small(),
        "--set",
        "access.ops=10000",
        "--set",
        "run.repeats=1",
        "--csv",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let csv = stdout(&out);
    assert!(
        csv.starts_with("run,warmup,repeat_interrupted,thread,cpu,node,region"),
        "{csv}"
    );
    assert_eq!(
        csv.lines().count(),
        1 + 2 * 2,
        "header + (warm-up + repeat) x 2 threads"
    );
    let out = numalab(&[
        "run",
        &small(),
        "--set",
        "access.ops=10000",
        "--set",
        "run.repeats=1",
        "--markdown",
    ]);
    assert!(stdout(&out).contains("| figure"), "{}", stdout(&out));
}

#[test]
fn bad_experiments_are_refused_with_their_place() {
    let dir = Scratch::new("bad");
    let file = dir.path("exp.toml");
    std::fs::write(&file, "name = \"x\"\n[memory]\nsise = \"1GiB\"\n").unwrap();
    let out = numalab(&["run", &file]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "{file}:3:1: unknown key `sise` in [memory]; did you mean `size`?"
        )),
        "{err}"
    );
    let out = numalab(&["run", &small(), "--set", "threads.cont=2"]);
    assert!(
        stderr(&out).contains("did you mean `threads.count`?"),
        "{}",
        stderr(&out)
    );
    let out = numalab(&["run", &small(), "--set", "threads.count=4096"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("threads.oversubscribe = true"),
        "{}",
        stderr(&out)
    );
    let out = numalab(&["run", &small(), "--set", "memory.policy=bind:63"]);
    assert!(
        stderr(&out).contains("node 63 does not exist"),
        "{}",
        stderr(&out)
    );
    let out = numalab(&[
        "run",
        &small(),
        "--set",
        "memory.size=64TiB",
        "--set",
        "memory.policy=bind:0",
    ]);
    assert!(stderr(&out).contains("which has"), "{}", stderr(&out));
    let out = numalab(&["run", &small(), "--set", "memory.policy=replicate:0,63"]);
    assert!(
        stderr(&out).contains("memory.policy = \"replicate:0,63\": node 63 does not exist"),
        "{}",
        stderr(&out)
    );
    let out = numalab(&["run", &small(), "--set", "memory.replication=mirror"]);
    assert!(
        stderr(&out).contains("memory.replication") && stderr(&out).contains("copies"),
        "{}",
        stderr(&out)
    );
    let out = numalab(&["sweep", &file]);
    assert!(!out.status.success());
    assert_eq!(dir.files(), ["exp.toml"], "nothing written on failure");
}

#[test]
fn small_examples_run_as_written() {
    let dir = Scratch::new("examples");
    let (_, memory_nodes) = sysfs_roles();
    for name in ["deck-exp1-small", "deck-exp2-small"] {
        let file = examples().join(format!("{name}.toml"));
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.starts_with("# ") && text.contains("numalab sweep examples/"),
            "{name}: a comment header saying what it reproduces and how to run it"
        );
        let json = dir.path(&format!("{name}.json"));
        let out = numalab(&["sweep", file.to_str().unwrap(), "--no-plot", "-o", &json]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let cells = doc["cells"].as_array().unwrap();
        let mut mirror_copies = 0;
        assert_eq!(
            cells.len(),
            if name.contains("exp1") { 12 } else { 6 },
            "{name}"
        );
        for cell in cells {
            let result = &cell["result"];
            assert_eq!(result["interrupted"], false);
            let repeats = result["repeats"].as_array().unwrap();
            assert_eq!(repeats.len(), 3, "{name}");
            for repeat in repeats {
                let ops = result["experiment"]["access"]["ops"].as_u64().unwrap();
                assert_eq!(
                    repeat["ops"].as_u64(),
                    Some(ops),
                    "{name}: every operation done"
                );
            }
            if result["experiment"]["memory"]["policy"] != "replicate" {
                continue;
            }
            // Every copy of the mirror on its own node, each thread reading
            // its node's copy.
            let region = &result["regions"][0];
            let copies = region["replicas"].as_array().unwrap();
            assert!(!copies.is_empty(), "{name}: {region}");
            mirror_copies = copies.len();
            for copy in copies {
                let node = copy["node"].to_string();
                let found = copy["audit"]["found"]["per_node"].as_object().unwrap();
                assert_eq!(found.len(), 1, "{copy}");
                assert_eq!(found[&node].as_u64(), Some((64 << 20) / 4096), "{copy}");
                assert_eq!(copy["as_requested"], true, "{copy}");
            }
            for thread in result["plan"]["threads"].as_array().unwrap() {
                let copy = &copies[thread["replica"].as_u64().unwrap() as usize];
                let node = thread["node"].as_u64().unwrap() as u32;
                if memory_nodes.contains(&node) {
                    assert_eq!(copy["node"], thread["node"], "{thread}");
                }
            }
        }
        if name.contains("exp2") {
            // Every policy of Experiment 2 against local, for 1 and 2 threads.
            let policies: Vec<&str> = doc["comparison"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["policy"].as_str().unwrap())
                .collect();
            assert_eq!(
                policies,
                ["replicate", "interleave", "replicate", "interleave"]
            );
            let cannot_help = doc["warnings"].as_array().unwrap().iter().any(|w| {
                w["kind"] == "inconclusive"
                    && w["message"]
                        .as_str()
                        .unwrap()
                        .contains("replication cannot help on one node")
            });
            assert_eq!(cannot_help, mirror_copies == 1, "{}", doc["warnings"]);
        }
    }
}

#[test]
fn sweep_writes_results_a_figure_and_the_comparison() {
    let dir = Scratch::new("sweep");
    let json = dir.path("s.json");
    let out = numalab(&[
        "sweep",
        &small(),
        "--set",
        "access.ops=10000",
        "--set",
        "run.repeats=1",
        "--set",
        "threads.placement=balanced",
        "-o",
        &json,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(dir.files(), ["s.json", "s.png", "s.svg"]);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["schema"], "numalab.sweep");
    assert_eq!(
        doc["cells"].as_array().unwrap().len(),
        6,
        "threads 1-2 x 3 policies"
    );
    let axes: Vec<&str> = doc["axes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a[0].as_str().unwrap())
        .collect();
    assert_eq!(
        axes,
        ["threads.count", "memory.policy"],
        "the fixed axis is gone"
    );
    let comparison = doc["comparison"].as_array().unwrap();
    assert_eq!(
        comparison.len(),
        4,
        "remote and interleave, for 1 and 2 threads"
    );
    assert!(comparison.iter().all(|c| c["vs_local_percent"].is_number()));
    let svg = std::fs::read_to_string(dir.path("s.svg")).unwrap();
    assert!(
        svg.contains("interleave") && svg.contains("threads.count"),
        "one line per policy"
    );

    let out = numalab(&["plot", &json, "-o", &dir.path("again")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(std::path::Path::new(&dir.path("again.png")).exists());

    let table = numalab(&[
        "sweep",
        &small(),
        "--set",
        "access.ops=5000",
        "--set",
        "run.repeats=1",
        "--set",
        "threads.count=1",
        "--set",
        "threads.placement=balanced",
        "--no-plot",
    ]);
    assert!(table.status.success(), "{}", stderr(&table));
    assert!(
        stdout(&table).contains("time to last thread against local"),
        "{}",
        stdout(&table)
    );
}

#[test]
fn plot_dispatches_on_the_schema() {
    let dir = Scratch::new("plot");
    let file = dir.path("topo.json");
    std::fs::write(&file, "{\"schema\": \"numalab.topo\"}").unwrap();
    let out = numalab(&["plot", &file]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("schema \"numalab.topo\" has no figure"),
        "{}",
        stderr(&out)
    );
    std::fs::write(&file, "{}").unwrap();
    assert!(stderr(&numalab(&["plot", &file])).contains("no \"schema\" field"));
}

/// Sends SIGINT to `child`, as Ctrl-C would, and waits for it to end.
fn ctrl_c(child: std::process::Child) -> std::process::Output {
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    child.wait_with_output().unwrap()
}

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
        stderr(&out).contains("interrupted (Ctrl-C)"),
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
fn ctrl_c_writes_what_was_measured_marked_interrupted() {
    let dir = Scratch::new("interrupt");
    let exp = dir.path("long.toml");
    std::fs::write(
        &exp,
        "[memory]\nsize = \"4MiB\"\n[access]\nduration = \"60s\"\n[run]\nrepeats = 2\nwarmup = 0\n",
    )
    .unwrap();
    let result = dir.path("r.json");
    let child = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(["run", &exp, "-o", &result])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the pinned worker runs (a second thread appears), then
    // press Ctrl-C.
    let tasks = format!("/proc/{}/task", child.id());
    while std::fs::read_dir(&tasks).map_or(0, |d| d.count()) < 2 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = ctrl_c(child);
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&result).unwrap()).unwrap();
    assert_eq!(doc["interrupted"], true);
    assert_eq!(doc["repeats"][0]["interrupted"], true);
    assert!(
        doc["repeats"][0]["ops"].as_u64().unwrap() > 0,
        "what was measured is kept"
    );
    assert_eq!(
        dir.files(),
        ["long.toml", "r.json"],
        "no temporary file left"
    );
}

// ---------------------------------------------------------------------------
// numalab ring: the shared-memory ring between processes.
// ---------------------------------------------------------------------------

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

fn sysfs_list(path: &str) -> Vec<u32> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    if text.trim().is_empty() {
        return Vec::new();
    }
    let set: numalab::NodeSet = text.trim().parse().unwrap();
    set.iter().collect()
}

/// Nodes with CPUs and nodes with memory, as the kernel lists them.
fn sysfs_roles() -> (Vec<u32>, Vec<u32>) {
    let with_cpus = sysfs_nodes()
        .into_iter()
        .filter(|n| !sysfs_list(&format!("/sys/devices/system/node/node{n}/cpulist")).is_empty())
        .collect();
    (with_cpus, sysfs_list("/sys/devices/system/node/has_memory"))
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
    std::fs::create_dir_all(&dir).unwrap();
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

#[test]
fn report_measures_this_machine_and_says_what_it_means() {
    let out = numalab(&["report", "--quick", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["schema"], "numalab.report");
    assert_eq!(
        doc["topology"]["topology"]["nodes"]
            .as_array()
            .unwrap()
            .len(),
        sysfs_nodes().len()
    );
    assert_eq!(
        doc["matrix"]["placement_summary"]["all_match"], true,
        "{}",
        doc["matrix"]["warnings"]
    );
    let cells = doc["sweep"]["cells"].as_array().unwrap();
    assert!(!cells.is_empty());
    for cell in cells {
        assert!(
            cell["result"]["figures"]["time_to_last_s"]["median"]
                .as_f64()
                .unwrap()
                > 0.0
        );
    }
    let findings: Vec<&str> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["text"].as_str())
        .collect();
    assert!(
        findings.iter().any(|f| f.contains("ns per dependent load")),
        "{findings:?}"
    );
    assert!(
        findings.iter().any(|f| f.contains("on the node asked for")),
        "{findings:?}"
    );

    let dir = std::env::temp_dir().join(format!("numalab-report-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("report.html");
    let out = numalab(&["report", "--quick", "-o", page.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.matches("<svg").count() >= 2, "figures are inline");
    assert!(html.contains("Findings") && html.contains("</html>"));
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        1,
        "nothing else left beside the page"
    );
    std::fs::remove_dir_all(&dir).unwrap();

    let out = numalab(&["report", "--quick", "-o", "/nonexistent-dir/r.html"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
}
