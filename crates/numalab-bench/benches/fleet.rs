//! How fast `numalab fleet` merges a cluster's reports: 10 000 host files
//! made from a real report (`tests/results/report-two-socket.json`, the
//! emulated two-socket machine, written pretty-printed as `numalab report
//! --json` writes it) with every figure moved by up to ±3% and outliers
//! planted in 10 hosts, merged by the library ([`numalab_bench::fleet`]:
//! list, read and parse on threads, group, judge) and, when the release
//! binary is there (`bash bench/all.sh` builds it; or `NUMALAB_BIN`), by
//! `numalab fleet DIR --json -o FILE` as a user runs it.
//!
//! Then, with the binary, how long `numalab check` takes on this host
//! against a baseline of this machine's own `report --quick` (three
//! copies): what a Slurm HealthCheckProgram spends, under its 60 s limit.
//!
//! Target: 10 000 files merged in under 10 s. The files were just written,
//! so they are read from the page cache: a shared file system read cold
//! adds its own time. A benchmark, not a test:
//!
//! ```text
//! cargo bench -p numalab-bench --bench fleet [-- FILES]
//! ```

use std::path::{Path, PathBuf};
use std::time::Instant;

use numalab_bench::fleet::{fleet, FleetOptions};
use serde_json::Value;

const TARGET_S: f64 = 10.0;
/// Merges timed for the goal.
const ROUNDS: u32 = 3;
const PLANTED: usize = 10;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The template as text split around its variable parts: the host name,
/// then every median the fleet compares.
fn template() -> (Vec<String>, Vec<f64>) {
    let path = repository().join("tests/results/report-two-socket.json");
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    doc["host"] = "@@HOST@@".into();
    let mut medians = Vec::new();
    let mut mark = |figure: &mut Value| {
        medians.push(figure.as_f64().unwrap());
        *figure = format!("@@F{}@@", medians.len() - 1).into();
    };
    for cell in doc["matrix"]["latency"]["cells"].as_array_mut().unwrap() {
        mark(&mut cell["latency_ns"]["median"]);
    }
    for cell in doc["matrix"]["bandwidth"]["cells"].as_array_mut().unwrap() {
        for metric in ["read_gbps", "write_gbps", "copy_gbps"] {
            if cell[metric].is_object() {
                mark(&mut cell[metric]["median"]);
            }
        }
    }
    let text = serde_json::to_string_pretty(&doc).unwrap();
    // Split at every "@@…@@" (quoted): the parts between, in order.
    let mut parts = Vec::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find("\"@@") {
        parts.push(rest[..start].to_owned());
        let end = rest[start + 3..].find("@@\"").unwrap() + start + 6;
        rest = &rest[end..];
    }
    parts.push(rest.to_owned());
    assert_eq!(parts.len(), medians.len() + 2);
    (parts, medians)
}

/// Writes `count` host files into `dir`; hosts 0, count/PLANTED, … have
/// their first bandwidth figure at 70%. Returns the bytes written.
fn generate(dir: &Path, count: usize) -> u64 {
    let (parts, medians) = template();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let latency_cells = 4;
    let mut bytes = 0;
    for host in 0..count {
        let name = format!("node{host:05}");
        let planted = host % (count / PLANTED).max(1) == 0;
        let mut text = String::with_capacity(parts.iter().map(String::len).sum::<usize>() + 512);
        text.push_str(&parts[0]);
        text.push_str(&format!("\"{name}\""));
        for (i, median) in medians.iter().enumerate() {
            text.push_str(&parts[i + 1]);
            let mut value = median * (0.97 + 0.06 * next());
            if planted && i == latency_cells {
                value *= 0.7;
            }
            text.push_str(&value.to_string());
        }
        text.push_str(parts.last().unwrap());
        std::fs::write(dir.join(format!("{name}.json")), &text).unwrap();
        bytes += text.len() as u64;
    }
    bytes
}

fn main() {
    let count: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map_or(10_000, |a| a.parse().expect("FILES: a number of files"));
    let dir = std::env::temp_dir().join(format!("numalab-bench-fleet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let started = Instant::now();
    let bytes = generate(&dir, count);
    println!(
        "generated {count} host files, {:.1} MiB ({:.0} KiB each), in {:.1} s",
        bytes as f64 / f64::from(1 << 20),
        bytes as f64 / 1024.0 / count as f64,
        started.elapsed().as_secs_f64()
    );
    let options = FleetOptions::default();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    println!(
        "{cpu}, {}; {}",
        numalab::units::count(cpus, "CPU"),
        numalab::units::count(options.threads, "reader thread")
    );

    let started = Instant::now();
    let report = fleet(std::slice::from_ref(&dir), &options).expect("the fleet merges");
    let library_s = started.elapsed().as_secs_f64();
    let flagged = report.hosts.iter().filter(|h| h.outliers > 0).count();
    assert_eq!(report.hosts.len(), count, "{:?}", report.left_out.first());
    assert_eq!(report.groups.len(), 1);
    assert_eq!(
        flagged,
        count.min(PLANTED),
        "every planted host, nothing else"
    );
    println!(
        "library: {} in {library_s:.2} s, {:.0} files/s, {:.0} MiB/s; {} flagged",
        numalab::units::count(count, "file"),
        count as f64 / library_s,
        bytes as f64 / f64::from(1 << 20) / library_s,
        numalab::units::count(flagged, "host")
    );

    let binary = std::env::var_os("NUMALAB_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR")
                .map_or_else(|| repository().join("target"), PathBuf::from)
                .join("release/numalab")
        });
    // The figure judged: `numalab fleet` itself when it is built, else the
    // library; three rounds, each 10 000 files merged anew.
    let mut rounds_s = vec![];
    let mut measured = "library";
    if binary.exists() {
        measured = "numalab fleet";
        for round in 1..=ROUNDS {
            let out = dir.with_extension("json");
            let started = Instant::now();
            let status = std::process::Command::new(&binary)
                .arg("fleet")
                .arg(&dir)
                .args(["--json", "-o"])
                .arg(&out)
                .status()
                .expect("numalab runs");
            let cli_s = started.elapsed().as_secs_f64();
            assert!(status.success(), "numalab fleet failed");
            let written = std::fs::metadata(&out).map_or(0, |m| m.len());
            let _ = std::fs::remove_file(&out);
            println!(
                "{} (round {round}): {count} files in {cli_s:.2} s, {:.0} files/s (its JSON: {:.1} MiB)",
                binary.display(),
                count as f64 / cli_s,
                written as f64 / f64::from(1 << 20)
            );
            rounds_s.push(cli_s);
        }
        let baseline = dir.with_extension("baseline.json");
        let started = Instant::now();
        write_baseline(&binary, &dir, &baseline);
        println!(
            "{}: {count} files merged and their baseline written in {:.2} s",
            binary.display(),
            started.elapsed().as_secs_f64()
        );
        let _ = std::fs::remove_file(&baseline);
    } else {
        println!(
            "{} not built: the command itself not timed (cargo build --release -p numalab-cli)",
            binary.display()
        );
        rounds_s.push(library_s);
        for _ in 1..ROUNDS {
            let started = Instant::now();
            fleet(std::slice::from_ref(&dir), &options).expect("the fleet merges");
            rounds_s.push(started.elapsed().as_secs_f64());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if binary.exists() {
        check_this_host(&binary);
    }
    // For bench/all.sh: the goal and every round's time, scaled to 10 000
    // hosts.
    let target = format!(
        "fleet: merge 10 000 host reports ({measured}, {}), seconds",
        numalab::units::count(cpus, "CPU")
    );
    println!("GOAL\t{target}\t\t<= {TARGET_S:.0}");
    for seconds in rounds_s {
        println!(
            "ROUND\t{target}\t\t{:.3}",
            seconds * 10_000.0 / count as f64
        );
    }
}

/// `numalab check` on this host against a `--quick` baseline of this
/// machine: the median of 3 checks, wall time and the measurement alone.
fn check_this_host(binary: &Path) {
    let dir = std::env::temp_dir().join(format!("numalab-bench-check-{}", std::process::id()));
    let reports = dir.join("reports");
    std::fs::create_dir_all(&reports).unwrap();
    let report = dir.join("this.json");
    let status = std::process::Command::new(binary)
        .args(["report", "--quick", "--json", "-o"])
        .arg(&report)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("numalab runs");
    assert!(status.success(), "numalab report --quick failed");
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    for n in 1..=3 {
        doc["host"] = format!("good{n}").into();
        std::fs::write(reports.join(format!("good{n}.json")), doc.to_string()).unwrap();
    }
    let baseline = dir.join("baseline.json");
    write_baseline(binary, &reports, &baseline);
    let mut walls = Vec::new();
    let mut measured = Vec::new();
    let mut cells = 0;
    for _ in 0..3 {
        let started = Instant::now();
        let out = std::process::Command::new(binary)
            .args(["check", "--json", "--baseline"])
            .arg(&baseline)
            .output()
            .expect("numalab runs");
        walls.push(started.elapsed().as_secs_f64());
        // 0 healthy or 1 unhealthy (a busy machine may fail its own
        // baseline): either way the check ran to its end.
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "numalab check: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let result: Value = serde_json::from_slice(&out.stdout).unwrap();
        measured.push(result["seconds"].as_f64().unwrap_or(0.0));
        cells = result["cells"].as_array().map_or(0, Vec::len);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "numalab check --baseline (quick, {cells} figures of this machine): {:.2} s wall, {:.2} s measuring (median of 3)",
        median(&mut walls),
        median(&mut measured)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `numalab fleet DIR --baseline OUT`, quietly.
fn write_baseline(binary: &Path, dir: &Path, out: &Path) {
    let status = std::process::Command::new(binary)
        .arg("fleet")
        .arg(dir)
        .arg("--baseline")
        .arg(out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("numalab runs");
    assert!(status.success(), "numalab fleet --baseline failed");
}
