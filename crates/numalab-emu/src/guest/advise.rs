//! `numalab profile` and `numalab advise` on a real program in the
//! emulated machine: placement is real here, timings are not (and are not
//! checked).
//!
//! - `profile.timeline`: the guest program's `--allocate` mode writes
//!   32 MiB on one node, holds it, frees it, then does the same on another;
//!   profile's timeline must show the memory on the first node, then on
//!   the second, as the preset names them.
//! - `advise.placements`: busybox `dd` (8 MiB buffer) under every
//!   candidate advise makes: each run's pages where the preset says that
//!   placement puts them (the kernel's count, numa_maps), transparent
//!   huge pages off so that interleave is exact to the page.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use numalab::locate::MemoryKind;
use numalab::{MemPolicy, NodeBuffer, NodeSet};
use numalab_bench::advise::AdviseReport;
use numalab_bench::profile::ProfileReport;

use super::{Guest, Outcome, Pages, Ran};

/// MiB the `--allocate` steps hold.
const HELD_MIB: u64 = 32;

/// How long each is held: an emulated CPU reads numa_maps slowly, and
/// the sampling keeps to 1% of a CPU, so samples may be seconds apart
/// there (a first sample that took 36 ms of CPU was followed by 3.6 s of
/// pause in one run).
const HOLD: std::time::Duration = std::time::Duration::from_secs(5);

/// `numalab-guest --allocate A,B`: for each node in turn, 32 MiB bound
/// there, written, held for 5 s, then freed. What the profile watches.
pub fn allocate_in_turn(nodes: &str) -> Result<()> {
    let nodes: NodeSet = nodes.parse().context("--allocate takes nodes, as 0,1")?;
    for node in nodes.iter() {
        let buffer = NodeBuffer::new(
            (HELD_MIB << 20) as usize,
            MemPolicy::Bind(NodeSet::single(node)),
        )?;
        std::thread::sleep(HOLD);
        drop(buffer);
    }
    Ok(())
}

/// How long a profile of the guest program may take before the check
/// gives up on it (the programs run 10 s at most).
const PROFILE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(90);

/// `pid` and its descendants with their state and wait channel, threads
/// included: what a hung profile was waiting for.
fn process_states(pid: i32) -> String {
    numalab::profile::descendants(pid)
        .iter()
        .flat_map(|&p| {
            let tasks: Vec<String> = std::fs::read_dir(format!("/proc/{p}/task"))
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            tasks.into_iter().map(move |tid| {
                let stat = std::fs::read_to_string(format!("/proc/{p}/task/{tid}/stat"))
                    .unwrap_or_default();
                let state = stat
                    .rsplit_once(')')
                    .and_then(|(_, r)| r.split_whitespace().next())
                    .unwrap_or("?")
                    .to_owned();
                let wchan = std::fs::read_to_string(format!("/proc/{p}/task/{tid}/wchan"))
                    .unwrap_or_default();
                format!("{p}/{tid} {state} {wchan}")
            })
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `numalab profile FLAGS --json -- <this guest program> ARGS`: the
/// report (on standard error: the command owns standard output).
fn profile_me(guest: &Guest, flags: &[&str], args: &[&str]) -> Result<ProfileReport> {
    let me = std::env::current_exe()?;
    let me = me.to_str().context("the guest program's path")?;
    let mut all = vec!["profile"];
    all.extend(flags);
    all.extend(["--json", "--", me]);
    all.extend(args);
    // A profile that does not end is a failure of this check, with the
    // state of every process involved, not a guest that never powers off.
    let mut child = std::process::Command::new(&guest.numalab)
        .args(&all)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let began = std::time::Instant::now();
    while child.try_wait()?.is_none() {
        if began.elapsed() > PROFILE_DEADLINE {
            let states = process_states(child.id() as i32);
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "numalab {} had not ended after {} s; its processes (pid state wchan): {states}",
                all.join(" "),
                PROFILE_DEADLINE.as_secs()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let output = child.wait_with_output()?;
    let ran = Ran {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    if ran.code != Some(0) {
        bail!(
            "numalab {} exited {:?}:\n{}{}",
            all.join(" "),
            ran.code,
            ran.stdout,
            ran.stderr
        );
    }
    Ran::result_in(&ran.stderr)
}

/// `numalab-guest --write-quarter`: 64 MiB written once, then its first
/// quarter written again every 50 ms for at least 5 s, and on until the
/// profiler has closed a window after the whole 64 MiB was written (at
/// most 60 s). What profile.writes watches.
///
/// The profiler's pacing spaces its samples by what each cost, and the
/// sample that clears the soft-dirty bits of all 64 MiB is the dearest
/// (seconds of pause under emulation on a busy host): a fixed 5 s could
/// end before the next sample. The program sees the clears in its own
/// soft-dirty bits (`/proc/self/pagemap` bit 55) of a sentinel page
/// outside the rewritten quarter: clean once the profiler cleared the
/// whole write, dirtied once, clean again when the next sample came.
pub fn write_quarter() {
    let mut buffer = vec![0u8; 64 << 20];
    let page = numalab::system::page_size();
    for byte in buffer.iter_mut().step_by(page) {
        *byte = 1;
    }
    let sentinel = buffer.len() - page;
    let began = std::time::Instant::now();
    let mut round = 0u8;
    // 0: waiting for the clear of the whole write; 1: sentinel dirtied,
    // waiting for the next clear; 2: a window after the write was closed.
    let mut seen = 0;
    loop {
        let elapsed = began.elapsed();
        let enough = elapsed >= std::time::Duration::from_secs(5);
        if (enough && seen == 2) || elapsed >= std::time::Duration::from_secs(60) {
            break;
        }
        round = round.wrapping_add(1);
        for byte in buffer[..16 << 20].iter_mut().step_by(page) {
            *byte = round;
        }
        if soft_dirty(buffer[sentinel..].as_ptr()) == Some(false) {
            match seen {
                0 => {
                    buffer[sentinel] = round;
                    seen = 1;
                }
                1 => seen = 2,
                _ => {}
            }
        }
        std::hint::black_box(&buffer);
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The soft-dirty bit of the page holding `at`, from `/proc/self/pagemap`;
/// `None` where it cannot be read.
fn soft_dirty(at: *const u8) -> Option<bool> {
    use std::io::{Read, Seek, SeekFrom};
    let page = numalab::system::page_size() as u64;
    let mut pagemap = std::fs::File::open("/proc/self/pagemap").ok()?;
    pagemap.seek(SeekFrom::Start(at as u64 / page * 8)).ok()?;
    let mut entry = [0u8; 8];
    pagemap.read_exact(&mut entry).ok()?;
    Some(u64::from_le_bytes(entry) >> 55 & 1 == 1)
}

/// `numalab profile --writes` of a program rewriting a quarter of its
/// memory all the time: the samples after the first say about a quarter
/// of its private writable pages were written.
pub fn writes(guest: &Guest, out: &mut Outcome) -> Result<()> {
    // A sample that clears the soft-dirty bits of 64 MiB is dear under
    // emulation (its CPU time counted while other vCPUs run, too): at the
    // default 1% it would pause the sampling for up to a minute.
    let report = profile_me(
        guest,
        &["--writes", "--interval", "500ms", "--max-overhead", "20"],
        &["--write-quarter"],
    )?;
    let shares: Vec<String> = report
        .timeline
        .samples
        .iter()
        .map(|s| {
            s.written
                .map_or("-".into(), |w| format!("{}/{}", w.written, w.present))
        })
        .collect();
    out.note(format!("written/present per sample: {}", shares.join(", ")));
    if report
        .sources
        .iter()
        .any(|s| s.starts_with("pages written: not measured"))
    {
        out.not_applicable("the guest kernel keeps no soft-dirty bits");
        return Ok(());
    }
    // The windows that began with the whole 64 MiB already written (the
    // window that saw it written the first time counts all of it): a
    // quarter of it rewritten, the rest of the program's writable memory
    // small.
    let samples = &report.timeline.samples;
    let full: Vec<f64> = samples
        .windows(2)
        .filter(|pair| pair[0].memory.private_per_node().values().sum::<u64>() >= 64 << 20)
        .filter_map(|pair| pair[1].written)
        .map(|w| w.share())
        .collect();
    out.check(
        "windows after the 64 MiB was written",
        ">= 1",
        full.len(),
        !full.is_empty(),
    );
    let median = numalab_bench::stats::quantile(&full, 0.5).unwrap_or(0.0);
    out.check(
        "median share written",
        "0.22 to 0.35 (a quarter, and the program's own small writes)",
        format!("{median:.3}"),
        (0.22..=0.35).contains(&median),
    );
    Ok(())
}

fn private_mib(per_kind: &BTreeMap<MemoryKind, BTreeMap<u32, u64>>, node: u32) -> u64 {
    per_kind
        .iter()
        .filter(|(kind, _)| **kind != MemoryKind::File)
        .filter_map(|(_, per_node)| per_node.get(&node))
        .sum::<u64>()
        >> 20
}

/// The timeline follows memory from the first node to the last.
pub fn timeline(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let nodes = guest.preset.memory_nodes();
    let (Some(first), Some(last)) = (nodes.first(), nodes.last()) else {
        bail!("the preset has no nodes");
    };
    let nodes_arg = format!("{first},{last}");
    // At 20% of a CPU, as profile.writes: under emulation a sample's CPU
    // time runs on while the host serves other vCPUs, and at 1% one dear
    // sample (0.6 s seen on a fresh machine) would pause the sampling past
    // the program's end.
    let report = profile_me(
        guest,
        &["--interval", "200ms", "--max-overhead", "20"],
        &["--allocate", &nodes_arg],
    )?;
    let samples = &report.timeline.samples;
    out.note(format!(
        "samples at {} s; sampling took {:.0} ms of CPU",
        samples
            .iter()
            .map(|s| format!("{:.2}", s.at_s))
            .collect::<Vec<_>>()
            .join(", "),
        report.timeline.sampling_cpu_s * 1e3
    ));
    let on = |node| {
        samples
            .iter()
            .position(|s| private_mib(&s.memory.bytes, node) >= HELD_MIB)
    };
    let (on_first, on_last) = (on(first), on(last));
    out.check(
        format!("a sample with {HELD_MIB} MiB on node {first}"),
        "some sample",
        format!("{on_first:?} of {}", samples.len()),
        on_first.is_some(),
    );
    out.check(
        format!("then a later one with {HELD_MIB} MiB on node {last}"),
        format!("after sample {on_first:?}"),
        format!("{on_last:?}"),
        matches!((on_first, on_last), (Some(a), Some(b)) if b > a),
    );
    if let Some(b) = on_last {
        let left = private_mib(&samples[b].memory.bytes, first);
        out.check(
            format!("node {first} given back by then"),
            format!("< {HELD_MIB} MiB"),
            format!("{left} MiB"),
            left < HELD_MIB,
        );
    }
    out.same("exit", "Some(Code(0))", format!("{:?}", report.exit));
    Ok(())
}

/// dd's 8 MiB buffer, in pages.
const DD_PAGES: u64 = 2048;

/// busybox dd filling an 8 MiB buffer.
const DD: [&str; 5] = ["dd", "if=/dev/zero", "of=/dev/null", "bs=8M", "count=1"];

/// `advise --runs 2 --warmup 0 [--json] -- COMMAND`: enough runs to see
/// each placement's pages (timings here mean nothing).
fn advise_args<'a>(json: bool, command: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["advise", "--runs", "2", "--warmup", "0"];
    if json {
        args.push("--json");
    }
    args.push("--");
    args.extend(command);
    args
}

/// Every candidate's runs put dd's pages where the preset says.
pub fn placements(guest: &Guest, out: &mut Outcome) -> Result<()> {
    // Base pages, so interleave is exact to the page.
    let _thp = super::exec::ThpSetting::set("never")?;
    let preset = &guest.preset;
    let nodes = preset.memory_nodes();
    let cpu_nodes = preset.cpu_nodes();
    // Where first touch puts pages: each CPU node's own memory, or the
    // nearest node with memory for a memory-less one.
    let home_nodes: NodeSet = cpu_nodes.iter().map(|n| preset.home_node(n)).collect();
    let ran = guest.numalab(&advise_args(true, &DD))?;
    if ran.code != Some(0) {
        bail!(
            "numalab advise exited {:?}:\n{}{}",
            ran.code,
            ran.stdout,
            ran.stderr
        );
    }
    let report: AdviseReport = numalab_bench::document::Document::parse(&ran.stdout)
        .context("reading numalab advise --json")?;
    let names: Vec<&str> = report
        .candidates
        .iter()
        .map(|c| c.candidate.name.as_str())
        .collect();
    let mut expected_names = vec!["first-touch".to_owned(), format!("interleave:{nodes}")];
    expected_names.extend(
        cpu_nodes
            .intersection(&nodes)
            .iter()
            .map(|n| format!("bind:{n}")),
    );
    expected_names.extend(nodes.iter().map(|n| format!("preferred:{n}")));
    out.same(
        "candidates (besides weighted interleave)",
        expected_names.join(" "),
        names
            .iter()
            .filter(|n| !n.starts_with("weighted"))
            .copied()
            .collect::<Vec<_>>()
            .join(" "),
    );
    for result in &report.candidates {
        let name = &result.candidate.name;
        out.same(format!("{name}: runs"), 2, result.runs.len());
        for (i, run) in result.runs.iter().enumerate() {
            let found = Pages(
                run.private_per_node
                    .iter()
                    .map(|(node, bytes)| (*node, bytes / 4096))
                    .collect(),
            );
            let all: u64 = found.0.values().sum();
            let what = format!("{name} run {}", i + 1);
            out.check(
                format!("{what}: pages"),
                format!(">= {DD_PAGES}"),
                all,
                all >= DD_PAGES,
            );
            let ok = match &result.candidate.policy {
                None => found.0.keys().all(|n| home_nodes.contains(*n)),
                Some(MemPolicy::Bind(set)) => found.0.keys().all(|n| set.contains(*n)),
                Some(MemPolicy::Preferred(node)) => found.0.keys().all(|n| n == node),
                Some(MemPolicy::Interleave(set)) => found.within(&Pages::even(set, all), 16),
                Some(MemPolicy::WeightedInterleave(weights)) => {
                    let sum: u64 = weights.values().map(|&w| u64::from(w)).sum();
                    let expected = Pages(
                        weights
                            .iter()
                            .map(|(n, &w)| (*n, all * u64::from(w) / sum))
                            .collect(),
                    );
                    found.within(&expected, 16 * weights.len() as u64)
                }
                Some(other) => bail!("advise made an unexpected candidate {other}"),
            };
            let wanted = match &result.candidate.policy {
                None => format!("on the CPU nodes' own memory, nodes {home_nodes}"),
                Some(MemPolicy::Interleave(set)) => format!("{} (±16)", Pages::even(set, all)),
                Some(policy) => format!("as {policy} places them"),
            };
            out.check(format!("{what}: where"), wanted, &found, ok);
        }
    }
    out.check(
        "a recommendation",
        "some placement",
        format!("{:?}", report.recommendation.as_ref().map(|r| &r.name)),
        report.recommendation.is_some(),
    );
    for note in &report.not_tried {
        out.note(format!("not tried: {note}"));
    }
    // The table a person reads: the same placements, a recommendation
    // and the lines to run it with.
    let text = guest.numalab(&advise_args(false, &DD))?;
    out.check(
        "the table's recommendation",
        "recommended: …, and a numactl or plain line",
        text.stdout
            .lines()
            .find(|l| l.starts_with("recommended:"))
            .unwrap_or("none"),
        text.stdout.contains("recommended: ")
            && (text.stdout.contains("numactl --") || text.stdout.contains("run it as it is: dd")),
    );
    out.note(format!("advise's table:\n{}", text.stdout));

    // A command that fails under one placement only: a shell that exits 1
    // when its own numa_maps shows the policy bind:LAST.
    let last = cpu_nodes.intersection(&nodes).last().unwrap_or(0);
    let script = format!("! grep -q 'bind:{last} ' /proc/self/numa_maps");
    let ran = guest.numalab(&advise_args(true, &["sh", "-c", &script]))?;
    out.same(
        "advise of a command failing under bind:N: exit",
        "Some(0)",
        format!("{:?}", ran.code),
    );
    let report: AdviseReport = numalab_bench::document::Document::parse(&ran.stdout)
        .context("reading numalab advise --json")?;
    let failed: Vec<(&str, &str)> = report
        .candidates
        .iter()
        .filter_map(|c| Some((c.candidate.name.as_str(), c.failed.as_deref()?)))
        .collect();
    let bound = format!("bind:{last}");
    out.check(
        "only that placement left out, named",
        format!("{bound}: \"the command exits 1 under {bound} …\""),
        format!("{failed:?}"),
        failed.len() == 1
            && failed[0].0 == bound
            && failed[0]
                .1
                .starts_with(&format!("the command exits 1 under {bound} (run 1 of 2)")),
    );
    out.check(
        "the others still compared",
        "a recommendation other than it",
        format!("{:?}", report.recommendation.as_ref().map(|r| &r.name)),
        report
            .recommendation
            .as_ref()
            .is_some_and(|r| r.name != bound),
    );
    Ok(())
}

/// `numalab advise` sent SIGTERM in the middle: the run in progress gets
/// the signal, advising stops, the runs so far are reported (marked
/// interrupted), and numalab exits 143.
pub fn interrupted(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let marker = "/tmp/numalab-advise-runs";
    let _ = std::fs::remove_file(marker);
    // Each run notes itself, then sleeps long enough to be caught.
    let script = format!("echo run >> {marker}; exec sleep 0.5");
    let child = std::process::Command::new(&guest.numalab)
        .args([
            "advise", "--runs", "5", "--warmup", "0", "--json", "--", "sh", "-c", &script,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    // Let a few runs finish, then interrupt.
    let runs = || std::fs::read_to_string(marker).map_or(0, |t| t.lines().count());
    for _ in 0..3000 {
        if runs() >= 3 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()?;
    let output = child.wait_with_output()?;
    out.same(
        "exit status",
        "Some(143)",
        format!("{:?}", output.status.code()),
    );
    let report: AdviseReport =
        numalab_bench::document::Document::parse(&String::from_utf8_lossy(&output.stdout))
            .context("reading the interrupted advise's JSON")?;
    out.same(
        "marked interrupted",
        "Some(15)",
        format!("{:?}", report.interrupted),
    );
    let kept: usize = report.candidates.iter().map(|c| c.runs.len()).sum();
    let made = runs();
    out.check(
        "the runs so far are kept",
        format!("{made} (the runs the command made), fewer than all"),
        kept,
        kept == made && kept < 5 * report.candidates.len(),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    out.check(
        "says so",
        "signal 15 ended advising early",
        stderr.lines().last().unwrap_or(""),
        stderr.contains("signal 15 ended advising early"),
    );
    Ok(())
}
