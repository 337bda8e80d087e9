//! `numalab exec`: placement as numactl does it, and where pages landed.

use crate::common::*;
use serde_json::Value;
use std::process::Command;

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
fn exec_dash_o_dash_puts_the_report_on_standard_output_for_a_pipe() {
    // The command writes first; the report follows it on standard output.
    let out = numalab(&["exec", "-o", "-", "--", "sh", "-c", "echo from-the-command"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let (said, report) = text.split_once('\n').unwrap();
    assert_eq!(said, "from-the-command");
    let doc: Value = serde_json::from_str(report).unwrap();
    assert_eq!(doc["schema"], "numalab.exec");
    assert!(!stderr(&out).contains("numalab.exec"), "{}", stderr(&out));
    assert!(!std::path::Path::new("-").exists(), "no file named -");
    // --csv on standard output too; --json alone stays on standard error.
    let out = numalab(&["exec", "-o", "-", "--csv", "--", "true"]);
    assert!(
        stdout(&out).starts_with("when,node,kind,bytes"),
        "{}",
        stdout(&out)
    );
    let out = numalab(&["exec", "--json", "--", "true"]);
    assert_eq!(stdout(&out), "");
    assert!(stderr(&out).contains("\"schema\": \"numalab.exec\""));
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

    // Said alike by every command that runs one, as a shell says it.
    for cmd in ["exec", "profile", "advise"] {
        let out = numalab(&[cmd, "--", "numalab-no-such-program"]);
        assert_eq!(out.status.code(), Some(127), "{cmd}");
        assert!(
            stderr(&out).contains(&format!(
                "numalab {cmd}: cannot run numalab-no-such-program: not found in PATH"
            )),
            "{cmd}: {}",
            stderr(&out)
        );
        let plain =
            std::env::temp_dir().join(format!("numalab-plain-{cmd}-{}", std::process::id()));
        std::fs::write(&plain, "not a program").unwrap(); // 0644
        let out = numalab(&[cmd, "--", plain.to_str().unwrap()]);
        std::fs::remove_file(&plain).unwrap();
        assert_eq!(out.status.code(), Some(126), "{cmd}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(": not an executable file"),
            "{cmd}: {}",
            stderr(&out)
        );
    }

    // A name with escapes and a newline is shown, not obeyed.
    for cmd in ["exec", "profile", "advise"] {
        let out = numalab(&[cmd, "--", "/nonexistent/evil\x1b[2J\nnumalab: forged"]);
        assert_eq!(out.status.code(), Some(127), "{cmd}");
        let err = stderr(&out);
        assert!(
            err.contains("evil\\x1b[2J\\nnumalab: forged"),
            "{cmd}: {err:?}"
        );
        assert!(!err.contains('\x1b'), "{cmd}: {err:?}");
        assert!(
            !err.lines().any(|l| l.starts_with("numalab: forged")),
            "{cmd}: {err:?}"
        );
    }
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
        err.contains(&format!(
            "this machine has {} {nodes}",
            if nodes.len() == 1 { "node" } else { "nodes" }
        )),
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
    // Two policies at once is a usage error (125, numalab's own failure).
    let out = numalab(&["exec", "-m", "0", "-i", "0", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
}

/// Whether `pid` is still a process (not even a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
            Some(state != 'Z' && state != 'X')
        })
        .unwrap_or(false)
}

/// A field of `/proc/PID/status`, e.g. `TracerPid`.
fn status_field(pid: u32, field: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{field}:"))
                .map(|v| v.trim().to_owned())
        })
        .unwrap_or_default()
}

#[test]
fn exec_returns_when_the_command_exits_not_when_its_daemon_does() {
    // The shell starts a daemon (its own session, its own output) and
    // exits 5: numalab must come back with 5 while the daemon still runs,
    // and leave it running untraced and unstopped.
    let dir = Scratch::new("exec-daemon");
    let pidfile = dir.path("daemon.pid");
    let script =
        format!("setsid sleep 60 </dev/null >/dev/null 2>&1 & echo $! > {pidfile}; exit 5");
    let out = numalab(&["exec", "-q", "--", "sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    let daemon: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let running = alive(daemon);
    let tracer = status_field(daemon, "TracerPid");
    let state = status_field(daemon, "State");
    let _ = Command::new("kill").arg(daemon.to_string()).status();
    assert!(
        running,
        "numalab came back only after the daemon {daemon} ended"
    );
    assert_eq!(tracer, "0", "the daemon is still traced");
    assert!(
        !state.starts_with('T') && !state.starts_with('t'),
        "the daemon was left stopped: {state}"
    );
}

#[test]
fn exec_usage_errors_exit_125_like_env_and_timeout() {
    // The command's own 1 and 2 must not be mistaken for numalab's.
    for args in [
        vec!["exec", "--bogus", "--", "true"],
        vec!["exec", "-m", "0", "-i", "0", "--", "true"],
        vec!["exec"],
    ] {
        let out = numalab(&args);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("Usage: numalab exec"),
            "{}",
            stderr(&out)
        );
    }
    // Other commands keep clap's 2; help is not an error.
    assert_eq!(numalab(&["topo", "--bogus"]).status.code(), Some(2));
    assert_eq!(numalab(&["exec", "--help"]).status.code(), Some(0));
}

#[test]
fn node_and_cpu_numbers_beyond_linux_limits_are_out_of_range_not_wrapped() {
    for (args, number, limit) in [
        (
            vec!["exec", "--membind=99999999999999999999", "--", "true"],
            "node 99999999999999999999",
            "1023",
        ),
        (
            vec!["exec", "--interleave=0-4294967296", "--", "true"],
            "node 4294967296",
            "1023",
        ),
        (
            vec!["exec", "--physcpubind=99999999999999999999", "--", "true"],
            "CPU 99999999999999999999",
            &numalab::CpuSet::MAX.to_string(),
        ),
    ] {
        let out = numalab(&args);
        assert_eq!(out.status.code(), Some(125), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains(number), "{args:?}: {err}");
        assert!(err.contains("out of range"), "{args:?}: {err}");
        assert!(err.contains(limit), "{args:?}: {err}");
        assert!(!err.contains("4294967295"), "wrapped: {err}");
    }
}

#[test]
fn weights_naming_a_node_twice_are_refused_naming_it() {
    let out = numalab(&["exec", "-w", "0:3,0:1", "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("node 0 is given two weights"), "{err}");
    let out = numalab(&["exec", "-w", "0-1:3,1:1", "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("node 1 is given two weights"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn error_messages_say_each_fact_once() {
    let experiment = small();
    for args in [
        vec!["exec", "--membind", "7", "--", "true"],
        vec!["exec", "-w", "7:1", "--", "true"],
        vec!["fill", "--size", "4K", "--membind=7"],
        vec!["run", &experiment, "--set", "memory.policy=bind:7"],
    ] {
        let out = numalab(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = stderr(&out);
        assert_eq!(
            err.matches("node 7 does not exist").count(),
            1,
            "{args:?}: {err}"
        );
    }
}

/// The weight of node 0 in the kernel's table, if it has one.
/// The pid a test's command wrote to `pidfile`, once it is there and
/// `ready(pid)` holds (polled every 10 ms).
fn pid_written(pidfile: &str, ready: impl Fn(u32) -> bool) -> u32 {
    loop {
        if let Some(pid) = std::fs::read_to_string(pidfile)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            if ready(pid) {
                return pid;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn node0_weight() -> Option<String> {
    std::fs::read_to_string("/sys/kernel/mm/mempolicy/weighted_interleave/node0")
        .ok()
        .map(|w| w.trim().to_owned())
}

/// The kernel's automatic-weights switch (`auto`; `__auto_type` on Linux
/// 6.18), if it has one.
fn weights_auto() -> Option<String> {
    ["auto", "__auto_type"].iter().find_map(|name| {
        std::fs::read_to_string(format!(
            "/sys/kernel/mm/mempolicy/weighted_interleave/{name}"
        ))
        .ok()
        .map(|w| w.trim().to_owned())
    })
}

#[test]
fn exec_passes_sigterm_on_restores_the_weights_and_exits_143() {
    let weights = node0_weight();
    let real = weights.is_some() && is_root();
    if !real {
        let why = if weights.is_none() {
            "weighted interleave not supported by this kernel"
        } else {
            "setting weights needs root"
        };
        numalab::testing::cannot_check(format!("{why} (the weight part; forwarding is tested)"));
    }
    let dir = Scratch::new("exec-sigterm");
    let pidfile = dir.path("child.pid");
    let script = format!("echo $$ > {pidfile}; exec sleep 30");
    let auto_before = weights_auto();
    let mut args: Vec<&str> = vec!["exec", "-q"];
    if real {
        args.extend(["-w", "0:7"]);
    }
    args.extend(["--", "sh", "-c", &script]);
    let child = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(&args)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the command runs (it wrote its pid, then became sleep).
    let command = pid_written(&pidfile, |pid| {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
    });
    if real {
        assert_eq!(
            node0_weight().as_deref(),
            Some("7"),
            "the weight is set while it runs"
        );
    }
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(143), "{err}");
    assert!(!alive(command), "the command {command} outlived numalab");
    if real {
        assert_eq!(node0_weight(), weights, "node 0's weight restored: {err}");
        // Setting a weight switches the automatic weights off; they are
        // switched back on, or numalab says why not.
        if auto_before.as_deref() == Some("true") && weights_auto().as_deref() != Some("true") {
            assert!(err.contains("automatic weights back on"), "{err}");
        } else {
            assert_eq!(weights_auto(), auto_before, "{err}");
        }
        assert!(err.contains("restore them with: echo "), "{err}");
    }
}

#[test]
fn exec_command_dies_with_numalab_even_by_sigkill() {
    let dir = Scratch::new("exec-sigkill");
    let pidfile = dir.path("child.pid");
    let script = format!("echo $$ > {pidfile}; exec sleep 30");
    let mut child = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(["exec", "-q", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    let command = pid_written(&pidfile, |_| true);
    child.kill().unwrap();
    child.wait().unwrap();
    // The parent-death signal is delivered as numalab exits; the command
    // is then reaped by init.
    let mut gone = false;
    for _ in 0..500 {
        if !alive(command) {
            gone = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(gone, "the command {command} outlived numalab");
}
