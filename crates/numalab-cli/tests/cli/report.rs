//! `numalab report`: the main job on this machine.

use crate::common::*;
use serde_json::Value;

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
    // One experiment, one value: the scaling curve's point at the matrix
    // cell's CPUs is that cell's figure, and both findings quote it.
    if let Some(last) = doc["scaling"]["points"].as_array().and_then(|p| p.last()) {
        let cell = doc["matrix"]["bandwidth"]["cells"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| {
                c["initiator"] == doc["scaling"]["initiator"]
                    && c["target"] == doc["scaling"]["target"]
            })
            .expect("the scaling curve's cell in the matrix");
        if cell["cpus"] == last["cpus"] {
            assert_eq!(last["from_matrix"], true);
            assert_eq!(last["read_gbps"], cell["read_gbps"]);
            let quoted = format!("{:.1} GB/s", cell["read_gbps"]["median"].as_f64().unwrap());
            for kind in ["local_bandwidth", "thread_scaling"] {
                let text = doc["findings"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|f| f["kind"] == kind)
                    .and_then(|f| f["text"].as_str())
                    .unwrap_or_else(|| panic!("no {kind} finding: {findings:?}"));
                assert!(
                    text.contains(&quoted),
                    "{kind} does not quote {quoted}: {text}"
                );
            }
        }
    }

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

/// The two saved reports of the emulated presets (two-socket: 2 nodes;
/// cxl: 4 nodes, 2 without CPUs).
fn saved(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../../tests/results/report-{name}.json"))
}

#[test]
fn report_from_saved_results_measures_nothing_and_says_what_is_wrong() {
    let scratch = Scratch::new("report-from");
    // Text from a saved report: the same findings it holds.
    let out = numalab(&["report", "--from", saved("cxl").to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let saved_doc: Value =
        serde_json::from_str(&std::fs::read_to_string(saved("cxl")).unwrap()).unwrap();
    let first = saved_doc["findings"][0]["text"].as_str().unwrap();
    assert!(stdout(&out).contains(first), "{}", stdout(&out));

    // A profile's timeline on the page, in its own section.
    let profile = scratch.path("profile.json");
    let out = numalab(&[
        "profile",
        "--interval",
        "20ms",
        "-o",
        &profile,
        "--",
        "sleep",
        "0.2",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let page = scratch.path("page.html");
    let out = numalab(&[
        "report",
        "--from",
        saved("two-socket").to_str().unwrap(),
        "--profile",
        &profile,
        "-o",
        &page,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("id=\"profiles\"")
            && html.contains("numalab profile of <code>sleep 0.2</code>")
    );

    // Bad input: one sentence naming the file, nothing written.
    let truncated = scratch.path("truncated.json");
    std::fs::write(
        &truncated,
        &std::fs::read_to_string(saved("cxl")).unwrap()[..5000],
    )
    .unwrap();
    let foreign = scratch.path("foreign.json");
    std::fs::write(
        &foreign,
        r#"{"schema": "numalab.profile", "schema_version": 1}"#,
    )
    .unwrap();
    for (input, says) in [
        (truncated.as_str(), "truncated.json"),
        (foreign.as_str(), "numalab.profile"),
        ("/nonexistent/r.json", "/nonexistent/r.json"),
    ] {
        let target = scratch.path("bad.html");
        let out = numalab(&["report", "--from", input, "-o", &target]);
        assert!(!out.status.success(), "{input}");
        assert!(stderr(&out).contains(says), "{input}: {}", stderr(&out));
        assert!(
            !std::path::Path::new(&target).exists(),
            "{input}: nothing written"
        );
    }
    // --open needs a page.
    let out = numalab(&["report", "--from", saved("cxl").to_str().unwrap(), "--open"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--open opens the HTML page"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn report_open_hands_the_page_to_the_browser_named_in_browser() {
    let scratch = Scratch::new("report-open");
    // A "browser" that records what it was asked to open.
    let browser = scratch.path("browser.sh");
    let opened = scratch.path("opened");
    std::fs::write(&browser, format!("#!/bin/sh\necho \"$1\" > {opened}\n")).unwrap();
    std::process::Command::new("chmod")
        .args(["+x", &browser])
        .status()
        .unwrap();
    let page = scratch.path("page.html");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args([
            "report",
            "--from",
            saved("two-socket").to_str().unwrap(),
            "-o",
            &page,
            "--open",
        ])
        .env("BROWSER", &browser)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::path::Path::new(&opened).exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let asked = std::fs::read_to_string(&opened).unwrap_or_default();
    assert_eq!(
        asked.trim(),
        std::fs::canonicalize(&page).unwrap().to_str().unwrap()
    );
}

#[test]
fn a_saved_report_with_more_nodes_than_linux_allows_is_refused_before_drawing() {
    // 1,100 nodes (a file of 3,000 took 2.6 GB and wrote a 100 MB page).
    let scratch = Scratch::new("report-many-nodes");
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(saved("cxl")).unwrap()).unwrap();
    let nodes = doc["topology"]["topology"]["nodes"].as_array_mut().unwrap();
    let one = nodes[0].clone();
    nodes.extend(std::iter::repeat_n(one, 1100));
    let many = scratch.path("many.json");
    std::fs::write(&many, serde_json::to_string(&doc).unwrap()).unwrap();
    let page = scratch.path("many.html");
    let out = numalab(&["report", "--from", &many, "-o", &page]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("nodes, more than the 1024 a saved report may"),
        "{err}"
    );
    assert!(!std::path::Path::new(&page).exists(), "no page drawn");
    // fleet leaves such a host out, naming why.
    let dir = scratch.path("hosts");
    std::fs::create_dir(&dir).unwrap();
    std::fs::copy(&many, format!("{dir}/many.json")).unwrap();
    let out = numalab(&["fleet", &dir]);
    assert!(
        stderr(&out).contains("more than the 1024"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_saved_report_with_a_ragged_distance_matrix_is_refused_not_a_panic() {
    // A row shorter than the nodes (a panic in the table and in fleet's
    // comparison of fingerprints), and more nodes than rows.
    let scratch = Scratch::new("report-ragged-slit");
    let text = std::fs::read_to_string(saved("two-socket")).unwrap();
    for (name, distances, why) in [
        (
            "short-row",
            serde_json::json!({"nodes": [0, 1], "values": [[10], [21, 10]]}),
            "row 0 has 1 value for 2 nodes",
        ),
        (
            "more-nodes",
            serde_json::json!({"nodes": [0, 1, 2], "values": [[10, 21], [21, 10]]}),
            "2 rows for 3 nodes",
        ),
    ] {
        let mut doc: Value = serde_json::from_str(&text).unwrap();
        doc["topology"]["topology"]["distances"] = distances;
        doc["host"] = name.into();
        let path = scratch.path(&format!("{name}.json"));
        std::fs::write(&path, serde_json::to_string(&doc).unwrap()).unwrap();
        let out = numalab(&["report", "--from", &path]);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", stderr(&out));
        assert!(stderr(&out).contains(why), "{name}: {}", stderr(&out));
        // fleet leaves it out beside a good report, whichever sorts first.
        let dir = scratch.path(&format!("hosts-{name}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::copy(&path, format!("{dir}/a.json")).unwrap();
        std::fs::copy(saved("two-socket"), format!("{dir}/z.json")).unwrap();
        let out = numalab(&["fleet", &dir]);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stderr(&out));
        assert!(stderr(&out).contains(why), "{name}: {}", stderr(&out));
    }
}

#[test]
fn names_in_a_saved_report_cannot_forge_a_line() {
    let scratch = Scratch::new("report-newline-names");
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(saved("two-socket")).unwrap()).unwrap();
    let evil = "evil\nnumalab: forged line\r";
    doc["topology"]["topology"]["host"] = evil.into();
    doc["topology"]["topology"]["cpu_model"] = evil.into();
    doc["matrix"]["environment"]["host"]["hostname"] = evil.into();
    doc["matrix"]["environment"]["host"]["kernel"] = evil.into();
    let path = scratch.path("evil.json");
    std::fs::write(&path, serde_json::to_string(&doc).unwrap()).unwrap();
    let out = numalab(&["report", "--from", &path]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("evil\\nnumalab: forged line"), "{text}");
    assert!(
        !text
            .lines()
            .any(|l| l.trim_start().starts_with("numalab: forged")),
        "{text}"
    );
}

#[test]
fn a_saved_report_with_impossible_figures_is_refused_and_findings_are_made_again() {
    let scratch = Scratch::new("report-impossible");
    let text = std::fs::read_to_string(saved("two-socket")).unwrap();
    let mut doc: Value = serde_json::from_str(&text).unwrap();
    for cell in doc["matrix"]["latency"]["cells"].as_array_mut().unwrap() {
        cell["latency_ns"]["median"] = (-1e308).into();
    }
    let bad = scratch.path("bad.json");
    std::fs::write(&bad, serde_json::to_string(&doc).unwrap()).unwrap();
    let out = numalab(&["report", "--from", &bad]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("its latency 0->0 is -1e308 ns: not a measurement"),
        "{}",
        stderr(&out)
    );
    // The findings shown are the figures', not the file's.
    let mut doc: Value = serde_json::from_str(&text).unwrap();
    doc["findings"][1]["text"] = "From node 0, memory on node 1 costs 1 ns, planted.".into();
    let planted = scratch.path("planted.json");
    std::fs::write(&planted, serde_json::to_string(&doc).unwrap()).unwrap();
    let out = numalab(&["report", "--from", &planted]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("planted"), "{text}");
    assert!(text.contains("costs 197 ns"), "{text}");
}

#[test]
fn sizes_from_a_saved_report_never_wrap_and_its_pairs_count_once() {
    let scratch = Scratch::new("report-wrapping");
    let text = std::fs::read_to_string(saved("two-socket")).unwrap();
    let mut doc: Value = serde_json::from_str(&text).unwrap();
    doc["topology"]["topology"]["nodes"][0]["memory_bytes"] = u64::MAX.into();
    let path = scratch.path("huge.json");
    std::fs::write(&path, serde_json::to_string(&doc).unwrap()).unwrap();
    let out = numalab(&["report", "--from", &path]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("16 EiB or more of memory"),
        "{}",
        stdout(&out)
    );
    // A pair measured twice (and so others missing) is refused.
    let mut doc: Value = serde_json::from_str(&text).unwrap();
    let first = doc["matrix"]["latency"]["cells"][0].clone();
    doc["matrix"]["latency"]["cells"][1] = first;
    let path = scratch.path("twice.json");
    std::fs::write(&path, serde_json::to_string(&doc).unwrap()).unwrap();
    let out = numalab(&["report", "--from", &path]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cell 0->0 appears twice"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_page_given_to_from_is_named_as_the_page() {
    let scratch = Scratch::new("report-from-page");
    let page = scratch.path("r.html");
    let out = numalab(&[
        "report",
        "--from",
        saved("cxl").to_str().unwrap(),
        "-o",
        &page,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = numalab(&["report", "--from", &page]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(
            "r.html is an HTML page, not a saved result: give the file written with --json"
        ),
        "{}",
        stderr(&out)
    );
    assert_eq!(stdout(&out), "", "nothing drawn");
}

/// An output that is an input is refused before anything is written: the
/// saved report would be replaced by its own page (which cannot be read
/// back), or by itself re-written. Both were written with exit 0 before.
#[test]
fn an_output_naming_an_input_is_refused_and_the_input_kept() {
    let scratch = Scratch::new("report-output-input");
    let from = scratch.path("r.json");
    let original = std::fs::read(saved("cxl")).unwrap();
    std::fs::write(&from, &original).unwrap();
    for flags in [["--html", from.as_str()], ["-o", from.as_str()]] {
        let mut args = vec!["report", "--from", from.as_str()];
        args.extend(flags);
        let out = numalab(&args);
        assert_eq!(out.status.code(), Some(1), "{flags:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("which this command reads: writing it would replace it"),
            "{}",
            stderr(&out)
        );
        assert_eq!(std::fs::read(&from).unwrap(), original, "{flags:?}");
    }
}

/// A newline in a saved report's experiment name started a line of its
/// own in the text and Markdown (`exp` / `forged sweep: …`); it is `\n`
/// in the heading now, as in host names.
#[test]
fn a_newline_in_an_experiment_name_cannot_forge_a_line() {
    let scratch = Scratch::new("report-name-newline");
    let text = std::fs::read_to_string(saved("cxl")).unwrap();
    let mut doc: Value = serde_json::from_str(&text).unwrap();
    doc["sweep"]["experiment"]["name"] = "exp\x1b[2J\nforged".into();
    let path = scratch.path("name.json");
    std::fs::write(&path, serde_json::to_string(&doc).unwrap()).unwrap();
    for flags in [vec![], vec!["--markdown"]] {
        let mut args = vec!["report", "--from", path.as_str()];
        args.extend(flags);
        let out = numalab(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let shown = stdout(&out);
        assert!(shown.contains("exp\\x1b[2J\\nforged"), "{shown}");
        assert!(!shown.lines().any(|l| l.starts_with("forged")), "{shown}");
    }
}
