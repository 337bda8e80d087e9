//! Readers of Linux's `/sys` and `/proc` files that describe NUMA state.
//!
//! Each reader is split in two: a pure parser of the file's text (unit
//! tested on captured examples) and a function that reads the live file.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::Path;

use crate::sets::{CpuSet, NodeSet};

const NODE_ROOT: &str = "/sys/devices/system/node";

pub(crate) fn read_trimmed(path: impl AsRef<Path>) -> io::Result<String> {
    Ok(fs::read_to_string(path)?.trim().to_owned())
}

/// Reads at most `limit` bytes of a text file (a `/proc` file that could
/// grow without bound is never read whole).
fn read_bounded(path: &str, limit: u64) -> io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    fs::File::open(path)?
        .take(limit)
        .read_to_string(&mut text)?;
    Ok(text)
}

fn invalid(path: &str, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{path}: {what}"))
}

/// Reads a sysfs node or CPU list such as `/sys/devices/system/node/online`.
/// An empty file is an empty set.
fn read_list<T: std::str::FromStr + Default>(path: &str) -> io::Result<T>
where
    T::Err: std::fmt::Display,
{
    let text = read_trimmed(path)?;
    if text.is_empty() {
        return Ok(T::default());
    }
    text.parse().map_err(|e| invalid(path, e))
}

/// The number of a sysfs entry named `PREFIXnumber` (`node3`,
/// `memory42`), or `None` for any other name.
fn numbered<T: std::str::FromStr>(name: &std::ffi::OsStr, prefix: &str) -> Option<T> {
    name.to_str()?.strip_prefix(prefix)?.parse().ok()
}

/// Nodes the kernel has online.
pub fn online_nodes() -> io::Result<NodeSet> {
    read_list(&format!("{NODE_ROOT}/online"))
}

/// Nodes with memory.
pub fn nodes_with_memory() -> io::Result<NodeSet> {
    read_list(&format!("{NODE_ROOT}/has_memory"))
}

/// CPUs of one node.
pub fn node_cpus(node: u32) -> io::Result<CpuSet> {
    read_list(&format!("{NODE_ROOT}/node{node}/cpulist"))
}

/// The firmware distances (SLIT) from `node` to every online node, in
/// node order (`/sys/devices/system/node/nodeN/distance`).
pub fn node_distances(node: u32) -> io::Result<Vec<u64>> {
    let text = fs::read_to_string(format!("{NODE_ROOT}/node{node}/distance"))?;
    Ok(text
        .split_whitespace()
        .filter_map(|d| d.parse().ok())
        .collect())
}

/// CPUs online.
pub fn online_cpus() -> io::Result<CpuSet> {
    read_list("/sys/devices/system/cpu/online")
}

/// The fields of a node's `meminfo` that numalab reports, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeMemInfo {
    pub total: u64,
    pub free: u64,
    /// All page cache, including tmpfs, shared memory and ramfs, which
    /// reclaim cannot free.
    pub file_pages: u64,
    /// Page cache on the file LRU lists (`Active(file)` +
    /// `Inactive(file)`): what reclaim can free.
    pub file_lru: u64,
}

/// Parses `/sys/devices/system/node/nodeN/meminfo` (`Node 0 MemFree: 123 kB`).
pub fn parse_node_meminfo(text: &str) -> NodeMemInfo {
    let mut info = NodeMemInfo::default();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        // "Node", "<n>", "<Key>:", "<value>", "kB"
        let (Some(key), Some(value)) = (words.nth(2), words.next()) else {
            continue;
        };
        let Ok(value) = value.parse::<u64>() else {
            continue;
        };
        let bytes = if words.next() == Some("kB") {
            value * 1024
        } else {
            value
        };
        match key {
            "MemTotal:" => info.total = bytes,
            "MemFree:" => info.free = bytes,
            "FilePages:" => info.file_pages = bytes,
            "Active(file):" | "Inactive(file):" => info.file_lru += bytes,
            _ => {}
        }
    }
    info
}

/// A node's memory, read now.
pub fn node_meminfo(node: u32) -> io::Result<NodeMemInfo> {
    Ok(parse_node_meminfo(&fs::read_to_string(format!(
        "{NODE_ROOT}/node{node}/meminfo"
    ))?))
}

/// The `/proc/vmstat` counters named, in the order given; `None` when the
/// file cannot be read or one is missing (a kernel without NUMA
/// balancing has no `numa_hint_faults`).
pub fn vmstat(names: &[&str]) -> Option<Vec<u64>> {
    let text = read_bounded("/proc/vmstat", 1 << 20).ok()?;
    names
        .iter()
        .map(|name| {
            text.lines().find_map(|line| {
                let (key, value) = line.split_once(' ')?;
                (key == *name).then(|| value.trim().parse::<u64>().ok())?
            })
        })
        .collect()
}

/// Process `pid`'s command name (`/proc/PID/comm`, at most 16 bytes).
pub fn process_name(pid: i32) -> io::Result<String> {
    Ok(read_bounded(&format!("/proc/{pid}/comm"), 64)?
        .trim()
        .to_owned())
}

/// Pages the kernel's memory tiering has moved off and onto `node` since
/// boot, from its `vmstat`: demoted to a slower tier by reclaim
/// (`pgdemote_kswapd` + `pgdemote_direct` + `pgdemote_khugepaged`) and
/// promoted onto it by NUMA balancing's tiering mode
/// (`pgpromote_success`). `None` when the kernel counts neither.
pub fn node_tiering_moves(node: u32) -> Option<(u64, u64)> {
    let text = read_bounded(&format!("{NODE_ROOT}/node{node}/vmstat"), 1 << 20).ok()?;
    parse_tiering_moves(&text)
}

/// [`node_tiering_moves`] of a node's `vmstat` text.
pub fn parse_tiering_moves(text: &str) -> Option<(u64, u64)> {
    let (mut demoted, mut promoted, mut counted) = (0u64, 0u64, false);
    for line in text.lines() {
        let Some((name, value)) = line.split_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<u64>() else {
            continue;
        };
        match name {
            "pgdemote_kswapd" | "pgdemote_direct" | "pgdemote_khugepaged" => {
                demoted = demoted.saturating_add(value);
                counted = true;
            }
            "pgpromote_success" => {
                promoted = value;
                counted = true;
            }
            _ => {}
        }
    }
    counted.then_some((demoted, promoted))
}

/// Huge pages of one size on one node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HugePool {
    pub page_size: u64,
    pub total: u64,
    pub free: u64,
}

/// The hugetlb pools of one node (`nodeN/hugepages/hugepages-<size>kB/`).
pub fn node_huge_pools(node: u32) -> io::Result<Vec<HugePool>> {
    let dir = format!("{NODE_ROOT}/node{node}/hugepages");
    let mut pools = Vec::new();
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(pools),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(kb) = name
            .to_str()
            .and_then(|n| n.strip_prefix("hugepages-"))
            .and_then(|n| n.strip_suffix("kB"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let read = |file: &str| -> io::Result<u64> {
            let path = entry.path().join(file);
            read_trimmed(&path)?
                .parse()
                .map_err(|e| invalid(&path.display().to_string(), e))
        };
        pools.push(HugePool {
            page_size: kb * 1024,
            total: read("nr_hugepages")?,
            free: read("free_hugepages")?,
        });
    }
    pools.sort_by_key(|p| p.page_size);
    Ok(pools)
}

/// `/proc/sys/kernel/numa_balancing`, if the kernel has it.
pub fn numa_balancing() -> Option<u32> {
    read_trimmed("/proc/sys/kernel/numa_balancing")
        .ok()?
        .parse()
        .ok()
}

const TIERS_DIR: &str = "/sys/devices/virtual/memory_tiering";

/// The kernel's memory tiers, by id, with their nodes; `None` when it
/// has none. Bounded: Linux makes at most a few dozen tiers.
pub fn memory_tiers() -> Option<Vec<(u32, NodeSet)>> {
    let mut tiers = Vec::new();
    for entry in fs::read_dir(TIERS_DIR).ok()?.flatten().take(4096) {
        let Some(id) = numbered::<u32>(&entry.file_name(), "memory_tier") else {
            continue;
        };
        if let Ok(nodes) = read_list::<NodeSet>(&entry.path().join("nodelist").to_string_lossy()) {
            tiers.push((id, nodes));
        }
    }
    tiers.sort_by_key(|(id, _)| *id);
    (!tiers.is_empty()).then_some(tiers)
}

/// Whether reclaim demotes cold pages to a slower memory tier.
pub fn demotion_enabled() -> Option<bool> {
    match read_trimmed("/sys/kernel/mm/numa/demotion_enabled")
        .ok()?
        .as_str()
    {
        "true" | "1" => Some(true),
        "false" | "0" => Some(false),
        _ => None,
    }
}

/// The selected word of a sysfs choice file such as `always [madvise] never`.
pub fn parse_choice(text: &str) -> Option<String> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('[')?.strip_suffix(']'))
        .map(str::to_owned)
}

/// Transparent huge pages: `(enabled, defrag)`.
pub fn transparent_hugepages() -> Option<(String, String)> {
    let root = "/sys/kernel/mm/transparent_hugepage";
    let enabled = parse_choice(&read_trimmed(format!("{root}/enabled")).ok()?)?;
    let defrag = parse_choice(&read_trimmed(format!("{root}/defrag")).ok()?)?;
    Some((enabled, defrag))
}

const WEIGHTS_DIR: &str = "/sys/kernel/mm/mempolicy/weighted_interleave";

/// The kernel's weighted-interleave weight of each node, if the kernel has
/// weighted interleave (Linux 6.9).
pub fn interleave_weights() -> Option<BTreeMap<u32, u8>> {
    let mut weights = BTreeMap::new();
    for entry in fs::read_dir(WEIGHTS_DIR).ok()? {
        let entry = entry.ok()?;
        let Some(node) = numbered::<u32>(&entry.file_name(), "node") else {
            continue;
        };
        if let Some(weight) = read_trimmed(entry.path()).ok().and_then(|w| w.parse().ok()) {
            weights.insert(node, weight);
        }
    }
    Some(weights)
}

/// Sets one node's weighted-interleave weight (needs root). Writing any
/// weight also switches the kernel's automatic weights off (Linux 6.16).
pub fn set_interleave_weight(node: u32, weight: u8) -> io::Result<()> {
    fs::write(format!("{WEIGHTS_DIR}/node{node}"), weight.to_string())
}

/// The path of the automatic-weights switch (Linux 6.16), if the kernel
/// has it. It is documented as `auto`; Linux 6.18 names it `__auto_type`
/// (its `auto` became a macro for `__auto_type`, which the attribute's
/// name was spelt through).
pub fn interleave_auto_path() -> Option<String> {
    ["auto", "__auto_type"]
        .iter()
        .map(|name| format!("{WEIGHTS_DIR}/{name}"))
        .find(|path| fs::metadata(path).is_ok())
}

/// Whether the kernel chooses the weights itself from the nodes' bandwidth
/// (Linux 6.16), if it has the switch.
pub fn interleave_weights_auto() -> Option<bool> {
    match read_trimmed(interleave_auto_path()?).ok()?.as_str() {
        "true" | "1" | "Y" | "y" => Some(true),
        "false" | "0" | "N" | "n" => Some(false),
        _ => None,
    }
}

/// Switches the kernel's automatic weights on or off (needs root). Turning
/// them on fails with `ENODEV` where the kernel has no bandwidth figures
/// for its nodes (no HMAT or CXL CDAT).
pub fn set_interleave_weights_auto(on: bool) -> io::Result<()> {
    let path = interleave_auto_path().ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
    fs::write(path, if on { "true" } else { "false" })
}

/// The state letter of a task (`R`, `S`, `T`, `t`, `Z`, …) from
/// `/proc/TID/stat`.
pub fn task_state(tid: i32) -> io::Result<char> {
    let text = fs::read_to_string(format!("/proc/{tid}/stat"))?;
    // The command name is in parentheses and may itself hold them.
    text.rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
        .ok_or_else(|| invalid("/proc/TID/stat", "no state field"))
}

/// Counters of a task from `/proc/PID/task/TID/stat` (for the process's
/// leader, `/proc/PID/stat`: the whole process, exited threads included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskStat {
    pub minor_faults: u64,
    pub major_faults: u64,
    /// User and system time, in clock ticks.
    pub cpu_ticks: u64,
    /// The CPU it last ran on.
    pub processor: u32,
    /// Its state: `R`, `S`, `D`, `Z` (exited, not yet waited for), ...
    pub state: char,
    /// When it started, in clock ticks since boot: with the pid, what
    /// tells a process from a later one given the same number.
    pub start_ticks: u64,
    /// A kernel thread (`PF_KTHREAD` among its flags): no memory of its
    /// own, nothing to place.
    pub kernel_thread: bool,
}

/// Parses a `stat` line: fields after the command name (which is in
/// parentheses and may hold them), counted from the state (field 3).
pub fn parse_task_stat(text: &str) -> Option<TaskStat> {
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field n of stat(5) is fields[n - 3].
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    Some(TaskStat {
        minor_faults: field(10)?,
        major_faults: field(12)?,
        cpu_ticks: field(14)? + field(15)?,
        processor: u32::try_from(field(39)?).ok()?,
        state: fields.first()?.chars().next()?,
        start_ticks: field(22)?,
        // PF_KTHREAD in the flags (field 9).
        kernel_thread: field(9)? & 0x0020_0000 != 0,
    })
}

/// Task `tid`'s counters: the process's own when `tid == pid`.
pub fn task_stat(pid: i32, tid: i32) -> io::Result<TaskStat> {
    let path = if pid == tid {
        format!("/proc/{pid}/stat")
    } else {
        format!("/proc/{pid}/task/{tid}/stat")
    };
    parse_task_stat(&read_bounded(&path, 4096)?)
        .ok_or_else(|| invalid("/proc/PID/stat", "fields missing"))
}

/// Process `pid` and every process descended from it, parents first (at
/// most [`MAX_TASKS`]), from each thread's
/// `/proc/PID/task/TID/children` (`CONFIG_PROC_CHILDREN`; without it,
/// `pid` alone).
pub fn with_descendants(pid: i32) -> Vec<i32> {
    let mut all = vec![pid];
    let mut seen = std::collections::BTreeSet::from([pid]);
    let mut next = 0;
    while next < all.len() && all.len() < MAX_TASKS {
        let parent = all[next];
        next += 1;
        for tid in task_ids(parent).unwrap_or_default() {
            let Ok(text) = read_bounded(&format!("/proc/{parent}/task/{tid}/children"), 1 << 20)
            else {
                continue;
            };
            for child in text
                .split_whitespace()
                .filter_map(|w| w.parse::<i32>().ok())
            {
                if all.len() < MAX_TASKS && seen.insert(child) {
                    all.push(child);
                }
            }
        }
    }
    all
}

/// The threads of process `pid` (at most [`MAX_TASKS`]).
pub fn task_ids(pid: i32) -> io::Result<Vec<i32>> {
    let mut tids = Vec::new();
    for entry in fs::read_dir(format!("/proc/{pid}/task"))? {
        if let Some(tid) = entry?.file_name().to_str().and_then(|n| n.parse().ok()) {
            tids.push(tid);
        }
        if tids.len() >= MAX_TASKS {
            break;
        }
    }
    Ok(tids)
}

/// The most threads of one process read ([`task_ids`]).
pub const MAX_TASKS: usize = 100_000;

/// Scheduler counters of a task (`/proc/PID/task/TID/sched`, kernels
/// with `CONFIG_SCHED_DEBUG`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskSched {
    /// `se.nr_migrations`: moves from one CPU to another.
    pub cpu_migrations: u64,
    /// `numa_pages_migrated`: pages NUMA balancing moved for it.
    pub numa_pages_migrated: u64,
}

/// Parses a task's `sched` file.
pub fn parse_task_sched(text: &str) -> TaskSched {
    let value = |name: &str| {
        text.lines()
            .find_map(|l| {
                let (key, value) = l.split_once(':')?;
                (key.trim() == name).then(|| value.trim().parse::<u64>().ok())?
            })
            .unwrap_or(0)
    };
    TaskSched {
        cpu_migrations: value("se.nr_migrations"),
        numa_pages_migrated: value("numa_pages_migrated"),
    }
}

/// Task `tid`'s scheduler counters.
pub fn task_sched(pid: i32, tid: i32) -> io::Result<TaskSched> {
    Ok(parse_task_sched(&read_bounded(
        &format!("/proc/{pid}/task/{tid}/sched"),
        64 << 10,
    )?))
}

/// Whether process `pid` still runs (exists and is not a zombie).
pub fn process_exists(pid: i32) -> bool {
    task_state(pid).is_ok_and(|state| state != 'Z' && state != 'X')
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`), the unit of `stat`'s
/// times.
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf only reads a constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// `(Cpus_allowed_list, Mems_allowed_list)` of a process's
/// `/proc/PID/status`.
pub fn parse_allowed(status: &str) -> (Option<CpuSet>, Option<NodeSet>) {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    (
        field("Cpus_allowed_list:").and_then(|v| v.parse().ok()),
        field("Mems_allowed_list:").and_then(|v| v.parse().ok()),
    )
}

/// The CPUs and nodes this process's cgroup cpuset allows.
///
/// `Cpus_allowed_list` in `/proc/self/status` is the calling thread's
/// affinity, which binding changes; the cgroup's effective sets are what
/// binding may choose from. Falls back to every online CPU and the status
/// file's `Mems_allowed_list` where no cpuset controller is mounted.
pub fn allowed_for_self() -> io::Result<(Option<CpuSet>, Option<NodeSet>)> {
    if let Some(found) = cgroup_cpuset() {
        return Ok(found);
    }
    let (_, mems) = parse_allowed(&fs::read_to_string("/proc/self/status")?);
    Ok((online_cpus().ok(), mems))
}

/// Reads the effective cpuset of this process's cgroup (v1 or v2).
fn cgroup_cpuset() -> Option<(Option<CpuSet>, Option<NodeSet>)> {
    let cgroups = fs::read_to_string("/proc/self/cgroup").ok()?;
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    for (dir, cpus_file, mems_file) in cpuset_dirs(&cgroups, &mountinfo) {
        // In v2 the files exist only where the controller is enabled: walk
        // up to the nearest cgroup that has them.
        let mut dir = std::path::PathBuf::from(dir);
        loop {
            let cpus = read_list::<CpuSet>(&dir.join(cpus_file).to_string_lossy());
            let mems = read_list::<NodeSet>(&dir.join(mems_file).to_string_lossy());
            if let (Ok(cpus), Ok(mems)) = (cpus, mems) {
                if !cpus.is_empty() && !mems.is_empty() {
                    return Some((Some(cpus), Some(mems)));
                }
            }
            if !dir.pop() {
                break;
            }
        }
    }
    None
}

/// Candidate cpuset directories, from `/proc/self/cgroup` and
/// `/proc/self/mountinfo`: `(directory, cpus file, mems file)`.
fn cpuset_dirs(cgroups: &str, mountinfo: &str) -> Vec<(String, &'static str, &'static str)> {
    let mut dirs = Vec::new();
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let v1 = controllers.split(',').any(|c| c == "cpuset");
        let v2 = controllers.is_empty();
        if !v1 && !v2 {
            continue;
        }
        for mount in mountinfo.lines() {
            // id parent major:minor root mountpoint options - fstype source superoptions
            let fields: Vec<&str> = mount.split_whitespace().collect();
            let Some(dash) = fields.iter().position(|f| *f == "-") else {
                continue;
            };
            let (Some(root), Some(point), Some(fstype), Some(options)) = (
                fields.get(3),
                fields.get(4),
                fields.get(dash + 1),
                fields.get(dash + 3),
            ) else {
                continue;
            };
            let relative = path
                .strip_prefix(root)
                .unwrap_or(path)
                .trim_start_matches('/');
            let dir = format!("{}/{relative}", point.trim_end_matches('/'));
            if v1 && *fstype == "cgroup" && options.split(',').any(|o| o == "cpuset") {
                dirs.push((dir, "cpuset.effective_cpus", "cpuset.effective_mems"));
            } else if v2 && *fstype == "cgroup2" {
                dirs.push((dir, "cpuset.cpus.effective", "cpuset.mems.effective"));
            }
        }
    }
    dirs
}

/// The thread group id of a task, from `/proc/TID/status`.
pub fn tgid_of(tid: i32) -> io::Result<i32> {
    let text = fs::read_to_string(format!("/proc/{tid}/status"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| invalid("/proc/TID/status", "no Tgid line"))
}

/// Resident pages of one mapping of `/proc/PID/numa_maps`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NumaMapsEntry {
    /// Start address of the mapping.
    pub address: u64,
    /// Policy text, e.g. `default`, `bind:1`, `interleave:0-1`.
    pub policy: String,
    /// Page size of the mapping in bytes (`kernelpagesize_kB`).
    pub page_size: u64,
    /// Pages per node.
    pub pages: BTreeMap<u32, u64>,
    /// The backing file, `heap`, `stack`, or `anon`.
    pub kind: String,
}

/// Parses `/proc/PID/numa_maps`.
pub fn parse_numa_maps(text: &str) -> Vec<NumaMapsEntry> {
    let mut entries = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(address), Some(policy)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(address) = u64::from_str_radix(address, 16) else {
            continue;
        };
        let mut entry = NumaMapsEntry {
            address,
            policy: policy.to_owned(),
            page_size: 4096,
            kind: "anon".to_owned(),
            ..Default::default()
        };
        for word in words {
            if let Some(rest) = word.strip_prefix('N') {
                if let Some((node, count)) = rest.split_once('=') {
                    if let (Ok(node), Ok(count)) = (node.parse(), count.parse()) {
                        entry.pages.insert(node, count);
                    }
                }
            } else if let Some(kb) = word.strip_prefix("kernelpagesize_kB=") {
                entry.page_size = kb.parse::<u64>().unwrap_or(4) * 1024;
            } else if let Some(file) = word.strip_prefix("file=") {
                entry.kind = file.to_owned();
            } else if word == "heap" || word == "stack" {
                entry.kind = word.to_owned();
            }
        }
        entries.push(entry);
    }
    entries
}

/// Reads `/proc/PID/numa_maps`.
pub fn numa_maps(pid: i32) -> io::Result<Vec<NumaMapsEntry>> {
    Ok(parse_numa_maps(&fs::read_to_string(format!(
        "/proc/{pid}/numa_maps"
    ))?))
}

/// Bytes of a process's anonymous memory backed by transparent huge pages
/// (`AnonHugePages` in `/proc/PID/smaps_rollup`); 0 when not given.
pub fn parse_anon_huge_pages(smaps_rollup: &str) -> u64 {
    smaps_rollup
        .lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Reads a process's transparent-huge-page bytes (Linux 4.14 or later for
/// `smaps_rollup`; 0 where it is missing).
pub fn anon_huge_pages(pid: i32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .map(|t| parse_anon_huge_pages(&t))
        .unwrap_or(0)
}

/// The size of a transparent huge page
/// (`/sys/kernel/mm/transparent_hugepage/hpage_pmd_size`), 2 MiB where
/// the kernel does not say.
pub fn thp_size() -> u64 {
    read_trimmed("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2 << 20)
}

/// A mapping of `/proc/PID/smaps` with huge pages in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HugeMapping {
    /// Its addresses, `start..end`.
    pub start: u64,
    pub end: u64,
    /// Bytes of it in transparent huge pages (`AnonHugePages`).
    pub transparent_bytes: u64,
    /// Whether it is hugetlb memory (`KernelPageSize` above 4 kB), every
    /// page of it huge.
    pub hugetlb: bool,
}

/// The mappings overlapping `[start, end)` that hold huge pages, from the
/// text of `/proc/PID/smaps`.
pub fn parse_smaps_huge_mappings(text: &str, start: u64, end: u64) -> Vec<HugeMapping> {
    let kb = |rest: &str| -> u64 {
        rest.trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap_or(0)
    };
    let mut found: Vec<HugeMapping> = Vec::new();
    let mut current: Option<HugeMapping> = None;
    let mut flush = |mapping: Option<HugeMapping>| {
        if let Some(m) = mapping.filter(|m| m.transparent_bytes > 0 || m.hugetlb) {
            found.push(m);
        }
    };
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = first.split_once('-') {
            if let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) {
                flush(current.take());
                let overlaps = lo < hi && lo < end && start < hi;
                current = overlaps.then_some(HugeMapping {
                    start: lo,
                    end: hi,
                    transparent_bytes: 0,
                    hugetlb: false,
                });
                continue;
            }
        }
        let Some(mapping) = current.as_mut() else {
            continue;
        };
        if let Some(rest) = line.strip_prefix("AnonHugePages:") {
            mapping.transparent_bytes = kb(rest) * 1024;
        } else if let Some(rest) = line.strip_prefix("KernelPageSize:") {
            mapping.hugetlb = kb(rest) > 4;
        }
    }
    flush(current);
    found
}

/// Bytes of transparent huge pages (`AnonHugePages`) backing
/// `[start, end)`, from the text of `/proc/PID/smaps`. A mapping that only
/// partly overlaps the range counts in proportion to the overlap.
pub fn parse_smaps_huge_bytes(text: &str, start: u64, end: u64) -> u64 {
    let total: f64 = parse_smaps_huge_mappings(text, start, end)
        .iter()
        .map(|m| {
            let overlap = end.min(m.end) - start.max(m.start);
            m.transparent_bytes as f64 * overlap as f64 / (m.end - m.start) as f64
        })
        .sum();
    total.round() as u64
}

/// The mappings of this process overlapping `[start, end)` that hold huge
/// pages.
pub fn huge_mappings_of_self(start: u64, end: u64) -> io::Result<Vec<HugeMapping>> {
    Ok(parse_smaps_huge_mappings(
        &fs::read_to_string("/proc/self/smaps")?,
        start,
        end,
    ))
}

/// Bytes of transparent huge pages backing `[start, end)` of this process.
pub fn anon_huge_bytes(start: u64, end: u64) -> io::Result<u64> {
    Ok(parse_smaps_huge_bytes(
        &fs::read_to_string("/proc/self/smaps")?,
        start,
        end,
    ))
}

/// Identity of the running system, for result files.
pub fn hostname() -> String {
    read_trimmed("/proc/sys/kernel/hostname").unwrap_or_else(|_| "unknown".into())
}

/// The kernel release (`uname -r`).
pub fn kernel_release() -> String {
    read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_else(|_| "unknown".into())
}

/// The CPU model name and the flags of the first CPU in `/proc/cpuinfo`.
pub fn parse_cpuinfo(text: &str) -> (Option<String>, Option<f64>) {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let (key, value) = l.split_once(':')?;
            (key.trim() == name).then(|| value.trim().to_owned())
        })
    };
    (
        field("model name"),
        field("cpu MHz").and_then(|v| v.parse().ok()),
    )
}

/// `(model name, MHz)` of the first CPU.
pub fn cpu_model() -> (Option<String>, Option<f64>) {
    fs::read_to_string("/proc/cpuinfo")
        .map(|t| parse_cpuinfo(&t))
        .unwrap_or((None, None))
}

#[cfg(test)]
mod tests {
    #[test]
    fn private_writable_mappings_are_the_anonymous_ones() {
        let maps = "\
55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0                          [heap]
7f1e5c000000-7f1e5c021000 rw-p 00000000 00:00 0 
7f1e60000000-7f1e60200000 r--p 00000000 08:01 131 /usr/lib/x86_64-linux-gnu/libc.so.6
7f1e60400000-7f1e60402000 rw-p 001d4000 08:01 131 /usr/lib/x86_64-linux-gnu/libc.so.6
7f1e60500000-7f1e60600000 rw-s 00000000 00:01 77 /dev/zero (deleted)
7f1e60700000-7f1e60701000 rw-p 00000000 00:00 0                          [anon:numalab]
7ffc1e2d0000-7ffc1e2f1000 rw-p 00000000 00:00 0                          [stack]
7ffc1e3f0000-7ffc1e3f2000 r-xp 00000000 00:00 0                          [vdso]
";
        assert_eq!(
            parse_private_writable(maps),
            [
                (0x55d0c0a00000, 0x55d0c0a21000),
                (0x7f1e5c000000, 0x7f1e5c021000),
                (0x7f1e60700000, 0x7f1e60701000),
                (0x7ffc1e2d0000, 0x7ffc1e2f1000),
            ]
        );
    }

    #[test]
    fn a_stat_line_is_read_past_a_command_name_with_parentheses() {
        // stat(5): pid (comm) state ppid ... minflt(10) cminflt majflt(12)
        // cmajflt utime(14) stime(15) ... processor(39).
        let mut fields: Vec<String> = (3..=52).map(|n| n.to_string()).collect();
        fields[0] = "S".into();
        let line = format!("4242 (a (b) c) {}", fields.join(" "));
        let stat = parse_task_stat(&line).unwrap();
        assert_eq!(stat.minor_faults, 10);
        assert_eq!(stat.major_faults, 12);
        assert_eq!(stat.cpu_ticks, 14 + 15);
        assert_eq!(stat.processor, 39);
        assert_eq!(parse_task_stat("4242 (short) S 1 2"), None);
    }

    #[test]
    fn a_sched_file_gives_migrations_and_numa_moves() {
        let text = "x (1, #threads: 1)\n---\nse.nr_migrations                             :                   17\nnuma_pages_migrated                          :                    5\n";
        let sched = parse_task_sched(text);
        assert_eq!(sched.cpu_migrations, 17);
        assert_eq!(sched.numa_pages_migrated, 5);
        assert_eq!(parse_task_sched(""), TaskSched::default());
    }

    use super::*;

    #[test]
    fn parses_node_meminfo() {
        let text = "Node 0 MemTotal:        5204172 kB\n\
                    Node 0 MemFree:         3951364 kB\n\
                    Node 0 MemUsed:         1252808 kB\n\
                    Node 0 Active(file):      30 kB\n\
                    Node 0 Inactive(file):    40 kB\n\
                    Node 0 FilePages:        100 kB\n\
                    Node 0 Shmem:             30 kB\n\
                    Node 0 HugePages_Total:     0\n";
        let info = parse_node_meminfo(text);
        assert_eq!(info.total, 5204172 * 1024);
        assert_eq!(info.free, 3951364 * 1024);
        assert_eq!(info.file_pages, 100 * 1024);
        // tmpfs and ramfs pages count in FilePages but not on the file LRU.
        assert_eq!(info.file_lru, 70 * 1024);
    }

    #[test]
    fn parses_choice_files() {
        assert_eq!(
            parse_choice("always [madvise] never").as_deref(),
            Some("madvise")
        );
        assert_eq!(
            parse_choice("[always] madvise never").as_deref(),
            Some("always")
        );
        assert_eq!(parse_choice("nothing selected"), None);
    }

    #[test]
    fn parses_allowed_lists() {
        let status = "Name:\tcat\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\n\
                      Mems_allowed:\t00000000,00000001\nMems_allowed_list:\t0\n";
        let (cpus, mems) = parse_allowed(status);
        assert_eq!(cpus.unwrap().to_string(), "0-1");
        assert_eq!(mems.unwrap().to_string(), "0");
    }

    #[test]
    fn finds_cpuset_directories() {
        let cgroups = "4:memory:/job\n3:cpuset:/slurm/job_7\n0::/user.slice\n";
        let mountinfo = "\
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
";
        let dirs = cpuset_dirs(cgroups, mountinfo);
        assert_eq!(
            dirs,
            vec![
                (
                    "/sys/fs/cgroup/cpuset/slurm/job_7".to_owned(),
                    "cpuset.effective_cpus",
                    "cpuset.effective_mems"
                ),
                (
                    "/sys/fs/cgroup/unified/user.slice".to_owned(),
                    "cpuset.cpus.effective",
                    "cpuset.mems.effective"
                ),
            ]
        );
    }

    #[test]
    fn parses_numa_maps() {
        let text = "\
55d0c7a00000 default file=/usr/bin/cat mapped=3 N0=3 kernelpagesize_kB=4
55d0c8e1b000 default heap anon=33 dirty=33 N0=30 N1=3 kernelpagesize_kB=4
7f2a00000000 bind:1 anon=512 dirty=512 N1=512 kernelpagesize_kB=2048
7ffc1b9f0000 default stack anon=3 dirty=3 N0=3 kernelpagesize_kB=4
7ffc1b9fc000 default
";
        let entries = parse_numa_maps(text);
        assert_eq!(entries.len(), 5);
        assert_eq!(entries[0].kind, "/usr/bin/cat");
        assert_eq!(entries[1].kind, "heap");
        assert_eq!(entries[1].pages, BTreeMap::from([(0, 30), (1, 3)]));
        assert_eq!(entries[2].policy, "bind:1");
        assert_eq!(entries[2].page_size, 2 << 20);
        assert_eq!(entries[2].pages[&1], 512);
        assert_eq!(entries[3].kind, "stack");
        assert!(entries[4].pages.is_empty());
    }

    #[test]
    fn parses_anon_huge_pages() {
        let text = "55d0c7a00000-7ffc1ba00000 ---p 00000000 00:00 0  [rollup]\n\
                    Rss:               18060 kB\n\
                    AnonHugePages:     14336 kB\n\
                    ShmemPmdMapped:        0 kB\n";
        assert_eq!(parse_anon_huge_pages(text), 14336 * 1024);
        assert_eq!(parse_anon_huge_pages("Rss: 4 kB\n"), 0);
    }

    #[test]
    fn counts_transparent_huge_pages_of_a_range() {
        let text = "\
7f0000000000-7f0000400000 rw-p 00000000 00:00 0
Size:               4096 kB
AnonHugePages:      4096 kB
7f0000400000-7f0000800000 rw-p 00000000 00:00 0
Size:               4096 kB
AnonHugePages:      2048 kB
7ffc1b9f0000-7ffc1ba11000 rw-p 00000000 00:00 0                          [stack]
AnonHugePages:         0 kB
";
        assert_eq!(
            parse_smaps_huge_bytes(text, 0x7f0000000000, 0x7f0000400000),
            4 << 20
        );
        // Half of the second mapping: half its huge pages.
        assert_eq!(
            parse_smaps_huge_bytes(text, 0x7f0000400000, 0x7f0000600000),
            1 << 20
        );
        assert_eq!(parse_smaps_huge_bytes(text, 0x1000, 0x2000), 0);
    }

    #[test]
    fn finds_the_mappings_with_huge_pages() {
        let text = "\
7f0000000000-7f0000400000 rw-p 00000000 00:00 0
KernelPageSize:        4 kB
AnonHugePages:      2048 kB
7f0000400000-7f0000800000 rw-p 00000000 00:00 0
KernelPageSize:        4 kB
AnonHugePages:         0 kB
7f0000800000-7f0000c00000 rw-s 00000000 00:10 5                          /dev/hugepages/ring
KernelPageSize:     2048 kB
AnonHugePages:         0 kB
";
        let found = parse_smaps_huge_mappings(text, 0x7f0000200000, 0x7f0000a00000);
        assert_eq!(
            found,
            [
                HugeMapping {
                    start: 0x7f0000000000,
                    end: 0x7f0000400000,
                    transparent_bytes: 2 << 20,
                    hugetlb: false
                },
                HugeMapping {
                    start: 0x7f0000800000,
                    end: 0x7f0000c00000,
                    transparent_bytes: 0,
                    hugetlb: true
                }
            ]
        );
        assert!(parse_smaps_huge_mappings(text, 0x7f0000400000, 0x7f0000800000).is_empty());
    }

    #[test]
    fn parses_cpuinfo() {
        let text =
            "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum\ncpu MHz\t\t: 2100.000\n";
        let (model, mhz) = parse_cpuinfo(text);
        assert_eq!(model.as_deref(), Some("Intel(R) Xeon(R) Platinum"));
        assert_eq!(mhz, Some(2100.0));
    }

    #[test]
    fn a_frame_in_a_block_shared_by_two_nodes_goes_by_the_zone_spans() {
        // 320 MiB nodes, 128 MiB blocks: block 2 holds the end of node 0
        // and the start of node 1.
        let zoneinfo = "Node 0, zone      DMA\n  pages free 3840\n        spanned  4095\n  start_pfn:           1\n\
                        Node 0, zone    DMA32\n        spanned  77824\n  start_pfn:           4096\n\
                        Node 0, zone   Normal\n        spanned  0\n  start_pfn:           0\n\
                        Node 1, zone    DMA32\n        spanned  81920\n  start_pfn:           81920\n";
        let spans = super::parse_zone_spans(zoneinfo);
        assert_eq!(spans, [(0, 1, 4096), (0, 4096, 81920), (1, 81920, 163840)]);
        let blocks = super::MemoryBlocks {
            block_size: 128 << 20,
            nodes: [(0, 0), (1, 0), (3, 1)].into_iter().collect(),
            spans,
        };
        let page = 4096;
        assert_eq!(blocks.node_of_frame(100, page), Some(0), "whole block");
        assert_eq!(
            blocks.node_of_frame(81919, page),
            Some(0),
            "shared block, node 0's part"
        );
        assert_eq!(
            blocks.node_of_frame(81920, page),
            Some(1),
            "shared block, node 1's part"
        );
        assert_eq!(blocks.node_of_frame(1 << 30, page), None, "no known block");
    }
}

/// What `/proc/self/pagemap` says of one page: present (mapped to a page
/// frame, including one a NUMA-balancing scan has made inaccessible for a
/// moment), and its frame number when the reader may see frame numbers
/// (`CAP_SYS_ADMIN`; 0 otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PagemapEntry {
    pub present: bool,
    pub pfn: u64,
    /// Bit 55: written since the process's soft-dirty bits were last
    /// cleared ([`clear_soft_dirty`]), or mapped since.
    pub soft_dirty: bool,
}

impl PagemapEntry {
    /// The entries in `raw`, as [`pagemap_run`] read them.
    pub fn parse(raw: &[u8]) -> impl Iterator<Item = PagemapEntry> + '_ {
        raw.chunks_exact(8)
            .map(|b| PagemapEntry::from_raw(u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]))))
    }

    /// Bit 63: present; bit 55: soft-dirty; bits 0–54: the frame number
    /// (Documentation/admin-guide/mm/pagemap.rst).
    pub fn from_raw(raw: u64) -> PagemapEntry {
        let present = raw >> 63 == 1;
        PagemapEntry {
            present,
            pfn: if present { raw & ((1 << 55) - 1) } else { 0 },
            soft_dirty: raw >> 55 & 1 == 1,
        }
    }
}

/// Clears the soft-dirty bits of every page of process `pid` (writes `4`
/// to `/proc/PID/clear_refs`, Documentation/admin-guide/mm/soft-dirty.rst):
/// from now on a page's bit says it was written (or mapped) since. The
/// kernel write-protects the pages to notice, so the first write to each
/// page afterwards takes one extra, cheap page fault. Needs the same
/// rights as writing to the process's memory (its user, or root).
pub fn clear_soft_dirty(pid: i32) -> io::Result<()> {
    use std::io::Write;
    fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/clear_refs"))?
        .write_all(b"4")
}

/// The most of `/proc/PID/maps` read: 65,530 mappings (the kernel's
/// default `vm.max_map_count`) of a long path each fit many times over.
const MAX_MAPS_BYTES: u64 = 64 << 20;

/// The private writable anonymous mappings of `/proc/PID/maps` text
/// (heap, stack, anonymous and named anonymous memory): `(start, end)`.
pub fn parse_private_writable(maps: &str) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let (range, perms) = (words.next()?, words.next()?);
            let path = words.nth(3).unwrap_or("");
            let anonymous = path.is_empty()
                || path == "[heap]"
                || path.starts_with("[stack")
                || path.starts_with("[anon");
            if !(perms.starts_with("rw") && perms.ends_with('p') && anonymous) {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            Some((
                usize::from_str_radix(start, 16).ok()?,
                usize::from_str_radix(end, 16).ok()?,
            ))
        })
        .collect()
}

/// Pages of process `pid`'s private writable memory that are present, and
/// how many of those have their soft-dirty bit set: `(present, dirty)`.
/// Reads `/proc/PID/pagemap` in runs of at most 64 Ki pages (one 512 KiB
/// buffer).
pub fn soft_dirty_pages(pid: i32) -> io::Result<(u64, u64)> {
    use std::os::unix::fs::FileExt;
    const RUN: usize = 64 << 10;
    let ranges =
        parse_private_writable(&read_bounded(&format!("/proc/{pid}/maps"), MAX_MAPS_BYTES)?);
    let pagemap = fs::File::open(format!("/proc/{pid}/pagemap"))?;
    let page = super::linux::page_size();
    let mut raw = vec![0u8; RUN * 8];
    let (mut present, mut dirty) = (0, 0);
    for (start, end) in ranges {
        let mut first = start / page;
        let last = end / page;
        while first < last {
            let pages = (last - first).min(RUN);
            let buffer = &mut raw[..pages * 8];
            pagemap.read_exact_at(buffer, first as u64 * 8)?;
            for entry in PagemapEntry::parse(buffer) {
                if entry.present {
                    present += 1;
                    dirty += u64::from(entry.soft_dirty);
                }
            }
            first += pages;
        }
    }
    Ok((present, dirty))
}

/// Reads the pagemap entries of `pages` consecutive pages of this
/// process from `start` (page-aligned) in one go from `pagemap` (an open
/// `/proc/self/pagemap`) into `raw`, 8 bytes each (reused: a large run's
/// buffer is not allocated and faulted in again for every run); see
/// [`PagemapEntry::parse`].
pub fn pagemap_run(
    pagemap: &fs::File,
    start: usize,
    pages: usize,
    page_size: usize,
    raw: &mut Vec<u8>,
) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    raw.resize(pages * 8, 0);
    pagemap.read_exact_at(raw, (start / page_size) as u64 * 8)
}

/// The pagemap entries of this process's pages at `addresses` (each the
/// start of a page of `page_size` bytes), one `pread` per address.
pub fn pagemap_of_self(addresses: &[usize], page_size: usize) -> io::Result<Vec<PagemapEntry>> {
    use std::os::unix::fs::FileExt;
    let file = fs::File::open("/proc/self/pagemap")?;
    let mut raw = [0u8; 8];
    addresses
        .iter()
        .map(|&address| {
            file.read_exact_at(&mut raw, (address / page_size) as u64 * 8)?;
            Ok(PagemapEntry::from_raw(u64::from_ne_bytes(raw)))
        })
        .collect()
}

/// The node of every memory block (`/sys/devices/system/node/nodeN/memoryM`)
/// and the block size, to tell the node of a page frame.
///
/// A block that holds the end of one node and the start of the next
/// (nodes whose size is not a multiple of the block size, as on the
/// emulated `snc` preset's 320 MiB nodes with 128 MiB blocks) is linked
/// under both: it is left out of `nodes`, and a frame in it is told by
/// the page-frame spans of the nodes' zones (`/proc/zoneinfo`) when
/// exactly one node's span holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryBlocks {
    /// Bytes per block.
    pub block_size: u64,
    /// Block → node, for blocks wholly on one node.
    pub nodes: BTreeMap<u64, u32>,
    /// Each populated zone's node and page frames, `start..end`.
    pub spans: Vec<(u32, u64, u64)>,
}

impl MemoryBlocks {
    /// The block holding page frame `pfn` of `page_size` bytes.
    pub fn block_of(&self, pfn: u64, page_size: u64) -> u64 {
        pfn * page_size / self.block_size
    }

    /// The node of page frame `pfn`: its block's, or in a block shared by
    /// two nodes the one node whose zones span it; `None` in no known
    /// block or where the spans do not tell.
    pub fn node_of_frame(&self, pfn: u64, page_size: u64) -> Option<u32> {
        match self.nodes.get(&self.block_of(pfn, page_size)) {
            Some(&node) => Some(node),
            None => self.node_by_span(pfn),
        }
    }

    /// The one node whose zones span frame `pfn`.
    pub fn node_by_span(&self, pfn: u64) -> Option<u32> {
        let mut found = None;
        for &(node, start, end) in &self.spans {
            if (start..end).contains(&pfn) {
                match found {
                    Some(other) if other != node => return None,
                    _ => found = Some(node),
                }
            }
        }
        found
    }
}

/// Each populated zone's node and page-frame span from `/proc/zoneinfo`
/// (`Node N, zone NAME`, then `spanned` and `start_pfn:` lines).
///
/// ```text
/// Node 1, zone   Normal
///   pages free     81234
///         spanned  81920
///   start_pfn:           344064
/// ```
pub fn parse_zone_spans(text: &str) -> Vec<(u32, u64, u64)> {
    let mut spans = Vec::new();
    let mut node = None;
    let mut spanned = 0;
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Node", id, "zone", ..] => {
                node = id.trim_end_matches(',').parse::<u32>().ok();
                spanned = 0;
            }
            ["spanned", n] => spanned = n.parse().unwrap_or(0),
            ["start_pfn:", pfn] => {
                if let (Some(node), Ok(start)) = (node, pfn.parse::<u64>()) {
                    if spanned > 0 {
                        spans.push((node, start, start + spanned));
                    }
                }
            }
            _ => {}
        }
    }
    spans
}

/// Every memory block's node ([`MemoryBlocks`]); `None` where the kernel
/// has no memory blocks in sysfs (no memory hotplug support).
pub fn memory_block_nodes() -> Option<MemoryBlocks> {
    let text = read_trimmed("/sys/devices/system/memory/block_size_bytes").ok()?;
    let block_size = u64::from_str_radix(&text, 16).ok().filter(|&b| b > 0)?;
    // Block → its node, or `None` once it is seen under a second node.
    let mut seen: BTreeMap<u64, Option<u32>> = BTreeMap::new();
    for node in fs::read_dir(NODE_ROOT).ok()?.flatten() {
        let Some(id) = numbered::<u32>(&node.file_name(), "node") else {
            continue;
        };
        for entry in fs::read_dir(node.path()).ok()?.flatten() {
            if let Some(block) = numbered::<u64>(&entry.file_name(), "memory") {
                seen.entry(block)
                    .and_modify(|n| *n = n.filter(|&n| n == id))
                    .or_insert(Some(id));
            }
        }
    }
    // The zones' spans matter only for a block two nodes share. Bounded:
    // a few hundred lines per zone, a handful of zones per node.
    let spans = if seen.values().any(Option::is_none) {
        read_bounded("/proc/zoneinfo", 16 << 20)
            .map(|t| parse_zone_spans(&t))
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let blocks: BTreeMap<u64, u32> = seen
        .into_iter()
        .filter_map(|(block, node)| Some((block, node?)))
        .collect();
    (!blocks.is_empty()).then_some(MemoryBlocks {
        block_size,
        nodes: blocks,
        spans,
    })
}

/// One CPU data or unified cache as sysfs describes it
/// (`/sys/devices/system/cpu/cpuN/cache/indexK`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuCache {
    pub level: u32,
    pub bytes: u64,
    pub shared_with: CpuSet,
}

/// A cache size as sysfs writes it: `32768K`, `8M`, `1024`.
pub fn parse_cache_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, unit) = match text.as_bytes().last()? {
        b'K' => (&text[..text.len() - 1], 1 << 10),
        b'M' => (&text[..text.len() - 1], 1 << 20),
        b'G' => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(unit)
}

/// The last-level data or unified cache of `cpu`: the one of the highest
/// level (of the largest size among equals). `None` where sysfs has no
/// cache description (some virtual machines, non-x86 boards).
pub fn last_level_cache(cpu: u32) -> Option<CpuCache> {
    let root = format!("/sys/devices/system/cpu/cpu{cpu}/cache");
    let mut best: Option<CpuCache> = None;
    // Bounded: x86 describes 4 to 5 caches per CPU.
    for entry in fs::read_dir(&root).ok()?.flatten().take(64) {
        let dir = entry.path();
        if !entry.file_name().to_string_lossy().starts_with("index") {
            continue;
        }
        let kind = read_trimmed(dir.join("type")).unwrap_or_default();
        if kind != "Data" && kind != "Unified" {
            continue;
        }
        let (Some(level), Some(bytes)) = (
            read_trimmed(dir.join("level"))
                .ok()
                .and_then(|l| l.parse().ok()),
            read_trimmed(dir.join("size"))
                .ok()
                .and_then(|s| parse_cache_size(&s)),
        ) else {
            continue;
        };
        let shared_with = read_trimmed(dir.join("shared_cpu_list"))
            .ok()
            .and_then(|l| l.parse().ok())
            .unwrap_or_else(|| CpuSet::single(cpu));
        if best
            .as_ref()
            .is_none_or(|b| (level, bytes) > (b.level, b.bytes))
        {
            best = Some(CpuCache {
                level,
                bytes,
                shared_with,
            });
        }
    }
    best
}
