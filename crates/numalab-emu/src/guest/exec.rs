//! Placement of a command run by `numalab exec`: busybox `dd` fills an
//! 8 MiB buffer under each policy, and both the pages (from exec's JSON
//! report, as `numastat -p` counts them) and exec's own audit must agree
//! with the preset.

use std::collections::BTreeMap;
use std::fs;

use anyhow::{bail, Result};
use numalab::audit::Verdict;
use numalab::locate::MemoryKind;
use numalab::NodeSet;
use numalab_bench::exec::ExecReport;

use super::{Guest, Outcome, Pages, Ran};

/// dd's buffer: 8 MiB, 2048 pages.
const DD_PAGES: u64 = 2048;

const THP: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

/// Sets transparent huge pages for as long as it lives.
pub(super) struct ThpSetting {
    previous: Option<String>,
}

impl ThpSetting {
    pub(super) fn set(mode: &str) -> Result<ThpSetting> {
        let previous = fs::read_to_string(THP).ok().and_then(|t| selected_word(&t));
        fs::write(THP, mode)?;
        Ok(ThpSetting { previous })
    }
}

impl Drop for ThpSetting {
    fn drop(&mut self) {
        if let Some(previous) = &self.previous {
            let _ = fs::write(THP, previous);
        }
    }
}

fn selected_word(text: &str) -> Option<String> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('[')?.strip_suffix(']'))
        .map(str::to_owned)
}

/// Runs `numalab exec --json FLAGS -- ARGS` and returns the report.
fn exec(guest: &Guest, flags: &[String], command: &[&str]) -> Result<(Ran, ExecReport)> {
    let mut args: Vec<&str> = vec!["exec", "--json"];
    args.extend(flags.iter().map(String::as_str));
    args.push("--");
    args.extend(command);
    let ran = guest.numalab_ok(&args)?;
    let report = Ran::result_in(&ran.stderr)?;
    Ok((ran, report))
}

const DD: [&str; 5] = ["dd", "if=/dev/zero", "of=/dev/null", "bs=8M", "count=1"];

/// The command's private memory at its peak (heap, stack, anonymous,
/// huge), in pages per node.
fn private_pages(report: &ExecReport) -> Pages {
    let mut pages = BTreeMap::new();
    let page = 4096;
    for (kind, per_node) in &report.run.peak.bytes {
        if *kind == MemoryKind::File {
            continue;
        }
        for (node, bytes) in per_node {
            *pages.entry(*node).or_insert(0) += bytes / page;
        }
    }
    Pages(pages)
}

/// The audit's verdict as a check shows it.
fn verdict(report: &ExecReport) -> String {
    format!("{:?}", report.audit.verdict)
}

fn total(pages: &Pages) -> u64 {
    pages.0.values().sum()
}

/// Every policy `numalab exec` offers, with transparent huge pages off so
/// interleave is exact to the page.
pub fn policies(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let _thp = ThpSetting::set("never")?;
    let preset = &guest.preset;
    let nodes = preset.memory_nodes();
    // A node without memory is refused, as numactl refuses it.
    for node in preset.memoryless_nodes().iter() {
        for flag in [format!("--membind={node}"), format!("--preferred={node}")] {
            refused(guest, out, &flag, &format!("node {node} has no memory"))?;
        }
    }
    // (flags, where the pages must be, slack per node)
    let mut cases: Vec<(Vec<String>, Expect)> = Vec::new();
    for node in nodes.iter() {
        cases.push((vec![format!("--membind={node}")], Expect::On(node)));
        cases.push((vec![format!("--preferred={node}")], Expect::On(node)));
    }
    for cpu_node in preset.cpu_nodes().iter() {
        // A memory-less node's CPUs allocate locally from the nearest
        // node with memory.
        cases.push((
            vec![format!("--cpunodebind={cpu_node}"), "--localalloc".into()],
            Expect::On(preset.home_node(cpu_node)),
        ));
        let others = nodes.difference(&NodeSet::single(cpu_node));
        let set = if others.len() >= 2 {
            others
        } else {
            nodes.clone()
        };
        let nearest = preset.nearest(cpu_node, &set);
        if let (1, Some(node)) = (nearest.len(), nearest.first()) {
            cases.push((
                vec![
                    format!("--cpunodebind={cpu_node}"),
                    format!("--preferred-many={set}"),
                ],
                Expect::On(node),
            ));
        }
    }
    let two: NodeSet = nodes.iter().take(2).collect();
    cases.push((vec![format!("--interleave={two}")], Expect::Even(two)));
    if nodes.len() > 2 {
        cases.push((vec!["--interleave=all".into()], Expect::Even(nodes.clone())));
    }
    for (flags, expect) in cases {
        let label = format!("exec {}", flags.join(" "));
        let (_, report) = exec(guest, &flags, &DD)?;
        let found = private_pages(&report);
        out.check(
            format!("{label}: private pages"),
            format!(">= {DD_PAGES}"),
            total(&found),
            total(&found) >= DD_PAGES,
        );
        let (expected, slack) = match &expect {
            Expect::On(node) => (Pages::on(*node, total(&found)), 0),
            // Each mapping's round-robin starts afresh: a page of slack
            // per mapping of the process (a handful).
            Expect::Even(set) => (Pages::even(set, total(&found)), 8),
        };
        out.check(
            format!("{label}: pages"),
            if slack > 0 {
                format!("{expected} (±{slack})")
            } else {
                expected.to_string()
            },
            &found,
            found.within(&expected, slack),
        );
        out.same(
            format!("{label}: exec's audit"),
            format!("{:?}", Verdict::Match),
            verdict(&report),
        );
    }
    Ok(())
}

enum Expect {
    On(u32),
    Even(NodeSet),
}

/// `numalab exec --cpunodebind=N --membind=N`: the command may run only on
/// node N's CPUs (its `Cpus_allowed_list`), and its pages are on node N
/// (for a memory-less node N, `--membind` names the nearest node with
/// memory).
pub fn cpunodebind(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let script =
        "grep Cpus_allowed_list /proc/self/status; dd if=/dev/zero of=/dev/null bs=8M count=1";
    for cpu_node in guest.preset.cpu_nodes().iter() {
        let node = guest.preset.home_node(cpu_node);
        let flags = vec![
            format!("--cpunodebind={cpu_node}"),
            format!("--membind={node}"),
        ];
        let (ran, report) = exec(guest, &flags, &["sh", "-c", script])?;
        let allowed = ran
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map_or("missing".to_owned(), |v| v.trim().to_owned());
        let cpus = guest.preset.cpus_of(cpu_node).to_string();
        out.same(
            format!("node {cpu_node}: the command's Cpus_allowed_list"),
            &cpus,
            allowed,
        );
        out.same(
            format!("node {cpu_node}: exec report cpus"),
            &cpus,
            report
                .cpus
                .as_ref()
                .map_or("missing".to_owned(), ToString::to_string),
        );
        out.same(
            format!("node {node}: exec report policy"),
            format!("bind:{node}"),
            report.policy.to_string(),
        );
        let found = private_pages(&report);
        out.check(
            format!("node {node}: private pages"),
            format!("node{node} >= {DD_PAGES}, nowhere else"),
            &found,
            found.0.get(&node).copied().unwrap_or(0) >= DD_PAGES
                && found.0.iter().all(|(n, c)| *n == node || *c == 0),
        );
        out.same(
            format!("node {node}: exec's audit"),
            format!("{:?}", Verdict::Match),
            verdict(&report),
        );
    }
    Ok(())
}

/// With transparent huge pages, Linux interleaves whole 2 MiB pages; the
/// audit must not call that an uneven split.
pub fn interleave_thp(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let _thp = ThpSetting::set("always")?;
    // A node whose free memory is fragmented cannot supply a 2 MiB page,
    // and the kernel then falls back to base pages interleaved over every
    // node, which moves the split by hundreds of pages. Compact first, as
    // a THP-heavy workload's operator would (Documentation/admin-guide/
    // sysctl/vm.rst, compact_memory), so the check measures interleaving.
    let _ = fs::write("/proc/sys/vm/drop_caches", "3");
    let _ = fs::write("/proc/sys/vm/compact_memory", "1");
    let nodes = guest.preset.memory_nodes();
    let flags = vec![format!("--interleave={nodes}")];
    let (_, report) = exec(
        guest,
        &flags,
        &["dd", "if=/dev/zero", "of=/dev/null", "bs=16M", "count=1"],
    )?;
    let found = private_pages(&report);
    let expected = Pages::even(&nodes, total(&found));
    out.check(
        "pages (2 MiB pages interleaved)",
        format!("{expected} (±512 per node)"),
        &found,
        found.within(&expected, 512 + 8),
    );
    out.check(
        "every node got pages",
        nodes.to_string(),
        found
            .0
            .iter()
            .filter(|(_, c)| **c > 0)
            .map(|(n, _)| *n)
            .collect::<NodeSet>(),
        nodes
            .iter()
            .all(|n| found.0.get(&n).copied().unwrap_or(0) > 0),
    );
    out.same(
        "exec's audit",
        format!("{:?}", Verdict::Match),
        verdict(&report),
    );
    out.note(format!("audit: {}", report.audit.note));
    Ok(())
}

/// `numalab exec --weighted-interleave`: on Linux 6.9 and later the pages
/// follow the weights; before, numalab refuses (exit 125) naming
/// `MPOL_WEIGHTED_INTERLEAVE` and the version it needs.
pub fn weighted_interleave(guest: &Guest, out: &mut Outcome) -> Result<()> {
    let nodes: Vec<u32> = guest.preset.memory_nodes().iter().take(2).collect();
    let (a, b) = (nodes[0], nodes[nodes.len() - 1]);
    if guest.kernel_at_least(6, 9) {
        if a == b {
            out.not_applicable("the preset has one node with memory: nothing to weigh");
            return Ok(());
        }
        let flags = vec![format!("--weighted-interleave={a}:3,{b}:1")];
        let (_, report) = exec(guest, &flags, &DD)?;
        let found = private_pages(&report);
        let all = total(&found);
        let expected = Pages(BTreeMap::from([(a, all * 3 / 4), (b, all / 4)]));
        out.check(
            "pages 3:1",
            format!("{expected} (±16)"),
            &found,
            found.within(&expected, 16),
        );
        return Ok(());
    }
    let needle = "MPOL_WEIGHTED_INTERLEAVE (Linux 6.9 or later)";
    for flag in [
        format!("--weighted-interleave={a},{b}"),
        format!("--weighted-interleave={a}:3,{b}:1"),
    ] {
        refused(guest, out, &flag, needle)?;
    }
    Ok(())
}

/// `numalab exec FLAG -- true` is refused before the command starts: exit
/// 125, an error naming `needle`.
fn refused(guest: &Guest, out: &mut Outcome, flag: &str, needle: &str) -> Result<()> {
    let ran = guest.numalab(&["exec", flag, "--", "true"])?;
    out.same(
        format!("exec {flag}: exit status"),
        "Some(125)",
        format!("{:?}", ran.code),
    );
    out.check(
        format!("exec {flag}: error"),
        format!("names {needle}"),
        ran.stderr.trim(),
        ran.stderr.contains(needle),
    );
    Ok(())
}

const WEIGHTS: &str = "/sys/kernel/mm/mempolicy/weighted_interleave";

/// Node `node`'s weight in the kernel's weighted-interleave table.
fn weight_of(node: u32) -> Option<String> {
    fs::read_to_string(format!("{WEIGHTS}/node{node}"))
        .ok()
        .map(|w| w.trim().to_owned())
}

/// The kernel's automatic-weights switch (Linux 6.16: `auto`, spelt
/// `__auto_type` by Linux 6.18), if it has one.
fn weights_auto() -> Option<String> {
    ["auto", "__auto_type"].iter().find_map(|name| {
        fs::read_to_string(format!("{WEIGHTS}/{name}"))
            .ok()
            .map(|w| w.trim().to_owned())
    })
}

/// `numalab exec -w A:5,B:2` sent SIGTERM while its command runs: the
/// signal reaches the command, numalab exits 143, and the kernel's
/// weights (and automatic-weights switch) are back as they were.
pub fn weights_restored_on_sigterm(guest: &Guest, out: &mut Outcome) -> Result<()> {
    if !guest.kernel_at_least(6, 9) || weight_of(0).is_none() {
        out.not_applicable("the kernel has no weighted interleave (Linux 6.9)");
        return Ok(());
    }
    let nodes: Vec<u32> = guest.preset.memory_nodes().iter().take(2).collect();
    let (a, b) = (nodes[0], nodes[nodes.len() - 1]);
    if a == b {
        out.not_applicable("the preset has one node with memory: nothing to weigh");
        return Ok(());
    }
    let before = (weight_of(a), weight_of(b), weights_auto());
    let pidfile = "/tmp/numalab-exec-sigterm.pid";
    let _ = fs::remove_file(pidfile);
    // Killed below; the hour only ends it should this check die first.
    let script = format!("echo $$ > {pidfile}; exec sleep 3600");
    let flag = format!("--weighted-interleave={a}:5,{b}:2");
    let child = std::process::Command::new(&guest.numalab)
        .args(["exec", "-q", &flag, "--", "sh", "-c", &script])
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let mut command = None;
    let began = std::time::Instant::now();
    while began.elapsed() < super::HANG {
        let pid = fs::read_to_string(pidfile)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok());
        if let Some(pid) = pid {
            if fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep") {
                command = Some(pid);
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let Some(command) = command else {
        bail!(
            "the command had not started after {} s",
            super::HANG.as_secs()
        );
    };
    out.same(
        "weights while it runs",
        format!("node{a}=5 node{b}=2"),
        format!(
            "node{a}={} node{b}={}",
            weight_of(a).unwrap_or_default(),
            weight_of(b).unwrap_or_default()
        ),
    );
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()?;
    let output = child.wait_with_output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    out.same(
        "exit status",
        "Some(143)",
        format!("{:?}", output.status.code()),
    );
    let gone = fs::read_to_string(format!("/proc/{command}/stat")).map_or(true, |s| {
        s.rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
    });
    out.check("the command", "ended", command, gone);
    out.same(
        "weights after",
        format!("{:?} {:?}", before.0, before.1),
        format!("{:?} {:?}", weight_of(a), weight_of(b)),
    );
    let auto = weights_auto();
    let explained = stderr.contains("automatic weights back on");
    out.check(
        "automatic weights after",
        format!("{:?} (or numalab says why not)", before.2),
        format!("{auto:?}"),
        auto == before.2 || explained,
    );
    out.note(stderr.trim().to_owned());
    Ok(())
}
