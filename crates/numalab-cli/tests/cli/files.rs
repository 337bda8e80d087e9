//! The files numalab writes and reads: outputs are regular files replaced
//! whole (never a device, a link, or a planted temporary), checked before
//! anything is measured; inputs are bounded; what is read back is shown
//! safely (issue 12).

use crate::common::*;
use serde_json::Value;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs numalab with a watchdog: a run that has not ended after `limit`
/// is killed and fails the test (it asserts that numalab ends, not how
/// fast). Output goes through files, so a large one cannot block it.
fn numalab_ends(args: &[&str], limit: Duration) -> std::process::Output {
    let dir = Scratch::new(&format!("watchdog-{}", args.len()));
    let (out_path, err_path) = (dir.0.join("out"), dir.0.join("err"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("numalab {args:?} still running after {limit:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::process::Output {
        status,
        stdout: std::fs::read(&out_path).unwrap(),
        stderr: std::fs::read(&err_path).unwrap(),
    }
}

/// What stat(1) says the file at `path` is (not following a link).
fn stat_kind(path: &str) -> String {
    let out = Command::new("stat")
        .args(["-c", "%F", path])
        .output()
        .unwrap();
    assert!(out.status.success(), "stat {path}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A run result of the small example, as JSON.
fn run_result(dir: &Scratch) -> Value {
    let json = dir.path("r.json");
    let out = numalab(&[
        "run",
        &small(),
        "--set",
        "access.ops=3000",
        "--set",
        "run.repeats=1",
        "--json",
        "-o",
        &json,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap()
}

#[test]
fn output_to_dev_null_never_replaces_the_device() {
    let uid = Command::new("id").arg("-u").output().unwrap();
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        // Without root the rename into /dev fails anyway; the refusal is
        // still checked below.
        eprintln!("note: not root: /dev could not be changed by this test anyway");
    }
    assert_eq!(stat_kind("/dev/null"), "character special file");
    let before = std::fs::symlink_metadata("/dev/null").unwrap();
    let out = numalab(&["topo", "-o", "/dev/null"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("/dev/null is a character device")
            && stderr(&out).contains("leave out -o"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stat_kind("/dev/null"), "character special file");
    let after = std::fs::symlink_metadata("/dev/null").unwrap();
    assert!(after.file_type().is_char_device());
    assert_eq!(after.rdev(), before.rdev());
    assert_eq!(after.ino(), before.ino());

    let out = numalab(&["topo", "-o", "/dev/stdout"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("/dev/stdout is a symbolic link"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stat_kind("/dev/stdout"), "symbolic link");
}

#[test]
fn output_through_a_symlink_is_refused_and_its_target_untouched() {
    let dir = Scratch::new("out-symlink");
    let victim = dir.path("victim");
    std::fs::write(&victim, "precious").unwrap();
    let link = dir.path("topo.json");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let out = numalab(&["topo", "-o", &link]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("is a symbolic link"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert_eq!(stat_kind(&link), "symbolic link");
    assert_eq!(dir.files(), ["topo.json", "victim"]);
}

#[test]
fn symlinks_planted_at_the_old_temporary_names_are_irrelevant() {
    // numalab wrote `.NAME.tmp-PID` beside the target, following links:
    // plant one for each process id the next numalab is likely to get.
    let dir = Scratch::new("out-planted");
    let victim = dir.path("victim");
    std::fs::write(&victim, "precious").unwrap();
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1);
    for pid in last + 1..last + 400 {
        let planted = dir.0.join(format!(".topo.json.tmp-{pid}"));
        std::os::unix::fs::symlink(&victim, planted).unwrap();
    }
    let before = dir.files().len();
    let out = numalab(&["topo", "--json", "-o", &dir.path("topo.json")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert_eq!(stat_kind(&dir.path("topo.json")), "regular file");
    let doc: Value =
        serde_json::from_slice(&std::fs::read(dir.path("topo.json")).unwrap()).unwrap();
    assert_eq!(doc["schema"], "numalab.topo");
    assert_eq!(dir.files().len(), before + 1, "no temporary left behind");
}

#[test]
fn output_keeps_a_0600_files_mode() {
    let dir = Scratch::new("out-mode");
    let path = dir.path("topo.json");
    std::fs::write(&path, "old").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = numalab(&["topo", "--json", "-o", &path]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mode = Command::new("stat")
        .args(["-c", "%a", &path])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&mode.stdout).trim(), "600");
    assert!(std::fs::read_to_string(&path)
        .unwrap()
        .contains("numalab.topo"));
}

#[test]
fn a_missing_output_directory_is_refused_before_the_command_runs() {
    let dir = Scratch::new("out-missing");
    let marker = dir.path("marker");
    let missing = dir.path("missing/r.json");
    let script = format!("touch {marker}; exit 3");
    let out = numalab(&["exec", "-o", &missing, "--", "sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("directory") && stderr(&out).contains("does not exist"),
        "{}",
        stderr(&out)
    );
    assert!(
        !Path::new(&marker).exists(),
        "the command must not have run"
    );
    // With the directory there, the same command runs and its status is
    // numalab's.
    let out = numalab(&["exec", "-o", &dir.path("r.json"), "--", "sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(Path::new(&marker).exists());

    // The same refusal, before measuring, for every command that writes.
    let expected = format!(
        "cannot write {missing}: directory {} does not exist",
        dir.path("missing")
    );
    let stem = dir.path("missing/fig");
    let experiment = small();
    for args in [
        vec!["run", &experiment, "-o", &missing],
        vec!["sweep", &experiment, "-o", &missing],
        vec!["sweep", &experiment, "--plot", &stem],
        vec!["fill", "--size", "1M", "-o", &missing],
        vec!["topo", "-o", &missing],
        vec!["report", "--quick", "--html", &missing],
        vec!["matrix", "--quick", "--plot", &stem],
    ] {
        let out = numalab(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&expected) || err.contains("missing/fig.svg: directory"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("warning"), "{args:?} measured: {err}");
    }
    let json = dir.path("r.json");
    let out = numalab(&["plot", &json, "-o", &stem]);
    assert!(
        stderr(&out).contains("missing/fig.svg: directory"),
        "{}",
        stderr(&out)
    );
    assert_eq!(dir.files(), ["marker", "r.json"]);
}

#[test]
fn an_output_directory_numalab_may_not_write_is_refused_before_the_command_runs() {
    // Run as an unprivileged user (root may write anywhere) on a directory
    // only root may write.
    let dir = Scratch::new("out-locked");
    let locked = dir.path("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o777)).unwrap();
    let marker = dir.path("marker");
    let target = format!("{locked}/r.json");
    let script = format!("touch {marker}; exit 3");
    let numalab_args = ["exec", "-o", &target, "--", "sh", "-c", &script];
    let uid = Command::new("id").arg("-u").output().unwrap();
    let out = if String::from_utf8_lossy(&uid.stdout).trim() == "0" {
        let Ok(out) = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_numalab"))
            .args(numalab_args)
            .output()
        else {
            numalab::testing::cannot_check(
                "no setpriv (util-linux) to run numalab as another user",
            );
            return;
        };
        out
    } else {
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
        numalab(&numalab_args)
    };
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "cannot create files in {locked}: Permission denied"
        )),
        "{}",
        stderr(&out)
    );
    assert!(
        !Path::new(&marker).exists(),
        "the command must not have run"
    );
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn dev_zero_as_an_input_is_refused_naming_its_kind() {
    let limit = Duration::from_secs(120);
    for command in ["run", "sweep", "plot"] {
        for device in ["/dev/zero", "/dev/urandom"] {
            let out = numalab_ends(&[command, device], limit);
            assert_eq!(out.status.code(), Some(1), "{command} {device}");
            assert!(
                stderr(&out).contains(&format!("{device} is a character device")),
                "{command} {device}: {}",
                stderr(&out)
            );
        }
    }
    let dir = Scratch::new("in-large");
    let big = dir.path("big.toml");
    std::fs::write(&big, "#".repeat(2 << 20)).unwrap();
    let out = numalab_ends(&["run", &big], limit);
    assert!(
        stderr(&out).contains("big.toml is larger than 1 MiB, the limit for experiment files"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn plot_of_figures_at_the_edge_of_f64_finishes() {
    let dir = Scratch::new("plot-huge");
    let mut doc = run_result(&dir);
    for repeat in doc["repeats"].as_array_mut().unwrap() {
        for thread in repeat["threads"].as_array_mut().unwrap() {
            thread["busy_s"] = serde_json::json!(1e308);
        }
    }
    let huge = dir.path("huge.json");
    std::fs::write(&huge, serde_json::to_vec(&doc).unwrap()).unwrap();
    // Generous: the test asserts that plot ends, not how fast.
    let out = numalab_ends(&["plot", &huge], Duration::from_secs(300));
    assert!(out.status.success(), "{}", stderr(&out));
    let svg = std::fs::read_to_string(dir.path("huge.svg")).unwrap();
    assert!(
        svg.contains("left out"),
        "the figure says what it could not draw"
    );
    assert_eq!(stat_kind(&dir.path("huge.png")), "regular file");
}

#[test]
fn plot_refuses_a_schema_version_it_does_not_know() {
    let dir = Scratch::new("plot-version");
    let mut doc = run_result(&dir);
    doc["schema_version"] = serde_json::json!(999);
    let newer = dir.path("newer.json");
    std::fs::write(&newer, serde_json::to_vec(&doc).unwrap()).unwrap();
    let out = numalab(&["plot", &newer]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("numalab.run version 999; this numalab reads version 1"),
        "{}",
        stderr(&out)
    );
    assert!(!Path::new(&dir.path("newer.svg")).exists());
}

#[test]
fn escape_sequences_in_an_experiment_name_are_not_printed_raw() {
    let dir = Scratch::new("escape");
    let text = std::fs::read_to_string(small()).unwrap();
    let evil: String = text
        .lines()
        .map(|l| {
            if l.starts_with("name") {
                "name = \"evil\\u001b[2Jname\"".to_owned()
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(evil.contains("\\u001b"), "the example has a name line");
    let file = dir.path("evil.toml");
    std::fs::write(&file, evil).unwrap();
    let run = [
        "run",
        &file,
        "--set",
        "access.ops=3000",
        "--set",
        "run.repeats=1",
    ];
    for format in [None, Some("--markdown")] {
        let mut args = run.to_vec();
        args.extend(format);
        let out = numalab(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            !out.stdout.contains(&0x1b) && !out.stderr.contains(&0x1b),
            "{format:?}: an escape character reached the terminal"
        );
        assert!(
            stdout(&out).contains("evil\\x1b[2Jname"),
            "{}",
            stdout(&out)
        );
    }
    // JSON keeps the name exactly, escaped as JSON does.
    let out = numalab(&[&run[..], &["--json"]].concat());
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["experiment"]["name"], "evil\u{1b}[2Jname");
}

/// Runs numalab with its address space limited to `mib` MiB (`ulimit
/// -v`): a reader that holds a file as a tree of JSON values, ten times
/// the text and more, cannot allocate it and aborts.
fn numalab_in(mib: u64, args: &[&str]) -> std::process::Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {} && exec \"$0\" \"$@\"", mib << 10))
        .arg(env!("CARGO_BIN_EXE_numalab"))
        .args(args)
        .output()
        .unwrap()
}

/// `{"schema": SCHEMA, "schema_version": 1, "x": [0, 0, ...]}`: 40 MB of
/// a field no result has.
fn padded_document(path: &str, schema: &str) {
    let mut text = format!("{{\"schema\": \"{schema}\", \"schema_version\": 1, \"x\": [");
    text.push_str(&"0,".repeat(20_000_000));
    text.push_str("0]}");
    std::fs::write(path, text).unwrap();
}

#[test]
fn a_large_result_file_is_read_without_a_json_tree_of_it() {
    let dir = Scratch::new("plot-padded");
    for schema in [
        "numalab.sweep",
        "numalab.run",
        "numalab.profile",
        "numalab.matrix",
    ] {
        let file = dir.path(&format!("{schema}.json"));
        padded_document(&file, schema);
        let out = numalab_in(512, &["plot", &file, "-o", &dir.path("figure")]);
        // Read through to the missing fields, not killed on the way.
        assert_eq!(out.status.code(), Some(1), "{schema}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("reading {file} as {schema}")),
            "{schema}: {}",
            stderr(&out)
        );
        assert!(stderr(&out).contains("missing field"), "{}", stderr(&out));
    }
    // The same for a profile added to a report's page.
    let profile = dir.path("numalab.profile.json");
    let saved = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/results/report-cxl.json");
    let page = dir.path("page.html");
    let out = numalab_in(
        512,
        &[
            "report",
            "--from",
            saved.to_str().unwrap(),
            "--profile",
            &profile,
            "-o",
            &page,
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("reading {profile} as numalab.profile")),
        "{}",
        stderr(&out)
    );
    assert!(!Path::new(&page).exists());
}

/// A profile of `sleep`, its first sample repeated `count` times with the
/// one at `wide` on `nodes` nodes (its threads on each).
fn profile_of(dir: &Scratch, count: usize, wide: usize, nodes: u32) -> String {
    let saved = dir.path("sleep.json");
    // A process that outlives the watch, so its first sample is kept
    // however late a busy host lets numalab take it (a short command
    // can end before the first sample is read).
    let mut sleeper = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let pid = sleeper.id().to_string();
    let out = numalab(&[
        "profile",
        "--pid",
        &pid,
        "--interval",
        "20ms",
        "--duration",
        "100ms",
        "-o",
        &saved,
    ]);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(out.status.success(), "{}", stderr(&out));
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&saved).unwrap()).unwrap();
    let first = doc["timeline"]["samples"][0].clone();
    assert!(first.is_object(), "the watch kept no sample: {doc}");
    let mut samples = vec![first; count];
    samples[wide]["threads_by_node"] = (0..nodes)
        .map(|n| (n.to_string(), Value::from(1)))
        .collect();
    doc["timeline"]["samples"] = Value::from(samples);
    let file = dir.path(&format!("profile-{count}-{nodes}.json"));
    std::fs::write(&file, serde_json::to_vec(&doc).unwrap()).unwrap();
    file
}

#[test]
fn a_profile_past_the_figures_numalab_draws_is_refused_naming_the_limit() {
    let dir = Scratch::new("profile-limit");
    let saved = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/results/report-cxl.json");
    let page = dir.path("page.html");
    // 2000 samples of 1024 nodes: 2,048,000 figures.
    let wide = profile_of(&dir, 2000, 1000, 1024);
    let stem = dir.path("wide");
    for args in [
        vec!["plot", &wide, "-o", &stem],
        vec![
            "report",
            "--from",
            saved.to_str().unwrap(),
            "--profile",
            &wide,
            "-o",
            &page,
        ],
    ] {
        let out = numalab(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!(
                "{wide}: it holds 2000 samples of 1024 nodes, 2048000 figures, more than the 2000000 a saved profile may"
            )),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    // Nodes past Linux's limit, in a single sample.
    let many = profile_of(&dir, 3, 1, 5000);
    let out = numalab(&["plot", &many, "-o", &stem]);
    assert!(
        stderr(&out).contains("it names more than 1024 nodes"),
        "{}",
        stderr(&out)
    );
    assert!(!Path::new(&page).exists());
    assert!(!Path::new(&format!("{stem}.svg")).exists());

    // Within the limit, a long profile is drawn thinned, and says so.
    let long = profile_of(&dir, 5000, 0, 2);
    let out = numalab(&["plot", &long, "-o", &stem]);
    assert!(out.status.success(), "{}", stderr(&out));
    let svg = std::fs::read_to_string(format!("{stem}.svg")).unwrap();
    assert!(
        svg.contains("5000 samples, drawn as the largest of each 3"),
        "the figure says it was thinned"
    );
}

#[test]
fn a_figure_stem_that_names_no_file_or_a_place_in_dev_is_refused() {
    let dir = Scratch::new("plot-stems");
    let doc = run_result(&dir);
    let json = dir.path("run.json");
    std::fs::write(&json, serde_json::to_vec(&doc).unwrap()).unwrap();
    std::fs::create_dir(dir.path("sub")).unwrap();
    let sub = dir.path("sub");
    let before = dir.files();
    for stem in [
        format!("{sub}/"),
        format!("{sub}/."),
        format!("{sub}/.."),
        "/".to_owned(),
    ] {
        let out = numalab(&["plot", &json, "-o", &stem]);
        assert_eq!(out.status.code(), Some(1), "{stem}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("{stem} names no file: a figure stem is")),
            "{stem}: {}",
            stderr(&out)
        );
    }
    for (stem, dev) in [("/dev/null", "/dev"), ("/dev/../dev/zero", "/dev")] {
        let out = numalab(&["plot", &json, "-o", stem]);
        let created = [format!("{stem}.svg"), format!("{stem}.png")];
        for file in &created {
            if std::fs::symlink_metadata(file).is_ok() {
                let _ = std::fs::remove_file(file);
                panic!("{file} was created");
            }
        }
        assert_eq!(out.status.code(), Some(1), "{stem}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!(
                "{stem}: numalab writes no figures into {dev}, a directory of devices"
            )),
            "{stem}: {}",
            stderr(&out)
        );
    }
    assert_eq!(dir.files(), before);
    assert!(
        std::fs::read_dir(&sub).unwrap().next().is_none(),
        "nothing in sub/"
    );
    // A stem with a dot in its name is a file like any other.
    let out = numalab(&["plot", &json, "-o", &format!("{sub}/run.1")]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// `--html -` wrote a file named `-` (and `fleet --html -` a directory
/// `--hosts` beside it) while `-o -` means standard output: refused.
#[test]
fn an_html_page_named_dash_is_refused_and_nothing_written() {
    let dir = Scratch::new("html-dash");
    let saved = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/results/report-cxl.json");
    std::fs::copy(&saved, dir.0.join("r.json")).unwrap();
    for args in [
        vec!["report", "--from", "r.json", "--html", "-"],
        vec!["fleet", ".", "--html", "-"],
    ] {
        let out = numalab_at(&dir.0, &args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("--html -: the page is written to a file"),
            "{}",
            stderr(&out)
        );
        assert_eq!(dir.files(), ["r.json"], "{args:?}");
    }
}

/// The re-check of hostile pass 3 replaced inputs through other doors:
/// `--from` a link to the page's file, `run`'s own experiment as `-o`,
/// `advise --matrix` as `-o`. Each is refused before anything is written
/// or run, the input kept.
#[test]
fn an_output_over_an_input_is_refused_whatever_the_door() {
    let dir = Scratch::new("output-over-input");
    let saved = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/results/report-cxl.json");
    std::fs::copy(&saved, dir.0.join("target.json")).unwrap();
    std::os::unix::fs::symlink("target.json", dir.0.join("link.json")).unwrap();
    std::fs::write(dir.0.join("e.toml"), "[memory]\nsize = \"1MiB\"\n").unwrap();
    std::fs::write(dir.0.join("m.json"), "{}").unwrap();
    let before: Vec<Vec<u8>> = ["target.json", "e.toml", "m.json"]
        .iter()
        .map(|f| std::fs::read(dir.0.join(f)).unwrap())
        .collect();
    for args in [
        vec!["report", "--from", "link.json", "--html", "target.json"],
        vec!["run", "e.toml", "-o", "e.toml"],
        vec!["sweep", "e.toml", "-o", "e.toml"],
        vec!["advise", "--matrix", "m.json", "-o", "m.json", "--", "true"],
    ] {
        let out = numalab_at(&dir.0, &args);
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        assert!(
            stderr(&out).contains("which this command reads: writing it would replace it"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let after: Vec<Vec<u8>> = ["target.json", "e.toml", "m.json"]
        .iter()
        .map(|f| std::fs::read(dir.0.join(f)).unwrap())
        .collect();
    assert_eq!(before, after);
}

/// The last re-check of hostile pass 3: `fincore f -o f` and `pagecache
/// load|drop f -o f` replaced the very file they were asked about, and a
/// result named `r.svg` was replaced by its own figure. Refused, the
/// file kept.
#[test]
fn a_command_never_writes_over_the_file_it_was_given() {
    let dir = Scratch::new("output-over-given");
    std::fs::write(dir.0.join("data.txt"), "precious\n").unwrap();
    let saved = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/results/report-cxl.json");
    std::fs::copy(&saved, dir.0.join("r.svg")).unwrap();
    let before = std::fs::read(dir.0.join("r.svg")).unwrap();
    for args in [
        vec!["fincore", "data.txt", "--json", "-o", "data.txt"],
        vec!["fincore", ".", "--json", "-o", "data.txt"],
        vec!["pagecache", "drop", "data.txt", "--json", "-o", "data.txt"],
        vec![
            "pagecache",
            "load",
            "-N",
            "0",
            "data.txt",
            "--json",
            "-o",
            "data.txt",
        ],
        vec!["plot", "r.svg"],
    ] {
        let out = numalab_at(&dir.0, &args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("which this command reads"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert_eq!(
            std::fs::read(dir.0.join("data.txt")).unwrap(),
            b"precious\n"
        );
    }
    assert_eq!(std::fs::read(dir.0.join("r.svg")).unwrap(), before);
}
