//! Counters opened on a launched command at its `exec` count all of it,
//! the processes it starts included: checked against the kernel's own
//! fault counts for waited-for children (`cminflt`/`cmajflt` in
//! `/proc/self/stat`). Alone in its test binary, so no other test's
//! children are in those counts.

use std::process::Command;

use numalab::launch::{Exit, Launch};
use numalab_bench::experiment::counters::{CounterKind, ProcessCounters};

/// Page faults of this process's waited-for children so far.
fn children_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the command's closing parenthesis, from field 3.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    // cminflt is field 11, cmajflt field 13 (proc(5)).
    fields[11 - 3].parse::<u64>().unwrap() + fields[13 - 3].parse::<u64>().unwrap()
}

fn python() -> String {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 runs");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn counters_opened_at_exec_count_the_command_and_what_it_starts() {
    let faults = CounterKind::named("page-faults").unwrap();
    // 64 MiB in base pages, written a byte per page: 16,384 faults, made
    // by a grandchild (the shell's child) so only inheritance counts them.
    let script = "import mmap\nm = mmap.mmap(-1, 64 << 20)\nm.madvise(mmap.MADV_NOHUGEPAGE)\nfor i in range(0, len(m), 4096): m[i] = 1\n";
    let command = format!("{} -c '{script}' & wait", python());
    let before = children_faults();
    let mut counters = None;
    let report = Launch::new("sh", ["-c", &command])
        .run_with(|pid| counters = Some(ProcessCounters::open(&[pid], &[faults])))
        .unwrap();
    let kernel = children_faults() - before;
    assert_eq!(report.exit, Exit::Code(0));
    let mut counters = counters.expect("called at the command's start");
    if let Some((_, err)) = counters.failed().first() {
        numalab::testing::cannot_check(format!("perf events not usable here ({err}); allow them with sysctl kernel.perf_event_paranoid=1"));
        return;
    }
    let counted = counters.read()["page-faults"];
    eprintln!("page faults: perf {counted}, kernel (children) {kernel}");
    assert!(
        kernel >= 16_384,
        "the kernel saw the 64 MiB written: {kernel}"
    );
    // The kernel's count also has the child's faults between fork and
    // exec, before the counters were opened: a few hundred at most.
    assert!(
        counted <= kernel + 50 && counted + 400 + kernel / 100 >= kernel,
        "perf {counted} vs kernel {kernel}"
    );
}
