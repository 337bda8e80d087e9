//! `numalab run`, `numalab sweep` and `numalab plot`: experiment files end to end.

use crate::common::*;
use serde_json::Value;

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

    // Without -o or --plot nothing is written, here or anywhere.
    let quiet = Scratch::new("sweep-no-files");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args([
            "sweep",
            &small(),
            "--set",
            "access.ops=10000",
            "--set",
            "run.repeats=1",
        ])
        .current_dir(&quiet.0)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("against local"), "{}", stdout(&out));
    assert!(quiet.files().is_empty(), "{:?}", quiet.files());

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
fn sweep_control_measures_local_twice_and_states_the_noise_floor() {
    let out = numalab(&[
        "sweep",
        &small(),
        "--control",
        "--set",
        "access.ops=5000",
        "--set",
        "run.repeats=2",
        "--set",
        "threads.count=1",
        "--set",
        "threads.placement=balanced",
        "--no-plot",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    // The cell table lists the control under local; the comparison has
    // a column for it and a line saying what it means.
    assert_eq!(text.matches("local (A/A)").count(), 1, "{text}");
    assert!(text.contains("local again (A/A)"), "{text}");
    let floor = text
        .lines()
        .find(|l| l.starts_with("A/A control: local measured twice; differences under about"))
        .unwrap_or_else(|| panic!("no noise-floor line in:\n{text}"));
    assert!(floor.contains("% cannot be told apart here"), "{floor}");
    // Without local among the policies there is nothing to control.
    let out = numalab(&[
        "sweep",
        &small(),
        "--control",
        "--set",
        "memory.policy=interleave",
        "--set",
        "threads.count=1",
        "--no-plot",
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("add \"local\""), "{}", stderr(&out));
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

#[test]
fn counts_past_their_limits_exit_non_zero_before_anything_runs() {
    for (sets, message) in [
        // Wrapped warmup + repeats to zero runs, then exited 0.
        (
            &["run.repeats=4294967295"][..],
            "run.repeats = 4294967295 is more than 1000, the most repeats numalab runs",
        ),
        (
            &["run.warmup=4294967295"],
            "run.warmup = 4294967295 is more than 100, the most warm-up runs numalab runs",
        ),
        // Asked for 390 GB of latency samples and aborted.
        (
            &["access.ops=100000000000000"],
            "access.ops = 100000000000000 is more than 1000000000000",
        ),
        (
            &["threads.count=2147483648"],
            "threads.count = 2147483648 is more than 4096, the most threads numalab starts",
        ),
        // Thread spawn panicked, then the process hung.
        (
            &["threads.count=100000", "threads.oversubscribe=true"],
            "threads.count = 100000 is more than 4096",
        ),
        // Panicked in Duration::from_secs_f64.
        (
            &["access.duration=99999999999999999999s"],
            "is longer than 24h, the longest numalab runs",
        ),
    ] {
        let mut args = vec!["run".to_owned(), small(), "--json".to_owned()];
        for set in sets {
            args.extend(["--set".to_owned(), (*set).to_owned()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = numalab(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{sets:?}: {err}");
        assert!(err.contains(message), "{sets:?}: {err}");
        assert!(out.stdout.is_empty(), "{sets:?}: nothing measured");
    }
}

#[test]
fn grids_and_files_that_cannot_be_run_are_refused_with_their_place() {
    let dir = Scratch::new("limits");
    // 4000 x 2000 cells were made before any was checked.
    let seeds: Vec<String> = (0..4000).map(|i| i.to_string()).collect();
    let ops: Vec<String> = (1..=2000).map(|i| (1000 * i).to_string()).collect();
    let grid = dir.path("grid.toml");
    std::fs::write(
        &grid,
        format!(
            "name = \"grid\"\n[sweep]\n\"access.seed\" = [{}]\n\"access.ops\" = [{}]\n",
            seeds.join(", "),
            ops.join(", ")
        ),
    )
    .unwrap();
    let out = numalab(&["sweep", &grid]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "{grid}:3:1: [sweep] has 4000 x 2000 = 8000000 cells, more than 10000, the most a sweep runs"
        )),
        "{}",
        stderr(&out)
    );

    // An empty file ran the default experiment.
    let empty = dir.path("empty.toml");
    std::fs::write(&empty, "# to do\n").unwrap();
    for command in ["run", "sweep"] {
        let out = numalab(&[command, &empty]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("{empty} sets no key")),
            "{}",
            stderr(&out)
        );
    }

    // The error was pinned on a comment naming the key.
    let pinned = dir.path("pinned.toml");
    std::fs::write(
        &pinned,
        "# sweeps \"threads.count\"\n[sweep]\n\"memory.policy\" = [\"local\"]\n\"threads.count\" = [1, 0]\n",
    )
    .unwrap();
    let out = numalab(&["sweep", &pinned]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!(
            "{pinned}:4:1: sweep \"threads.count\" value 0: threads.count: must be at least 1"
        )),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        dir.files(),
        ["empty.toml", "grid.toml", "pinned.toml"],
        "nothing written"
    );
}
