//! numactl and hwloc as oracles in the same guest: tools no one can tune
//! to numalab's reading of the machine. `numalab topo --json` against
//! `numactl --hardware` and `lstopo-no-graphics --of xml`; and for every
//! policy, one allocation placed once by `numactl` and once by `numalab
//! exec`, each process's per-node split read by `numastat -p`.

use std::collections::BTreeMap;
use std::fs;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use numalab::{CpuSet, NodeSet};

use super::{Guest, Outcome, HANG};
use crate::harness::ORACLES_MISSING;

/// Where the host put the tools (`crate::harness::ORACLE_TOOLS`).
const NUMACTL: &str = "/bin/numactl";
const NUMASTAT: &str = "/bin/numastat";
const LSTOPO: &str = "/bin/lstopo-no-graphics";

/// The allocation each launcher places: 32 MiB, touched.
const HOLD_MIB: u64 = 32;

/// The guest program's `--hold MIB PIDFILE`: maps `mib` MiB, touches every
/// page, writes its pid to `pidfile` and waits to be killed, so
/// `numastat -p` can read where its memory is; it ends by itself when the
/// check that started it is gone.
pub fn hold(mib: &str, pidfile: &str) -> Result<()> {
    let mib: usize = mib.parse().context("--hold takes MiB, as 32")?;
    let mut memory = vec![0u8; mib << 20];
    let page = numalab::system::page_size();
    for byte in memory.iter_mut().step_by(page) {
        *byte = 1;
    }
    std::hint::black_box(&memory);
    let tmp = format!("{pidfile}.tmp");
    fs::write(&tmp, std::process::id().to_string())?;
    fs::rename(&tmp, pidfile)?;
    let parent = std::os::unix::process::parent_id();
    while std::os::unix::process::parent_id() == parent {
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Whether the tools are in the guest; when not, the check says why.
fn tools_here(out: &mut Outcome) -> bool {
    match fs::read_to_string(ORACLES_MISSING) {
        Ok(why) => {
            out.not_applicable(format!("no oracle tools in the guest: {}", why.trim()));
            false
        }
        Err(_) => true,
    }
}

fn run(program: &str, args: &[&str]) -> Result<String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    if !output.status.success() {
        bail!(
            "{program} {} exited {:?}: {}",
            args.join(" "),
            output.status.code(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// What `numactl --hardware` says of each node.
#[derive(Debug, Default, PartialEq)]
pub struct Hardware {
    /// Nodes (`available: N nodes (LIST)`).
    pub nodes: NodeSet,
    /// CPUs per node.
    pub cpus: BTreeMap<u32, CpuSet>,
    /// Size per node in MB (numactl's MB are MiB).
    pub size_mib: BTreeMap<u32, u64>,
    /// `from -> to` distances.
    pub distances: BTreeMap<(u32, u32), u64>,
}

impl Hardware {
    /// Reads `numactl --hardware`'s output.
    ///
    /// ```
    /// use numalab_emu::guest::oracle::Hardware;
    /// let text = "available: 2 nodes (0,5)\nnode 0 cpus: 0 1\nnode 0 size: 1006 MB\n\
    ///     node 0 free: 900 MB\nnode 5 cpus:\nnode 5 size: 512 MB\nnode 5 free: 500 MB\n\
    ///     node distances:\nnode   0   5 \n  0:  10  28 \n  5:  28  10 \n";
    /// let hw = Hardware::parse(text)?;
    /// assert_eq!(hw.nodes.to_string(), "0,5");
    /// assert_eq!(hw.cpus[&0].to_string(), "0-1");
    /// assert!(hw.cpus[&5].is_empty());
    /// assert_eq!((hw.size_mib[&5], hw.distances[&(5, 0)]), (512, 28));
    /// # Ok::<(), anyhow::Error>(())
    /// ```
    pub fn parse(text: &str) -> Result<Hardware> {
        let mut hw = Hardware::default();
        let mut columns: Vec<u32> = Vec::new();
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["available:", _, "nodes", list] => {
                    hw.nodes = list
                        .trim_matches(|c| c == '(' || c == ')')
                        .parse()
                        .map_err(|e| anyhow!("numactl's node list {list}: {e}"))?;
                }
                ["node", id, "cpus:", cpus @ ..] => {
                    let set = cpus.iter().filter_map(|c| c.parse::<u32>().ok()).collect();
                    hw.cpus.insert(id.parse()?, set);
                }
                ["node", id, "size:", size, "MB"] => {
                    hw.size_mib.insert(id.parse()?, size.parse()?);
                }
                ["node", "distances:"] => {}
                ["node", ids @ ..] if ids.iter().all(|w| w.parse::<u32>().is_ok()) => {
                    columns = ids.iter().filter_map(|w| w.parse().ok()).collect();
                }
                [from, values @ ..] if from.ends_with(':') => {
                    let from: u32 = from.trim_end_matches(':').parse()?;
                    for (to, value) in columns.iter().zip(values) {
                        hw.distances.insert((from, *to), value.parse()?);
                    }
                }
                _ => {}
            }
        }
        if hw.nodes.is_empty() {
            bail!("no `available:` line in numactl --hardware:\n{text}");
        }
        Ok(hw)
    }
}

/// What `lstopo --of xml` says of each NUMA node: its memory and the
/// distances hwloc found.
#[derive(Debug, Default, PartialEq)]
pub struct LstopoNodes {
    /// `local_memory` per NUMA node, in bytes.
    pub memory: BTreeMap<u32, u64>,
    /// PUs (logical CPUs) by OS index.
    pub cpus: CpuSet,
    /// The latency matrix, `from -> to`.
    pub distances: BTreeMap<(u32, u32), u64>,
}

/// The value of `name="…"` in an XML start tag.
fn attribute<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let start = tag.find(&key)? + key.len();
    let len = tag[start..].find('"')?;
    Some(&tag[start..start + len])
}

impl LstopoNodes {
    /// Reads hwloc's XML (version 2), as `lstopo --of xml` writes it.
    ///
    /// ```
    /// use numalab_emu::guest::oracle::LstopoNodes;
    /// let xml = r#"<object type="NUMANode" os_index="2" local_memory="536870912"/>
    ///   <object type="PU" os_index="0"/><object type="PU" os_index="1"/>
    ///   <distances2 type="NUMANode" nbobjs="2" kind="5" name="NUMALatency" indexing="os">
    ///     <indexes length="4">0 2 </indexes>
    ///     <u64values length="6">10 20 </u64values>
    ///     <u64values length="6">20 10 </u64values>
    ///   </distances2>"#;
    /// let found = LstopoNodes::parse(xml)?;
    /// assert_eq!(found.memory[&2], 512 << 20);
    /// assert_eq!(found.cpus.to_string(), "0-1");
    /// assert_eq!(found.distances[&(2, 0)], 20);
    /// # Ok::<(), anyhow::Error>(())
    /// ```
    pub fn parse(xml: &str) -> Result<LstopoNodes> {
        let mut found = LstopoNodes::default();
        for tag in xml.split('<').map(|t| t.split('>').next().unwrap_or("")) {
            if tag.starts_with("object ") {
                let index = attribute(tag, "os_index").and_then(|i| i.parse::<u32>().ok());
                match (attribute(tag, "type"), index) {
                    (Some("NUMANode"), Some(node)) => {
                        let bytes = attribute(tag, "local_memory")
                            .and_then(|m| m.parse().ok())
                            .unwrap_or(0);
                        found.memory.insert(node, bytes);
                    }
                    (Some("PU"), Some(cpu)) => found.cpus.insert(cpu),
                    _ => {}
                }
            }
        }
        // The latency matrix: indexes, then n×n values, row = from; hwloc
        // writes long lists as several elements of ten numbers each.
        if let Some(at) = xml.find("name=\"NUMALatency\"") {
            let body = &xml[at..];
            let body = &body[..body.find("</distances2>").unwrap_or(body.len())];
            let numbers = |tag: &str| -> Vec<u64> {
                let open = format!("<{tag}");
                let close = format!("</{tag}>");
                let mut all = Vec::new();
                let mut rest = body;
                while let Some(start) = rest.find(&open) {
                    let element = &rest[start..];
                    let (Some(from), Some(to)) = (element.find('>'), element.find(&close)) else {
                        break;
                    };
                    all.extend(
                        element[from + 1..to]
                            .split_whitespace()
                            .filter_map(|v| v.parse::<u64>().ok()),
                    );
                    rest = &element[to + close.len()..];
                }
                all
            };
            let (indexes, values) = (numbers("indexes"), numbers("u64values"));
            let n = indexes.len();
            if n == 0 || values.len() != n * n {
                bail!(
                    "hwloc's NUMALatency matrix: {} values for {n} nodes",
                    values.len()
                );
            }
            for (i, from) in indexes.iter().enumerate() {
                for (j, to) in indexes.iter().enumerate() {
                    found
                        .distances
                        .insert((*from as u32, *to as u32), values[i * n + j]);
                }
            }
        }
        Ok(found)
    }
}

fn in_mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

/// Memory sizes within 1% of each other (and a MiB, numactl's rounding).
fn close(a_mib: f64, b_mib: f64) -> bool {
    (a_mib - b_mib).abs() <= 0.01 * a_mib.max(b_mib) + 1.0
}

/// `numalab topo --json` beside `numactl --hardware` and `lstopo --of
/// xml` run in the same guest: nodes, CPUs per node, memory per node
/// within 1%, every distance exactly.
pub fn hardware(guest: &Guest, out: &mut Outcome) -> Result<()> {
    if !tools_here(out) {
        return Ok(());
    }
    let topo = &guest.topo_report()?.topology;
    let numactl = Hardware::parse(&run(NUMACTL, &["--hardware"])?)?;
    let lstopo = LstopoNodes::parse(&run(LSTOPO, &["--of", "xml", "-"])?)?;
    out.same("nodes: numactl", &numactl.nodes, topo.node_ids());
    let hwloc_nodes: NodeSet = lstopo.memory.keys().copied().collect();
    out.same("nodes: lstopo", &hwloc_nodes, topo.node_ids());
    out.same("CPUs: lstopo's PUs", &lstopo.cpus, topo.cpu_ids());
    for id in numactl.nodes.iter() {
        let node = topo.node(id);
        out.same(
            format!("node {id} CPUs: numactl"),
            numactl.cpus.get(&id).cloned().unwrap_or_default(),
            node.map(|n| n.cpus.clone()).unwrap_or_default(),
        );
        let ours = node.map_or(0.0, |n| in_mib(n.memory_bytes));
        let theirs = numactl.size_mib.get(&id).copied().unwrap_or(0) as f64;
        out.check(
            format!("node {id} memory: numactl"),
            format!("{theirs:.0} MiB (±1%)"),
            format!("{ours:.0} MiB"),
            close(theirs, ours),
        );
        if let Some(&bytes) = lstopo.memory.get(&id) {
            let theirs = in_mib(bytes);
            out.check(
                format!("node {id} memory: lstopo"),
                format!("{theirs:.0} MiB (±1%)"),
                format!("{ours:.0} MiB"),
                close(theirs, ours),
            );
        }
    }
    for from in numactl.nodes.iter() {
        for to in numactl.nodes.iter() {
            let ours = topo
                .distance(from, to)
                .map_or("none".to_owned(), |d| d.to_string());
            let theirs = numactl
                .distances
                .get(&(from, to))
                .map_or("none".to_owned(), u64::to_string);
            out.same(format!("distance {from} -> {to}: numactl"), theirs, &ours);
            if !lstopo.distances.is_empty() {
                let hwloc = lstopo
                    .distances
                    .get(&(from, to))
                    .map_or("none".to_owned(), u64::to_string);
                out.same(format!("distance {from} -> {to}: lstopo"), hwloc, &ours);
            }
        }
    }
    Ok(())
}

/// A launched `--hold` program and its launcher.
struct Held {
    launcher: Child,
    pid: u32,
}

impl Held {
    /// Starts `program args… -- numalab-guest --hold`, waits for the held
    /// program's pid (10 s at most). `Err` carries the launcher's error
    /// when it exits first.
    fn start(program: &str, args: &[String]) -> Result<Held> {
        let pidfile = "/tmp/emu-oracle-hold.pid";
        let _ = fs::remove_file(pidfile);
        let mut launcher = Command::new(program)
            .args(args)
            .args([
                "/bin/numalab-guest",
                "--hold",
                &HOLD_MIB.to_string(),
                pidfile,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {program}"))?;
        let began = Instant::now();
        loop {
            if let Some(pid) = fs::read_to_string(pidfile)
                .ok()
                .and_then(|t| t.trim().parse().ok())
            {
                return Ok(Held { launcher, pid });
            }
            if let Some(status) = launcher.try_wait()? {
                let mut stderr = String::new();
                if let Some(mut pipe) = launcher.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
                }
                bail!("exited {:?}: {}", status.code(), stderr.trim());
            }
            // Only a hang gets here: the program writes its pid as soon
            // as its memory is touched (under a second in every guest).
            if began.elapsed() > HANG {
                let _ = launcher.kill();
                let _ = launcher.wait();
                bail!(
                    "the held program had not written its pid after {} s",
                    HANG.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `numastat -p`'s Total row per node, in MB, less the process's
    /// file-backed pages on each node (read from its `numa_maps` right
    /// after), then ends the program and its launcher.
    ///
    /// The file pages are the binary's and its libraries' page cache:
    /// whether this run read them in (under its policy) or found them
    /// cached by an earlier one is the guest's history, not the policy's
    /// doing, and it moved a run's split by 0.37 MB once. What is left —
    /// the held memory, heap and stack — is what the policy places.
    fn numastat_then_end(mut self) -> Result<BTreeMap<u32, f64>> {
        let text = run(NUMASTAT, &["-p", &self.pid.to_string()]);
        let maps = fs::read_to_string(format!("/proc/{}/numa_maps", self.pid));
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
        let _ = self.launcher.wait();
        let mut totals = numastat_totals(&text?)?;
        for (node, mb) in file_backed_mb(&maps?) {
            if let Some(total) = totals.get_mut(&node) {
                *total = (*total - mb).max(0.0);
            }
        }
        Ok(totals)
    }
}

/// MB (2^20 bytes, as numastat counts) of file-backed pages per node in
/// a `numa_maps` text: the `N<node>=<pages>` of every line with `file=`,
/// in that line's `kernelpagesize_kB`.
fn file_backed_mb(maps: &str) -> BTreeMap<u32, f64> {
    let mut mb = BTreeMap::new();
    for line in maps.lines().filter(|l| l.contains(" file=")) {
        let page_kb: f64 = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("kernelpagesize_kB="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(4.0);
        for word in line.split_whitespace() {
            let Some((node, pages)) = word.strip_prefix('N').and_then(|w| w.split_once('=')) else {
                continue;
            };
            if let (Ok(node), Ok(pages)) = (node.parse::<u32>(), pages.parse::<f64>()) {
                *mb.entry(node).or_insert(0.0) += pages * page_kb / 1024.0;
            }
        }
    }
    mb
}

/// The `Total` row of `numastat -p`, per node (MB).
///
/// ```text
///                            Node 0          Node 1           Total
///                   --------------- --------------- ---------------
/// Private                     33.02            0.00           33.02
/// ----------------  --------------- --------------- ---------------
/// Total                       33.40            0.00           33.40
/// ```
fn numastat_totals(text: &str) -> Result<BTreeMap<u32, f64>> {
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("Node "))
        .ok_or_else(|| anyhow!("no node header in numastat -p:\n{text}"))?;
    let words: Vec<&str> = header.split_whitespace().collect();
    let nodes: Vec<u32> = words
        .windows(2)
        .filter(|w| w[0] == "Node")
        .filter_map(|w| w[1].parse().ok())
        .collect();
    let total = text
        .lines()
        .rfind(|l| l.starts_with("Total"))
        .ok_or_else(|| anyhow!("no Total row in numastat -p:\n{text}"))?;
    let values: Vec<f64> = total
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    if values.len() != nodes.len() + 1 {
        bail!("numastat -p's Total row does not match its header:\n{text}");
    }
    Ok(nodes.into_iter().zip(values).collect())
}

fn split_text(split: &BTreeMap<u32, f64>) -> String {
    split
        .iter()
        .filter(|(_, mb)| **mb >= 0.005)
        .map(|(n, mb)| format!("node{n} {mb:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// For every policy, the same 32 MiB held under `numactl` and under
/// `numalab exec` (transparent huge pages off, so interleave is dealt a
/// page at a time): `numastat -p` finds the same MB on every node, within
/// 1% of the total. A node without memory is refused by both.
pub fn numastat(guest: &Guest, out: &mut Outcome) -> Result<()> {
    if !tools_here(out) {
        return Ok(());
    }
    let _thp = super::exec::ThpSetting::set("never")?;
    let preset = &guest.preset;
    let memory = preset.memory_nodes();
    let same = |flags: Vec<String>| (flags.clone(), flags);
    // (numactl's flags, numalab's flags): the same placement.
    let mut cases: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    for node in memory.iter() {
        cases.push(same(vec![format!("--membind={node}")]));
        cases.push(same(vec![format!("--preferred={node}")]));
    }
    for node in preset.cpu_nodes().iter() {
        let ours = vec![format!("--cpunodebind={node}"), "--localalloc".into()];
        if memory.contains(node) {
            cases.push(same(ours));
        } else {
            // numactl takes only nodes with memory for --cpunodebind
            // ("node argument is out of range"): its CPUs by number.
            let cpus = preset.cpus_of(node);
            cases.push((
                vec![format!("--physcpubind={cpus}"), "--localalloc".into()],
                ours,
            ));
        }
    }
    let two: NodeSet = memory.iter().take(2).collect();
    if two.len() == 2 {
        cases.push(same(vec![format!("--interleave={two}")]));
        cases.push(same(vec![
            format!("--cpunodebind={}", preset.cpu_nodes().first().unwrap_or(0)),
            format!("--preferred-many={two}"),
        ]));
    }
    cases.push(same(vec!["--interleave=all".into()]));
    for (flags, our_flags) in &cases {
        let label = if flags == our_flags {
            flags.join(" ")
        } else {
            format!("{} (numactl {})", our_flags.join(" "), flags.join(" "))
        };
        let theirs = Held::start(NUMACTL, flags)
            .and_then(Held::numastat_then_end)
            .with_context(|| format!("numactl {}", flags.join(" ")))?;
        let mut ours_args = vec!["exec".to_owned(), "-q".to_owned()];
        ours_args.extend(our_flags.iter().cloned());
        ours_args.push("--".into());
        let ours = Held::start(&guest.numalab.to_string_lossy(), &ours_args)
            .and_then(Held::numastat_then_end)
            .with_context(|| format!("numalab exec {label}"))?;
        let total: f64 = theirs.values().sum();
        let slack = 0.01 * total;
        let nodes: NodeSet = theirs.keys().chain(ours.keys()).copied().collect();
        let within = nodes.iter().all(|n| {
            let a = theirs.get(&n).copied().unwrap_or(0.0);
            let b = ours.get(&n).copied().unwrap_or(0.0);
            (a - b).abs() <= slack
        });
        out.check(
            format!("{label}: numastat -p MB per node less file pages, numalab exec vs numactl"),
            format!("{} (±{slack:.2})", split_text(&theirs)),
            split_text(&ours),
            within && total >= HOLD_MIB as f64,
        );
    }
    for node in preset.memoryless_nodes().iter() {
        let flag = format!("--membind={node}");
        let theirs = Held::start(NUMACTL, std::slice::from_ref(&flag));
        let ours = Held::start(
            &guest.numalab.to_string_lossy(),
            &["exec".to_owned(), flag.clone(), "--".into()],
        );
        let refused = |held: Result<Held>| match held {
            Ok(held) => {
                let _ = held.numastat_then_end();
                "ran".to_owned()
            }
            Err(err) => format!("refused ({err:#})"),
        };
        let (theirs, ours) = (refused(theirs), refused(ours));
        out.check(
            format!("{flag} (node {node} has no memory): numalab exec vs numactl"),
            format!("refused, as numactl: {theirs}"),
            &ours,
            theirs.starts_with("refused") && ours.starts_with("refused"),
        );
    }
    Ok(())
}

/// The guest program's `--phases FIRST,LAST STATEFILE`: 32 MiB on node
/// FIRST (two halves, bound there, touched), then, when the check writes
/// `go1` to STATEFILE, 24 MiB on node LAST and one half on FIRST freed;
/// after `go2` it ends. It writes `1` and `2` to STATEFILE when each
/// phase's memory is in place, so the check reads it at a known point.
pub fn phases(nodes: &str, statefile: &str) -> Result<()> {
    use numalab::{MemPolicy, NodeBuffer};
    let nodes: NodeSet = nodes.parse().context("--phases takes nodes, as 0,1")?;
    let (Some(first), Some(last)) = (nodes.first(), nodes.last()) else {
        bail!("--phases takes two nodes");
    };
    let bound = |node: u32, mib: usize| -> Result<NodeBuffer> {
        let mut buffer = NodeBuffer::new(mib << 20, MemPolicy::Bind(NodeSet::single(node)))?;
        buffer.as_mut_slice().fill(1);
        Ok(buffer)
    };
    let say = |state: &str| -> Result<()> {
        let tmp = format!("{statefile}.tmp");
        fs::write(&tmp, state)?;
        fs::rename(&tmp, statefile)?;
        Ok(())
    };
    // Waits for the check's word; ends with the check.
    let parent = std::os::unix::process::parent_id();
    let wait = |word: &str| -> Result<()> {
        while fs::read_to_string(statefile).unwrap_or_default() != word {
            if std::os::unix::process::parent_id() != parent {
                bail!("the check that started it is gone");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    };
    let (half, other_half) = (bound(first, 16)?, bound(first, 16)?);
    say("1")?;
    wait("go1")?;
    let later = bound(last, 24)?;
    drop(other_half);
    say("2")?;
    wait("go2")?;
    drop((half, later));
    Ok(())
}

/// A program that places memory on the first node, then on the last and
/// frees some of the first, each phase held until the check has read it:
/// at each point the last sample of `numalab profile --pid` and
/// `numastat -p` (numactl's own reading of numa_maps) agree node by node
/// within 1% of the program's total.
pub fn profile_numastat(guest: &Guest, out: &mut Outcome) -> Result<()> {
    if !tools_here(out) {
        return Ok(());
    }
    let nodes = guest.preset.memory_nodes();
    let (Some(first), Some(last)) = (nodes.first(), nodes.last()) else {
        bail!("the preset has no nodes with memory");
    };
    let statefile = "/tmp/emu-phases.state";
    let _ = fs::remove_file(statefile);
    let mut program = Command::new("/bin/numalab-guest")
        .args(["--phases", &format!("{first},{last}"), statefile])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the phases program")?;
    let pid = program.id().to_string();
    let result = (|| -> Result<()> {
        for (phase, go) in [("1", "go1"), ("2", "go2")] {
            wait_for_state(&mut program, statefile, phase)?;
            let report: numalab_bench::profile::ProfileReport = guest.numalab_result(&[
                "profile",
                "--pid",
                &pid,
                "--interval",
                "50ms",
                "--duration",
                "100ms",
                "--json",
            ])?;
            let numastat = numastat_totals(&run(NUMASTAT, &["-p", &pid])?)?;
            let ours: BTreeMap<u32, f64> = report
                .timeline
                .samples
                .last()
                .map(|s| {
                    let mut per_node = BTreeMap::new();
                    for by_node in s.memory.bytes.values() {
                        for (&node, &bytes) in by_node {
                            // numastat's MB are MiB.
                            *per_node.entry(node).or_insert(0.0) += bytes as f64 / (1 << 20) as f64;
                        }
                    }
                    per_node
                })
                .unwrap_or_default();
            let total = numastat.values().sum::<f64>();
            for (&node, &theirs) in &numastat {
                let mine = ours.get(&node).copied().unwrap_or(0.0);
                out.check(
                    format!(
                        "phase {phase}, node {node}: numalab profile MB (numastat -p {theirs:.2})"
                    ),
                    format!("{theirs:.2} ± {:.2}", total * 0.01 + 0.01),
                    format!("{mine:.2}"),
                    (mine - theirs).abs() <= total * 0.01 + 0.01,
                );
            }
            let expected = if phase == "1" {
                format!("node {first} ≥ 32 MB")
            } else {
                format!("node {first} ≥ 16 MB, node {last} ≥ 24 MB")
            };
            let mb = |node| numastat.get(&node).copied().unwrap_or(0.0);
            let placed = if phase == "1" {
                mb(first) >= 32.0
            } else {
                mb(first) >= 16.0 && mb(last) >= 24.0
            };
            out.check(
                format!("phase {phase}: where numastat -p finds the program's memory"),
                expected,
                split_text(&numastat),
                placed,
            );
            fs::write(statefile, go)?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = program.kill();
    }
    let _ = program.wait();
    let _ = fs::remove_file(statefile);
    result
}

/// Waits until the program has written `state` (its memory in place);
/// its error when it ends first, a named failure when it hangs.
fn wait_for_state(program: &mut Child, statefile: &str, state: &str) -> Result<()> {
    let began = Instant::now();
    while fs::read_to_string(statefile).unwrap_or_default() != state {
        if let Some(status) = program.try_wait()? {
            let mut stderr = String::new();
            if let Some(mut pipe) = program.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
            }
            bail!(
                "the phases program exited {:?}: {}",
                status.code(),
                stderr.trim()
            );
        }
        if began.elapsed() > HANG {
            bail!(
                "the phases program had not reached phase {state} after {} s",
                HANG.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// A CPU set from hwloc's bitmap text (`0x0000000c`, or 32-bit groups
/// most significant first: `0x00000001,0x00000000`).
fn hwloc_cpuset(text: &str) -> Option<CpuSet> {
    let mut cpus = Vec::new();
    let groups: Vec<&str> = text.trim().trim_start_matches("0x").split(',').collect();
    for (i, group) in groups.iter().rev().enumerate() {
        let bits = u32::from_str_radix(group.trim_start_matches("0x"), 16).ok()?;
        cpus.extend(
            (0..32)
                .filter(|b| bits >> b & 1 == 1)
                .map(|b| (i * 32 + b) as u32),
        );
    }
    Some(cpus.into_iter().collect())
}

/// `numalab matrix --quick --json --hwloc-xml FILE` read back by hwloc
/// itself (`lstopo -i FILE --memattrs`): every cell of the JSON is in
/// hwloc's memory attributes with its value (ns; MiB/s from GB/s;
/// Bandwidth the mean of read and write), its initiator's cpuset the
/// preset's CPUs of that node (memory-less CPU nodes included) and its
/// target the node (CPU-less ones included); the attributes numalab does
/// not measure are the preset's HMAT values, and nothing else is there.
/// The matrix is the one `matrix.shape` checks ([`Guest::quick_matrix`]).
pub fn hwloc_export(guest: &Guest, out: &mut Outcome) -> Result<()> {
    if !tools_here(out) {
        return Ok(());
    }
    // The matrix matrix.shape checked, and its export.
    let xml = super::MATRIX_XML;
    let result = guest.quick_matrix()?;
    let mib = |gbps: f64| (gbps * 1e9 / (1u64 << 20) as f64).round() as u64;
    let mut expected = BTreeMap::new();
    for cell in result.latency.iter().flat_map(|m| &m.cells) {
        let ns = cell.latency_ns.median().round() as u64;
        for attribute in ["Latency", "ReadLatency"] {
            expected.insert((attribute.to_owned(), cell.initiator, cell.target), ns);
        }
    }
    for cell in result.bandwidth.iter().flat_map(|m| &m.cells) {
        let (Some(read), Some(write)) = (&cell.read_gbps, &cell.write_gbps) else {
            continue;
        };
        let (read, write) = (read.median(), write.median());
        let key = |a: &str| (a.to_owned(), cell.initiator, cell.target);
        expected.insert(key("ReadBandwidth"), mib(read));
        expected.insert(key("WriteBandwidth"), mib(write));
        expected.insert(key("Bandwidth"), mib((read + write) / 2.0));
    }
    let preset = &guest.preset;
    let (rows, cols) = (preset.cpu_nodes(), preset.memory_nodes());
    out.same(
        "figures in the JSON (5 per CPU node x memory node)",
        5 * rows.len() * cols.len(),
        expected.len(),
    );
    // What numalab does not measure (WriteLatency) stays the firmware's:
    // the HMAT values Linux publishes of the preset.
    let measured: Vec<String> = expected.keys().map(|(a, _, _)| a.clone()).collect();
    for attribute in preset.expected_attributes() {
        if !measured.iter().any(|a| a == attribute.attribute) {
            expected.insert(
                (
                    attribute.attribute.to_owned(),
                    attribute.initiator,
                    attribute.target,
                ),
                attribute.value,
            );
        }
    }
    // The initiator of a value is a cpuset: the node whose CPUs the
    // preset gives are exactly those.
    let node_of = |cpus: &CpuSet| rows.iter().find(|&n| preset.cpus_of(n) == *cpus);
    let memattrs = run(LSTOPO, &["-i", xml, "--memattrs", "-p"])?;
    let mut found = BTreeMap::new();
    let mut strangers = Vec::new();
    let mut attribute = String::new();
    for line in memattrs.lines() {
        // Memory attribute #3 name `Latency' flags 6
        if let Some(rest) = line.strip_prefix("Memory attribute #") {
            attribute = rest
                .split('`')
                .nth(1)
                .and_then(|r| r.split('\'').next())
                .unwrap_or_default()
                .to_owned();
            continue;
        }
        //   NUMANode P#0 = 199 from cpuset 0x00000003 (Machine P#0)
        let Some((target, rest)) = line
            .trim()
            .strip_prefix("NUMANode P#")
            .and_then(|l| l.split_once(" = "))
        else {
            continue;
        };
        let Some((value, initiator)) = rest.split_once(" from cpuset ") else {
            continue; // Capacity, Locality: no initiator
        };
        let cpuset = initiator.split(' ').next().unwrap_or_default();
        match (
            hwloc_cpuset(cpuset).as_ref().and_then(node_of),
            target.parse::<u32>(),
            value.parse::<u64>(),
        ) {
            (Some(node), Ok(target), Ok(value)) => {
                found.insert((attribute.clone(), node, target), value);
            }
            _ => strangers.push(line.trim().to_owned()),
        }
    }
    let text = |m: &BTreeMap<(String, u32, u32), u64>| {
        m.iter()
            .map(|((a, i, t), v)| format!("{a} {i}->{t} {v}"))
            .collect::<Vec<_>>()
            .join("; ")
    };
    out.same(
        "hwloc's values (attribute initiator->target value)",
        text(&expected),
        text(&found),
    );
    out.same(
        "values whose initiator is no CPU node's cpuset",
        "none",
        if strangers.is_empty() {
            "none".to_owned()
        } else {
            strangers.join("; ")
        },
    );
    let memless: Vec<u32> = rows.iter().filter(|n| !cols.contains(*n)).collect();
    let cpuless: Vec<u32> = cols.iter().filter(|n| !rows.contains(*n)).collect();
    out.note(format!(
        "memory-less initiators {memless:?}, CPU-less targets {cpuless:?}, {} values",
        found.len()
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn file_backed_pages_are_counted_per_node_in_their_page_size() {
        let maps = "\
55d0 default file=/bin/numalab-guest mapped=10 active=0 N0=6 N1=4 kernelpagesize_kB=4
7f00 interleave:0-1 anon=8192 dirty=8192 N0=4096 N1=4096 kernelpagesize_kB=4
7f80 default file=/lib/libc.so.6 mapped=256 N1=256 kernelpagesize_kB=4
7fff default stack anon=3 dirty=3 N0=3 kernelpagesize_kB=4
";
        let mb = super::file_backed_mb(maps);
        assert_eq!(mb.get(&0), Some(&(6.0 * 4.0 / 1024.0)));
        assert_eq!(mb.get(&1), Some(&(260.0 * 4.0 / 1024.0)));
    }

    use super::*;

    #[test]
    fn reads_numastat_totals() {
        let text = "\nPer-node process memory usage (in MBs) for PID 77 (numalab-guest)\n\
                                   Node 0          Node 2           Total\n\
                          --------------- --------------- ---------------\n\
        Huge                         0.00            0.00            0.00\n\
        Private                     16.50           16.52           33.02\n\
        ----------------  --------------- --------------- ---------------\n\
        Total                       16.60           16.52           33.12\n";
        let totals = numastat_totals(text).unwrap();
        assert_eq!(totals, BTreeMap::from([(0, 16.60), (2, 16.52)]));
        assert!(numastat_totals("Total 1.0").is_err());
    }

    #[test]
    fn memory_within_one_percent() {
        assert!(close(1024.0, 1030.0));
        assert!(!close(1024.0, 1040.0));
        assert!(close(0.0, 0.0));
    }
}
