//! `numalab profile` against `numastat -p` (numactl's own reading of the
//! same process at the same moment), and its exits as a shell would see
//! them.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use crate::common::*;
use serde_json::Value;

/// A process holding `mib` MiB it wrote, started and ready (it says so on
/// its standard output), killed when dropped.
struct Holder(Child);

impl Holder {
    fn start(mib: u64) -> Holder {
        let script = format!(
            "import sys, time\nb = bytearray({mib} << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('ready', flush=True)\ntime.sleep(60)\n"
        );
        let mut child = Command::new(python())
            .args(["-c", &script])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready");
        Holder(child)
    }

    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

/// The Python interpreter itself: `python3` on the PATH may be a launcher
/// script (pyenv's shims) that runs the interpreter as its child, and
/// `--pid` of the launcher would then watch two processes where
/// `numastat -p` reads one.
fn python() -> String {
    static PYTHON: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PYTHON
        .get_or_init(|| {
            let out = Command::new("python3")
                .args(["-c", "import sys; print(sys.executable)"])
                .output()
                .expect("python3 runs");
            stdout(&out).trim().to_owned()
        })
        .clone()
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `numastat -p`'s Total row: MB per node, in node order.
fn numastat_totals(pid: &str) -> Option<Vec<f64>> {
    let out = match Command::new("numastat").args(["-p", pid]).output() {
        Ok(out) if out.status.success() => out,
        Ok(out) => panic!("numastat -p failed: {}", stderr(&out)),
        Err(err) => {
            numalab::testing::cannot_check(format!("numastat (numactl) cannot run here: {err}"));
            return None;
        }
    };
    let text = stdout(&out);
    let total = text
        .lines()
        .find(|l| l.starts_with("Total"))
        .expect("numastat prints a Total row");
    let mut values: Vec<f64> = total
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect();
    values.pop(); // the last column is the sum over nodes
    Some(values)
}

#[test]
fn profile_of_a_running_process_matches_numastat_and_keeps_what_it_saw() {
    let holder = Holder::start(96);
    let pid = holder.pid();
    // 3 s: reading a Python process's numa_maps took 5 ms of CPU on one
    // day's host, and the 1% rule then spaces samples about 0.5 s apart.
    let doc = profile_agrees_with_numastat("python3", holder.0.id(), "3s");
    let Some(doc) = doc else {
        return;
    };
    assert_eq!(doc["schema"], "numalab.profile");
    assert_eq!(doc["pid"].as_i64().unwrap().to_string(), pid);
    assert_eq!(doc["command"][0], "python3");
    let samples = doc["timeline"]["samples"].as_array().unwrap();
    assert!(samples.len() >= 3, "{} samples", samples.len());
    let per_node = last_per_node(&doc);
    assert!(per_node.iter().sum::<f64>() >= 96.0, "{per_node:?}");
    // Killed while watched: the samples so far are kept.
    let watcher = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(["profile", "--pid", &pid, "--interval", "20ms", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(holder);
    let out = watcher.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ended"], true);
    assert!(!doc["timeline"]["samples"].as_array().unwrap().is_empty());
}

#[test]
fn profile_of_a_command_follows_it_and_exits_as_it_did() {
    let out = numalab(&[
        "profile",
        "--interval",
        "20ms",
        "--json",
        "--",
        "python3",
        "-c",
        // Held 2 s: the 1% rule may space samples half a second apart
        // after one that read the buffer half written.
        "import time\nb = bytearray(64 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\ntime.sleep(2)\nraise SystemExit(3)",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(doc["exit"]["code"], 3);
    let samples = doc["timeline"]["samples"].as_array().unwrap();
    let most = samples
        .iter()
        .map(|s| {
            s["memory"]["bytes"]
                .as_object()
                .unwrap()
                .values()
                .flat_map(|k| k.as_object().unwrap().values())
                .map(|b| b.as_u64().unwrap())
                .sum::<u64>()
        })
        .max()
        .unwrap();
    assert!(most >= 64 << 20, "the 64 MiB written was seen: {most}");
    assert!(doc["timeline"]["sampling_cpu_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn profile_says_what_went_wrong_in_one_sentence() {
    let out = numalab(&["profile", "--", "numalab-no-such-program"]);
    assert_eq!(out.status.code(), Some(127), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot run numalab-no-such-program"),
        "{}",
        stderr(&out)
    );
    let out = numalab(&["profile", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(out.status.code(), Some(128 + 15), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("killed by signal 15"),
        "{}",
        stderr(&out)
    );
    let out = numalab(&["profile", "--pid", "999999999"]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--pid 999999999: no such process"),
        "{}",
        stderr(&out)
    );
    let out = numalab(&["profile"]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let out = numalab(&["profile", "--duration", "1s", "--", "true"]);
    assert_eq!(
        out.status.code(),
        Some(125),
        "--duration needs --pid: {}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("--duration is for --pid"),
        "{}",
        stderr(&out)
    );
}

/// Whether this kernel keeps soft-dirty bits, asked of python3 directly
/// (a page written, the bits cleared, written again: bit 55 of pagemap).
fn soft_dirty_here() -> bool {
    let probe = "import ctypes, mmap, struct\n\
m = mmap.mmap(-1, 8192)\n\
a = ctypes.addressof(ctypes.c_char.from_buffer(m)) // 4096 * 8\n\
def bit():\n    f = open('/proc/self/pagemap', 'rb'); f.seek(a); return struct.unpack('Q', f.read(8))[0] >> 55 & 1\n\
m[0] = 1\nopen('/proc/self/clear_refs', 'w').write('4')\ncleared = bit()\nm[0] = 2\n\
print('yes' if (cleared, bit()) == (0, 1) else 'no')\n";
    let out = std::process::Command::new("python3")
        .args(["-c", probe])
        .output()
        .expect("python3 runs");
    stdout(&out).trim() == "yes"
}

#[test]
fn profile_writes_estimates_the_share_written_or_says_why_not() {
    // 64 MiB written once, then its first quarter again and again.
    let script = "import time\nb = bytearray(64 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nt = time.time()\nwhile time.time() - t < 2:\n    for i in range(0, 16 << 20, 4096): b[i] = 2\n    time.sleep(0.02)\n";
    let out = numalab(&[
        "profile",
        "--writes",
        "--interval",
        "300ms",
        "--json",
        "--",
        "python3",
        "-c",
        script,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: Value = serde_json::from_str(&stderr(&out)).unwrap();
    let sources: Vec<&str> = doc["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let samples = doc["timeline"]["samples"].as_array().unwrap();
    if !soft_dirty_here() {
        // This kernel keeps no soft-dirty bits: said, and no figure made up.
        assert!(
            sources
                .iter()
                .any(|s| s.starts_with("pages written: not measured")),
            "{sources:?}"
        );
        assert!(samples.iter().all(|s| s.get("written").is_none()));
        return;
    }
    assert!(
        sources
            .iter()
            .any(|s| s.starts_with("pages written: estimated")),
        "{sources:?}"
    );
    let shares: Vec<f64> = samples
        .windows(2)
        .filter(|pair| {
            let private: u64 = pair[0]["memory"]["bytes"]
                .as_object()
                .unwrap()
                .iter()
                .filter(|(kind, _)| kind.as_str() != "file")
                .flat_map(|(_, per_node)| per_node.as_object().unwrap().values())
                .map(|b| b.as_u64().unwrap())
                .sum();
            private >= 64 << 20
        })
        .filter_map(|pair| {
            let w = pair[1].get("written")?;
            Some(w["written"].as_f64()? / w["present"].as_f64()?)
        })
        .collect();
    assert!(!shares.is_empty(), "no window after the 64 MiB was written");
    assert!(shares.iter().all(|s| (0.15..0.5).contains(s)), "{shares:?}");
}

#[test]
fn profile_emit_writes_an_experiment_that_runs() {
    let scratch = Scratch::new("profile-emit");
    let exp = scratch.path("app.toml");
    let script = "import time\nb = bytearray(96 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\ntime.sleep(2)\n";
    let out = numalab(&[
        "profile", "--emit", &exp, "--json", "--", "python3", "-c", script,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("wrote {exp}")),
        "{}",
        stderr(&out)
    );
    let text = std::fs::read_to_string(&exp).unwrap();
    let value: toml::Value = toml::from_str(&text).expect("TOML");
    // python3 runs one thread, and held its 96 MiB at some sample.
    assert_eq!(value["threads"]["count"].as_integer(), Some(1), "{text}");
    let size = value["memory"]["size"].as_str().unwrap();
    let kib: u64 = size.strip_suffix("KiB").unwrap().parse().unwrap();
    assert!((96 << 10..120 << 10).contains(&kib), "{size}");
    assert_eq!(value["memory"]["policy"].as_str(), Some("first-touch"));
    assert!(value["sweep"]["memory.policy"].as_array().unwrap().len() >= 3);
    // numalab run takes it as it is (shortened here).
    let run = numalab(&[
        "run",
        &exp,
        "--set",
        "access.duration=100ms",
        "--set",
        "run.repeats=1",
        "--set",
        "run.warmup=0",
        "--set",
        "memory.size=8MiB",
    ]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    // Its runs last a fixed time, so a sweep of it compares what varies:
    // the time per million operations, not the time to the last thread.
    let sweep = numalab(&[
        "sweep",
        &exp,
        "--json",
        "--set",
        "access.duration=50ms",
        "--set",
        "run.repeats=2",
        "--set",
        "run.warmup=0",
        "--set",
        "memory.size=8MiB",
    ]);
    assert_eq!(sweep.status.code(), Some(0), "{}", stderr(&sweep));
    let sweep: serde_json::Value = serde_json::from_slice(&sweep.stdout).unwrap();
    let lines = sweep["comparison"].as_array().unwrap();
    assert!(!lines.is_empty(), "{sweep}");
    for line in lines {
        assert_eq!(line["compared"], "time_per_million_ops", "{line}");
    }

    // A link is never written through, and nothing runs.
    let target = scratch.path("target");
    std::fs::write(&target, "precious").unwrap();
    let link = scratch.path("link.toml");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = numalab(&["profile", "--emit", &link, "--", "sh", "-c", "echo ran >&2"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(!stderr(&out).contains("ran"), "{}", stderr(&out));
    assert!(stderr(&out).contains("--emit"), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
}

/// A program no one here wrote, started with its input on a pipe that
/// stays open, so it holds its memory still once it has read what it was
/// given; killed when dropped.
struct Steady {
    child: Child,
}

impl Steady {
    /// Runs `program args`, writes `input` to it, and waits until its
    /// resident memory is at least `mib` MiB and holds still.
    fn start(program: &str, args: &[&str], input: &[u8], mib: u64) -> Option<Steady> {
        use std::io::Write;
        let child = match Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(child) => child,
            Err(err) => {
                numalab::testing::cannot_check(format!(
                    "{program} cannot run here (scripts/setup.sh --test installs it): {err}"
                ));
                return None;
            }
        };
        let mut steady = Steady { child };
        steady
            .child
            .stdin
            .as_mut()
            .unwrap()
            .write_all(input)
            .unwrap();
        let mut last = 0;
        for _ in 0..600 {
            std::thread::sleep(std::time::Duration::from_millis(50));
            let rss = rss_kib(steady.pid());
            if rss >= mib << 10 && rss == last {
                return Some(steady);
            }
            last = rss;
        }
        panic!("{program} never held {mib} MiB still (last {last} KiB)");
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Steady {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The last sample's memory per node, MB (all kinds), node by node.
fn last_per_node(doc: &Value) -> Vec<f64> {
    let samples = doc["timeline"]["samples"].as_array().unwrap();
    let last = &samples.last().expect("a sample")["memory"]["bytes"];
    let mut per_node = Vec::new();
    for kind in last.as_object().unwrap().values() {
        for (node, bytes) in kind.as_object().unwrap() {
            let node = node.parse::<usize>().unwrap();
            if per_node.len() <= node {
                per_node.resize(node + 1, 0.0);
            }
            per_node[node] += bytes.as_f64().unwrap() / (1 << 20) as f64;
        }
    }
    per_node
}

/// `numalab profile --pid` of `pid` for `duration`, then `numastat -p`
/// right after: the last sample's memory per node within 1% of
/// numastat's. The profile's JSON, or `None` when numastat cannot run
/// here (outside CI).
fn profile_agrees_with_numastat(what: &str, pid: u32, duration: &str) -> Option<Value> {
    let pid = pid.to_string();
    let out = numalab(&[
        "profile",
        "--pid",
        &pid,
        "--interval",
        "50ms",
        "--duration",
        duration,
        "--json",
    ]);
    assert!(out.status.success(), "{what}: {}", stderr(&out));
    let numastat = numastat_totals(&pid)?;
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut per_node = last_per_node(&doc);
    per_node.resize(numastat.len().max(per_node.len()), 0.0);
    // The process holds its memory still between the two reads.
    for (node, (ours, theirs)) in per_node.iter().zip(&numastat).enumerate() {
        assert!(
            (ours - theirs).abs() <= theirs * 0.01 + 0.01,
            "{what}, node {node}: numalab {ours:.2} MB, numastat {theirs:.2} MB"
        );
    }
    eprintln!("{what}: numalab {per_node:.1?} MB per node, numastat -p {numastat:.1?}");
    Some(doc)
}

#[test]
fn profile_of_real_programs_matches_numastat() {
    // GNU sort holding 48 MiB of lines it has read, waiting for the rest.
    let mut lines = Vec::new();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while lines.len() < 48 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        lines.extend_from_slice(format!("{x:016x}{x:032b}\n").as_bytes());
    }
    if let Some(sort) = Steady::start("sort", &["-S", "256M"], &lines, 48) {
        profile_agrees_with_numastat("sort", sort.pid(), "300ms");
    }
    // SQLite with a 40 MiB table in memory, waiting for its next statement.
    let sql = b"CREATE TABLE t(x); WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c LIMIT 300000) INSERT INTO t SELECT randomblob(128) FROM c;\n";
    if let Some(sqlite) = Steady::start("sqlite3", &[":memory:"], sql, 40) {
        profile_agrees_with_numastat("sqlite3", sqlite.pid(), "300ms");
    }
    // stress-ng's vm worker keeping 64 MiB mapped; profile --pid of its
    // parent follows the worker too.
    if let Some(stress) = Steady::start(
        "stress-ng",
        &[
            "--vm",
            "1",
            "--vm-bytes",
            "64M",
            "--vm-keep",
            "--vm-method",
            "ror",
            "--timeout",
            "60s",
        ],
        b"",
        1,
    ) {
        let parent = stress.pid().to_string();
        // The vm stressor runs in a grandchild: the largest descendant.
        let descendants = |root: &str| {
            let mut all = vec![root.to_owned()];
            let mut i = 0;
            while i < all.len() {
                let pid = all[i].clone();
                i += 1;
                let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                    .unwrap_or_default();
                all.extend(children.split_whitespace().map(str::to_owned));
            }
            all
        };
        let mut worker = None;
        for _ in 0..100 {
            worker = descendants(&parent)
                .into_iter()
                .max_by_key(|p| rss_kib(p.parse().unwrap()));
            if worker
                .as_ref()
                .is_some_and(|w| rss_kib(w.parse().unwrap()) >= 64 << 10)
            {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let worker = worker.expect("stress-ng started a vm worker");
        let out = numalab(&[
            "profile",
            "--pid",
            &parent,
            "--interval",
            "50ms",
            "--duration",
            "300ms",
            "--json",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        let last = doc["timeline"]["samples"]
            .as_array()
            .unwrap()
            .last()
            .cloned()
            .unwrap();
        assert!(
            last["processes"].as_u64().unwrap() >= 2,
            "the worker is followed: {last}"
        );
        // The worker writes its pages all the time, but keeps them mapped:
        // its footprint holds still.
        profile_agrees_with_numastat("stress-ng --vm worker", worker.parse().unwrap(), "300ms");
    }
}

/// Whether the kernel lists a CPU PMU (`cpu` on x86, `cpu_core` on hybrid
/// Intel parts, `armv8_*` on Arm): most VMs have none.
fn pmu_here() -> bool {
    std::fs::read_dir("/sys/bus/event_source/devices")
        .map(|dir| {
            dir.filter_map(Result::ok).any(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name == "cpu" || name.starts_with("cpu_") || name.starts_with("armv")
            })
        })
        .unwrap_or(false)
}

#[test]
fn profile_counts_memory_events_where_the_kernel_has_a_pmu() {
    // 32 MiB written a byte per page and read back whole.
    let script =
        "b = bytearray(32 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint(sum(b))";
    let out = numalab(&["profile", "--json", "--", &python(), "-c", script]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stderr).unwrap();
    let events = doc["memory_events"].as_object().unwrap();
    let sources: Vec<&str> = doc["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let line = sources
        .iter()
        .find(|s| s.starts_with("loads, stores"))
        .expect("a line on memory events");
    eprintln!(
        "PMU listed by the kernel: {}; {line}; {events:?}",
        pmu_here()
    );
    if pmu_here() {
        // A CPU may not map perf's generic events (AMD maps no node
        // events); then the line says so.
        if events.is_empty() {
            assert!(line.contains("not offered by this CPU"), "{line}");
        } else {
            assert!(line.contains("exact counts from the PMU"), "{line}");
            if let Some(loads) = events.get("loads") {
                // sum() alone reads 32 MiB: at least a load per 64 bytes.
                assert!(loads.as_u64().unwrap() >= (32 << 20) / 64, "{events:?}");
            }
        }
    } else {
        assert!(events.is_empty(), "no PMU, no counts: {events:?}");
        assert!(line.contains("no hardware PMU here"), "{line}");
    }
}

/// The kernel gives a new process the number after this one: root can
/// make a new process take the number of one just ended.
const LAST_PID: &str = "/proc/sys/kernel/ns_last_pid";

/// Whether this test may choose the number of the next process (root);
/// says why not otherwise, and fails under CI.
fn may_give_numbers() -> bool {
    if std::fs::OpenOptions::new()
        .write(true)
        .open(LAST_PID)
        .is_ok()
    {
        return true;
    }
    cannot_check(format!("needs root to write {LAST_PID}"));
    false
}

/// A process holding `mib` MiB under number `pid`, which has just been
/// freed (another process may take it first: tried 100 times).
fn holder_numbered(pid: u32, mib: u64) -> Holder {
    for _ in 0..100 {
        std::fs::write(LAST_PID, (pid - 1).to_string()).unwrap();
        let holder = Holder::start(mib);
        if holder.0.id() == pid {
            return holder;
        }
    }
    panic!("no new process took number {pid} in 100 tries");
}

/// Whether process `pid` is asleep in `clock_nanosleep` (230 on x86-64,
/// `/proc/PID/syscall`): numalab profile's watch between two samples.
fn sleeping(pid: u32) -> bool {
    let syscall = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
    syscall.split_whitespace().next() == Some("230")
}

/// Whether process `pid` is stopped (state `T`).
fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_default()
        .rsplit_once(')')
        .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
}

#[test]
fn profile_pid_stops_when_its_process_ends_even_if_the_number_is_reused() {
    if !may_give_numbers() {
        return;
    }
    let mut first = Some(Holder::start(1));
    let pid = first.as_ref().unwrap().0.id();
    // A watch ends when its process does; --duration only ends a watch
    // that wrongly went on to the process given the number next.
    let watcher = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(["profile", "--pid", &pid.to_string(), "--interval", "20ms"])
        .args(["--duration", "5s", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let signal = |name: &str| {
        let sent = Command::new("kill")
            .args([name, &watcher.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    };
    // Watching (asleep between two samples), then stopped, as a busy
    // host leaves a process waiting to run, while its process ends and
    // the number is given to another.
    while !sleeping(watcher.id()) {
        std::thread::yield_now();
    }
    signal("-STOP");
    while !stopped(watcher.id()) {
        std::thread::yield_now();
    }
    drop(first.take());
    let second = holder_numbered(pid, 200);
    signal("-CONT");
    let out = watcher.wait_with_output().unwrap();
    drop(second);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ended"], true);
    let samples = doc["timeline"]["samples"].as_array().unwrap();
    let most = most_memory(&doc);
    eprintln!(
        "{} samples, the most memory in one {:.1} MiB",
        samples.len(),
        most / (1 << 20) as f64
    );
    assert!(
        most < (100 << 20) as f64,
        "the watch reported {:.0} MiB: the later process under number {pid}",
        most / (1 << 20) as f64
    );
}

#[test]
fn profile_refuses_emit_and_output_naming_one_file_before_running() {
    let scratch = Scratch::new("profile-same-file");
    let marker = scratch.path("ran");
    let out = numalab(&[
        "profile",
        "--emit",
        &scratch.path("x.toml"),
        "-o",
        &format!("{}/./x.toml", scratch.0.display()),
        "--",
        "touch",
        &marker,
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("are the same file"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        scratch.files(),
        Vec::<String>::new(),
        "nothing ran, nothing written"
    );
}

#[test]
fn profile_of_a_command_forgets_a_child_once_it_has_ended() {
    // The command starts a child that ends at once, writes its number,
    // and waits until the test says go, then lives on for a second while
    // another process of 200 MiB holds that number: the child's number,
    // once reaped, is not the command's any more.
    if !may_give_numbers() {
        return;
    }
    let scratch = Scratch::new("profile-forget");
    let (number, go) = (scratch.path("child"), scratch.path("go"));
    let script = format!(
        "import os, subprocess, time\n\
p = subprocess.Popen(['true']); p.wait()\n\
open('{number}.tmp', 'w').write(str(p.pid)); os.rename('{number}.tmp', '{number}')\n\
while not os.path.exists('{go}'): time.sleep(0.01)\n\
time.sleep(1)\n"
    );
    let python = python();
    let watcher = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args([
            "profile",
            "--interval",
            "20ms",
            "--json",
            "--",
            &python,
            "-c",
            &script,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let child: u32 = loop {
        if let Some(pid) = std::fs::read_to_string(&number)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            break pid;
        }
        std::thread::yield_now();
    };
    let holder = holder_numbered(child, 200);
    std::fs::write(&go, "").unwrap();
    let out = watcher.wait_with_output().unwrap();
    drop(holder);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value =
        serde_json::from_slice(&out.stderr[out.stderr.iter().position(|&b| b == b'{').unwrap()..])
            .unwrap();
    let most = most_memory(&doc);
    assert!(
        most < (100 << 20) as f64,
        "a sample counted {:.0} MiB: the process now holding number {child}",
        most / (1 << 20) as f64
    );
}

/// The most memory, of every kind on every node, in one sample of a
/// profile.
fn most_memory(doc: &Value) -> f64 {
    doc["timeline"]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            s["memory"]["bytes"].as_object().map_or(0.0, |kinds| {
                kinds
                    .values()
                    .flat_map(|nodes| nodes.as_object().unwrap().values())
                    .filter_map(Value::as_f64)
                    .sum::<f64>()
            })
        })
        .fold(0.0, f64::max)
}

#[test]
fn profile_pid_denied_as_root_does_not_tell_root_to_run_as_root() {
    // A process whose memory the kernel hides from this one: on the
    // development VM, PID 1 (a security module refuses even root).
    if std::fs::read_to_string("/proc/1/numa_maps").is_ok() {
        eprintln!("not run: this process may read PID 1's memory, so nothing is denied");
        return;
    }
    let out = numalab(&["profile", "--pid", "1", "--duration", "100ms"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("--pid 1: permission denied"), "{err}");
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    assert_eq!(err.contains("or as root"), !root, "{err}");
}
