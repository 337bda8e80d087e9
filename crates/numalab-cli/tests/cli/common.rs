//! Helpers every CLI test uses: running numalab, scratch directories, what the kernel says.

use std::path::PathBuf;
use std::process::{Command, Output};

pub fn numalab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(args)
        .output()
        .expect("numalab runs")
}

/// `numalab args` run in `dir` (relative paths resolve there).
pub fn numalab_at(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("numalab runs")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn topologies() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/topologies")
}

/// Node `node`'s installed memory in bytes (`MemTotal` of its sysfs
/// meminfo).
pub fn node_memory_total(node: u32) -> u64 {
    meminfo_total(
        &std::fs::read_to_string(format!("/sys/devices/system/node/node{node}/meminfo")).unwrap(),
    )
}

/// `MemTotal` of a node's meminfo text (`Node 0 MemTotal: 123 kB`), in
/// bytes.
pub fn meminfo_total(text: &str) -> u64 {
    text.lines()
        .find(|l| l.contains("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(3))
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

/// Whether this test runs as root.
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

pub fn sysfs_nodes() -> Vec<u32> {
    let online = std::fs::read_to_string("/sys/devices/system/node/online").unwrap();
    let set: numalab::NodeSet = online.trim().parse().unwrap();
    set.iter().collect()
}

pub fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// A scratch directory removed at the end of the test.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("numalab-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    pub fn path(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_owned()
    }
    pub fn files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn small() -> String {
    examples()
        .join("deck-exp1-small.toml")
        .to_str()
        .unwrap()
        .to_owned()
}

/// Sends SIGINT to `child`, as Ctrl-C would, and waits for it to end.
pub fn ctrl_c(child: std::process::Child) -> std::process::Output {
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    child.wait_with_output().unwrap()
}

pub fn sysfs_list(path: &str) -> Vec<u32> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    if text.trim().is_empty() {
        return Vec::new();
    }
    let set: numalab::NodeSet = text.trim().parse().unwrap();
    set.iter().collect()
}

/// Nodes with CPUs and nodes with memory, as the kernel lists them.
pub fn sysfs_roles() -> (Vec<u32>, Vec<u32>) {
    let with_cpus = sysfs_nodes()
        .into_iter()
        .filter(|n| !sysfs_list(&format!("/sys/devices/system/node/node{n}/cpulist")).is_empty())
        .collect();
    (with_cpus, sysfs_list("/sys/devices/system/node/has_memory"))
}

/// The CPU time (clock ticks) of each worker thread of numalab `pid`:
/// every thread but its main one and its signal watcher
/// (`numalab-signals`); `None` once it has ended.
fn workers_cpu(pid: u32) -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    if stat
        .rsplit_once(')')
        .is_none_or(|(_, rest)| rest.trim_start().starts_with('Z'))
    {
        return None;
    }
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    Some(
        tasks
            .filter_map(|t| t.ok())
            .filter(|t| t.file_name().to_str() != Some(&pid.to_string()))
            .filter(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|c| c.trim() != "numalab-signals")
            })
            .map(|t| {
                // utime and stime: fields 14 and 15, the 12th and 13th
                // after the command's closing parenthesis.
                let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
                stat.rsplit_once(')').map_or(0, |(_, rest)| {
                    rest.split_whitespace()
                        .skip(11)
                        .take(2)
                        .filter_map(|f| f.parse::<u64>().ok())
                        .sum()
                })
            })
            .collect(),
    )
}

/// Waits until the worker threads of numalab `pid` have run `cpu` of CPU
/// time together, or it ended: a sure sign they have measured something,
/// on an idle host or a busy one, where a pause of wall time is not.
pub fn wait_for_worker_cpu(pid: u32, cpu: std::time::Duration) {
    // Clock ticks of CPU time (USER_HZ is 100 on Linux).
    let wanted = (cpu.as_millis() / 10) as u64;
    // None: it ended, and the caller's assertions say how.
    while workers_cpu(pid).is_some_and(|w| w.iter().sum::<u64>() < wanted) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Waits until numalab `pid` runs a thread named `name`, or it ended.
pub fn wait_for_thread(pid: u32, name: &str) {
    let runs = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .filter_map(|t| t.ok())
            .any(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
    };
    while workers_cpu(pid).is_some() && !runs() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Waits until numalab `pid` runs a worker thread, or it ended.
pub fn wait_for_worker(pid: u32) {
    while workers_cpu(pid).is_some_and(|w| w.is_empty()) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

pub use numalab::testing::cannot_check;
