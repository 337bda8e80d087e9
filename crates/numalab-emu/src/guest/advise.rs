//! `numalab profile` and `numalab advise` on a real program in the
//! emulated machine: placement is real here, timings are not (and are not
//! checked).
//!
//! - `profile.timeline`: the guest program's `--allocate` mode writes
//!   32 MiB on one node, holds it until a sample has read it, frees it,
//!   then does the same on another;
//!   profile's timeline must show the memory on the first node, then on
//!   the second, as the preset names them.
//! - `advise.placements`: busybox `dd` (8 MiB buffer) under every
//!   candidate advise makes: each run's pages where the preset says that
//!   placement puts them (the kernel's count, numa_maps), transparent
//!   huge pages off so that interleave is exact to the page.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use numalab::locate::MemoryKind;
use numalab::{BufferOptions, MemPolicy, NodeBuffer, NodeSet};
use numalab_bench::advise::AdviseReport;
use numalab_bench::profile::ProfileReport;

use super::{Guest, Outcome, Pages, Ran, HANG};

/// MiB the `--allocate` steps hold.
const HELD_MIB: u64 = 32;

/// A page of the program's own whose soft-dirty bit tells it that
/// `numalab profile --writes` has taken a sample: each sample reads the
/// program's memory (numa_maps, then pagemap) and ends by clearing every
/// soft-dirty bit it has (`/proc/PID/clear_refs`). A page written, then
/// found clean, was cleared by a sample that ended after the write; the
/// next clear found after writing it again comes from a later sample,
/// which began after that one ended, so it read the program's memory as
/// it was at the first write. The programs the profile checks watch wait
/// on this instead of a clock: on a busy host the profiler's pauses
/// stretch, and a program that held its memory for a fixed time was
/// gone before a sample saw it.
#[derive(Debug)]
pub struct SampleSignal {
    pagemap: std::fs::File,
}

impl SampleSignal {
    /// Opens this process's pagemap.
    pub fn new() -> Result<SampleSignal> {
        let pagemap =
            std::fs::File::open("/proc/self/pagemap").context("opening /proc/self/pagemap")?;
        Ok(SampleSignal { pagemap })
    }

    /// The soft-dirty bit of the page holding `at`.
    fn dirty(&self, at: *const u8) -> Result<bool> {
        use std::os::unix::fs::FileExt;
        let page = numalab::system::page_size() as u64;
        let mut entry = [0u8; 8];
        self.pagemap
            .read_exact_at(&mut entry, at as u64 / page * 8)
            .context("reading /proc/self/pagemap")?;
        Ok(u64::from_le_bytes(entry) >> 55 & 1 == 1)
    }

    /// Writes `page[0]`, then waits until a clear of the soft-dirty bits
    /// has passed it; `clears` times. With 2, a sample read this
    /// program's memory wholly after the call began.
    pub fn wait(&self, page: &mut [u8], clears: u32) -> Result<()> {
        for _ in 0..clears {
            page[0] = page[0].wrapping_add(1);
            std::hint::black_box(&mut *page);
            while self.dirty(page.as_ptr())? {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        Ok(())
    }
}

/// Whether the guest's kernel keeps soft-dirty bits, tried on a page of
/// this process without numalab: written, bits cleared, clean, written
/// again, dirty.
pub fn kernel_keeps_soft_dirty() -> Result<bool> {
    let page = numalab::system::page_size();
    let mut probe = vec![0u8; 2 * page];
    let offset = (probe.as_ptr() as usize).next_multiple_of(page) - probe.as_ptr() as usize;
    let signal = SampleSignal::new()?;
    probe[offset] = 1;
    std::fs::write("/proc/self/clear_refs", "4").context("writing /proc/self/clear_refs")?;
    let cleared = signal.dirty(std::hint::black_box(&probe)[offset..].as_ptr())?;
    probe[offset] = 2;
    let written = signal.dirty(std::hint::black_box(&probe)[offset..].as_ptr())?;
    Ok(!cleared && written)
}

/// `bytes` of memory of its own, page-aligned, in base pages (no
/// transparent huge page, whose one written byte would mark 512 pages
/// written), not yet touched.
fn base_pages(bytes: usize) -> Result<NodeBuffer> {
    let options = BufferOptions::new(MemPolicy::Default).prefault(false);
    Ok(NodeBuffer::with_options(bytes, options)?)
}

/// `numalab-guest --allocate A,B`: for each node in turn, 32 MiB bound
/// there and written, held until a sample of `numalab profile --writes`
/// has read it ([`SampleSignal`]), then freed. What the profile watches.
pub fn allocate_in_turn(nodes: &str) -> Result<()> {
    let nodes: NodeSet = nodes.parse().context("--allocate takes nodes, as 0,1")?;
    let signal = SampleSignal::new()?;
    let mut page = base_pages(numalab::system::page_size())?;
    for node in nodes.iter() {
        let buffer = NodeBuffer::new(
            (HELD_MIB << 20) as usize,
            MemPolicy::Bind(NodeSet::single(node)),
        )?;
        signal.wait(page.as_mut_slice(), 2)?;
        drop(buffer);
    }
    // And one sample after the last is freed.
    signal.wait(page.as_mut_slice(), 2)
}

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
/// report (on standard error: the command owns standard output) and what
/// the program printed.
fn profile_me(guest: &Guest, flags: &[&str], args: &[&str]) -> Result<(ProfileReport, String)> {
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
        if began.elapsed() > HANG {
            let states = process_states(child.id() as i32);
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "numalab {} had not ended after {} s; its processes (pid state wchan): {states}",
                all.join(" "),
                HANG.as_secs()
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
    Ok((Ran::result_in(&ran.stderr)?, ran.stdout))
}

/// The memory `--write-quarter` writes, and how many times it rewrites
/// the first quarter of it.
const WRITES_MIB: usize = 64;
const QUARTER_PASSES: u64 = 4;

/// `numalab-guest --write-quarter`: 64 MiB written once, then its first
/// quarter written again 4 times, each pass in a window of samples of its
/// own. What profile.writes watches.
///
/// Paced by the profiler's clears of its soft-dirty bits
/// ([`SampleSignal`]), never by a clock: the whole 64 MiB written (base
/// pages, its last page last), then held until a sample has read it
/// whole; then each pass writes the quarter and the last page, and waits
/// for the next clear to pass that page (clears go up the address
/// space, so the quarter below it was cleared too). Every page it writes
/// after that point belongs to a pass, so the windows that begin once
/// the 64 MiB was seen whole hold the passes' 4 × 4096 pages, none twice
/// in one window, and the program's own few writes.
pub fn write_quarter() -> Result<()> {
    let page = numalab::system::page_size();
    let mut buffer = base_pages(WRITES_MIB << 20)?;
    let memory = buffer.as_mut_slice();
    let (quarter, last) = (memory.len() / 4, memory.len() - page);
    let signal = SampleSignal::new()?;
    for byte in memory.iter_mut().step_by(page) {
        *byte = 1;
    }
    signal.wait(&mut memory[last..], 2)?;
    for pass in 1..=QUARTER_PASSES {
        for byte in memory[..quarter].iter_mut().step_by(page) {
            *byte = pass as u8 + 1;
        }
        signal.wait(&mut memory[last..], 1)?;
    }
    println!(
        "write-quarter: {WRITES_MIB} MiB written, then its first quarter {QUARTER_PASSES} times"
    );
    Ok(())
}

/// Pages the watched program may write in a window besides its passes
/// and the page it signals with: its stack and the like (2 or 3 a window
/// in every guest of both kernels).
const OWN_WRITES: u64 = 32;

/// `numalab profile --writes` of a program that writes 64 MiB, then its
/// first quarter 4 times, each pass in a window of its own: the windows
/// after the 64 MiB was seen whole count the passes' pages, and never
/// more than one pass a window.
pub fn writes(guest: &Guest, out: &mut Outcome) -> Result<()> {
    // Decided by the kernel, not by what numalab says of it.
    if !kernel_keeps_soft_dirty()? {
        out.not_applicable("the guest kernel keeps no soft-dirty bits (CONFIG_MEM_SOFT_DIRTY)");
        return Ok(());
    }
    // A sample that clears the soft-dirty bits of 64 MiB is dear under
    // emulation (its CPU time counted while other vCPUs run, too): at the
    // default 1% it would pause the sampling for up to a minute.
    let (report, said) = profile_me(
        guest,
        &["--writes", "--interval", "200ms", "--max-overhead", "20"],
        &["--write-quarter"],
    )?;
    out.same(
        "the program's own account",
        format!("write-quarter: {WRITES_MIB} MiB written, then its first quarter {QUARTER_PASSES} times"),
        said.trim(),
    );
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
    // The windows that began once a sample had seen the whole 64 MiB:
    // the program made every pass in them.
    let page = numalab::system::page_size() as u64;
    let quarter = (WRITES_MIB as u64 / 4) << 20;
    let quarter_pages = quarter / page;
    let samples = &report.timeline.samples;
    let after: Vec<u64> = samples
        .windows(2)
        .filter(|pair| {
            pair[0].memory.private_per_node().values().sum::<u64>() >= (WRITES_MIB as u64) << 20
        })
        .filter_map(|pair| pair[1].written)
        .map(|w| w.written)
        .collect();
    out.check(
        "windows after the 64 MiB was seen whole",
        format!(">= {QUARTER_PASSES} (a clear after each pass)"),
        after.len(),
        after.len() as u64 >= QUARTER_PASSES,
    );
    let most = after.iter().copied().max().unwrap_or(0);
    out.check(
        "pages written in one window, at most",
        format!(
            "<= {} (one pass of {quarter_pages}, and its own few)",
            quarter_pages + OWN_WRITES
        ),
        most,
        most <= quarter_pages + OWN_WRITES,
    );
    let sum: u64 = after.iter().sum();
    let (least, at_most) = (
        QUARTER_PASSES * quarter_pages,
        QUARTER_PASSES * quarter_pages + OWN_WRITES * after.len() as u64,
    );
    out.check(
        "pages written in those windows, summed",
        format!(
            "{least} to {at_most} ({QUARTER_PASSES} passes of {quarter_pages}, and its own few)"
        ),
        sum,
        (least..=at_most).contains(&sum),
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
    // The program holds each allocation until a sample has read it, which
    // it sees by the soft-dirty bits `--writes` clears.
    if !kernel_keeps_soft_dirty()? {
        bail!("the guest kernel keeps no soft-dirty bits: the program cannot tell when a sample has seen its memory");
    }
    // At 50% of a CPU, the most profile allows: under emulation a
    // sample's CPU time runs on while the host serves other vCPUs (beside
    // stress-ng one sample was charged so much that at 20% the next came
    // 75 s later).
    let (report, _) = profile_me(
        guest,
        &["--writes", "--interval", "200ms", "--max-overhead", "50"],
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
    let ran = guest.numalab_ok(&advise_args(true, &DD))?;
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
    let began = std::time::Instant::now();
    while runs() < 3 {
        if began.elapsed() > HANG {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
            bail!("advise had made {} runs after {} s", runs(), HANG.as_secs());
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
