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
